//! The MySQL-family store: converging upserts guarded against orphaning writes, batch upserts,
//! deletions that stay deleted, derived sets and events recorded once, over the caller's sqlx
//! connection or transaction (`&mut MySqlConnection`; a `Transaction` and a pooled connection
//! dereference to one), so idem's writes commit or roll back with the caller's. Tested on
//! MariaDB 10.11; what MySQL 8 and TiDB need is told below.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # async fn run(post: Post) -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::sqlx::Connection;
//! let mut connection = idem_core::sqlx::MySqlConnection::connect("mysql://localhost/blog").await?;
//! let store = idem_core::mysql::Store::new();
//! store.ensure_table::<Post>(&mut connection).await?;
//! let outcome = store.upsert(&mut connection, &post).await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! The columns of the other SQL stores' tables, InnoDB, with MariaDB's types: `BIGINT`,
//! `BOOLEAN` (`tinyint(1)`), `JSON` for nested values and idem's lists (MariaDB's `LONGTEXT`
//! checked by `json_valid`), `BINARY(32)` for the content hash, `VARBINARY(16)` for the frozen
//! digests, and text in the `utf8mb4_nopad_bin` collation, which compares bytes: `utf8mb4_bin`
//! ignores trailing spaces, so that `"a"` and `"a "` would be one key. Floats are `DOUBLE`, which holds neither NaN nor the infinities: a document holding one
//! in a float field is refused (1366, naming the column), where the other stores keep it; inside
//! a `JSON` value JSON cannot hold them, as on PostgreSQL. Text natural-key columns
//! are `VARCHAR(255)` (less beside more than three of them), so that the natural key's unique
//! index stays a B-tree within InnoDB's 3,072 bytes; a longer key is refused for its document.
//! Beside them `idemWrite`, the write marker. The primary key is the natural key, which InnoDB
//! keeps the rows in the order of, and `_id` a unique constraint (`{collection}_idem_id`); a
//! table an earlier release made, the primary key on `_id`, is taken as it is.
//!
//! # How a write tells an insert from an update
//!
//! A write is one `INSERT … ON DUPLICATE KEY UPDATE` per chunk. Its first assignment refuses a
//! row that is not this document's (another id or natural key: the statement meets a row through
//! any unique index) by setting `_id` longer than any `VARCHAR`, which strict mode refuses (1406;
//! a NULL would stay in an `_id` column without NOT NULL, as adopt wants it); the second
//! decides, from the stored row alone, whether the guard lets the row be replaced, and if so sets
//! `idemWrite` to the update's value made for this statement; every later assignment replaces
//! its column only where `idemWrite` holds that value (MariaDB
//! assigns left to right, so a guard repeated per column would see the columns already
//! replaced). An inserted row holds the insert's value. Then one locking read (`SELECT … FOR
//! UPDATE`, by id and by natural key) in the same transaction finds, by the marker, which rows
//! the statement inserted, updated or left alone, and what stopped it: a plain `SELECT` would
//! read the transaction's snapshot, without a row another session committed since. Affected
//! rows tell nothing here: sqlx asks for found rows, so an unchanged row counts as an insert.
//!
//! # Large batches
//!
//! A chunk of a batch may first be looked up (while the last chunk was mostly unchanged, and for
//! the first): one plain `SELECT`, which takes no lock, of each incoming row's id, natural key,
//! content hash and version key, read from a `JSON_TABLE` over the chunk's parameters. A row
//! stored with all four, not deleted, settles `Unchanged` with nothing written; the others are
//! judged from the row they meet before anything is written, and only those a write would change
//! are sent whole. A chunk none of whose rows is stored is a plain multi-row `INSERT`, which any
//! stored id or key fails whole before the guarded write. Inside the caller's transaction the
//! lookup is left out: there a plain read sees the transaction's snapshot, older than the rows an
//! upsert meets, and could take a row another session changed since for unchanged.
//!
//! # Concurrency
//!
//! Each write is a transaction of its own outside the caller's, a savepoint inside it, under
//! REPEATABLE READ: the write takes the rows' locks and the read holds them, so racing writers
//! converge. A lock wait timeout (1205), a deadlock (1213) and a record changed since the
//! snapshot (1020, MariaDB's `innodb_snapshot_isolation`) are errors whose
//! [`is_retryable`](crate::Error::is_retryable) is true, never a wrong outcome. A deadlock
//! rolls back the caller's whole transaction: retry it from its start.
//!
//! # MySQL 8 and TiDB
//!
//! Not tested. Both lack `utf8mb4_nopad_bin`: their byte-wise collation is `utf8mb4_0900_bin`
//! (TiDB: with its new collation framework), and a table made there needs it in place of
//! MariaDB's. Their `JSON` columns are a binary type (reads cast it to text), compared by value,
//! not by text; MySQL 8.0.20+ warns (1287) of `VALUES(col)` in an upsert, which TiDB needs.
//! MySQL 8 has no `JSON_EQUALS` (pushes compare keys with it), names a check failure 3819, and
//! cuts `GROUP_CONCAT` at 1,024 bytes by default (MariaDB at 1 MiB), which leaves a lookup of a
//! chunk of more than 37 rows stored nowhere unused (the chunk is written with the guard, as
//! without it) unless `group_concat_max_len` holds 27 bytes a row. TiDB has no `JSON_TABLE`
//! (pushes read lists with it, a batch's lookup its rows), reports write conflicts as 9007, 8002,
//! 8022 and 8028 (retryable) and, with lazy unique checks, a duplicate key at `COMMIT`.

mod dialect;
mod effects;
mod errors;
mod schema;
mod table;

use crate::sql::sqlx_api::sqlx_store_methods;

pub use dialect::MySql;
pub use errors::driver_error;

sqlx_store_methods!(MySql, MySqlConnection, sqlx::MySql, tables: "MySQL-family", on: "MariaDB and MySQL");
