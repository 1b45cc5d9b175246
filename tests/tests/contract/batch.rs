//! `upsert_many`: a batch gives each document exactly the outcome upserting them one by one, in
//! input order, gives; copies of one document share the fate of the copy that was sent; a
//! refused document is refused alone and the rest of its batch is written.

use idem_core::model::{FROZEN_DIGESTS_FIELD, VERSION_KEY_FIELD};
use idem_core::{Error, ErrorKind, Idempotent, Outcome, TimestampProblem};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{entry, post, Entry, Post};
use mongodb::bson::{doc, Document};

use crate::support::{
    assert_db_wrote_nothing, assert_stored_as_serde, forget_commands, oversized_post, scored_post,
    ScoredPost,
};

/// A batch answers each document as upserting them one by one, in order, would.
#[tokio::test]
async fn a_batch_agrees_with_single_upserts_in_input_order() {
    for db in fresh_backends("batch").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        db.upsert(&entry("a", 5, "five")).await.unwrap();
        let batch = [
            entry("a", 4, "old"),
            entry("b", 1, "new"),
            entry("a", 6, "six"),
            entry("b", 1, "new"),
            entry("a", 6, "six, again"),
            entry("c", 1, "c"),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<Outcome> = report
            .outcomes()
            .iter()
            .map(|outcome| *outcome.as_ref().unwrap())
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Stale,
                Outcome::Inserted,
                Outcome::Updated,
                Outcome::Unchanged,
                Outcome::Stale,
                Outcome::Inserted
            ],
            "{db}"
        );
        // The second b is identical to the first: not sent, it shares its fate.
        assert_eq!(report.collapsed(), 1, "{db}");
        let before = db.raw::<Entry>().await;
        let again = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            again.count(Outcome::Inserted) + again.count(Outcome::Updated),
            0,
            "{db}"
        );
        assert_eq!(
            db.raw::<Entry>().await,
            before,
            "{db}: a replayed batch writes nothing"
        );
        let texts: Vec<_> = db
            .stored::<Entry>()
            .await
            .iter()
            .map(|doc| doc["text"].clone())
            .collect();
        assert_eq!(texts.len(), 3, "{db}");
        assert!(texts.contains(&"six".into()), "{db}: {texts:?}");

        // The same documents upserted one by one, in order, in an empty store, give the same
        // outcomes and leave the same documents.
        let batched = db.stored::<Entry>().await;
        let alone = db.reset::<Entry>().await;
        alone.upsert(&entry("a", 5, "five")).await.unwrap();
        let mut one_by_one = Vec::new();
        for doc in &batch {
            one_by_one.push(alone.upsert(doc).await.unwrap());
        }
        assert_eq!(outcomes, one_by_one, "{db}");
        assert_eq!(alone.stored::<Entry>().await, batched, "{db}");
    }
}

/// A refused document (a moved timestamp, an empty key) is refused alone: the rest of its batch
/// is written.
#[tokio::test]
async fn a_refused_document_does_not_stop_the_rest_of_its_batch() {
    for db in fresh_backends("batch_refusal").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        db.upsert(&entry("moved", 1, "x")).await.unwrap();
        let moved = Entry {
            created_at: 1_600_000_000_000,
            ..entry("moved", 2, "x")
        };
        let batch = [
            entry("a", 1, "a"),
            moved,
            entry("b", 1, "b"),
            entry("", 1, ""),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                outcomes[1].as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "created_at",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[1]
        );
        assert!(
            matches!(outcomes[2], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                outcomes[3].as_ref().map_err(Error::kind),
                Err(ErrorKind::EmptyKey {
                    field: "entry_id",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[3]
        );
        assert_eq!(report.refused(), 2, "{db}");
        assert_eq!(db.stored::<Entry>().await.len(), 3, "{db}");
    }
}

/// Copies left out of a batch (identical to one sent) get the outcome of the copy that was
/// sent, a refusal included.
#[tokio::test]
async fn collapsed_copies_share_the_fate_of_the_copy_that_was_sent() {
    for db in fresh_backends("batch_collapse_fate").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        db.upsert(&entry("gone", 1, "x")).await.unwrap();
        let gone = Entry {
            deleted_at: Some(1),
            ..entry("gone", 1, "x")
        };
        db.delete(&gone).await.unwrap();
        db.upsert(&entry("moved", 1, "x")).await.unwrap();
        let moved = Entry {
            created_at: 1,
            ..entry("moved", 2, "y")
        };
        let batch = [
            entry("gone", 1, "x"),
            entry("gone", 1, "x"),
            moved.clone(),
            moved,
        ];
        let before = db.raw::<Entry>().await;
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        for (index, outcome) in outcomes.iter().enumerate().take(2) {
            assert!(
                matches!(outcome, Ok(Outcome::Deleted)),
                "{db}: {index}: {outcome:?}"
            );
        }
        for (index, outcome) in outcomes.iter().enumerate().skip(2) {
            assert!(
                matches!(
                    outcome.as_ref().map_err(Error::kind),
                    Err(ErrorKind::FrozenFieldChanged {
                        field: "created_at",
                        ..
                    })
                ),
                "{db}: {index}: {outcome:?}"
            );
        }
        assert_eq!(report.collapsed(), 2, "{db}");
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// Copies in one batch

/// The fixture post by another author: a frozen field changed, so refused once `post()` is stored.
fn post_by(author: &str) -> Post {
    Post {
        author_id: author.into(),
        ..post()
    }
}

fn retitled() -> Post {
    Post {
        title: "Hello again".into(),
        ..post()
    }
}

/// Asserts `result` is the refusal of a changed `author_id` whose incoming value is `author`'s.
fn assert_author_refused(db: &Db, result: &Result<Outcome, Error>, author: &str) {
    match result.as_ref().map_err(Error::kind) {
        Err(ErrorKind::FrozenFieldChanged {
            field,
            stored,
            incoming,
            ..
        }) => {
            assert_eq!(*field, "author_id", "{db}");
            assert!(stored.contains("ada"), "{db}: stored: {stored}");
            assert!(
                incoming.contains(author),
                "{db}: the refusal shows this document's own value {author:?}, not another \
                 copy's: incoming {incoming}"
            );
        }
        other => panic!("{db}: expected FrozenFieldChanged for `author_id`, got {other:?}"),
    }
}

/// Promise catalogue case 8: a batch gives each document exactly the outcome upserting them one
/// by one, in order, gives. A valid copy is written though a later copy is refused.
#[tokio::test]
async fn a_valid_copy_in_a_batch_is_written_though_a_later_copy_is_refused() {
    for db in fresh_backends("p8_valid_then_invalid").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        // One by one: the retitled post is Updated, then the other author is refused.
        let report = db.upsert_many(&[retitled(), post_by("bob")]).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Updated)),
            "{db}: the valid copy: {:?}",
            outcomes[0]
        );
        assert_author_refused(&db, &outcomes[1], "bob");
        assert_stored_as_serde(&db, &retitled()).await;
    }
}

