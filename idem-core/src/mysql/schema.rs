//! The catalog reads of a MySQL-family table's check ([`crate::sql::table_check`]) from
//! `information_schema`: every column with a type (and length) idem's writes can use, the id and
//! the natural key compared byte for byte (a `NO PAD` binary collation), unique indexes on
//! exactly the id and exactly the natural key, without prefixes; each problem with its fix.

use super::table::{data_types, quote, Table, BYTEWISE, WORDS};
use super::MySql;
use crate::column::ColumnShape;
use crate::model::{APPLIED_OPS_FIELD, FROZEN_DIGESTS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::table_check::{self, Found, FoundColumn, FoundIndex, TableCheck};
use crate::sql::wire::{Cells, DbFailure, Param, Wire};

/// The table's columns: name, data type, collation, the most characters a text holds.
const COLUMNS: &str = "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, \
                       CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED) \
                       FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
                       AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION";

/// The table's unique indexes: name, key columns (a JSON array: a name may hold a comma),
/// whether one is a prefix.
const UNIQUE_INDEXES: &str = "SELECT INDEX_NAME, JSON_ARRAYAGG(COLUMN_NAME), \
                              CAST(MAX(SUB_PART IS NOT NULL) AS SIGNED) \
                              FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() \
                              AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME";

/// Whether a collation compares text byte for byte: binary and `NO PAD` (MariaDB's
/// `*_nopad_bin`, MySQL's `utf8mb4_0900_bin`); `utf8mb4_bin` ignores trailing spaces.
fn is_bytewise(collation: &str) -> bool {
    collation.ends_with("_nopad_bin") || collation == "utf8mb4_0900_bin"
}

/// The table as the catalog describes it ([`table_check::problems`]), `None` if it does not
/// exist: its columns, the session's `sql_mode`, then the table's unique indexes.
pub(super) async fn found(wire: &impl Wire, table: &Table) -> Result<Option<Found>, DbFailure> {
    let name = Param::Text(Some(table.model.collection()));
    crate::trace::round_trip("SELECT");
    let rows = wire.fetch_all(COLUMNS, &[name]).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = row.text(0)?.unwrap_or_default();
        // A column of JSON (a newtype key's) in `utf8mb4_bin`, MariaDB's `JSON`: the text idem
        // writes there never ends in a space, and JSON's spaces are no part of its value.
        let json = table.shape_named(&name) == Some(ColumnShape::Structured);
        let compares_bytes =
            |collation: &str| is_bytewise(collation) || (json && collation == "utf8mb4_bin");
        let loose = (row.text(2)?).filter(|collation| !compares_bytes(collation));
        // A text too short for the id or the marker idem writes (a legacy ObjectId's
        // `VARCHAR(24)`) is declared with its length, a type the check names with its fix.
        let mut declared = row.text(1)?.unwrap_or_default();
        let needed = match name.as_str() {
            ID_FIELD => 26,
            WRITE_MARKER_FIELD => 27,
            _ => 0,
        };
        if let Some(length) = row.integer(3)?.filter(|&length| length < needed) {
            declared = format!("{declared}({length})");
        }
        columns.push(FoundColumn {
            name,
            declared,
            loose,
        });
    }
    let session = session_mode_problems(wire).await?;
    let indexes = Some(unique_indexes(wire, table).await?);
    Ok(Some(Found {
        session,
        columns,
        indexes,
    }))
}

impl TableCheck for MySql {
    const NAMES_IGNORE_CASE: bool = true;
    const ID_ADDED_UNIQUE: bool = true;

    /// Each named by the first `DATA_TYPE` it may have.
    fn expected_columns(table: &Table) -> Vec<(&'static str, &'static str)> {
        (table.columns.iter().map(|column| column.name))
            .chain([APPLIED_OPS_FIELD, WRITE_MARKER_FIELD])
            .map(|name| (name, table.data_types(name)[0]))
            .collect()
    }

    fn uses(table: &Table, column: &str, _expected: &str, found: &str) -> bool {
        (table.data_types(column)).contains(&found.to_ascii_lowercase().as_str())
    }

    /// As `ensure_table` declares it; `_id` nullable, as the rows it is added to have none
    /// until `adopt` gives them theirs.
    fn definition(table: &Table, column: &str, _expected: &str) -> String {
        let declared = expected_type(table, column);
        match column {
            ID_FIELD => declared.replace(" NOT NULL", ""),
            _ => declared,
        }
    }

