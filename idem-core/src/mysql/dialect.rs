//! The MySQL family's words for the SQL store ([`crate::sql::store`]): its statements
//! ([`super::table`]), its table check ([`super::schema`]), its errors ([`super::errors`]), its
//! effects ([`super::effects`]), and how its cells read as text.

use sqlx::mysql::MySqlRow;
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

/// The MySQL family (MariaDB, MySQL, TiDB), through sqlx's MySQL driver.
#[derive(Clone, Copy, Debug)]
pub struct MySql;

impl crate::sql::dialect::private::Sealed for MySql {}

impl Dialect for MySql {
    const NAME: &'static str = "MySQL";
}

impl SqlDialect for MySql {
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

    const TABLE_EXISTS: &'static str = "SELECT 1 FROM information_schema.TABLES \
                                        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?";

    async fn table_problems<W: Wire>(
        wire: &W,
        table: &Table,
        document: &DocumentRef,
        stored_types: bool,
    ) -> Result<Vec<String>, Error> {
        let found = super::schema::found(wire, table);
        crate::sql::table_check::problems::<Self>(table, document, stored_types, found).await
    }

    // MariaDB's `JSON` is `LONGTEXT` with a `json_valid` check, which names it here; MySQL's is
    // its own type.
    const COLUMNS: &'static str = "SELECT c.COLUMN_NAME, CASE WHEN EXISTS (SELECT 1 FROM \
         information_schema.TABLE_CONSTRAINTS tc JOIN information_schema.CHECK_CONSTRAINTS k \
         ON k.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND k.CONSTRAINT_NAME = tc.CONSTRAINT_NAME \
         WHERE tc.TABLE_SCHEMA = c.TABLE_SCHEMA AND tc.TABLE_NAME = c.TABLE_NAME AND \
         tc.CONSTRAINT_TYPE = 'CHECK' AND k.CHECK_CLAUSE = CONCAT('json_valid(`', c.COLUMN_NAME, \
         '`)')) THEN 'JSON' ELSE UPPER(c.DATA_TYPE) END, CAST(c.COLUMN_KEY = 'PRI' AS SIGNED) \
         FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = ? \
         ORDER BY c.ORDINAL_POSITION";

    fn shape_of(declared: &str) -> ColumnShape {
        super::table::shape_of(declared)
    }

    // InnoDB shows no row locator: a row without `_id` is found by its natural key.
    const ROW_LOCATOR: Option<&'static str> = None;

    const LOCKING_READ: &'static str = " FOR UPDATE";

    fn error(document: &DocumentRef, source: DbFailure) -> Error {
        super::errors::mysql_error(document, source)
    }

    fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
        super::errors::unique_conflict(error, table)
    }

    /// In a type whose cells [`Cells::text`] reads, whichever a table idem did not create
    /// declares (the audit and adoption of a model given at run time read such tables): a
    /// float as a `DOUBLE`, a `DECIMAL` too (its text would not give the very float back), a
    /// boolean as `true` or `false`, any other as text (`CAST … AS CHAR`): sqlx reads no
    /// date, time, unsigned integer or MySQL `JSON` cell as text.
    fn read_of(table: &Table, alias: &str, name: &str) -> String {
        let column = format!("{alias}.{}", quote(name));
        match table
            .column_named(name)
            .map(|index| table.columns[index].shape)
        {
            Some(ColumnShape::Float) => format!("CAST({column} AS DOUBLE)"),
            Some(ColumnShape::Boolean) => table.read_of(alias, name),
            _ => format!("CAST({column} AS CHAR)"),
        }
    }

    async fn effect<W: Wire>(wire: &W, call: &Effect<'_, Table>) -> Result<EffectAnswer, Error> {
        crate::sql::effects::guarded_once::<Self, W>(wire, call, &super::effects::WORDS).await
    }
}

impl MarkerDialect for MySql {
    const MEETS_ANY_UNIQUE: bool = true;

    fn restarts(error: &Error) -> bool {
        super::errors::restarts(error)
    }

    fn sum_out_of_range(failure: &DbFailure) -> bool {
        failure.code() == Some(super::effects::OUT_OF_RANGE)
    }

    async fn index_on<W: Wire>(wire: &W, table: &Table, columns: &str) -> Option<String> {
        super::schema::index_on(wire, table, columns).await
    }

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

crate::sql::sqlx_wire::sqlx_database!(
    sqlx::MySql,
    savepoint_opens: false,
    failure: super::errors::failure,
    bind: crate::sql::sqlx_wire::bound::<sqlx::MySql>,
    transactions: own
);

impl Cells for MySqlRow {
    fn len(&self) -> usize {
        sqlx::Row::len(self)
    }

    /// By the column's type: a `DOUBLE` as the shortest text that reads back as the very float,
    /// an integer as its digits, a `BOOLEAN` as `true` or `false`, text and JSON (MariaDB's
    /// `LONGTEXT`) as stored, in whichever collation (a binary one arrives as bytes).
    fn text(&self, at: usize) -> Result<Option<String>, DbFailure> {
        let raw = self.try_get_raw(at).map_err(failure)?;
        if raw.is_null() {
            return Ok(None);
        }
        match raw.type_info().name() {
            "DOUBLE" | "FLOAT" => self
                .try_get::<f64, _>(at)
                .map(|float| Some(format!("{float:?}"))),
            "BOOLEAN" => self
                .try_get::<i64, _>(at)
                .map(|flag| Some((flag != 0).to_string())),
            "BIGINT" | "INT" | "MEDIUMINT" | "SMALLINT" | "TINYINT" => self
                .try_get::<i64, _>(at)
                .map(|integer| Some(integer.to_string())),
            _ => match self.try_get::<String, _>(at) {
                Ok(text) => Ok(Some(text)),
                Err(_) => {
                    let bytes = self.try_get::<Vec<u8>, _>(at).map_err(failure)?;
                    String::from_utf8(bytes)
                        .map(Some)
                        .map_err(|error| sqlx::Error::Decode(Box::new(error)))
                }
            },
        }
        .map_err(failure)
    }

    fn boolean(&self, at: usize) -> Result<Option<bool>, DbFailure> {
        Ok(self.integer(at)?.map(|flag| flag != 0))
    }

    fn integer(&self, at: usize) -> Result<Option<i64>, DbFailure> {
        self.try_get(at).map_err(failure)
    }
}
