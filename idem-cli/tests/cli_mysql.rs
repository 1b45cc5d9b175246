//! The `idem` binary against a real MariaDB server (`MYSQL_URI`, which `scripts/test` starts): a
//! table idem wrote, with rows another tool added under its own ids, is audited with the model
//! given by flags and adopted; wrong flags move nothing. Each test works in a database of its
//! own, which the command reaches with `--database`.

use std::process::{Command, Output};

use idem_core::mysql::Store;
use idem_core::sqlx::mysql::MySqlConnectOptions;
use idem_core::sqlx::{self, ConnectOptions, MySqlConnection};
use serde_json::Value;

mod common;
use common::{post, Post, FLAGS};

/// The server under test.
fn server() -> String {
    std::env::var("MYSQL_URI").unwrap_or_else(|_| {
        panic!("MYSQL_URI is not set: run `scripts/test`, which starts a MariaDB server")
    })
}

/// A new, empty database `name` on the server at `uri`, and a connection to it.
async fn fresh_database(uri: &str, name: &str) -> MySqlConnection {
    let options: MySqlConnectOptions = uri.parse().unwrap();
    let mut admin = options.connect().await.unwrap();
    for statement in [
        format!("DROP DATABASE IF EXISTS `{name}`"),
        format!("CREATE DATABASE `{name}`"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    options.database(name).connect().await.unwrap()
}

/// `idem` with `args` against database `database` at `uri`.
fn idem(uri: &str, database: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .args(["--uri", uri, "--database", database])
        .env_remove("MONGODB_URI")
        .output()
        .unwrap()
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The ids of `posts`, in order.
async fn ids(connection: &mut MySqlConnection) -> Vec<String> {
    sqlx::query_scalar::<_, String>("SELECT `_id` FROM posts ORDER BY `_id`")
        .fetch_all(connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn audit_and_adopt_a_table_another_tool_added_rows_to() {
    let uri = server();
    let database = format!("idem_cli_adopt_{}", std::process::id());
    let mut connection = fresh_database(&uri, &database).await;
    let store = Store::new();
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    for n in 0..3 {
        store.upsert(&mut connection, &post(n)).await.unwrap();
    }
    // Two rows another tool inserted under ids of its own, without a content hash.
    sqlx::raw_sql(sqlx::AssertSqlSafe(
        "INSERT INTO posts (`_id`, slug, lang, publishedAt, title) VALUES \
         ('legacy-0000000000000000001', 'post-3', 'en', 1700000000003, 'Title 3'), \
         ('legacy-0000000000000000002', 'post-4', 'en', 1700000000004, 'Title 4')",
    ))
    .execute(&mut connection)
    .await
    .unwrap();

    let mut args = vec!["audit", "--json"];
    args.extend(FLAGS);
    let audited = idem(&uri, &database, &args);
    assert_eq!(audited.status.code(), Some(1), "{audited:?}");
    let audit = report(&audited);
    assert_eq!(audit["scanned"], 5, "{audit}");
    assert_eq!(audit["legacy_ids"]["count"], 2, "{audit}");
    assert_eq!(audit["missing_hash"]["count"], 2, "{audit}");
    assert_eq!(audit["clean"], 3, "{audit}");

    // The timestamp forgotten: the command names it, and nothing moves.
    let before = ids(&mut connection).await;
    let mut wrong = vec!["adopt", "--yes"];
    wrong.extend(&FLAGS[..4]);
    let refused = idem(&uri, &database, &wrong);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("(likely --timestamp publishedAt)"),
        "{message}"
    );
    assert_eq!(ids(&mut connection).await, before, "nothing moved");

    let mut adopt = vec!["adopt", "--yes", "--json"];
    adopt.extend(FLAGS);
    let adopted = idem(&uri, &database, &adopt);
    assert_eq!(adopted.status.code(), Some(0), "{adopted:?}");
    assert_eq!(
        report(&adopted)["moved"]["count"],
        2,
        "{}",
        report(&adopted)
    );
    let expected: Vec<String> = {
        let mut ids: Vec<String> = (0..5).map(|n| post(n).id().unwrap().to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&mut connection).await, expected);
    // Clean now, and idem's own writes find the adopted rows unchanged.
    let mut again = vec!["audit", "--json"];
    again.extend(FLAGS);
    let clean = idem(&uri, &database, &again);
    assert_eq!(clean.status.code(), Some(0), "{}", report(&clean));
    for n in 3..5 {
        assert_eq!(
            store.upsert(&mut connection, &post(n)).await.unwrap(),
            idem_core::Outcome::Unchanged
        );
    }
}

/// A URI that names no database, and no `--database`: the error says so, and how to name one,
/// rather than that "the database" has no such table.
#[test]
fn a_uri_without_a_database_is_told_to_name_one() {
    let uri = server();
    let (base, _) = uri.rsplit_once('/').expect("a URI with a path");
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["audit", "--table", "posts", "--key", "slug", "--uri"])
        .arg(format!("{base}/"))
        .env_remove("MONGODB_URI")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("names no database"), "{stderr}");
    assert!(stderr.contains("--database"), "{stderr}");
}
