//! What only the embedded store has to show: a write lock held past the busy timeout is a
//! retryable error that writes nothing; idem's writes commit or roll back with the caller's
//! transaction; the write marker tells inserts from updates exactly under racing writers on
//! several connections to one file; and a batch of wide rows stays within SQLite's limit of
//! bound parameters whatever chunk it is given.

use std::sync::Arc;
use std::time::Duration;

use idem_core::sqlite::Store;
use idem_core::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use idem_core::sqlx::{self, ConnectOptions, Connection, SqliteConnection};
use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::fixtures::{numbered_post, post, Post};
use idem_tests::sqlite_rows;
use serde::{Deserialize, Serialize};

/// A fresh database file for `test`.
fn fresh_path(test: &str) -> std::path::PathBuf {
    let directory = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("sqlite_{test}_{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

async fn connect(path: &std::path::Path, busy_timeout: Duration) -> SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(busy_timeout)
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lock_held_past_the_busy_timeout_is_retryable_and_writes_nothing() {
    let path = fresh_path("busy");
    let store = Store::new();
    let mut holder = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Post>(&mut holder).await.unwrap();
    let mut writer = connect(&path, Duration::from_millis(50)).await;
    // The writer checks the table first, while no one holds the lock.
    assert_eq!(
        store
            .get::<Post>(&mut writer, post().id().unwrap())
            .await
            .unwrap(),
        None
    );

    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut holder)
        .await
        .unwrap();
    let error = store.upsert(&mut writer, &post()).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    let code = error
        .as_backend()
        .and_then(|backend| backend.code())
        .map(str::to_owned);
    assert!(
        matches!(code.as_deref(), Some("5" | "517")),
        "{error}: {code:?}"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();

    assert!(
        sqlite_rows::raw::<Post>(&mut holder).await.is_empty(),
        "nothing written"
    );
    // The connection is usable, and the retry converges.
    assert_eq!(
        store.upsert(&mut writer, &post()).await.unwrap(),
        Outcome::Inserted
    );
    assert_eq!(
        store.upsert(&mut writer, &post()).await.unwrap(),
        Outcome::Unchanged
    );
    // And committed: the failed call left no savepoint open on the writer's connection.
    assert_eq!(
        sqlite_rows::raw::<Post>(&mut holder).await.len(),
        1,
        "seen from another connection"
    );
}

#[tokio::test]
async fn writes_commit_or_roll_back_with_the_callers_transaction() {
    let path = fresh_path("transaction");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();

    let mut transaction = connection.begin().await.unwrap();
    assert_eq!(
        store.upsert(&mut transaction, &post()).await.unwrap(),
        Outcome::Inserted
    );
    // Inside the transaction, its own write is seen.
    assert_eq!(
        store
            .get::<Post>(&mut transaction, post().id().unwrap())
            .await
            .unwrap(),
        Some(post())
    );
    transaction.rollback().await.unwrap();
    assert_eq!(
        store
            .get::<Post>(&mut connection, post().id().unwrap())
            .await
            .unwrap(),
        None
    );

    let mut transaction = connection.begin().await.unwrap();
    assert_eq!(
        store.upsert(&mut transaction, &post()).await.unwrap(),
        Outcome::Inserted
    );
    // A refusal inside the transaction leaves it usable.
    let moved = Post {
        published_at: post().published_at + 1,
        ..post()
    };
    assert!(store.upsert(&mut transaction, &moved).await.is_err());
    transaction.commit().await.unwrap();
    assert_eq!(
        store
            .get::<Post>(&mut connection, post().id().unwrap())
            .await
            .unwrap(),
        Some(post())
    );
}

/// Eight connections to one file write the same posts at once, each with its own title, 30
/// rounds: each post is inserted by exactly one writer and updated or left unchanged by the
/// others, never inserted twice or updated before it exists; what stays is one writer's whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_on_one_file_are_told_inserted_or_updated_exactly() {
    let path = fresh_path("race");
    let store = Store::new();
    let mut setup = connect(&path, Duration::from_secs(30)).await;
    store.ensure_table::<Post>(&mut setup).await.unwrap();
    for round in 0..30 {
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let mut writers = Vec::new();
        for writer in 0..8 {
            let (store, path, barrier) = (store.clone(), path.clone(), barrier.clone());
            writers.push(tokio::spawn(async move {
                let mut connection = connect(&path, Duration::from_secs(30)).await;
                let doc = Post {
                    slug: format!("round-{round}"),
                    title: format!("by {writer}"),
                    ..post()
                };
                barrier.wait().await;
                store.upsert(&mut connection, &doc).await
            }));
        }
        let mut outcomes = Vec::new();
        for writer in writers {
            outcomes.push(writer.await.unwrap().unwrap());
        }
        let inserted = outcomes
            .iter()
            .filter(|outcome| **outcome == Outcome::Inserted)
            .count();
        assert_eq!(inserted, 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes.iter().all(|outcome| matches!(
                outcome,
                Outcome::Inserted | Outcome::Updated | Outcome::Unchanged
            )),
            "round {round}: {outcomes:?}"
        );
        let stored = store
            .get::<Post>(
                &mut setup,
                Post {
                    slug: format!("round-{round}"),
                    ..post()
                }
                .id()
                .unwrap(),
            )
            .await
            .unwrap()
            .expect("stored");
        assert!(stored.title.starts_with("by "), "{}", stored.title);
    }
    // One row per round, under its derived id.
    assert_eq!(sqlite_rows::raw::<Post>(&mut setup).await.len(), 30);
}

/// A type of 40 columns.
#[derive(Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "wide")]
struct Wide {
    #[idem(key)]
    key: String,
    c01: i64,
    c02: i64,
    c03: i64,
    c04: i64,
    c05: i64,
    c06: i64,
    c07: i64,
    c08: i64,
    c09: i64,
    c10: i64,
    c11: i64,
    c12: i64,
    c13: i64,
    c14: i64,
    c15: i64,
    c16: i64,
    c17: i64,
    c18: i64,
    c19: i64,
    c20: i64,
    c21: i64,
    c22: i64,
    c23: i64,
    c24: i64,
    c25: i64,
    c26: i64,
    c27: i64,
    c28: i64,
    c29: i64,
    c30: i64,
    c31: i64,
    c32: i64,
    c33: i64,
    c34: i64,
    c35: i64,
    c36: i64,
    c37: i64,
    c38: i64,
    c39: i64,
}

fn wide(n: i64) -> Wide {
    Wide {
        key: format!("w{n}"),
        c01: n,
        c02: n,
        c03: n,
        c04: n,
        c05: n,
        c06: n,
        c07: n,
        c08: n,
        c09: n,
        c10: n,
        c11: n,
        c12: n,
        c13: n,
        c14: n,
        c15: n,
        c16: n,
        c17: n,
        c18: n,
        c19: n,
        c20: n,
        c21: n,
        c22: n,
        c23: n,
        c24: n,
        c25: n,
        c26: n,
        c27: n,
        c28: n,
        c29: n,
        c30: n,
        c31: n,
        c32: n,
        c33: n,
        c34: n,
        c35: n,
        c36: n,
        c37: n,
        c38: n,
        c39: n,
    }
}

/// 3,000 rows of 43 values each are 129,000 parameters: asked for one chunk, the store still
/// sends statements SQLite accepts (at most 32,766 parameters each), and a re-ingest writes
/// nothing.
#[tokio::test]
async fn a_batch_of_wide_rows_stays_within_the_parameter_limit() {
    let path = fresh_path("wide");
    let store = Store::new().with_batch_chunk(100_000);
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Wide>(&mut connection).await.unwrap();
    let rows: Vec<Wide> = (0..3_000).map(wide).collect();
    let report = store.upsert_many(&mut connection, &rows).await.unwrap();
    assert_eq!(report.count(Outcome::Inserted), 3_000, "{report}");
    let before = sqlite_rows::raw::<Wide>(&mut connection).await;
    let again = store.upsert_many(&mut connection, &rows).await.unwrap();
    assert_eq!(again.count(Outcome::Unchanged), 3_000, "{again}");
    assert_eq!(
        sqlite_rows::raw::<Wide>(&mut connection).await,
        before,
        "nothing written"
    );
}

/// Rows another tool wrote (its own ids, no hashes) and a key edited behind idem's back: the
/// audit finds each, the adoption moves them to their derived ids, and the audit then finds the
/// table clean; an upsert of each post writes nothing.
#[tokio::test]
async fn the_audit_finds_what_other_tools_did_and_adoption_fixes_it() {
    let path = fresh_path("adopt");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let posts: Vec<Post> = (0..3).map(numbered_post).collect();
    store.upsert_many(&mut connection, &posts).await.unwrap();
    let legacy: Vec<Post> = (0..2)
        .map(|n| Post {
            slug: format!("legacy-{n}"),
            ..post()
        })
        .collect();
    for (n, doc) in legacy.iter().enumerate() {
        let Ok(serde_json::Value::Object(row)) = serde_json::to_value(doc) else {
            panic!("a post serializes to fields");
        };
        sqlite_rows::write_as_another_tool::<Post>(&mut connection, &format!("old-{n}"), row).await;
    }
    sqlite_rows::run(
        &mut connection,
        "UPDATE posts SET slug = 'post-2-renamed' WHERE slug = 'post-2'",
    )
    .await;

    let report = store.audit::<Post>(&mut connection).await.unwrap();
    assert_eq!(report.scanned, 5, "{report}");
    assert_eq!(report.legacy_ids.count, 2, "{report}");
    assert_eq!(report.orphans.count, 1, "{report}");
    assert_eq!(report.missing_hash.count, 2, "{report}");
    assert_eq!(report.hash_mismatch.count, 1, "{report}");
    assert!(report.table_problems.is_empty(), "{report}");
    // The same by flags: the same findings but what needs the type.
    static FIELDS: [idem_core::Field; 4] = [
        idem_core::Field::new("slug", "slug", idem_core::Role::Key),
        idem_core::Field::new("lang", "lang", idem_core::Role::Key),
        idem_core::Field::new("publishedAt", "publishedAt", idem_core::Role::Timestamp),
        idem_core::Field::new("fetchedAt", "fetchedAt", idem_core::Role::Volatile),
    ];
    let model = idem_core::Model::new("posts", idem_core::IdScheme::V1, "sourceHash", &FIELDS);
    let by_flags = store
        .audit_model(&mut connection, &model, &[], |_| {})
        .await
        .unwrap();
    assert_eq!(by_flags.legacy_ids, report.legacy_ids, "{by_flags}");
    assert_eq!(by_flags.orphans, report.orphans, "{by_flags}");
    assert_eq!(by_flags.missing_hash, report.missing_hash, "{by_flags}");
    assert_eq!(by_flags.hash_mismatch, report.hash_mismatch, "{by_flags}");
    assert!(by_flags.model_mismatch.is_none(), "{by_flags}");

    let adopted = store.adopt::<Post>(&mut connection).await.unwrap();
    assert_eq!(adopted.moved.count, 3, "{adopted}");
    assert!(adopted.is_complete(), "{adopted}");
    let after = store.audit::<Post>(&mut connection).await.unwrap();
    assert!(after.is_clean(), "{after}");
    let before = sqlite_rows::raw::<Post>(&mut connection).await;
    let renamed = Post {
        slug: "post-2-renamed".into(),
        ..post()
    };
    for doc in posts[..2].iter().chain(&legacy).chain([&renamed]) {
        assert_eq!(
            store.upsert(&mut connection, doc).await.unwrap(),
            Outcome::Unchanged
        );
    }
    assert_eq!(sqlite_rows::raw::<Post>(&mut connection).await, before);
}

/// Flags that do not match the stored rows (the timestamp forgotten): the audit says so, and
/// the adoption by flags moves nothing.
#[tokio::test]
async fn adoption_by_wrong_flags_moves_nothing() {
    let path = fresh_path("wrong_flags");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let posts: Vec<Post> = (0..10).map(numbered_post).collect();
    store.upsert_many(&mut connection, &posts).await.unwrap();
    let before = sqlite_rows::raw::<Post>(&mut connection).await;
    static FIELDS: [idem_core::Field; 2] = [
        idem_core::Field::new("slug", "slug", idem_core::Role::Key),
        idem_core::Field::new("lang", "lang", idem_core::Role::Key),
    ];
    let model = idem_core::Model::new("posts", idem_core::IdScheme::V1, "sourceHash", &FIELDS);
    let audit = store
        .audit_model(&mut connection, &model, &[], |_| {})
        .await
        .unwrap();
    let mismatch = audit.model_mismatch.expect("a wrong model");
    assert_eq!(mismatch.likely_flags, "--timestamp publishedAt");
    let refused = store
        .adopt_model(&mut connection, &model, &[], Default::default())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("(likely --timestamp publishedAt)"),
        "{refused}"
    );
    assert_eq!(sqlite_rows::raw::<Post>(&mut connection).await, before);
    // A table that is not there is an error naming it.
    let missing = idem_core::Model::new("nothing", idem_core::IdScheme::V1, "sourceHash", &FIELDS);
    let error = store
        .audit_model(&mut connection, &missing, &[], |_| {})
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no table `nothing`"), "{error}");
}

