//! The one API every store offers: the same methods, arguments and results on each backend.

use std::future::Future;

use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};

/// A database idem writes to, through the caller's connection where it has one: a
/// `mongo::Store`, or a `postgres::Session` (`store.on(&client)`, a client or a transaction).
/// Every method means the same on every backend; the backend's docs say what each costs there.
/// The derive's generated methods (`post.upsert(&backend)`, `Post::ensure_schema(&backend)`)
/// take any `Backend`, so code written against it runs on every store.
pub trait Backend: Sync {
    /// Writes `doc` so that retries, replays and races converge.
    fn upsert<T>(&self, doc: &T) -> impl Future<Output = Result<Outcome, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync;

    /// Upserts `docs`, each with the outcome upserting them one by one in input order gives.
    fn upsert_many<T>(&self, docs: &[T]) -> impl Future<Output = Result<BatchReport, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync;

    /// Marks `doc` deleted with its tombstone field, storing it deleted if it is not stored.
    fn delete<T>(&self, doc: &T) -> impl Future<Output = Result<Deletion, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync;

    /// Marks the document stored under `id` deleted with `marker`.
    fn delete_by_id<T, M>(
        &self,
        id: Id,
        marker: &M,
    ) -> impl Future<Output = Result<Deletion, Error>> + Send
    where
        T: Idempotent,
        M: serde::Serialize + Sync;

    /// Inserts the members of a derived set that are not stored, reporting each member.
    fn insert_new<T>(
        &self,
        members: &[T],
    ) -> impl Future<Output = Result<InsertReport<T>, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync + Clone;

    /// Appends `item` to the pushed list `field` (its Rust name) of the document `id`, unless an
    /// item with the same key is there already.
    fn push<T, I>(
        &self,
        id: Id,
        field: &'static str,
        item: &I,
    ) -> impl Future<Output = Result<Pushed, Error>> + Send
    where
        T: Idempotent,
        I: serde::Serialize + Sync;

    /// Applies `changes` to the effect fields of the document `id` once per `op`.
    fn apply_once<T>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> impl Future<Output = Result<Applied, Error>> + Send
    where
        T: Idempotent;

    /// Records an event (a type with an `#[idem(idempotency_key)]`) once under its key.
    fn record<T>(&self, event: &T) -> impl Future<Output = Result<Recorded, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync;

    /// The document stored under `id`, as `T`; `None` if none is. A deleted document is
    /// returned with its tombstone set. [`ErrorKind::Deserialize`](crate::ErrorKind::Deserialize) if it does not read as `T`.
    fn get<T>(&self, id: Id) -> impl Future<Output = Result<Option<T>, Error>> + Send
    where
        T: Idempotent + serde::de::DeserializeOwned + Send;

    /// The document stored under the natural key `key` (as [`Idempotent::natural_key`] gives
    /// it, or the generated `find` builds it), as `T`; `None` if none is.
    fn find<T>(&self, key: NaturalKey) -> impl Future<Output = Result<Option<T>, Error>> + Send
    where
        T: Idempotent + serde::de::DeserializeOwned + Send;

    /// Makes what `T`'s writes need: the unique natural-key index on MongoDB, the table with
    /// its constraints on PostgreSQL. Idempotent.
    fn ensure_schema<T>(&self) -> impl Future<Output = Result<(), Error>> + Send
    where
        T: Idempotent;
}
