//! The MongoDB store: converging upserts guarded against orphaning writes.
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
//! One `update` command, keyed by the derived `_id` with the natural-key fields beside it, sets
//! the document only if its stored content hash differs and no stored frozen field differs, and
//! inserts it if no document has that `_id`. The server's answer classifies the write:
//!
//! - a match: `Updated`; an insert: `Inserted` (one round trip either way);
//! - a duplicate-key error: a document with this `_id` or this natural key is stored but did not
//!   match. One read of it tells `Unchanged` (same content hash) from a refusal
//!   ([`Error::FrozenFieldChanged`]: a frozen field differs, or the natural key is stored under
//!   another id because a field feeding the id changed). Nothing was written either way.
//!
//! No read precedes a write, so there is no window in which a concurrent writer's update can be
//! lost; the unique index on the natural key makes a fork (two documents for one natural key)
//! impossible even under racing writers. The store checks that index once per collection before
//! its first write, and creates it if it is missing.
//!
//! Retries are safe: `retryWrites=false` loses nothing. If an acknowledgement is lost, calling
//! `upsert` again finds the document written and answers `Unchanged`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use mongodb::bson::{self, doc, Bson, Document};
use mongodb::options::IndexOptions;
use mongodb::{Collection, Database, IndexModel};
use serde::Serialize;

use crate::error::Error;
use crate::id::Id;
use crate::model::{Backend, DocumentRef, Field, Idempotent, Model};
use crate::outcome::Outcome;

/// The name of the unique index on a collection's natural key.
pub const NATURAL_KEY_INDEX: &str = "idem_natural_key";

/// MongoDB's error code for a duplicate key.
const DUPLICATE_KEY: i32 = 11000;

/// How often an upsert starts over when concurrent writers change the document between its write
/// and its read. Each attempt is safe; contention this long is reported, not hidden.
const MAX_ATTEMPTS: usize = 8;

/// A MongoDB database that idem writes to. Cheap to clone; clones share the index checks.
#[derive(Clone, Debug)]
pub struct Store {
    database: Database,
    indexed_collections: Arc<Mutex<HashSet<&'static str>>>,
}

impl Store {
    /// A store writing to `database`.
    pub fn new(database: Database) -> Self {
        Store {
            database,
            indexed_collections: Arc::default(),
        }
    }

    /// The database written to.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The driver's collection of `T`, for reads and anything idem does not do.
    pub fn collection<T: Idempotent + Send + Sync>(&self) -> Collection<T> {
        self.database.collection(T::MODEL.collection())
    }

    /// Creates the unique index on `T`'s natural key (named [`NATURAL_KEY_INDEX`]). Idempotent:
    /// calling it again changes nothing.
    pub async fn ensure_indexes<T: Idempotent>(&self) -> Result<(), Error> {
        self.create_natural_key_index(&T::MODEL).await
    }

