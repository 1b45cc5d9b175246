//! Adoption of a PostgreSQL table other code filled, on every PostgreSQL server under test: rows
//! under legacy ids, orphans and rows without an `_id` move to their derived ids and become
//! idem's; rows that cannot move are reported and left as they were; a second run has nothing
//! left to do; a row edited during its move is moved as edited; and idem writers racing the
//! adoption never fork or lose a document.

use std::sync::Arc;

use idem_core::postgres::Store;
use idem_core::{ErrorKind, Outcome};
use idem_tests::backends::{adopt_during_an_edit, fresh_schema, postgres_client, postgres_servers};
use idem_tests::fixtures::{ingested_post as post, IngestedPost as Post};

/// A fresh schema on the server at `uri`, named after `test`, with idem's table for posts, and
/// a client on it.
async fn fresh_table(test: &str, uri: &str) -> (String, tokio_postgres::Client) {
    let (schema, client) = fresh_schema(uri, "pd", test).await;
    Store::new().ensure_table::<Post, _>(&client).await.unwrap();
    (schema, client)
}

/// Inserts a row as another tool would: under `id` (`None`: NULL), without idem's hash or
/// digests; a `None` title is a NULL the type cannot read.
async fn insert(
    client: &tokio_postgres::Client,
    id: Option<&str>,
    stored: &Post,
    title: Option<&str>,
) {
    client
        .execute(
            r#"INSERT INTO posts ("_id", slug, lang, "publishedAt", title, "fetchedAt")
               VALUES ($1, $2, $3, $4, $5, $6)"#,
            &[
                &id,
                &stored.slug,
                &stored.lang,
                &stored.published_at,
                &title,
                &stored.fetched_at,
            ],
        )
        .await
        .unwrap();
}

/// Every row's id, slug and title, in slug order.
async fn rows(client: &tokio_postgres::Client) -> Vec<(String, String, Option<String>)> {
    client
        .query(r#"SELECT "_id", slug, title FROM posts ORDER BY slug"#, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

fn id_of(post: &Post) -> String {
    post.id().unwrap().to_string()
}

/// Legacy ids and an orphan move to their derived ids with idem's hash, so the audit finds
/// nothing and an upsert of the same content is `Unchanged`. A row that does not read as its
/// type, and a row whose derived id that row holds, are reported with their reasons and left
/// as they were. A second run moves nothing.
#[tokio::test]
async fn legacy_rows_and_orphans_move_to_their_derived_ids_and_the_rest_is_reported() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_table("kinds", &uri).await;
        let store = Store::new();
        let legacy = post("legacy", "Legacy");
        insert(&client, Some("legacy-1"), &legacy, Some("Legacy")).await;
        let other = post("other", "Other");
        insert(&client, Some("legacy-2"), &other, Some("Other")).await;
        // Other code renamed the slug of a row idem wrote: its id is derived from the old slug.
        let renamed = post("renamed", "Renamed");
        insert(
            &client,
            Some(&id_of(&post("old-slug", ""))),
            &renamed,
            Some("Renamed"),
        )
        .await;
        // A NULL title: the row does not read as a post, and it holds the id `blocked` derives.
        let unreadable = post("unreadable", "");
        let blocked = post("blocked", "Blocked");
        insert(&client, Some(&id_of(&blocked)), &unreadable, None).await;
        insert(&client, Some("legacy-3"), &blocked, Some("Blocked")).await;

        let report = store.adopt::<Post, _>(&client).await.unwrap();
        assert_eq!(report.moved.count, 3, "{label}: {report}");
        let mut moved: Vec<(String, Option<String>)> = report
            .moved
            .samples
            .iter()
            .map(|sample| (sample.id.clone(), sample.derived_id.clone()))
            .collect();
        moved.sort();
        let derived = |post: &Post| Some(id_of(post));
        let mut expected = vec![
            ("legacy-1".to_owned(), derived(&legacy)),
            ("legacy-2".to_owned(), derived(&other)),
            (id_of(&post("old-slug", "")), derived(&renamed)),
        ];
        expected.sort();
        assert_eq!(moved, expected, "{label}");
        assert_eq!(report.failed.count, 2, "{label}: {report}");
        let failed: Vec<(&str, &str)> = report
            .failed
            .samples
            .iter()
            .map(|sample| (sample.id.as_str(), sample.detail.as_deref().unwrap_or("")))
            .collect();
        assert!(
            failed
                .iter()
                .any(|(id, why)| *id == id_of(&blocked)
                    && why.starts_with("does not read as its type")),
            "{label}: {failed:?}"
        );
        assert!(
            failed.iter().any(|(id, why)| *id == "legacy-3"
                && why.contains(&format!(
                    "derived id {} is held by another row",
                    id_of(&blocked)
                ))),
            "{label}: {failed:?}"
        );
        assert!(!report.is_complete(), "{label}");

        let after = rows(&client).await;
        assert_eq!(
            after,
            [
                (
                    "legacy-3".to_owned(),
                    "blocked".to_owned(),
                    Some("Blocked".to_owned())
                ),
                (
                    id_of(&legacy),
                    "legacy".to_owned(),
                    Some("Legacy".to_owned())
                ),
                (id_of(&other), "other".to_owned(), Some("Other".to_owned())),
                (
                    id_of(&renamed),
                    "renamed".to_owned(),
                    Some("Renamed".to_owned())
                ),
                (id_of(&blocked), "unreadable".to_owned(), None),
            ],
            "{label}"
        );
        // Idem's now: the hash is the content's, so the same content writes nothing.
        for moved in [&legacy, &other, &renamed] {
            assert_eq!(
                store.upsert(&client, moved).await.unwrap(),
                Outcome::Unchanged,
                "{label}: {}",
                moved.slug
            );
        }
        let audit = store.audit::<Post, _>(&client).await.unwrap();
        assert_eq!(audit.legacy_ids.count, 1, "{label}: only legacy-3: {audit}");
        // The row that does not read as a post: its id is not the one its stored key derives.
        assert_eq!(
            audit.orphans.count, 1,
            "{label}: only the unreadable row: {audit}"
        );

        let again = store.adopt::<Post, _>(&client).await.unwrap();
        assert_eq!(again.moved.count, 0, "{label}: {again}");
        assert_eq!(again.failed.count, 2, "{label}: {again}");
        assert_eq!(rows(&client).await, after, "{label}: nothing else changed");

        // Once the row holding its id reads as a post and moves, the blocked one follows.
        client
            .execute(
                "UPDATE posts SET title = 'Readable' WHERE slug = 'unreadable'",
                &[],
            )
            .await
            .unwrap();
        let last = store.adopt::<Post, _>(&client).await.unwrap();
        assert!(last.is_complete(), "{label}: {last}");
        let audit = store.audit::<Post, _>(&client).await.unwrap();
        assert_eq!(
            audit.legacy_ids.count + audit.orphans.count,
            0,
            "{label}: {audit}"
        );
    }
}

