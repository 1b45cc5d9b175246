//! What one SQL database says differently, and nothing else: the words of its statements, its
//! column types, its error codes, the catalog reads of its table check, and its wire. The rules
//! (the store's methods, the write engine's driver, the reads, the effects' retries) are
//! [`super::store`]'s, written once over this trait.

use std::fmt::Debug;
use std::future::Future;
use std::ops::Deref;

use crate::column::Column;
use crate::document::DocumentRef;
use crate::engine::{Conflict, Reply};
use crate::error::Error;
use crate::model::{Field, Model};
use crate::sql::adoption::{Move, ReadRow, Rows};
use crate::sql::effects::Effect;
use crate::sql::judge::Destination;
use crate::sql::layout::Layout;
use serde::de::DeserializeOwned;

use super::store::{Store, StoreCall};
use crate::engine::batch::BatchDriver;
use crate::engine::by_id::ById;
use crate::outcome::Deletion;
use crate::sql::row::{LightRow, PreparedRow, StoredRow};
use crate::sql::wire::{Cells, DbFailure, Param, Wire};

/// Which write a statement makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statement {
    /// Replace the stored row if the guard allows it, or insert it.
    Upsert,
    /// Set the deletion marker if it is not set, or insert the row deleted.
    Delete,
    /// Insert the row unless its id or natural key is stored.
    InsertNew,
}

impl From<crate::engine::WriteKind> for Statement {
    /// The statement of a write of the engine's: an event is recorded, as a derived set's
    /// member is inserted, unless it is stored.
    fn from(kind: crate::engine::WriteKind) -> Self {
        match kind {
            crate::engine::WriteKind::Upsert => Statement::Upsert,
            crate::engine::WriteKind::Delete => Statement::Delete,
            crate::engine::WriteKind::Record | crate::engine::WriteKind::InsertNew => {
                Statement::InsertNew
            }
        }
    }
}

/// What one effect's statement found ([`SqlDialect::effect`]).
#[derive(Debug)]
pub(crate) struct EffectAnswer {
    /// Whether it wrote.
    pub written: bool,
    /// Whether a row is stored under the id.
    pub exists: bool,
}

/// A SQL database idem writes to, through its driver's connection. Sealed: implemented by the
/// stores idem ships.
#[doc(hidden)]
pub trait Dialect: private::Sealed + Send + Sync + Sized + 'static {
    /// The name its errors give the database (`"SQLite"`).
    #[doc(hidden)]
    const NAME: &'static str;
}

/// The dialect's side of a store, beside what [`Dialect`] shows.
// Where only PostgreSQL is built, what the marker dialects' audit and driver read goes unread.
#[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
pub(crate) trait SqlDialect: Dialect {
    /// A type's table and the statements built for it.
    type Table: Deref<Target = Layout> + Debug + Send + Sync + 'static;

    /// A quoted identifier.
    fn quote(name: &str) -> String;

