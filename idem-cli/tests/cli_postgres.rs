//! The `idem` binary against real PostgreSQL servers (each of `IDEM_POSTGRES_URIS`, which
//! `scripts/test` starts): a table idem wrote, then edited by other tools, is audited with the
//! model given by flags and adopted; wrong flags move nothing; a missing table or column is an
//! error naming it; `--max-documents` bounds a run. Each test works in a database of its own,
//! which the command reaches with `--database`.

use std::process::{Command, Output};

use idem_core::postgres::Store;
use idem_core::tokio_postgres::{self, Client, NoTls};
use idem_core::Idempotent;
use serde_json::Value;

#[derive(Clone, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    title: String,
    /// A nested struct, stored as `jsonb`: its keys come back sorted.
    author: Option<Author>,
    rating: f64,
    #[idem(volatile)]
    fetched_at: i64,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Author {
    name: String,
    email: String,
}

const T0: i64 = 1_700_000_000_000;

/// The flags of `Post`.
const POST_FLAGS: [&str; 8] = [
    "--key",
    "slug,lang",
    "--timestamp",
    "publishedAt",
    "--volatile",
    "fetchedAt",
    "--table",
    "posts",
];

fn post(n: i64, author: Option<Author>) -> Post {
    Post {
        slug: format!("post-{n}"),
        lang: "en".into(),
        published_at: T0 + n * 1_000,
        title: format!("Title {n}"),
        author,
        rating: 4.0,
        fetched_at: T0,
    }
}

/// `Post`'s id fields, as `POST_FLAGS` give them.
static POST_FIELDS: [idem_core::Field; 4] = [
    idem_core::Field::new("slug", "slug", idem_core::Role::Key),
    idem_core::Field::new("lang", "lang", idem_core::Role::Key),
    idem_core::Field::new("publishedAt", "publishedAt", idem_core::Role::Timestamp),
    idem_core::Field::new("fetchedAt", "fetchedAt", idem_core::Role::Volatile),
];

/// Each server's URI, by label.
fn servers() -> Vec<(String, String)> {
    let list = std::env::var("IDEM_POSTGRES_URIS").unwrap_or_else(|_| {
        panic!("IDEM_POSTGRES_URIS is not set: run `scripts/test`, which starts the servers")
    });
    list.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(label, uri)| (label.to_owned(), uri.to_owned()))
        .collect()
}

async fn connect(uri: &str, database: Option<&str>) -> Client {
    let mut config: tokio_postgres::Config = uri.parse().unwrap();
    if let Some(database) = database {
        config.dbname(database);
    }
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A new, empty database `name` on the server at `uri`, and a client of it.
async fn fresh_database(uri: &str, name: &str) -> Client {
    let admin = connect(uri, None).await;
    for statement in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    connect(uri, Some(name)).await
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

/// Every row of `posts` as JSON, in `_id` order.
async fn rows(client: &Client) -> Vec<Value> {
    client
        .query("SELECT to_jsonb(t.*) FROM posts t ORDER BY t.\"_id\"", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&output.stdout)))
}

