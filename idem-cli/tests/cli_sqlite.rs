//! The `idem` binary on a SQLite file (`--uri sqlite:PATH`): a table idem wrote, with rows
//! another tool added under its own ids, is audited by flags and adopted; wrong flags move
//! nothing; a file that does not exist is an error, not a new empty database.

use std::process::{Command, Output};
use std::time::Duration;

use idem_core::sqlite::Store;
use idem_core::sqlx::sqlite::SqliteConnectOptions;
use idem_core::sqlx::{ConnectOptions, SqliteConnection};
use idem_core::Idempotent;
use serde_json::Value;

mod common;
use common::{post, Post, FLAGS};

fn fresh_path(test: &str) -> std::path::PathBuf {
    let directory = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("cli_{test}_{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

async fn connect(path: &std::path::Path) -> SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .busy_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

fn idem(path: &std::path::Path, args: &[&str]) -> Output {
    idem_with(path, args, &FLAGS)
}

/// `idem` with `args` and the model's flags `flags`.
fn idem_with(path: &std::path::Path, args: &[&str], flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .args(flags)
        .arg("--uri")
        .arg(format!("sqlite:{}", path.display()))
        .env_remove("MONGODB_URI")
        .output()
        .unwrap()
}

/// Adopting with the timestamp forgotten is refused, naming it.
fn assert_wrong_flags_refused(path: &std::path::Path) {
    let wrong = idem_with(
        path,
        &["adopt", "--yes"],
        &["--table", "posts", "--key", "slug,lang"],
    );
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("(likely --timestamp publishedAt)"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
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

#[tokio::test]
async fn a_sqlite_table_is_audited_and_adopted_by_flags() {
    let path = fresh_path("adopt");
    let mut connection = connect(&path).await;
    let store = Store::new();
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let posts: Vec<Post> = (0..5).map(post).collect();
    store.upsert_many(&mut connection, &posts).await.unwrap();
    idem_core::sqlx::raw_sql(
        "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title) VALUES \
         ('legacy-1', 'old-1', 'en', 1700000000100, 'Old'), \
         ('legacy-2', 'old-2', 'en', 1700000000200, 'Old')",
    )
    .execute(&mut connection)
    .await
    .unwrap();

    let audit = idem(&path, &["audit", "--json"]);
    assert_eq!(
        audit.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let audited = report(&audit);
    assert_eq!(audited["scanned"], 7, "{audited}");
    assert_eq!(audited["legacy_ids"]["count"], 2, "{audited}");
    assert_eq!(audited["missing_hash"]["count"], 2, "{audited}");
    assert_eq!(audited["clean"], 5, "{audited}");

    // Wrong flags: named, and nothing moves.
    let before = idem(&path, &["audit", "--json"]).stdout;
    assert_wrong_flags_refused(&path);

    assert_eq!(
        idem(&path, &["audit", "--json"]).stdout,
        before,
        "nothing moved"
    );
    let adopt = idem(&path, &["adopt", "--json", "--yes"]);
    assert_eq!(
        adopt.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&adopt.stderr)
    );
    assert_eq!(report(&adopt)["moved"]["count"], 2);
    let typed = store.audit::<Post>(&mut connection).await.unwrap();
    assert!(typed.is_clean(), "{typed}");
}

#[test]
fn a_sqlite_file_that_does_not_exist_is_an_error() {
    let path = fresh_path("missing");
    let output = idem(&path, &["audit"]);
    assert_eq!(output.status.code(), Some(2));
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.starts_with("idem: cannot open sqlite:"),
        "{message}"
    );
    assert!(!path.exists(), "no database was created");
}

/// One document idem wrote is evidence enough: flags that forget the timestamp would move it to
/// another id, and are refused.
#[tokio::test]
async fn one_document_idem_wrote_is_enough_to_refuse_wrong_flags() {
    let path = fresh_path("one");
    let mut connection = connect(&path).await;
    let store = Store::new();
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    store.upsert(&mut connection, &post(0)).await.unwrap();
    let before = idem(&path, &["audit", "--json"]).stdout;
    assert_wrong_flags_refused(&path);
    assert_eq!(
        idem(&path, &["audit", "--json"]).stdout,
        before,
        "nothing moved"
    );
    assert_eq!(
        store
            .get::<Post>(&mut connection, post(0).id().unwrap())
            .await
            .unwrap()
            .map(|p| p.title),
        Some(post(0).title)
    );
}

/// A counter only `apply_once` changes, and a deletion marker: neither is hashed.
#[derive(Clone, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "articles")]
#[serde(rename_all = "camelCase")]
struct Article {
    #[idem(key)]
    slug: String,
    title: String,
    #[idem(effect)]
    views: i64,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

/// A table idem wrote for a type with an effect field and a tombstone is clean when the command
/// is told their roles, by flags or by a model file written from the type; without them, the
/// report names the field and the flags rather than blaming another tool. A flag that disagrees
/// with the model file is an error.
#[tokio::test]
async fn effect_and_tombstone_fields_are_told_by_flags_or_a_model_file() {
    let path = fresh_path("effect");
    let mut connection = connect(&path).await;
    let store = Store::new();
    store
        .ensure_table::<Article>(&mut connection)
        .await
        .unwrap();
    for n in 0..3 {
        let article = Article {
            slug: format!("a{n}"),
            title: format!("Title {n}"),
            views: 0,
            deleted_at: None,
        };
        store.upsert(&mut connection, &article).await.unwrap();
    }
    idem_core::sqlx::raw_sql("UPDATE articles SET views = 7")
        .execute(&mut connection)
        .await
        .unwrap();
    let model_file = path.with_extension("model.json");
    idem_core::model_file::write::<Article>(&model_file).unwrap();
    let model = model_file.display().to_string();
    let table = ["--table", "articles"];

    let without_roles = idem_with(
        &path,
        &["audit"],
        &[&table[..], &["--key", "slug"]].concat(),
    );
    let summary = String::from_utf8_lossy(&without_roles.stdout);
    assert_eq!(without_roles.status.code(), Some(1), "{summary}");
    assert!(
        summary.contains("without `views`") && summary.contains("`--effect`"),
        "{summary}"
    );
    assert!(!summary.contains("another tool"), "{summary}");

    let by_flags = [
        &table[..],
        &[
            "--key",
            "slug",
            "--effect",
            "views",
            "--tombstone",
            "deletedAt",
        ],
    ]
    .concat();
    for flags in [&by_flags[..], &["--model", &model][..]] {
        let audit = idem_with(&path, &["audit", "--json"], flags);
        let audited = report(&audit);
        assert_eq!(audit.status.code(), Some(0), "{flags:?}: {audited}");
        assert_eq!(audited["clean"], 3, "{flags:?}: {audited}");
    }

    let disagreeing = idem_with(&path, &["audit"], &["--model", &model, "--key", "title"]);
    assert_eq!(disagreeing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&disagreeing.stderr);
    assert!(
        stderr.contains("--key \"title\" disagrees with the file, which says \"slug\""),
        "{stderr}"
    );
    std::fs::write(&model_file, "{\"format\": \"idem-model/1\"}").unwrap();
    let broken = idem_with(&path, &["audit"], &["--model", &model]);
    assert_eq!(broken.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(
        stderr.contains(&model) && stderr.contains("missing field"),
        "{stderr}"
    );
}

/// A note with entries no field declares, flattened beside its fields.
#[derive(Clone, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    slug: String,
    body: String,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, String>,
}

/// A type that flattens a map hashes its entries with its fields as one map, which no model given
/// at run time can redo: a model file of such a type is refused, naming the field and saying to
/// audit and adopt with the type, as is a file saying only `"flattened": true`; and
/// `model_file::write` refuses to write one. Nothing is reported as changed by another tool.
#[tokio::test]
async fn a_model_file_of_a_type_that_flattens_is_refused() {
    let path = fresh_path("flattened");
    let mut connection = connect(&path).await;
    let store = Store::new();
    store.ensure_table::<Note>(&mut connection).await.unwrap();
    for n in 0..2 {
        let note = Note {
            slug: format!("n{n}"),
            body: format!("Body {n}"),
            extra: [("colour".to_owned(), format!("c{n}"))].into(),
        };
        store.upsert(&mut connection, &note).await.unwrap();
    }
    let model_file = path.with_extension("model.json");
    let model = model_file.display().to_string();
    let named = idem_core::model_file::ModelFile::of::<Note>().to_json();
    let unnamed = r#"{"format": "idem-model/1", "collection": "notes", "id_scheme": "v1",
        "hash_field": "sourceHash", "hash_algorithm": "sha256",
        "fields": [{"name": "slug", "role": "key"}, {"name": "body"}], "flattened": true}"#;
    for (text, field) in [(named.as_str(), "`extra`"), (unnamed, "a field")] {
        std::fs::write(&model_file, text).unwrap();
        for command in ["audit", "adopt"] {
            let refused = idem_with(&path, &[command], &["--model", &model]);
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert_eq!(refused.status.code(), Some(2), "{command} {text}: {stderr}");
            for words in [
                format!("the type flattens {field} (`#[serde(flatten)]`)"),
                "store.audit::<T>()".to_owned(),
                "store.adopt::<T>()".to_owned(),
            ] {
                assert!(
                    stderr.contains(&words),
                    "{command} {text}: {words}: {stderr}"
                );
            }
        }
    }
    let unwritten = idem_core::model_file::write::<Note>(path.with_extension("write.json"));
    assert!(
        unwritten
            .unwrap_err()
            .to_string()
            .contains("flattens `extra`"),
        "write refuses too"
    );
}

/// The table is named: without `--table` (or `--model`) the command says so.
#[test]
fn the_table_is_required_without_a_model_file() {
    let path = fresh_path("no_table");
    std::fs::write(&path, b"").unwrap();
    let output = idem_with(&path, &["audit"], &["--key", "slug"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--collection"), "{stderr}");
}

/// `--table` beside `--model` names the table the file's type is stored in under another name
/// (a production table, a copy): the file's collection name gives way to it.
#[tokio::test]
async fn the_table_flag_overrides_the_model_files_collection() {
    let path = fresh_path("renamed");
    let mut connection = connect(&path).await;
    let store = Store::new();
    store.ensure_table::<Post>(&mut connection).await.unwrap();
    let posts: Vec<Post> = (0..3).map(post).collect();
    store.upsert_many(&mut connection, &posts).await.unwrap();
    idem_core::sqlx::raw_sql("ALTER TABLE posts RENAME TO posts_live")
        .execute(&mut connection)
        .await
        .unwrap();
    let model_file = path.with_extension("model.json");
    idem_core::model_file::write::<Post>(&model_file).unwrap();
    let model = model_file.display().to_string();
    let renamed = ["--model", &model, "--table", "posts_live"];
    let audit = idem_with(&path, &["audit", "--json"], &renamed);
    let audited = report(&audit);
    assert_eq!(audit.status.code(), Some(0), "{audited}");
    assert_eq!(audited["clean"], 3, "{audited}");
    let adopt = idem_with(&path, &["adopt", "--json", "--yes"], &renamed);
    assert_eq!(adopt.status.code(), Some(0), "{}", report(&adopt));
    // The file's own name is still the default.
    let missing = idem_with(&path, &["audit"], &["--model", &model]);
    assert_eq!(missing.status.code(), Some(2));
}

/// `adopt` without `--yes` on a table idem cannot write yet (another tool's, with its own id
/// column and no `_id`): the plan says what `--yes` would refuse, not to run it again.
#[tokio::test]
async fn adopt_without_yes_says_what_yes_would_refuse() {
    let path = fresh_path("plan_refused");
    let mut connection = connect(&path).await;
    idem_core::sqlx::raw_sql(
        "CREATE TABLE posts (id INTEGER PRIMARY KEY, slug TEXT, lang TEXT, \"publishedAt\" \
         INTEGER, title TEXT); INSERT INTO posts (slug, lang, \"publishedAt\", title) VALUES \
         ('a', 'en', 1700000000000, 'A')",
    )
    .execute(&mut connection)
    .await
    .unwrap();
    let plan = idem(&path, &["adopt"]);
    let stderr = String::from_utf8_lossy(&plan.stderr);
    assert_eq!(plan.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("with --yes, adopt would refuse"),
        "{stderr}"
    );
    assert!(stderr.contains("_id"), "{stderr}");
    assert!(!stderr.contains("Run again with --yes"), "{stderr}");
}