    /// Writes `doc` under its derived id, converging under retries, replays and races.
    ///
    /// Returns `Inserted` or `Updated` after one round trip, `Unchanged` (nothing written) after
    /// two. Refuses with [`Error::FrozenFieldChanged`] a write that would change a frozen field or
    /// store the natural key under a second id; nothing is written then.
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let model = &T::MODEL;
        let write = PreparedWrite::new(doc)?;
        self.verify_indexes(model).await?;
        let collection = self.raw_collection(model);
        for _ in 0..MAX_ATTEMPTS {
            let result = collection
                .update_one(write.guarded_filter(), doc! { "$set": write.body.clone() })
                .upsert(true)
                .await;
            match result {
                Ok(result) if result.upserted_id.is_some() => return Ok(Outcome::Inserted),
                Ok(result) if result.matched_count > 0 => return Ok(Outcome::Updated),
                // An upsert either matches or inserts; anything else is a server quirk, and
                // trying again is safe.
                Ok(_) => continue,
                Err(error) if is_duplicate_key(&error) => {
                    if let Some(outcome) = self.classify_conflict(&collection, &write).await? {
                        return Ok(outcome);
                    }
                }
                Err(source) => {
                    return Err(Error::Mongo {
                        document: write.document.clone(),
                        source,
                    })
                }
            }
        }
        Err(Error::Contention {
            document: write.document,
        })
    }

    /// Reads what stopped a guarded write: `Unchanged`, a refusal, or `None` if the document
    /// changed meanwhile and the write should be tried again.
    async fn classify_conflict(
        &self,
        collection: &Collection<Document>,
        write: &PreparedWrite,
    ) -> Result<Option<Outcome>, Error> {
        let mut by_id = None;
        let mut by_natural_key = None;
        let filter =
            doc! { "$or": [ { "_id": write.id_text.as_str() }, write.natural_key_filter() ] };
        let mut cursor = collection
            .find(filter)
            .limit(2)
            .await
            .map_err(|source| Error::Mongo {
                document: write.document.clone(),
                source,
            })?;
        while cursor.advance().await.map_err(|source| Error::Mongo {
            document: write.document.clone(),
            source,
        })? {
            let stored: Document = cursor
                .deserialize_current()
                .map_err(|source| Error::Mongo {
                    document: write.document.clone(),
                    source,
                })?;
            if stored.get_str("_id").ok() == Some(write.id_text.as_str()) {
                by_id = Some(stored);
            } else {
                by_natural_key = Some(stored);
            }
        }
        if let Some(stored) = by_id {
            if let Some(refusal) = write.frozen_change(&stored) {
                return Err(refusal);
            }
            let stored_hash = stored.get_str(write.model.hash_field()).ok();
            return Ok((stored_hash == Some(write.hash.as_str())).then_some(Outcome::Unchanged));
        }
        match by_natural_key {
            Some(stored) => Err(write.id_change(&stored)),
            None => Ok(None),
        }
    }

    async fn verify_indexes(&self, model: &Model) -> Result<(), Error> {
        if self.is_indexed(model) {
            return Ok(());
        }
        let names = self
            .raw_collection(model)
            .list_index_names()
            .await
            .map_err(|source| Error::Mongo {
                document: DocumentRef::collection(model),
                source,
            });
        // A collection that does not exist yet has no indexes; listing them fails on some
        // servers and returns nothing on others.
        let present = names
            .map(|names| names.iter().any(|name| name == NATURAL_KEY_INDEX))
            .unwrap_or(false);
        if present {
            self.remember_indexed(model);
            return Ok(());
        }
        self.create_natural_key_index(model).await
    }

    async fn create_natural_key_index(&self, model: &Model) -> Result<(), Error> {
        let keys: Document = model
            .key_fields()
            .map(|field| (field.stored_name().to_owned(), Bson::Int32(1)))
            .collect();
        let index = IndexModel::builder()
            .keys(keys)
            .options(
                IndexOptions::builder()
                    .name(NATURAL_KEY_INDEX.to_owned())
                    .unique(true)
                    .build(),
            )
            .build();
        self.raw_collection(model)
            .create_index(index)
            .await
            .map_err(|source| Error::Mongo {
                document: DocumentRef::collection(model),
                source,
            })?;
        self.remember_indexed(model);
        Ok(())
    }

    fn is_indexed(&self, model: &Model) -> bool {
        let indexed = self
            .indexed_collections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        indexed.contains(model.collection())
    }

    fn remember_indexed(&self, model: &Model) {
        let mut indexed = self
            .indexed_collections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        indexed.insert(model.collection());
    }

    fn raw_collection(&self, model: &Model) -> Collection<Document> {
        self.database.collection(model.collection())
    }
}

impl Backend for Store {
    fn upsert<T>(&self, doc: &T) -> impl std::future::Future<Output = Result<Outcome, Error>> + Send
    where
        T: Idempotent + Serialize + Sync,
    {
        Store::upsert(self, doc)
    }

    fn ensure_indexes<T>(&self) -> impl std::future::Future<Output = Result<(), Error>> + Send
    where
        T: Idempotent,
    {
        Store::ensure_indexes::<T>(self)
    }
}

/// One document ready to write: its id, hash and stored form, computed before any round trip.
struct PreparedWrite {
    model: &'static Model,
    document: DocumentRef,
    id: Id,
    id_text: String,
    hash: String,
    /// The stored fields, hash included, `_id` excluded.
    body: Document,
}

