//! The PostgreSQL store: converging upserts guarded against orphaning writes, batch upserts,
//! deletions that stay deleted and derived sets, over the caller's client or transaction of
//! tokio-postgres (feature `postgres`) or sqlx (feature `sqlx-postgres`): the same statements,
//! the same table and the same answers through either.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # async fn run(client: tokio_postgres::Client, post: Post) -> Result<(), idem_core::Error> {
//! let store = idem_core::postgres::Store::new();
//! store.ensure_table::<Post, _>(&client).await?;
//! let outcome = store.upsert(&client, &post).await?;
//! // Or inside the caller's transaction, with every other write of it:
//! // let tx = client.transaction().await?; store.upsert(&tx, &post).await?; tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! One column per stored field, under the name serde writes: `text`, `bigint`, `double
//! precision` and `boolean` for scalars, `jsonb` for nested structs, sequences and maps. Beside
//! them: `_id` (the derived id, primary key), the content hash (`bytea`, its 32 bytes),
//! `idemFrozen` (digests of the timestamp and frozen fields), `idemVersion` (the version's order
//! key), `idemAppliedOps` (NULL until `apply_once` records an op) and,
//! for a type with `#[serde(flatten)]` fields, `idemExtra` (their entries), with a unique
//! constraint on the natural key. [`Store::create_table_sql`](Store#method.create_table_sql) prints the DDL for a migration;
//! [`Store::ensure_table`](Store#method.ensure_table) runs it. Before its first write to a table the store checks that
//! the table has every column with its type, a primary key on `_id` and a unique constraint on
//! the natural key, neither `DEFERRABLE`, and no nondeterministic collation on a key column (on a
//! table partitioned by columns of the natural key, a primary key on `_id` and the partition
//! columns in place of the one on `_id`: see
//! [`Store::with_partitions`](Store#method.with_partitions)), and
//! fails with [`ErrorKind::SchemaMismatch`](crate::ErrorKind::SchemaMismatch) naming what is wrong otherwise. It checks the table each
//! client's search path leads to: every statement makes sure, in the same round trip, that its
//! table is one the store checked, so a client of another schema, or a table made again (or
//! rolled back with the transaction that made it), is checked before it is written or read. A
//! field stored under a name PostgreSQL would cut or keeps for a system column is refused
//! before a table is made.
//!
//! # How an upsert converges
//!
//! One statement: `INSERT … ON CONFLICT (natural key) DO UPDATE … WHERE <guard>`, whose guard
//! states the engine's verdict (not deleted; no frozen field changed; a strictly newer
//! version, or without versions another content hash). It returns each row it wrote, inserted or
//! updated as the server itself reports it (`old IS NULL` on PostgreSQL 18, `xmax = 0` before),
//! and, in the same statement, the stored state of each row the guard stopped, which is judged
//! for `Unchanged`, `Stale`, `Deleted` or a refusal. A row committed by a concurrent writer after
//! the statement's snapshot stops the write without showing its state; the statement then goes
//! again. A row stored by another tool (no digests) is compared here and replaced by a second
//! statement pinned to what was read.
//!
//! A batch is the same statement over many rows (`unnest` of one `text[]` per column), in
//! rounds that never hold one natural key twice, with the outcome each row would get if the
//! documents were upserted one by one. On a tokio-postgres `&Client`, outside a transaction, the
//! next chunk is sent while the last awaits its answer (each statement is its own transaction
//! there, so one that fails leaves the other as it would find it): its lookup goes at once, its
//! writes after the last chunk's, so rows are written in input order.
//!
//! # Transactions
//!
//! Every method takes a [`Connection`]: tokio-postgres's `&Client` (a deadpool-postgres `Object`
//! as `&**object`, the client it dereferences to) or `&Transaction`, or sqlx's `&mut PgConnection`, `&mut PoolConnection<Postgres>` or
//! `&mut Transaction<Postgres>`, so idem's writes commit or roll back with the caller's. Inside a
//! transaction each write statement runs in a savepoint (in the statement's own round trip on
//! tokio-postgres, which pipelines; as two more round trips on sqlx, which does not), so a
//! statement the server refuses (a racing writer's row met on the primary key, another unique
//! constraint, a CHECK) is retried, or its batch split row by row, and the transaction stays
//! usable after every refusal idem reports: sixteen transactions racing one new row give one
//! `Inserted` and fifteen `Unchanged`, as outside a transaction. A transaction opened with a
//! plain `BEGIN` statement is not one idem can see; open it with the driver's transaction API.
//!
//! ```no_run
//! # #[cfg(feature = "sqlx-postgres")]
//! # async fn run(pool: idem_core::sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! # #[derive(serde::Serialize, idem_core::Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # let post = Post { slug: "hello".into(), title: "Hello".into() };
//! let store = idem_core::postgres::Store::new();
//! let mut tx = pool.begin().await?;
//! store.upsert(&mut tx, &post).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod adopt;
mod audit;
mod dialect;
mod driver;
mod effects;
mod errors;
mod read;
mod schema;
#[cfg(feature = "sqlx-postgres")]
mod sqlx_wire;
mod statements;
mod table;
#[cfg(feature = "postgres")]
mod tokio_wire;
mod wire;