    /// `model`'s table, with `stored`'s columns.
    fn table(model: &'static Model, stored: &[Column]) -> Self::Table;
    /// `model`'s table as `store` writes it: [`SqlDialect::table`], unless the store's options
    /// change its columns or statements (PostgreSQL's write marker).
    fn store_table(_store: &Store<Self>, model: &'static Model, stored: &[Column]) -> Self::Table {
        Self::table(model, stored)
    }
    /// The `CREATE TABLE IF NOT EXISTS` statement (and what else makes the table).
    fn create_sql(table: &Self::Table) -> String;
    /// The statement `store`'s `ensure_table` makes `table` with: [`SqlDialect::create_sql`],
    /// unless the store makes its tables otherwise.
    fn ensure_sql(_store: &Store<Self>, table: &Self::Table) -> String {
        Self::create_sql(table)
    }
    /// A query of one parameter, the table's name, that returns a row if the table exists.
    const TABLE_EXISTS: &'static str;
    /// What `table` lacks for idem's writes, every problem at once, each with its fix; empty
    /// if nothing. Without `stored_types` the declared types of the stored fields' columns are
    /// not checked (a model given at run time does not know them); those of idem's columns are.
    fn table_problems<W: Wire>(
        wire: &W,
        table: &Self::Table,
        document: &DocumentRef,
        stored_types: bool,
    ) -> impl Future<Output = Result<Vec<String>, Error>> + Send;
    /// Refuses a table idem cannot write, naming the first thing it lacks.
    fn check_table<W: Wire>(
        wire: &W,
        table: &Self::Table,
        document: &DocumentRef,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async move {
            let problems = Self::table_problems(wire, table, document, true).await?;
            super::table_check::refuse(table.model.collection(), document, problems)
        }
    }
    /// A query of one parameter, the table's name, that returns each of its columns in their
    /// order: its name, its declared type (upper case) and, as an integer, whether it is the
    /// table's own key, which the database fills itself (a part of the primary key; on
    /// PostgreSQL also an identity, generated or serial column). No row if the table does not
    /// exist.
    const COLUMNS: &'static str;
    /// The shape of a column declared `declared` (upper case): what a model given at run time
    /// reads it as.
    fn shape_of(declared: &str) -> crate::column::ColumnShape;
    /// What makes a read see, and lock, the rows as the latest committed writes left them
    /// (` FOR UPDATE`), where a plain read sees the transaction's snapshot; empty where a
    /// transaction of idem's own holds the whole database's write lock (SQLite).
    const LOCKING_READ: &'static str;
    /// A column as a read of the row selects it, for [`super::wire::Cells::text`].
    fn read_of(table: &Self::Table, alias: &str, name: &str) -> String;
    /// How the dialect writes its statements' words (the hash's and the digest's bytes among
    /// them: [`super::words::Words::hash_bytes`], `from_hex`).
    fn words() -> &'static super::words::Words;
    /// How a row of `table` is found where it has no `_id` (PostgreSQL's `ctid`), a column
    /// every table has, read as [`SqlDialect::read_of`] reads a column; `None` where the
    /// database has none (SQLite's `rowid` is not in a table `WITHOUT ROWID`, InnoDB shows
    /// none) or the store names no system column (PostgreSQL's write marker): such a row is
    /// then found by its natural key ([`super::takeover::location_of`]).
    fn row_locator(_table: &Self::Table) -> Option<&'static str> {
        None
    }

    /// Whether the driver sends its commands to a worker thread that holds the span current
    /// when each was sent (sqlx's SQLite), so that a call runs outside its span
    /// ([`crate::trace::Call::run_detached`]).
    const WORKER_THREAD: bool = false;

    /// How many rows `table` holds, as one integer: an audit's total for its progress.
    fn row_count_sql(table: &Self::Table) -> String {
        format!(
            "SELECT count(*) FROM {}",
            Self::quote(table.model.collection())
        )
    }

    /// A query of one parameter, the table's name, whose one text column says where the
    /// database looked for a table it did not find; `None` where the name alone says it.
    const MISSING_TABLE: Option<&'static str> = None;

    /// The stored columns of `table` the schema has (`present`) as an audit selects them, and
    /// which of the table's columns they are: each read as [`SqlDialect::read_of`] reads it.
    fn row_select(table: &Self::Table, present: &[String]) -> (String, Vec<usize>) {
        let columns: Vec<usize> = (0..table.columns.len())
            .filter(|&index| present.iter().any(|name| name == table.columns[index].name))
            .collect();
        let list: Vec<String> = columns
            .iter()
            .map(|&index| Self::read_of(table, "t", table.columns[index].name))
            .collect();
        (list.join(", "), columns)
    }

    /// A row [`SqlDialect::row_select`] selected, as the JSON the SQL stores judge rows in;
    /// and the index of the row's first cell after it.
    fn row_read<R: Cells>(
        table: &Self::Table,
        columns: &[usize],
        row: &R,
        document: &DocumentRef,
    ) -> Result<(serde_json::Map<String, serde_json::Value>, usize), Error> {
        let stored = super::takeover::row_json(table, columns, row)
            .map_err(|source| Self::error(document, source))?;
        Ok((stored, columns.len()))
    }