/// A table made by hand whose natural-key constraint says `ON CONFLICT REPLACE`: a plain insert
/// of a row with a stored natural key under another id (its timestamp moved) would delete the
/// stored row and take its place. A batch's chunk sent as fresh rows (after a chunk inserted
/// whole) that holds such rows still fails whole, so they go the guarded way and are refused as
/// single upserts refuse them, and the stored rows stay as they were.
#[tokio::test]
async fn a_fresh_chunk_never_replaces_a_stored_row_whatever_the_tables_conflict_rule() {
    let path = fresh_path("conflict_replace");
    let store = Store::new().with_batch_chunk(64);
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    let create = Store::create_table_sql::<Post>();
    let unique = create
        .find(" UNIQUE (")
        .expect("the natural-key constraint");
    let close = unique + create[unique..].find(')').expect("its columns");
    let replacing = format!(
        "{} ON CONFLICT REPLACE{}",
        &create[..=close],
        &create[close + 1..]
    );
    sqlite_rows::run(&mut connection, &replacing).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let stored: Vec<Post> = (100..110).map(numbered_post).collect();
    store.upsert_many(&mut connection, &stored).await.unwrap();
    let before = sqlite_rows::stored::<Post>(&mut connection).await;

    let mut batch: Vec<Post> = (0..100).chain(200..218).map(numbered_post).collect();
    batch.extend(stored.iter().map(|post| Post {
        published_at: post.published_at + 1,
        ..post.clone()
    }));
    let report = store.upsert_many(&mut connection, &batch).await.unwrap();
    let outcomes = report.outcomes();
    assert!(outcomes[..118]
        .iter()
        .all(|outcome| matches!(outcome, Ok(Outcome::Inserted))));
    for outcome in &outcomes[118..] {
        assert!(
            outcome.is_err(),
            "a moved timestamp is refused, not stored over the row: {outcome:?}"
        );
    }
    let after = sqlite_rows::stored::<Post>(&mut connection).await;
    assert_eq!(after.len(), 128);
    for row in &before {
        assert!(after.contains(row), "{}: as it was", row["slug"]);
    }
}

