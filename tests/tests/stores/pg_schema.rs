//! What the PostgreSQL store reads of the table it writes, on every PostgreSQL server under
//! test: the names a unique violation is told apart by, the names of its own statements that no
//! column or table of the user's may capture, the constraints and collations it refuses, the
//! tables of every schema it is used with (and of a transaction that rolled back), the errors a
//! caller may retry, and the values a read must give back as they were written.

use std::fmt::Debug;
use std::time::Duration;

use idem_core::postgres::{Change, Store};
use idem_core::{Applied, Error, ErrorKind, Idempotent, OpId, Outcome};
use idem_tests::backends::{fresh_schema, postgres_client, postgres_servers};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;

/// Whether `error` is the table check's refusal, with a problem holding `expected`.
fn is_schema_mismatch(error: &Error, expected: &str) -> bool {
    matches!(error.kind(), ErrorKind::SchemaMismatch { problem, .. } if problem.contains(expected))
}

/// Waits until the session `pid` waits for a lock another session holds.
async fn until_waiting_for_a_lock(observer: &tokio_postgres::Client, pid: i32) {
    for _ in 0..500 {
        let waiting: bool = observer
            .query_one(
                "SELECT COALESCE(bool_or(wait_event_type = 'Lock'), false) \
                 FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("session {pid} never waited for a lock");
}

/// A document type of one key, for the tests of the table it is stored in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "keyed")]
struct Keyed {
    #[idem(key)]
    key: String,
    title: String,
}

fn keyed(key: &str) -> Keyed {
    Keyed {
        key: key.into(),
        title: "T".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The names of the unique constraints (issue 16, case 3)

/// A table name of 60 bytes: PostgreSQL names its primary key after the first 58 bytes of it,
/// not `<table>_pkey`, which would be 65 bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "a_table_name_of_sixty_bytes_whose_primary_key_name_is_cut_xy")]
struct LongTable {
    #[idem(key)]
    key: String,
    title: String,
}

/// A racing writer's row committed under the document's id, after the upsert's snapshot, while
/// the upsert waits for it on the primary key: the upsert must meet that row and converge, not
/// report the primary key as another unique constraint.
#[tokio::test]
async fn a_lost_race_on_a_shortened_primary_key_name_converges() {
    let collection = LongTable::MODEL.collection();
    assert!(
        (59..=63).contains(&collection.len()),
        "{}",
        collection.len()
    );
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "ps", "long_pk").await;
        let store = Store::new();
        store.ensure_table::<LongTable, _>(&client).await.unwrap();
        let primary_key: String = client
            .query_one(
                "SELECT conname::text FROM pg_constraint \
                 WHERE conrelid = to_regclass(quote_ident($1)) AND contype = 'p'",
                &[&collection],
            )
            .await
            .unwrap()
            .get(0);
        assert_ne!(primary_key, format!("{collection}_pkey"), "{label}");
        let doc = LongTable {
            key: "k".into(),
            title: "T".into(),
        };
        let id = doc.id().unwrap().to_string();

        // Another tool's transaction holds a row under the id with another key.
        let mut other = postgres_client(&uri, &schema).await;
        let racing = other.transaction().await.unwrap();
        racing
            .execute(
                &format!(
                    "INSERT INTO \"{collection}\" (\"_id\", key, title) \
                     VALUES ($1, 'elsewhere', 'T')"
                ),
                &[&id],
            )
            .await
            .unwrap();
        let writer = postgres_client(&uri, &schema).await;
        let pid: i32 = writer
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let upsert = tokio::spawn({
            let (store, doc) = (store.clone(), doc.clone());
            async move { store.upsert(&writer, &doc).await }
        });
        until_waiting_for_a_lock(&client, pid).await;
        // It moves its row to the document's key and commits: the upsert's insert fails on the
        // primary key, and the row it lost to holds its natural key.
        racing
            .execute(
                &format!("UPDATE \"{collection}\" SET key = 'k' WHERE \"_id\" = $1"),
                &[&id],
            )
            .await
            .unwrap();
        racing.commit().await.unwrap();
        let outcome = upsert.await.unwrap();
        assert_eq!(outcome.unwrap(), Outcome::Updated, "{label}");
        assert_eq!(
            store.upsert(&client, &doc).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "named_keys")]
struct NamedKeys {
    #[idem(key)]
    key: String,
    title: String,
}

/// A migration's own names for the primary key: a row another tool stored under the document's
/// id with another natural key is the refusal of a moved key, and a unique constraint of the
/// migration's stays a refusal naming it.
#[tokio::test]
async fn a_primary_key_a_migration_named_is_told_from_other_unique_constraints() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "named_pk").await;
        let ddl = Store::create_table_sql::<NamedKeys>()
            .replace(
                "\"_id\" text PRIMARY KEY",
                "\"_id\" text CONSTRAINT my_pk PRIMARY KEY",
            )
            .replace(
                "CONSTRAINT \"named_keys_idem_natural_key\"",
                "CONSTRAINT \"title_unique\" UNIQUE (title), CONSTRAINT my_natural_key",
            );
        client.batch_execute(&ddl).await.unwrap();
        let store = Store::new();
        let doc = NamedKeys {
            key: "k".into(),
            title: "T".into(),
        };
        client
            .execute(
                "INSERT INTO named_keys (\"_id\", key, title) VALUES ($1, 'elsewhere', 'Other')",
                &[&doc.id().unwrap().to_string()],
            )
            .await
            .unwrap();
        let error = store.upsert(&client, &doc).await.unwrap_err();
        assert!(
            matches!(
                error.kind(),
                ErrorKind::FrozenFieldChanged { field: "key", .. }
            ),
            "{label}: {error:?}"
        );

        let same_title = NamedKeys {
            key: "k2".into(),
            title: "Other".into(),
        };
        let error = store.upsert(&client, &same_title).await.unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::UniqueIndexConflict { index, .. } if index == "title_unique"),
            "{label}: {error:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The names the statements use (issue 16, case 5)

/// Fields stored under the names idem's statements give their own relations, columns and
/// signals: none may stand in for what the statement means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "captured")]
struct Captured {
    #[idem(key)]
    t: String,
    #[idem(timestamp)]
    excluded: i64,
    #[idem(frozen)]
    w: String,
    old: Option<String>,
    new: Option<String>,
    i: String,
    s: String,
    id: String,
    inserted: bool,
    ok: bool,
    stored: i64,
    unchanged: bool,
    c0: String,
    written: String,
    checked: String,
    incoming_id: String,
    recorded: String,
    #[idem(effect)]
    #[serde(default)]
    n: i64,
    #[idem(effect)]
    #[serde(default)]
    op: i64,
    #[idem(tombstone)]
    marked: Option<i64>,
}

fn captured(old: Option<&str>, title: &str) -> Captured {
    Captured {
        t: "key".into(),
        excluded: 1_700_000_000_000,
        w: "frozen".into(),
        old: old.map(str::to_owned),
        new: None,
        i: title.into(),
        s: "s".into(),
        id: "not the id".into(),
        inserted: false,
        ok: false,
        stored: 7,
        unchanged: false,
        c0: "c0".into(),
        written: "written".into(),
        checked: "checked".into(),
        incoming_id: "incoming".into(),
        recorded: "recorded".into(),
        n: 0,
        op: 0,
        marked: None,
    }
}

/// A type whose table has the name of one of the statements' own relations.
macro_rules! table_named {
    ($type:ident, $collection:tt) => {
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
        #[idem(collection = $collection)]
        struct $type {
            #[idem(key)]
            key: String,
            title: String,
            #[idem(effect)]
            #[serde(default)]
            points: i64,
        }

        impl $type {
            fn titled(title: &str) -> Self {
                $type {
                    key: "k".into(),
                    title: title.into(),
                    points: 0,
                }
            }
        }
    };
}

table_named!(IncomingTable, "incoming");
table_named!(WrittenTable, "written");
table_named!(CheckedTable, "checked");
table_named!(AppliedTable, "applied");
table_named!(UnderscoredTable, "incoming_");

/// `first` is inserted, found unchanged, then `changed` updates it, and each reads back as
/// written, by id and by key, one by one and in a batch; an operation applies once.
async fn converges<T>(
    label: &str,
    client: &tokio_postgres::Client,
    first: T,
    changed: T,
    effect: &'static str,
) where
    T: Idempotent + Serialize + DeserializeOwned + PartialEq + Debug + Clone + Sync + Send,
{
    let store = Store::new();
    store.ensure_table::<T, _>(client).await.unwrap();
    let collection = T::MODEL.collection();
    assert_eq!(
        store.upsert(client, &first).await.unwrap(),
        Outcome::Inserted,
        "{label}, {collection}"
    );
    assert_eq!(
        store.upsert(client, &first).await.unwrap(),
        Outcome::Unchanged,
        "{label}, {collection}"
    );
    assert_eq!(
        store.upsert(client, &changed).await.unwrap(),
        Outcome::Updated,
        "{label}, {collection}"
    );
    let id = changed.id().unwrap();
    assert_eq!(
        store.get::<T, _>(client, id).await.unwrap(),
        Some(changed.clone()),
        "{label}, {collection}"
    );
    assert_eq!(
        store
            .find::<T, _>(client, &changed.natural_key())
            .await
            .unwrap(),
        Some(changed.clone()),
        "{label}, {collection}"
    );
    let report = store
        .upsert_many(client, &[changed.clone(), first.clone()])
        .await
        .unwrap();
    let outcomes: Vec<Outcome> = report
        .outcomes()
        .iter()
        .map(|outcome| outcome.clone().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [Outcome::Unchanged, Outcome::Updated],
        "{label}, {collection}"
    );
    let op = OpId::new("once");
    let change = [Change::add(effect, 1)];
    assert_eq!(
        store
            .apply_once::<T, _>(client, id, &op, &change)
            .await
            .unwrap(),
        Applied::Applied,
        "{label}, {collection}"
    );
    assert_eq!(
        store
            .apply_once::<T, _>(client, id, &op, &change)
            .await
            .unwrap(),
        Applied::AlreadyApplied,
        "{label}, {collection}"
    );
}

/// On PostgreSQL 18 a column named `old` stood in for the old row of `RETURNING (old IS NULL)`:
/// an insert holding a value there was reported `Updated`, an update holding none `Inserted`.
#[tokio::test]
async fn no_column_of_the_users_stands_in_for_a_name_the_statements_use() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "captured_columns").await;
        converges(
            &label,
            &client,
            captured(Some("x"), "A"),
            captured(None, "B"),
            "n",
        )
        .await;
        let deleted = Captured {
            marked: Some(1),
            ..captured(None, "B")
        };
        let outcome = Store::new().delete(&client, &deleted).await.unwrap();
        assert_eq!(outcome, idem_core::Deletion::Deleted, "{label}");
    }
}

