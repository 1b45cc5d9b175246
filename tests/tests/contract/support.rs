//! Fixtures and assertions several modules of the contract share. Those one module uses alone
//! are next to its tests.

use std::sync::Arc;

use idem_core::{Error, Idempotent, KeyValue, Outcome};
use idem_tests::backends::Db;
use idem_tests::fixtures::Entry;
use idem_tests::{stored_documents, CommandLog};
use mongodb::bson::{self, Document};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Barrier;

// ---------------------------------------------------------------------------------------------
// Fixtures

/// The blog post of `idem_tests::fixtures::Post` with a float score as well (for NaN, the
/// infinities and -0.0), and a body to fill (for size limits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct ScoredPost {
    #[idem(key)]
    pub slug: String,
    #[idem(key)]
    pub lang: String,
    #[idem(timestamp)]
    pub published_at: i64,
    pub title: String,
    pub body: String,
    pub score: f64,
    #[idem(volatile)]
    pub fetched_at: i64,
    #[idem(frozen)]
    pub author_id: String,
}

/// The post `slug` in English, with a score of 0.0.
pub fn scored_post(slug: &str) -> ScoredPost {
    ScoredPost {
        slug: slug.into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
        body: "First post.".into(),
        score: 0.0,
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
    }
}

/// A meeting whose timestamp has sub-millisecond precision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "meetings")]
pub struct Meeting {
    #[idem(key)]
    pub room: String,
    #[idem(timestamp)]
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub title: String,
}

/// A review, pushed onto an upload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Review {
    pub reviewer_id: String,
    pub verdict: String,
}

/// An upload whose stored form holds a pushed list with a long name and a tombstone, which an
/// upsert does not set (their routes own them): the size and key-length cases of promise
/// catalogue case 10.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "uploads")]
pub struct Upload {
    #[idem(key)]
    pub name: String,
    pub payload: String,
    #[idem(push_by = "reviewer_id")]
    pub reviews_from_the_moderation_team: Vec<Review>,
    #[idem(tombstone)]
    pub removed_at: Option<i64>,
}

/// A small upload named `name`, with no reviews.
pub fn small_upload(name: &str) -> Upload {
    Upload {
        name: name.into(),
        payload: "small".into(),
        reviews_from_the_moderation_team: Vec::new(),
        removed_at: None,
    }
}

/// An account whose balance only operations move, and whose owner upserts write: promise
/// catalogue case 14.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "ledgers")]
pub struct Ledger {
    #[idem(key)]
    pub account_id: String,
    pub owner: String,
    #[idem(effect)]
    pub balance: i64,
}

/// The ledger of account acct-1, owned by `owner`, with nothing credited.
pub fn ledger(owner: &str) -> Ledger {
    Ledger {
        account_id: "acct-1".into(),
        owner: owner.into(),
        balance: 0,
    }
}

/// The stored balance of the one ledger.
pub async fn stored_balance(db: &Db) -> i64 {
    let stored = db.stored::<Ledger>().await;
    stored[0]["balance"]
        .as_i64()
        .unwrap_or_else(|| panic!("{db}: {stored:?}"))
}

/// The post `slug` with a body one byte over 16 MiB alone: over MongoDB's limit on a document.
pub fn oversized_post(slug: &str) -> ScoredPost {
    ScoredPost {
        body: "x".repeat(16 * 1024 * 1024 + 1),
        ..scored_post(slug)
    }
}

// ---------------------------------------------------------------------------------------------
// Racers

/// A line for `racers` racers to wait in together before they race: they connect one after
/// another, and would otherwise start one after another.
pub fn line_up(racers: usize) -> Arc<Barrier> {
    Arc::new(Barrier::new(racers))
}

// ---------------------------------------------------------------------------------------------
// What is stored, and what was sent

/// The stored document of entry `entry_id`.
pub async fn stored_entry(db: &Db, entry_id: &str) -> serde_json::Map<String, serde_json::Value> {
    db.stored::<Entry>()
        .await
        .into_iter()
        .find(|doc| doc["entryId"] == entry_id)
        .unwrap_or_else(|| panic!("{db}: no entry {entry_id}"))
}