/// A boolean and a list: the shapes SQLite's declared types once shared with integers and
/// text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "switches")]
struct Switch {
    #[idem(key)]
    name: String,
    #[idem(frozen)]
    on: bool,
    #[idem(frozen)]
    wiring: Vec<i64>,
    label: String,
}

/// A table idem makes declares a boolean `BOOLEAN` and a structured value `JSON_TEXT`, so that a
/// model given at run time reads them as what they hold (its audit finds idem's rows clean); a
/// table made before, with `INTEGER` and `TEXT` there, passes the check and takes idem's
/// writes as before.
#[tokio::test]
async fn booleans_and_structured_values_are_declared_as_what_they_hold() {
    let switch = |n: i64| Switch {
        name: format!("s{n}"),
        on: n % 2 == 0,
        wiring: (0..n).collect(),
        label: format!("switch {n}"),
    };
    let create = Store::create_table_sql::<Switch>();
    assert!(
        create.contains("\"on\" BOOLEAN") && create.contains("\"wiring\" JSON_TEXT"),
        "{create}"
    );
    for made_before in [false, true] {
        let path = fresh_path(&format!("declared_{made_before}"));
        let mut connection = connect(&path, Duration::from_secs(5)).await;
        let create = match made_before {
            false => create.clone(),
            true => create
                .replace("\"on\" BOOLEAN", "\"on\" INTEGER")
                .replace("\"wiring\" JSON_TEXT", "\"wiring\" TEXT"),
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut connection)
            .await
            .unwrap();
        let store = Store::new();
        let switches: Vec<Switch> = (0..4).map(switch).collect();
        store.upsert_many(&mut connection, &switches).await.unwrap();
        assert_eq!(
            store
                .get::<Switch>(&mut connection, switches[3].id().unwrap())
                .await
                .unwrap(),
            Some(switches[3].clone()),
            "made before: {made_before}"
        );
        let typed = store.audit::<Switch>(&mut connection).await.unwrap();
        assert!(typed.is_clean(), "made before: {made_before}: {typed}");
        let model = store
            .audit_model(&mut connection, &Switch::MODEL, &[], |_| {})
            .await
            .unwrap();
        // A table made before reads its booleans as integers and its lists as text, whose
        // hashes differ; the digests are compared under each reading and found.
        assert!(
            model.digest_mismatch.is_empty(),
            "made before: {made_before}: {model}"
        );
        assert_eq!(
            model.hash_mismatch.count,
            if made_before { 4 } else { 0 },
            "made before: {made_before}: {model}"
        );
    }
}

