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
    let derived = |slug: &str, at: i64| format!("derived id {}", post(slug, at, "").id().unwrap());
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
                { "id": oid(3).to_hex(), "detail": derived("legacy", T0) },
                { "id": oid(1).to_hex(), "detail": derived("twice", T0) },
                { "id": oid(2).to_hex(), "detail": derived("twice", T0 + 1) },
            ],
        },
        "orphans": {
            "count": 1,
            "samples": [{ "id": orphan_id.to_string(), "detail": derived("orphan", T0 + 1) }],
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

    let adopt = idem(&["adopt", "--json"], &name);
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
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("idem: cannot connect to not-a-uri")
    );
    assert!(output.stdout.is_empty());
}
