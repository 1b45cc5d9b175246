//! What only the PostgreSQL backend has, on every PostgreSQL server under test: the inserted-row
//! signal it relies on, its table (DDL, typed columns, the check before the first write), the
//! caller's transactions, rows another tool wrote, other unique constraints, and input a table
//! cannot hold. The behaviour it shares with MongoDB is in the contract suite (`contract/`).

use std::collections::BTreeMap;

use idem_core::postgres::{Change, Store, APPLIED_OPS_FIELD};
use idem_core::sqlx::PgConnection;
use idem_core::{Applied, Error, ErrorKind, Idempotent, OpId, Outcome, Pushed};
use idem_tests::backends::{
    fresh_schema, postgres_servers, rows_shown, sqlx_connection, WITH_VERSION,
};
use idem_tests::fixtures::{account, numbered_post, post, Account, Playlist, Post, Track};
use idem_tests::pg_chaos::{connect, connection_config, upstream_address};
use idem_tests::pg_proxy::{Faults, PostgresWire, Proxy, ProxyConfig, ProxyStats};
use serde::{Deserialize, Serialize};

/// A client on a fresh schema of each server, with the server's label.
async fn fresh_schemas(test: &str) -> Vec<(String, tokio_postgres::Client)> {
    let mut clients = Vec::new();
    for (label, uri) in postgres_servers() {
        clients.push((label, fresh_schema(&uri, "p", test).await.1));
    }
    clients
}

/// Each row of `table` with its row version, which any write changes.
async fn rows(client: &tokio_postgres::Client, table: &str) -> Vec<String> {
    rows_shown(client, table, WITH_VERSION).await
}

/// The signal `upsert` reads to tell an insert from an update, in the statement's own
/// `RETURNING`: `xmax = 0` on every version, `old IS NULL` on 18 and later. If a server stops
/// behaving so, this fails before any outcome is misreported.
#[tokio::test]
async fn the_server_tells_inserted_rows_from_updated_ones_in_the_statement_itself() {
    for (label, client) in fresh_schemas("signal").await {
        client
            .batch_execute("CREATE TABLE signal (k text PRIMARY KEY, v text)")
            .await
            .unwrap();
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .unwrap()
            .get(0);
        let upsert = |value: &'static str| {
            let client = &client;
            async move {
                let sql = format!(
                    "INSERT INTO signal AS t VALUES ('k', '{value}') ON CONFLICT (k) DO UPDATE \
                     SET v = excluded.v RETURNING (t.xmax = 0)"
                );
                client.query_one(&sql, &[]).await.unwrap().get::<_, bool>(0)
            }
        };
        assert!(upsert("a").await, "{label}: an inserted row has xmax 0");
        assert!(
            !upsert("b").await,
            "{label}: an updated row has the writer's xmax"
        );
        if version >= 180_000 {
            let sql = "INSERT INTO signal AS t VALUES ($1, 'x') ON CONFLICT (k) DO UPDATE \
                       SET v = excluded.v RETURNING (old IS NULL)";
            let inserted = |key: &'static str| {
                let client = &client;
                async move {
                    client
                        .query_one(sql, &[&key])
                        .await
                        .unwrap()
                        .get::<_, bool>(0)
                }
            };
            assert!(inserted("new").await, "{label}: old is null for an insert");
            assert!(
                !inserted("new").await,
                "{label}: old is the row for an update"
            );
        }
    }
}

/// One store serving servers of both signals at once (a PostgreSQL 18 and a 15, as during an
/// upgrade, or one process writing to two databases): each write answers by its own server's
/// signal, whichever server the store checked last, in turns and racing, through both drivers.
/// Where `IDEM_POSTGRES_URIS` names servers on both sides of 18, as `scripts/test` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_store_writes_to_servers_of_both_signals_at_once() {
    let mut servers = Vec::new();
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "p", "both_signals").await;
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .unwrap()
            .get(0);
        servers.push((label, uri, schema, client, version >= 180_000));
    }
    if !(servers.iter().any(|server| server.4) && servers.iter().any(|server| !server.4)) {
        // `scripts/test` always runs 15 and 18; a single server has no second signal to meet.
        eprintln!("one_store_writes_to_servers_of_both_signals_at_once: one signal only");
        return;
    }
    let store = std::sync::Arc::new(Store::new());
    for (_, _, _, client, _) in &servers {
        store.ensure_table::<Post, _>(client).await.unwrap();
    }
    // In turns: the last check was on the other server for every write but the last server's.
    for round in 0..3 {
        for (label, _, _, client, _) in &servers {
            let doc = Post {
                slug: format!("turns-{round}"),
                ..post()
            };
            let edited = Post {
                title: format!("edited {round}"),
                ..doc.clone()
            };
            assert_eq!(
                store.upsert(client, &doc).await.unwrap(),
                Outcome::Inserted,
                "{label}"
            );
            assert_eq!(
                store.upsert(client, &doc).await.unwrap(),
                Outcome::Unchanged,
                "{label}"
            );
            assert_eq!(
                store.upsert(client, &edited).await.unwrap(),
                Outcome::Updated,
                "{label}"
            );
            let batch = [
                doc.clone(),
                Post {
                    slug: format!("turns-{round}-b"),
                    ..doc.clone()
                },
            ];
            let report = store.upsert_many(client, &batch).await.unwrap();
            assert_eq!(
                (
                    report.count(Outcome::Updated),
                    report.count(Outcome::Inserted)
                ),
                (1, 1),
                "{label}: {report}"
            );
        }
    }
    // Racing: writers on both servers at once, through both drivers, one store.
    let mut writers = Vec::new();
    for (label, uri, schema, _, _) in &servers {
        for writer in 0..4 {
            let (store, label, uri, schema) =
                (store.clone(), label.clone(), uri.clone(), schema.clone());
            writers.push(tokio::spawn(async move {
                let docs: Vec<Post> = (0..6)
                    .map(|n| Post {
                        slug: format!("race-{n}"),
                        title: format!("writer {writer}"),
                        ..post()
                    })
                    .collect();
                let mut outcomes = Vec::new();
                if writer % 2 == 0 {
                    let client = idem_tests::backends::postgres_client(&uri, &schema).await;
                    for doc in &docs {
                        // A retryable error (a racing first write's contention) is made
                        // again, as a caller would.
                        let mut attempts = 0;
                        let outcome = loop {
                            attempts += 1;
                            match store.upsert(&client, doc).await {
                                Err(error) if error.is_retryable() && attempts < 20 => continue,
                                outcome => break outcome,
                            }
                        };
                        outcomes.push(outcome);
                    }
                } else {
                    let mut connection = sqlx_connection(&uri, &schema).await;
                    for doc in &docs {
                        let mut attempts = 0;
                        let outcome = loop {
                            attempts += 1;
                            match store.upsert(&mut connection, doc).await {
                                Err(error) if error.is_retryable() && attempts < 20 => continue,
                                outcome => break outcome,
                            }
                        };
                        outcomes.push(outcome);
                    }
                }
                (label, outcomes)
            }));
        }
    }
    let mut inserted: BTreeMap<String, usize> = BTreeMap::new();
    for writer in writers {
        let (label, outcomes) = writer.await.unwrap();
        for outcome in outcomes {
            match outcome {
                Ok(Outcome::Inserted) => *inserted.entry(label.clone()).or_default() += 1,
                Ok(_) => {}
                Err(error) => panic!("{label}: {error:?}"),
            }
        }
    }
    for (label, _, _, client, _) in &servers {
        assert_eq!(
            inserted.get(label),
            Some(&6),
            "{label}: each post inserted once"
        );
        assert_eq!(rows(client, "posts").await.len(), 3 * 2 + 6, "{label}");
    }
}