pub use crate::sql::judge::AdoptOptions;
pub use dialect::Postgres;
pub use wire::Connection;

use errors::postgres_error;
use schema::survey_table;
#[cfg(feature = "postgres")]
pub use tokio_wire::driver_error;

pub use crate::change::Change;
pub use crate::model::{APPLIED_OPS_FIELD, WRITE_MARKER_FIELD};
pub use crate::sql::store::{DEFAULT_BATCH_CHUNK, DEFAULT_OP_WINDOW};

/// How [`Store::with_partitions`](Store#method.with_partitions) and
/// [`Store::create_partitioned_table_sql`](Store#method.create_partitioned_table_sql) partition a
/// table by its natural key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionBy {
    /// `PARTITION BY HASH` of the natural-key columns, into `partitions` partitions (at least
    /// one), each `FOR VALUES WITH (MODULUS partitions, REMAINDER r)`.
    Hash {
        /// How many partitions.
        partitions: u32,
    },
}

/// A PostgreSQL database that idem writes to, through the client each call is given. Cheap to
/// clone; clones share the tables they checked, and each table's statements as the server it
/// was checked on tells inserted rows. Use one store per server.
pub type Store = crate::sql::store::Store<Postgres>;

impl Store {
    /// Sets whether [`upsert_many`](Store#method.upsert_many) on a tokio-postgres client outside a
    /// transaction sends a chunk's statement while the last chunk's awaits its answer (on by
    /// default), so that the server goes from one chunk to the next without waiting for the
    /// client; rows are written in input order either way. Turn it off behind a pooler in
    /// transaction mode that does not keep requests sent back to back on one server session:
    /// PgBouncer 1.18 was seen to split them, a message's first part going to one server
    /// session and the rest to another, which each refuse and close, and the call fails with
    /// a retryable error (its known issue with pipelining in transaction mode; any client
    /// shared by tasks pipelines too). Through sqlx and inside a transaction, each chunk waits
    /// for the last one regardless.
    pub fn with_pipelining(mut self, enabled: bool) -> Self {
        self.pipelining = enabled;
        self
    }

    /// Makes the tables [`ensure_table`](Store#method.ensure_table) creates partitioned by
    /// their natural key, as
    /// [`create_partitioned_table_sql`](Store#method.create_partitioned_table_sql) prints them.
    /// A table that exists is checked as it is, partitioned or not: the store writes both, with
    /// the same outcomes and refusals.
    ///
    /// A partitioned table cannot have a primary key on `_id` alone: its unique constraints hold
    /// its partition columns. The table check takes instead a primary key (or unique index) on
    /// `_id` and the partition columns, `_id` first, where the table is partitioned by columns
    /// of the natural key (a migration may partition by some of them, or by list or range), and
    /// refuses a table partitioned otherwise. A write whose id is stored under another natural
    /// key is refused as on a plain table (its insert leaves the row out, and the engine judges
    /// the row under the id); two writers racing to insert one id under two keys are not
    /// stopped, which needs an 80-bit collision of the digest ids derive from, or another tool's
    /// row. Before PostgreSQL 18, which cannot return `xmax` from a partitioned table, a write
    /// tells inserted rows by the rows its snapshot held.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, Idempotent)]
    /// # struct Post { #[idem(key)] slug: String, title: String }
    /// # async fn run(client: tokio_postgres::Client, post: Post) -> Result<(), idem_core::Error> {
    /// use idem_core::postgres::{PartitionBy, Store};
    /// let store = Store::new().with_partitions(PartitionBy::Hash { partitions: 4 });
    /// store.ensure_table::<Post, _>(&client).await?;
    /// store.upsert(&client, &post).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_partitions(mut self, by: PartitionBy) -> Self {
        let PartitionBy::Hash { partitions } = by;
        self.partitions = Some(partitions.max(1));
        self
    }

    /// The statements that make `T`'s table partitioned by its natural key, for a migration: the
    /// table `PARTITION BY HASH` of the natural-key columns, with the unique constraint on the
    /// natural key and a primary key on `_id` and the natural key (a partitioned table's
    /// unique constraints hold its partition columns, so none can be on `_id` alone), then
    /// each partition, `{table}_p0` to `{table}_p{n-1}`.
    pub fn create_partitioned_table_sql<T: crate::Idempotent>(by: PartitionBy) -> String {
        let PartitionBy::Hash { partitions } = by;
        table::Table::new(&T::MODEL, &T::stored_columns()).create_sql(Some(partitions.max(1)))
    }

    /// Makes every statement tell the rows it inserted from the rows it updated by a write
    /// marker column, [`WRITE_MARKER_FIELD`] (`"idemWrite"`, `text`, nullable), which the insert
    /// sets to one value and the update to another, instead of asking the server (`xmax = 0`
    /// before PostgreSQL 18, `RETURNING old` from 18): for CockroachDB, YugabyteDB and other
    /// PostgreSQL-compatible engines that have neither. No statement of the store then names
    /// `xmax` or `old`; the outcomes and refusals are those of the store without it. What it
    /// costs: one more column, written by every insert and update.
    ///
    /// The tables [`ensure_table`](Store#method.ensure_table) creates have the column, as
    /// [`create_write_marker_table_sql`](Store#method.create_write_marker_table_sql) prints
    /// them; the table check asks for it (a table made without it is refused, naming its fix:
    /// `ALTER TABLE … ADD COLUMN "idemWrite" text`), where a store without the option ignores
    /// it; [`audit`](Store#method.audit) lists it among what the table lacks. Nor do
    /// [`audit`](Store#method.audit) and [`adopt`](Store#method.adopt) (and their `_model` and
    /// `_with_progress` forms) name a system column (`ctid`, `xmin`, `tableoid`: YugabyteDB
    /// has neither `ctid` nor `xmin`): a row without an `_id` is placed and found by its
    /// natural key, and each move is guarded by the whole row as read instead of its `xmin`.
    /// The store forgets the tables it checked: it checks them again, for the column.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, Idempotent)]
    /// # struct Post { #[idem(key)] slug: String, title: String }
    /// # async fn run(client: tokio_postgres::Client, post: Post) -> Result<(), idem_core::Error> {
    /// let store = idem_core::postgres::Store::new().with_write_marker(true);
    /// store.ensure_table::<Post, _>(&client).await?;
    /// store.upsert(&client, &post).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_write_marker(self, enabled: bool) -> Self {
        let mut store = self.unlearned();
        store.write_marker = enabled;
        store
    }

    /// The `CREATE TABLE` statement for `T` as a store
    /// [`with_write_marker`](Store#method.with_write_marker) makes it, for a migration: the
    /// statement of [`create_table_sql`](Store#method.create_table_sql) with the write marker
    /// column.
    pub fn create_write_marker_table_sql<T: crate::Idempotent>() -> String {
        let mut table = table::Table::new(&T::MODEL, &T::stored_columns());
        table.marker = true;
        table.create_sql(None)
    }

    /// This store writing through `client`: what the derive's generated methods take
    /// (`post.upsert(&store.on(&client))`, `Post::ensure_schema(&store.on(&tx))`), and the API
    /// every store shares ([`Session`]).
    pub fn on<C: Connection>(&self, client: C) -> Session<'_, C> {
        Session::new(self, client.wire())
    }
}

