//! PostgreSQL tables partitioned by their natural key (issue 44, item 1), on every PostgreSQL
//! server under test: the table a migration makes (`PARTITION BY HASH (slug)`, a subset of the
//! natural key, four partitions) and the one `Store::with_partitions` makes answer every call as
//! a plain table does; the table check refuses what cannot keep the promises, naming the fix.
//!
//! Each scenario runs on a plain table and on the partitioned one, through tokio-postgres and
//! through sqlx, and their answers are compared whole.

use std::fmt::Debug;
use std::sync::Arc;

use idem_core::postgres::{PartitionBy, Store};
use idem_core::{Deletion, Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_schema, postgres_servers, sqlx_connection};
use idem_tests::fixtures::{post, Post};

/// The migration of the probe: `create_table_sql::<Post>()`, partitioned by hash of
/// `slug` into four partitions, with `id_key` (`PRIMARY KEY ("_id", "slug")`, say) in place of
/// the primary key on `_id`.
fn probe_table(id_key: &str) -> String {
    let plain = Store::create_table_sql::<Post>();
    let plain = plain.replace(" PRIMARY KEY,", " NOT NULL,");
    let (body, _) = plain.rsplit_once(')').expect("a closing parenthesis");
    let id_key = match id_key {
        "" => String::new(),
        id_key => format!(",\n    {id_key}"),
    };
    let mut sql = format!("{body}{id_key}\n) PARTITION BY HASH (\"slug\");\n");
    for remainder in 0..4 {
        sql.push_str(&format!(
            "CREATE TABLE posts_p{remainder} PARTITION OF posts \
             FOR VALUES WITH (MODULUS 4, REMAINDER {remainder});\n"
        ));
    }
    sql
}

/// The layouts every scenario runs on: how the table is made.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// `ensure_table` of a plain store.
    Plain,
    /// The probe, made by a migration: partitioned by `slug` alone.
    Probe,
    /// `ensure_table` of a store `with_partitions`.
    Made,
}

const LAYOUTS: [Layout; 3] = [Layout::Plain, Layout::Probe, Layout::Made];

/// A client whose search path is a fresh schema holding `layout`'s table of `Post`, the store
/// that writes it, and the sqlx connection of the same schema.
async fn made(
    uri: &str,
    layout: Layout,
    test: &str,
) -> (tokio_postgres::Client, Store, idem_core::sqlx::PgConnection) {
    let prefix = match layout {
        Layout::Plain => "pl",
        Layout::Probe => "pp",
        Layout::Made => "pm",
    };
    let (schema, client) = fresh_schema(uri, prefix, test).await;
    let store = match layout {
        Layout::Made => Store::new().with_partitions(PartitionBy::Hash { partitions: 4 }),
        Layout::Plain | Layout::Probe => Store::new(),
    };
    match layout {
        Layout::Probe => client
            .batch_execute(&probe_table("PRIMARY KEY (\"_id\", \"slug\")"))
            .await
            .expect("the probe's table"),
        Layout::Plain | Layout::Made => store.ensure_table::<Post, _>(&client).await.unwrap(),
    }
    let sqlx = sqlx_connection(uri, &schema).await;
    (client, store, sqlx)
}

/// A fresh schema (its name, and a client whose search path it is) holding `Post`'s table as a
/// store partitioning into four makes it, and that store.
async fn partitioned(
    uri: &str,
    prefix: &str,
    test: &str,
) -> (String, tokio_postgres::Client, Store) {
    let (schema, client) = fresh_schema(uri, prefix, test).await;
    let store = Store::new().with_partitions(PartitionBy::Hash { partitions: 4 });
    store.ensure_table::<Post, _>(&client).await.unwrap();
    (schema, client, store)
}

/// Whether `client`'s `posts` is partitioned, and into how many partitions.
async fn partitions(client: &tokio_postgres::Client) -> Option<i64> {
    let row = client
        .query_one(
            "SELECT c.relkind = 'p', (SELECT count(*) FROM pg_inherits i \
             WHERE i.inhparent = c.oid) FROM pg_class c WHERE c.oid = to_regclass('posts')",
            &[],
        )
        .await
        .unwrap();
    row.get::<_, bool>(0).then(|| row.get(1))
}

/// How many rows `client`'s `posts` holds.
async fn rows_of(client: &tokio_postgres::Client) -> i64 {
    let row = client.query_one("SELECT count(*) FROM posts", &[]).await;
    row.unwrap().get(0)
}

