//! The `idem` binary against a real server: a collection seeded with every kind of problem is
//! audited with the model given by flags (the JSON report checked whole, the summary by its
//! lines), then adopted, after which the audit finds only what adoption cannot fix.
//!
//! The server is `MONGODB_URI`, as for every integration test (`scripts/test` starts one).

use std::process::{Command, Output};

use idem_core::Idempotent;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{self, doc, Document};
use serde_json::json;

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
    #[idem(volatile)]
    fetched_at: i64,
}

const T0: i64 = 1_700_000_000_000;

fn post(slug: &str, published_at: i64, title: &str) -> Post {
    Post {
        slug: slug.into(),
        lang: "en".into(),
        published_at,
        title: title.into(),
        fetched_at: T0,
    }
}

fn server_uri() -> String {
    std::env::var("MONGODB_URI").unwrap_or_else(|_| {
        panic!("MONGODB_URI is not set: run `scripts/test`, which starts a test server")
    })
}

fn oid(n: u8) -> ObjectId {
    ObjectId::from_bytes([0x65, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, n])
}

/// `post` stored under `id`, with `hash` as its content hash if given.
fn stored(id: bson::Bson, post: &Post, hash: Option<String>) -> Document {
    let mut document = doc! { "_id": id };
    document.extend(bson::to_document(post).unwrap());
    if let Some(hash) = hash {
        document.insert("sourceHash", hash);
    }
    document
}

/// Every document of `database`'s `posts`, in `_id` order.
async fn stored_documents(database: &mongodb::Database) -> Vec<Document> {
    documents_in(database, "posts").await
}

/// Every document of `database`'s `collection`, in `_id` order.
async fn documents_in(database: &mongodb::Database, collection: &str) -> Vec<Document> {
    let mut cursor = database
        .collection::<Document>(collection)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .unwrap();
    let mut documents = Vec::new();
    while cursor.advance().await.unwrap() {
        documents.push(cursor.deserialize_current().unwrap());
    }
    documents
}

/// `idem` with `args` and the model's flags, `model` (defaulting to the flags of `Post`).
fn idem_with(args: &[&str], database: &str, model: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .args(["--database", database, "--collection", "posts"])
        .args(model)
        .env("MONGODB_URI", server_uri())
        .output()
        .unwrap()
}

fn idem(args: &[&str], database: &str) -> Output {
    let model = [
        "--database",
        database,
        "--collection",
        "posts",
        "--key",
        "slug,lang",
        "--timestamp",
        "publishedAt",
        "--scheme",
        "v1",
        "--hash-field",
        "sourceHash",
        "--volatile",
        "fetchedAt",
        "--fields",
        "slug,lang,publishedAt,title,fetchedAt",
    ];
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .args(model)
        .env("MONGODB_URI", server_uri())
        .output()
        .unwrap()
}