#[tokio::test]
async fn audit_and_adopt_a_table_other_tools_changed() {
    for (label, uri) in servers() {
        let name = format!("idem_cli_adopt_{label}");
        let client = fresh_database(&uri, &name).await;
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        let author = Author {
            name: "Ada".into(),
            email: "ada@example.com".into(),
        };
        let posts = [
            post(0, None),
            post(1, Some(author)),
            post(2, None),
            post(3, None),
        ];
        for post in &posts {
            store.upsert(&client, post).await.unwrap();
        }
        // Another tool: two rows under its own ids without hashes, a key edited (an orphan
        // whose hash is stale too) and a title edited (a stale hash).
        client
            .batch_execute(
                "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, rating, \
                 \"fetchedAt\") VALUES \
                 ('legacy-1', 'old-1', 'en', 1700000100000, 'Old 1', 3.5, 0), \
                 ('legacy-2', 'old-2', 'de', 1700000200000, 'Old 2', 5, 0); \
                 UPDATE posts SET slug = 'post-2-renamed' WHERE slug = 'post-2'; \
                 UPDATE posts SET title = 'Edited' WHERE slug = 'post-3';",
            )
            .await
            .unwrap();

        let audit = idem(
            &uri,
            &name,
            &[&["audit", "--json"][..], &POST_FLAGS].concat(),
        );
        assert_eq!(audit.status.code(), Some(1), "{label}: {}", stderr(&audit));
        let audited = report(&audit);
        assert_eq!(audited["scanned"], 6, "{label}: {audited}");
        assert_eq!(audited["legacy_ids"]["count"], 2, "{label}: {audited}");
        assert_eq!(audited["orphans"]["count"], 1, "{label}: {audited}");
        assert_eq!(audited["missing_hash"]["count"], 2, "{label}: {audited}");
        assert_eq!(audited["hash_mismatch"]["count"], 2, "{label}: {audited}");
        // The nested author's keys came back sorted: not checked, not called changed.
        assert_eq!(audited["hash_unchecked"]["count"], 1, "{label}: {audited}");
        assert_eq!(audited["clean"], 2, "{label}: {audited}");
        assert!(
            audited.get("model_mismatch").is_none(),
            "{label}: {audited}"
        );

        let before = rows(&client).await;
        let plan = idem(&uri, &name, &[&["adopt"][..], &POST_FLAGS].concat());
        assert_eq!(plan.status.code(), Some(1), "{label}: {}", stderr(&plan));
        assert!(
            stderr(&plan).contains("3 documents to move"),
            "{}",
            stderr(&plan)
        );
        assert_eq!(
            rows(&client).await,
            before,
            "{label}: the plan moves nothing"
        );

        let adopt = idem(
            &uri,
            &name,
            &[&["adopt", "--json", "--yes"][..], &POST_FLAGS].concat(),
        );
        assert_eq!(adopt.status.code(), Some(0), "{label}: {}", stderr(&adopt));
        assert_eq!(report(&adopt)["moved"]["count"], 3, "{label}");

        // The type agrees with the flags: every row is under the id it derives, with the hash
        // it computes, but for the title edited in place (the next upsert rewrites it).
        let typed = store.audit::<Post, _>(&client).await.unwrap();
        assert_eq!(typed.scanned, 6, "{label}: {typed}");
        assert_eq!(
            typed.legacy_ids.count + typed.orphans.count,
            0,
            "{label}: {typed}"
        );
        assert_eq!(typed.missing_hash.count, 0, "{label}: {typed}");
        assert_eq!(typed.hash_mismatch.count, 1, "{label}: {typed}");
        assert_eq!(
            typed.hash_mismatch.samples[0].id,
            posts[3].id().unwrap().to_string(),
            "{label}: {typed}"
        );
        let renamed = Post {
            slug: "post-2-renamed".into(),
            ..posts[2].clone()
        };
        let outcome = store.upsert(&client, &renamed).await.unwrap();
        assert!(
            matches!(outcome, idem_core::Outcome::Unchanged),
            "{label}: {outcome:?}"
        );
    }
}

/// Seeds `posts` with 20 rows idem wrote.
async fn seed_correct_table(client: &Client) {
    let store = Store::new();
    store.ensure_table::<Post, _>(client).await.unwrap();
    let posts: Vec<Post> = (0..20).map(|n| post(n, None)).collect();
    store.upsert_many(client, &posts).await.unwrap();
}