/// The first column of each row `sql` returns, as text.
async fn texts(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let rows = client.query(sql, &[]).await.unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// What a result shows in a comparison: the outcome, or the error's kind.
fn shown<T: Debug>(result: &Result<T, Error>) -> String {
    match result {
        Ok(value) => format!("{value:?}"),
        Err(error) => format!("{:?}", error.kind()),
    }
}

/// `n` posts, `post-0` to `post-{n-1}`: spread over every partition.
fn posts(n: usize) -> Vec<Post> {
    (0..n)
        .map(|n| Post {
            slug: format!("post-{n}"),
            ..post()
        })
        .collect()
}

/// Runs `scenario` on every layout, through both drivers, on every server, and checks that each
/// layout answers as the plain table does, and that the partitioned tables are partitioned.
macro_rules! as_on_a_plain_table {
    ($test:literal, |$store:ident, $client:ident| $scenario:expr) => {
        for (label, uri) in postgres_servers() {
            for sqlx in [false, true] {
                let mut answers: Vec<(Layout, Vec<String>)> = Vec::new();
                for layout in LAYOUTS {
                    let test = format!("{}_{}", $test, u8::from(sqlx));
                    let (client, $store, mut connection) = made(&uri, layout, &test).await;
                    let $client = &client;
                    if layout != Layout::Plain {
                        assert_eq!(partitions($client).await, Some(4), "{label} {layout:?}");
                    }
                    let answer: Vec<String> = match sqlx {
                        false => {
                            // The connection each call of the scenario goes through.
                            macro_rules! on {
                                () => {
                                    &client
                                };
                            }
                            $scenario
                        }
                        true => {
                            macro_rules! on {
                                () => {
                                    &mut connection
                                };
                            }
                            $scenario
                        }
                    };
                    answers.push((layout, answer));
                }
                let (_, plain) = &answers[0];
                for (layout, answer) in &answers[1..] {
                    assert_eq!(
                        answer, plain,
                        "{label}, sqlx {sqlx}, {layout:?} against plain"
                    );
                }
            }
        }
    };
}

/// The probe: `Inserted`, `Unchanged`, `Updated`, then the frozen refusals (a frozen
/// field, and the timestamp that feeds the id), each as a plain table answers; a write refused
/// leaves the row as it was.
#[tokio::test]
async fn the_probe_answers_as_a_plain_table() {
    as_on_a_plain_table!("probe", |store, client| {
        let mut answers = Vec::new();
        let first = post();
        answers.push(shown(&store.upsert(on!(), &first).await));
        answers.push(shown(&store.upsert(on!(), &first).await));
        let edited = Post {
            title: "Edited".into(),
            ..first.clone()
        };
        answers.push(shown(&store.upsert(on!(), &edited).await));
        let frozen = Post {
            author_id: "grace".into(),
            ..edited.clone()
        };
        answers.push(shown(&store.upsert(on!(), &frozen).await));
        let moved = Post {
            published_at: first.published_at + 1,
            ..edited.clone()
        };
        answers.push(shown(&store.upsert(on!(), &moved).await));
        let stored = store.get::<Post, _>(on!(), edited.id().unwrap()).await;
        answers.push(shown(&stored));
        let found = store.find::<Post, _>(on!(), &edited.natural_key()).await;
        answers.push(shown(&found));
        let count = rows_of(client).await;
        answers.push(count.to_string());
        answers
    });
}

/// Batches spanning every partition, through the lookup and the plain insert of fresh rows
/// (`with_shortcuts_from(1)`) and without: a first ingest, an unchanged re-ingest, a tenth
/// changed, one refused among them.
#[tokio::test]
async fn batches_spanning_partitions_answer_as_a_plain_table() {
    as_on_a_plain_table!("batches", |store, client| {
        let mut answers = Vec::new();
        for shortcuts in [1, 1_000_000] {
            let store = store.clone().with_shortcuts_from(shortcuts);
            let n = if shortcuts == 1 { 0 } else { 200 };
            let mut batch: Vec<Post> = posts(400)[n..n + 200].to_vec();
            let first = store.upsert_many(on!(), &batch).await.unwrap();
            answers.push(format!("{:?}", first.outcomes()));
            let again = store.upsert_many(on!(), &batch).await.unwrap();
            answers.push(format!("{:?}", again.outcomes()));
            for (at, post) in batch.iter_mut().enumerate() {
                if at % 10 == 0 {
                    post.title = "Changed".into();
                }
            }
            batch[5].author_id = "grace".into();
            let changed = store.upsert_many(on!(), &batch).await.unwrap();
            let shown: Vec<String> = changed.outcomes().iter().map(shown).collect();
            answers.push(format!("{shown:?}"));
        }
        let count = rows_of(client).await;
        answers.push(count.to_string());
        answers
    });
}

/// `insert_new`, `delete` and `delete_by_id` of documents in several partitions.
#[tokio::test]
async fn insert_new_and_deletes_answer_as_a_plain_table() {
    use idem_tests::fixtures::{entry, Entry};
    for (label, uri) in postgres_servers() {
        let mut answers: Vec<Vec<String>> = Vec::new();
        for layout in LAYOUTS {
            let (schema, client) = fresh_schema(&uri, "pd", &format!("{layout:?}")).await;
            let store = match layout {
                Layout::Plain => Store::new(),
                _ => Store::new().with_partitions(PartitionBy::Hash { partitions: 3 }),
            };
            let _ = schema;
            store.ensure_table::<Entry, _>(&client).await.unwrap();
            store.ensure_table::<Post, _>(&client).await.unwrap();
            let mut answer = Vec::new();
            let members = posts(12);
            let report = store.insert_new(&client, &members[..6]).await.unwrap();
            answer.push(format!("{:?}", report.results()));
            let report = store.insert_new(&client, &members).await.unwrap();
            answer.push(format!("{:?}", report.results()));
            for id in ["a", "b", "c", "d"] {
                let mut deleted = entry(id, 1, "x");
                deleted.deleted_at = Some(5);
                answer.push(shown(&store.upsert(&client, &entry(id, 1, "x")).await));
                answer.push(shown(&store.delete(&client, &deleted).await));
                answer.push(shown(&store.delete(&client, &deleted).await));
                answer.push(shown(&store.upsert(&client, &entry(id, 2, "y")).await));
            }
            let never = Entry {
                deleted_at: Some(7),
                ..entry("e", 1, "z")
            };
            answer.push(shown(&store.delete(&client, &never).await));
            let later = entry("f", 1, "x");
            answer.push(shown(&store.upsert(&client, &later).await));
            let by_id = store.delete_by_id::<Entry, _, _>(&client, later.id().unwrap(), &9i64);
            answer.push(shown(&by_id.await));
            let again = store.delete_by_id::<Entry, _, _>(&client, later.id().unwrap(), &9i64);
            answer.push(shown(&again.await));
            let stored = store.get::<Entry, _>(&client, later.id().unwrap()).await;
            answer.push(shown(&stored));
            answers.push(answer);
            if layout != Layout::Plain {
                let entries = client
                    .query_one(
                        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'entries'::regclass",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get::<_, i64>(0);
                assert_eq!(entries, 3, "{label}");
            }
        }
        assert_eq!(answers[1], answers[0], "{label}");
        assert_eq!(answers[2], answers[0], "{label}");
        assert_eq!(
            answers[0]
                .last()
                .map(|stored| stored.contains("deleted_at: Some(9)")),
            Some(true),
            "{label}: {:?}",
            answers[0]
        );
        let _ = Deletion::Deleted;
    }
}

/// Racing first writes: sixteen writers of the same new document in one partition, and sixteen
/// of different documents across every partition, each on its own connection: one `Inserted`
/// and fifteen `Unchanged` for the first, sixteen `Inserted` for the second. A racer whose
/// snapshot missed the row committed meanwhile goes again (on PostgreSQL 15 to 17, where the
/// partitioned table's write tells inserted rows by what its snapshot held).
#[tokio::test]
async fn racing_first_writes_converge_on_a_partitioned_table() {
    for (label, uri) in postgres_servers() {
        for round in 0..3 {
            let test = format!("race{round}");
            let (schema, client, store) = partitioned(&uri, "pr", &test).await;
            let barrier = Arc::new(tokio::sync::Barrier::new(32));
            let mut tasks = Vec::new();
            for writer in 0..32 {
                let (uri, schema, store) = (uri.clone(), schema.clone(), store.clone());
                let barrier = Arc::clone(&barrier);
                tasks.push(tokio::spawn(async move {
                    let client = idem_tests::backends::postgres_client(&uri, &schema).await;
                    let doc = match writer {
                        0..16 => Post {
                            title: format!("racer {round}"),
                            ..post()
                        },
                        n => posts(40)[n].clone(),
                    };
                    barrier.wait().await;
                    (writer, store.upsert(&client, &doc).await)
                }));
            }
            let (mut same, mut different) = (Vec::new(), Vec::new());
            for task in tasks {
                let (writer, outcome) = task.await.unwrap();
                let outcome = outcome.unwrap_or_else(|error| panic!("{label}: {error}"));
                match writer {
                    0..16 => same.push(outcome),
                    _ => different.push(outcome),
                }
            }
            let inserted = same.iter().filter(|o| **o == Outcome::Inserted).count();
            let unchanged = same.iter().filter(|o| **o == Outcome::Unchanged).count();
            assert_eq!((inserted, unchanged), (1, 15), "{label}: {same:?}");
            assert!(different.iter().all(|o| *o == Outcome::Inserted), "{label}");
            let count = rows_of(&client).await;
            assert_eq!(count, 17, "{label}");
        }
    }
}

/// Racing writes of different contents to one stored row: each racer's outcome is `Updated` or
/// `Unchanged` (never `Inserted`, which a write that updated a row its snapshot missed would
/// claim), whatever the server.
#[tokio::test]
async fn racing_updates_are_never_told_inserted() {
    for (label, uri) in postgres_servers() {
        let (schema, _client, store) = partitioned(&uri, "pu", "race").await;
        for round in 0..5 {
            let barrier = Arc::new(tokio::sync::Barrier::new(8));
            let mut tasks = Vec::new();
            for writer in 0..8 {
                let (uri, schema, store) = (uri.clone(), schema.clone(), store.clone());
                let barrier = Arc::clone(&barrier);
                tasks.push(tokio::spawn(async move {
                    let client = idem_tests::backends::postgres_client(&uri, &schema).await;
                    let doc = Post {
                        title: format!("round {round} writer {writer}"),
                        ..post()
                    };
                    barrier.wait().await;
                    store.upsert(&client, &doc).await
                }));
            }
            let mut inserted = 0;
            for task in tasks {
                let outcome = task
                    .await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                inserted += usize::from(outcome == Outcome::Inserted);
            }
            assert_eq!(inserted, usize::from(round == 0), "{label}, round {round}");
        }
    }
}

/// A row stored under a document's id with another natural key (another tool wrote it: no
/// unique index on `_id` alone stops it on a partitioned table): the write is refused as on a
/// plain table, where the primary key stops it, and neither row changes; a batch holding it
/// refuses it alone.
#[tokio::test]
async fn an_id_stored_under_another_key_is_refused_as_on_a_plain_table() {
    as_on_a_plain_table!("fork", |store, client| {
        let mut answers = Vec::new();
        let first = post();
        answers.push(shown(&store.upsert(on!(), &first).await));
        // The same id, under another slug, in whatever partition that slug hashes to.
        let other = Post {
            slug: "another-slug".into(),
            ..first.clone()
        };
        let id = first.id().unwrap().to_string();
        let moved = client
            .execute(
                "UPDATE posts SET slug = 'another-slug' WHERE \"_id\" = $1",
                &[&id],
            )
            .await;
        answers.push(format!("{moved:?}"));
        answers.push(shown(&store.upsert(on!(), &first).await));
        let batch = vec![posts(3)[1].clone(), first.clone(), posts(3)[2].clone()];
        let report = store.upsert_many(on!(), &batch).await.unwrap();
        answers.push(format!(
            "{:?}",
            report.outcomes().iter().map(shown).collect::<Vec<_>>()
        ));
        answers.push(shown(&store.upsert(on!(), &other).await));
        // Through a first ingest's plain insert: the chunk behind one inserted whole goes
        // without a lookup, and the stored id must fail it there too.
        let fresh = store.clone().with_shortcuts_from(1).with_batch_chunk(2);
        let batch = [posts(8)[5..8].to_vec(), vec![first.clone()]].concat();
        let report = fresh.upsert_many(on!(), &batch).await.unwrap();
        answers.push(format!(
            "{:?}",
            report.outcomes().iter().map(shown).collect::<Vec<_>>()
        ));
        let rows = texts(
            client,
            "SELECT slug || ' ' || title FROM posts ORDER BY slug",
        )
        .await;
        answers.push(format!("{rows:?}"));
        answers
    });
}

/// The lookup and the write read the row holding each key first, and by id only where that
/// row is not under the id: batches of changed rows over every partition, in chunks all
/// changed, none changed and mixed, where plain SQL moved one row's id to another key and gave
/// another key's row another id; through the lookup and through the write without it.
#[tokio::test]
async fn changed_rows_beside_rows_keyed_otherwise_answer_as_a_plain_table() {
    as_on_a_plain_table!("held", |store, client| {
        let mut answers = Vec::new();
        let mut batch = posts(40);
        let first = store.upsert_many(on!(), &batch).await.unwrap();
        answers.push(format!("{:?}", first.outcomes()));
        let moved = batch[25].id().unwrap().to_string();
        let renamed = batch[27].id().unwrap().to_string();
        let edits = client
            .batch_execute(&format!(
                "UPDATE posts SET slug = 'moved' WHERE \"_id\" = '{moved}'; \
                 UPDATE posts SET \"_id\" = 'renamed' WHERE \"_id\" = '{renamed}'"
            ))
            .await;
        answers.push(format!("{edits:?}"));
        // Chunks of 10: the first and last all changed, the second unchanged, the third mixed
        // (holding both rows plain SQL edited).
        for (at, post) in batch.iter_mut().enumerate() {
            if !(10..30).contains(&at) || (at >= 20 && at % 2 == 1) {
                post.title = format!("Changed {at}");
            }
        }
        for lookup in [true, false] {
            let chunked = store.clone().with_batch_chunk(10);
            // Chunks of 10 take the lookup only below the shortcuts' default of 64.
            let chunked = match lookup {
                true => chunked.with_shortcuts_from(1),
                false => chunked,
            };
            for _ in 0..2 {
                let report = chunked.upsert_many(on!(), &batch).await.unwrap();
                let shown: Vec<String> = report.outcomes().iter().map(shown).collect();
                answers.push(format!("{shown:?}"));
            }
            for post in &mut batch[..10] {
                post.title.push('!');
            }
        }
        let sql = "SELECT \"_id\" || ' ' || slug || ' ' || title FROM posts ORDER BY slug";
        let rows = texts(client, sql).await;
        answers.push(format!("{rows:?}"));
        answers
    });
}

/// What the table check refuses on a partitioned table, naming the fix: no unique index on
/// `_id` and the partition columns (the fix given makes the table pass), one with `_id` not
/// first, and a table partitioned by a column outside the natural key.
#[tokio::test]
async fn the_check_names_what_a_partitioned_table_lacks() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pc", "noid").await;
        client.batch_execute(&probe_table("")).await.unwrap();
        let store = Store::new();
        let refused = store.upsert(&client, &post()).await.unwrap_err();
        let ErrorKind::SchemaMismatch { problem, .. } = refused.kind() else {
            panic!("{label}: {refused:?}");
        };
        assert!(
            problem.contains("(\"_id\", \"slug\"), \"_id\" first"),
            "{label}: {problem}"
        );
        let fix = problem.rsplit_once(": ").unwrap().1;
        assert_eq!(
            fix,
            "ALTER TABLE \"posts\" ADD CONSTRAINT \"posts_idem_id\" UNIQUE (\"_id\", \"slug\")",
            "{label}"
        );
        client.batch_execute(fix).await.unwrap();
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );

        let (_, client) = fresh_schema(&uri, "pc", "late").await;
        let key = "CONSTRAINT posts_late UNIQUE (\"slug\", \"_id\")";
        client.batch_execute(&probe_table(key)).await.unwrap();
        let refused = Store::new().upsert(&client, &post()).await.unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::SchemaMismatch { problem, .. }
                if problem.contains("\"_id\" first")),
            "{label}: {refused:?}"
        );

        let (_, client) = fresh_schema(&uri, "pc", "other").await;
        let sql = Store::create_table_sql::<Post>()
            .replace(" PRIMARY KEY,", " NOT NULL,")
            .replace(
                "UNIQUE (\"slug\", \"lang\")",
                "UNIQUE (\"slug\", \"lang\", \"title\")",
            );
        let (body, _) = sql.rsplit_once(')').unwrap();
        client
            .batch_execute(&format!(
                "{body}, UNIQUE (\"_id\", \"title\")) PARTITION BY LIST (\"title\"); \
                 CREATE TABLE posts_all PARTITION OF posts DEFAULT"
            ))
            .await
            .unwrap();
        let refused = Store::new().upsert(&client, &post()).await.unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::SchemaMismatch { problem, .. }
                if problem.starts_with("it is partitioned by (\"title\"), not by columns of \
                                        the natural key (\"slug\", \"lang\")")),
            "{label}: {refused:?}"
        );
    }
}