/// The fixes a table check's problems give, in order: each problem's statement.
fn fixes(problems: &[String]) -> Vec<String> {
    problems
        .iter()
        .map(|problem| {
            let at = ["ALTER TABLE", "CREATE UNIQUE INDEX", "DROP INDEX"]
                .iter()
                .filter_map(|statement| problem.find(statement))
                .min()
                .unwrap_or_else(|| panic!("a problem without its fix: {problem}"));
            problem[at..].to_owned()
        })
        .collect()
}

/// The problem a table check refused with.
fn schema_problem(error: &Error) -> &str {
    match error.kind() {
        ErrorKind::SchemaMismatch { problem, .. } => problem,
        _ => panic!("expected a schema mismatch, got {error}"),
    }
}

/// A table made by hand that lacks columns, `_id` among them, and any key: the first check's
/// advice holds every fix, the unique index on `_id` too (SQLite cannot add a column with its
/// index, and the check asked for it only once the column was there), and applying exactly
/// that advice makes the table pass: one round, as on PostgreSQL.
#[tokio::test]
async fn the_first_advice_on_a_hand_made_table_holds_every_fix() {
    let path = fresh_path("one_round_of_advice");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    sqlite_rows::run(
        &mut connection,
        "CREATE TABLE posts (slug TEXT NOT NULL, lang TEXT NOT NULL, title TEXT, body TEXT)",
    )
    .await;
    let advice = store
        .audit::<Post>(&mut connection)
        .await
        .unwrap()
        .table_problems;
    assert!(
        advice
            .iter()
            .any(|problem| problem.contains("no primary key or unique index on \"_id\"")),
        "{advice:#?}"
    );
    let refused = store
        .ensure_table::<Post>(&mut connection)
        .await
        .unwrap_err();
    assert_eq!(schema_problem(&refused), advice[0], "the first problem");
    for fix in fixes(&advice) {
        sqlite_rows::run(&mut connection, &fix).await;
    }
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let report = store.audit::<Post>(&mut connection).await.unwrap();
    assert!(report.table_problems.is_empty(), "{report}");
    assert_eq!(
        store.upsert(&mut connection, &post()).await.unwrap(),
        Outcome::Inserted
    );
}