#[tokio::test]
async fn audit_and_adopt_a_collection_with_every_kind_of_problem() {
    let name = format!("idem_cli_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    let clean = post("clean", T0, "Clean");
    let edited = post("edited", T0, "Edited by hand");
    let orphan = post("orphan", T0 + 1, "Orphan");
    let id = |post: &Post| bson::Bson::String(post.id().unwrap().to_string());
    let hash = |post: &Post| Some(post.content_hash().unwrap().to_hex());
    let orphan_id = post("orphan", T0, "").id().unwrap();
    let seeded = [
        stored(id(&clean), &clean, hash(&clean)),
        stored(
            id(&edited),
            &edited,
            hash(&post("edited", T0, "Edited by idem")),
        ),
        stored(orphan_id.to_string().into(), &orphan, hash(&orphan)),
        stored(oid(1).into(), &post("twice", T0, "First"), None),
        stored(oid(2).into(), &post("twice", T0 + 1, "Second"), None),
        stored(oid(3).into(), &post("legacy", T0, "Legacy"), None),
        doc! { "_id": oid(4), "lang": "en", "publishedAt": T0, "title": "No slug" },
    ];
    database
        .collection::<Document>("posts")
        .insert_many(seeded)
        .await
        .unwrap();

    let audit = idem(&["audit", "--json"], &name);
    assert_eq!(audit.status.code(), Some(1), "problems found");
    assert!(
        audit.stderr.is_empty(),
        "no progress bar without a terminal"
    );
    let report: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let derived = |slug: &str, at: i64| post(slug, at, "").id().unwrap().to_string();
    let expected = json!({
        "collection": "posts",
        "scanned": 7,
        "clean": 1,
        "duplicates": {
            "keys": 1,
            "documents": 2,
            "samples": [{
                "key": { "slug": "twice", "lang": "en" },
                "documents": 2,
                "sample_ids": [oid(1).to_hex(), oid(2).to_hex()],
            }],
        },
        "legacy_ids": {
            "count": 3,
            "samples": [
                { "id": oid(3).to_hex(), "derived_id": derived("legacy", T0) },
                { "id": oid(1).to_hex(), "derived_id": derived("twice", T0) },
                { "id": oid(2).to_hex(), "derived_id": derived("twice", T0 + 1) },
            ],
        },
        "orphans": {
            "count": 1,
            "samples": [{ "id": orphan_id.to_string(), "derived_id": derived("orphan", T0 + 1) }],
        },
        "underivable": {
            "count": 1,
            "samples": [{ "id": oid(4).to_hex(), "detail": "`slug` is missing" }],
        },
        "missing_hash": {
            "count": 4,
            "samples": [
                { "id": oid(4).to_hex() },
                { "id": oid(3).to_hex() },
                { "id": oid(1).to_hex() },
                { "id": oid(2).to_hex() },
            ],
        },
        "hash_mismatch": {
            "count": 1,
            "samples": [{ "id": edited.id().unwrap().to_string() }],
        },
        "hash_unchecked": { "count": 0, "samples": [] },
        "digest_mismatch": { "count": 0, "samples": [] },
        "undeserializable": null,
        "moves_in_progress": { "count": 0, "samples": [] },
    });
    assert_eq!(
        report,
        expected,
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );

    let summary = idem(&["audit"], &name);
    let summary = String::from_utf8(summary.stdout).unwrap();
    assert!(
        summary.starts_with("`posts`: 7 documents scanned, 1 clean\n"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "    {{slug: \"twice\", lang: \"en\"}} in 2 documents: {}, {}\n",
            oid(1).to_hex(),
            oid(2).to_hex()
        )),
        "{summary}"
    );
    assert!(
        summary.contains("  without a content hash: 4\n"),
        "{summary}"
    );

    // Without --yes, the plan: the audit, and nothing moved.
    let before = stored_documents(&database).await;
    let plan = idem(&["adopt", "--json"], &name);
    assert_eq!(plan.status.code(), Some(1), "something to move");
    let planned: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(planned, expected, "the plan is the audit");
    assert!(
        String::from_utf8_lossy(&plan.stderr).contains(
            "nothing was moved; this was the plan: 4 documents to move to their derived ids. \
             Run again with --yes to move them."
        ),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert_eq!(stored_documents(&database).await, before, "nothing moved");

    let adopt = idem(&["adopt", "--json", "--yes"], &name);
    assert_eq!(
        adopt.status.code(),
        Some(1),
        "duplicates and the keyless one remain"
    );
    let adopted: serde_json::Value = serde_json::from_slice(&adopt.stdout).unwrap();
    assert_eq!(adopted["moved"]["count"], 2, "{adopted}");
    assert_eq!(adopted["duplicates"]["keys"], 1);
    assert_eq!(adopted["failed"]["samples"][0]["id"], oid(4).to_hex());

    let after: serde_json::Value =
        serde_json::from_slice(&idem(&["audit", "--json"], &name).stdout).unwrap();
    assert_eq!(
        after["legacy_ids"]["count"], 2,
        "the duplicates stay: {after}"
    );
    assert_eq!(after["orphans"]["count"], 0);
    assert_eq!(after["clean"], 3, "the clean one and the two moved");
    database.drop().await.unwrap();
    client.shutdown().await;
}

/// `adopt` without `--yes` on a collection idem wrote (nothing to move, nothing wrong) is no
/// plan waiting for `--yes`: it says there is nothing to move, and exits 0.
#[tokio::test]
async fn adopt_without_yes_on_a_clean_collection_says_so_and_succeeds() {
    let name = format!("idem_cli_clean_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    let store = idem_core::mongo::Store::new(database.clone());
    for post in [post("one", T0, "One"), post("two", T0 + 1, "Two")] {
        post.upsert(&store).await.unwrap();
    }
    let plan = idem(&["adopt"], &name);
    let stderr = String::from_utf8_lossy(&plan.stderr);
    assert_eq!(plan.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no document to move"), "{stderr}");
    assert!(!stderr.contains("--yes"), "{stderr}");
    database.drop().await.unwrap();
    client.shutdown().await;
}

#[test]
fn a_server_that_cannot_be_reached_is_an_error_not_a_report() {
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "audit",
            "--uri",
            "not-a-uri",
            "--database",
            "d",
            "--collection",
            "c",
        ])
        .args(["--key", "k"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with(
        "idem: not-a-uri: expected a mongodb://, postgres://, mysql:// or sqlite: connection string"
    ));
    assert!(output.stdout.is_empty());
}

/// The flags of `Post`, the model its documents were written with.
const POST_FLAGS: [&str; 10] = [
    "--key",
    "slug,lang",
    "--timestamp",
    "publishedAt",
    "--scheme",
    "v1",
    "--volatile",
    "fetchedAt",
    "--fields",
    "slug,lang,publishedAt,title,fetchedAt",
];

/// `POST_FLAGS` with `flag`'s value replaced by `value`, or the flag left out for `None`.
fn flags_with(flag: &str, value: Option<&str>) -> Vec<String> {
    let mut flags = Vec::new();
    for pair in POST_FLAGS.chunks(2) {
        match (pair[0] == flag, value) {
            (true, Some(value)) => flags.extend([flag.to_owned(), value.to_owned()]),
            (true, None) => {}
            (false, _) => flags.extend(pair.iter().map(|part| (*part).to_owned())),
        }
    }
    flags
}

/// A collection idem wrote correctly, adopted with one flag wrong: the audit says the model is
/// wrong and names the flag, `adopt --yes` refuses naming it, and not one document moves; with
/// the right flags there is nothing to move.
#[tokio::test]
async fn adopt_with_a_wrong_flag_moves_nothing_and_names_the_flag() {
    let name = format!("idem_cli_flags_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    let seeded: Vec<Document> = (0..20)
        .map(|n| {
            let post = post(&format!("post-{n}"), T0 + n * 1_000, "Title");
            let id = bson::Bson::String(post.id().unwrap().to_string());
            stored(id, &post, Some(post.content_hash().unwrap().to_hex()))
        })
        .collect();
    database
        .collection::<Document>("posts")
        .insert_many(seeded)
        .await
        .unwrap();
    let before = stored_documents(&database).await;

    let right = idem_with(&["adopt", "--json", "--yes"], &name, &POST_FLAGS);
    assert_eq!(
        right.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    let adopted: serde_json::Value = serde_json::from_slice(&right.stdout).unwrap();
    assert_eq!(adopted["moved"]["count"], 0, "{adopted}");

    let cases = [
        (flags_with("--timestamp", None), "--timestamp publishedAt"),
        (flags_with("--scheme", Some("joined")), "--scheme v1"),
        (flags_with("--key", Some("slug")), "--key slug,lang"),
        (
            flags_with("--key", Some("slug,lang,title")),
            "--key slug,lang",
        ),
    ];
    for (flags, likely) in cases {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let audit = idem_with(&["audit"], &name, &flags);
        assert_eq!(audit.status.code(), Some(1), "{flags:?}");
        let summary = String::from_utf8_lossy(&audit.stdout);
        assert!(
            summary.contains("WRONG MODEL") && summary.contains(&format!("(likely {likely})")),
            "{flags:?}: {summary}"
        );
        for adopt in [
            idem_with(&["adopt", "--yes"], &name, &flags),
            idem_with(&["adopt"], &name, &flags),
        ] {
            assert_eq!(adopt.status.code(), Some(2), "{flags:?}");
            let message = String::from_utf8_lossy(&adopt.stderr);
            assert!(
                message.contains(&format!("(likely {likely})"))
                    && message.contains("nothing was moved"),
                "{flags:?}: {message}"
            );
        }
        assert_eq!(
            stored_documents(&database).await,
            before,
            "{flags:?}: not one document moved"
        );
    }
    database.drop().await.unwrap();
    client.shutdown().await;
}

/// A collection or a database that does not exist is an error naming it, not an audit of
/// nothing that finds no problem.
#[tokio::test]
async fn a_missing_collection_or_database_is_an_error_naming_it() {
    let name = format!("idem_cli_missing_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    for command in [&["audit"][..], &["adopt", "--yes"][..]] {
        let output = idem_with(command, &name, &POST_FLAGS);
        assert_eq!(output.status.code(), Some(2), "{command:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(
            message.contains(&format!("database `{name}` holds no collection")),
            "{command:?}: {message}"
        );
        assert!(output.stdout.is_empty(), "{command:?}");
    }
    database
        .collection::<Document>("comments")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
    let output = idem_with(&["audit"], &name, &POST_FLAGS);
    assert_eq!(output.status.code(), Some(2));
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains(&format!(
            "there is no such collection in database `{name}`, which holds comments"
        )),
        "{message}"
    );
    database.drop().await.unwrap();
    client.shutdown().await;
}

/// A server that cannot be reached: one readable line naming the address and saying a retry may
/// help, after one server selection (two would take at least twice the timeout).
#[test]
fn an_unreachable_server_is_one_line_after_one_server_selection() {
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "audit",
            "--uri",
            "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=2000",
        ])
        .args(["--database", "d", "--collection", "c", "--key", "k"])
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(output.status.code(), Some(2));
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("no server could be reached")
            && message.contains("127.0.0.1:1")
            && message.contains("retrying may help")
            && !message.contains("Topology"),
        "{message}"
    );
    assert!(
        elapsed < std::time::Duration::from_millis(3_900),
        "one server selection of 2 s, not two: {elapsed:?}"
    );
}

