//! The MySQL family's words for the SQL store ([`crate::sql::store`]): its statements
//! ([`super::table`]), its table check ([`super::schema`]), its errors ([`super::errors`]), its
//! effects ([`super::effects`]), and how its cells read as text.

use sqlx::mysql::MySqlRow;

use super::table::{quote, Table};
use crate::column::ColumnShape;
use crate::error::Error;
use crate::sql::dialect::{Dialect, MarkerDialect, SqlDialect};
use crate::sql::sqlx_marker::{Held, SqlxCells};
use crate::sql::wire::DbFailure;

/// The MySQL family (MariaDB, MySQL, TiDB), through sqlx's MySQL driver.
#[derive(Clone, Copy, Debug)]
pub struct MySql;

impl crate::sql::dialect::private::Sealed for MySql {}

impl Dialect for MySql {
    const NAME: &'static str = "MySQL";
}

impl SqlDialect for MySql {
    crate::sql::marker_table::marker_dialect_items!(error: mysql_error);

    const TABLE_EXISTS: &'static str = "SELECT 1 FROM information_schema.TABLES \
                                        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?";

    // MariaDB's `JSON` is `LONGTEXT` with a `json_valid` check, which names it here; MySQL's is
    // its own type.
    const COLUMNS: &'static str = "SELECT c.COLUMN_NAME, CASE WHEN EXISTS (SELECT 1 FROM \
         information_schema.TABLE_CONSTRAINTS tc JOIN information_schema.CHECK_CONSTRAINTS k \
         ON k.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND k.CONSTRAINT_NAME = tc.CONSTRAINT_NAME \
         WHERE tc.TABLE_SCHEMA = c.TABLE_SCHEMA AND tc.TABLE_NAME = c.TABLE_NAME AND \
         tc.CONSTRAINT_TYPE = 'CHECK' AND k.CHECK_CLAUSE = CONCAT('json_valid(`', c.COLUMN_NAME, \
         '`)')) THEN 'JSON' WHEN c.COLUMN_TYPE LIKE 'tinyint(1)%' THEN 'BOOLEAN' \
         ELSE UPPER(c.DATA_TYPE) END, CAST(c.COLUMN_KEY = 'PRI' AS SIGNED) \
         FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = ? \
         AND c.EXTRA NOT LIKE '%GENERATED%' ORDER BY c.ORDINAL_POSITION";

    const LOCKING_READ: &'static str = " FOR UPDATE";

    const MOVE_KEEPS_COLUMNS: bool = true;

    const MISSING_TABLE: Option<&'static str> = Some(
        "SELECT IFNULL(CONCAT('database `', DATABASE(), '` has no table `', ?, '`'), 'the \
         connection names no database: name it in the URI (the idem command: or --database)')",
    );

    /// In a type whose cells [`crate::sql::wire::Cells::text`] reads, whichever a table idem did
    /// not create declares (the audit and adoption of a model given at run time read such
    /// tables): a float as a `DOUBLE`, a `DECIMAL` too (its text would not give the very float
    /// back), a boolean as `true` or `false`, any other as text (`CAST … AS CHAR`): sqlx reads
    /// no date, time, unsigned integer or MySQL `JSON` cell as text.
    fn read_of(table: &Table, alias: &str, name: &str) -> String {
        let column = format!("{alias}.{}", quote(name));
        match table
            .column_named(name)
            .map(|index| table.columns[index].shape)
        {
            Some(ColumnShape::Float) => format!("CAST({column} AS DOUBLE)"),
            Some(ColumnShape::Boolean) => table.read_of(alias, name),
            _ if name == table.model.hash_field() || name == crate::model::FROZEN_DIGESTS_FIELD => {
                table.read_of(alias, name)
            }
            _ => format!("CAST({column} AS CHAR)"),
        }
    }

    fn restarts(error: &Error) -> bool {
        super::errors::restarts(error)
    }
}

impl MarkerDialect for MySql {
    const MEETS_ANY_UNIQUE: bool = true;

    fn sum_out_of_range(failure: &DbFailure) -> bool {
        failure.code() == Some(super::effects::OUT_OF_RANGE)
    }

    crate::sql::marker_table::marker_dialect_items!(marker);

    // MariaDB returns the rows an upsert met, but MySQL and TiDB have no `RETURNING`: the
    // locking read after the write tells them, on all three.
    const WRITE_RETURNS: bool = false;

    // REPEATABLE READ, InnoDB's default: a plain read sees the transaction's snapshot, an
    // upsert the latest committed row (unless MariaDB's `innodb_snapshot_isolation`).
    const READS_LAG_WRITES: bool = true;

    // A `DOUBLE` compared with text is compared with the text's double, which may not be the
    // float read back; bound as the float it is.
    const PINS_FLOATS: bool = true;
}

crate::sql::sqlx_marker::marker_database!(sqlx::MySql, savepoint_opens: false);

impl SqlxCells for MySqlRow {
    /// By the column's type: a `DOUBLE` as the shortest text that reads back as the very float,
    /// an integer as its digits, a `BOOLEAN` as `true` or `false`, text and JSON (MariaDB's
    /// `LONGTEXT`) as stored, in whichever collation (a binary one arrives as bytes).
    fn held(name: &str) -> Held {
        match name {
            "DOUBLE" | "FLOAT" => Held::Float,
            "BOOLEAN" => Held::Boolean,
            "BIGINT" | "INT" | "MEDIUMINT" | "SMALLINT" | "TINYINT" => Held::Integer,
            _ => Held::TextOrBytes,
        }
    }
}
