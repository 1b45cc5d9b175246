//! The MongoDB store: converging upserts guarded against orphaning writes, batch upserts, and the
//! primitives that keep side effects exact.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String }
//! # async fn run(client: mongodb::Client, post: Post) -> Result<(), idem_core::Error> {
//! let store = idem_core::mongo::Store::new(client.database("blog"));
//! store.ensure_indexes::<Post>().await?;
//! let outcome = store.upsert(&post).await?;
//! # Ok(()) }
//! ```
//!
//! # How an upsert converges
//!
//! One `findAndModify` command, keyed by the derived `_id` with the natural-key fields beside
//! it, replaces the stored document with an update pipeline only if a guard on the stored document
//! allows it (not deleted; no frozen field changed; a strictly newer version, or without versions
//! another content hash), inserts it if no document has that `_id`, and returns the document as
//! the command left it. That image classifies the write in the same round trip: holding this
//! write's marker (`idemWrite`), it was `Inserted` or `Updated` here; otherwise the guard left it
//! alone, and it is `Unchanged`, `Stale`, `Deleted` or a refusal ([`ErrorKind::FrozenFieldChanged`]),
//! judged by the rule the guard states (the engine's verdict). A server that retries a racing
//! insert as an update may return no document; the command is then sent again and reads its own
//! marker back, so two racing writers never both report `Inserted`.
//!
//! A duplicate-key error means the natural key is stored under another id, because a field
//! feeding the id changed (a refusal, after a read by `_id` and one by natural key), or another
//! unique index collides ([`ErrorKind::UniqueIndexConflict`]). Nothing was written either way.
//!
//! No read precedes a write, so there is no window in which a concurrent writer's update can be
//! lost; the unique index on the natural key makes a fork (two documents for one natural key)
//! impossible even under racing writers. The store checks that index once per collection before
//! its first write, and creates it if it is missing (unless told to do without it, where `_id`
//! is the guard: [`Store::with_natural_key_index`]).
//!
//! On a server without update pipelines ([`Store::with_update_pipelines`], or learned from
//! its refusal of the first one), an upsert reads first and writes with operators only: an
//! insert, or a replacement matching only the document as read; same outcomes, more round trips.
//!
//! Retries are safe: `retryWrites=false` loses nothing. If an acknowledgement is lost, calling
//! `upsert` again finds the document written and answers `Unchanged`.

mod adopt;
mod audit;
mod batch;
mod compare;
mod driver;
mod effects;
mod errors;
mod events;
mod read;
mod schema;
pub(crate) mod text_keys;
mod write;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mongodb::bson::{doc, Bson, Document};
use mongodb::{Collection, Database};
use serde::Serialize;

pub use crate::audit::{AdoptReport, AuditProgress, AuditReport};
pub use crate::batch::BatchReport;
pub use crate::outcome::Recorded;
pub use adopt::{AdoptOptions, DuplicateRule, ARCHIVE_SUFFIX};

use crate::document::DocumentRef;
use crate::engine::by_id::{settle_by_id, ById};
use crate::engine::{self, WriteKind};
use crate::error::Error;
#[cfg(doc)]
use crate::error::ErrorKind;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::Model;
use crate::outcome::{Deletion, Outcome};
use schema::natural_key_pattern;

pub use errors::driver_error;
pub(crate) use errors::is_transient_code;
use errors::{
    duplicate_key_message, index_in_message, is_duplicate_key, mongo_error, next_document,
    validator_refusal, Naming, DUPLICATE_KEY,
};
use write::{is_tombstoned, PreparedWrite};

/// The name of the unique index on a collection's natural key (or an event type's idempotency
/// key).
pub const NATURAL_KEY_INDEX: &str = "idem_natural_key";

pub use crate::model::APPLIED_OPS_FIELD;

/// How many op ids a document remembers by default; see [`Store::with_op_window`].
pub const DEFAULT_OP_WINDOW: usize = 1000;

/// How many documents [`Store::upsert_many`] reads and writes per chunk by default; see
/// [`Store::with_batch_chunk`].
pub const DEFAULT_BATCH_CHUNK: usize = 250;

use crate::trace::{Call, CallKind};