/// A session whose default isolation is `REPEATABLE READ` or `SERIALIZABLE`, writing outside
/// any transaction: a write that meets a row another transaction changed and committed after
/// the write's snapshot fails with a serialization failure, which rolled back only the write;
/// the store sends it again (as it starts a deadlocked write over) and answers the truth, on
/// both drivers.
#[tokio::test]
async fn a_write_alone_under_a_stricter_default_isolation_starts_over_after_a_serialization_failure(
) {
    for (label, uri) in postgres_servers() {
        for level in ["repeatable read", "serializable"] {
            for driver in ["tokio-postgres", "sqlx"] {
                let what = format!("{label} {driver} {level}");
                let (schema, holder) = fresh_schema(&uri, "p", "serialization").await;
                let store = Store::new();
                store.ensure_table::<Post, _>(&holder).await.unwrap();
                let stored = post();
                store.upsert(&holder, &stored).await.unwrap();
                // Another transaction holds the row, changed, until the write waits on it.
                holder
                    .batch_execute(
                        "BEGIN; UPDATE posts SET title = 'held' WHERE slug = 'hello-world'",
                    )
                    .await
                    .unwrap();
                let edited = Post {
                    title: "Edited".into(),
                    ..stored.clone()
                };
                let default = format!("SET default_transaction_isolation = '{level}'");
                let written = {
                    let (store, edited, uri, schema) =
                        (store.clone(), edited.clone(), uri.clone(), schema.clone());
                    let driver = driver.to_owned();
                    tokio::spawn(async move {
                        if driver == "sqlx" {
                            let mut connection = sqlx_connection(&uri, &schema).await;
                            idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(default))
                                .execute(&mut connection)
                                .await
                                .unwrap();
                            store.upsert(&mut connection, &edited).await
                        } else {
                            let client = idem_tests::backends::postgres_client(&uri, &schema).await;
                            client.batch_execute(&default).await.unwrap();
                            store.upsert(&client, &edited).await
                        }
                    })
                };
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                holder.batch_execute("COMMIT").await.unwrap();
                let outcome = written.await.unwrap();
                assert_eq!(outcome.ok(), Some(Outcome::Updated), "{what}");
                let titles = holder.query("SELECT title FROM posts", &[]).await.unwrap();
                let titles: Vec<String> = titles.iter().map(|row| row.get(0)).collect();
                assert_eq!(titles, ["Edited"], "{what}");
            }
        }
    }
}

/// The DDL has a typed column per stored field, idem's columns and the unique natural key; the
/// table it creates is what the first write checks.
#[tokio::test]
async fn the_table_has_a_typed_column_per_field_and_a_unique_natural_key() {
    let sql = Store::create_table_sql::<Post>();
    for expected in [
        "CREATE TABLE IF NOT EXISTS \"posts\"",
        "\"_id\" text PRIMARY KEY",
        "\"slug\" text NOT NULL",
        "\"publishedAt\" bigint",
        "\"title\" text",
        "\"sourceHash\" bytea",
        "\"idemFrozen\" bytea",
        "\"idemAppliedOps\" jsonb,",
        "CONSTRAINT \"posts_idem_natural_key\" UNIQUE (\"slug\", \"lang\")",
    ] {
        assert!(sql.contains(expected), "{expected} missing from:\n{sql}");
    }
    for (label, client) in fresh_schemas("ddl").await {
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        // Idempotent.
        store.ensure_table::<Post, _>(&client).await.unwrap();
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
        let types: BTreeMap<String, String> = client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = 'posts'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(types["publishedAt"], "bigint", "{label}");
        assert_eq!(types["authorId"], "text", "{label}");
    }
}

/// A table that does not match the model is refused before any write, naming the column.
#[tokio::test]
async fn a_table_that_does_not_match_the_model_is_refused_before_any_write() {
    let cases: [(&str, &str, &str); 4] = [
        ("", "does not exist", "no table"),
        (
            "CREATE TABLE posts (\"_id\" text PRIMARY KEY, slug text, lang text)",
            "\"publishedAt\" is missing",
            "a missing column",
        ),
        (
            "ALTER TABLE posts ALTER COLUMN \"publishedAt\" TYPE text",
            "\"publishedAt\" is text, expected bigint",
            "a column of another type",
        ),
        (
            "ALTER TABLE posts DROP CONSTRAINT posts_idem_natural_key",
            "no unique constraint on exactly the natural key",
            "no unique natural key",
        ),
    ];
    for (label, client) in fresh_schemas("mismatch").await {
        for (setup, expected, case) in cases {
            client
                .batch_execute("DROP TABLE IF EXISTS posts")
                .await
                .unwrap();
            if setup.starts_with("ALTER") {
                client
                    .batch_execute(&Store::create_table_sql::<Post>())
                    .await
                    .unwrap();
            }
            if !setup.is_empty() {
                client.batch_execute(setup).await.unwrap();
            }
            let before = match setup {
                "" => Vec::new(),
                _ => rows(&client, "posts").await,
            };
            let error = Store::new().upsert(&client, &post()).await.unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error.kind(), ErrorKind::SchemaMismatch { collection, .. } if collection == "posts"),
                "{label}, {case}: {error:?}"
            );
            assert!(message.contains(expected), "{label}, {case}: {message}");
            assert!(
                !error.is_retryable() && !error.is_refusal(),
                "{label}, {case}"
            );
            if !setup.is_empty() {
                assert_eq!(rows(&client, "posts").await, before, "{label}, {case}");
            }
        }
    }
}

/// idem's writes join the caller's transaction: a rollback undoes them, and a refusal decided
/// by reading leaves the transaction usable.
#[tokio::test]
async fn writes_join_the_callers_transaction_and_a_refusal_leaves_it_usable() {
    for (label, mut client) in fresh_schemas("transactions").await {
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        {
            let tx = client.transaction().await.unwrap();
            assert_eq!(store.upsert(&tx, &post()).await.unwrap(), Outcome::Inserted);
            tx.rollback().await.unwrap();
        }
        assert!(
            rows(&client, "posts").await.is_empty(),
            "{label}: rolled back"
        );
        store.upsert(&client, &post()).await.unwrap();
        let before = rows(&client, "posts").await;
        let tx = client.transaction().await.unwrap();
        let other_author = Post {
            author_id: "grace".into(),
            ..post()
        };
        assert!(
            matches!(
                store
                    .upsert(&tx, &other_author)
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "author_id",
                    ..
                })
            ),
            "{label}"
        );
        let second = Post {
            slug: "second".into(),
            ..post()
        };
        assert_eq!(
            store.upsert(&tx, &second).await.unwrap(),
            Outcome::Inserted,
            "{label}: the transaction goes on after a refusal"
        );
        tx.commit().await.unwrap();
        let after = rows(&client, "posts").await;
        assert_eq!(after.len(), 2, "{label}");
        assert!(
            after.contains(&before[0]),
            "{label}: the refused row is intact"
        );
    }
}