/// A table named like one of the statements' own relations (a `WITH` query) was hidden by it
/// wherever the statement reads the table.
#[tokio::test]
async fn no_table_of_the_users_is_hidden_by_a_name_the_statements_use() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "captured_tables").await;
        converges(
            &label,
            &client,
            IncomingTable::titled("A"),
            IncomingTable::titled("B"),
            "points",
        )
        .await;
        converges(
            &label,
            &client,
            WrittenTable::titled("A"),
            WrittenTable::titled("B"),
            "points",
        )
        .await;
        converges(
            &label,
            &client,
            CheckedTable::titled("A"),
            CheckedTable::titled("B"),
            "points",
        )
        .await;
        converges(
            &label,
            &client,
            AppliedTable::titled("A"),
            AppliedTable::titled("B"),
            "points",
        )
        .await;
        converges(
            &label,
            &client,
            UnderscoredTable::titled("A"),
            UnderscoredTable::titled("B"),
            "points",
        )
        .await;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "system_names")]
struct SystemName {
    #[idem(key)]
    key: String,
    xmax: i64,
}

/// A field stored as `xmax` cannot have a column: PostgreSQL refuses every system column's
/// name. It is refused naming it, before a table is made, and a write is refused the same way.
#[tokio::test]
async fn a_field_stored_under_a_system_columns_name_is_refused_naming_it() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "system_names").await;
        let store = Store::new();
        let error = store
            .ensure_table::<SystemName, _>(&client)
            .await
            .unwrap_err();
        assert!(
            is_schema_mismatch(
                &error,
                "column \"xmax\" is the name of a PostgreSQL system column"
            ),
            "{label}: {error:?}"
        );
        let doc = SystemName {
            key: "k".into(),
            xmax: 1,
        };
        let error = store.upsert(&client, &doc).await.unwrap_err();
        assert!(is_schema_mismatch(&error, "\"xmax\""), "{label}: {error:?}");
        let tables: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(tables, 0, "{label}");
    }
}