/// Idem's table as `create_table_sql` makes it, its `slug` column declared `COLLATE NOCASE`.
fn nocase_slug_table() -> String {
    let made = Store::create_table_sql::<Post>();
    let nocase = made.replacen(
        "\"slug\" TEXT NOT NULL",
        "\"slug\" TEXT NOT NULL COLLATE NOCASE",
        1,
    );
    assert_ne!(nocase, made);
    nocase
}

fn slugged(slug: &str) -> Post {
    Post {
        slug: slug.into(),
        ..post()
    }
}

/// A key column another tool declared `COLLATE NOCASE`, or a unique index comparing the
/// natural key so, would take `Alpha` for `alpha`: the check refuses such a table, naming the
/// column or the index and the fix, before anything is written. Applying the fix makes the
/// table pass.
#[tokio::test]
async fn a_key_compared_other_than_byte_for_byte_is_refused_with_its_fix() {
    let path = fresh_path("nocase_key");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    sqlite_rows::run(&mut connection, &nocase_slug_table()).await;
    let refused = store
        .ensure_table::<Post>(&mut connection)
        .await
        .unwrap_err();
    let problem = schema_problem(&refused);
    assert!(
        problem.contains("column \"slug\" is declared COLLATE NOCASE")
            && problem.contains("Store::create_table_sql::<T>()"),
        "{problem}"
    );
    assert!(!refused.is_retryable(), "{refused}");
    let refused = store
        .upsert(&mut connection, &slugged("alpha"))
        .await
        .unwrap_err();
    assert!(
        schema_problem(&refused).contains("COLLATE NOCASE"),
        "{refused}"
    );
    assert!(sqlite_rows::raw::<Post>(&mut connection).await.is_empty());

    // The columns compare byte for byte, but a second unique index on the natural key does
    // not: `Alpha` would collide with `alpha` there.
    sqlite_rows::run(&mut connection, "DROP TABLE posts").await;
    sqlite_rows::run(&mut connection, &Store::create_table_sql::<Post>()).await;
    sqlite_rows::run(
        &mut connection,
        "CREATE UNIQUE INDEX posts_slug_any_case ON posts (lang, slug COLLATE NOCASE)",
    )
    .await;
    let refused = store
        .ensure_table::<Post>(&mut connection)
        .await
        .unwrap_err();
    let problem = schema_problem(&refused);
    assert!(
        problem.contains("the unique index \"posts_slug_any_case\" compares column \"slug\"")
            && problem.contains("NOCASE"),
        "{problem}"
    );
    let advice = store
        .audit::<Post>(&mut connection)
        .await
        .unwrap()
        .table_problems;
    assert_eq!(fixes(&advice), ["DROP INDEX \"posts_slug_any_case\""]);
    sqlite_rows::run(&mut connection, &fixes(&advice)[0]).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    for slug in ["alpha", "Alpha"] {
        assert_eq!(
            store.upsert(&mut connection, &slugged(slug)).await.unwrap(),
            Outcome::Inserted,
            "{slug}"
        );
    }
}

