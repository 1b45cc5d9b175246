//! Which filter each MongoDB command carries, for a collection sharded on the natural key (the
//! first layout of docs/SCALE.md), and the store without a natural-key index (the second
//! layout: a hashed `_id` shard key, `_id` as the only guard).
//!
//! The test server is not sharded: what is checked here is what the driver's command
//! monitoring shows the store sends. A write that names a document carries its full natural key
//! (each key field by its stored name, with the document's value) in its filter, each `update`
//! statement's `q`, `findAndModify`'s `query` and each inserted document, so a sharded cluster
//! routes it to one shard; so does the read of one document by id before a write. The read of a
//! batch's chunk (`_id: {$in}`) does not: it reaches every shard once per chunk. The calls by id
//! alone (`get`, `push`, `apply_once`, `delete_by_id`) cannot: their filters are pinned below, so
//! a change is noticed; on a cluster sharded on the natural key they reach every shard. Whether
//! a cluster routes these commands as MongoDB's documentation says is not tested here.
//!
//! MongoDB's batch has none of the SQL stores' shortcuts (the lookup before a chunk's write,
//! the plain insert of fresh rows): each chunk is one read and one write, checked here in one
//! chunk and several, with update pipelines and without (whose write is an `insert` of the
//! documents not stored, then a replacement for each changed one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use idem_core::mongo::Store;
use idem_core::{Change, ErrorKind, Idempotent, KeyValue, NaturalKey, OpId, Outcome};
use idem_tests::fixtures::{post, Payment};
use idem_tests::server_uri;
use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use serde::{Deserialize, Serialize};

/// A type sharded on its two key fields, each stored under another name than its Rust one; its
/// id derives from the key alone (no timestamp), so both layouts take it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "sharded")]
#[serde(rename_all = "camelCase")]
struct Sharded {
    #[idem(key)]
    site_id: String,
    #[idem(key)]
    post_no: i64,
    title: String,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
    #[idem(push_by = "noteId")]
    notes: Vec<Note>,
    #[idem(effect)]
    views: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Note {
    note_id: String,
}

fn sharded(site: &str, number: i64, title: &str) -> Sharded {
    Sharded {
        site_id: site.into(),
        post_no: number,
        title: title.into(),
        deleted_at: None,
        notes: Vec::new(),
        views: 0,
    }
}

/// The commands a client started, each with its body, in order.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<Vec<(String, Document)>>>);

impl Sent {
    fn take(&self) -> Vec<(String, Document)> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A store on a fresh database of a client whose started commands `Sent` records.
async fn fresh_store(test: &str) -> (Store, Sent) {
    let mut options = ClientOptions::parse(server_uri())
        .await
        .expect("MONGODB_URI parses");
    let sent = Sent::default();
    let recorder = sent.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event: CommandEvent| {
        if let CommandEvent::Started(started) = event {
            (recorder.0.lock().unwrap_or_else(PoisonError::into_inner))
                .push((started.command_name, started.command));
        }
    }));
    options.retry_writes = Some(false);
    let client = Client::with_options(options).expect("client options are valid");
    let database = client.database(&format!("idem_{test}_{}", std::process::id()));
    database.drop().await.expect("dropping the test database");
    sent.take();
    (Store::new(database), sent)
}

/// The stored natural key of `doc`: each key field by its stored name, with its value.
fn key_of(doc: &Sharded) -> Document {
    doc! { "siteId": doc.site_id.as_str(), "postNo": doc.post_no }
}

/// Each document's natural key, by its id.
fn keys_by_id(docs: &[&Sharded]) -> HashMap<String, Document> {
    docs.iter()
        .map(|doc| (doc.id().unwrap().to_string(), key_of(doc)))
        .collect()
}

/// Whether `filter` holds `value` under `name` as an equality: the value itself or `{$eq: v}`.
fn equals(filter: &Document, name: &str, value: &Bson) -> bool {
    match filter.get(name) {
        Some(Bson::Document(operator)) if operator.len() == 1 => operator.get("$eq") == Some(value),
        Some(held) => held == value,
        None => false,
    }
}