/// The statements `create_partitioned_table_sql` prints make the table `with_partitions` makes:
/// run by hand (a migration), the store's check takes it.
#[tokio::test]
async fn the_printed_statements_make_a_table_the_check_takes() {
    let sql = Store::create_partitioned_table_sql::<Post>(PartitionBy::Hash { partitions: 2 });
    assert!(
        sql.contains("PRIMARY KEY (\"_id\", \"slug\", \"lang\")")
            && sql.contains("PARTITION BY HASH (\"slug\", \"lang\")")
            && sql.contains("CREATE TABLE \"posts_p1\" PARTITION OF \"posts\""),
        "{sql}"
    );
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pc", "printed").await;
        client.batch_execute(&sql).await.unwrap();
        assert_eq!(partitions(&client).await, Some(2), "{label}");
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Inserted
        );
    }
}

/// Two rows under one id, which only a partitioned table can hold (another tool wrote the second,
/// or 80 bits of the key's digest collided): each document still meets its own row, `find` reads
/// each, and `get` returns one of them.
#[tokio::test]
async fn two_rows_under_one_id_each_meet_their_own_document() {
    for (label, uri) in postgres_servers() {
        let (_, client, store) = partitioned(&uri, "pt", "twins").await;
        let first = post();
        assert_eq!(
            store.upsert(&client, &first).await.unwrap(),
            Outcome::Inserted
        );
        client
            .batch_execute(
                "INSERT INTO posts SELECT \"_id\", 'twin', lang, \"publishedAt\", title, body, \
                 \"fetchedAt\", \"authorId\", \"sourceHash\", \"idemFrozen\" FROM posts",
            )
            .await
            .unwrap();
        for _ in 0..2 {
            let again = store.upsert(&client, &first).await;
            assert_eq!(again.unwrap(), Outcome::Unchanged, "{label}");
            let edited = Post {
                title: "Edited".into(),
                ..first.clone()
            };
            assert_eq!(
                store.upsert(&client, &edited).await.unwrap(),
                Outcome::Updated
            );
            assert_eq!(
                store.upsert(&client, &first).await.unwrap(),
                Outcome::Updated
            );
        }
        let twin = Post {
            slug: "twin".into(),
            ..first.clone()
        };
        let refused = store.upsert(&client, &twin).await.unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::IdChanged { .. }),
            "{label}: {refused:?}"
        );
        let found = store.find::<Post, _>(&client, &twin.natural_key()).await;
        assert_eq!(found.unwrap().map(|post| post.slug), Some("twin".into()));
        let found = store.find::<Post, _>(&client, &first.natural_key()).await;
        assert_eq!(found.unwrap(), Some(first.clone()), "{label}");
        let got = store.get::<Post, _>(&client, first.id().unwrap()).await;
        assert!(got.unwrap().is_some(), "{label}");
    }
}