/// A row another tool wrote (no hash, no digests) is compared exactly on the client: the same
/// frozen value is replaced once and gets its digests; another is refused with nothing written.
#[tokio::test]
async fn a_row_another_tool_wrote_is_compared_exactly_and_replaced_only_as_read() {
    for (label, client) in fresh_schemas("foreign").await {
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        let insert_foreign = |author: &'static str| {
            let client = &client;
            async move {
                client
                    .execute(
                        "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, body, \
                         \"fetchedAt\", \"authorId\") VALUES ($1, 'hello-world', 'en', \
                         1700000000000, 'Old', 'Old body', 1, $2)",
                        &[&post().id().unwrap().to_string(), &author],
                    )
                    .await
                    .unwrap();
            }
        };
        insert_foreign("grace").await;
        let before = rows(&client, "posts").await;
        match store
            .upsert(&client, &post())
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::FrozenFieldChanged {
                field,
                stored,
                incoming,
                ..
            }) => {
                assert_eq!(field, "author_id", "{label}");
                assert!(
                    stored.contains("grace") && incoming.contains("ada"),
                    "{label}"
                );
            }
            other => panic!("{label}: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            rows(&client, "posts").await,
            before,
            "{label}: nothing written"
        );

        client.batch_execute("DELETE FROM posts").await.unwrap();
        insert_foreign("ada").await;
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Updated,
            "{label}"
        );
        // One digest of the guarded fields, 16 bytes.
        let digest: Option<i32> = client
            .query_one("SELECT octet_length(\"idemFrozen\") FROM posts", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(digest, Some(16), "{label}");
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );
    }
}

/// A document with a unique `email` besides its natural key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

fn member(handle: &str, email: &str) -> Member {
    Member {
        handle: handle.into(),
        email: email.into(),
    }
}

/// Another unique constraint is a refusal naming it; in a batch, the other rows are written.
#[tokio::test]
async fn another_unique_constraint_is_a_refusal_naming_it_and_spares_the_rest_of_a_batch() {
    for (label, client) in fresh_schemas("unique").await {
        let store = Store::new();
        store.ensure_table::<Member, _>(&client).await.unwrap();
        client
            .batch_execute("ALTER TABLE members ADD CONSTRAINT members_email_key UNIQUE (email)")
            .await
            .unwrap();
        store.upsert(&client, &member("ada", "a@x")).await.unwrap();
        let before = rows(&client, "members").await;
        match store.upsert(&client, &member("eve", "a@x")).await {
            Err(error) if matches!(error.kind(), ErrorKind::UniqueIndexConflict { .. }) => {
                assert!(
                    error.to_string().contains("members_email_key"),
                    "{label}: {error}"
                );
                assert!(error.is_refusal() && !error.is_retryable(), "{label}");
            }
            other => panic!("{label}: expected a refusal, got {other:?}"),
        }
        assert_eq!(rows(&client, "members").await, before, "{label}");
        let report = store
            .upsert_many(
                &client,
                &[
                    member("bob", "b@x"),
                    member("eve", "a@x"),
                    member("cy", "c@x"),
                ],
            )
            .await
            .unwrap();
        let outcomes = report.outcomes();
        assert_eq!(outcomes[0].as_ref().unwrap(), &Outcome::Inserted, "{label}");
        assert!(
            matches!(
                outcomes[1].as_ref().map_err(Error::kind),
                Err(ErrorKind::UniqueIndexConflict { .. })
            ),
            "{label}"
        );
        assert_eq!(outcomes[2].as_ref().unwrap(), &Outcome::Inserted, "{label}");
        assert_eq!(rows(&client, "members").await.len(), 3, "{label}");
    }
}

/// Input a table cannot hold is refused on the client, naming the column, with nothing written.
#[tokio::test]
async fn a_value_a_column_cannot_hold_is_refused_naming_the_column() {
    for (label, client) in fresh_schemas("bad_input").await {
        let store = Store::new();
        store.ensure_table::<Member, _>(&client).await.unwrap();
        let error = store
            .upsert(&client, &member("ada", "nul\0byte"))
            .await
            .unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::Serialize { .. }),
            "{label}: {error:?}"
        );
        assert!(
            error.to_string().contains("field email"),
            "{label}: {error}"
        );
        assert!(error.to_string().contains("U+0000"), "{label}: {error}");
        assert!(rows(&client, "members").await.is_empty(), "{label}");
    }
}

/// One statement per chunk, whatever its size: the parameters are one array per column, so a
/// chunk of 70,000 rows (far over 65,535 bind parameters if each value were one) goes at once.
#[tokio::test]
async fn a_chunk_of_any_size_is_one_statement_under_the_bind_parameter_limit() {
    for (label, client) in fresh_schemas("big_batch").await {
        let store = Store::new().with_batch_chunk(100_000);
        store.ensure_table::<Member, _>(&client).await.unwrap();
        let members: Vec<Member> = (0..70_000)
            .map(|n| member(&format!("m{n}"), &format!("{n}@x")))
            .collect();
        let report = store.upsert_many(&client, &members).await.unwrap();
        assert_eq!(report.count(Outcome::Inserted), 70_000, "{label}");
        let again = store.upsert_many(&client, &members).await.unwrap();
        assert_eq!(again.count(Outcome::Unchanged), 70_000, "{label}");
    }
}