/// Promise catalogue case 8: an invalid copy is refused though a later copy is valid.
#[tokio::test]
async fn an_invalid_copy_in_a_batch_is_refused_though_a_later_copy_is_valid() {
    for db in fresh_backends("p8_invalid_then_valid").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        // One by one: the other author is refused, then the retitled post is Updated.
        let report = db.upsert_many(&[post_by("bob"), retitled()]).await.unwrap();
        let outcomes = report.outcomes();
        assert_author_refused(&db, &outcomes[0], "bob");
        assert!(
            matches!(outcomes[1], Ok(Outcome::Updated)),
            "{db}: the valid copy: {:?}",
            outcomes[1]
        );
        assert_stored_as_serde(&db, &retitled()).await;
    }
}

/// Promise catalogue case 8: each refused copy shows its own value, not another copy's.
#[tokio::test]
async fn each_refused_copy_in_a_batch_shows_its_own_value() {
    for db in fresh_backends("p8_each_own_value").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let before = db.raw::<Post>().await;
        let report = db
            .upsert_many(&[post_by("bob"), post_by("carol")])
            .await
            .unwrap();
        assert_author_refused(&db, &report.outcomes()[0], "bob");
        assert_author_refused(&db, &report.outcomes()[1], "carol");
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
    }
}

/// Promise catalogue case 8: equal versions in a batch keep the first copy, as single upserts do.
#[tokio::test]
async fn equal_versions_in_a_batch_keep_the_first_copy_as_single_upserts_do() {
    for db in fresh_backends("p8_equal_versions").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        // One by one: the first is Inserted; the second, same version with other content, is
        // Stale.
        let batch = [entry("e1", 1, "first"), entry("e1", 1, "second")];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<Outcome> = report
            .outcomes()
            .iter()
            .map(|outcome| *outcome.as_ref().unwrap())
            .collect();
        assert_eq!(outcomes, [Outcome::Inserted, Outcome::Stale], "{db}");
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["text"], "first", "{db}");
    }
}

#[tokio::test]
async fn duplicate_ids_in_one_batch_get_the_outcomes_of_writing_them_one_by_one() {
    for db in fresh_backends("batch_duplicates").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        db.ensure::<ScoredPost>().await;
        forget_commands(&db);

        let batch = [
            entry("e1", 1, "one"),   // first: Inserted
            entry("e2", 1, "x"),     // alone: Inserted
            entry("e1", 3, "three"), // newer: Updated
            entry("e1", 2, "two"),   // older than what is stored by then: Stale
            entry("e1", 3, "three"), // what is stored by then: Unchanged
            entry("e2", 1, "x"),     // a copy of the previous e2: not sent, Unchanged
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<Outcome> = report
            .outcomes()
            .iter()
            .map(|o| *o.as_ref().unwrap())
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Inserted,
                Outcome::Inserted,
                Outcome::Updated,
                Outcome::Stale,
                Outcome::Unchanged,
                Outcome::Unchanged,
            ],
            "{db}"
        );
        assert_eq!(report.collapsed(), 1, "{db}");
        if let Some(log) = db.command_log() {
            let commands = log.take();
            assert_eq!(commands.documents_written, 3, "{db}");
            // `update` commands, or without update pipelines an `insert` of the new documents
            // and one pinned `update` per replacement.
            let writes = ["update", "insert"];
            assert_eq!(
                commands
                    .names
                    .iter()
                    .filter(|n| writes.contains(&n.as_str()))
                    .count(),
                2,
                "{db}: one write command per round that writes: {:?}",
                commands.names
            );
        }
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 2, "{db}");
        let e1 = stored
            .iter()
            .find(|d| d["entryId"] == "e1")
            .unwrap_or_else(|| panic!("{db}: no e1: {stored:?}"));
        assert_eq!(e1["revision"], 3, "{db}");
        assert_eq!(e1["text"], "three", "{db}");

        // Replaying the whole batch writes nothing.
        let before = db.raw::<Entry>().await;
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(report.count(Outcome::Unchanged), 4, "{db}: {report}");
        assert_eq!(report.count(Outcome::Stale), 2, "{db}: {report}");
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");

        // Without versions, each copy replaces the one before it, as one by one: the last stays.
        let report = db
            .upsert_many(&[
                ScoredPost {
                    title: "first".into(),
                    ..scored_post("p")
                },
                ScoredPost {
                    title: "last".into(),
                    ..scored_post("p")
                },
            ])
            .await
            .unwrap();
        assert!(
            matches!(
                report.outcomes(),
                [Ok(Outcome::Inserted), Ok(Outcome::Updated)]
            ),
            "{db}: {:?}",
            report.outcomes()
        );
        let posts = db.stored::<ScoredPost>().await;
        assert_eq!(posts.len(), 1, "{db}");
        assert_eq!(posts[0]["title"], "last", "{db}");
    }
}