/// What a write command names its documents by: `findAndModify`'s query, each `update` or
/// `delete` statement's `q`, each inserted document.
fn write_filters(name: &str, command: &Document) -> Vec<Document> {
    let each = |array: &str, field: Option<&str>| -> Vec<Document> {
        let statements = command
            .get_array(array)
            .expect("a write command's statements");
        statements
            .iter()
            .map(|statement| {
                let statement = statement.as_document().expect("a statement");
                match field {
                    Some(field) => statement.get_document(field).expect("a filter").clone(),
                    None => statement.clone(),
                }
            })
            .collect()
    };
    match name {
        "findAndModify" => vec![command.get_document("query").unwrap().clone()],
        "update" => each("updates", Some("q")),
        "delete" => each("deletes", Some("q")),
        "insert" => each("documents", None),
        _ => Vec::new(),
    }
}

/// Asserts that every write command in `sent` names each document by `_id` with its full
/// natural key (per `keys`, by id) as equalities, and that a `find` of one id carries its
/// natural key the same way, while a chunk's `find` names the ids alone. Returns the commands'
/// names.
fn assert_keys_carried(
    sent: &[(String, Document)],
    keys: &HashMap<String, Document>,
) -> Vec<String> {
    for (name, command) in sent {
        for filter in write_filters(name, command) {
            let id = filter
                .get_str("_id")
                .unwrap_or_else(|_| panic!("{name} by _id: {filter}"));
            let key = &keys[id];
            for (field, value) in key {
                assert!(
                    equals(&filter, field, value),
                    "{name} lacks {field}: {value}: {filter}"
                );
            }
        }
        if name == "find" {
            let filter = command.get_document("filter").unwrap();
            let ids = filter
                .get_document("_id")
                .unwrap()
                .get_array("$in")
                .unwrap();
            match ids.as_slice() {
                [id] => {
                    for (field, value) in &keys[id.as_str().unwrap()] {
                        assert!(
                            equals(filter, field, value),
                            "the read lacks {field}: {filter}"
                        );
                    }
                }
                // A chunk's read, by `_id` alone: on a cluster sharded on the natural key it
                // reaches every shard (see the read in `mongo/driver.rs` for why).
                _ => assert_eq!(filter.keys().collect::<Vec<_>>(), ["_id"], "{filter}"),
            }
        }
    }
    sent.iter().map(|(name, _)| name.clone()).collect()
}

/// The names of the fields a command's only filter holds.
fn filter_fields(name: &str, command: &Document) -> Vec<String> {
    let filter = match name {
        "find" => command.get_document("filter").unwrap().clone(),
        _ => write_filters(name, command).remove(0),
    };
    filter.keys().cloned().collect()
}

/// Both layouts: MongoDB's natural-key index (a collection sharded on the natural key), and
/// none (a hashed `_id` shard key); each with update pipelines and without.
async fn every_layout(test: &str) -> Vec<(Store, Sent)> {
    let mut stores = Vec::new();
    for (suffix, index, pipelines) in [
        ("k", true, true),
        ("ko", true, false),
        ("h", false, true),
        ("ho", false, false),
    ] {
        let (store, sent) = fresh_store(&format!("{test}_{suffix}")).await;
        let store = store
            .with_natural_key_index(index)
            .with_update_pipelines(pipelines);
        stores.push((store, sent));
    }
    stores
}

#[tokio::test]
async fn single_upserts_carry_the_natural_key() {
    for (store, sent) in every_layout("sk_upsert").await {
        let first = sharded("s1", 7, "first");
        let keys = keys_by_id(&[&first]);
        assert_eq!(store.upsert(&first).await.unwrap(), Outcome::Inserted);
        let names = assert_keys_carried(&sent.take(), &keys);
        let expected: &[&str] = match (
            store.uses_natural_key_index(),
            store.uses_update_pipelines(),
        ) {
            (true, true) => &["listIndexes", "createIndexes", "findAndModify"],
            (true, false) => &["listIndexes", "createIndexes", "find", "insert"],
            (false, true) => &["findAndModify"],
            (false, false) => &["find", "insert"],
        };
        assert_eq!(names, expected);
        assert_eq!(store.upsert(&first).await.unwrap(), Outcome::Unchanged);
        assert_keys_carried(&sent.take(), &keys);
        let edited = sharded("s1", 7, "edited");
        assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
        let names = assert_keys_carried(&sent.take(), &keys);
        let expected: &[&str] = match store.uses_update_pipelines() {
            true => &["findAndModify"],
            false => &["find", "update"],
        };
        assert_eq!(names, expected);
    }
}