/// The derive's generated methods take `store.on(&client)`, a client or a transaction.
#[tokio::test]
async fn the_generated_methods_write_through_store_on_a_client_or_a_transaction() {
    for (label, mut client) in fresh_schemas("generated").await {
        let store = Store::new();
        Post::ensure_schema(&store.on(&client)).await.unwrap();
        let tx = client.transaction().await.unwrap();
        assert_eq!(
            post().upsert(&store.on(&tx)).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
        tx.commit().await.unwrap();
        assert_eq!(
            post().upsert(&store.on(&client)).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );
        assert_eq!(rows(&client, "posts").await.len(), 1, "{label}");
    }
}

/// A type that gained fields since its first rows were written: one `#[serde(default)]` field, and
/// a struct-level `#[serde(default)]` that covers another.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "gauges")]
#[serde(default)]
struct Gauge {
    #[idem(key)]
    name: String,
    unit: String,
    #[serde(default)]
    tags: Vec<String>,
    meta: serde_json::Value,
}

/// The columns a migration adds are NULL in the rows written before it: they read back as the
/// field's default where serde has one (a field that is neither left out nor defaulted reads a
/// NULL back as null: the contract suite's `contract/reads.rs`).
#[tokio::test]
async fn a_null_in_a_column_serde_can_default_reads_back_as_the_default() {
    for (label, client) in fresh_schemas("defaults").await {
        let store = Store::new();
        store.ensure_table::<Gauge, _>(&client).await.unwrap();
        let gauge = Gauge {
            name: "boiler".into(),
            unit: "kPa".into(),
            tags: vec!["roof".into()],
            meta: serde_json::json!({ "scale": 2 }),
        };
        store.upsert(&client, &gauge).await.unwrap();
        // What ALTER TABLE … ADD COLUMN leaves in the rows it did not write.
        client
            .batch_execute(r#"UPDATE gauges SET unit = NULL, tags = NULL, meta = NULL"#)
            .await
            .unwrap();
        let read = store
            .get::<Gauge, _>(&client, gauge.id().unwrap())
            .await
            .unwrap();
        assert_eq!(
            read,
            Some(Gauge {
                name: "boiler".into(),
                ..Gauge::default()
            }),
            "{label}"
        );
    }
}

/// A table whose migration lets the pushed list be NULL (a row another tool wrote without it):
/// a push treats NULL as the empty list, appends, and once only.
#[tokio::test]
async fn a_push_to_a_null_list_starts_the_list() {
    for (label, client) in fresh_schemas("null_list").await {
        let store = Store::new();
        store.ensure_table::<Playlist, _>(&client).await.unwrap();
        let playlist = Playlist {
            name: "road".into(),
            tracks: Vec::new(),
        };
        store.upsert(&client, &playlist).await.unwrap();
        client
            .batch_execute(
                "ALTER TABLE playlists ALTER COLUMN tracks DROP NOT NULL; \
                 UPDATE playlists SET tracks = NULL",
            )
            .await
            .unwrap();
        let track = Track {
            track: "intro".into(),
        };
        for expected in [Pushed::Appended, Pushed::AlreadyPresent] {
            let pushed = playlist.push_tracks(&store.on(&client), &track).await;
            assert_eq!(pushed.unwrap(), expected, "{label}");
        }
        let read = store
            .get::<Playlist, _>(&client, playlist.id().unwrap())
            .await
            .unwrap();
        assert_eq!(read.unwrap().tracks, [track], "{label}");
    }
}

/// An article as the service that writes it sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "articles")]
struct Article {
    #[idem(key)]
    slug: String,
    title: String,
    body: String,
}

/// The same table as a listing reads it: fewer columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "articles")]
struct ArticleSummary {
    #[idem(key)]
    slug: String,
    title: String,
}

/// Two types on one table, through one store: each is checked against the table and reads its
/// own columns, whichever the store met first.
#[tokio::test]
async fn two_types_on_one_table_each_read_their_own_columns() {
    for (label, client) in fresh_schemas("two_types").await {
        let store = Store::new();
        store.ensure_table::<Article, _>(&client).await.unwrap();
        let article = Article {
            slug: "intro".into(),
            title: "Intro".into(),
            body: "Hello".into(),
        };
        // The same natural key and scheme: the same id.
        let summary = ArticleSummary {
            slug: "intro".into(),
            title: "Intro".into(),
        };
        assert_eq!(article.id().unwrap(), summary.id().unwrap());
        let reader = Store::new();
        Store::new().upsert(&client, &article).await.unwrap();
        assert_eq!(
            reader
                .get::<ArticleSummary, _>(&client, summary.id().unwrap())
                .await
                .unwrap(),
            Some(summary),
            "{label}"
        );
        assert_eq!(
            reader
                .get::<Article, _>(&client, article.id().unwrap())
                .await
                .unwrap(),
            Some(article),
            "{label}"
        );
    }
}

/// A table whose migration lets the op ids be NULL (a row another tool wrote without them): an
/// operation treats NULL as no operation applied yet, applies once and records its id.
#[tokio::test]
async fn an_operation_on_a_row_without_op_ids_applies_once() {
    for (label, client) in fresh_schemas("null_ops").await {
        let store = Store::new();
        store.ensure_table::<Account, _>(&client).await.unwrap();
        let ada = account("ada");
        store.upsert(&client, &ada).await.unwrap();
        client
            .batch_execute(&format!(
                "ALTER TABLE accounts ALTER COLUMN \"{APPLIED_OPS_FIELD}\" DROP NOT NULL; \
                 UPDATE accounts SET \"{APPLIED_OPS_FIELD}\" = NULL"
            ))
            .await
            .unwrap();
        let op = OpId::new("deposit-1");
        let credit = [Change::add("balance", 25)];
        for expected in [Applied::Applied, Applied::AlreadyApplied] {
            let applied = store
                .apply_once::<Account, _>(&client, ada.id().unwrap(), &op, &credit)
                .await;
            assert_eq!(applied.unwrap(), expected, "{label}");
        }
        let balance: i64 = client
            .query_one("SELECT balance FROM accounts", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(balance, ada.balance + 25, "{label}");
    }
}

/// A field stored under a name longer than PostgreSQL keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "long_names")]
struct LongName {
    #[idem(key)]
    name: String,
    #[serde(rename = "a_field_name_generated_from_a_schema_file_that_is_longer_than_63")]
    title: String,
}

/// PostgreSQL cuts a name longer than 63 bytes silently, so a table made with it would never
/// match the model: `ensure_table` refuses it naming the column and creates nothing, and a write
/// is refused the same way.
#[tokio::test]
async fn a_name_postgresql_would_cut_is_refused_before_a_table_is_made() {
    for (label, client) in fresh_schemas("long_names").await {
        let store = Store::new();
        let refused = |error: Error| match error.into_kind() {
            ErrorKind::SchemaMismatch { problem, .. } => assert!(
                problem.contains(
                    "column \"a_field_name_generated_from_a_schema_file_that_is_longer_than_63\" \
                     is 64 bytes"
                ),
                "{label}: {problem}"
            ),
            other => panic!("{label}: expected SchemaMismatch, got {other:?}"),
        };
        refused(
            store
                .ensure_table::<LongName, _>(&client)
                .await
                .unwrap_err(),
        );
        let made: bool = client
            .query_one("SELECT to_regclass('long_names') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        assert!(!made, "{label}: no table was made");
        let doc = LongName {
            name: "a".into(),
            title: "t".into(),
        };
        refused(store.upsert(&client, &doc).await.unwrap_err());
    }
}

/// Sixteen transactions racing one new row converge as writes outside a transaction do: one
/// `Inserted`, the rest `Unchanged`, and one `insert_new` of a member inserts it once; every
/// transaction is usable to its commit. The race loses
/// sometimes on the primary key rather than the natural key (the statement's conflict target);
/// a savepoint around the statement keeps the caller's transaction alive for the retry.
#[tokio::test]
async fn transactions_racing_one_new_row_converge_and_stay_usable() {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 6;
    for (label, uri) in postgres_servers() {
        let (schema, setup) = fresh_schema(&uri, "p", "tx_race").await;
        let store = std::sync::Arc::new(Store::new());
        store.ensure_table::<Post, _>(&setup).await.unwrap();
        let mut clients = Vec::new();
        for _ in 0..WRITERS {
            clients.push(idem_tests::backends::postgres_client(&uri, &schema).await);
        }
        for round in 0..ROUNDS {
            let doc = Post {
                slug: format!("race-{round}"),
                ..post()
            };
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
            let mut writers = Vec::new();
            for mut client in std::mem::take(&mut clients) {
                let (store, doc, start) = (store.clone(), doc.clone(), start.clone());
                writers.push(tokio::spawn(async move {
                    let outcome = {
                        let tx = client.transaction().await.unwrap();
                        start.wait().await;
                        let outcome = store.upsert(&tx, &doc).await;
                        let award = Post {
                            slug: format!("{}-award", doc.slug),
                            ..doc.clone()
                        };
                        let inserted = store
                            .insert_new(&tx, std::slice::from_ref(&award))
                            .await
                            .map(|report| report.inserted().len());
                        // The transaction is usable after the call, whatever it answered.
                        let alive: i32 = match tx.query_one("SELECT 1", &[]).await {
                            Ok(row) => row.get(0),
                            Err(error) => panic!("the transaction is aborted: {error}"),
                        };
                        assert_eq!(alive, 1);
                        tx.commit().await.unwrap();
                        (outcome, inserted)
                    };
                    (client, outcome)
                }));
            }
            let mut outcomes = Vec::new();
            let mut awards = Vec::new();
            for writer in writers {
                let (client, (outcome, inserted)) = writer.await.unwrap();
                clients.push(client);
                outcomes.push(outcome);
                awards.push(inserted.unwrap());
            }
            assert_eq!(
                awards.iter().sum::<usize>(),
                1,
                "{label} round {round}: insert_new inserts the member once: {awards:?}"
            );
            let inserted = outcomes
                .iter()
                .filter(|outcome| matches!(outcome, Ok(Outcome::Inserted)))
                .count();
            let unchanged = outcomes
                .iter()
                .filter(|outcome| matches!(outcome, Ok(Outcome::Unchanged)))
                .count();
            assert_eq!(
                (inserted, unchanged),
                (1, WRITERS - 1),
                "{label} round {round}: {outcomes:?}"
            );
        }
        assert_eq!(rows(&setup, "posts").await.len(), 2 * ROUNDS, "{label}");
    }
}

/// A batch inside the caller's transaction meeting a CHECK constraint and another unique
/// constraint: each refusal is the server's own error against the row that caused it, the other
/// rows are written, and the transaction goes on to its commit.
#[tokio::test]
async fn a_batch_refused_in_part_inside_a_transaction_names_the_row_and_keeps_it_usable() {
    for (label, mut client) in fresh_schemas("tx_batch").await {
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        client
            .batch_execute(
                "ALTER TABLE posts ADD CONSTRAINT title_is_not_bad CHECK (title <> 'bad'); \
                 CREATE UNIQUE INDEX posts_body_unique ON posts (body)",
            )
            .await
            .unwrap();
        store
            .upsert(
                &client,
                &Post {
                    slug: "taken".into(),
                    body: "taken body".into(),
                    ..post()
                },
            )
            .await
            .unwrap();
        let doc = |slug: &str, title: &str, body: &str| Post {
            slug: slug.into(),
            title: title.into(),
            body: body.into(),
            ..post()
        };
        let batch = [
            doc("first", "fine", "first body"),
            doc("checked", "bad", "checked body"),
            doc("clashing", "fine", "taken body"),
            doc("last", "fine", "last body"),
        ];
        let tx = client.transaction().await.unwrap();
        let report = store.upsert_many(&tx, &batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{label}: {outcomes:?}"
        );
        match &outcomes[1] {
            Err(error) => {
                assert!(
                    error.to_string().contains("title_is_not_bad")
                        && error.to_string().contains("checked"),
                    "{label}: the CHECK refusal names the row and the constraint: {error}"
                );
                assert_eq!(
                    error.as_backend().and_then(|backend| backend.code()),
                    Some("23514"),
                    "{label}"
                );
            }
            other => panic!("{label}: the CHECK constraint refuses the row: {other:?}"),
        }
        match &outcomes[2] {
            Err(error) => match error.kind() {
                ErrorKind::UniqueIndexConflict { index } => {
                    assert_eq!(index, "posts_body_unique", "{label}");
                    assert!(error.document().to_string().contains("clashing"), "{label}");
                }
                _ => panic!("{label}: the other unique index refuses the row: {error:?}"),
            },
            other => panic!("{label}: the other unique index refuses the row: {other:?}"),
        }
        assert!(
            matches!(outcomes[3], Ok(Outcome::Inserted)),
            "{label}: {outcomes:?}"
        );
        let second = doc("after", "fine", "after body");
        assert_eq!(
            store.upsert(&tx, &second).await.unwrap(),
            Outcome::Inserted,
            "{label}: the transaction goes on"
        );
        tx.commit().await.unwrap();
        let slugs: Vec<String> = client
            .query("SELECT slug FROM posts ORDER BY slug", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(slugs, ["after", "first", "last", "taken"], "{label}");
    }
}

/// A batch whose rows the guard refuses (a frozen field changed) is judged from the lookup
/// before its write: no row is written or even locked, so the refused rows' `xmin` and `xmax`
/// stay as they were (a lock taken by `ON CONFLICT DO UPDATE` sets `xmax`).
#[tokio::test]
async fn rows_a_batch_refuses_are_neither_written_nor_locked() {
    for (label, client) in fresh_schemas("refused_unlocked").await {
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        let stored: Vec<Post> = (0..200).map(numbered_post).collect();
        store.upsert_many(&client, &stored).await.unwrap();
        let before = row_versions(&client).await;
        let moved: Vec<Post> = stored
            .iter()
            .map(|doc| Post {
                author_id: "grace".into(),
                ..doc.clone()
            })
            .collect();
        let report = store.upsert_many(&client, &moved).await.unwrap();
        assert!(
            report.outcomes().iter().all(|outcome| matches!(
                outcome.as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "author_id",
                    ..
                })
            )),
            "{label}: {report}"
        );
        assert_eq!(
            row_versions(&client).await,
            before,
            "{label}: the refused rows are neither written nor locked"
        );
    }
}

/// Each post's `xmin` and `xmax`: what a write or a row lock changes.
async fn row_versions(client: &tokio_postgres::Client) -> Vec<String> {
    rows_shown(client, "posts", "t.xmin::text || ' ' || t.xmax::text").await
}

/// A release: a frozen owner and a version, so that a stored row carries digests and a
/// version key beside its content hash.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "releases")]
struct Release {
    #[idem(key)]
    name: String,
    #[idem(frozen)]
    owner: String,
    #[idem(version)]
    revision: u32,
    notes: String,
}

/// A type whose stored hash carries the hash function's name before its hex digits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes", hash_algorithm = "blake3")]
struct Note {
    #[idem(key)]
    title: String,
    #[idem(frozen)]
    author: String,
    text: String,
}

/// A type with versions and nothing guarded: its lookup compares the version key with the hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "drafts")]
struct Draft {
    #[idem(key)]
    name: String,
    #[idem(version)]
    revision: u32,
    text: String,
}

/// An unchanged re-ingest is settled by its lookup's shortcut, through tokio-postgres and sqlx:
/// each row is sent with its content hash as bytes, which the server compares with the stored
/// text (its hex digits, after `blake3:` for BLAKE3), and its version key where the type has
/// versions; a type without is settled by the hash alone. So the lookup reads one index entry
/// per row and returns nothing. A hash or version key sent otherwise than stored would cost
/// nothing but speed (each row would come back, two more index scans, and be judged
/// `Unchanged` from what was read), so the scans are counted.
#[tokio::test]
async fn an_unchanged_reingest_is_settled_by_the_lookup() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "p", "settled_by_lookup").await;
        let mut sqlx = sqlx_connection(&uri, &schema).await;
        let releases: Vec<Release> = (0..100)
            .map(|n| Release {
                name: format!("release-{n}"),
                owner: "ada".into(),
                revision: n,
                notes: format!("notes \"{n}\"\n"),
            })
            .collect();
        let members: Vec<Member> = (0..100)
            .map(|n| member(&format!("member-{n}"), &format!("{n}@example.com")))
            .collect();
        let notes: Vec<Note> = (0..100)
            .map(|n| Note {
                title: format!("note-{n}"),
                author: "ada".into(),
                text: format!("{n}"),
            })
            .collect();
        let drafts: Vec<Draft> = (0..100)
            .map(|n| Draft {
                name: format!("draft-{n}"),
                revision: n % 3,
                text: format!("{n}"),
            })
            .collect();
        // Each through tokio-postgres, then through sqlx, which binds the arrays itself.
        for through_sqlx in [false, true] {
            let mut sqlx = through_sqlx.then_some(&mut sqlx);
            let label = format!("{label}{}", if through_sqlx { " (sqlx)" } else { "" });
            settled_by_the_lookup(&label, &client, sqlx.as_deref_mut(), "releases", &releases)
                .await;
            settled_by_the_lookup(&label, &client, sqlx.as_deref_mut(), "members", &members).await;
            settled_by_the_lookup(&label, &client, sqlx.as_deref_mut(), "notes", &notes).await;
            settled_by_the_lookup(&label, &client, sqlx, "drafts", &drafts).await;
        }
    }
}