/// `--keep-duplicate greatest:FIELD` resolves natural-key duplicates from the command line: the
/// document with the greatest value stays and moves to its derived id, the other is archived
/// whole; a value that is no rule is a usage error.
#[tokio::test]
async fn duplicates_are_resolved_by_a_flag() {
    let name = format!("idem_cli_keep_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    let older = post("twice", T0, "Older");
    let newer = post("twice", T0 + 1, "Newer");
    database
        .collection::<Document>("posts")
        .insert_many([
            stored(oid(1).into(), &older, None),
            stored(oid(2).into(), &newer, None),
        ])
        .await
        .unwrap();
    let wrong = idem_with(
        &["adopt", "--yes", "--keep-duplicate", "newest"],
        &name,
        &POST_FLAGS,
    );
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("expected greatest:FIELD or least:FIELD"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    let adopt = idem_with(
        &[
            "adopt",
            "--yes",
            "--json",
            "--keep-duplicate",
            "greatest:publishedAt",
        ],
        &name,
        &POST_FLAGS,
    );
    assert_eq!(
        adopt.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&adopt.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&adopt.stdout).unwrap();
    assert_eq!(report["archived"]["count"], 1, "{report}");
    assert_eq!(report["moved"]["count"], 1, "{report}");
    let stored = stored_documents(&database).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].get_str("_id"),
        Ok(newer.id().unwrap().to_string().as_str())
    );
    assert_eq!(stored[0].get_str("title"), Ok("Newer"));
    let archived = documents_in(&database, "posts_idem_duplicates").await;
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].get_object_id("_id"), Ok(oid(1)));
    database.drop().await.unwrap();
    client.shutdown().await;
}