/// `writers` tasks, each on a client of its own on `schema`, upserting posts `p00`, `p01`… (`keys`
/// of them) with `store` three times over, once the caller also waits on the barrier returned:
/// each answers, for each key, the title it stored last, or `None` where every write was refused
/// with `IdChanged` (the row not moved yet). Any other answer fails the test.
pub(crate) async fn racing_writers(
    uri: &str,
    schema: &str,
    store: &Store,
    keys: usize,
    writers: usize,
) -> (
    Arc<tokio::sync::Barrier>,
    Vec<tokio::task::JoinHandle<Vec<Option<String>>>>,
) {
    let barrier = Arc::new(tokio::sync::Barrier::new(writers + 1));
    let mut spawned = Vec::new();
    for writer in 0..writers {
        let client = postgres_client(uri, schema).await;
        let (store, barrier) = (store.clone(), barrier.clone());
        spawned.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut stored: Vec<Option<String>> = vec![None; keys];
            for round in 0..3 {
                for (n, last) in stored.iter_mut().enumerate() {
                    let title = format!("w{writer} r{round}");
                    let doc = post(&format!("p{n:02}"), &title);
                    match store.upsert(&client, &doc).await {
                        Ok(Outcome::Updated) => *last = Some(title),
                        Ok(other) => panic!("writer {writer}: {other:?}"),
                        Err(error) if matches!(error.kind(), ErrorKind::IdChanged { .. }) => {}
                        Err(error) => panic!("writer {writer}: {error:?}"),
                    }
                }
            }
            stored
        }));
    }
    (barrier, spawned)
}