/// A MongoDB database that idem writes to. Cheap to clone; clones share the index checks.
#[derive(Clone, Debug)]
pub struct Store {
    database: Database,
    /// Per collection checked, the name of the unique index on its natural key.
    natural_key_indexes: Arc<Mutex<HashMap<&'static str, String>>>,
    op_window: usize,
    batch_chunk: usize,
    limits: Arc<Mutex<Option<batch::ServerLimits>>>,
    /// Whether upserts state their guard in an update pipeline: until the server refuses one,
    /// or the option says it would.
    update_pipelines: Arc<AtomicBool>,
    /// Whether a unique index keeps each natural key unique ([`Store::with_natural_key_index`]).
    index_natural_keys: bool,
}

impl Store {
    /// A store writing to `database`.
    pub fn new(database: Database) -> Self {
        Store {
            database,
            natural_key_indexes: Arc::default(),
            op_window: DEFAULT_OP_WINDOW,
            batch_chunk: DEFAULT_BATCH_CHUNK,
            limits: Arc::default(),
            update_pipelines: Arc::new(AtomicBool::new(true)),
            index_natural_keys: true,
        }
    }

    /// For tests: a store of the same configuration that has learned nothing of its collections
    /// yet (their indexes), as a new one would be, for a collection dropped behind its back; it
    /// keeps whether the server takes update pipelines. Not part of the stable API.
    #[doc(hidden)]
    pub fn unlearned(&self) -> Self {
        Store {
            natural_key_indexes: Arc::default(),
            update_pipelines: Arc::new(AtomicBool::new(self.uses_update_pipelines())),
            ..self.clone()
        }
    }

    /// Whether upserts may use update pipelines (`true` by default). A server without them
    /// (MongoDB before 4.2, FerretDB 1.x, and other MongoDB-protocol engines; check yours) is
    /// also learned from its refusal of the first one, after which the store does without.
    ///
    /// Without update pipelines an upsert reads the stored document first, then writes with
    /// operators only: an insert for a new document, a replacement matching only the document
    /// as read for a changed one. The outcomes and refusals are the same; a single upsert then
    /// takes two round trips to insert or update (one when nothing changed), and a batch one
    /// read and one insert per chunk, plus one write per changed document.
    pub fn with_update_pipelines(mut self, enabled: bool) -> Self {
        self.update_pipelines = Arc::new(AtomicBool::new(enabled));
        self
    }

    /// Whether upserts use update pipelines: what [`with_update_pipelines`] set, unless the
    /// server refused one since.
    ///
    /// [`with_update_pipelines`]: Store::with_update_pipelines
    pub fn uses_update_pipelines(&self) -> bool {
        self.update_pipelines.load(Ordering::Relaxed)
    }

    /// The server refused an update pipeline: this store and its clones do without from now on.
    fn stop_using_update_pipelines(&self) {
        if self.update_pipelines.swap(false, Ordering::Relaxed) {
            crate::trace::retry("the server refuses update pipelines: writing with operators");
        }
    }

