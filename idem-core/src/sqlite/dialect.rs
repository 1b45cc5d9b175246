//! SQLite as a dialect of the SQL store ([`crate::sql::store`]), and how its cells read as text;
//! its statements, table check, errors and effects are its sibling modules'.

use sqlx::sqlite::SqliteRow;

use super::table::Table;
use crate::sql::dialect::{Dialect, MarkerDialect, SqlDialect};
use crate::sql::sqlx_marker::{Held, SqlxCells};

/// SQLite, through sqlx's driver and its bundled library.
#[derive(Clone, Copy, Debug)]
pub struct Sqlite;

impl crate::sql::dialect::private::Sealed for Sqlite {}

impl Dialect for Sqlite {
    const NAME: &'static str = "SQLite";
}

impl SqlDialect for Sqlite {
    crate::sql::marker_table::marker_dialect_items!(error: sqlite_error);

    const TABLE_EXISTS: &'static str = "SELECT 1 FROM pragma_table_info(?1) LIMIT 1";

    const COLUMNS: &'static str =
        "SELECT name, upper(type), pk FROM pragma_table_info(?1) ORDER BY cid";

    // sqlx's SQLite connection sends each command to a worker thread of its own.
    const WORKER_THREAD: bool = true;

    const LOCKING_READ: &'static str = "";

    const MOVE_UPDATE: &'static str = "UPDATE OR ABORT";

    fn read_of(table: &Table, alias: &str, name: &str) -> String {
        table.read_of(alias, name)
    }
}

impl MarkerDialect for Sqlite {
    // An upsert's other unique indexes fail the statement, naming their columns.
    const MEETS_ANY_UNIQUE: bool = false;

    crate::sql::marker_table::marker_dialect_items!(marker);

    const WRITE_RETURNS: bool = true;

    // SQLite's text of a float has 15 significant digits, which may not give it back.
    const PINS_FLOATS: bool = true;
}

crate::sql::sqlx_marker::marker_database!(sqlx::Sqlite, savepoint_opens: true);

impl SqlxCells for SqliteRow {
    /// A `REAL` as the shortest text that reads back as the very float (SQLite's own text of it
    /// has 15 significant digits), an `INTEGER` as its digits, anything else as SQLite gives it.
    fn held(name: &str) -> Held {
        match name {
            "REAL" => Held::Float,
            "INTEGER" => Held::Integer,
            _ => Held::Text,
        }
    }
}