/// Each kind of refusal inside one batch, beside documents that are written. On MongoDB the
/// batch also carries a document over the 16 MiB BSON limit, which PostgreSQL does not have.
#[tokio::test]
async fn a_refused_document_inside_a_batch_does_not_stop_the_others() {
    for db in fresh_backends("batch_refusals").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        let kept = scored_post("kept");
        let other = scored_post("other");
        db.upsert(&kept).await.unwrap();
        db.upsert(&other).await.unwrap();
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);

        let mut batch = vec![
            scored_post("a"),
            ScoredPost {
                published_at: -1,
                ..scored_post("early")
            },
            scored_post(""),
            ScoredPost {
                author_id: "eve".into(),
                ..kept.clone()
            },
        ];
        // MongoDB's documents are at most 16 MiB; a SQL row holds this one.
        let oversized = !db.is_sql();
        if oversized {
            batch.push(oversized_post("big"));
        }
        batch.extend([other.clone(), scored_post("b")]);
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                outcomes[1].as_ref().map_err(Error::kind),
                Err(ErrorKind::TimestampOutOfRange {
                    problem: TimestampProblem::BeforeUnixEpoch,
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[1]
        );
        assert!(
            matches!(
                outcomes[2].as_ref().map_err(Error::kind),
                Err(ErrorKind::EmptyKey { field: "slug", .. })
            ),
            "{db}: {:?}",
            outcomes[2]
        );
        assert!(
            matches!(
                outcomes[3].as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "author_id",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[3]
        );
        if oversized {
            assert!(
                matches!(
                    outcomes[4].as_ref().map_err(Error::kind),
                    Err(ErrorKind::DocumentTooLarge { .. })
                ),
                "{db}: {:?}",
                outcomes[4]
            );
        }
        let last = outcomes.len() - 1;
        assert!(
            matches!(outcomes[last - 1], Ok(Outcome::Unchanged)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(outcomes[last], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert_eq!(report.refused(), 3 + usize::from(oversized), "{db}");
        if let Some(log) = db.command_log() {
            assert_eq!(log.take().documents_written, 2, "{db}");
        }

        // The two new documents are stored; the two that were stored are intact.
        let mut slugs: Vec<String> = db
            .stored::<ScoredPost>()
            .await
            .iter()
            .map(|d| d["slug"].as_str().unwrap_or_default().to_owned())
            .collect();
        slugs.sort_unstable();
        assert_eq!(slugs, ["a", "b", "kept", "other"], "{db}");
        let after = db.raw::<ScoredPost>().await;
        for untouched in &before {
            assert!(
                after.contains(untouched),
                "{db}: a stored document changed: {untouched} is gone from {after:?}"
            );
        }
    }
}

/// Each outcome as text: the outcome's name, or the refusal's message.
fn shown(outcomes: &[Result<Outcome, Error>]) -> Vec<String> {
    outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => error.to_string(),
        })
        .collect()
}

/// A batch sent both ways: with `upsert_many`, and a document at a time.
struct BothWays {
    /// The batch's outcomes, shown.
    batch: Vec<String>,
    /// The single upserts' outcomes, shown.
    one_by_one: Vec<String>,
    /// The rows the batch left.
    stored_by_batch: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Where the single upserts wrote.
    single: Db,
}

/// The batch `meet` makes (storing first what it is to meet) sent with `upsert_many` on
/// `chunked`, then made again on a fresh table of `db`'s and sent a document at a time.
async fn batch_and_one_by_one<T>(
    chunked: &Db,
    db: &Db,
    meet: impl AsyncFn(&Db) -> Vec<T>,
) -> BothWays
where
    T: idem_core::Idempotent + serde::Serialize + Sync,
{
    let batch = meet(chunked).await;
    let outcomes = shown(chunked.upsert_many(&batch).await.unwrap().outcomes());
    // Read before the reset below, which clears the table both write.
    let stored_by_batch = chunked.stored::<T>().await;
    let single = db.reset::<T>().await;
    let batch = meet(&single).await;
    let mut one_by_one = Vec::new();
    for doc in &batch {
        one_by_one.push(single.upsert(doc).await);
    }
    BothWays {
        batch: outcomes,
        one_by_one: shown(&one_by_one),
        stored_by_batch,
        single,
    }
}

impl BothWays {
    /// Fails unless the batch answered as the single upserts did and left the rows they left.
    async fn assert_agree<T: idem_core::Idempotent>(&self, db: &Db) {
        assert_eq!(self.batch, self.one_by_one, "{db}");
        assert_eq!(
            self.stored_by_batch,
            self.single.stored::<T>().await,
            "{db}: the batch stores what single upserts store"
        );
    }
}

/// How many of the outcomes `shown` show as `name`.
fn count_shown(shown: &[String], name: &str) -> usize {
    shown.iter().filter(|shown| *shown == name).count()
}

/// `slug`'s post with the fixture's other fields.
fn post_at(slug: &str) -> Post {
    Post {
        slug: slug.into(),
        ..post()
    }
}

/// 140 posts stored by idem (five of them then rewritten by another tool, one with its key
/// edited behind idem's back), and the batch that re-ingests them: most unchanged, some
/// edited, some with a frozen field changed, ten new, and two copies at the end.
async fn stored_posts_and_their_reingest(db: &Db) -> Vec<Post> {
    db.ensure::<Post>().await;
    let stored: Vec<Post> = (0..140).map(|n| post_at(&format!("p{n:03}"))).collect();
    db.upsert_many(&stored).await.unwrap();
    for doc in &stored[100..105] {
        db.write_as_another_tool(doc).await;
    }
    db.run_raw(
        &format!(
            "UPDATE {} SET {slug} = 'p110-edited' WHERE {slug} = 'p110'",
            db.quote("posts"),
            slug = db.quote("slug")
        ),
        mongodb::bson::doc! {
            "update": "posts",
            "updates": [{ "q": { "slug": "p110" }, "u": { "$set": { "slug": "p110-edited" } } }],
        },
    )
    .await;
    let mut batch = stored;
    for doc in &mut batch[120..125] {
        doc.title = "Edited".into();
    }
    for doc in &mut batch[125..128] {
        doc.author_id = "grace".into();
    }
    batch.extend((140..150).map(|n| post_at(&format!("p{n:03}"))));
    batch.push(post_at("p005"));
    batch.push(Post {
        title: "Second copy".into(),
        ..post_at("p006")
    });
    batch
}

/// 100 entries stored at revision 2 (ten of them deleted), and their re-ingest: most the same,
/// some older, some at the same revision with other text, deleted ones sent live or deleted,
/// some newer, and ten new.
async fn stored_entries_and_their_reingest(db: &Db) -> Vec<Entry> {
    db.ensure::<Entry>().await;
    let stored: Vec<Entry> = (0..100)
        .map(|n| entry(&format!("e{n:03}"), 2, "text"))
        .collect();
    db.upsert_many(&stored).await.unwrap();
    for doc in &stored[75..85] {
        db.delete(&Entry {
            deleted_at: Some(1_700_000_500_000),
            ..doc.clone()
        })
        .await
        .unwrap();
    }
    let mut batch = stored;
    for doc in &mut batch[60..70] {
        doc.revision = 1;
        doc.text = "older".into();
    }
    for doc in &mut batch[70..75] {
        doc.text = "same revision, other text".into();
    }
    for doc in &mut batch[80..85] {
        doc.deleted_at = Some(1_700_000_500_000);
    }
    for doc in &mut batch[85..90] {
        doc.revision = 3;
        doc.text = "newer".into();
    }
    batch.extend((100..110).map(|n| entry(&format!("e{n:03}"), 1, "new")));
    batch
}

/// A re-ingest of many stored rows, each in another state (unchanged, edited, refused, stored
/// by another tool, a key edited behind idem's back, deleted, older, newer, new, copies), sent
/// in chunks of 64: every row gets what a single upsert of it gives. On PostgreSQL such chunks
/// are first looked up by id, key and hashes alone, and only the rows not stored unchanged are
/// sent whole; that shortcut must answer as the full statement does.
#[tokio::test]
async fn a_reingest_of_rows_in_every_stored_state_agrees_with_single_upserts() {
    for db in fresh_backends("reingest_states").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, stored_posts_and_their_reingest).await;
        let whole = both.batch;
        assert_eq!(whole, both.one_by_one, "{db}: posts");
        assert!(
            whole[110].contains("`slug` may not change"),
            "{db}: the post whose key was edited behind idem's back is refused for its key: {}",
            whole[110]
        );
        assert_eq!(
            count_shown(&whole, "Unchanged"),
            // The unchanged posts, and the first copy of p005 once the batch wrote it.
            140 - 5 - 1 - 5 - 3 + 1,
            "{db}: {whole:?}"
        );

        let both = batch_and_one_by_one(&chunked, &db, stored_entries_and_their_reingest).await;
        let whole = both.batch;
        assert_eq!(whole, both.one_by_one, "{db}: entries");
        let count = |name: &str| count_shown(&whole, name);
        assert_eq!(
            (
                count("Unchanged"),
                count("Stale"),
                count("Deleted"),
                count("Updated"),
                count("Inserted")
            ),
            (70, 15, 10, 5, 10),
            "{db}: {whole:?}"
        );
    }
}

