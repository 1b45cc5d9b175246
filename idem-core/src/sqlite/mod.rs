//! The SQLite store, embedded: converging upserts guarded against orphaning writes, batch
//! upserts, deletions that stay deleted, derived sets and events recorded once, over the
//! caller's sqlx connection or transaction (`&mut SqliteConnection`; a `Transaction` and a
//! pooled connection dereference to one), so idem's writes commit or roll back with the
//! caller's.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # async fn run(post: Post) -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::sqlx::Connection;
//! let mut connection = idem_core::sqlx::SqliteConnection::connect("sqlite:posts.db?mode=rwc").await?;
//! let store = idem_core::sqlite::Store::new();
//! store.ensure_table::<Post>(&mut connection).await?;
//! let outcome = store.upsert(&mut connection, &post).await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! The columns of the PostgreSQL store's table ([`crate::postgres`]), with SQLite's types:
//! `TEXT`, `INTEGER`, `REAL`, and, named for what they hold, `BOOLEAN` (stored as `INTEGER` is)
//! and `JSON_TEXT` for nested values (stored as `TEXT` is); beside them `idemWrite`, the write
//! marker.
//!
//! # How a write tells an insert from an update
//!
//! SQLite has `RETURNING` but no system column saying whether a row was inserted or updated.
//! Every write statement sets `idemWrite` to a value made for it, one when it inserts and
//! another when it updates, and returns it: a row returned with the insert's value was
//! inserted by this statement. (It is the way for servers without `xmax`, such as CockroachDB
//! and YugabyteDB; the PostgreSQL store does not use it.)
//!
//! # Concurrency
//!
//! SQLite has one writer at a time. Each write is a savepoint (a transaction of its own outside
//! the caller's) whose first statement takes the write lock, so the rows it then reads are
//! those its guard saw, and racing writers on other connections to the same file converge as
//! on the servers. Waiting for the lock is the connection's busy timeout; a lock held past it is
//! an error whose [`is_retryable`](crate::Error::is_retryable) is true, never a wrong outcome.
//! Use WAL mode (`journal_mode=WAL`) so that readers do not block the writer.

mod audit;
mod collation;
mod dialect;
mod effects;
mod errors;
mod schema;
mod table;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::SqliteConnection;

use crate::batch::BatchReport;
use crate::change::Change;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::OpId;
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};
use crate::sql::wire::SqlxWire;

pub use crate::sql::judge::AdoptOptions;
pub use crate::sql::store::{DEFAULT_BATCH_CHUNK, DEFAULT_OP_WINDOW};
pub use dialect::Sqlite;
pub use errors::driver_error;

use table::Table;

/// Writes documents to SQLite tables, one per type; holds no connection. Clones share what
/// the store learned (the tables it checked).
pub type Store = crate::sql::store::Store<Sqlite>;

/// A [`Store`] and the connection (or transaction: `&mut *tx`) it writes through: idem's API on
/// SQLite, method for method the API of every other store ([`Backend`](crate::Backend)). A
/// connection serves one statement at a time, so the session's calls take turns on it.
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
pub type Session<'a> = crate::sql::session::Session<'a, Sqlite>;

impl Store {
    /// This store writing through `connection`: what the derive's generated methods take
    /// (`post.upsert(&store.on(&mut connection))`), and the API every store shares
    /// ([`Session`]).
    pub fn on<'a>(&'a self, connection: &'a mut SqliteConnection) -> Session<'a> {
        Session::new(self, connection)
    }

    /// The `CREATE TABLE` statement of `T`'s table, for a migration.
    pub fn create_table_sql<T: Idempotent>() -> String {
        Table::of::<T>().create_sql()
    }

    /// Creates `T`'s table if it does not exist, then checks it as before a first write.
    pub async fn ensure_table<T: Idempotent>(
        &self,
        connection: &mut SqliteConnection,
    ) -> Result<(), Error> {
        self.ensure_table_on::<T>(&wire(connection)).await
    }