    /// `source` as the error of a call concerning `document`.
    fn error(document: &DocumentRef, source: DbFailure) -> Error;
    /// Which unique index a failed write of one row met, if it failed on one: the id's or
    /// the natural key's, or another, named as the error names it.
    fn unique_conflict(error: &Error, table: &Self::Table) -> Option<Conflict>;
    /// The reply of a write of one row that failed with `error`: a unique index it met
    /// ([`SqlDialect::unique_conflict`]), or a value of the row the server refuses; any other
    /// error concerns the call.
    fn reply_to_error(error: Error, table: &Self::Table) -> Result<Reply<StoredRow>, Error> {
        match Self::unique_conflict(&error, table) {
            Some(conflict) => Ok(Reply::Conflict(conflict)),
            None if crate::engine::refuses_a_document(&error) => Ok(Reply::Refused(error)),
            None => Err(error),
        }
    }

    /// One attempt of `apply_once` or `push` ([`super::effects`]): its guarded `UPDATE`, and
    /// what it did.
    fn effect<W: Wire>(
        wire: &W,
        call: &Effect<'_, Self::Table>,
    ) -> impl Future<Output = Result<EffectAnswer, Error>> + Send;

    /// Whether `error` rolled back a write sent outside the caller's transaction for a conflict
    /// with another (a deadlock, a serialization failure, a write conflict), which may start
    /// over ([`crate::sql::store::restarting`]): not a lock held past the wait for it, which
    /// would be waited for again.
    fn restarts(_error: &Error) -> bool {
        false
    }

    /// The write engine's driver of the dialect's write strategy, writing to one checked table
    /// through one wire.
    type Driver<'a, W: Wire + 'a>: SqlDriver<'a, Self, W>;

    /// A table of `model` idem cannot make, named so that the database would not keep it as it
    /// is (too long a name, a system column's name), as a problem to report before anything is
    /// created; `None` if it can.
    fn unstorable(_table: &Self::Table) -> Option<String> {
        None
    }

    /// Whether `failure`, of the `CREATE TABLE IF NOT EXISTS` that makes a table, may say that
    /// another session made the same table at the same moment, so that the table it made is
    /// checked instead.
    fn created_by_another_session(_failure: &DbFailure) -> bool {
        false
    }

    /// Whether an adoption reads each page with its locks and moves its rows in a transaction
    /// of its own ([`super::adoption`]); where not (PostgreSQL, whose store opens no
    /// transaction of its own on a client tasks share), each move is guarded by the row version
    /// it read, and the adoption needs no transaction.
    const ADOPTS_IN_TRANSACTION: bool = true;

    /// The verb of an adoption's move ([`super::adoption::locked_move`]), which must fail on a
    /// unique index the move meets, whatever conflict clause the table gives it (SQLite's `ON
    /// CONFLICT REPLACE` would delete the row holding the derived id, `IGNORE` leave the row
    /// unmoved).
    const MOVE_UPDATE: &'static str = "UPDATE";

    /// Whether an adoption's move assigns each column of the model itself, so that one the
    /// database updates on any change of its row (MariaDB's `ON UPDATE CURRENT_TIMESTAMP`)
    /// keeps its value.
    const MOVE_KEEPS_COLUMNS: bool = false;

    /// The rows of `table` an adoption reads: a page of a pass, or a row again.
    fn adoption_rows<W: Wire>(
        wire: &W,
        table: &Self::Table,
        rows: Rows<'_>,
        document: &DocumentRef,
    ) -> impl Future<Output = Result<Vec<ReadRow>, Error>> + Send {
        super::adoption::locked_rows::<Self>(wire, table, rows, document)
    }

    /// The move of `row`, as [`SqlDialect::adoption_rows`] read it, to `destination`.
    fn adoption_move<W: Wire>(
        wire: &W,
        table: &Self::Table,
        row: &ReadRow,
        destination: &Destination,
    ) -> impl Future<Output = Result<Move, Error>> + Send {
        super::adoption::locked_move::<Self>(wire, table, row, destination)
    }