// ---------------------------------------------------------------------------------------------
// The tables the check accepts (issue 16, case 12)

/// ON CONFLICT cannot use a deferrable constraint (every write failed with 55000), and a
/// conflict deferred to the commit is one idem never sees: both are refused by the check.
#[tokio::test]
async fn a_deferrable_key_constraint_is_refused_by_the_check() {
    let natural_key = Store::create_table_sql::<Keyed>()
        .replace("UNIQUE (\"key\")", "UNIQUE (\"key\") DEFERRABLE");
    let primary_key = Store::create_table_sql::<Keyed>()
        .replace("PRIMARY KEY", "PRIMARY KEY DEFERRABLE INITIALLY DEFERRED");
    for (label, uri) in postgres_servers() {
        for (ddl, constraint) in [
            (&natural_key, "keyed_idem_natural_key"),
            (&primary_key, "keyed_pkey"),
        ] {
            let (_, client) = fresh_schema(&uri, "ps", "deferrable").await;
            client.batch_execute(ddl).await.unwrap();
            let error = Store::new().upsert(&client, &keyed("k")).await.unwrap_err();
            assert!(
                is_schema_mismatch(&error, &format!("the unique constraint {constraint:?}"))
                    && is_schema_mismatch(&error, "DEFERRABLE"),
                "{label}: {error:?}"
            );
            let rows: i64 = client
                .query_one("SELECT count(*) FROM keyed", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(rows, 0, "{label}");
        }
    }
}

/// Makes a case-insensitive collation `ci` in the client's schema; false where the server has
/// no ICU (the PostgreSQL 18 wheel), where no nondeterministic collation can exist.
async fn case_insensitive_collation(client: &tokio_postgres::Client) -> bool {
    match client
        .batch_execute(
            "CREATE COLLATION ci \
             (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        )
        .await
    {
        Ok(()) => true,
        Err(error) if error.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => false,
        Err(error) => panic!("{error}"),
    }
}

/// Under a case-insensitive collation `Key` and `key` are one key: one document would be refused
/// as the other's moved id, and a batch holding both failed whole (21000). Refused by the check,
/// naming the column and the collation.
#[tokio::test]
async fn a_nondeterministic_collation_on_a_key_column_is_refused_by_the_check() {
    let mut tested = 0;
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "collation").await;
        if !case_insensitive_collation(&client).await {
            println!("{label}: no ICU, so no nondeterministic collation: nothing to refuse");
            continue;
        }
        tested += 1;
        let ddl = Store::create_table_sql::<Keyed>()
            .replace("\"key\" text NOT NULL", "\"key\" text COLLATE ci NOT NULL");
        client.batch_execute(&ddl).await.unwrap();
        let store = Store::new();
        let error = store
            .upsert_many(&client, &[keyed("Key"), keyed("key")])
            .await
            .unwrap_err();
        assert!(
            is_schema_mismatch(
                &error,
                "column \"key\" is compared with the nondeterministic collation \"ci\""
            ),
            "{label}: {error:?}"
        );
        let error = store.upsert(&client, &keyed("Key")).await.unwrap_err();
        assert!(is_schema_mismatch(&error, "\"ci\""), "{label}: {error:?}");
    }
    assert!(tested > 0, "no server under test has ICU");
}

