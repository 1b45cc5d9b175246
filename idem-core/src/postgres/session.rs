//! A store and the caller's client or transaction: idem's API on PostgreSQL, method for method
//! the API of every other store ([`crate::backend::Backend`]).

use serde::Serialize;

use super::wire::Lent;
use super::{Connection, Store};
use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};

/// A [`Store`] and the client or transaction it writes through: idem's API on PostgreSQL, the
/// same methods with the same arguments and results as every other store ([`Backend`](crate::Backend)).
///
/// ```no_run
/// # use idem_core::Idempotent;
/// # #[derive(serde::Serialize, Idempotent)]
/// # struct Post { #[idem(key)] slug: String, title: String }
/// # async fn run(client: tokio_postgres::Client, post: Post) -> Result<(), idem_core::Error> {
/// let store = idem_core::postgres::Store::new();
/// let idem = store.on(&client);
/// idem.ensure_schema::<Post>().await?;
/// let outcome = idem.upsert(&post).await?;
/// # Ok(()) }
/// ```
pub struct Session<'a, C: Connection> {
    store: &'a Store,
    wire: C::Wire,
}

impl<C: Connection> std::fmt::Debug for Session<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("store", self.store)
            .finish_non_exhaustive()
    }
}

impl<C: Connection<Wire: Clone>> Clone for Session<'_, C> {
    fn clone(&self) -> Self {
        Session {
            store: self.store,
            wire: self.wire.clone(),
        }
    }
}

impl<C: Connection<Wire: Copy>> Copy for Session<'_, C> {}

impl<'a, C: Connection> Session<'a, C> {
    /// `store` writing through `wire` ([`Store::on`](Store#method.on)).
    pub(super) fn new(store: &'a Store, wire: C::Wire) -> Self {
        Session { store, wire }
    }

    /// The store this session writes for.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// [`Store::upsert`](Store#method.upsert) through this session's client.
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store.upsert(Lent(&self.wire), doc).await
    }

    /// [`Store::upsert_many`](Store#method.upsert_many) through this session's client.
    pub async fn upsert_many<T>(&self, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store.upsert_many(Lent(&self.wire), docs).await
    }

    /// [`Store::delete`](Store#method.delete) through this session's client.
    pub async fn delete<T>(&self, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store.delete(Lent(&self.wire), doc).await
    }

    /// [`Store::delete_by_id`](Store#method.delete_by_id) through this session's client.
    pub async fn delete_by_id<T, M>(&self, id: Id, marker: &M) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        self.store
            .delete_by_id::<T, M, _>(Lent(&self.wire), id, marker)
            .await
    }

    /// [`Store::insert_new`](Store#method.insert_new) through this session's client.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        self.store.insert_new(Lent(&self.wire), members).await
    }

    /// [`Store::push`](Store#method.push) through this session's client.
    pub async fn push<T, I>(&self, id: Id, field: &'static str, item: &I) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        self.store
            .push::<T, I, _>(Lent(&self.wire), id, field, item)
            .await
    }

    /// [`Store::apply_once`](Store#method.apply_once) through this session's client.
    pub async fn apply_once<T>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        self.store
            .apply_once::<T, _>(Lent(&self.wire), id, op, changes)
            .await
    }

    /// [`Store::record`](Store#method.record) through this session's client.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store.record(Lent(&self.wire), event).await
    }

    /// [`Store::get`](Store#method.get) through this session's client.
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned,
    {
        self.store.get::<T, _>(Lent(&self.wire), id).await
    }

    /// [`Store::find`](Store#method.find) through this session's client.
    pub async fn find<T>(&self, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned,
    {
        self.store.find::<T, _>(Lent(&self.wire), key).await
    }

    /// Creates `T`'s table with its constraints if it does not exist ([`Store::ensure_table`](Store#method.ensure_table)),
    /// and checks it.
    pub async fn ensure_schema<T>(&self) -> Result<(), Error>
    where
        T: Idempotent,
    {
        self.store.ensure_table::<T, _>(Lent(&self.wire)).await
    }
}

crate::backend::backend_by_inherent_methods!([C: Connection] Session<'_, C>);