/// A stored MongoDB document without what idem adds itself (`_id`, the content hash, and its own
/// fields, whose names start with `idem`): after a write this is exactly what serde wrote.
pub fn user_fields(stored: &Document) -> Document {
    stored
        .iter()
        .filter(|(name, _)| *name != "_id" && *name != "sourceHash" && !name.starts_with("idem"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// What serde writes for `doc`, as BSON.
pub fn serialized<T: Serialize>(doc: &T) -> Document {
    bson::to_document(doc).expect("the document serializes")
}

/// Asserts that `T`'s one stored document is `doc` under its derived id, holding exactly what
/// serde writes for it besides idem's own fields. PostgreSQL has a column for every field, NULL
/// where serde wrote nothing, so nulls are left out of the comparison on every backend; MongoDB
/// stores only what is written, so there it is also checked field for field, nulls included: a
/// field serde leaves out must not linger even as a null.
pub async fn assert_stored_as_serde<T: Idempotent + Serialize>(db: &Db, doc: &T) {
    let mut stored = db.stored::<T>().await;
    assert_eq!(stored.len(), 1, "{db}: {stored:?}");
    let mut document = stored.remove(0);
    assert_eq!(
        document.remove("_id"),
        Some(Value::from(doc.id().unwrap().to_string())),
        "{db}: stored under its derived id"
    );
    assert_eq!(
        document,
        db.as_stored(doc),
        "{db}: the stored fields are what serde writes"
    );
    if let Db::Mongo { store, .. } = db {
        let documents = stored_documents(store.database(), T::MODEL.collection()).await;
        assert_eq!(user_fields(&documents[0]), serialized(doc), "{db}");
    }
}

/// A text part of a natural key, as `NaturalKey::parts` shows it.
pub fn text_key(field: &'static str, value: &str) -> (&'static str, KeyValue) {
    (field, KeyValue::Text(value.into()))
}

/// The commands recorded since the last take, asserting none was sent at all.
pub fn assert_nothing_sent(log: &CommandLog) {
    let commands = log.take();
    assert!(
        commands.names.is_empty(),
        "a refused document sends no command, sent {:?}",
        commands.names
    );
}

/// Asserts the recorded commands wrote no document, and returns their names.
pub fn assert_nothing_written(log: &CommandLog) -> Vec<String> {
    let commands = log.take();
    assert_eq!(
        commands.documents_written, 0,
        "nothing may be written; commands: {:?}",
        commands.names
    );
    commands.names
}

/// Forgets the commands `db` sent so far (MongoDB; PostgreSQL has no command log).
pub fn forget_commands(db: &Db) {
    if let Some(log) = db.command_log() {
        let _ = log.take();
    }
}

/// On MongoDB, asserts that `db` sent no command since the last take: the refusal came before
/// the server was asked anything. On PostgreSQL, [`Db::raw`] is the proof.
pub fn assert_db_sent_nothing(db: &Db) {
    if let Some(log) = db.command_log() {
        assert_nothing_sent(log);
    }
}

/// On MongoDB, asserts that the commands `db` sent since the last take wrote no document. On
/// PostgreSQL, [`Db::raw`] is the proof.
pub fn assert_db_wrote_nothing(db: &Db) {
    if let Some(log) = db.command_log() {
        assert_nothing_written(log);
    }
}

/// MariaDB's `DOUBLE` holds no NaN and no infinity (no MariaDB number type does), and its store
/// keeps floats in `DOUBLE` columns: a document holding one in the float field `field` is
/// refused for its document, the server's 1366 (incorrect double value) naming the column, alone
/// and in a batch, with nothing written. Asserts that of `doc` on `db`, MariaDB, where a case
/// stores such a float on the other backends.
pub async fn assert_non_finite_refused_on_mariadb<T>(db: &Db, doc: &T, field: &str)
where
    T: Idempotent + Serialize + Sync,
{
    assert!(
        db.is_mysql(),
        "{db}: only MariaDB refuses a non-finite float"
    );
    let before = db.raw::<T>().await;
    let expect_refused = |result: Result<Outcome, Error>, how: &str| {
        let error = match result {
            Err(error) => error,
            Ok(outcome) => panic!("{db}: {how}: expected the float refused, got {outcome:?}"),
        };
        assert_eq!(error.document().collection, T::MODEL.collection(), "{db}");
        assert_eq!(error.document().id, Some(doc.id().unwrap()), "{db}: {how}");
        let code = error.as_backend().and_then(|source| source.code());
        assert_eq!(code, Some("1366"), "{db}: {how}: {error}");
        let message = error.to_string();
        assert!(
            message.contains(&format!("`{field}`")),
            "{db}: {how}: {message}"
        );
        assert!(error.is_refusal(), "{db}: {how}: the document is refused");
        assert!(
            !error.is_retryable(),
            "{db}: {how}: the same float fails again"
        );
    };
    expect_refused(db.upsert(doc).await, "alone");
    let report = db
        .upsert_many(std::slice::from_ref(doc))
        .await
        .unwrap_or_else(|error| panic!("{db}: a batch of one: {error}"));
    expect_refused(report.into_outcomes().remove(0), "in a batch");
    assert_eq!(db.raw::<T>().await, before, "{db}: nothing written");
}

/// The JSON value [`Db::stored`] shows for the non-finite float a SQL store writes as `text`
/// (`NaN`, `Infinity`, `-Infinity`): that text as a string on PostgreSQL (`to_jsonb` of a
/// `double precision`) and SQLite (the text its `REAL` column keeps), relaxed extended JSON on
/// MongoDB.
pub fn shown_non_finite(db: &Db, text: &str) -> Value {
    if db.is_sql() {
        Value::from(text)
    } else {
        json!({ "$numberDouble": text })
    }
}