    /// Whether the store keeps a unique index on each collection's natural key (`true` by
    /// default). `false` is for a collection sharded on a hashed `_id`, where MongoDB allows no
    /// other unique index: `_id` is then the only guard against two documents for one natural
    /// key, which holds for a type whose id derives from its key alone. Before its first write
    /// of a collection, and in [`ensure_schema`](Store::ensure_schema), the store then creates
    /// and checks no index, and refuses ([`ErrorKind::SchemaMismatch`]) a type whose id has a
    /// time part (a `#[idem(timestamp)]` field: two writes of one key with different timestamps
    /// would store two documents) or is random (an event's idempotency key). A document another
    /// tool stored under another id is not found by a write of its key: `audit` shows it.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, Idempotent)]
    /// # struct Post { #[idem(key)] slug: String }
    /// # async fn run(client: mongodb::Client, post: Post) -> Result<(), idem_core::Error> {
    /// // sh.shardCollection("blog.posts", { _id: "hashed" })
    /// let store = idem_core::mongo::Store::new(client.database("blog"))
    ///     .with_natural_key_index(false);
    /// store.ensure_schema::<Post>().await?; // refuses a type whose id has a time part
    /// store.upsert(&post).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_natural_key_index(mut self, enabled: bool) -> Self {
        self.index_natural_keys = enabled;
        self
    }

    /// Whether the store keeps a unique index on each natural key: what
    /// [`with_natural_key_index`](Store::with_natural_key_index) set.
    pub fn uses_natural_key_index(&self) -> bool {
        self.index_natural_keys
    }

    /// Sets how many op ids [`apply_once`](Store::apply_once) remembers per document (at least
    /// one). An operation retried after `window` newer operations were applied to the same
    /// document is no longer recognised and would apply again: choose a window larger than the
    /// operations a document receives while a client may still retry.
    pub fn with_op_window(mut self, window: usize) -> Self {
        self.op_window = window.max(1);
        self
    }

    /// Sets how many documents [`upsert_many`](Store::upsert_many) handles per chunk (at least
    /// one, at most the server's `maxWriteBatchSize`): one read of their stored state, then one
    /// write command for those that need it (more if they exceed the server's command size).
    ///
    /// Larger chunks take fewer round trips, which matters on a link with high latency; smaller
    /// ones bound each reply and each command. The default, [`DEFAULT_BATCH_CHUNK`], keeps the
    /// test server fast: it checks each stored document against the whole `$in` list of a read,
    /// so its cost grows with the square of the chunk (re-ingesting 10,000 documents took 5.9 s
    /// in chunks of 1,000, 1.8 s in chunks of 250). MongoDB looks the ids up in its index.
    pub fn with_batch_chunk(mut self, documents: usize) -> Self {
        self.batch_chunk = documents.max(1);
        self
    }

    /// The database written to.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The driver's collection of `T`, for reads and anything idem does not do.
    pub fn collection<T: Idempotent + Send + Sync>(&self) -> Collection<T> {
        self.database.collection(T::MODEL.collection())
    }

    /// Makes sure a unique index keeps `T`'s natural key unique: creates one named
    /// [`NATURAL_KEY_INDEX`], unless a unique index on exactly the natural-key fields is there
    /// already under another name, which serves as well. Idempotent: calling it again changes
    /// nothing. A [`NATURAL_KEY_INDEX`] that cannot serve (not unique, partial, sparse, under a
    /// collation, or on other fields) is [`ErrorKind::SchemaMismatch`], naming it and what is wrong,
    /// and so is another index on those fields that keeps the server from building it; every
    /// write refuses them the same way before anything is written. Without the index
    /// ([`Store::with_natural_key_index`]) it creates nothing, and refuses a type whose id has a
    /// time part or is random.
    pub async fn ensure_indexes<T: Idempotent>(&self) -> Result<(), Error> {
        self.create_natural_key_index(&T::MODEL, &DocumentRef::collection(&T::MODEL))
            .await
    }

    /// [`ensure_indexes`](Store::ensure_indexes) under the name every store gives it: makes what
    /// `T`'s writes need (here, the unique natural-key index).
    pub async fn ensure_schema<T: Idempotent>(&self) -> Result<(), Error> {
        self.ensure_indexes::<T>().await
    }

    /// Writes `doc` under its derived id, converging under retries, replays and races.
    ///
    /// Every outcome takes one round trip, and so does the refusal of a changed frozen field;
    /// the refusal of a changed field feeding the id takes three (the write, then a read by
    /// `_id` and one by natural key). A document another tool stored without digests takes a
    /// second, pinned write; without update pipelines ([`Store::with_update_pipelines`]) an
    /// insert or an update takes two (a read, then the write). Refuses with
    /// [`ErrorKind::FrozenFieldChanged`] a write that would change a frozen field or a field feeding
    /// the id, and with [`ErrorKind::IdChanged`] one whose natural key is stored under another id
    /// for no reason a stored field shows; nothing is written then.
    /// An event type (with an `idempotency_key`) is written as by [`record`](Store::record).
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Upsert, T::MODEL.collection(), || doc.id().ok());
        call.run(async move {
            if T::MODEL.idempotency_key_field().is_some() {
                return self.record(doc).await.map(|recorded| recorded.outcome);
            }
            let write = PreparedWrite::new(doc)?;
            self.verify_indexes(&T::MODEL, &write.document()).await?;
            if !self.uses_update_pipelines() {
                // Read first: the write carries no guard.
                let driver = self.driver(write.model, true);
                let mut outcomes = engine::batch::settle_read_first(&driver, &[&write]).await?;
                return outcomes
                    .pop()
                    .unwrap_or_else(|| Err(engine::contention(&write.document())));
            }
            self.settle_one(WriteKind::Upsert, &write).await
        })
        .await
    }

    /// Marks `doc` deleted by storing its tombstone field (which must be `Some`). Deleting twice
    /// keeps the first marker. A document not stored yet is stored deleted, so a later replay of
    /// its creation does not bring it back. Returns `Deleted`, or `AlreadyDeleted` if it already
    /// was.
    pub async fn delete<T>(&self, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Delete, T::MODEL.collection(), || doc.id().ok());
        call.run(async move {
            let write = PreparedWrite::new(doc)?;
            let tombstone = engine::tombstone_field(&T::MODEL, &write.document())?;
            engine::check_marked(tombstone, write.tombstone.is_some(), || write.document())?;
            self.verify_indexes(&T::MODEL, &write.document()).await?;
            self.settle_one(WriteKind::Delete, &write)
                .await
                .map(Deletion::of)
        })
        .await
    }

    /// Marks the document stored under `id` deleted with `marker` (the value of its tombstone
    /// field). Returns `Deleted`, or `AlreadyDeleted` if it already was (the first marker
    /// stays); [`ErrorKind::NotFound`] if no document has that id. A marker that serializes as null
    /// (`None`, `()`) would mark nothing: it is [`ErrorKind::TombstoneNotSet`], and nothing is sent.
    pub async fn delete_by_id<T, M>(&self, id: Id, marker: &M) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        let call = Call::new(CallKind::DeleteById, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            let encode = |marker: &M| mongodb::bson::to_bson(marker).map_err(|e| e.to_string());
            let (tombstone, marker) =
                engine::tombstone_for(model, &T::stored_columns(), marker, &document, encode)?;
            let collection = self.raw_collection(model);
            let id_text = id.to_string();
            let filter =
                doc! { "_id": id_text.as_str(), tombstone.stored_name(): { "$eq": Bson::Null } };
            let update = doc! { "$set": { tombstone.stored_name(): marker } };
            let (collection, document, id_text) = (&collection, &document, id_text.as_str());
            let explain = move || async move {
                Ok(match find_by_id(collection, document, id_text).await? {
                    None => ById::Missing,
                    Some(stored) if is_tombstoned(model, &stored) => {
                        ById::Answered(Deletion::AlreadyDeleted)
                    }
                    Some(_) => ById::Changed,
                })
            };
            update_or_explain(
                collection,
                document,
                &filter,
                &update,
                Deletion::Deleted,
                explain,
            )
            .await
        })
        .await
    }

    /// Writes one prepared document through the engine until its outcome is settled.
    async fn settle_one(&self, kind: WriteKind, write: &PreparedWrite) -> Result<Outcome, Error> {
        engine::settle_one(&self.driver(write.model, false), kind, write).await
    }

    /// The engine's driver writing documents of `model`, in batches or one by one.
    fn driver(&self, model: &'static Model, batched: bool) -> driver::MongoDriver<'_> {
        driver::MongoDriver {
            store: self,
            model,
            collection: self.raw_collection(model),
            batched,
        }
    }

    fn raw_collection(&self, model: &Model) -> Collection<Document> {
        self.database.collection(model.collection())
    }
}