/// `adopt` on a partitioned table a migration made (`UNIQUE ("_id", "slug")`, so rows without an
/// id may be there): rows without an `_id` written in one transaction sit at the same `ctid`
/// with the same `xmin` in every partition, and each moves to its own derived id.
#[tokio::test]
async fn adoption_tells_rows_of_different_partitions_apart() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pa", "adopt").await;
        client
            .batch_execute(&probe_table(
                "CONSTRAINT posts_id UNIQUE (\"_id\", \"slug\")",
            ))
            .await
            .unwrap();
        client
            .batch_execute("ALTER TABLE posts ALTER COLUMN \"_id\" DROP NOT NULL")
            .await
            .unwrap();
        let documents = posts(12);
        let mut values = Vec::new();
        for doc in &documents {
            values.push(format!(
                "(NULL, '{}', '{}', {}, '{}', '{}', {}, '{}')",
                doc.slug,
                doc.lang,
                doc.published_at,
                doc.title,
                doc.body,
                doc.fetched_at,
                doc.author_id
            ));
        }
        client
            .batch_execute(&format!(
                "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, body, \
                 \"fetchedAt\", \"authorId\") VALUES {}",
                values.join(", ")
            ))
            .await
            .unwrap();
        let at_one_place: i64 = client
            .query_one(
                "SELECT max(n) FROM (SELECT count(*) AS n FROM posts GROUP BY ctid) c",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            at_one_place > 1,
            "{label}: rows of one ctid in several partitions"
        );
        let store = Store::new();
        // The audit shows each row without an id by a place that is its own.
        let audit = store.audit::<Post, _>(&client).await.unwrap();
        let places: std::collections::HashSet<&str> = (audit.legacy_ids.samples.iter())
            .map(|sample| sample.id.as_str())
            .collect();
        assert_eq!(
            places.len(),
            audit.legacy_ids.samples.len(),
            "{label}: {audit}"
        );
        assert_eq!(audit.legacy_ids.count, 12, "{label}: {audit}");
        let report = store.adopt::<Post, _>(&client).await.unwrap();
        assert_eq!(
            (report.moved.count, report.failed.count),
            (12, 0),
            "{label}: {report}"
        );
        for doc in &documents {
            let got = store
                .get::<Post, _>(&client, doc.id().unwrap())
                .await
                .unwrap();
            assert_eq!(got.as_ref(), Some(doc), "{label}");
            assert_eq!(
                store.upsert(&client, doc).await.unwrap(),
                Outcome::Unchanged
            );
        }
    }
}

