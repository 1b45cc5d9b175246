//! A SQL store and the caller's connection or transaction: idem's API, method for method the
//! API of every other store ([`Backend`](crate::Backend)), over every SQL dialect's connections.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::dialect::SqlDialect;
use super::store::Store;
use super::wire::Wire;
use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};

/// What a session is made over (a tokio-postgres client, or a sqlx dialect whose connection is
/// lent): the dialect it writes in, the wire it holds, and whether its calls take turns.
#[doc(hidden)]
#[allow(private_bounds)]
pub trait Lends {
    /// The dialect the session's store writes in.
    type Dialect: SqlDialect;
    /// The wire the session holds for its calls, lent for `'a`.
    type Wire<'a>: Wire;
    /// What each call holds while it runs: a lock where a call's statements (a transaction of
    /// idem's own among them) must not interleave with another's on the one connection (sqlx's
    /// marker stores), nothing where each statement stands alone and calls pipeline on the
    /// client (PostgreSQL, whose writes need no transaction of their own).
    type Turns: Turns;
}

/// How a session's calls take turns on its connection ([`Lends::Turns`]).
#[doc(hidden)]
pub trait Turns: Default + Send + Sync {
    /// What a call holds while it runs.
    type Turn<'t>: Send
    where
        Self: 't;
    /// Waits for the call's turn.
    fn take(&self) -> impl Future<Output = Self::Turn<'_>> + Send;
}

/// Calls that never wait for one another.
impl Turns for () {
    type Turn<'t> = ();

    async fn take(&self) {}
}

/// Calls that take turns, one at a time.
impl Turns for tokio::sync::Mutex<()> {
    type Turn<'t> = tokio::sync::MutexGuard<'t, ()>;

    fn take(&self) -> impl Future<Output = Self::Turn<'_>> + Send {
        self.lock()
    }
}

/// A store and the connection (or transaction) it writes through, made by the store's `on`.
#[allow(private_bounds)]
pub struct Session<'a, C: Lends> {
    store: &'a Store<C::Dialect>,
    wire: C::Wire<'a>,
    /// Held through each call where calls take turns ([`Lends::Turns`]).
    turns: C::Turns,
}

#[allow(private_bounds)]
impl<C: Lends> std::fmt::Debug for Session<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("store", self.store)
            .finish_non_exhaustive()
    }
}

#[allow(private_bounds)]
impl<'a, C: Lends<Turns: Clone>> Clone for Session<'a, C>
where
    C::Wire<'a>: Clone,
{
    fn clone(&self) -> Self {
        Session {
            store: self.store,
            wire: self.wire.clone(),
            turns: self.turns.clone(),
        }
    }
}

#[allow(private_bounds)]
impl<'a, C: Lends<Turns: Copy>> Copy for Session<'a, C> where C::Wire<'a>: Copy {}

#[allow(private_bounds)]
impl<'a, C: Lends> Session<'a, C> {
    /// `store` writing through `wire`.
    pub(crate) fn new(store: &'a Store<C::Dialect>, wire: C::Wire<'a>) -> Self {
        Session {
            store,
            wire,
            turns: C::Turns::default(),
        }
    }

    /// The store this session writes for.
    pub fn store(&self) -> &'a Store<C::Dialect> {
        self.store
    }

    /// The wire back ([`sqlx_store_methods!`](super::sqlx_api::sqlx_store_methods) hands the
    /// connection back for each sqlx store).
    // PostgreSQL's sessions hand nothing back.
    #[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
    pub(crate) fn into_wire(self) -> C::Wire<'a> {
        self.wire
    }

    /// The store's `upsert` through this session's connection.
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turns.take().await;
        self.store.upsert_on(&self.wire, doc).await
    }

    /// The store's `upsert_many` through this session's connection.
    pub async fn upsert_many<T>(&self, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turns.take().await;
        self.store.upsert_many_on(&self.wire, docs).await
    }

    /// The store's `delete` through this session's connection.
    pub async fn delete<T>(&self, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turns.take().await;
        self.store.delete_on(&self.wire, doc).await
    }

    /// The store's `delete_by_id` through this session's connection.
    pub async fn delete_by_id<T, M>(&self, id: Id, marker: &M) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        let _turn = self.turns.take().await;
        self.store
            .delete_by_id_on::<T, M>(&self.wire, id, marker)
            .await
    }

    /// The store's `insert_new` through this session's connection.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        let _turn = self.turns.take().await;
        self.store.insert_new_on(&self.wire, members).await
    }

    /// The store's `push` through this session's connection.
    pub async fn push<T, I>(&self, id: Id, field: &'static str, item: &I) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        let _turn = self.turns.take().await;
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
        let _turn = self.turns.take().await;
        self.store
            .apply_once_on::<T>(&self.wire, id, op, changes)
            .await
    }

    /// The store's `record` through this session's connection.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let _turn = self.turns.take().await;
        self.store.record_on(&self.wire, event).await
    }

    /// The store's `get` through this session's connection.
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let _turn = self.turns.take().await;
        self.store.get_on::<T>(&self.wire, id).await
    }

    /// The store's `find` through this session's connection.
    pub async fn find<T>(&self, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let _turn = self.turns.take().await;
        self.store.find_on::<T>(&self.wire, key).await
    }

    /// Creates `T`'s table with its constraints if it does not exist, and checks it.
    pub async fn ensure_schema<T>(&self) -> Result<(), Error>
    where
        T: Idempotent,
    {
        let _turn = self.turns.take().await;
        self.store.ensure_table_on::<T>(&self.wire).await
    }
}

crate::backend::backend_by_inherent_methods!([C: Lends] Session<'_, C>);