/// Writes `docs` into `table` (if they are not there yet), then again through `sqlx` if given,
/// else through `client`, and checks that the second time each settled `Unchanged` from the
/// lookup's one index scan per row.
async fn settled_by_the_lookup<T>(
    label: &str,
    client: &tokio_postgres::Client,
    sqlx: Option<&mut PgConnection>,
    table: &str,
    docs: &[T],
) where
    T: Idempotent + Serialize + serde::de::DeserializeOwned + Sync,
{
    let store = Store::new();
    store.ensure_table::<T, _>(client).await.unwrap();
    store.upsert_many(client, docs).await.unwrap();
    let before = index_scans(client, table).await;
    let (report, after) = match sqlx {
        Some(connection) => {
            let report = store.upsert_many(&mut *connection, docs).await.unwrap();
            (report, index_scans_through_sqlx(connection, table).await)
        }
        None => {
            let report = store.upsert_many(client, docs).await.unwrap();
            (report, index_scans(client, table).await)
        }
    };
    assert!(
        report
            .outcomes()
            .iter()
            .all(|outcome| matches!(outcome, Ok(Outcome::Unchanged))),
        "{label}: {table}: {report}"
    );
    assert_eq!(
        after - before,
        i64::try_from(docs.len()).unwrap(),
        "{label}: {table}: one index scan per row, none to read a row back"
    );
}