/// Transactions racing one new document on a partitioned table, each write in the caller's
/// transaction (in a savepoint): one `Inserted`, the rest `Unchanged`, every transaction
/// committing, as on a plain table.
#[tokio::test]
async fn racing_transactions_converge_on_a_partitioned_table() {
    for (label, uri) in postgres_servers() {
        let (schema, client, store) = partitioned(&uri, "px", "race").await;
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (uri, schema, store) = (uri.clone(), schema.clone(), store.clone());
            let barrier = Arc::clone(&barrier);
            tasks.push(tokio::spawn(async move {
                let mut client = idem_tests::backends::postgres_client(&uri, &schema).await;
                let tx = client.transaction().await.unwrap();
                barrier.wait().await;
                let outcome = store.upsert(&tx, &post()).await;
                tx.commit().await.unwrap();
                outcome
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(
                task.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{label}: {e}")),
            );
        }
        let inserted = outcomes.iter().filter(|o| **o == Outcome::Inserted).count();
        let unchanged = outcomes
            .iter()
            .filter(|o| **o == Outcome::Unchanged)
            .count();
        assert_eq!((inserted, unchanged), (1, 7), "{label}: {outcomes:?}");
        assert_eq!(rows_of(&client).await, 1, "{label}");
    }
}

/// One store writing a plain table in one schema and a partitioned one in another: once it has
/// met the partitioned table, its writes take that table's form on the plain one too, with the
/// same answers.
#[tokio::test]
async fn one_store_writes_a_plain_and_a_partitioned_table() {
    for (label, uri) in postgres_servers() {
        let (_, plain) = fresh_schema(&uri, "pmix", "plain").await;
        let (_, partitioned) = fresh_schema(&uri, "pmix", "partitioned").await;
        let store = Store::new();
        store.ensure_table::<Post, _>(&plain).await.unwrap();
        let by = PartitionBy::Hash { partitions: 2 };
        let sql = Store::create_partitioned_table_sql::<Post>(by);
        partitioned.batch_execute(&sql).await.unwrap();
        for client in [&plain, &partitioned, &plain] {
            let first = posts(3)[0].clone();
            let outcome = store.upsert(client, &first).await.unwrap();
            assert!(
                matches!(outcome, Outcome::Inserted | Outcome::Unchanged),
                "{label}"
            );
            let edited = Post {
                title: format!("{outcome:?}"),
                ..first.clone()
            };
            assert_eq!(
                store.upsert(client, &edited).await.unwrap(),
                Outcome::Updated
            );
            let report = store.upsert_many(client, &posts(3)).await.unwrap();
            let outcomes: Vec<Outcome> = report.into_outcomes().into_iter().flatten().collect();
            assert_eq!(outcomes[0], Outcome::Updated, "{label}");
            assert_eq!(outcomes.len(), 3, "{label}");
        }
        assert_eq!((rows_of(&plain).await, rows_of(&partitioned).await), (3, 3));
    }
}