#[tokio::test]
async fn adopt_with_a_wrong_flag_moves_nothing_and_names_the_flag() {
    for (label, uri) in servers() {
        let name = format!("idem_cli_flags_{label}");
        let client = fresh_database(&uri, &name).await;
        seed_correct_table(&client).await;
        let before = rows(&client).await;
        let flags = |replaced: &[&str]| -> Vec<String> {
            let mut flags: Vec<String> = ["--table", "posts", "--volatile", "fetchedAt"]
                .iter()
                .map(|flag| flag.to_string())
                .collect();
            flags.extend(replaced.iter().map(|flag| flag.to_string()));
            flags
        };
        let cases = [
            (flags(&["--key", "slug,lang"]), "--timestamp publishedAt"),
            (
                flags(&[
                    "--key",
                    "slug,lang",
                    "--timestamp",
                    "publishedAt",
                    "--scheme",
                    "joined",
                ]),
                "--scheme v1",
            ),
            (
                flags(&["--key", "slug", "--timestamp", "publishedAt"]),
                "--key slug,lang",
            ),
            (
                flags(&["--key", "lang,slug", "--timestamp", "publishedAt"]),
                "--key slug,lang",
            ),
        ];
        for (flags, likely) in cases {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let audit = idem(&uri, &name, &[&["audit"][..], &flags].concat());
            assert_eq!(audit.status.code(), Some(1), "{label} {flags:?}");
            let summary = String::from_utf8_lossy(&audit.stdout);
            assert!(
                summary.contains("WRONG MODEL") && summary.contains(&format!("(likely {likely})")),
                "{label} {flags:?}: {summary}"
            );
            for adopt in [
                idem(&uri, &name, &[&["adopt", "--yes"][..], &flags].concat()),
                idem(&uri, &name, &[&["adopt"][..], &flags].concat()),
            ] {
                assert_eq!(adopt.status.code(), Some(2), "{label} {flags:?}");
                let message = stderr(&adopt);
                assert!(
                    message.contains(&format!("(likely {likely})"))
                        && message.contains("nothing was moved"),
                    "{label} {flags:?}: {message}"
                );
            }
            assert_eq!(
                rows(&client).await,
                before,
                "{label} {flags:?}: not one row moved"
            );
        }
        // The library refuses as the command does.
        static FIELDS: [idem_core::Field; 2] = [
            idem_core::Field::new("slug", "slug", idem_core::Role::Key),
            idem_core::Field::new("lang", "lang", idem_core::Role::Key),
        ];
        let model = idem_core::Model::new("posts", idem_core::IdScheme::V1, "sourceHash", &FIELDS);
        let refused = Store::new()
            .adopt_model(&client, &model, &[], Default::default())
            .await
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("(likely --timestamp publishedAt)"),
            "{label}: {refused}"
        );
        assert_eq!(rows(&client).await, before, "{label}: not one row moved");
        let right = idem(
            &uri,
            &name,
            &[&["adopt", "--json", "--yes"][..], &POST_FLAGS].concat(),
        );
        assert_eq!(right.status.code(), Some(0), "{label}: {}", stderr(&right));
        assert_eq!(report(&right)["moved"]["count"], 0, "{label}");
        assert_eq!(
            rows(&client).await,
            before,
            "{label}: the right flags move nothing"
        );
    }
}

#[tokio::test]
async fn a_missing_table_or_column_is_an_error_naming_it() {
    for (label, uri) in servers() {
        let name = format!("idem_cli_missing_{label}");
        let client = fresh_database(&uri, &name).await;
        let missing = idem(&uri, &name, &["audit", "--table", "posts", "--key", "slug"]);
        assert_eq!(missing.status.code(), Some(2), "{label}");
        let message = stderr(&missing);
        assert!(
            message.contains(&format!("database `{name}` has no table `posts`")),
            "{label}: {message}"
        );
        // A schema-qualified name, and a name in another case than the table's: the error
        // says what the name is taken for.
        client
            .batch_execute("CREATE SCHEMA app; CREATE TABLE app.notes (slug text)")
            .await
            .unwrap();
        let dotted = idem(
            &uri,
            &name,
            &["audit", "--table", "app.notes", "--key", "slug"],
        );
        assert!(
            stderr(&dotted).contains("search_path"),
            "{label}: {}",
            stderr(&dotted)
        );
        client
            .batch_execute("CREATE TABLE notes (slug text)")
            .await
            .unwrap();
        let cased = idem(&uri, &name, &["audit", "--table", "Notes", "--key", "slug"]);
        assert!(
            stderr(&cased).contains("there is `notes`"),
            "{label}: {}",
            stderr(&cased)
        );
        // A server that cannot be reached: one line, without the URI's password.
        let unreachable = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["audit", "--table", "posts", "--key", "slug", "--uri"])
            .arg("postgres://idem:secret-word@127.0.0.1:1/idem")
            .output()
            .unwrap();
        assert_eq!(unreachable.status.code(), Some(2), "{label}");
        assert_eq!(
            stderr(&unreachable),
            "idem: cannot connect to PostgreSQL at postgres://idem:***@127.0.0.1:1/idem: error \
             connecting to server: Connection refused (os error 111)\n"
        );
        seed_correct_table(&client).await;
        let before = rows(&client).await;
        for command in ["audit", "adopt"] {
            let args: Vec<&str> = match command {
                "audit" => vec!["audit", "--table", "posts", "--key", "slgu"],
                _ => vec!["adopt", "--yes", "--table", "posts", "--key", "slgu"],
            };
            let typo = idem(&uri, &name, &args);
            assert_eq!(typo.status.code(), Some(2), "{label} {command}");
            let message = stderr(&typo);
            assert!(
                message.contains("has no column `slgu` (its columns: _id, slug, lang,"),
                "{label} {command}: {message}"
            );
        }
        let duplicates = idem(
            &uri,
            &name,
            &[
                &["adopt", "--yes", "--keep-duplicate", "greatest:title"][..],
                &POST_FLAGS,
            ]
            .concat(),
        );
        assert_eq!(duplicates.status.code(), Some(2), "{label}");
        assert!(
            stderr(&duplicates).contains("--keep-duplicate is for MongoDB"),
            "{label}"
        );
        assert_eq!(rows(&client).await, before, "{label}: nothing written");
    }
}

