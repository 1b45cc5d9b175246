//! The PostgreSQL store through sqlx, on every PostgreSQL server under test, where it differs
//! from tokio-postgres: what is passed (a `PgConnection`, a pool's connection, a `Transaction`),
//! the caller's transactions (a savepoint per write, sent as its own round trip), sqlx's errors,
//! and the audit's streamed read. Everything else the store does is the contract suite's, which
//! runs on both drivers (`pg15`/`pg18` and `pg15-sqlx`/`pg18-sqlx`).

use idem_core::postgres::Store;
use idem_core::sqlx::postgres::{PgPool, PgPoolOptions};
use idem_core::sqlx::{Connection, PgConnection};
use idem_core::{Error, ErrorKind, Outcome};
use idem_tests::backends::{
    fresh_schema, postgres_servers, rows_shown, sqlx_connection, WITH_VERSION,
};
use idem_tests::fixtures::{post, Post};
use serde_json::json;

/// Each server's label, a fresh schema on it and a sqlx connection whose search path is that
/// schema; and a tokio-postgres client on it to look at what was stored.
async fn fresh(test: &str) -> Vec<(String, PgConnection, tokio_postgres::Client, String)> {
    let mut found = Vec::new();
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "x", test).await;
        let connection = sqlx_connection(&uri, &schema).await;
        found.push((label, connection, client, uri));
    }
    found
}

/// Each row of `table` with its row version, which any write changes.
async fn rows(client: &tokio_postgres::Client, table: &str) -> Vec<String> {
    rows_shown(client, table, WITH_VERSION).await
}

/// idem's writes join a sqlx transaction: a rollback undoes them, a commit keeps them, and a
/// refusal (decided by reading) or a server's refusal (a CHECK) leaves the transaction usable.
#[tokio::test]
async fn writes_join_a_sqlx_transaction_and_a_refusal_leaves_it_usable() {
    for (label, mut connection, client, _) in fresh("sqlx_transactions").await {
        let store = Store::new();
        store
            .ensure_table::<Post, _>(&mut connection)
            .await
            .unwrap();
        client
            .batch_execute(
                "ALTER TABLE posts ADD CONSTRAINT title_is_not_bad CHECK (title <> 'bad')",
            )
            .await
            .unwrap();
        {
            let mut tx = connection.begin().await.unwrap();
            assert_eq!(
                store.upsert(&mut tx, &post()).await.unwrap(),
                Outcome::Inserted,
                "{label}"
            );
            tx.rollback().await.unwrap();
        }
        assert!(
            rows(&client, "posts").await.is_empty(),
            "{label}: rolled back"
        );
        store.upsert(&mut connection, &post()).await.unwrap();
        let before = rows(&client, "posts").await;

        let mut tx = connection.begin().await.unwrap();
        let other_author = Post {
            author_id: "grace".into(),
            ..post()
        };
        assert!(
            matches!(
                store
                    .upsert(&mut *tx, &other_author)
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "author_id",
                    ..
                })
            ),
            "{label}"
        );
        let bad = Post {
            slug: "bad".into(),
            title: "bad".into(),
            ..post()
        };
        let refused = store.upsert(&mut tx, &bad).await.unwrap_err();
        let backend = refused.as_backend().expect("the server's refusal");
        assert_eq!(backend.code(), Some("23514"), "{label}: {refused}");
        assert_eq!(backend.constraint(), Some("title_is_not_bad"), "{label}");
        assert!(
            refused.as_sqlx().is_some(),
            "{label}: sqlx's error is kept whole: {refused:?}"
        );
        assert!(refused.is_refusal(), "{label}: the row itself is refused");
        let second = Post {
            slug: "second".into(),
            ..post()
        };
        assert_eq!(
            store.upsert(&mut tx, &second).await.unwrap(),
            Outcome::Inserted,
            "{label}: the transaction goes on after both refusals"
        );
        tx.commit().await.unwrap();
        let after = rows(&client, "posts").await;
        assert_eq!(after.len(), 2, "{label}: {after:?}");
        assert!(
            after.contains(&before[0]),
            "{label}: the refused row is intact"
        );
    }
}