/// [`index_scans`] of a sqlx connection, whose own scans it counts.
async fn index_scans_through_sqlx(connection: &mut PgConnection, table: &str) -> i64 {
    idem_core::sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *connection)
        .await
        .unwrap();
    idem_core::sqlx::query_scalar(
        "SELECT COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
    )
    .bind(table)
    .fetch_one(&mut *connection)
    .await
    .unwrap()
}

/// The index scans of `table` so far, with this connection's own counted.
async fn index_scans(client: &tokio_postgres::Client, table: &str) -> i64 {
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    client
        .query_one(
            "SELECT COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
            &[&table],
        )
        .await
        .unwrap()
        .get(0)
}

/// After a chunk inserted whole, the next goes as a plain insert of fresh rows; a CHECK that
/// one of its rows fails makes that insert fail whole, and the rows go the guarded way: that
/// row alone is refused, naming the constraint, and the others are inserted.
#[tokio::test]
async fn a_check_that_fails_a_fresh_chunk_refuses_only_its_row() {
    for (label, client) in fresh_schemas("fresh_check").await {
        let store = Store::new().with_batch_chunk(64);
        store.ensure_table::<Post, _>(&client).await.unwrap();
        client
            .batch_execute(
                "ALTER TABLE posts ADD CONSTRAINT title_is_short CHECK (length(title) < 30)",
            )
            .await
            .unwrap();
        let mut posts: Vec<Post> = (0..128).map(numbered_post).collect();
        posts[100].title = "a title far too long for the check".into();
        let report = store.upsert_many(&client, &posts).await.unwrap();
        for (at, outcome) in report.outcomes().iter().enumerate() {
            match (at, outcome) {
                (100, Err(error)) => {
                    let backend = error.as_backend().expect("the server's refusal");
                    assert_eq!(backend.constraint(), Some("title_is_short"), "{label}");
                }
                (100, other) => panic!("{label}: the long title is refused: {other:?}"),
                (_, outcome) => {
                    assert!(
                        matches!(outcome, Ok(Outcome::Inserted)),
                        "{label}: {at}: {outcome:?}"
                    )
                }
            }
        }
        let stored = rows_shown(&client, "posts", "t.slug").await;
        assert_eq!(stored.len(), 127, "{label}: every other post is stored");
        assert!(!stored.contains(&"post-100".to_owned()), "{label}");

        // In a transaction, the failed insert is undone to its savepoint, and the transaction
        // goes on.
        let mut client = client;
        let tx = client.transaction().await.unwrap();
        for post in &mut posts {
            post.slug = format!("{}-again", post.slug);
        }
        let report = store.upsert_many(&tx, &posts).await.unwrap();
        assert_eq!(
            report
                .outcomes()
                .iter()
                .filter(|outcome| outcome.is_err())
                .count(),
            1
        );
        tx.commit().await.unwrap();
        let stored = rows_shown(&client, "posts", "t.slug").await;
        assert_eq!(
            stored.len(),
            2 * 127,
            "{label}: the transaction's posts are stored"
        );
    }
}