crate::backend::backend_by_inherent_methods!([] Store);

/// `mutex`'s guard, whether or not a panic poisoned it: what it holds (what the store learned
/// of the server) is whole after any panic.
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends the guarded `update` (its `filter` holds the guard) until the call is answered (see
/// [`settle_by_id`]): `matched` when it matched, else what `explain` reads from what is stored.
async fn update_or_explain<R, Explained>(
    collection: &Collection<Document>,
    document: &DocumentRef,
    filter: &Document,
    update: &Document,
    matched: R,
    mut explain: impl FnMut() -> Explained,
) -> Result<R, Error>
where
    R: Clone,
    Explained: std::future::Future<Output = Result<ById<R>, Error>>,
{
    settle_by_id(document, || {
        let (matched, explained) = (matched.clone(), explain());
        async move {
            crate::trace::round_trip("update");
            let result = collection
                .update_one(filter.clone(), update.clone())
                .await
                .naming(document)?;
            if result.matched_count > 0 {
                return Ok(ById::Answered(matched));
            }
            explained.await
        }
    })
    .await
}

/// The document stored under `id_text`; an error names `document`.
async fn find_by_id(
    collection: &Collection<Document>,
    document: &DocumentRef,
    id_text: &str,
) -> Result<Option<Document>, Error> {
    crate::trace::round_trip("find");
    collection
        .find_one(doc! { "_id": id_text })
        .await
        .naming(document)
}

/// Every document a find returns, in one batch where the server allows.
async fn collect(
    find: mongodb::action::Find<'_, Document>,
    document: &DocumentRef,
) -> Result<Vec<Document>, Error> {
    let mut cursor = find.await.naming(document)?;
    let mut stored = Vec::new();
    while let Some(found) = next_document(&mut cursor, document).await? {
        stored.push(found);
    }
    Ok(stored)
}