/// `ensure_table` inside a transaction that rolls back leaves no table: the next write is
/// refused by the check, not failed by the server, and a table made later is checked.
#[tokio::test]
async fn a_table_whose_creating_transaction_rolled_back_is_not_taken_for_checked() {
    for (label, uri) in postgres_servers() {
        let (_, mut client) = fresh_schema(&uri, "ps", "rolled_back").await;
        let store = Store::new();
        let tx = client.transaction().await.unwrap();
        store.ensure_table::<Keyed, _>(&tx).await.unwrap();
        assert_eq!(
            store.upsert(&tx, &keyed("k")).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
        tx.rollback().await.unwrap();

        let error = store.upsert(&client, &keyed("k")).await.unwrap_err();
        assert!(
            is_schema_mismatch(&error, "does not exist"),
            "{label}: {error:?}"
        );
        let error = store
            .get::<Keyed, _>(&client, keyed("k").id().unwrap())
            .await
            .unwrap_err();
        assert!(
            is_schema_mismatch(&error, "does not exist"),
            "{label}: {error:?}"
        );

        // Made again by a migration, with a deferrable key this time: checked before a write.
        let ddl = Store::create_table_sql::<Keyed>()
            .replace("UNIQUE (\"key\")", "UNIQUE (\"key\") DEFERRABLE");
        client.batch_execute(&ddl).await.unwrap();
        let error = store.upsert(&client, &keyed("k")).await.unwrap_err();
        assert!(
            is_schema_mismatch(&error, "DEFERRABLE"),
            "{label}: {error:?}"
        );
        client.batch_execute("DROP TABLE keyed").await.unwrap();
        store.ensure_table::<Keyed, _>(&client).await.unwrap();
        assert_eq!(
            store.upsert(&client, &keyed("k")).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
    }
}

/// One store, clients of several schemas: each schema's table is checked before it is written
/// or read, and a good one works as the first did.
#[tokio::test]
async fn each_schema_a_store_meets_is_checked() {
    for (label, uri) in postgres_servers() {
        let store = Store::new();
        let (_, first) = fresh_schema(&uri, "ps", "schema_first").await;
        store.ensure_table::<Keyed, _>(&first).await.unwrap();
        assert_eq!(
            store.upsert(&first, &keyed("k")).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );

        // No unique natural key: the server cannot even run the statement.
        let (_, no_key) = fresh_schema(&uri, "ps", "schema_no_key").await;
        let ddl = Store::create_table_sql::<Keyed>().replace(
            ",\n    CONSTRAINT \"keyed_idem_natural_key\" UNIQUE (\"key\")",
            "",
        );
        no_key.batch_execute(&ddl).await.unwrap();
        let error = store.upsert(&no_key, &keyed("k")).await.unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::SchemaMismatch { .. }),
            "{label}: {error:?}"
        );

        // A deferrable primary key: the statement runs, but the table is not one idem can use.
        let (_, deferred) = fresh_schema(&uri, "ps", "schema_deferred").await;
        let ddl = Store::create_table_sql::<Keyed>()
            .replace("PRIMARY KEY", "PRIMARY KEY DEFERRABLE INITIALLY DEFERRED");
        deferred.batch_execute(&ddl).await.unwrap();
        let error = store.upsert(&deferred, &keyed("k")).await.unwrap_err();
        assert!(
            is_schema_mismatch(&error, "DEFERRABLE"),
            "{label}: {error:?}"
        );
        let error = store
            .find::<Keyed, _>(&deferred, &keyed("k").natural_key())
            .await
            .unwrap_err();
        assert!(
            is_schema_mismatch(&error, "DEFERRABLE"),
            "{label}: {error:?}"
        );
        let rows: i64 = deferred
            .query_one("SELECT count(*) FROM keyed", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows, 0, "{label}");

        // A good table whose primary key a migration named: written, and a row another tool
        // stored under the document's id is told by that name.
        let (_, named) = fresh_schema(&uri, "ps", "schema_named").await;
        let ddl = Store::create_table_sql::<Keyed>().replace(
            "\"_id\" text PRIMARY KEY",
            "\"_id\" text CONSTRAINT their_pk PRIMARY KEY",
        );
        named.batch_execute(&ddl).await.unwrap();
        assert_eq!(
            store.upsert(&named, &keyed("n")).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
        named
            .execute(
                "INSERT INTO keyed (\"_id\", key, title) VALUES ($1, 'elsewhere', 'T')",
                &[&keyed("m").id().unwrap().to_string()],
            )
            .await
            .unwrap();
        let error = store.upsert(&named, &keyed("m")).await.unwrap_err();
        assert!(
            matches!(
                error.kind(),
                ErrorKind::FrozenFieldChanged { field: "key", .. }
            ),
            "{label}: {error:?}"
        );
        assert_eq!(
            store
                .get::<Keyed, _>(&named, keyed("n").id().unwrap())
                .await
                .unwrap(),
            Some(keyed("n")),
            "{label}"
        );
        assert_eq!(
            store
                .apply_once::<Keyed, _>(&named, keyed("n").id().unwrap(), &OpId::new("op"), &[])
                .await
                .unwrap(),
            Applied::Applied,
            "{label}"
        );

        // The first schema is still the store's.
        assert_eq!(
            store.upsert(&first, &keyed("k")).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );
        assert_eq!(
            store.upsert(&named, &keyed("n")).await.unwrap(),
            Outcome::Unchanged,
            "{label}"
        );

        // A nondeterministic collation parses and runs: only the check can refuse it.
        let (_, collated) = fresh_schema(&uri, "ps", "schema_collated").await;
        if case_insensitive_collation(&collated).await {
            let ddl = Store::create_table_sql::<Keyed>()
                .replace("\"key\" text NOT NULL", "\"key\" text COLLATE ci NOT NULL");
            collated.batch_execute(&ddl).await.unwrap();
            let error = store.upsert(&collated, &keyed("k")).await.unwrap_err();
            assert!(
                is_schema_mismatch(&error, "nondeterministic collation"),
                "{label}: {error:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and non-finite effects (issue 16, case 14)

/// A write that gave up waiting for a row another transaction holds (`lock_timeout`, or
/// `statement_timeout` cancelling it) may succeed if made again.
#[tokio::test]
async fn a_write_that_timed_out_waiting_for_a_lock_is_retryable() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "ps", "timeouts").await;
        let store = Store::new();
        store.ensure_table::<Keyed, _>(&client).await.unwrap();
        store.upsert(&client, &keyed("k")).await.unwrap();
        let mut holder = postgres_client(&uri, &schema).await;
        let holding = holder.transaction().await.unwrap();
        holding
            .execute("SELECT 1 FROM keyed FOR UPDATE", &[])
            .await
            .unwrap();
        let edited = Keyed {
            title: "Edited".into(),
            ..keyed("k")
        };
        for (setting, code) in [("lock_timeout", "55P03"), ("statement_timeout", "57014")] {
            client
                .batch_execute(&format!("SET {setting} = '100ms'"))
                .await
                .unwrap();
            let error = store.upsert(&client, &edited).await.unwrap_err();
            assert_eq!(
                error.as_backend().and_then(|backend| backend.code()),
                Some(code),
                "{label}: {error:?}"
            );
            assert!(error.is_retryable(), "{label}, {setting}: {error:?}");
            assert!(!error.is_refusal(), "{label}, {setting}");
            client
                .batch_execute(&format!("RESET {setting}"))
                .await
                .unwrap();
        }
        holding.rollback().await.unwrap();
        assert_eq!(
            store.upsert(&client, &edited).await.unwrap(),
            Outcome::Updated,
            "{label}"
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(effect)]
    #[serde(default)]
    score: f64,
    #[idem(effect)]
    #[serde(default)]
    count: i64,
}

/// `Change::set` of NaN or an infinity into a `double precision` effect column stores it as an
/// upsert stores such a field, and it reads back; into a `bigint` one it is refused naming it.
#[tokio::test]
async fn apply_once_sets_a_float_effect_to_nan_or_an_infinity() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "non_finite").await;
        let store = Store::new();
        let reading = Reading {
            sensor: "s".into(),
            score: 1.5,
            count: 0,
        };
        store.ensure_table::<Reading, _>(&client).await.unwrap();
        store.upsert(&client, &reading).await.unwrap();
        let id = reading.id().unwrap();
        for (number, value) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
            .into_iter()
            .enumerate()
        {
            let applied = store
                .apply_once::<Reading, _>(
                    &client,
                    id,
                    &OpId::new(format!("set {number}")),
                    &[Change::set("score", &value)],
                )
                .await
                .unwrap();
            assert_eq!(applied, Applied::Applied, "{label}, {value}");
            let read = store.get::<Reading, _>(&client, id).await.unwrap().unwrap();
            assert!(
                read.score.to_bits() == value.to_bits() || (value.is_nan() && read.score.is_nan()),
                "{label}: {} for {value}",
                read.score
            );
        }
        let error = store
            .apply_once::<Reading, _>(
                &client,
                id,
                &OpId::new("count"),
                &[Change::set("count", &f64::NAN)],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                error.kind(),
                ErrorKind::Serialize { message, .. }
                    if message.contains("\"count\"") && message.contains("NaN")
            ),
            "{label}: {error:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Typed reads of nulls (issue 16, case 8)

/// A limit whose default is a value, so that a null written is not its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Limit(Option<i64>);

impl Default for Limit {
    fn default() -> Self {
        Limit(Some(10))
    }
}

/// `None`: untouched, left out; `Some(None)`: cleared, a null; `Some(Some(_))`: set. As
/// `serde_with::rust::double_option` reads and writes it.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<Option<T>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => serializer.serialize_unit(),
            Some(None) => serializer.serialize_none(),
            Some(Some(value)) => serializer.serialize_some(value),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(deserializer).map(Some)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "settings")]