    /// The content hash, text in a table an earlier release made, as the bytes its hex
    /// digits write: made binary first, so that the bytes are not read as text. The digest of
    /// the guarded fields as another type (a table made before it was one digest, as `JSON`)
    /// is made NULL first: its rows are compared by value until their next write stores the
    /// digest.
    fn retype(table: &Table, column: &str, _expected: &str) -> Option<String> {
        let (name, quoted) = (table.name(), quote(column));
        if column == table.model.hash_field() {
            return Some(format!(
                "ALTER TABLE {name} MODIFY {quoted} VARBINARY(71); UPDATE {name} SET {quoted} = {}; {}",
                WORDS.hash_bytes(table.model, &quoted),
                table.modify(column)
            ));
        }
        match column.eq_ignore_ascii_case(FROZEN_DIGESTS_FIELD) {
            true => Some(format!(
                "UPDATE {name} SET {} = NULL; {}",
                quote(FROZEN_DIGESTS_FIELD),
                table.modify(FROZEN_DIGESTS_FIELD)
            )),
            false => Some(table.modify(column)),
        }
    }

    fn loose_column(table: &Table, column: &str, collation: &str) -> String {
        format!(
            "column {column:?} compares text in collation {collation}, which does not compare \
             bytes (two keys could be one); change it: {}",
            table.modify(column)
        )
    }
}

impl Table {
    /// The `DATA_TYPE`s `column` may have that idem's writes can use ([`data_types`]).
    fn data_types(&self, column: &str) -> &'static [&'static str] {
        match self.column_named(column) {
            Some(at) => data_types(&self.columns[at]),
            None if column == APPLIED_OPS_FIELD => &["longtext", "json"],
            None => &["varchar"],
        }
    }

    /// The statement that gives `column` the type `ensure_table` declares it with.
    fn modify(&self, column: &str) -> String {
        format!(
            "ALTER TABLE {} MODIFY {} {}",
            self.name(),
            quote(column),
            expected_type(self, column)
        )
    }
}

/// The type `ensure_table` declares `column` with.
fn expected_type(table: &Table, column: &str) -> String {
    let create = table.create_sql();
    let quoted = format!("    {} ", quote(column));
    (create.lines())
        .find_map(|line| line.strip_prefix(&quoted))
        .map_or(format!("LONGTEXT COLLATE {BYTEWISE}"), |declared| {
            declared.trim_end_matches(',').to_owned()
        })
}

/// The name of the unique index of `table` on exactly `columns` (comma-separated), if any.
pub(super) async fn index_on(wire: &impl Wire, table: &Table, columns: &str) -> Option<String> {
    let indexes = unique_indexes(wire, table).await.ok()?;
    table_check::index_on::<MySql>(&indexes, columns)
}

/// The unique indexes of `table`, with their key columns.
async fn unique_indexes(wire: &impl Wire, table: &Table) -> Result<Vec<FoundIndex>, DbFailure> {
    crate::trace::round_trip("SELECT");
    let name = Param::Text(Some(table.model.collection()));
    let rows = wire.fetch_all(UNIQUE_INDEXES, &[name]).await?;
    let mut indexes = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = row.text(0)?.unwrap_or_default();
        let columns: Vec<String> = serde_json::from_str(&row.text(1)?.unwrap_or_default())
            .map_err(|error| super::errors::failure(sqlx::Error::Decode(Box::new(error))))?;
        indexes.push(FoundIndex {
            primary: name == "PRIMARY",
            name,
            columns,
            whole: row.integer(2)?.unwrap_or(0) == 0,
            deferred: false,
            // An index compares as its columns do.
            loose: Vec::new(),
            fixed_in_place: true,
        });
    }
    Ok(indexes)
}

/// What the session's `sql_mode` lacks for idem's writes: strict mode, without which a value a
/// column cannot hold is cut or replaced with a warning (and the NULL that keeps an upsert off
/// another document's row is written as `''`); and assignments made in order, which
/// `SIMULTANEOUS_ASSIGNMENT` (part of `ORACLE`) turns off, so that the columns of an upsert would
/// not see its decision.
async fn session_mode_problems(wire: &impl Wire) -> Result<Vec<String>, DbFailure> {
    crate::trace::round_trip("SELECT");
    let mode = wire
        .fetch_optional("SELECT @@SESSION.sql_mode", &[])
        .await
        .and_then(|row| row.map(|row| row.text(0)).transpose())?
        .flatten()
        .unwrap_or_default();
    let modes: Vec<&str> = mode.split(',').collect();
    let mut problems = Vec::new();
    if !modes
        .iter()
        .any(|mode| matches!(*mode, "STRICT_TRANS_TABLES" | "STRICT_ALL_TABLES"))
    {
        problems.push(format!(
            "the session's sql_mode ({mode}) is not strict: a value a column cannot hold would \
             be cut with a warning instead of refused; SET SESSION sql_mode = \
             CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES') on the connection idem writes through, \
             or set it in the server's configuration (the idem command's connection takes it)"
        ));
    }
    if modes.contains(&"SIMULTANEOUS_ASSIGNMENT") {
        problems.push(format!(
            "the session's sql_mode ({mode}) holds SIMULTANEOUS_ASSIGNMENT, under which an \
             upsert's columns would not see its guard's decision: leave it out"
        ));
    }
    Ok(problems)
}