crate::sql::sqlx_api::store_methods! {
    [C: Connection] C, Connection::wire;
    /// The `CREATE TABLE` statement for `T`, for a migration file: the columns, their types and
    /// the unique constraint on the natural key.
    fn create_table_sql;
    /// Creates `T`'s table if it does not exist, then checks it as every first write does.
    /// Idempotent.
    fn ensure_table;
    /// Writes `doc` under its derived id, converging under retries, replays and races: one
    /// statement for every outcome, and a second for a row another tool wrote. Refuses with
    /// [`ErrorKind::FrozenFieldChanged`](crate::ErrorKind::FrozenFieldChanged) a write that
    /// would change a frozen field or a field feeding the id, and with
    /// [`ErrorKind::IdChanged`](crate::ErrorKind::IdChanged) one whose natural key is stored
    /// under another id for no reason a stored field shows; nothing is written then.
    fn upsert;
    /// Upserts a batch: each document gets the outcome that upserting the documents one by one,
    /// in input order, would give it. Rows are sent [`with_batch_chunk`](Store#method.with_batch_chunk)
    /// at a time, one statement per chunk (one `text[]` parameter per column, so the number of
    /// bind parameters does not grow with the chunk); a re-ingest of unchanged documents writes
    /// no row. A chunk of 64 rows or more is first looked up by its rows' ids, keys, hashes and
    /// version keys (while the last lookup found most rows unchanged), and only the rows not
    /// stored as they come are sent whole: an unchanged re-ingest sends none of its content.
    /// A refused document does not stop the others.
    fn upsert_many;
    /// Marks `doc` deleted by storing its tombstone field (which must be `Some`). Deleting twice
    /// keeps the first marker. A document not stored yet is stored deleted, so a later replay of
    /// its creation does not bring it back. Returns `Deleted`, or `AlreadyDeleted` if it already
    /// was.
    fn delete;
    /// Marks the row stored under `id` deleted with `marker` (the value of its tombstone
    /// field). Returns `Deleted`, or `AlreadyDeleted` if it already was (the first marker
    /// stays); [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) if no row has that id. One
    /// statement.
    fn delete_by_id;
}

/// A [`Store`] and the client or transaction it writes through: idem's API on PostgreSQL, the
/// same methods with the same arguments and results as every other store ([`Backend`](crate::Backend)).
/// Its calls do not wait for one another: on a tokio-postgres `&Client` they pipeline.
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
pub type Session<'a, C> = crate::sql::session::Session<'a, C>;

/// A client's session writes in PostgreSQL through the client's wire; each statement stands
/// alone, so its calls take no turns.
impl<C: Connection> crate::sql::session::Lends for C {
    type Dialect = Postgres;
    type Wire<'a> = C::Wire;
    type Turns = ();
}