    /// The row of `table` whose columns at the indexes of `equal` hold its values, as `T`;
    /// `None` if none does.
    fn read_one<W: Wire, T: DeserializeOwned>(
        wire: &W,
        table: &Self::Table,
        equal: &[(usize, Param<'_>)],
        document: DocumentRef,
    ) -> impl Future<Output = Result<Option<T>, Error>> + Send {
        let condition: Vec<String> = equal
            .iter()
            .map(|(index, _)| format!("t.{} = ?", Self::quote(table.columns[*index].name)))
            .collect();
        let values: Vec<Param> = equal.iter().map(|(_, value)| *value).collect();
        async move {
            let condition = condition.join(" AND ");
            super::reads::read_one::<Self, T>(wire, table, &condition, &values, document).await
        }
    }
}

/// A dialect that tells inserted rows from updated ones by the write marker each statement
/// sets ([`super::marker`]): how that strategy goes on its database. Its table is the marker
/// dialects' shared one, and its statements are its table's ([`crate::sql::marker_table::MarkerWords`]).
#[cfg(feature = "_marker_store")]
pub(crate) trait MarkerDialect:
    SqlDialect<Table = crate::sql::marker_table::Table<Self>> + crate::sql::marker_table::MarkerWords
{
    /// Whether a write meets a stored row through any unique index, not only its conflict
    /// target (MySQL's `ON DUPLICATE KEY UPDATE`), so that a document a write neither wrote nor
    /// found under its id or key met another index, which a plain insert of it names.
    const MEETS_ANY_UNIQUE: bool;
    /// Whether `failure`, of an `apply_once`'s statement, is a sum beyond its column's type.
    fn sum_out_of_range(_failure: &DbFailure) -> bool {
        false
    }
    /// The name of the unique index of `table` on exactly `columns` (comma-separated), if any.
    fn index_on<W: Wire>(
        wire: &W,
        table: &Self::Table,
        columns: &str,
    ) -> impl Future<Output = Option<String>> + Send;
    /// Whether the write ([`crate::sql::marker_table::MarkerWords::write_sql`]) returns each row it wrote, as its id and write marker;
    /// otherwise the read after it tells them.
    const WRITE_RETURNS: bool;
    /// Whether a plain read inside the caller's transaction may see rows older than those its
    /// writes meet (InnoDB's REPEATABLE READ: a read sees the snapshot the transaction took at
    /// its first read, a write the latest committed row), so that a lookup there could settle a
    /// row from a state the write that would follow no longer finds: there the batch goes
    /// without its lookup.
    const READS_LAG_WRITES: bool = false;
    /// Whether a pinned value that is a float is bound as the float (its text would not
    /// compare equal).
    const PINS_FLOATS: bool;
}

/// The write engine's driver of a dialect ([`SqlDialect::Driver`]): made for one call over one
/// checked table, with what the store's by-id writes need of the strategy.
pub(crate) trait SqlDriver<'a, D: SqlDialect, W: Wire + 'a>:
    BatchDriver<Doc = PreparedRow, Light = LightRow, Stored = StoredRow> + Send
{
    /// The driver of `store`'s writes to `table` through `wire`.
    fn new(store: &'a Store<D>, wire: &'a W, table: &'a D::Table) -> Self;

    /// One attempt of `delete_by_id`: the row under `id` marked deleted with `marker` (its text
    /// as its tombstone column holds it, [`crate::sql::row::column_text`]) where it is not
    /// deleted yet.
    /// Boxed: the store's `delete_by_id` is generic over the caller's connection, whose future
    /// the compiler proves `Send` only through a pointer (rust-lang/rust#100013).
    fn mark_deleted<'s>(
        &'s self,
        id: &'s str,
        tombstone: &'static Field,
        marker: Option<&'s str>,
        document: &'s DocumentRef,
    ) -> StoreCall<'s, ById<Deletion>>;
}

pub(crate) mod private {
    pub trait Sealed {}
}