    /// Writes `doc` under its derived id, converging under retries, replays and races, with the
    /// outcomes and refusals of every other store.
    pub async fn upsert<T>(
        &self,
        connection: &mut SqliteConnection,
        doc: &T,
    ) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.upsert_on(&wire(connection), doc).await
    }

    /// Upserts a batch: each document gets the outcome that upserting the documents one by one,
    /// in input order, would give it; one statement per chunk of rows. A chunk of 64 rows or
    /// more is first read (while the last one was mostly stored as it came), so the rows stored
    /// unchanged settle with no write statement and no write lock.
    pub async fn upsert_many<T>(
        &self,
        connection: &mut SqliteConnection,
        docs: &[T],
    ) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.upsert_many_on(&wire(connection), docs).await
    }

    /// Marks `doc` deleted by storing its tombstone field (which must be `Some`); stores it
    /// deleted if it is not stored. `Deleted`, or `AlreadyDeleted` (the first marker stays).
    pub async fn delete<T>(
        &self,
        connection: &mut SqliteConnection,
        doc: &T,
    ) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.delete_on(&wire(connection), doc).await
    }

    /// Marks the row stored under `id` deleted with `marker`. `Deleted`, or `AlreadyDeleted`;
    /// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) if no row has that id.
    pub async fn delete_by_id<T, M>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
        marker: &M,
    ) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        self.delete_by_id_on::<T, M>(&wire(connection), id, marker)
            .await
    }

    /// Inserts the members of a derived set that are not stored, reporting each member.
    pub async fn insert_new<T>(
        &self,
        connection: &mut SqliteConnection,
        members: &[T],
    ) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        self.insert_new_on(&wire(connection), members).await
    }

    /// Records an event (a type with an `#[idem(idempotency_key)]`) once under its key.
    pub async fn record<T>(
        &self,
        connection: &mut SqliteConnection,
        event: &T,
    ) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        self.record_on(&wire(connection), event).await
    }

    /// Applies `changes` to the row stored under `id` only if `op` has not been applied to it,
    /// recording `op` in the same statement. `Applied`, or `AlreadyApplied` (nothing written);
    /// [`NotFound`](crate::ErrorKind::NotFound) if no row has that id. The changes may touch
    /// only `#[idem(effect)]` columns ([`NotAnEffectField`](crate::ErrorKind::NotAnEffectField)
    /// otherwise, before anything is sent). The latest [`with_op_window`](Store::with_op_window)
    /// op ids are kept. An op id holding U+0000 is refused
    /// ([`OpIdHoldsNul`](crate::ErrorKind::OpIdHoldsNul)) before anything is sent, as on every
    /// store.
    pub async fn apply_once<T>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        self.apply_once_on::<T>(&wire(connection), id, op, changes)
            .await
    }

    /// Appends `item` to the list `field` (its Rust name; marked `#[idem(push_by = "…")]`) of
    /// the row stored under `id`, unless an item with the same key is there already.
    pub async fn push<T, I>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
        field: &'static str,
        item: &I,
    ) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        self.push_on::<T, I>(&wire(connection), id, field, item)
            .await
    }

    /// The row stored under `id`, as `T`; `None` if none is. A deleted row is returned with its
    /// tombstone set; one that does not read as `T` is
    /// [`ErrorKind::Deserialize`](crate::ErrorKind::Deserialize).
    pub async fn get<T>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
    ) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        self.get_on::<T>(&wire(connection), id).await
    }

    /// The row stored under the natural key `key`, as `T`; `None` if none is.
    pub async fn find<T>(
        &self,
        connection: &mut SqliteConnection,
        key: &NaturalKey,
    ) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        self.find_on::<T>(&wire(connection), key).await
    }

    /// The table of `T` checked through `connection` ([`crate::sql::store::Store::table`]).
    async fn checked_table<T: Idempotent>(
        &self,
        connection: &mut SqliteConnection,
        document: &crate::document::DocumentRef,
    ) -> Result<std::sync::Arc<Table>, Error> {
        self.table::<T>(&wire(connection), document).await
    }
}

/// `connection` as the wire a store's call sends through.
fn wire(connection: &mut SqliteConnection) -> SqlxWire<'_, sqlx::Sqlite> {
    SqlxWire::new(connection)
}
