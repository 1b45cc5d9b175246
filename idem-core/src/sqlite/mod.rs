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
//! inserted by this statement (as on MariaDB, and on PostgreSQL `with_write_marker`).
//!
//! # Concurrency
//!
//! SQLite has one writer at a time. Each write is a savepoint (a transaction of its own outside
//! the caller's) whose first statement takes the write lock, so the rows it then reads are
//! those its guard saw, and racing writers on other connections to the same file converge as
//! on the servers. Waiting for the lock is the connection's busy timeout; a lock held past it is
//! an error whose [`is_retryable`](crate::Error::is_retryable) is true, never a wrong outcome.
//! Use WAL mode (`journal_mode=WAL`) so that readers do not block the writer.

mod collation;
mod dialect;
mod effects;
mod errors;
mod schema;
mod table;

use crate::sql::sqlx_api::sqlx_store_methods;

pub use dialect::Sqlite;
pub use errors::driver_error;

sqlx_store_methods!(Sqlite, SqliteConnection, sqlx::Sqlite, tables: "SQLite", on: "SQLite");