/// Writers upsert new titles of every key while the adoption runs: each is refused while its
/// row is not moved, as before adoption, and judged as usual once it is. At the end each key is
/// held by one row, under its derived id, holding the last title a writer stored.
#[tokio::test]
async fn writers_racing_the_adoption_never_fork_or_lose_a_document() {
    const KEYS: usize = 60;
    const WRITERS: usize = 4;
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_table("race", &uri).await;
        for n in 0..KEYS {
            let stored = post(&format!("p{n:02}"), "Legacy");
            insert(
                &client,
                Some(&format!("legacy-{n:02}")),
                &stored,
                Some("Legacy"),
            )
            .await;
        }
        let store = Store::new();
        let (barrier, writers) = racing_writers(&uri, &schema, &store, KEYS, WRITERS).await;
        barrier.wait().await;
        let report = store.adopt::<Post, _>(&client).await.unwrap();
        assert!(report.is_complete(), "{label}: {report}");
        assert_eq!(report.moved.count, KEYS as u64, "{label}: {report}");
        let mut written: Vec<Vec<Option<String>>> = Vec::new();
        for writer in writers {
            written.push(writer.await.unwrap());
        }
        let after = rows(&client).await;
        assert_eq!(after.len(), KEYS, "{label}: one row per key");
        for (n, (id, slug, title)) in after.iter().enumerate() {
            let expected = post(slug, "");
            assert_eq!(
                *id,
                id_of(&expected),
                "{label}: {slug} under its derived id"
            );
            // The stored title is one a writer stored last for this key, or the legacy one if
            // no writer got through.
            let candidates: Vec<&String> = written.iter().filter_map(|w| w[n].as_ref()).collect();
            let title = title.clone().unwrap_or_default();
            if candidates.is_empty() {
                assert_eq!(title, "Legacy", "{label}: {slug}");
            } else {
                assert!(
                    candidates.iter().any(|c| **c == title),
                    "{label}: {slug} holds {title:?}, writers stored last {candidates:?}"
                );
            }
        }
    }
}

/// An `_id` column a migration added to a table that had an id of its own: every row's `_id` is
/// NULL. The rows move to their derived ids, found by their physical location; one that does not
/// read as a post is reported by that location and left alone, and a second run ends too.
#[tokio::test]
async fn rows_without_an_id_move_to_their_derived_ids() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_table("no_id", &uri).await;
        client
            .batch_execute(
                r#"ALTER TABLE posts DROP CONSTRAINT posts_pkey;
                   ALTER TABLE posts ALTER COLUMN "_id" DROP NOT NULL;
                   ALTER TABLE posts ADD CONSTRAINT posts_id_unique UNIQUE ("_id")"#,
            )
            .await
            .unwrap();
        let first = post("first", "First");
        let second = post("second", "Second");
        for stored in [&first, &second] {
            insert(&client, None, stored, Some(&stored.title)).await;
        }
        insert(&client, None, &post("unreadable", ""), None).await;
        let store = Store::new();

        let report = store.adopt::<Post, _>(&client).await.unwrap();
        assert_eq!(report.moved.count, 2, "{label}: {report}");
        assert!(
            report
                .moved
                .samples
                .iter()
                .all(|sample| sample.id.starts_with("(no _id, at ctid (")),
            "{label}: {report}"
        );
        assert_eq!(report.failed.count, 1, "{label}: {report}");
        assert!(
            report.failed.samples[0]
                .id
                .starts_with("(no _id, at ctid ("),
            "{label}: {report}"
        );
        let after: Vec<(Option<String>, String)> = client
            .query(r#"SELECT "_id", slug FROM posts ORDER BY slug"#, &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(
            after,
            [
                (Some(id_of(&first)), "first".to_owned()),
                (Some(id_of(&second)), "second".to_owned()),
                (None, "unreadable".to_owned()),
            ],
            "{label}"
        );
        let again = store.adopt::<Post, _>(&client).await.unwrap();
        assert_eq!(
            (again.moved.count, again.failed.count),
            (0, 1),
            "{label}: {again}"
        );
    }
}

/// Another tool edits a row between the adoption's read and its move: the move, waiting on the
/// edit's row lock, then finds a newer row version than it read, moves nothing, reads the row
/// again and moves it with the hash of the edited content.
#[tokio::test]
async fn a_row_edited_while_it_is_moved_is_read_again_and_moved_as_edited() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_table("edited", &uri).await;
        insert(
            &client,
            Some("legacy-1"),
            &post("legacy", "Legacy"),
            Some("Legacy"),
        )
        .await;
        let store = Store::new();
        // The move waits on the edit's row lock: only then is the edit committed.
        let edit = r#"UPDATE posts SET title = 'Edited' WHERE "_id" = 'legacy-1'"#;
        let report = adopt_during_an_edit::<Post>(&store, &client, &uri, &schema, edit).await;
        assert_eq!(report.moved.count, 1, "{label}: {report}");
        let edited = post("legacy", "Edited");
        assert_eq!(
            rows(&client).await,
            [(
                id_of(&edited),
                "legacy".to_owned(),
                Some("Edited".to_owned())
            )],
            "{label}"
        );
        assert_eq!(
            store.upsert(&client, &edited).await.unwrap(),
            Outcome::Unchanged,
            "{label}: the stored hash is the edited content's"
        );
    }
}