impl PreparedWrite {
    fn new<T: Idempotent + Serialize>(doc: &T) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let id = doc.id()?;
        let id_text = id.to_string();
        let hash = doc.content_hash()?.to_hex();
        let document = doc.document_ref();
        let mut body = bson::to_document(doc).map_err(|error| Error::Serialize {
            document: document.clone(),
            message: error.to_string(),
        })?;
        if let Some(missing) = model
            .frozen_fields()
            .find(|field| !body.contains_key(field.stored_name()))
        {
            return Err(Error::FieldNotSerialized {
                document,
                field: missing.name(),
                stored_name: missing.stored_name(),
            });
        }
        body.insert(model.hash_field(), hash.clone());
        Ok(PreparedWrite {
            model,
            document,
            id,
            id_text,
            hash,
            body,
        })
    }

    fn value(&self, field: &Field) -> &Bson {
        // `new` checked that every frozen field is in the body.
        self.body.get(field.stored_name()).unwrap_or(&Bson::Null)
    }

    /// `{k1: {$eq: v1}, …}` over the key fields. `$eq` keeps a value that looks like an operator
    /// document from being read as one.
    fn natural_key_filter(&self) -> Document {
        self.model
            .key_fields()
            .map(|field| {
                (
                    field.stored_name().to_owned(),
                    Bson::Document(doc! { "$eq": self.value(field).clone() }),
                )
            })
            .collect()
    }

    /// Matches the stored document only if this write may replace it: same id and natural key,
    /// another content hash, and every frozen field either equal or never written.
    fn guarded_filter(&self) -> Document {
        let mut filter = doc! { "_id": self.id_text.as_str() };
        filter.extend(self.natural_key_filter());
        filter.insert(self.model.hash_field(), doc! { "$ne": self.hash.as_str() });
        let unchanged_frozen: Vec<Bson> = self
            .model
            .frozen_fields()
            .filter(|field| field.role() != crate::model::Role::Key)
            .map(|field| {
                let name = field.stored_name();
                Bson::Document(doc! { "$or": [
                    { name: { "$eq": self.value(field).clone() } },
                    { name: { "$exists": false } },
                ] })
            })
            .collect();
        if !unchanged_frozen.is_empty() {
            filter.insert("$and", unchanged_frozen);
        }
        filter
    }

    /// The refusal for a stored document under this id whose frozen field differs, if any.
    fn frozen_change(&self, stored: &Document) -> Option<Error> {
        self.model.frozen_fields().find_map(|field| {
            let stored_value = stored.get(field.stored_name())?;
            let incoming = self.value(field);
            (!bson_equal(stored_value, incoming))
                .then(|| self.refusal(stored, field.name(), Some(stored_value), incoming))
        })
    }

    /// The refusal for the natural key stored under another id: the field feeding the id that
    /// differs (the timestamp, or `_id` itself if the id was derived another way).
    fn id_change(&self, stored: &Document) -> Error {
        let feeding = self.model.key_fields().chain(self.model.timestamp_field());
        for field in feeding {
            let stored_value = stored.get(field.stored_name());
            let incoming = self.value(field);
            if !stored_value.is_some_and(|value| bson_equal(value, incoming)) {
                return self.refusal(stored, field.name(), stored_value, incoming);
            }
        }
        let stored_id = stored.get("_id");
        self.refusal(
            stored,
            "_id",
            stored_id,
            &Bson::String(self.id_text.clone()),
        )
    }

    fn refusal(
        &self,
        stored: &Document,
        field: &'static str,
        stored_value: Option<&Bson>,
        incoming: &Bson,
    ) -> Error {
        // A stored `_id` that is not a ULID was not written by idem; name the incoming id then.
        let stored_id = stored.get_str("_id").ok().and_then(|id| id.parse().ok());
        Error::FrozenFieldChanged {
            document: self.document.clone(),
            stored_id: stored_id.unwrap_or(self.id),
            field,
            stored: stored_value.map_or_else(|| "(missing)".to_owned(), show),
            incoming: show(incoming),
        }
    }
}

/// A value as error messages show it: relaxed extended JSON.
fn show(value: &Bson) -> String {
    value.clone().into_relaxed_extjson().to_string()
}

/// Equality as a MongoDB filter sees it: numbers compare by value across int32, int64 and
/// double, so a document written by another tool with narrower integers is not a change.
fn bson_equal(a: &Bson, b: &Bson) -> bool {
    fn number(value: &Bson) -> Option<f64> {
        match value {
            Bson::Int32(n) => Some(f64::from(*n)),
            Bson::Int64(n) => Some(*n as f64),
            Bson::Double(n) => Some(*n),
            _ => None,
        }
    }
    match (a, b) {
        (Bson::Int64(x), Bson::Int64(y)) => x == y,
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((kx, vx), (ky, vy))| kx == ky && bson_equal(vx, vy))
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| bson_equal(vx, vy))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

fn is_duplicate_key(error: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(write_error)) => {
            write_error.code == DUPLICATE_KEY
        }
        ErrorKind::Command(command_error) => command_error.code == DUPLICATE_KEY,
        _ => false,
    }
}