#[tokio::test]
async fn max_documents_bounds_a_run_and_the_next_goes_on() {
    for (label, uri) in servers() {
        let name = format!("idem_cli_max_{label}");
        let client = fresh_database(&uri, &name).await;
        Store::new().ensure_table::<Post, _>(&client).await.unwrap();
        for n in 0..5 {
            client
                .execute(
                    "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, rating, \
                     \"fetchedAt\") VALUES ($1, $2, 'en', $3, 'Old', 1, 0)",
                    &[&format!("legacy-{n}"), &format!("post-{n}"), &(T0 + n)],
                )
                .await
                .unwrap();
        }
        let bounded = [
            &["adopt", "--json", "--yes", "--max-documents", "2"][..],
            &POST_FLAGS,
        ]
        .concat();
        let first = idem(&uri, &name, &bounded);
        assert_eq!(first.status.code(), Some(1), "{label}: {}", stderr(&first));
        let first = report(&first);
        assert_eq!(
            (first["moved"]["count"].clone(), first["stopped"].clone()),
            (2.into(), true.into()),
            "{label}: {first}"
        );
        // The library's run-time adoption reports each row it reads, with the planner's
        // estimate once the table was analyzed.
        client.batch_execute("ANALYZE posts").await.unwrap();
        let model =
            idem_core::Model::new("posts", idem_core::IdScheme::V1, "sourceHash", &POST_FIELDS);
        let options = idem_core::postgres::AdoptOptions::default().with_max_documents(1);
        let mut seen = Vec::new();
        let one = Store::new()
            .adopt_model_with_progress(&client, &model, &[], options, |progress| {
                seen.push((progress.scanned, progress.total))
            })
            .await
            .unwrap();
        assert_eq!(one.moved.count, 1, "{label}: {one}");
        assert!(one.stopped, "{label}: {one}");
        assert_eq!(seen.first(), Some(&(1, Some(5))), "{label}: {seen:?}");
        assert!(
            seen.windows(2).all(|pair| pair[1].0 == pair[0].0 + 1),
            "{label}: {seen:?}"
        );
        let rest = idem(
            &uri,
            &name,
            &[&["adopt", "--json", "--yes"][..], &POST_FLAGS].concat(),
        );
        assert_eq!(rest.status.code(), Some(0), "{label}: {}", stderr(&rest));
        assert_eq!(report(&rest)["moved"]["count"], 2, "{label}");
        let typed = Store::new().audit::<Post, _>(&client).await.unwrap();
        assert_eq!(typed.clean, 5, "{label}: {typed}");
    }
}

/// A server reached with `sslmode=require` (as hosted services ask): the error says that idem
/// connects without TLS, rather than only the driver's "no TLS implementation configured".
#[tokio::test]
async fn a_uri_that_requires_tls_is_refused_saying_idem_has_none() {
    for (label, uri) in servers() {
        let separator = if uri.contains('?') { '&' } else { '?' };
        let required = format!("{uri}{separator}sslmode=require");
        let output = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args([
                "audit", "--uri", &required, "--table", "posts", "--key", "slug",
            ])
            .env_remove("MONGODB_URI")
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{label}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("without TLS"),
            "{label}: {}",
            stderr(&output)
        );
    }
}
