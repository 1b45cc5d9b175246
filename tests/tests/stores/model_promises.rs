//! idem's promises, checked against a model over many serde shapes, on every backend under test:
//! MongoDB at `MONGODB_URI`, each PostgreSQL server and SQLite (see `idem_tests::backends`).
//!
//! For each shape family (optional, omitted, flattened, renamed and nested fields; a frozen
//! map, a frozen list with nulls, frozen optional values; a version of every ordered type, with a
//! tombstone), proptest generates sequences of upserts, replays of documents sent before, deletes,
//! writes by another tool (what serde writes, without idem's hash, digests or version key), keys
//! edited by another tool (the document keeps the id its old key derived, so an id and a key can
//! point at two documents) and batches with duplicates, over three keys so that the calls keep
//! meeting the same documents. A model written here from the README's rules, on the typed
//! values and without idem's hashing or comparisons, predicts each call's outcome and every
//! stored document; the test checks both against what idem answers and what the server then
//! holds, in the shape every backend reads back: what serde wrote, under `_id`, without idem's
//! own fields or nulls.
//!
//! Each family checks two properties on each backend: single calls, then the same with
//! `upsert_many`, whose outcomes must be those of upserting its documents one by one, in order.
//! Kept apart, a batch bug cannot hide a single-write one. 16 sequences per property and backend
//! by default; a longer run:
//!
//! ```sh
//! IDEM_MODEL_CASES=1000 cargo test -p idem-tests --test stores --all-features model_promises::
//! ```

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Debug};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use idem_core::{Deletion, Error, ErrorKind, Id, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use mongodb::bson;
use proptest::collection::{btree_map, hash_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::strategy::Union;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::runtime::Runtime;

/// Sequences per property and backend unless `IDEM_MODEL_CASES` says otherwise (a third of them
/// on a layout variant): the whole file then runs in about a minute and a half against every
/// store on two cores (24 took two and a half on a slow day, against `scripts/test`'s 20-minute
/// budget; 150 passed on every store, 2026-12-07, in 20 minutes).
const DEFAULT_CASES: u32 = 16;
/// The longest sequence of calls: long enough for insert, edit, delete and replays of one key.
const MAX_CALLS: usize = 12;
/// How far back a replay reaches among the documents sent.
const REPLAY_DEPTH: usize = 4;
/// Every server round trip makes a shrink step slow: enough steps to reach a short sequence.
const MAX_SHRINK_ITERS: u32 = 256;

// ---------------------------------------------------------------------------------------------
// The model

/// A document type under test, and what the model needs to know of it, read from its typed
/// values: its key, which of its fields may not change, its content and its version.
trait Shape:
    Idempotent + Serialize + DeserializeOwned + PartialEq + Clone + Debug + Send + Sync + 'static
{
    /// The natural key, as the model files documents.
    type Key: Ord + Clone + Debug;
    /// The stored name of the key field, to file the stored documents the same way.
    const KEY_FIELD: &'static str;
    /// The key field's name in Rust, as a refusal of a changed key names it.
    const KEY_NAME: &'static str;
    /// The stored name of the tombstone, for a shape with one.
    const TOMBSTONE_FIELD: Option<&'static str> = None;

    /// A document from small pools of values, so that sequences repeat content, versions and
    /// frozen values often.
    fn documents() -> BoxedStrategy<Self>;

    /// Documents with their tombstone set, to delete; `None` for a shape without a tombstone.
    fn deletions() -> Option<BoxedStrategy<Self>> {
        None
    }

    fn key(&self) -> Self::Key;

    /// The same document under `key`: what another tool leaves when it edits the key of a stored
    /// document behind idem's back (the id stays the one the old key derived).
    fn with_key(self, key: Self::Key) -> Self;

    /// The deletion marker this document carries.
    fn tombstone(&self) -> Option<i64> {
        None
    }

    /// The same document carrying `marker` as its deletion marker (itself, for a shape without
    /// a tombstone).
    fn with_tombstone(self, _marker: Option<i64>) -> Self {
        self
    }

    /// The fields feeding the id, other than the key, whose value differs from `stored`'s: a
    /// document stored under another id for the same key.
    fn changed_id_fields(&self, _stored: &Self) -> Vec<&'static str> {
        Vec::new()
    }

    /// The frozen fields whose stored value was written and differs from this one's.
    fn changed_frozen_fields(&self, _stored: &Self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Whether the two documents have the same content: equal but for volatile fields and the
    /// tombstone.
    fn same_content(&self, other: &Self) -> bool;

    /// How this document's version orders against `stored`'s; `None` for an unversioned shape.
    fn version_order(&self, _stored: &Self) -> Option<Ordering> {
        None
    }
}

/// `name` if a frozen value differs from the stored one.
fn differs<T: PartialEq>(name: &'static str, stored: &T, incoming: &T) -> Option<&'static str> {
    (stored != incoming).then_some(name)
}

/// `name` if a frozen optional value was written (a `None` is stored absent or null: never
/// written, so it may still be set) and differs from the stored one.
fn written_and_differs<T: PartialEq>(
    name: &'static str,
    stored: &Option<T>,
    incoming: &Option<T>,
) -> Option<&'static str> {
    (stored.is_some() && stored != incoming).then_some(name)
}

/// What the model predicts for one document of a call.
#[derive(Debug, PartialEq)]
enum Expected {
    Outcome(Outcome),
    /// `ErrorKind::FrozenFieldChanged`, naming one of these fields (all of which changed).
    Refused(Vec<&'static str>),
    /// `ErrorKind::IdChanged`: the natural key is stored under another id, and no field feeding
    /// the id differs from the stored one (another tool edited a key onto it).
    IdChanged,
}

impl Expected {
    fn agrees_with(&self, observed: &Result<Outcome, Error>) -> bool {
        match (self, observed.as_ref().map_err(Error::kind)) {
            (Expected::Outcome(expected), Ok(outcome)) => expected == outcome,
            (Expected::Refused(fields), Err(ErrorKind::FrozenFieldChanged { field, .. })) => {
                fields.contains(field)
            }
            (Expected::IdChanged, Err(ErrorKind::IdChanged { .. })) => true,
            _ => false,
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Outcome(outcome) => f.write_str(outcome.name()),
            Expected::Refused(fields) => write!(f, "FrozenFieldChanged on one of {fields:?}"),
            Expected::IdChanged => f.write_str("IdChanged"),
        }
    }
}

/// An answer of idem, as the failure message shows it.
fn describe(observed: &Result<Outcome, Error>) -> String {
    match observed {
        Ok(outcome) => outcome.name().to_owned(),
        Err(error) => match error.kind() {
            ErrorKind::FrozenFieldChanged { field, .. } => {
                format!("FrozenFieldChanged on {field:?}")
            }
            _ => format!("the error {error:?}"),
        },
    }
}

/// What the model knows of one stored document.
struct Stored<S> {
    /// The id it is stored under: the one its document derives, unless another tool edited its
    /// key since.
    id: Id,
    /// The document the last write stored.
    doc: S,
    /// The marker the first delete stored.
    deleted: Option<i64>,
    /// Written by another tool: what serde writes under the derived `_id`, without idem's
    /// content hash, digests or version key.
    foreign: bool,
}

/// The model: the stored document of each natural key, changed by the rules of the README.
struct ModelStore<S: Shape> {
    stored: BTreeMap<S::Key, Stored<S>>,
}

impl<S: Shape> ModelStore<S> {
    fn new() -> Self {
        ModelStore {
            stored: BTreeMap::new(),
        }
    }

    /// Stores `doc` under its key and derived id, as a write that met nothing (or another
    /// tool's) leaves it.
    fn file(&mut self, doc: &S, deleted: Option<i64>, foreign: bool) {
        let stored = Stored {
            id: id_of(doc),
            doc: doc.clone(),
            deleted,
            foreign,
        };
        self.stored.insert(doc.key(), stored);
    }

    /// The key of the stored document a write of `doc` meets: the one under its id, else the one
    /// holding its natural key (`Ok(None)`: neither is stored); or the refusal of the write: the
    /// document under its id holds another key (edited behind idem's back), or its key is
    /// stored under another id (a field feeding the id moved, or another tool edited that key
    /// onto another document). Refused even when the document met is deleted, since the write
    /// is not to it.
    fn meet(&self, doc: &S) -> Result<Option<S::Key>, Expected> {
        let id = id_of(doc);
        if let Some((key, _)) = self.stored.iter().find(|(_, stored)| stored.id == id) {
            return match *key == doc.key() {
                true => Ok(Some(doc.key())),
                false => Err(Expected::Refused(vec![S::KEY_NAME])),
            };
        }
        match self.stored.get(&doc.key()) {
            None => Ok(None),
            Some(stored) => match doc.changed_id_fields(&stored.doc) {
                moved if moved.is_empty() => Err(Expected::IdChanged),
                moved => Err(Expected::Refused(moved)),
            },
        }
    }

    fn upsert(&mut self, doc: &S) -> Expected {
        let key = match self.meet(doc) {
            Err(refused) => return refused,
            Ok(Some(key)) => key,
            Ok(None) => {
                self.file(doc, None, false);
                return Expected::Outcome(Outcome::Inserted);
            }
        };
        let stored = self.stored.get_mut(&key).expect("met");
        // A deleted document is never resurrected, whatever the write carries.
        if stored.deleted.is_some() {
            return Expected::Outcome(Outcome::Deleted);
        }
        let frozen = doc.changed_frozen_fields(&stored.doc);
        if !frozen.is_empty() {
            return Expected::Refused(frozen);
        }
        // No hash and no version key of idem's: the frozen values were compared, and the
        // version field still orders replays (an older one is Stale). Otherwise the write
        // replaces the document and makes it idem's; at the same version too, since there is
        // no content hash to tell a retry from an edit.
        if stored.foreign {
            if doc.version_order(&stored.doc) == Some(Ordering::Less) {
                return Expected::Outcome(Outcome::Stale);
            }
            stored.doc = doc.clone();
            stored.foreign = false;
            return Expected::Outcome(Outcome::Updated);
        }
        let same_content = doc.same_content(&stored.doc);
        let outcome = match doc.version_order(&stored.doc) {
            None if same_content => Outcome::Unchanged,
            None | Some(Ordering::Greater) => Outcome::Updated,
            Some(Ordering::Equal) if same_content => Outcome::Unchanged,
            // An older version, or the same version with other content: the stored one stands.
            Some(_) => Outcome::Stale,
        };
        if outcome == Outcome::Updated {
            stored.doc = doc.clone();
        }
        Expected::Outcome(outcome)
    }

    /// Another tool writes `doc` under its derived id, replacing what is stored there (under
    /// whatever key). Skipped (`false`) when the key is stored under another id: the
    /// natural-key index refuses that tool's write too.
    fn foreign_write(&mut self, doc: &S) -> bool {
        let id = id_of(doc);
        if self
            .stored
            .get(&doc.key())
            .is_some_and(|stored| stored.id != id)
        {
            return false;
        }
        self.stored.retain(|_, stored| stored.id != id);
        self.file(doc, doc.tombstone(), true);
        true
    }

    /// Another tool edits the key of the document stored under `from`'s key to `to`'s, behind
    /// idem's back. Skipped (`false`) when nothing is stored under `from`'s key, or something is
    /// under `to`'s (the natural-key index refuses the edit).
    fn rekey(&mut self, from: &S, to: &S) -> bool {
        if self.stored.contains_key(&to.key()) {
            return false;
        }
        let Some(mut stored) = self.stored.remove(&from.key()) else {
            return false;
        };
        stored.doc = stored.doc.with_key(to.key());
        self.stored.insert(to.key(), stored);
        true
    }

    fn delete(&mut self, doc: &S) -> Expected {
        let marker = doc.tombstone().expect("a deletion carries its marker");
        let key = match self.meet(doc) {
            Err(refused) => return refused,
            Ok(Some(key)) => key,
            Ok(None) => {
                // Deleted before its creation arrived: stored deleted, so the creation stays
                // away.
                self.file(doc, Some(marker), false);
                return Expected::Outcome(Outcome::Deleted);
            }
        };
        let stored = self.stored.get_mut(&key).expect("met");
        if stored.deleted.is_some() {
            // The first marker stays.
            return Expected::Outcome(Outcome::Unchanged);
        }
        // The delete route writes the tombstone alone: the content stays as last written.
        stored.deleted = Some(marker);
        Expected::Outcome(Outcome::Deleted)
    }

    /// Every stored document as the model predicts it on `db`, by key: what serde writes for
    /// the last document written, as `db` reads it back, under its derived `_id`, with the
    /// tombstone as the delete route set it. Nulls are left out, as [`Db::stored`] leaves them
    /// out: a null tombstone means "not deleted" as an absent one does.
    fn expected_documents(&self, db: &Db) -> BTreeMap<String, Map<String, Value>> {
        self.stored
            .values()
            .map(|stored| {
                let mut expected = db.as_stored(&stored.doc);
                expected.insert("_id".to_owned(), Value::from(stored.id.to_string()));
                if let (Some(field), Some(marker)) = (S::TOMBSTONE_FIELD, stored.deleted) {
                    expected.insert(field.to_owned(), Value::from(marker));
                }
                (key_text::<S>(&expected), expected)
            })
            .collect()
    }
}

/// The id `doc` derives (every generated document has one).
fn id_of<S: Shape>(doc: &S) -> Id {
    doc.id().expect("the model's documents have an id")
}

/// The stored key of a document, as text, to match stored documents with the model's.
fn key_text<S: Shape>(document: &Map<String, Value>) -> String {
    document
        .get(S::KEY_FIELD)
        .map_or_else(|| "(no key)".to_owned(), Value::to_string)
}

// ---------------------------------------------------------------------------------------------
// Generated calls

/// One call to the store.
#[derive(Clone, Debug)]
enum Op<S> {
    Upsert(S),
    /// An upsert of the document sent this many documents before the last one (the first one
    /// if fewer were sent), as a client replaying what it sent. Counted back from the end, so
    /// that shrinking away an earlier call keeps the replay on the same document.
    Replay(usize),
    /// `upsert_many`, with duplicates of a key.
    UpsertMany(Vec<S>),
    /// A delete of the document, whose tombstone is set.
    Delete(S),
    /// The document as another tool writes it: what serde writes, under the derived `_id`.
    Foreign(S),
    /// Another tool edits the key of the document stored under the first one's key to the
    /// second one's, leaving its id: the id and the key then point at different documents.
    Rekey(S, S),
}

/// Which calls a property's sequences make.
#[derive(Clone, Copy, Debug)]
enum Calls {
    /// `upsert` and `delete`.
    Single,
    /// `upsert`, `delete` and `upsert_many`.
    WithBatches,
}

/// The sequences of `calls`; with `rekeys`, keys edited by another tool among them.
fn sequences<S: Shape>(calls: Calls, rekeys: bool) -> BoxedStrategy<Vec<Op<S>>> {
    let mut ops = vec![
        (5, S::documents().prop_map(Op::Upsert).boxed()),
        (2, (0..REPLAY_DEPTH).prop_map(Op::Replay).boxed()),
        (1, S::documents().prop_map(Op::Foreign).boxed()),
    ];
    if rekeys {
        let rekey = (S::documents(), S::documents()).prop_map(|(from, to)| Op::Rekey(from, to));
        ops.push((1, rekey.boxed()));
    }
    if let Some(deletions) = S::deletions() {
        ops.push((1, deletions.prop_map(Op::Delete).boxed()));
    }
    if let Calls::WithBatches = calls {
        ops.push((2, batches::<S>().prop_map(Op::UpsertMany).boxed()));
    }
    vec(Union::new_weighted(ops), 1..=MAX_CALLS).boxed()
}

/// One to four documents, plus up to two exact copies of them placed anywhere: with three keys,
/// a batch holds duplicates of a key with the same and with other content.
fn batches<S: Shape>() -> impl Strategy<Value = Vec<S>> {
    let copies = vec((any::<Index>(), any::<Index>()), 0..=2);
    (vec(S::documents(), 1..=4), copies).prop_map(|(mut docs, copies)| {
        for (original, place) in copies {
            let copy = original.get(&docs).clone();
            docs.insert(place.index(docs.len() + 1), copy);
        }
        docs
    })
}

/// The key pool: three keys, so that a dozen calls meet each document several times.
const KEYS: [&str; 3] = ["k1", "k2", "k3"];
/// 2023-11-14T22:13:20Z: every generated time is a step from it.
const BASE_MS: i64 = 1_700_000_000_000;
/// How far a moved timestamp is from its key's own: another id, and for chrono a time with a
/// fraction of a second.
const MOVED_MS: i64 = 1_500;

/// A key of the pool and the document's timestamp in unix ms: usually its key's own, sometimes
/// moved, which changes a field feeding the id.
fn key_and_timestamp() -> impl Strategy<Value = (String, i64)> {
    let moved = prop_oneof![5 => Just(0), 1 => Just(MOVED_MS)];
    (0..KEYS.len(), moved)
        .prop_map(|(key, moved)| (KEYS[key].to_owned(), BASE_MS + 1_000 * key as i64 + moved))
}

/// An integer key of the pool.
fn number_key() -> impl Strategy<Value = i64> {
    1..=3i64
}

/// A text from `pool`.
fn text(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    select(pool).prop_map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Running a sequence against a backend

async fn run_sequence<S: Shape>(db: &Db, ops: &[Op<S>]) -> Result<(), TestCaseError> {
    // An empty collection or table, in a store that knows nothing of the last one.
    let db = &db.reset::<S>().await;
    let mut model = ModelStore::<S>::new();
    let mut sent: Vec<S> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Upsert(doc) => {
                upsert_one(db, &mut model, doc, step).await?;
                sent.push(doc.clone());
            }
            Op::Replay(back) if !sent.is_empty() => {
                let doc = sent[sent.len().saturating_sub(back + 1)].clone();
                upsert_one(db, &mut model, &doc, step).await?;
            }
            // Nothing sent yet: nothing to replay.
            Op::Replay(_) => {}
            Op::Delete(doc) => {
                let expected = model.delete(doc);
                let before = db.raw::<S>().await;
                // In the model's terms: a delete that found the document deleted wrote nothing.
                let observed = db.delete(doc).await.map(|deletion| match deletion {
                    Deletion::Deleted => Outcome::Deleted,
                    _ => Outcome::Unchanged,
                });
                let wrote = expected == Expected::Outcome(Outcome::Deleted);
                check::<S>(db, step, "delete", &expected, &observed, wrote, &before).await?;
            }
            Op::Foreign(doc) => {
                if model.foreign_write(doc) {
                    db.write_as_another_tool(doc).await;
                }
            }
            Op::Rekey(from, to) => {
                if model.rekey(from, to) {
                    rekey(db, from, to).await;
                }
            }
            Op::UpsertMany(docs) => {
                // The batch must answer as the same upserts one by one, in order.
                let expected: Vec<Expected> = docs.iter().map(|doc| model.upsert(doc)).collect();
                let report = db.upsert_many(docs).await.map_err(|error| {
                    TestCaseError::fail(format!("{db}, step {step}: upsert_many failed: {error:?}"))
                })?;
                let outcomes = report.outcomes();
                if outcomes.len() != docs.len() {
                    return Err(TestCaseError::fail(format!(
                        "{db}, step {step}: {} outcomes for a batch of {}",
                        outcomes.len(),
                        docs.len()
                    )));
                }
                for (position, (expected, observed)) in expected.iter().zip(outcomes).enumerate() {
                    if !expected.agrees_with(observed) {
                        return Err(TestCaseError::fail(format!(
                            "{db}, step {step}, document {position} of the batch: the model \
                             expects {expected}, idem answered {}",
                            describe(observed)
                        )));
                    }
                }
                sent.extend(docs.iter().cloned());
            }
        }
    }
    compare_stored(db, &model).await?;
    compare_typed_reads(db, &model).await
}

/// Edits the key of the document stored under `from`'s key to `to`'s, as another tool would.
async fn rekey<S: Shape>(db: &Db, from: &S, to: &S) {
    let key_of =
        |doc: &S| serde_json::to_value(doc).expect("a document serializes")[S::KEY_FIELD].clone();
    let (old, new) = (key_of(from), key_of(to));
    let literal = |key: &Value| match key {
        Value::String(text) => format!("'{}'", text.replace('\'', "''")),
        other => other.to_string(),
    };
    let bson_of = |key: &Value| match key {
        Value::String(text) => bson::Bson::String(text.clone()),
        other => bson::Bson::Int64(other.as_i64().expect("an integer or text key")),
    };
    let collection = S::MODEL.collection();
    db.run_raw(
        &format!(
            "UPDATE {} SET {field} = {new} WHERE {field} = {old}",
            db.quote(collection),
            field = db.quote(S::KEY_FIELD),
            new = literal(&new),
            old = literal(&old),
        ),
        bson::doc! {
            "update": collection,
            "updates": [{
                "q": { S::KEY_FIELD: bson_of(&old) },
                "u": { "$set": { S::KEY_FIELD: bson_of(&new) } },
            }],
        },
    )
    .await;
}

async fn upsert_one<S: Shape>(
    db: &Db,
    model: &mut ModelStore<S>,
    doc: &S,
    step: usize,
) -> Result<(), TestCaseError> {
    let expected = model.upsert(doc);
    let before = db.raw::<S>().await;
    let observed = db.upsert(doc).await;
    let wrote = matches!(
        expected,
        Expected::Outcome(Outcome::Inserted | Outcome::Updated)
    );
    check::<S>(db, step, "upsert", &expected, &observed, wrote, &before).await
}

/// Fails unless a single call answered what the model expects and changed the stored data
/// exactly when it should (`Unchanged`, `Stale`, `Deleted` on an upsert and refusals leave every
/// stored byte, and on PostgreSQL every row version, as it was). A single upsert's reply does not
/// say whether it replaced a document, so the stored data before and after are compared instead.
async fn check<S: Shape>(
    db: &Db,
    step: usize,
    call: &str,
    expected: &Expected,
    observed: &Result<Outcome, Error>,
    wrote: bool,
    before: &[String],
) -> Result<(), TestCaseError> {
    if !expected.agrees_with(observed) {
        return Err(TestCaseError::fail(format!(
            "{db}, step {step} ({call}): the model expects {expected}, idem answered {}",
            describe(observed)
        )));
    }
    let changed = db.raw::<S>().await != before;
    if changed != wrote {
        return Err(TestCaseError::fail(format!(
            "{db}, step {step} ({call}): {expected}, yet the stored data {}",
            if changed {
                "changed"
            } else {
                "stayed as they were"
            }
        )));
    }
    Ok(())
}

/// Fails unless the backend holds exactly the model's documents: one per key, each what serde
/// wrote for the last document written (a field serde omitted is absent) under its derived id,
/// with its tombstone.
async fn compare_stored<S: Shape>(db: &Db, model: &ModelStore<S>) -> Result<(), TestCaseError> {
    let documents = db.stored::<S>().await;
    let count = documents.len();
    let stored: BTreeMap<String, Map<String, Value>> = documents
        .into_iter()
        .map(|document| (key_text::<S>(&document), document))
        .collect();
    // Documents compare as maps, in any field order, as the promises compare values.
    let expected = model.expected_documents(db);
    if count != expected.len() {
        return Err(TestCaseError::fail(format!(
            "{db}: {count} documents stored for {} keys: {stored:#?}",
            expected.len()
        )));
    }
    let mismatches: Vec<String> = expected
        .iter()
        .filter(|&(key, document)| stored.get(key) != Some(document))
        .map(|(key, document)| {
            let found = stored.get(key).map_or_else(
                || "nothing".to_owned(),
                |found| Value::Object(found.clone()).to_string(),
            );
            let document = Value::Object(document.clone());
            format!("key {key}: stored {found}\n  the model expects {document}")
        })
        .collect();
    if mismatches.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{db}, after the sequence, {}",
            mismatches.join("\n")
        )))
    }
}