/// A natural-key conflict that can never resolve is a refusal, never contention that a caller
/// following `is_retryable` would retry forever: a table made again behind the store's back
/// (after its check) with `slug` compared without case takes `Alpha` for `alpha`. The single
/// upsert, a batch and a batch looked up first all refuse it alike, naming the index, with
/// nothing written.
#[tokio::test]
async fn a_key_conflict_that_never_resolves_is_a_refusal_not_contention() {
    let path = fresh_path("respelled_key");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    sqlite_rows::run(&mut connection, "DROP TABLE posts").await;
    sqlite_rows::run(&mut connection, &nocase_slug_table()).await;
    assert_eq!(
        store
            .upsert(&mut connection, &slugged("alpha"))
            .await
            .unwrap(),
        Outcome::Inserted
    );
    let before = sqlite_rows::raw::<Post>(&mut connection).await;
    let upper = slugged("Alpha");
    let assert_refused = |error: &Error, path: &str| {
        assert!(
            matches!(error.kind(), ErrorKind::UniqueIndexConflict { .. })
                && error.is_refusal()
                && !error.is_retryable()
                && error.to_string().contains("Alpha"),
            "{path}: {error:?}"
        );
    };
    let single = store.upsert(&mut connection, &upper).await.unwrap_err();
    assert_refused(&single, "upsert");
    let batch = store
        .upsert_many(&mut connection, std::slice::from_ref(&upper))
        .await
        .unwrap();
    assert_refused(batch.outcomes()[0].as_ref().unwrap_err(), "upsert_many");
    let looked_up = store
        .clone()
        .with_shortcuts_from(1)
        .upsert_many(&mut connection, std::slice::from_ref(&upper))
        .await
        .unwrap();
    assert_refused(
        looked_up.outcomes()[0].as_ref().unwrap_err(),
        "upsert_many looked up first",
    );
    assert_eq!(
        single.to_string(),
        batch.outcomes()[0].as_ref().unwrap_err().to_string()
    );
    assert_eq!(sqlite_rows::raw::<Post>(&mut connection).await, before);
}

/// A row of another tool's table with a boolean, in the key or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "flags")]
struct Flagged {
    #[idem(key)]
    name: String,
    #[idem(key)]
    on: bool,
    seen: bool,
}