/// Sixteen sqlx transactions from one pool racing one new row converge as writes outside a
/// transaction do: one `Inserted`, the rest `Unchanged`, one `insert_new` of a member inserts
/// it once, and every transaction is usable to its commit.
#[tokio::test]
async fn sqlx_transactions_racing_one_new_row_converge_and_stay_usable() {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 4;
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "x", "sqlx_tx_race").await;
        let pool = pool(&uri, &schema, WRITERS as u32).await;
        let store = std::sync::Arc::new(Store::new());
        store
            .ensure_table::<Post, _>(&mut pool.acquire().await.unwrap())
            .await
            .unwrap();
        for round in 0..ROUNDS {
            let doc = Post {
                slug: format!("race-{round}"),
                ..post()
            };
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
            let mut writers = Vec::new();
            for _ in 0..WRITERS {
                let (store, doc, start, pool) =
                    (store.clone(), doc.clone(), start.clone(), pool.clone());
                writers.push(tokio::spawn(async move {
                    let mut tx = pool.begin().await.unwrap();
                    start.wait().await;
                    let outcome = store.upsert(&mut tx, &doc).await;
                    let award = Post {
                        slug: format!("{}-award", doc.slug),
                        ..doc.clone()
                    };
                    let inserted = store
                        .insert_new(&mut tx, std::slice::from_ref(&award))
                        .await
                        .map(|report| report.inserted().len());
                    // The transaction is usable after the calls, whatever they answered.
                    let alive: i32 = idem_core::sqlx::query_scalar("SELECT 1")
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap_or_else(|error| panic!("the transaction is aborted: {error}"));
                    assert_eq!(alive, 1);
                    tx.commit().await.unwrap();
                    (outcome, inserted)
                }));
            }
            let mut outcomes = Vec::new();
            let mut awards = Vec::new();
            for writer in writers {
                let (outcome, inserted) = writer.await.unwrap();
                outcomes.push(outcome);
                awards.push(inserted.unwrap());
            }
            assert_eq!(
                awards.iter().sum::<usize>(),
                1,
                "{label} round {round}: insert_new inserts the member once: {awards:?}"
            );
            let count = |wanted: Outcome| {
                outcomes
                    .iter()
                    .filter(|outcome| matches!(outcome, Ok(found) if *found == wanted))
                    .count()
            };
            assert_eq!(
                (count(Outcome::Inserted), count(Outcome::Unchanged)),
                (1, WRITERS - 1),
                "{label} round {round}: {outcomes:?}"
            );
        }
        assert_eq!(rows(&client, "posts").await.len(), 2 * ROUNDS, "{label}");
    }
}

/// A pool of `size` sqlx connections to `schema` on the server at `uri`.
async fn pool(uri: &str, schema: &str, size: u32) -> PgPool {
    let options: idem_core::sqlx::postgres::PgConnectOptions = uri.parse().unwrap();
    PgPoolOptions::new()
        .max_connections(size)
        .connect_with(options.options([("search_path", schema)]))
        .await
        .expect("a pool")
}

/// The derive's generated methods and the `Backend` API take `store.on(…)` of a sqlx
/// connection, a pool's connection or a transaction, as they take a tokio-postgres client.
#[tokio::test]
async fn the_generated_methods_write_through_store_on_a_sqlx_connection() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "x", "sqlx_on").await;
        let pool = pool(&uri, &schema, 2).await;
        let store = Store::new();
        let mut pooled = pool.acquire().await.unwrap();
        Post::ensure_schema(&store.on(&mut pooled)).await.unwrap();
        assert_eq!(
            post().upsert(&store.on(&mut pooled)).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
        let mut tx = pool.begin().await.unwrap();
        let found = Post::find(&store.on(&mut tx), "hello-world", "en")
            .await
            .unwrap();
        assert_eq!(found, Some(post()), "{label}: read inside the transaction");
        assert_eq!(
            post().upsert(&store.on(&mut *tx)).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );
        tx.commit().await.unwrap();
        assert_eq!(rows(&client, "posts").await.len(), 1, "{label}");
    }
}

/// The audit reads the table as one stream through sqlx, and `adopt` moves a row another tool
/// stored under its own id to the derived one; the table is clean afterwards.
#[tokio::test]
async fn audit_and_adopt_run_through_sqlx() {
    for (label, mut connection, client, _) in fresh("sqlx_audit").await {
        let store = Store::new();
        store
            .ensure_table::<Post, _>(&mut connection)
            .await
            .unwrap();
        let mut docs = Vec::new();
        for index in 0..300 {
            docs.push(Post {
                slug: format!("post-{index}"),
                ..post()
            });
        }
        store.upsert_many(&mut connection, &docs).await.unwrap();
        // Another tool's row: its own id, no hash, no digests.
        let legacy = Post {
            slug: "legacy".into(),
            title: "Old".into(),
            body: "Body".into(),
            fetched_at: 0,
            ..post()
        };
        let mut stored = serde_json::to_value(&legacy).unwrap();
        stored["_id"] = json!("legacy-1");
        stored["idemAppliedOps"] = json!([]);
        client
            .execute(
                "INSERT INTO posts SELECT * FROM jsonb_populate_record(NULL::posts, $1)",
                &[&stored],
            )
            .await
            .unwrap();
        let report = store.audit::<Post, _>(&mut connection).await.unwrap();
        assert_eq!(report.scanned, 301, "{label}: {report:?}");
        assert_eq!(report.legacy_ids.count, 1, "{label}: {report:?}");
        assert_eq!(report.clean, 300, "{label}: {report:?}");

        let adopted = store.adopt::<Post, _>(&mut connection).await.unwrap();
        assert_eq!(adopted.moved.count, 1, "{label}: {adopted:?}");
        let moved: Option<Post> = store
            .get(&mut connection, legacy.id().unwrap())
            .await
            .unwrap();
        assert_eq!(moved, Some(legacy), "{label}: under its derived id");
        let again = store.audit::<Post, _>(&mut connection).await.unwrap();
        assert!(again.is_clean(), "{label}: {again:?}");
    }
}