/// Fails unless each stored document reads back, by id (`get`) and by natural key (`find`), as
/// the typed value the model holds: the last document written, with the tombstone the delete
/// route set. The stored comparison above leaves nulls out; this one does not, so a field stored
/// as null must read back as what serde wrote.
async fn compare_typed_reads<S: Shape>(
    db: &Db,
    model: &ModelStore<S>,
) -> Result<(), TestCaseError> {
    for stored in model.stored.values() {
        let expected = stored.doc.clone().with_tombstone(stored.deleted);
        let id = stored.id;
        let by_id = db.get::<S>(id).await;
        let by_key = db.find::<S>(expected.natural_key()).await;
        for (how, read) in [("get", by_id), ("find", by_key)] {
            match read {
                Ok(Some(read)) if read == expected => {}
                other => {
                    return Err(TestCaseError::fail(format!(
                        "{db}, after the sequence, {how} of {id} read {other:?}\n  the model \
                         expects {expected:?}"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Checks both properties of a shape on each backend, in a store of its own, and fails with
/// every minimal counterexample found, naming its backend.
fn check_family<S: Shape>(name: &str) {
    let cases = std::env::var("IDEM_MODEL_CASES").map_or(DEFAULT_CASES, |cases| {
        cases.parse().expect("IDEM_MODEL_CASES is a number")
    });
    let config = Config {
        cases,
        max_shrink_iters: MAX_SHRINK_ITERS,
        // Counterexamples are printed; no regression file is written beside this one.
        failure_persistence: None,
        ..Config::default()
    };
    let runtime = Runtime::new().expect("a tokio runtime");
    let backends = runtime.block_on(fresh_backends(name));
    let mut failures = Vec::new();
    for db in &backends {
        // A shape whose id has a time part: MongoDB without the natural-key index refuses it.
        // There, a key another tool edited onto a document under another id is not stopped
        // (no index holds it: the layout's stated limit), so no sequence edits keys.
        if db.guards_by_id_alone() && S::MODEL.timestamp_field().is_some() {
            continue;
        }
        let rekeys = !db.guards_by_id_alone();
        // Batches go two documents per statement: a batch then spans several statements, and
        // a key's later contents land in statements of their own. The SQL stores take their
        // shortcuts on such chunks too (by default only on chunks of 64 or more): a chunk is
        // looked up before its write while the last was mostly unchanged, and inserted plainly
        // while the last was inserted whole, so those answer for every generated shape.
        let narrow =
            runtime.block_on(async { db.with_batch_chunk(2).await.with_shortcuts_from(1).await });
        // A layout variant of a server the run covers already (a partitioned table, the write
        // marker, no natural-key index) runs the same engine in other statement forms: a third
        // of the sequences keeps the whole run's time in check as variants are added.
        let variant = db.is_partitioned() || db.has_write_marker() || db.guards_by_id_alone();
        let config = Config {
            cases: match variant {
                true => config.cases.div_ceil(3),
                false => config.cases,
            },
            ..config.clone()
        };
        for calls in [Calls::Single, Calls::WithBatches] {
            let mut runner = TestRunner::new(config.clone());
            let db = match calls {
                Calls::Single => db,
                Calls::WithBatches => &narrow,
            };
            let run = runner.run(&sequences::<S>(calls, rekeys), |ops| {
                runtime.block_on(run_sequence(db, &ops))
            });
            if let Err(failure) = run {
                failures.push(format!("{db}, {calls:?} calls: {failure}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------------------------
// The shapes

/// Optional fields serde omits, a null one, a field of any JSON (null too) that is no `Option`,
/// a list omitted when empty, a nested struct, a flattened map of extra fields, renamed fields
/// and a volatile one, without a version: a write must replace every field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "profiles")]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[idem(key)]
    handle: String,
    #[idem(timestamp)]
    joined_at: i64,
    display_name: String,
    #[serde(rename = "about", skip_serializing_if = "Option::is_none")]
    bio: Option<String>,
    /// Stored as null when `None`.
    nickname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<Address>,
    #[serde(flatten)]
    counters: BTreeMap<String, i64>,
    /// Any JSON, null included: stored as null without being an `Option`.
    extra: Value,
    /// Omitted when empty, read back empty by serde's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    #[idem(volatile)]
    seen_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Address {
    city: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    postal_code: Option<String>,
    #[serde(flatten)]
    lines: HashMap<String, String>,
}

impl Shape for Profile {
    type Key = String;
    const KEY_FIELD: &'static str = "handle";
    const KEY_NAME: &'static str = "handle";

    fn documents() -> BoxedStrategy<Self> {
        let address = (
            text(&["Paris", "Oslo"]),
            option::of(text(&["75001", "0150"])),
            hash_map(text(&["line1", "line2"]), text(&["a", "b"]), 0..=2),
        )
            .prop_map(|(city, postal_code, lines)| Address {
                city,
                postal_code,
                lines,
            });
        (
            key_and_timestamp(),
            text(&["Ada", "Ada L."]),
            option::of(text(&["poet", "engineer"])),
            option::of(text(&["Al", "Bo"])),
            option::of(address),
            btree_map(text(&["x1", "x2"]), 0..2i64, 0..=2),
            (
                select(vec![
                    Value::Null,
                    serde_json::json!({ "unit": "kPa", "scale": null }),
                    serde_json::json!([null, 1]),
                ]),
                vec(text(&["a", "b"]), 0..=1),
            ),
            0..2i64,
        )
            .prop_map(
                |(
                    (handle, joined_at),
                    display_name,
                    bio,
                    nickname,
                    address,
                    counters,
                    (extra, tags),
                    seen_at,
                )| {
                    Profile {
                        handle,
                        joined_at,
                        display_name,
                        bio,
                        nickname,
                        address,
                        counters,
                        extra,
                        tags,
                        seen_at,
                    }
                },
            )
            .boxed()
    }

    fn key(&self) -> String {
        self.handle.clone()
    }

    fn with_key(self, handle: String) -> Self {
        Self { handle, ..self }
    }

    fn changed_id_fields(&self, stored: &Self) -> Vec<&'static str> {
        differs("joined_at", &stored.joined_at, &self.joined_at)
            .into_iter()
            .collect()
    }

    fn same_content(&self, other: &Self) -> bool {
        Profile {
            seen_at: other.seen_at,
            ..self.clone()
        } == *other
    }
}

/// A frozen `HashMap`: equal maps iterate, and so serialize, in different orders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "listings")]
struct Listing {
    #[idem(key)]
    #[serde(rename = "ref")]
    listing_id: i64,
    title: String,
    #[idem(frozen)]
    labels: HashMap<String, i64>,
    #[idem(volatile)]
    fetched_at: i64,
}

/// A `HashMap` of `entries` that iterates, and so serializes, in their order: fresh maps are
/// built until one's random hasher puts them so. The order is then part of the generated value,
/// and a failure repeats while it is shrunk.
fn hash_map_in_order(entries: &[(&str, i64)]) -> HashMap<String, i64> {
    loop {
        let map: HashMap<String, i64> = entries
            .iter()
            .map(|&(name, value)| (name.to_owned(), value))
            .collect();
        let names = entries.iter().map(|&(name, _)| name);
        if map.keys().map(String::as_str).eq(names) {
            return map;
        }
    }
}

impl Shape for Listing {
    type Key = i64;
    const KEY_FIELD: &'static str = "ref";
    const KEY_NAME: &'static str = "listing_id";

    fn documents() -> BoxedStrategy<Self> {
        // Mostly the same entries; sometimes a value changed, an entry dropped, or none; in
        // any order.
        let labels = prop_oneof![
            6 => Just(vec![("a", 1), ("b", 2), ("c", 3)]),
            1 => Just(vec![("a", 1), ("b", 2), ("c", 4)]),
            1 => Just(vec![("a", 1), ("b", 2)]),
            1 => Just(vec![]),
        ]
        .prop_shuffle()
        .prop_map(|entries| hash_map_in_order(&entries));
        (number_key(), text(&["flat", "house"]), labels, 0..2i64)
            .prop_map(|(listing_id, title, labels, fetched_at)| Listing {
                listing_id,
                title,
                labels,
                fetched_at,
            })
            .boxed()
    }

    fn key(&self) -> i64 {
        self.listing_id
    }

    fn with_key(self, listing_id: i64) -> Self {
        Self { listing_id, ..self }
    }

    fn changed_frozen_fields(&self, stored: &Self) -> Vec<&'static str> {
        differs("labels", &stored.labels, &self.labels)
            .into_iter()
            .collect()
    }

    fn same_content(&self, other: &Self) -> bool {
        Listing {
            fetched_at: other.fetched_at,
            ..self.clone()
        } == *other
    }
}

/// A frozen list whose elements may be null, and a frozen optional value stored as null when
/// `None` (never written, so it may be set later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "ballots")]
struct Ballot {
    #[idem(key)]
    voter: String,
    #[idem(timestamp)]
    cast_at: i64,
    #[idem(frozen)]
    choices: Vec<Option<String>>,
    #[idem(frozen)]
    reviewer: Option<String>,
    comment: String,
}

impl Shape for Ballot {
    type Key = String;
    const KEY_FIELD: &'static str = "voter";
    const KEY_NAME: &'static str = "voter";

    fn documents() -> BoxedStrategy<Self> {
        let choices = prop_oneof![
            5 => Just(&[Some("a"), None][..]),
            1 => Just(&[Some("b"), None][..]),
            1 => Just(&[Some("a"), Some("b")][..]),
            1 => Just(&[None][..]),
        ]
        .prop_map(|choices: &[Option<&str>]| {
            choices
                .iter()
                .map(|choice| choice.map(str::to_owned))
                .collect::<Vec<_>>()
        });
        (
            key_and_timestamp(),
            choices,
            option::weighted(0.3, text(&["r1", "r2"])),
            text(&["yes", "no"]),
        )
            .prop_map(|((voter, cast_at), choices, reviewer, comment)| Ballot {
                voter,
                cast_at,
                choices,
                reviewer,
                comment,
            })
            .boxed()
    }

    fn key(&self) -> String {
        self.voter.clone()
    }

    fn with_key(self, voter: String) -> Self {
        Self { voter, ..self }
    }

    fn changed_id_fields(&self, stored: &Self) -> Vec<&'static str> {
        differs("cast_at", &stored.cast_at, &self.cast_at)
            .into_iter()
            .collect()
    }

    fn changed_frozen_fields(&self, stored: &Self) -> Vec<&'static str> {
        [
            differs("choices", &stored.choices, &self.choices),
            written_and_differs("reviewer", &stored.reviewer, &self.reviewer),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn same_content(&self, other: &Self) -> bool {
        self == other
    }
}

/// A frozen optional value serde omits when `None` (absent: never written, so it may be set
/// later), under `rename_all`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "claims")]
#[serde(rename_all = "PascalCase")]
struct Claim {
    #[idem(key)]
    ticket: i64,
    #[idem(frozen)]
    #[serde(skip_serializing_if = "Option::is_none")]
    assignee: Option<String>,
    status: String,
    #[idem(volatile)]
    polled_at: i64,
}

impl Shape for Claim {
    type Key = i64;
    const KEY_FIELD: &'static str = "Ticket";
    const KEY_NAME: &'static str = "ticket";

    fn documents() -> BoxedStrategy<Self> {
        (
            number_key(),
            option::of(text(&["ann", "ben"])),
            text(&["open", "done"]),
            0..2i64,
        )
            .prop_map(|(ticket, assignee, status, polled_at)| Claim {
                ticket,
                assignee,
                status,
                polled_at,
            })
            .boxed()
    }

    fn key(&self) -> i64 {
        self.ticket
    }

    fn with_key(self, ticket: i64) -> Self {
        Self { ticket, ..self }
    }

    fn changed_frozen_fields(&self, stored: &Self) -> Vec<&'static str> {
        written_and_differs("assignee", &stored.assignee, &self.assignee)
            .into_iter()
            .collect()
    }

    fn same_content(&self, other: &Self) -> bool {
        Claim {
            polled_at: other.polled_at,
            ..self.clone()
        } == *other
    }
}

/// A versioned, deletable document with a chrono timestamp, for each version type `V`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "revisions")]
#[serde(rename_all = "camelCase")]
struct Revision<V> {
    #[idem(key)]
    note_id: String,
    #[idem(timestamp)]
    created_at: DateTime<Utc>,
    #[idem(version)]
    version: V,
    text: String,
    #[idem(volatile)]
    synced_at: i64,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

/// How many versions the generated documents choose from.
const VERSION_STEPS: usize = 5;

/// A version type: an increasing series of values, which documents pick by index.
trait VersionValue:
    idem_core::OrderedVersion
    + Ord
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The `step`th value of the series, `step < VERSION_STEPS`.
    fn nth(step: usize) -> Self;
}

/// The instant of version `step` in unix ms: whole and half seconds alternate, so the RFC 3339
/// texts `…:20Z` and `…:20.500Z` meet (the later one sorts first as text).
fn version_ms(step: usize) -> i64 {
    BASE_MS + 500 * step as i64
}

impl VersionValue for i64 {
    fn nth(step: usize) -> Self {
        step as i64 - 2
    }
}

impl VersionValue for u32 {
    fn nth(step: usize) -> Self {
        // Across the top of i32, where a narrower stored integer would wrap.
        [0, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX][step]
    }
}

impl VersionValue for DateTime<Utc> {
    fn nth(step: usize) -> Self {
        DateTime::from_timestamp_millis(version_ms(step)).expect("in chrono's range")
    }
}

impl VersionValue for time::OffsetDateTime {
    fn nth(step: usize) -> Self {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(version_ms(step)) * 1_000_000)
            .expect("in time's range")
    }
}

impl VersionValue for SystemTime {
    fn nth(step: usize) -> Self {
        SystemTime::UNIX_EPOCH + Duration::from_millis(version_ms(step).unsigned_abs())
    }
}

impl VersionValue for bson::DateTime {
    fn nth(step: usize) -> Self {
        bson::DateTime::from_millis(version_ms(step))
    }
}

impl<V: VersionValue> Shape for Revision<V> {
    type Key = String;
    const KEY_FIELD: &'static str = "noteId";
    const KEY_NAME: &'static str = "note_id";
    const TOMBSTONE_FIELD: Option<&'static str> = Some("deletedAt");

    fn documents() -> BoxedStrategy<Self> {
        (
            key_and_timestamp(),
            0..VERSION_STEPS,
            text(&["draft", "final"]),
            0..2i64,
        )
            .prop_map(|((note_id, created_ms), step, text, synced_at)| Revision {
                note_id,
                created_at: DateTime::from_timestamp_millis(created_ms).expect("in range"),
                version: V::nth(step),
                text,
                synced_at,
                deleted_at: None,
            })
            .boxed()
    }

    fn deletions() -> Option<BoxedStrategy<Self>> {
        let deletions = (Self::documents(), 1..=3i64).prop_map(|(doc, marker)| Revision {
            deleted_at: Some(marker),
            ..doc
        });
        Some(deletions.boxed())
    }

    fn key(&self) -> String {
        self.note_id.clone()
    }

    fn with_key(self, note_id: String) -> Self {
        Self { note_id, ..self }
    }

    fn tombstone(&self) -> Option<i64> {
        self.deleted_at
    }

    fn with_tombstone(self, marker: Option<i64>) -> Self {
        Revision {
            deleted_at: marker,
            ..self
        }
    }

    fn changed_id_fields(&self, stored: &Self) -> Vec<&'static str> {
        differs("created_at", &stored.created_at, &self.created_at)
            .into_iter()
            .collect()
    }

    fn same_content(&self, other: &Self) -> bool {
        Revision {
            synced_at: other.synced_at,
            deleted_at: other.deleted_at,
            ..self.clone()
        } == *other
    }

    fn version_order(&self, stored: &Self) -> Option<Ordering> {
        Some(self.version.cmp(&stored.version))
    }
}

// ---------------------------------------------------------------------------------------------
// One test per shape family

#[test]
fn optional_flattened_renamed_and_nested_fields() {
    check_family::<Profile>("model_profile");
}

#[test]
fn frozen_hash_map() {
    check_family::<Listing>("model_listing");
}

#[test]
fn frozen_list_with_nulls_and_frozen_null() {
    check_family::<Ballot>("model_ballot");
}

#[test]
fn frozen_optional_field_omitted_when_none() {
    check_family::<Claim>("model_claim");
}

#[test]
fn i64_version_and_tombstone() {
    check_family::<Revision<i64>>("model_version_i64");
}

#[test]
fn u32_version_and_tombstone() {
    check_family::<Revision<u32>>("model_version_u32");
}

#[test]
fn chrono_version_and_tombstone() {
    check_family::<Revision<DateTime<Utc>>>("model_version_chrono");
}

#[test]
fn time_version_and_tombstone() {
    check_family::<Revision<time::OffsetDateTime>>("model_version_time");
}

#[test]
fn system_time_version_and_tombstone() {
    check_family::<Revision<SystemTime>>("model_version_system_time");
}

#[test]
fn bson_date_version_and_tombstone() {
    check_family::<Revision<bson::DateTime>>("model_version_bson_date");
}