/// Sets idem's own `field` of the stored row of `T` whose `key` field holds `to` to what the row
/// whose `key` holds `from` stores there: a write behind idem's back that leaves the row's
/// content and content hash as they were.
pub(crate) async fn copy_own_field<T: Idempotent>(
    db: &Db,
    field: &str,
    key: &str,
    from: &str,
    to: &str,
) {
    let collection = T::MODEL.collection();
    match db {
        Db::Mongo { store, .. } => {
            let documents = store.database().collection::<Document>(collection);
            let source = documents
                .find_one(doc! { key: from })
                .await
                .unwrap_or_else(|error| panic!("{db}: reading {from}: {error}"))
                .unwrap_or_else(|| panic!("{db}: {from} is stored"));
            let value = source
                .get(field)
                .unwrap_or_else(|| panic!("{db}: {from} holds {field}"))
                .clone();
            documents
                .update_one(doc! { key: to }, doc! { "$set": { field: value } })
                .await
                .unwrap_or_else(|error| panic!("{db}: writing {to}: {error}"));
        }
        Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. } => {
            let (collection, field, key) = (db.quote(collection), db.quote(field), db.quote(key));
            let sql = format!(
                "UPDATE {collection} SET {field} = (SELECT {field} FROM {collection} \
                 WHERE {key} = '{from}') WHERE {key} = '{to}'"
            );
            db.run_raw(&sql, doc! {}).await;
        }
    }
}

/// 128 posts stored, the second half by another author; then one post of each chunk of 64 given
/// the guard digests of a post by the other author behind idem's back (its content and content
/// hash as they were); and their re-ingest, unchanged.
pub(crate) async fn posts_whose_digests_were_changed_behind_idems_back(db: &Db) -> Vec<Post> {
    let slug = |n: usize| format!("p{n:03}");
    let posts = (0..128)
        .map(|n| Post {
            author_id: if n < 64 { "ada" } else { "grace" }.into(),
            ..post_at(&slug(n))
        })
        .collect();
    stored_then_given_the_other_halfs(db, posts, FROZEN_DIGESTS_FIELD, "slug", slug).await
}

/// Stores `docs` (128, whose halves differ in what idem keeps in its own `field`), then gives
/// documents 10 and 70 (one in each chunk of 64) what documents 100 and 20 hold there, behind
/// idem's back; `name(n)` is document `n`'s `key` field. Returns `docs`, to be sent again.
async fn stored_then_given_the_other_halfs<T: Idempotent + serde::Serialize + Sync>(
    db: &Db,
    docs: Vec<T>,
    field: &str,
    key: &str,
    name: impl Fn(usize) -> String,
) -> Vec<T> {
    db.ensure::<T>().await;
    db.upsert_many(&docs).await.unwrap();
    for (from, to) in [(100, 10), (20, 70)] {
        copy_own_field::<T>(db, field, key, &name(from), &name(to)).await;
    }
    docs
}

/// 128 entries stored, the second half at a later revision; then one entry of each chunk of 64
/// given the version key of an entry at the other revision behind idem's back (its content and
/// content hash as they were); and their re-ingest, unchanged.
async fn entries_whose_version_keys_were_changed_behind_idems_back(db: &Db) -> Vec<Entry> {
    let name = |n: usize| format!("e{n:03}");
    let entries = (0..128)
        .map(|n| entry(&name(n), if n < 64 { 2 } else { 5 }, "text"))
        .collect();
    stored_then_given_the_other_halfs(db, entries, VERSION_KEY_FIELD, "entryId", name).await
}

/// A draft with versions and nothing guarded: its rows hold a version key and no digests.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "drafts")]
struct Draft {
    #[idem(key)]
    name: String,
    #[idem(version)]
    revision: i64,
    text: String,
}

/// 128 drafts stored, the second half at a later revision; then one draft of each chunk of 64
/// given the version key of a draft at the other revision behind idem's back; and their
/// re-ingest, unchanged.
async fn drafts_whose_version_keys_were_changed_behind_idems_back(db: &Db) -> Vec<Draft> {
    let name = |n: usize| format!("d{n:03}");
    let drafts = (0..128)
        .map(|n| Draft {
            name: name(n),
            revision: if n < 64 { 2 } else { 5 },
            text: "text".into(),
        })
        .collect();
    stored_then_given_the_other_halfs(db, drafts, VERSION_KEY_FIELD, "name", name).await
}

/// A re-ingest of rows whose guard digests or version key were changed behind idem's back,
/// their content and content hash left as they were, in chunks of 64: each such row gets what a
/// single upsert of it gives, and every other row is `Unchanged`. A post whose digests were
/// changed is `Unchanged` too: its content hash says its guarded values are the incoming ones,
/// so there is nothing to write; the next write that changes it is written on every store, its
/// guarded values compared as stored (they are the truth), in a second step pinned to what was
/// read. An entry or a draft is judged by the version key it now holds: a lookup that settled a
/// row from its content hash alone would call these `Unchanged`.
#[tokio::test]
async fn a_reingest_of_rows_whose_own_fields_were_changed_behind_idems_back_agrees_with_single_upserts(
) {
    for db in fresh_backends("own_fields_changed").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(
            &chunked,
            &db,
            posts_whose_digests_were_changed_behind_idems_back,
        )
        .await;
        both.assert_agree::<Post>(&db).await;
        for (at, shown) in both.batch.iter().enumerate() {
            assert_eq!(shown, "Unchanged", "{db}: post {at}");
        }
        // Edited, every post is written, the two whose digests are not their values' too.
        let edited: Vec<Post> = posts_whose_digests_were_changed_behind_idems_back(&chunked)
            .await
            .into_iter()
            .map(|post| Post {
                body: format!("{} (edited)", post.body),
                ..post
            })
            .collect();
        let report = chunked.upsert_many(&edited).await.unwrap();
        for (at, shown) in shown(report.outcomes()).iter().enumerate() {
            assert_eq!(shown, "Updated", "{db}: edited post {at}");
        }
        for (at, post) in chunked.stored::<Post>().await.iter().enumerate() {
            let body = post
                .get("body")
                .and_then(|body| body.as_str())
                .unwrap_or_default();
            assert!(
                body.ends_with("(edited)"),
                "{db}: stored post {at}: {post:?}"
            );
        }

        let both = batch_and_one_by_one(
            &chunked,
            &db,
            entries_whose_version_keys_were_changed_behind_idems_back,
        )
        .await;
        both.assert_agree::<Entry>(&db).await;
        assert_judged_by_their_version_keys(&db, "entry", &both.batch);

        // The same with nothing guarded: the lookup compares the version key with the hash.
        let both = batch_and_one_by_one(
            &chunked,
            &db,
            drafts_whose_version_keys_were_changed_behind_idems_back,
        )
        .await;
        both.assert_agree::<Draft>(&db).await;
        assert_judged_by_their_version_keys(&db, "draft", &both.batch);
    }
}