/// A trigger that drops some rows of an insert (returns NULL): a chunk sent as fresh rows
/// that loses one to it must not keep the others (they would then be taken for stored rows and
/// answered `Unchanged`). The insert fails whole, and the rows go the guarded way: the others
/// are `Inserted`, as single upserts answer them, and the dropped one is contended.
#[tokio::test]
async fn a_trigger_that_drops_rows_of_a_fresh_chunk_leaves_no_half_of_it() {
    for (label, client) in fresh_schemas("fresh_trigger").await {
        let store = Store::new().with_batch_chunk(64);
        store.ensure_table::<Post, _>(&client).await.unwrap();
        client
            .batch_execute(
                "CREATE FUNCTION drop_hidden() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN IF NEW.title = 'hidden' THEN RETURN NULL; END IF; RETURN NEW; END $$; \
                 CREATE TRIGGER drop_hidden BEFORE INSERT ON posts \
                 FOR EACH ROW EXECUTE FUNCTION drop_hidden()",
            )
            .await
            .unwrap();
        let mut posts: Vec<Post> = (0..128).map(numbered_post).collect();
        posts[100].title = "hidden".into();
        let report = store.upsert_many(&client, &posts).await.unwrap();
        for (at, outcome) in report.outcomes().iter().enumerate() {
            match at {
                100 => assert!(
                    matches!(
                        outcome.as_ref().map_err(Error::kind),
                        Err(ErrorKind::Contention)
                    ),
                    "{label}: the dropped row: {outcome:?}"
                ),
                _ => assert!(
                    matches!(outcome, Ok(Outcome::Inserted)),
                    "{label}: {at}: {outcome:?}"
                ),
            }
        }
        assert_eq!(
            rows_shown(&client, "posts", "t.slug").await.len(),
            127,
            "{label}"
        );
    }
}

/// On a tokio-postgres client outside a transaction, a batch sends its next chunk while the
/// last awaits its answer, so the server starts on it without waiting for the client: through a
/// proxy that holds each answer 50 ms, an unchanged re-ingest of five chunks has two lookups
/// awaiting their answers at once, and each row still settles `Unchanged`. Inside a
/// transaction (where a failed write aborts every statement after it until its savepoint is
/// rolled back to), through sqlx, and on a client of a store told not to pipeline, each chunk
/// waits for the one before.
#[tokio::test]
async fn a_batchs_chunks_are_in_flight_together_only_where_one_cannot_fail_another() {
    for (label, uri) in postgres_servers() {
        let posts: Vec<Post> = (0..320).map(numbered_post).collect();
        for way in ["client", "transaction", "sqlx", "unpipelined"] {
            let (outcomes, stats) =
                through_a_slow_proxy(&uri, "chunks_in_flight", way, "", &posts, &posts).await;
            assert!(
                outcomes.iter().all(|outcome| outcome == "Unchanged"),
                "{label}: through a {way}: {outcomes:?}"
            );
            let expected = if way == "client" { 2 } else { 1 };
            assert_eq!(
                stats.most_outstanding, expected,
                "{label}: through a {way}: the most statements awaiting an answer at once"
            );
        }
    }
}

/// A first ingest pays one lookup, and its inserts follow one another on the server without
/// waiting for the client: the second chunk is prepared for its insert once the first chunk's
/// lookup finds none of its rows stored, and sent while the first chunk's insert awaits its
/// answer, to write only if that insert landed. Through a proxy that holds each answer 50 ms,
/// two chunks of new rows on a client: three statements (the second insert wrote its rows the
/// first time), two of them awaiting an answer at once.
#[tokio::test]
async fn a_first_ingest_pays_one_lookup_and_sends_its_inserts_back_to_back() {
    for (label, uri) in postgres_servers() {
        let posts: Vec<Post> = (0..128).map(numbered_post).collect();
        let (outcomes, stats) =
            through_a_slow_proxy(&uri, "first_ingest", "client", "", &[], &posts).await;
        assert!(
            outcomes.iter().all(|outcome| outcome == "Inserted"),
            "{label}: {outcomes:?}"
        );
        assert_eq!(
            stats.write_requests, 3,
            "{label}: one lookup, then one insert per chunk"
        );
        assert_eq!(
            stats.most_outstanding, 2,
            "{label}: the second insert was sent behind the first"
        );
    }
}

/// A chunk's insert sent behind the chunk ahead's writes nothing unless that insert landed, so
/// rows are still written in input order when it does not. A first ingest of three chunks: the
/// second's insert is slowed at the server (a trigger sleeps on one of its rows) and then fails
/// on a row stored already, while the third's insert, sent behind it, waits at the server; the
/// third chunk holds a row whose title, under a unique index, is that of a new row of the
/// second. The second chunk's rows go the guarded way and its new row is inserted; the third
/// chunk's insert, which ran before that, wrote nothing, and its row sharing the title is
/// refused, naming the index, as single upserts in input order would have it.
#[tokio::test]
async fn an_insert_sent_behind_one_that_fails_writes_nothing() {
    for (label, uri) in postgres_servers() {
        let titled = |n: usize| Post {
            title: format!("title-{n}"),
            ..numbered_post(n)
        };
        let stored = vec![titled(100)];
        let mut batch: Vec<Post> = (0..192).map(titled).collect();
        batch[70].title = "slow".into();
        batch[150].title = "title-90".into();
        let setup = "CREATE UNIQUE INDEX posts_title ON posts (title);\
            CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS \
            $$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;\
            CREATE TRIGGER slow_insert BEFORE INSERT ON posts FOR EACH ROW \
            WHEN (NEW.title = 'slow') EXECUTE FUNCTION slow_insert();";
        let (outcomes, stats) =
            through_a_slow_proxy(&uri, "behind_a_failure", "client", setup, &stored, &batch).await;
        for (at, outcome) in outcomes.iter().enumerate() {
            match at {
                100 => assert_eq!(outcome, "Unchanged", "{label}: {at}"),
                150 => assert!(
                    outcome.contains("posts_title"),
                    "{label}: the later of two rows sharing a title is refused, naming the \
                     index: {outcome}"
                ),
                _ => assert_eq!(outcome, "Inserted", "{label}: {at}"),
            }
        }
        // The lookup and the inserts of the first two chunks, the third's insert sent behind
        // the second's, the second chunk's upsert, the third's insert again, and its upserts.
        assert!(
            stats.write_requests >= 7,
            "{label}: {} statements",
            stats.write_requests
        );
        assert_eq!(stats.most_outstanding, 2, "{label}");
    }
}