#[tokio::test]
async fn batches_carry_the_natural_key_in_every_statement_and_read() {
    for (store, sent) in every_layout("sk_batch").await {
        for chunk in [100, 2] {
            let store = store.clone().with_batch_chunk(chunk);
            let site = format!("site-{chunk}");
            let docs: Vec<Sharded> = (0..5).map(|n| sharded(&site, n, "first")).collect();
            let keys = keys_by_id(&docs.iter().collect::<Vec<_>>());
            // First ingest, unchanged re-ingest, one changed and one new.
            let report = store.upsert_many(&docs).await.unwrap();
            assert_eq!(report.count(Outcome::Inserted), 5);
            let first = assert_keys_carried(&sent.take(), &keys);
            assert!(first.iter().any(|name| name == "find"), "{first:?}");
            store.upsert_many(&docs).await.unwrap();
            let again = assert_keys_carried(&sent.take(), &keys);
            assert!(again.iter().all(|name| name == "find"), "{again:?}");
            let mut changed = docs.clone();
            changed[1].title = "edited".into();
            changed.push(sharded(&site, 5, "new"));
            let keys = keys_by_id(&changed.iter().collect::<Vec<_>>());
            let report = store.upsert_many(&changed).await.unwrap();
            assert_eq!(
                (
                    report.count(Outcome::Inserted),
                    report.count(Outcome::Updated)
                ),
                (1, 1)
            );
            assert_keys_carried(&sent.take(), &keys);
        }
    }
}

#[tokio::test]
async fn delete_insert_new_and_record_carry_their_keys() {
    for (store, sent) in every_layout("sk_others").await {
        let stored = sharded("s1", 1, "stored");
        store.upsert(&stored).await.unwrap();
        sent.take();
        let deleted = Sharded {
            deleted_at: Some(1),
            ..stored.clone()
        };
        store.delete(&deleted).await.unwrap();
        let keys = keys_by_id(&[&stored]);
        assert_eq!(assert_keys_carried(&sent.take(), &keys), ["update"]);
        // Deleting a document not stored yet stores it deleted, under the same filter.
        let unseen = Sharded {
            deleted_at: Some(1),
            ..sharded("s1", 2, "unseen")
        };
        store.delete(&unseen).await.unwrap();
        assert_eq!(
            assert_keys_carried(&sent.take(), &keys_by_id(&[&unseen])),
            ["update"]
        );

        let members = [sharded("s2", 1, "a"), sharded("s2", 2, "b"), stored.clone()];
        store.insert_new(&members).await.unwrap();
        let keys = keys_by_id(&members.iter().collect::<Vec<_>>());
        assert_eq!(assert_keys_carried(&sent.take(), &keys), ["update"]);

        // An event is named by its idempotency key alone: its id is random. Without the
        // natural-key index, the store refuses it (see below).
        if store.uses_natural_key_index() {
            let payment = Payment {
                request_key: "r-1".into(),
                amount_cents: 5,
            };
            store.record(&payment).await.unwrap();
            let commands = sent.take();
            let (name, command) = commands.last().unwrap();
            assert_eq!(name, "findAndModify");
            let query = command.get_document("query").unwrap();
            assert_eq!(query, &doc! { "request_key": { "$eq": "r-1" } });
        }
    }
}