/// Checks the outcomes of a re-ingest whose rows 10 and 70 were given the version key of a later
/// and of an earlier revision behind idem's back, every other row unchanged.
fn assert_judged_by_their_version_keys(db: &Db, what: &str, shown: &[String]) {
    for (at, shown) in shown.iter().enumerate() {
        let expected = match at {
            // Its version key now says the later revision: the replay is older.
            10 => "Stale",
            // Its version key now says the earlier revision: the replay rewrites it.
            70 => "Updated",
            _ => "Unchanged",
        };
        assert_eq!(shown, expected, "{db}: {what} {at}");
    }
}

/// 64 entries stored, the first twenty then deleted, and their re-ingest in one chunk (the one
/// a batch always looks up first): ten of the deleted sent live as they were stored, ten sent
/// deleted as they are stored, the rest unchanged.
async fn deleted_entries_and_their_reingest(db: &Db) -> Vec<Entry> {
    db.ensure::<Entry>().await;
    let stored: Vec<Entry> = (0..64)
        .map(|n| entry(&format!("e{n:03}"), 2, "text"))
        .collect();
    db.upsert_many(&stored).await.unwrap();
    let deleted = |doc: &Entry| Entry {
        deleted_at: Some(1_700_000_500_000),
        ..doc.clone()
    };
    for doc in &stored[..20] {
        db.delete(&deleted(doc)).await.unwrap();
    }
    let mut batch = stored;
    for doc in &mut batch[10..20] {
        *doc = deleted(doc);
    }
    batch
}

/// A deleted row holds the content hash and version of the document it was, which is not
/// left out of the write as stored unchanged: sent live or deleted, it stays deleted, in a
/// batch as in single upserts, also where the batch looks it up first.
#[tokio::test]
async fn a_lookup_that_meets_deleted_rows_leaves_them_deleted() {
    for db in fresh_backends("reingest_deleted").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, deleted_entries_and_their_reingest).await;
        both.assert_agree::<Entry>(&db).await;
        let count = |name: &str| count_shown(&both.batch, name);
        assert_eq!(
            (count("Deleted"), count("Unchanged")),
            (20, 44),
            "{db}: {:?}",
            both.batch
        );
    }
}

/// A document whose natural key is an integer (under another name) and a boolean, with a
/// frozen field serde omits while it is `None`, a frozen map, and a float.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, idem_core::Idempotent)]
#[idem(collection = "tickets")]
#[serde(rename_all = "PascalCase")]
struct Ticket {
    #[idem(key)]
    #[serde(rename = "no")]
    number: i64,
    #[idem(key)]
    open: bool,
    #[idem(frozen)]
    #[serde(skip_serializing_if = "Option::is_none")]
    assignee: Option<String>,
    #[idem(frozen)]
    labels: std::collections::BTreeMap<String, i64>,
    status: String,
    score: f64,
    #[idem(volatile)]
    polled_at: i64,
}

/// Ticket `number`, open, unassigned, labelled by its parity.
fn ticket(number: i64) -> Ticket {
    Ticket {
        number,
        open: number % 3 != 0,
        assignee: None,
        labels: [(format!("p{}", number % 2), number)].into(),
        status: "new".into(),
        score: number as f64 / 4.0,
        polled_at: number,
    }
}

/// 130 tickets stored (the first ten assigned), and their re-ingest: most unchanged but polled
/// again, some with another status or score, some assigned for the first time (a frozen field
/// written once), some reassigned or relabelled (refused), some closed (another natural key:
/// new under another id), and ten new.
async fn stored_tickets_and_their_reingest(db: &Db) -> Vec<Ticket> {
    db.ensure::<Ticket>().await;
    let stored: Vec<Ticket> = (0..130)
        .map(|number| Ticket {
            assignee: (number < 10).then(|| "ada".to_owned()),
            ..ticket(number)
        })
        .collect();
    db.upsert_many(&stored).await.unwrap();
    let mut batch = stored;
    for doc in &mut batch {
        doc.polled_at += 1_000;
    }
    for doc in &mut batch[20..25] {
        doc.status = "triaged".into();
    }
    for doc in &mut batch[25..30] {
        doc.score = -0.0 - doc.score - 0.5;
    }
    for doc in &mut batch[70..75] {
        doc.assignee = Some("grace".into());
    }
    for doc in &mut batch[0..3] {
        doc.assignee = Some("grace".into());
    }
    for doc in &mut batch[75..78] {
        doc.labels.insert("extra".into(), 1);
    }
    for doc in &mut batch[100..105] {
        doc.open = !doc.open;
    }
    batch.extend((130..140).map(ticket));
    batch
}

/// The lookup before a chunk's write matches keys of every kind as the write does: a batch of
/// documents with an integer and a boolean natural key, a frozen field absent until it is set
/// and a frozen map, re-ingested in chunks of 64, answers each as single upserts do.
#[tokio::test]
async fn a_reingest_with_integer_and_boolean_keys_agrees_with_single_upserts() {
    for db in fresh_backends("reingest_tickets").await {
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, stored_tickets_and_their_reingest).await;
        both.assert_agree::<Ticket>(&db).await;
        let count = |name: &str| count_shown(&both.batch, name);
        assert_eq!(
            (count("Unchanged"), count("Updated"), count("Inserted")),
            // Closed or reopened, a ticket is another natural key, so another id: inserted.
            (130 - 10 - 5 - 3 - 3 - 5, 10 + 5, 5 + 10),
            "{db}: {:?}",
            both.batch
        );
    }
}

