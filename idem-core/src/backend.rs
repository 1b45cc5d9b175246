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
///
/// A SQL store alone is not one: `sqlite::Store` and `postgres::Store` hold no connection, and
/// become a `Backend` with the caller's, `store.on(&mut conn)`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Backend`: a SQL store reads and writes through a connection, `store.on(&mut conn)`",
    label = "not a `Backend`",
    note = "pass a SQLite or PostgreSQL store with the connection it uses, `&store.on(&mut conn)`, or `&store.on(&mut *tx)` inside a sqlx transaction; with tokio-postgres, `&store.on(&client)` or `&store.on(&tx)`",
    note = "a `mongo::Store` is a `Backend` itself, and so is what `store.on(…)` returns (a `Session`)"
)]
pub trait Backend: Sync {
    /// Writes `doc` so that retries, replays and races converge.
    fn upsert<T>(&self, doc: &T) -> impl Future<Output = Result<Outcome, Error>> + Send
    where
        T: Idempotent + serde::Serialize + Sync;

    /// Upserts `docs`, each with the outcome upserting them one by one in input order gives.
    /// The documents are prepared a chunk at a time, and a chunk's prepared rows are dropped
    /// once it is written (unless an id of it comes back later in the batch), so a batch of any
    /// size holds about two chunks of them at once, beside `docs` itself.
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

/// Implements [`Backend`] for a store by its inherent methods of the same names and arguments:
/// each store writes every method once, as an inherent one (so that no trait import is needed),
/// and this makes them the trait's. `[generics] Type`, as in
/// `backend_by_inherent_methods!([C: Connection] Session<'_, C>)`.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
macro_rules! backend_by_inherent_methods {
    ([$($generics:tt)*] $store:ty) => {
        impl<$($generics)*> $crate::Backend for $store {
            fn upsert<T>(
                &self,
                doc: &T,
            ) -> impl ::std::future::Future<Output = Result<$crate::Outcome, $crate::Error>> + Send
            where
                T: $crate::Idempotent + ::serde::Serialize + Sync,
            {
                <$store>::upsert(self, doc)
            }

            fn upsert_many<T>(
                &self,
                docs: &[T],
            ) -> impl ::std::future::Future<Output = Result<$crate::BatchReport, $crate::Error>> + Send
            where
                T: $crate::Idempotent + ::serde::Serialize + Sync,
            {
                <$store>::upsert_many(self, docs)
            }

            fn delete<T>(
                &self,
                doc: &T,
            ) -> impl ::std::future::Future<Output = Result<$crate::Deletion, $crate::Error>> + Send
            where
                T: $crate::Idempotent + ::serde::Serialize + Sync,
            {
                <$store>::delete(self, doc)
            }

            fn delete_by_id<T, M>(
                &self,
                id: $crate::Id,
                marker: &M,
            ) -> impl ::std::future::Future<Output = Result<$crate::Deletion, $crate::Error>> + Send
            where
                T: $crate::Idempotent,
                M: ::serde::Serialize + Sync,
            {
                <$store>::delete_by_id::<T, M>(self, id, marker)
            }

            fn insert_new<T>(
                &self,
                members: &[T],
            ) -> impl ::std::future::Future<
                Output = Result<$crate::InsertReport<T>, $crate::Error>,
            > + Send
            where
                T: $crate::Idempotent + ::serde::Serialize + Sync + Clone,
            {
                <$store>::insert_new(self, members)
            }

            fn push<T, I>(
                &self,
                id: $crate::Id,
                field: &'static str,
                item: &I,
            ) -> impl ::std::future::Future<Output = Result<$crate::Pushed, $crate::Error>> + Send
            where
                T: $crate::Idempotent,
                I: ::serde::Serialize + Sync,
            {
                <$store>::push::<T, I>(self, id, field, item)
            }

            fn apply_once<T>(
                &self,
                id: $crate::Id,
                op: &$crate::OpId,
                changes: &[$crate::Change],
            ) -> impl ::std::future::Future<Output = Result<$crate::Applied, $crate::Error>> + Send
            where
                T: $crate::Idempotent,
            {
                <$store>::apply_once::<T>(self, id, op, changes)
            }

            fn record<T>(
                &self,
                event: &T,
            ) -> impl ::std::future::Future<Output = Result<$crate::Recorded, $crate::Error>> + Send
            where
                T: $crate::Idempotent + ::serde::Serialize + Sync,
            {
                <$store>::record(self, event)
            }

            fn get<T>(
                &self,
                id: $crate::Id,
            ) -> impl ::std::future::Future<Output = Result<Option<T>, $crate::Error>> + Send
            where
                T: $crate::Idempotent + ::serde::de::DeserializeOwned + Send,
            {
                <$store>::get::<T>(self, id)
            }

            async fn find<T>(&self, key: $crate::NaturalKey) -> Result<Option<T>, $crate::Error>
            where
                T: $crate::Idempotent + ::serde::de::DeserializeOwned + Send,
            {
                <$store>::find::<T>(self, &key).await
            }

            fn ensure_schema<T>(
                &self,
            ) -> impl ::std::future::Future<Output = Result<(), $crate::Error>> + Send
            where
                T: $crate::Idempotent,
            {
                <$store>::ensure_schema::<T>(self)
            }
        }
    };
}

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use backend_by_inherent_methods;
