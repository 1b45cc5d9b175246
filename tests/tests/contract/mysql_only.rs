//! Refusals the MySQL family makes of a session the others have no such setting for: a
//! `sql_mode` without strict mode (a value a column cannot hold would be cut with a warning, and
//! the NULL that keeps an upsert off another document's row written as `''`) or with
//! `SIMULTANEOUS_ASSIGNMENT` (an upsert's columns would not see its guard's decision). Runs on
//! MariaDB alone.

use idem_core::ErrorKind;
use idem_tests::backends::{fresh_backends, Db};

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