/// A first ingest, sent in chunks of 64, that meets ten posts stored before it (one rewritten
/// by another tool, one with its key edited behind idem's back, one edited in the batch, one
/// with a frozen field changed), between chunks of new posts.
async fn fresh_posts_meeting_stored(db: &Db) -> Vec<Post> {
    db.ensure::<Post>().await;
    let stored: Vec<Post> = (200..210).map(|n| post_at(&format!("p{n:03}"))).collect();
    db.upsert_many(&stored).await.unwrap();
    db.write_as_another_tool(&stored[0]).await;
    db.run_raw(
        &format!(
            "UPDATE {} SET {slug} = 'p201-edited' WHERE {slug} = 'p201'",
            db.quote("posts"),
            slug = db.quote("slug")
        ),
        mongodb::bson::doc! {
            "update": "posts",
            "updates": [{ "q": { "slug": "p201" }, "u": { "$set": { "slug": "p201-edited" } } }],
        },
    )
    .await;
    let new = |n: usize| post_at(&format!("p{n:03}"));
    let mut batch: Vec<Post> = (0..128).map(new).collect();
    batch.extend((128..182).map(new));
    batch.extend(stored.iter().cloned());
    batch[182 + 2].title = "Edited".into();
    batch[182 + 3].author_id = "grace".into();
    batch.extend((300..364).map(new));
    batch
}

/// Once a chunk of a first ingest was inserted whole, the next goes as a plain insert of fresh
/// rows, which a stored row's id or natural key makes fail whole; its rows then go the guarded
/// way. Every row gets what a single upsert of it gives: the chunks of new rows, the chunk that
/// meets stored rows, and the new chunk after it.
#[tokio::test]
async fn a_first_ingest_that_meets_stored_rows_agrees_with_single_upserts() {
    for db in fresh_backends("fresh_chunks").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, fresh_posts_meeting_stored).await;
        let (whole, stored, single) = (both.batch, both.stored_by_batch, both.single);
        assert_eq!(whole, both.one_by_one, "{db}");
        assert_eq!(
            stored.len(),
            10 + 128 + 54 + 64,
            "{db}: every new post is stored"
        );
        assert_eq!(
            stored,
            single.stored::<Post>().await,
            "{db}: the same posts are stored"
        );
        let count = |name: &str| count_shown(&whole, name);
        assert_eq!(
            (count("Inserted"), count("Unchanged"), count("Updated")),
            (128 + 54 + 64, 6, 2),
            "{db}: {whole:?}"
        );
        assert!(
            whole[183].contains("`slug` may not change"),
            "{db}: {}",
            whole[183]
        );
        assert!(whole[185].contains("author_id"), "{db}: {}", whole[185]);
    }
}

/// A card: a nickname serde leaves out when unset, a float that may be NaN, a frozen issuer,
/// and free-form fields flattened in (lists with nulls among them).
#[derive(Debug, Clone, serde::Serialize, idem_core::Idempotent)]
#[idem(collection = "cards")]
#[serde(rename_all = "camelCase")]
struct Card {
    #[idem(key)]
    code: String,
    #[idem(frozen)]
    issuer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    nickname: Option<String>,
    score: f64,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, serde_json::Value>,
}

fn card(n: usize) -> Card {
    let extra = match n % 2 {
        0 => [
            (
                "tags".to_owned(),
                serde_json::json!([n, null, "x", { "deep": null }]),
            ),
            ("n".to_owned(), serde_json::json!(n)),
        ]
        .into(),
        _ => Default::default(),
    };
    Card {
        code: format!("c{n:03}"),
        issuer: "bank".into(),
        nickname: n.is_multiple_of(3).then(|| format!("card {n}")),
        score: if n.is_multiple_of(7) {
            f64::NAN
        } else {
            n as f64 / 4.0
        },
        extra,
    }
}

/// `batches` sent one after the other with `upsert_many` in chunks of 64, against the same
/// documents upserted one by one on a fresh table: the same outcomes, and the same rows stored.
async fn batches_agree_with_single_upserts<T>(db: &Db, name: &str, batches: &[Vec<T>])
where
    T: idem_core::Idempotent + serde::Serialize + Sync,
{
    let chunked = db.with_batch_chunk(64).await;
    chunked.ensure::<T>().await;
    let mut whole = Vec::new();
    for batch in batches {
        whole.push(shown(chunked.upsert_many(batch).await.unwrap().outcomes()));
    }
    let stored = chunked.stored::<T>().await;
    let single = db.reset::<T>().await;
    single.ensure::<T>().await;
    let mut one_by_one = Vec::new();
    for batch in batches {
        let mut outcomes = Vec::new();
        for doc in batch {
            outcomes.push(single.upsert(doc).await);
        }
        one_by_one.push(shown(&outcomes));
    }
    assert_eq!(whole, one_by_one, "{db}: {name}");
    assert_eq!(
        stored,
        single.stored::<T>().await,
        "{db}: {name}: the same rows stored"
    );
}

/// The large-batch shortcuts (the lookup, the encoding without JSON, the plain insert of fresh
/// chunks) on shapes they were not written for: fields serde leaves out, NaN, flattened maps
/// holding lists with nulls, a frozen field changed; a version and a deletion marker, rows sent
/// deleted on their first write, older and newer revisions. A first ingest then a re-ingest,
/// each against single upserts.
#[tokio::test]
async fn large_batches_of_every_shape_agree_with_single_upserts() {
    for db in fresh_backends("large_shapes").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let first: Vec<Card> = (0..130).map(card).collect();
        let mut again: Vec<Card> = (0..200).map(card).collect();
        for doc in &mut again[100..110] {
            doc.nickname = Some("renamed".into());
        }
        for doc in &mut again[110..115] {
            doc.issuer = "another bank".into();
        }
        for doc in &mut again[115..120] {
            doc.extra.clear();
        }
        batches_agree_with_single_upserts(&db, "cards", &[first, again]).await;

        let first: Vec<Entry> = (0..130usize)
            .map(|n| Entry {
                deleted_at: n.is_multiple_of(10).then_some(1_700_000_500_000),
                ..entry(&format!("e{n:03}"), 2, "text")
            })
            .collect();
        let mut again = first.clone();
        for doc in &mut again[20..40] {
            doc.revision = 1;
        }
        for doc in &mut again[40..60] {
            doc.revision = 3;
            doc.text = "newer".into();
        }
        for doc in &mut again[60..70] {
            doc.deleted_at = Some(1_700_000_600_000);
        }
        again.extend((130..200).map(|n| entry(&format!("e{n:03}"), 1, "new")));
        batches_agree_with_single_upserts(&db, "entries", &[first, again]).await;
    }
}