#[tokio::test]
async fn find_carries_the_key_and_the_calls_by_id_send_only_the_id() {
    for (store, sent) in every_layout("sk_by_id").await {
        let stored = sharded("s1", 1, "stored");
        store.upsert(&stored).await.unwrap();
        let id = stored.id().unwrap();
        sent.take();

        let key = NaturalKey::new(vec![
            ("site_id", KeyValue::Text("s1".into())),
            ("post_no", KeyValue::Integer(1)),
        ]);
        let found: Option<Sharded> = store.find(&key).await.unwrap();
        assert_eq!(found.as_ref(), Some(&stored));
        let commands = sent.take();
        let filter = commands[0].1.get_document("filter").unwrap();
        assert_eq!(filter, &doc! { "siteId": "s1", "postNo": 1i64 });

        // By id alone: on a collection sharded on the natural key, each reaches every shard
        // (the guide's "Sharded MongoDB"). Pinned: a change to these filters is noticed here.
        let got: Option<Sharded> = store.get(id).await.unwrap();
        assert_eq!(got.as_ref(), Some(&stored));
        let note = Note {
            note_id: "n1".into(),
        };
        store.push::<Sharded, _>(id, "notes", &note).await.unwrap();
        let op = OpId::new("op-1");
        store
            .apply_once::<Sharded>(id, &op, &[Change::add("views", 1)])
            .await
            .unwrap();
        store.delete_by_id::<Sharded, _>(id, &5i64).await.unwrap();
        let commands = sent.take();
        let shapes: Vec<(String, Vec<String>)> = commands
            .iter()
            .map(|(name, command)| (name.clone(), filter_fields(name, command)))
            .collect();
        let shape = |name: &str, fields: &[&str]| {
            (
                name.to_owned(),
                fields.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            shapes,
            [
                shape("find", &["_id"]),
                shape("update", &["_id", "$or", "notes"]),
                shape("update", &["_id", "idemAppliedOps"]),
                shape("update", &["_id", "deletedAt"]),
            ],
            "{commands:?}"
        );
    }
}

/// Without the natural-key index the store creates and checks none: no command before the first
/// write, and the collection keeps only `_id`'s index.
#[tokio::test]
async fn without_the_index_no_index_is_made_or_listed() {
    let (store, sent) = fresh_store("sk_no_index").await;
    let store = store.with_natural_key_index(false);
    store.ensure_schema::<Sharded>().await.unwrap();
    assert!(sent.take().is_empty());
    store.upsert(&sharded("s1", 1, "a")).await.unwrap();
    let indexes = store
        .collection::<Sharded>()
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(indexes, ["_id_"]);
}

/// A type whose id has a time part, or is random, is refused without the index: by
/// `ensure_schema` and by every write, before anything is sent.
#[tokio::test]
async fn without_the_index_an_id_with_a_time_part_or_random_is_refused() {
    let (store, sent) = fresh_store("sk_refused").await;
    let store = store.with_natural_key_index(false);
    let refusal = store
        .ensure_schema::<idem_tests::fixtures::Post>()
        .await
        .unwrap_err();
    let ErrorKind::SchemaMismatch {
        collection,
        problem,
    } = refusal.kind()
    else {
        panic!("{refusal}");
    };
    assert_eq!(collection, "posts");
    assert!(
        problem.contains("the timestamp field `published_at`, stored as `publishedAt`")
            && problem.contains("two writes of one natural key with different timestamps"),
        "{problem}"
    );
    let written = store.upsert(&post()).await.unwrap_err();
    assert_eq!(written.kind().to_string(), refusal.kind().to_string());
    assert_eq!(written.document().natural_key, post().natural_key());
    let batch = store.upsert_many(&[post()]).await.unwrap_err();
    assert_eq!(batch.kind().to_string(), refusal.kind().to_string());
    let payment = Payment {
        request_key: "r-1".into(),
        amount_cents: 5,
    };
    let event = store.record(&payment).await.unwrap_err();
    assert!(
        matches!(event.kind(), ErrorKind::SchemaMismatch { problem, .. }
            if problem.contains("its id is random") && problem.contains("`request_key`")),
        "{event}"
    );
    assert!(sent.take().is_empty(), "a refusal sends nothing");
    let collections = store.database().list_collection_names().await.unwrap();
    assert!(collections.is_empty(), "{collections:?}");
}

/// `_id` is the fork guard: racing first writes of one key (single upserts, batches,
/// `insert_new`, `delete`) store one document, and exactly one of them inserted it.
#[tokio::test]
async fn without_the_index_racing_first_writes_store_one_document() {
    for pipelines in [true, false] {
        let (store, _) = fresh_store(&format!("sk_race_{pipelines}")).await;
        let store = store
            .with_natural_key_index(false)
            .with_update_pipelines(pipelines);
        for round in 0..5i64 {
            let doc = sharded("race", round, "same");
            let mut writers = tokio::task::JoinSet::new();
            for writer in 0..8 {
                let (store, doc) = (store.clone(), doc.clone());
                writers.spawn(async move {
                    match writer % 3 {
                        0 => store.upsert(&doc).await.unwrap() == Outcome::Inserted,
                        1 => {
                            let report = store.upsert_many(&[doc]).await.unwrap();
                            report.count(Outcome::Inserted) == 1
                        }
                        _ => {
                            let report = store.insert_new(&[doc]).await.unwrap();
                            report.inserted().len() == 1
                        }
                    }
                });
            }
            let inserted = writers.join_all().await.into_iter().filter(|i| *i).count();
            assert_eq!(inserted, 1, "round {round}, pipelines {pipelines}");
            let stored = store
                .collection::<Sharded>()
                .count_documents(doc! { "postNo": round })
                .await
                .unwrap();
            assert_eq!(stored, 1);
        }
    }
}

/// The layout's limit: a document another tool stored under another id is not found by a write
/// of its key (no index stops the second document); `audit` shows the two.
#[tokio::test]
async fn without_the_index_a_foreign_id_is_not_guarded_and_audit_shows_it() {
    let (store, _) = fresh_store("sk_foreign").await;
    let store = store.with_natural_key_index(false);
    let raw = store.database().collection::<Document>("sharded");
    raw.insert_one(doc! { "_id": "legacy-1", "siteId": "s1", "postNo": 1i64, "title": "old" })
        .await
        .unwrap();
    assert_eq!(
        store.upsert(&sharded("s1", 1, "new")).await.unwrap(),
        Outcome::Inserted
    );
    let report = store.audit::<Sharded>().await.unwrap();
    assert_eq!(report.scanned, 2);
    assert_eq!(
        (report.duplicates.keys, report.duplicates.documents),
        (1, 2),
        "{report:?}"
    );
}

/// A document stored under a write's id with another natural key (another tool's): the batch's
/// read by id and key leaves it out, and the write meets it on `_id`, refused as before the
/// read carried the key, with nothing written.
#[tokio::test]
async fn a_document_under_the_id_with_another_key_is_refused() {
    for (store, _) in every_layout("sk_other_key").await {
        let doc = sharded("s1", 1, "mine");
        let raw = store.database().collection::<Document>("sharded");
        let id = doc.id().unwrap().to_string();
        let theirs = doc! { "_id": id.as_str(), "siteId": "s9", "postNo": 9i64, "title": "theirs" };
        raw.insert_one(theirs.clone()).await.unwrap();
        let single = store.upsert(&doc).await.unwrap_err();
        let report = store.upsert_many(std::slice::from_ref(&doc)).await.unwrap();
        let batch = report.errors().next().expect("refused").1;
        assert_eq!(batch.to_string(), single.to_string());
        let stored: Vec<Document> = idem_tests::stored_documents(store.database(), "sharded").await;
        assert_eq!(stored, [theirs]);
    }
}

/// The stored documents of `sharded`, without the write markers (random per write).
async fn stored_without_markers(store: &Store) -> Vec<Document> {
    let mut stored = idem_tests::stored_documents(store.database(), "sharded").await;
    for document in &mut stored {
        document.remove("idemWrite");
    }
    stored
}

/// Without the index, a sequence of every primitive gives the outcomes and leaves the documents
/// it gives with the index: copies of one key in one batch, a change, a deletion and a replay
/// after it, `insert_new` over stored members, pushes and operations by id.
#[tokio::test]
async fn without_the_index_every_primitive_agrees_with_the_indexed_store() {
    let mut seen = Vec::new();
    for (store, _) in every_layout("sk_agree").await {
        let mut outcomes = Vec::new();
        let batch = [
            sharded("s1", 1, "a"),
            sharded("s1", 2, "b"),
            sharded("s1", 1, "a, edited"),
            sharded("s1", 1, "a, edited"),
            sharded("s1", 1, "a"),
        ];
        let report = store.upsert_many(&batch).await.unwrap();
        outcomes.extend(report.into_outcomes().into_iter().map(|o| format!("{o:?}")));
        outcomes.push(format!("{:?}", store.upsert(&sharded("s1", 2, "b")).await));
        outcomes.push(format!("{:?}", store.upsert(&sharded("s1", 2, "b2")).await));
        let deleted = Sharded {
            deleted_at: Some(9),
            ..sharded("s1", 2, "b2")
        };
        outcomes.push(format!("{:?}", store.delete(&deleted).await));
        outcomes.push(format!("{:?}", store.upsert(&sharded("s1", 2, "b3")).await));
        let members = [sharded("s1", 1, "x"), sharded("s1", 3, "c")];
        let report = store.insert_new(&members).await.unwrap();
        outcomes.push(format!("{:?}", report.inserted()));
        let id = sharded("s1", 3, "c").id().unwrap();
        let note = Note {
            note_id: "n".into(),
        };
        for _ in 0..2 {
            outcomes.push(format!(
                "{:?}",
                store.push::<Sharded, _>(id, "notes", &note).await
            ));
            let op = OpId::new("op");
            let changes = [Change::add("views", 2)];
            let applied = store.apply_once::<Sharded>(id, &op, &changes).await;
            outcomes.push(format!("{applied:?}"));
        }
        seen.push((outcomes, stored_without_markers(&store).await));
    }
    for other in &seen[1..] {
        assert_eq!(other, &seen[0]);
    }
}

/// A collection made by other tools may compare text under a default collation of its own
/// (`{locale: "en", strength: 2}`: "Alpha" equals "alpha"), which MongoDB applies to every
/// command that names none: the audit's and the adoption's reads sorted by the natural key
/// would then bring "Alpha", "alpha", "Alpha" in that order, and the two "Alpha" would not be
/// seen as one key's. Each of those reads names the simple collation. The test server keeps a
/// collection's default collation but does not apply it: what is checked is what the commands
/// say, and that the duplicates are found under it.
#[tokio::test]
async fn reads_sorted_by_the_key_name_the_simple_collation() {
    use mongodb::options::{Collation, CollationStrength};
    let (store, sent) = fresh_store("sk_collation").await;
    let loose = Collation::builder()
        .locale("en")
        .strength(CollationStrength::Secondary)
        .build();
    let database = store.database();
    database
        .create_collection("sharded")
        .collation(loose)
        .await
        .unwrap();
    let raw = database.collection::<Document>("sharded");
    let legacy = |id: &str, site: &str| {
        doc! { "_id": id, "siteId": site, "postNo": 1i64, "title": id, "notes": [], "views": 0i64 }
    };
    let documents = [
        legacy("legacy-1", "Alpha"),
        legacy("legacy-2", "alpha"),
        legacy("legacy-3", "Alpha"),
    ];
    raw.insert_many(documents).await.unwrap();
    sent.take();
    let audit = store.audit::<Sharded>().await.unwrap();
    let adopted = store
        .adopt::<Sharded>(idem_core::mongo::AdoptOptions::default())
        .await
        .unwrap();
    let sorted: Vec<Document> = sent
        .take()
        .into_iter()
        .filter(|(name, command)| name == "find" && command.contains_key("sort"))
        .map(|(_, command)| command)
        .collect();
    assert_eq!(
        sorted.len(),
        2,
        "the audit's read and the adoption's: {sorted:?}"
    );
    for command in &sorted {
        assert_eq!(
            command.get_document("sort").unwrap(),
            &doc! { "siteId": 1, "postNo": 1 },
            "{command}"
        );
        assert_eq!(
            command
                .get_document("collation")
                .ok()
                .and_then(|c| c.get_str("locale").ok()),
            Some("simple"),
            "{command}"
        );
    }
    assert_eq!(
        (audit.duplicates.keys, audit.duplicates.documents),
        (1, 2),
        "{audit:?}"
    );
    assert_eq!(adopted.duplicates.keys, 1, "{adopted:?}");
}