struct Settings {
    #[idem(key)]
    name: String,
    #[serde(default)]
    limit: Limit,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    tags: Option<Option<Vec<String>>>,
}

/// What serde wrote reads back, null included, by id, by key and in an audit: a null is not
/// taken for a field serde left out, so the default does not replace it, and the copy read
/// written back is unchanged.
#[tokio::test]
async fn a_null_serde_wrote_reads_back_as_null_not_as_the_default() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "nulls").await;
        let store = Store::new();
        store.ensure_table::<Settings, _>(&client).await.unwrap();
        let written = [
            ("none", Limit(None), Some(None)),
            ("some", Limit(Some(3)), Some(Some(vec!["a".to_owned()]))),
            ("absent", Limit::default(), None),
        ];
        for (name, limit, tags) in written {
            let doc = Settings {
                name: name.into(),
                limit,
                tags,
            };
            assert_eq!(
                store.upsert(&client, &doc).await.unwrap(),
                Outcome::Inserted,
                "{label}"
            );
            let read = store
                .get::<Settings, _>(&client, doc.id().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(read, doc, "{label}");
            let found = store
                .find::<Settings, _>(&client, &doc.natural_key())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(found, doc, "{label}");
            assert_eq!(
                store.upsert(&client, &read).await.unwrap(),
                Outcome::Unchanged,
                "{label}, {name}"
            );
        }
        let audit = store.audit::<Settings, _>(&client).await.unwrap();
        assert!(audit.is_clean(), "{label}: {audit}");

        // A row from before the column held anything (a migration added it): the default.
        client
            .batch_execute("UPDATE settings SET \"limit\" = NULL, tags = NULL")
            .await
            .unwrap();
        let read = store
            .find::<Settings, _>(
                &client,
                &Settings {
                    name: "none".into(),
                    limit: Limit(None),
                    tags: None,
                }
                .natural_key(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!((read.limit, read.tags), (Limit::default(), None), "{label}");
    }
}
