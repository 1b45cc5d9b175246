//! A SQL store and the caller's connection or transaction: idem's API, method for method the
//! API of every other store ([`Backend`](crate::Backend)).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::dialect::{SqlxDialect, WireOf};
use super::store::Store;
use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};

/// A store and the connection (or transaction: `&mut *tx`) it writes through, made by the
/// store's `on`. A connection serves one statement at a time, so the session's calls take turns
/// on it.
#[allow(private_bounds)]
pub struct Session<'a, D: SqlxDialect> {
    store: &'a Store<D>,
    wire: WireOf<'a, D>,
    /// Held through each call: a call's statements (its transaction of its own among them) are
    /// never interleaved with another's on the one connection.
    turn: tokio::sync::Mutex<()>,
}

#[allow(private_bounds)]
impl<D: SqlxDialect> std::fmt::Debug for Session<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("store", self.store)
            .finish_non_exhaustive()
    }
}

#[allow(private_bounds)]
impl<'a, D: SqlxDialect> Session<'a, D> {
    /// `store` writing through `connection`.
    pub(crate) fn new(
        store: &'a Store<D>,
        connection: &'a mut <D as SqlxDialect>::Connection,
    ) -> Self {
        Session {
            store,
            wire: crate::sql::sqlx_wire::SqlxWire::new(connection),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The store this session writes for.
    pub fn store(&self) -> &'a Store<D> {
        self.store
    }

    /// The connection back ([`sqlx_store_methods!`](super::sqlx_api::sqlx_store_methods)
    /// names its type for each store).
    pub(crate) fn connection_back(self) -> &'a mut <D as SqlxDialect>::Connection {
        self.wire.into_connection()
    }

    /// The store's `upsert` through this session's connection.
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store.upsert_on(&self.wire, doc).await
    }

    /// The store's `upsert_many` through this session's connection.
    pub async fn upsert_many<T>(&self, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store.upsert_many_on(&self.wire, docs).await
    }

    /// The store's `delete` through this session's connection.
    pub async fn delete<T>(&self, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store.delete_on(&self.wire, doc).await
    }

    /// The store's `delete_by_id` through this session's connection.
    pub async fn delete_by_id<T, M>(&self, id: Id, marker: &M) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store
            .delete_by_id_on::<T, M>(&self.wire, id, marker)
            .await
    }

    /// The store's `insert_new` through this session's connection.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        let _turn = self.turn.lock().await;
        self.store.insert_new_on(&self.wire, members).await
    }

    /// The store's `push` through this session's connection.
    pub async fn push<T, I>(&self, id: Id, field: &'static str, item: &I) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store
            .push_on::<T, I>(&self.wire, id, field, item)
            .await
    }

    /// The store's `apply_once` through this session's connection.
    pub async fn apply_once<T>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let _turn = self.turn.lock().await;
        self.store
            .apply_once_on::<T>(&self.wire, id, op, changes)
            .await
    }

    /// The store's `record` through this session's connection.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turn.lock().await;
        self.store.record_on(&self.wire, event).await
    }

    /// The store's `get` through this session's connection.
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let _turn = self.turn.lock().await;
        self.store.get_on::<T>(&self.wire, id).await
    }

    /// The store's `find` through this session's connection.
    pub async fn find<T>(&self, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let _turn = self.turn.lock().await;
        self.store.find_on::<T>(&self.wire, key).await
    }

    /// Creates `T`'s table with its constraints if it does not exist, and checks it.
    pub async fn ensure_schema<T>(&self) -> Result<(), Error>
    where
        T: Idempotent,
    {
        let _turn = self.turn.lock().await;
        self.store.ensure_table_on::<T>(&self.wire).await
    }
}

crate::backend::backend_by_inherent_methods!([D: SqlxDialect] Session<'_, D>);