/// Chunks in flight together settle each alone, and write in input order: a batch of five
/// chunks over rows stored unchanged, new, edited (whose chunk's plain insert of fresh rows fails
/// on it while the next chunk is in flight) and refused for a frozen field, through a proxy that
/// holds each answer 50 ms, gives every row what a single upsert gives it, on a client and in a
/// transaction. Two new rows of two chunks share a title under a unique index of the caller's:
/// the first in input order is inserted and the second refused, naming the index, although the
/// later chunk's write could reach the server first (the earlier one needs a second statement).
#[tokio::test]
async fn chunks_in_flight_together_settle_as_single_upserts() {
    for (label, uri) in postgres_servers() {
        let titled = |n: usize| Post {
            title: format!("title-{n}"),
            ..numbered_post(n)
        };
        let stored: Vec<Post> = (0..64).chain([130, 200, 260]).map(titled).collect();
        let mut batch: Vec<Post> = (0..320).map(titled).collect();
        batch[130].author_id = "grace".into();
        batch[200].body = "Edited.".into();
        batch[260].body = "Edited too.".into();
        batch[270].title = "title-210".into();
        let mut expected = vec!["Inserted".to_owned(); 320];
        expected[..64].fill("Unchanged".to_owned());
        expected[200] = "Updated".into();
        expected[260] = "Updated".into();
        for way in ["client", "transaction"] {
            let (outcomes, stats) = through_a_slow_proxy(
                &uri,
                "in_flight_settle",
                way,
                "CREATE UNIQUE INDEX posts_title ON posts (title)",
                &stored,
                &batch,
            )
            .await;
            assert!(
                outcomes[130].contains("`author_id` (stored as `authorId`) may not change"),
                "{label}: through a {way}: {}",
                outcomes[130]
            );
            assert!(
                outcomes[270].contains("posts_title"),
                "{label}: through a {way}: the later of two rows sharing a title is refused, \
                 naming the index: {}",
                outcomes[270]
            );
            expected[130] = outcomes[130].clone();
            expected[270] = outcomes[270].clone();
            assert_eq!(outcomes, expected, "{label}: through a {way}");
            // On a client, a chunk's lookup with the chunk before it in flight; in a
            // transaction, one write's savepoint, statement and release, pipelined.
            let expected_outstanding = if way == "client" { 2 } else { 3 };
            assert_eq!(
                stats.most_outstanding, expected_outstanding,
                "{label}: through a {way}: the most requests awaiting an answer at once"
            );
        }
    }
}

/// On a fresh schema of `uri` holding `stored` (after `setup`, SQL run once the table exists),
/// upserts `batch` through a proxy that holds each answer 50 ms: on a tokio-postgres client, inside a transaction of one, on a sqlx
/// connection, or on a client of a store told not to pipeline (`way`), in chunks of 64 that
/// take the batch's shortcuts. Returns each outcome
/// shown, and what the proxy counted (its write requests are idem's statements that begin with
/// `WITH`: the lookups and the writes).
async fn through_a_slow_proxy(
    uri: &str,
    test: &str,
    way: &str,
    setup: &str,
    stored: &[Post],
    batch: &[Post],
) -> (Vec<String>, ProxyStats) {
    let (schema, client) = fresh_schema(uri, "p", test).await;
    let store = Store::new()
        .with_batch_chunk(64)
        .with_shortcuts_from(64)
        .with_pipelining(way != "unpipelined");
    store.ensure_table::<Post, _>(&client).await.unwrap();
    client.batch_execute(setup).await.unwrap();
    store.upsert_many(&client, stored).await.unwrap();
    let base: tokio_postgres::Config = uri.parse().unwrap();
    let mut config = ProxyConfig::new(1, Faults::NONE);
    config.reply_delay = std::time::Duration::from_millis(50);
    let proxy = Proxy::start(&upstream_address(&base).unwrap(), PostgresWire, config)
        .await
        .unwrap();
    let report = match way {
        "sqlx" => {
            use idem_core::sqlx::ConnectOptions as _;
            let options: idem_core::sqlx::postgres::PgConnectOptions = uri.parse().unwrap();
            let mut connection: PgConnection = options
                .host(&proxy.addr().ip().to_string())
                .port(proxy.addr().port())
                .options([("search_path", schema.as_str())])
                .connect()
                .await
                .unwrap();
            store.upsert_many(&mut connection, batch).await
        }
        _ => {
            let mut client = connect(&connection_config(&base, &schema, Some(proxy.addr())))
                .await
                .unwrap();
            match way {
                "transaction" => {
                    let transaction = client.transaction().await.unwrap();
                    let report = store.upsert_many(&transaction, batch).await;
                    transaction.commit().await.unwrap();
                    report
                }
                _ => store.upsert_many(&client, batch).await,
            }
        }
    };
    let outcomes = report
        .unwrap()
        .outcomes()
        .iter()
        .map(|outcome| match outcome {
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => error.to_string(),
        })
        .collect();
    (outcomes, proxy.stats())
}

/// Two batches on one client at once, each a first ingest of five chunks sent behind one
/// another: their inserts interleave on the session, so a chunk often finds there the mark of
/// the other batch's insert instead of its own chunk ahead's, writes nothing, and goes again in
/// its turn. One of them also meets a row stored already in its third chunk. Every row ends
/// written once, with the outcome a single upsert gives it.
#[tokio::test]
async fn two_batches_on_one_client_interleave_their_inserts_safely() {
    for (label, client) in fresh_schemas("interleaved_batches").await {
        let store = Store::new().with_batch_chunk(64).with_shortcuts_from(64);
        store.ensure_table::<Post, _>(&client).await.unwrap();
        let first: Vec<Post> = (0..320).map(numbered_post).collect();
        let second: Vec<Post> = (1000..1320).map(numbered_post).collect();
        store.upsert_many(&client, &second[150..151]).await.unwrap();
        let (first_report, second_report) = tokio::join!(
            store.upsert_many(&client, &first),
            store.upsert_many(&client, &second)
        );
        let (first_report, second_report) = (first_report.unwrap(), second_report.unwrap());
        for (at, outcome) in first_report.outcomes().iter().enumerate() {
            assert!(
                matches!(outcome, Ok(Outcome::Inserted)),
                "{label}: first batch, {at}: {outcome:?}"
            );
        }
        for (at, outcome) in second_report.outcomes().iter().enumerate() {
            let expected = if at == 150 {
                Outcome::Unchanged
            } else {
                Outcome::Inserted
            };
            assert_eq!(
                outcome.as_ref().ok(),
                Some(&expected),
                "{label}: second batch, {at}: {outcome:?}"
            );
        }
        assert_eq!(rows(&client, "posts").await.len(), 640, "{label}");
    }
}

/// Services starting at once each ensure the table: `CREATE TABLE IF NOT EXISTS` run by several
/// sessions at the same moment lets one create it and fails the others on the catalog (the
/// table is not yet visible to them). Each call then finds the table the other made, checks it,
/// and succeeds. An enum type of the table's name fails the creation the same way (the table's
/// row type would take its name); the check then finds no table, and the call reports the
/// creation's refusal.
#[tokio::test]
async fn sessions_ensuring_one_table_at_once_all_succeed() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "p", "ensure_beside_a_type").await;
        client
            .batch_execute("CREATE TYPE posts AS ENUM ('draft')")
            .await
            .unwrap();
        let refusal = Store::new()
            .ensure_table::<Post, _>(&client)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refusal.contains("type \"posts\" already exists"),
            "{label}: {refusal}"
        );
        let base: tokio_postgres::Config = uri.parse().unwrap();
        for round in 0..5 {
            let (schema, _client) =
                fresh_schema(&uri, "p", &format!("ensure_at_once_{round}")).await;
            let store = Store::new();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..8 {
                let client = connect(&connection_config(&base, &schema, None))
                    .await
                    .unwrap();
                let store = store.clone();
                tasks.spawn(async move { store.ensure_table::<Post, _>(&client).await });
            }
            let results = tasks.join_all().await;
            for result in results {
                assert!(result.is_ok(), "{label}: {result:?}");
            }
        }
    }
}
