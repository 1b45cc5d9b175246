//! Cases the MySQL family alone has. Refusals of a session whose settings the other stores do
//! not have: a `sql_mode` without strict mode (a value a column cannot hold would be cut with a
//! warning, and the NULL that keeps an upsert off another document's row written as `''`) or
//! with `SIMULTANEOUS_ASSIGNMENT` (an upsert's columns would not see its guard's decision). A
//! batch inside the caller's transaction, whose plain reads see a snapshot older than the rows
//! its writes meet (InnoDB's REPEATABLE READ). The audit of a table with column types the other
//! SQL stores do not have (`DECIMAL`, `DATE`, `DATETIME`, `TIMESTAMP`, `BIGINT UNSIGNED`). Runs
//! on MariaDB alone.

use idem_core::sqlx::Connection as _;
use idem_core::{ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, mysql_connection, Db};
use idem_tests::fixtures::{post, Post};
use serde::{Deserialize, Serialize};

use crate::support::{scored_post, ScoredPost};

/// A session whose `sql_mode` idem's writes cannot rely on is refused before the first write,
/// naming the mode and its fix; nothing is written. The same store then writes once the mode is
/// back.
#[tokio::test]
async fn a_session_without_strict_mode_or_with_simultaneous_assignment_is_refused() {
    for db in fresh_backends("mysql_sql_mode").await {
        let Db::Mysql {
            store, connection, ..
        } = &db
        else {
            continue;
        };
        db.ensure::<ScoredPost>().await;
        let post = scored_post("mode");
        for (mode, named) in [
            ("NO_ENGINE_SUBSTITUTION", "not strict"),
            (
                "STRICT_TRANS_TABLES,SIMULTANEOUS_ASSIGNMENT",
                "SIMULTANEOUS_ASSIGNMENT",
            ),
        ] {
            let mut connection = connection.lock().await;
            let saved: String = idem_core::sqlx::query_scalar("SELECT @@SESSION.sql_mode")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            let set = format!("SET SESSION sql_mode = '{mode}'");
            idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(set))
                .execute(&mut *connection)
                .await
                .unwrap();
            // A store that has not checked the table yet, as a new process's.
            let refused = store
                .unlearned()
                .upsert(&mut connection, &post)
                .await
                .unwrap_err();
            let restore = format!("SET SESSION sql_mode = '{saved}'");
            idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(restore))
                .execute(&mut *connection)
                .await
                .unwrap();
            drop(connection);
            match refused.kind() {
                ErrorKind::SchemaMismatch { problem, .. } => {
                    assert!(problem.contains("sql_mode"), "{db}: {problem}");
                    assert!(problem.contains(named), "{db}: {problem}");
                }
                other => panic!("{db}: {mode}: {other:?}"),
            }
            assert!(db.raw::<ScoredPost>().await.is_empty(), "{db}");
        }
        assert!(db.upsert(&post).await.is_ok(), "{db}");
        assert_eq!(db.raw::<ScoredPost>().await.len(), 1, "{db}");
    }
}

/// Inside the caller's transaction a plain read sees the snapshot the transaction took at its
/// first read, while an upsert meets the row as the latest commit left it. A batch there goes
/// without its lookup before the write: a row another session changed after the snapshot is
/// written back and reported `Updated`, not taken for unchanged from the snapshot, which would
/// leave the other session's edit in place of the document the batch reported stored.
#[tokio::test]
async fn a_batch_inside_a_transaction_writes_back_a_row_changed_since_its_snapshot() {
    for db in fresh_backends("mysql_snapshot").await {
        let Db::Mysql {
            uri,
            database,
            connection,
            store,
        } = &db
        else {
            continue;
        };
        db.ensure::<Post>().await;
        // Every chunk looked up, however small.
        let store = store.clone().with_shortcuts_from(1);
        let posts: Vec<Post> = (0..4)
            .map(|n| Post {
                slug: format!("post-{n}"),
                ..post()
            })
            .collect();
        let mut connection = connection.lock().await;
        let first = store.upsert_many(&mut connection, &posts).await.unwrap();
        assert_eq!(first.count(Outcome::Inserted), 4, "{db}: {first}");

        let mut transaction = connection.begin().await.unwrap();
        let stored: i64 = idem_core::sqlx::query_scalar("SELECT COUNT(*) FROM posts")
            .fetch_one(&mut *transaction)
            .await
            .unwrap();
        assert_eq!(
            stored, 4,
            "{db}: the snapshot, taken by the transaction's first read"
        );
        let mut other = mysql_connection(uri, database).await;
        let edited = Post {
            title: "Edited by another session".into(),
            ..posts[1].clone()
        };
        assert_eq!(
            store.upsert(&mut other, &edited).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let again = store.upsert_many(&mut transaction, &posts).await.unwrap();
        transaction.commit().await.unwrap();
        let outcomes: Vec<Outcome> = again
            .outcomes()
            .iter()
            .map(|outcome| *outcome.as_ref().unwrap())
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Unchanged,
                Outcome::Updated,
                Outcome::Unchanged,
                Outcome::Unchanged
            ],
            "{db}"
        );
        let read: Option<Post> = store.get(&mut other, posts[1].id().unwrap()).await.unwrap();
        assert_eq!(
            read.as_ref(),
            Some(&posts[1]),
            "{db}: the batch's document is stored"
        );
    }
}

