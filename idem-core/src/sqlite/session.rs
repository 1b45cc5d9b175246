//! A store and the caller's connection or transaction: idem's API on SQLite, method for method
//! the API of every other store ([`Backend`](crate::Backend)).

use serde::Serialize;
use sqlx::SqliteConnection;
use tokio::sync::Mutex;

use super::Store;
use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};

/// A [`Store`] and the connection (or transaction: `&mut *tx`) it writes through. A connection
/// serves one statement at a time, so the session's calls take turns on it.
///
/// ```no_run
/// # use idem_core::Idempotent;
/// # #[derive(serde::Serialize, Idempotent)]
/// # struct Post { #[idem(key)] slug: String, title: String }
/// # async fn run(mut connection: idem_core::sqlx::SqliteConnection, post: Post) -> Result<(), idem_core::Error> {
/// let store = idem_core::sqlite::Store::new();
/// let idem = store.on(&mut connection);
/// idem.ensure_schema::<Post>().await?;
/// let outcome = idem.upsert(&post).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Session<'a> {
    store: &'a Store,
    connection: Mutex<&'a mut SqliteConnection>,
}

impl<'a> Session<'a> {
    pub(super) fn new(store: &'a Store, connection: &'a mut SqliteConnection) -> Self {
        Session {
            store,
            connection: Mutex::new(connection),
        }
    }

    /// The store this session writes for.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The connection back, for the caller's own statements.
    pub fn into_connection(self) -> &'a mut SqliteConnection {
        self.connection.into_inner()
    }

    /// [`Store::upsert`] through this session's connection.
    pub async fn upsert<T>(&self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store
            .upsert(&mut **self.connection.lock().await, doc)
            .await
    }

    /// [`Store::upsert_many`] through this session's connection.
    pub async fn upsert_many<T>(&self, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store
            .upsert_many(&mut **self.connection.lock().await, docs)
            .await
    }

    /// [`Store::delete`] through this session's connection.
    pub async fn delete<T>(&self, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store
            .delete(&mut **self.connection.lock().await, doc)
            .await
    }

    /// [`Store::delete_by_id`] through this session's connection.
    pub async fn delete_by_id<T, M>(&self, id: Id, marker: &M) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        let mut connection = self.connection.lock().await;
        self.store
            .delete_by_id::<T, M>(&mut connection, id, marker)
            .await
    }

    /// [`Store::insert_new`] through this session's connection.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        self.store
            .insert_new(&mut **self.connection.lock().await, members)
            .await
    }

    /// [`Store::push`] through this session's connection.
    pub async fn push<T, I>(&self, id: Id, field: &'static str, item: &I) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        let mut connection = self.connection.lock().await;
        self.store
            .push::<T, I>(&mut connection, id, field, item)
            .await
    }

    /// [`Store::apply_once`] through this session's connection.
    pub async fn apply_once<T>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let mut connection = self.connection.lock().await;
        self.store
            .apply_once::<T>(&mut connection, id, op, changes)
            .await
    }

    /// [`Store::record`] through this session's connection.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.store
            .record(&mut **self.connection.lock().await, event)
            .await
    }

    /// [`Store::get`] through this session's connection.
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned,
    {
        let mut connection = self.connection.lock().await;
        self.store.get::<T>(&mut connection, id).await
    }

    /// [`Store::find`] through this session's connection.
    pub async fn find<T>(&self, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned,
    {
        let mut connection = self.connection.lock().await;
        self.store.find::<T>(&mut connection, key).await
    }

    /// Creates `T`'s table with its constraints if it does not exist ([`Store::ensure_table`]),
    /// and checks it.
    pub async fn ensure_schema<T>(&self) -> Result<(), Error>
    where
        T: Idempotent,
    {
        let mut connection = self.connection.lock().await;
        self.store.ensure_table::<T>(&mut connection).await
    }
}

crate::backend::backend_by_inherent_methods!([] Session<'_>);