/// A nested struct is stored as a sub-document, which a model given at run time reads as a map:
/// its hash is the type's only if read as a struct, in an order only the type knows. Such a
/// document is counted as not checked, never as changed by another tool.
#[tokio::test]
async fn a_nested_document_is_not_called_changed() {
    #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
    #[idem(collection = "posts")]
    struct Nested {
        #[idem(key)]
        slug: String,
        author: Author,
    }
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Author {
        name: String,
        email: String,
    }
    let name = format!("idem_cli_nested_{}", std::process::id());
    let client = mongodb::Client::with_uri_str(server_uri()).await.unwrap();
    let database = client.database(&name);
    database.drop().await.unwrap();
    let store = idem_core::mongo::Store::new(database.clone());
    let nested = Nested {
        slug: "a".into(),
        author: Author {
            name: "Ada".into(),
            email: "ada@example.com".into(),
        },
    };
    store.upsert(&nested).await.unwrap();
    let audit = idem_with(&["audit", "--json"], &name, &["--key", "slug"]);
    assert_eq!(
        audit.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(report["hash_unchecked"]["count"], 1, "{report}");
    assert_eq!(report["hash_mismatch"]["count"], 0, "{report}");
    assert_eq!(report["clean"], 1, "{report}");
    database.drop().await.unwrap();
    client.shutdown().await;
}