/// Booleans as other tools store them in SQLite: numbers (true unless zero) and the texts `t`
/// and `f` (Rails before 5.2), `true` and `false`, read as they mean; any other text (`yes`) is
/// no boolean, and its row is reported as unreadable, where every text read as `false`.
#[tokio::test]
async fn booleans_other_tools_store_are_read_as_they_mean_or_reported() {
    let path = fresh_path("booleans");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    store
        .ensure_table::<Flagged>(&mut connection)
        .await
        .unwrap();
    let rows: [(&str, bool, &str, bool, &str); 6] = [
        ("a", true, "'t'", true, "'t'"),
        ("b", false, "'f'", false, "'F'"),
        ("c", true, "'TRUE'", false, "'false'"),
        ("d", true, "2", true, "1"),
        ("e", false, "0", false, "0.0"),
        ("f", true, "'yes'", true, "1"),
    ];
    // Written by idem, then stored again as the other tool writes a boolean.
    for (name, on, stored_on, seen, stored_seen) in rows {
        let flagged = Flagged {
            name: name.into(),
            on,
            seen,
        };
        store.upsert(&mut connection, &flagged).await.unwrap();
        let sql = format!(
            "UPDATE flags SET \"on\" = {stored_on}, seen = {stored_seen} WHERE name = '{name}'"
        );
        sqlite_rows::run(&mut connection, &sql).await;
    }
    let report = store.audit::<Flagged>(&mut connection).await.unwrap();
    assert_eq!(report.scanned, 6, "{report}");
    assert_eq!(report.clean, 5, "{report}");
    let unreadable = report.undeserializable.as_ref().map(|found| found.count);
    assert_eq!(unreadable, Some(1), "{report}");
    assert!(
        format!("{report}").contains("invalid type: string \"yes\""),
        "{report}"
    );
}

/// Rows without an `_id` keyed by a boolean stored as text (`t`, `f`), which the adoption reads
/// as true or false and cannot find again by the key it read (SQLite sorts text after numbers,
/// so the page after such a row begins before it): each is reported once, the others move, and
/// the pass ends, where it read the last page again forever.
#[tokio::test]
async fn rows_keyed_by_a_boolean_stored_as_text_are_reported_and_the_adoption_ends() {
    let path = fresh_path("boolean_keys");
    let store = Store::new();
    let mut connection = connect(&path, Duration::from_secs(5)).await;
    let create = Store::create_table_sql::<Flagged>().replace(" PRIMARY KEY NOT NULL", " UNIQUE");
    sqlite_rows::run(&mut connection, &create).await;
    sqlite_rows::run(
        &mut connection,
        "INSERT INTO flags (name, \"on\", seen) VALUES ('a', 't', 1), ('a', 0, 1), ('b', 1, 0), \
         ('b', 'f', 0)",
    )
    .await;
    let adopted = tokio::time::timeout(
        Duration::from_secs(30),
        store.adopt::<Flagged>(&mut connection),
    )
    .await
    .expect("the adoption ends")
    .unwrap();
    assert_eq!(adopted.moved.count, 2, "{adopted}");
    assert_eq!(adopted.failed.count, 2, "{adopted}");
    assert!(
        (adopted.failed.samples.iter()).all(|sample| sample
            .detail
            .as_deref()
            .is_some_and(|why| why.contains("give it an _id"))),
        "{adopted}"
    );
}

/// A day of another tool's table, keyed by a column it declared `DATE` (or not at all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "days")]
struct Day {
    #[idem(key)]
    day: String,
    note: String,
}

/// Rows without an `_id` keyed by a column declared `DATE` or without a type, which a model
/// given at run time reads as JSON where it can and as text where not: each moves, found again
/// by its key as stored (not by the quoted JSON of the text read), and the adoption ends.
#[tokio::test]
async fn rows_keyed_by_a_column_of_another_declared_type_move_by_a_model_given_at_run_time() {
    for declared in ["DATE", ""] {
        let path = fresh_path(&format!("days_{}", declared.to_lowercase()));
        let store = Store::new();
        let mut connection = connect(&path, Duration::from_secs(5)).await;
        let create = Store::create_table_sql::<Day>()
            .replace(" PRIMARY KEY NOT NULL", " UNIQUE")
            .replacen("\"day\" TEXT", &format!("\"day\" {declared}"), 1);
        sqlite_rows::run(&mut connection, &create).await;
        sqlite_rows::run(
            &mut connection,
            "INSERT INTO days (day, note) VALUES ('2024-01-01', 'a'), ('2024-01-02', 'b'), \
             ('2024-01-03', 'c')",
        )
        .await;
        let adopted = tokio::time::timeout(
            Duration::from_secs(30),
            store.adopt_model(&mut connection, &Day::MODEL, &[], Default::default()),
        )
        .await
        .expect("the adoption ends")
        .unwrap();
        assert_eq!(adopted.moved.count, 3, "{declared:?}: {adopted}");
        let day = Day {
            day: "2024-01-02".into(),
            note: "b".into(),
        };
        let under_its_id: String = sqlx::query_scalar("SELECT note FROM days WHERE _id = ?")
            .bind(day.id().unwrap().to_string())
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(under_its_id, "b", "{declared:?}");
    }
}