/// An entry of a ledger another tool keeps, in a table of its own making: each field in a
/// column type idem does not create (`DECIMAL`, `DATE`, `DATETIME`, `TIMESTAMP`, `BIGINT
/// UNSIGNED`), as the type reads that column's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "ledger")]
#[serde(rename_all = "camelCase")]
struct LedgerEntry {
    #[idem(key)]
    code: String,
    amount: f64,
    booked_on: String,
    booked_at: String,
    recorded_at: String,
    views: u64,
}

fn ledger_entry(code: &str, amount: f64, views: u64) -> LedgerEntry {
    LedgerEntry {
        code: code.into(),
        amount,
        booked_on: "2024-02-29".into(),
        booked_at: "2024-02-29 23:59:58".into(),
        recorded_at: "2024-03-01 00:00:01".into(),
        views,
    }
}

/// The audit of a model given at run time reads each column of a table another tool made as
/// text, whatever its type: a `DECIMAL` as the float it holds, dates and times as MariaDB
/// writes them, an unsigned integer as its digits. Rows stored with the ids and content hashes
/// idem derives from those readings are clean; a row whose amount changed after it was hashed
/// differs in its hash; a row under the tool's own id, without a hash, is both.
#[tokio::test]
async fn the_audit_of_a_model_given_at_run_time_reads_decimals_dates_and_unsigned_integers() {
    for db in fresh_backends("mysql_column_types").await {
        let Db::Mysql {
            store, connection, ..
        } = &db
        else {
            continue;
        };
        let mut connection = connection.lock().await;
        idem_core::sqlx::raw_sql(
            "CREATE TABLE ledger (`_id` VARCHAR(40) PRIMARY KEY, \
             code VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL UNIQUE, \
             amount DECIMAL(12, 2), bookedOn DATE, bookedAt DATETIME, recordedAt TIMESTAMP NULL, \
             views BIGINT UNSIGNED, sourceHash VARCHAR(71))",
        )
        .execute(&mut *connection)
        .await
        .unwrap();
        let clean = [
            ledger_entry("a-1", 12.5, 3_000_000_000),
            ledger_entry("a-2", 0.1, 0),
        ];
        let edited = ledger_entry("a-3", 7.0, 1);
        let legacy = ledger_entry("a-4", 1.25, 2);
        let rows = [
            (&clean[0], clean[0].id().unwrap().to_string(), "12.50"),
            (&clean[1], clean[1].id().unwrap().to_string(), "0.10"),
            // Hashed at 7.00, stored at 7.01.
            (&edited, edited.id().unwrap().to_string(), "7.01"),
            (&legacy, "legacy-4".to_owned(), "1.25"),
        ];
        for (entry, id, amount) in rows {
            let hash =
                (entry.code != legacy.code).then(|| entry.content_hash().unwrap().to_string());
            idem_core::sqlx::query("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
                .bind(id)
                .bind(&entry.code)
                .bind(amount)
                .bind(&entry.booked_on)
                .bind(&entry.booked_at)
                .bind(&entry.recorded_at)
                .bind(entry.views)
                .bind(hash)
                .execute(&mut *connection)
                .await
                .unwrap();
        }
        let report = store
            .audit_model(&mut connection, &LedgerEntry::MODEL, &[], |_| {})
            .await
            .unwrap_or_else(|error| panic!("{db}: {error}"));
        assert_eq!(report.scanned, 4, "{db}: {report}");
        assert_eq!(report.clean, 2, "{db}: {report}");
        assert_eq!(report.hash_mismatch.count, 1, "{db}: {report}");
        assert_eq!(report.legacy_ids.count, 1, "{db}: {report}");
        assert_eq!(report.missing_hash.count, 1, "{db}: {report}");
    }
}

/// A level of another tool's table, keyed by a `TINYINT` tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "levels")]
struct Level {
    #[idem(key)]
    tier: i64,
    #[idem(key)]
    name: String,
    active: bool,
    rank: i64,
}

/// The audit of a model given at run time reads a `TINYINT` as the integer it holds and only a
/// `BOOLEAN` (`TINYINT(1)`) as a flag: rows stored with the ids and content hashes idem derives
/// from a tier of 2 and a rank of 200 are clean, not read as `true`.
#[tokio::test]
async fn the_audit_of_a_model_given_at_run_time_reads_a_tinyint_as_an_integer() {
    for db in fresh_backends("mysql_tinyint").await {
        let Db::Mysql {
            store, connection, ..
        } = &db
        else {
            continue;
        };
        let mut connection = connection.lock().await;
        idem_core::sqlx::raw_sql(
            "CREATE TABLE levels (`_id` VARCHAR(40) PRIMARY KEY, tier TINYINT NOT NULL, \
             name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, \
             active BOOLEAN, `rank` TINYINT UNSIGNED, sourceHash VARCHAR(71), \
             UNIQUE (tier, name))",
        )
        .execute(&mut *connection)
        .await
        .unwrap();
        let levels = [(2, "a", true, 200), (3, "b", false, 7), (1, "c", true, 1)].map(
            |(tier, name, active, rank)| Level {
                tier,
                name: name.into(),
                active,
                rank,
            },
        );
        for level in &levels {
            idem_core::sqlx::query("INSERT INTO levels VALUES (?, ?, ?, ?, ?, ?)")
                .bind(level.id().unwrap().to_string())
                .bind(level.tier)
                .bind(&level.name)
                .bind(level.active)
                .bind(level.rank)
                .bind(level.content_hash().unwrap().to_string())
                .execute(&mut *connection)
                .await
                .unwrap();
        }
        let report = store
            .audit_model(&mut connection, &Level::MODEL, &[], |_| {})
            .await
            .unwrap_or_else(|error| panic!("{db}: {error}"));
        assert_eq!(report.scanned, 3, "{db}: {report}");
        assert_eq!(report.clean, 3, "{db}: {report}");
    }
}

/// An `_id` column too short for the ids idem writes (a legacy ObjectId's `VARCHAR(24)`, the
/// very table `adopt` is for) is refused before any write, naming the column with its fix,
/// where every write and every move failed on it one by one.
#[tokio::test]
async fn an_id_column_too_short_for_a_ulid_is_refused_with_its_fix() {
    for db in fresh_backends("mysql_short_id").await {
        let Db::Mysql {
            store, connection, ..
        } = &db
        else {
            continue;
        };
        db.ensure::<Post>().await;
        db.run_raw(
            "ALTER TABLE posts MODIFY `_id` VARCHAR(24) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_nopad_bin NOT NULL",
            mongodb::bson::doc! {},
        )
        .await;
        let mut connection = connection.lock().await;
        let refused = store
            .unlearned()
            .upsert(&mut connection, &post())
            .await
            .unwrap_err();
        match refused.kind() {
            ErrorKind::SchemaMismatch { problem, .. } => {
                assert!(
                    problem.contains("`_id`") || problem.contains("\"_id\""),
                    "{db}: {problem}"
                );
                assert!(problem.contains("varchar(24)"), "{db}: {problem}");
                assert!(problem.contains("MODIFY"), "{db}: {problem}");
            }
            other => panic!("{db}: {other:?}"),
        }
    }
}

/// A row of another tool's table whose `touched` column the database stamps on every update.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "stamps")]
struct Stamp {
    #[idem(key)]
    code: String,
    touched: String,
}

/// A column MariaDB updates on any change of its row (`ON UPDATE CURRENT_TIMESTAMP`) keeps its
/// value through the adoption's move: the move assigns it itself, so the row's time is not lost
/// and the hash the move wrote (over the value as read) is still the row's.
#[tokio::test]
async fn a_column_stamped_on_update_keeps_its_value_through_a_move() {
    for db in fresh_backends("mysql_on_update").await {
        if !db.is_mysql() {
            continue;
        }
        db.ensure::<Stamp>().await;
        db.run_raw(
            "ALTER TABLE stamps MODIFY touched TIMESTAMP NOT NULL \
             DEFAULT '2000-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP; \
             INSERT INTO stamps (`_id`, code, touched) VALUES \
             ('legacy-1', 'a', '2001-02-03 04:05:06')",
            mongodb::bson::doc! {},
        )
        .await;
        let adopted = db.adopt_model::<Stamp>().await;
        assert_eq!(adopted.moved.count, 1, "{db}: {adopted}");
        let stored = db.raw::<Stamp>().await;
        // The raw read shows a TIMESTAMP as MariaDB's binary protocol sends it: the year 2001
        // (07d1), then month, day, hour, minute, second.
        assert!(stored[0].contains("07d1070203040506"), "{db}: {stored:?}");
        let audit = db.audit_model::<Stamp>().await;
        assert!(audit.is_clean(), "{db}: {audit}");
    }
}
