//! SQLite's words for the SQL store ([`crate::sql::store`]): its statements ([`super::table`]),
//! its table check ([`super::schema`]), its errors ([`super::errors`]), its effects
//! ([`super::effects`]), and how its cells read as text.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row as _, TypeInfo as _, ValueRef as _};

use super::errors::failure;
use super::table::{quote, Table};
use crate::column::{Column, ColumnShape};
use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::Error;
use crate::model::Model;
use crate::sql::dialect::{Dialect, EffectAnswer, MarkerDialect, SqlDialect};
use crate::sql::effects::Effect;
use crate::sql::wire::{Cells, DbFailure, Wire};

/// SQLite, through sqlx's driver and its bundled library.
#[derive(Clone, Copy, Debug)]
pub struct Sqlite;

impl crate::sql::dialect::private::Sealed for Sqlite {}

impl Dialect for Sqlite {
    const NAME: &'static str = "SQLite";
}

impl SqlDialect for Sqlite {
    type Table = Table;
    type Driver<'a, W: Wire + 'a> = crate::sql::marker::MarkerDriver<'a, Self, W>;

    fn quote(name: &str) -> String {
        quote(name)
    }

    fn table(model: &'static Model, stored: &[Column]) -> Table {
        Table::new(model, stored)
    }

    fn create_sql(table: &Table) -> String {
        table.create_sql()
    }

    const TABLE_EXISTS: &'static str = "SELECT 1 FROM pragma_table_info(?1) LIMIT 1";

    async fn table_problems<W: Wire>(
        wire: &W,
        table: &Table,
        document: &DocumentRef,
        stored_types: bool,
    ) -> Result<Vec<String>, Error> {
        let found = super::schema::found(wire, table);
        crate::sql::table_check::problems::<Self>(table, document, stored_types, found).await
    }

    const COLUMNS: &'static str =
        "SELECT name, upper(type), pk FROM pragma_table_info(?1) ORDER BY cid";

    fn shape_of(declared: &str) -> ColumnShape {
        super::table::shape_of(declared)
    }

    // `rowid`, but for a table `WITHOUT ROWID`: a row without `_id` is found by its natural key.
    const ROW_LOCATOR: Option<&'static str> = None;

    // sqlx's SQLite connection sends each command to a worker thread of its own.
    const WORKER_THREAD: bool = true;

    const LOCKING_READ: &'static str = "";

    fn error(document: &DocumentRef, source: DbFailure) -> Error {
        super::errors::sqlite_error(document, source)
    }

    fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
        super::errors::unique_conflict(error, table)
    }

    fn read_of(table: &Table, alias: &str, name: &str) -> String {
        table.read_of(alias, name)
    }

    async fn effect<W: Wire>(wire: &W, call: &Effect<'_, Table>) -> Result<EffectAnswer, Error> {
        crate::sql::effects::guarded_once::<Self, W>(wire, call, &super::effects::WORDS).await
    }
}

impl MarkerDialect for Sqlite {
    // An upsert's other unique indexes fail the statement, naming their columns.
    const MEETS_ANY_UNIQUE: bool = false;

    async fn index_on<W: Wire>(wire: &W, table: &Table, columns: &str) -> Option<String> {
        super::schema::index_on(wire, table, columns).await
    }

    const WRITE_RETURNS: bool = true;

    // SQLite's text of a float has 15 significant digits, which may not give it back.
    const PINS_FLOATS: bool = true;
}

crate::sql::sqlx_wire::sqlx_database!(
    sqlx::Sqlite,
    savepoint_opens: true,
    failure: super::errors::failure,
    bind: crate::sql::sqlx_wire::bound::<sqlx::Sqlite>,
    transactions: own
);

impl Cells for SqliteRow {
    fn len(&self) -> usize {
        sqlx::Row::len(self)
    }

    /// A `REAL` as the shortest text that reads back as the very float (SQLite's own text of it
    /// has 15 significant digits), an `INTEGER` as its digits, anything else as SQLite gives it.
    fn text(&self, at: usize) -> Result<Option<String>, DbFailure> {
        let raw = self.try_get_raw(at).map_err(failure)?;
        if raw.is_null() {
            return Ok(None);
        }
        match raw.type_info().name() {
            "REAL" => self
                .try_get::<f64, _>(at)
                .map(|float| Some(format!("{float:?}"))),
            "INTEGER" => self
                .try_get::<i64, _>(at)
                .map(|integer| Some(integer.to_string())),
            _ => self.try_get(at),
        }
        .map_err(failure)
    }

    fn boolean(&self, at: usize) -> Result<Option<bool>, DbFailure> {
        self.try_get(at).map_err(failure)
    }

    fn integer(&self, at: usize) -> Result<Option<i64>, DbFailure> {
        self.try_get(at).map_err(failure)
    }
}