/// Ids that come back later in a large batch, with other content, across chunks of 64: the
/// later documents go in later rounds, after every chunk of the first, from whichever chunk they
/// were prepared in (the first, a middle one, the last); each agrees with single upserts.
#[tokio::test]
async fn ids_repeated_across_chunks_of_a_large_batch_agree_with_single_upserts() {
    for db in fresh_backends("repeated_ids").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let mut batch: Vec<Entry> = (0..150usize)
            .map(|n| entry(&format!("r{n:03}"), 2, "first"))
            .collect();
        // In the first chunk: a newer revision of an id of that same chunk.
        batch[40] = entry("r003", 3, "newer, same chunk");
        // In a middle chunk: an older revision of an id of the first chunk (stale), and a newer
        // one of an id of the chunk before it.
        batch[70] = entry("r010", 1, "older");
        batch[100] = entry("r065", 4, "newer, next chunk");
        // In the last chunk: a third content of an id already repeated, and a copy.
        batch.push(entry("r003", 5, "newest"));
        batch.push(entry("r065", 4, "newer, next chunk"));
        batch.push(entry("r149", 3, "newer, last chunk"));
        batches_agree_with_single_upserts(&db, "repeated entries", &[batch]).await;
    }
}

/// A document of a collection named like one of the relations a statement names itself.
trait NamedLikeARelation: idem_core::Idempotent + serde::Serialize + Sync + Clone {
    fn new(slug: &str, owner: &str, text: &str) -> Self;
}

/// Types whose collections are named like the relations idem's statements name themselves
/// (PostgreSQL's `WITH` queries), which must never stand for the table of that name.
macro_rules! named_like_a_relation {
    ($($name:ident => $collection:literal),* $(,)?) => {$(
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, idem_core::Idempotent)]
        #[idem(collection = $collection)]
        struct $name {
            #[idem(key)]
            slug: String,
            #[idem(frozen)]
            owner: String,
            text: String,
        }

        impl NamedLikeARelation for $name {
            fn new(slug: &str, owner: &str, text: &str) -> Self {
                $name {
                    slug: slug.into(),
                    owner: owner.into(),
                    text: text.into(),
                }
            }
        }
    )*};
}

named_like_a_relation! {
    Incoming => "incoming",
    IncomingKeys => "incoming_keys",
    Written => "written",
    Checked => "checked",
    HeldIds => "held_ids",
    Before => "before",
}

/// Every path of a batch and of a single upsert, on a collection named like a relation: new
/// rows (a lookup, then the plain insert of fresh rows), an unchanged re-ingest (lookups only),
/// a changed row beside one whose frozen field changed (judged from the lookup, then the
/// guarded upsert), and single upserts (the guarded upsert, whose stopped row comes back to be
/// refused).
async fn every_path_on_a_collection_named_like_a_relation<T: NamedLikeARelation>(db: &Db) {
    let collection = T::MODEL.collection();
    db.ensure::<T>().await;
    let docs: Vec<T> = (0..100)
        .map(|n| T::new(&format!("doc-{n:03}"), "ada", "first"))
        .collect();
    let first = db.upsert_many(&docs).await.unwrap();
    assert_eq!(first.count(Outcome::Inserted), 100, "{db} {collection}");
    let again = db.upsert_many(&docs).await.unwrap();
    assert_eq!(again.count(Outcome::Unchanged), 100, "{db} {collection}");
    let mut edited = docs.clone();
    edited[0] = T::new("doc-000", "ada", "edited");
    edited[1] = T::new("doc-001", "grace", "first");
    let before = db.raw::<T>().await;
    let report = db.upsert_many(&edited).await.unwrap();
    let outcomes = report.outcomes();
    assert!(
        matches!(outcomes[0], Ok(Outcome::Updated)),
        "{db} {collection}: {:?}",
        outcomes[0]
    );
    assert!(
        matches!(
            outcomes[1].as_ref().map_err(Error::kind),
            Err(ErrorKind::FrozenFieldChanged { field: "owner", .. })
        ),
        "{db} {collection}: {:?}",
        outcomes[1]
    );
    assert_eq!(report.count(Outcome::Unchanged), 98, "{db} {collection}");
    let after = db.raw::<T>().await;
    let changed = before.iter().filter(|row| !after.contains(row)).count();
    assert_eq!(
        changed, 1,
        "{db} {collection}: only the edited row is written"
    );
    let single = db.upsert(&T::new("doc-002", "grace", "first")).await;
    assert!(
        matches!(
            single.as_ref().map_err(Error::kind),
            Err(ErrorKind::FrozenFieldChanged { field: "owner", .. })
        ),
        "{db} {collection}: {single:?}"
    );
    let new = db.upsert(&T::new("doc-100", "ada", "new")).await;
    assert!(
        matches!(new, Ok(Outcome::Inserted)),
        "{db} {collection}: {new:?}"
    );
    assert_eq!(db.stored::<T>().await.len(), 101, "{db} {collection}");
}

#[tokio::test]
async fn collections_named_like_a_statements_own_relations_take_every_path() {
    for db in fresh_backends("named_like_relations").await {
        every_path_on_a_collection_named_like_a_relation::<Incoming>(&db).await;
        every_path_on_a_collection_named_like_a_relation::<IncomingKeys>(&db).await;
        every_path_on_a_collection_named_like_a_relation::<Written>(&db).await;
        every_path_on_a_collection_named_like_a_relation::<Checked>(&db).await;
        every_path_on_a_collection_named_like_a_relation::<HeldIds>(&db).await;
        every_path_on_a_collection_named_like_a_relation::<Before>(&db).await;
    }
}

/// A post whose `Serialize` takes a while (a field computed as it is written): preparing half a
/// chunk of them takes longer than the statements of the chunk before, so the engine finds
/// that chunk settled while it prepares the next, and records it from there.
#[derive(Debug, Clone, serde::Serialize, idem_core::Idempotent)]
#[idem(collection = "slow_posts")]
struct SlowPost {
    #[idem(key)]
    slug: String,
    #[idem(frozen)]
    author: String,
    title: String,
    #[serde(serialize_with = "serialize_slowly")]
    body: String,
}

fn serialize_slowly<S: serde::Serializer>(body: &str, serializer: S) -> Result<S::Ok, S::Error> {
    std::thread::sleep(std::time::Duration::from_micros(40));
    serializer.serialize_str(body)
}

fn slow_post(n: usize, title: &str) -> SlowPost {
    SlowPost {
        slug: format!("s{n:03}"),
        author: "ada".into(),
        title: title.into(),
        body: format!("body {n}"),
    }
}

/// 64 slow posts stored, then a batch of them between chunks of new ones: unchanged, edited,
/// a frozen field changed, rewritten by another tool, and copies of an id across chunks.
async fn slow_posts_and_their_batch(db: &Db) -> Vec<SlowPost> {
    db.ensure::<SlowPost>().await;
    let stored: Vec<SlowPost> = (100..164).map(|n| slow_post(n, "first")).collect();
    db.upsert_many(&stored).await.unwrap();
    db.write_as_another_tool(&stored[5]).await;
    let mut batch: Vec<SlowPost> = (0..100).map(|n| slow_post(n, "first")).collect();
    batch.extend(stored.iter().cloned());
    batch[100 + 1].title = "edited".into();
    batch[100 + 2].author = "grace".into();
    batch.extend((200..260).map(|n| slow_post(n, "first")));
    // Ids met again in later chunks: the same content, then another.
    batch.push(slow_post(3, "first"));
    batch.push(slow_post(110, "edited later"));
    batch.extend((300..340).map(|n| slow_post(n, "first")));
    batch
}

/// The chunk in flight is polled while the next slice is prepared, and settles there when its
/// statements were answered first (9 times over the seven backends of one run, counted with a
/// print in the engine's branch for it; recording nothing there fails this test). The batch,
/// in chunks of 64, gives every post what a single upsert of it gives, and stores what the
/// single upserts store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_chunks_settle_while_the_next_is_prepared_agrees_with_single_upserts() {
    for db in fresh_backends("settled_early").await {
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, slow_posts_and_their_batch).await;
        both.assert_agree::<SlowPost>(&db).await;
        let whole = both.batch;
        let count = |name: &str| count_shown(&whole, name);
        assert_eq!(
            (count("Inserted"), count("Updated"), count("Unchanged")),
            (200, 3, 62),
            "{db}: {whole:?}"
        );
        assert!(
            whole[102].contains("`author` may not change"),
            "{db}: {}",
            whole[102]
        );
    }
}

/// 140 posts stored, and two pairs of them rewritten behind idem's back so that a post's id
/// and its natural key are held by two different rows: p010's id by the row now keyed
/// `p010-moved`, its key by p011's row; p120 and p121 likewise. Their re-ingest edits the
/// first 40 titles, so that in chunks of 64 the first chunk (p010) is looked up before its
/// write and the second (p120), mostly changed before it, is written with the guard alone.
async fn posts_whose_id_and_key_are_held_apart(db: &Db) -> Vec<Post> {
    db.ensure::<Post>().await;
    let stored: Vec<Post> = (0..140).map(|n| post_at(&format!("p{n:03}"))).collect();
    db.upsert_many(&stored).await.unwrap();
    for (moved, taken) in [("p010", "p011"), ("p120", "p121")] {
        let renames = [
            (moved.to_owned(), format!("{moved}-moved")),
            (taken.to_owned(), moved.to_owned()),
        ];
        for (from, to) in renames {
            db.run_raw(
                &format!(
                    "UPDATE {} SET {slug} = '{to}' WHERE {slug} = '{from}'",
                    db.quote("posts"),
                    slug = db.quote("slug")
                ),
                mongodb::bson::doc! {
                    "update": "posts",
                    "updates": [{ "q": { "slug": &from }, "u": { "$set": { "slug": &to } } }],
                },
            )
            .await;
        }
    }
    let mut batch = stored;
    for doc in &mut batch[..40] {
        doc.title = "Edited".into();
    }
    batch
}

/// A post whose id is held by one stored row and whose natural key by another meets the row
/// under its id, whichever way it is written: a single upsert, a batch chunk looked up first,
/// a chunk written with the guard alone. So it gets one refusal everywhere (its key may not
/// change), and neither row changes.
#[tokio::test]
async fn a_post_whose_id_and_key_are_held_by_two_rows_gets_one_refusal_everywhere() {
    for db in fresh_backends("held_apart").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let chunked = db.with_batch_chunk(64).await;
        let both = batch_and_one_by_one(&chunked, &db, posts_whose_id_and_key_are_held_apart).await;
        both.assert_agree::<Post>(&db).await;
        for (at, slug) in [(10, "p010"), (120, "p120")] {
            let refusal = &both.batch[at];
            assert!(
                refusal.contains("field `slug` may not change")
                    && refusal.contains(&format!("stored \"{slug}-moved\", incoming \"{slug}\"")),
                "{db}: {slug} meets the row under its id, now keyed {slug}-moved: {refusal}"
            );
        }
        let count = |name: &str| count_shown(&both.batch, name);
        assert_eq!(
            (count("Updated"), count("Unchanged")),
            (40 - 2, 140 - 40 - 2),
            "{db}: {:?}",
            both.batch
        );
    }
}

/// Deleting and `insert_new` meet the row under the id too: an entry whose id is held by the
/// row now keyed `e0-moved` and whose key by e1's row is refused for its key by a delete, an
/// `insert_new` and an upsert alike, and neither row changes.
#[tokio::test]
async fn a_delete_and_insert_new_of_an_entry_held_by_two_rows_meet_the_row_under_its_id() {
    for db in fresh_backends("held_apart_delete").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        let stored: Vec<Entry> = (0..4).map(|n| entry(&format!("e{n}"), 1, "t")).collect();
        db.upsert_many(&stored).await.unwrap();
        for (from, to) in [("e0", "e0-moved"), ("e1", "e0")] {
            db.run_raw(
                &format!(
                    "UPDATE {} SET {entry_id} = '{to}' WHERE {entry_id} = '{from}'",
                    db.quote("entries"),
                    entry_id = db.quote("entryId")
                ),
                mongodb::bson::doc! {
                    "update": "entries",
                    "updates": [{ "q": { "entryId": from }, "u": { "$set": { "entryId": to } } }],
                },
            )
            .await;
        }
        let before = db.stored::<Entry>().await;
        let deletion = Entry {
            deleted_at: Some(1_700_000_500_000),
            ..stored[0].clone()
        };
        let refusals = [
            ("delete", db.delete(&deletion).await.map(drop)),
            ("insert_new", {
                let report = db.insert_new(&stored[..1]).await.unwrap();
                report.results()[0].as_ref().map(drop).map_err(Clone::clone)
            }),
            ("upsert", db.upsert(&stored[0]).await.map(drop)),
        ];
        for (call, refusal) in refusals {
            let refusal = refusal.expect_err(&format!("{db}: {call} of e0 is refused"));
            let shown = refusal.to_string();
            assert!(
                shown.contains("field `entry_id` (stored as `entryId`) may not change")
                    && shown.contains(r#"stored "e0-moved", incoming "e0""#),
                "{db}: {call} of e0 meets the row under its id, now keyed e0-moved: {shown}"
            );
        }
        assert_eq!(db.stored::<Entry>().await, before, "{db}: nothing changed");
    }
}
