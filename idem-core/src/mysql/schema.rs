//! The check of a MySQL-family table before idem's first write to it, read from
//! `information_schema`: every column with a type idem's writes can use, the id and the natural
//! key compared byte for byte (a `NO PAD` binary collation), and unique indexes on exactly the
//! id and exactly the natural key, without prefixes. Every problem comes with its fix, all of
//! them at once: applying the fixes listed makes the table pass.

use super::errors::mysql_error;
use super::table::{data_types, quote, Table, BYTEWISE};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::model::{Role, APPLIED_OPS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::layout::Content;
use crate::sql::wire::{Cells, Param, Wire};

/// The table's columns: name, data type, collation.
const COLUMNS: &str = "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME FROM information_schema.COLUMNS \
                       WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION";

/// The table's unique indexes: name, key columns (comma-separated), whether one is a prefix.
const UNIQUE_INDEXES: &str = "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME SEPARATOR ','), \
                              CAST(MAX(SUB_PART IS NOT NULL) AS SIGNED) \
                              FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() \
                              AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME";

/// A set of column names as one text, to compare sets: without case (the server compares
/// column names so), sorted.
fn column_set<'a>(columns: impl Iterator<Item = &'a str>) -> String {
    let mut names: Vec<String> = columns.map(|name| name.trim().to_lowercase()).collect();
    names.sort_unstable();
    names.join(",")
}

/// Whether a collation compares text byte for byte: binary and `NO PAD` (MariaDB's
/// `*_nopad_bin`, MySQL's `utf8mb4_0900_bin`); `utf8mb4_bin` ignores trailing spaces.
fn is_bytewise(collation: Option<&str>) -> bool {
    collation.is_none_or(|name| name.ends_with("_nopad_bin") || name == "utf8mb4_0900_bin")
}

/// What `table` lacks for idem's writes, every problem at once, each with its fix; empty if
/// nothing. Without `stored_types` the types of the stored fields' columns are not checked.
pub(super) async fn table_problems(
    wire: &impl Wire,
    table: &Table,
    document: &DocumentRef,
    stored_types: bool,
) -> Result<Vec<String>, Error> {
    let name = Param::Text(Some(table.model.collection()));
    let error = |source| mysql_error(document, source);
    crate::trace::round_trip("SELECT");
    let rows = wire.fetch_all(COLUMNS, &[name]).await.map_err(error)?;
    if rows.is_empty() {
        return Ok(vec![format!(
            "it does not exist; create it with Store::ensure_table::<T>() or from \
             Store::create_table_sql::<T>():\n{}",
            table.create_sql()
        )]);
    }
    let mut present = Vec::with_capacity(rows.len());
    for row in &rows {
        let text = |at| row.text(at).map_err(error);
        present.push((
            text(0)?.unwrap_or_default(),
            text(1)?.unwrap_or_default(),
            text(2)?,
        ));
    }
    let table_name = table.name();
    let mut problems = session_mode_problems(wire, document).await?;
    let own = [
        (APPLIED_OPS_FIELD, &["longtext", "json"][..]),
        (WRITE_MARKER_FIELD, &["varchar"]),
    ];
    let expected = (table.columns.iter())
        .map(|column| (column.name, data_types(column), Some(column)))
        .chain(own.into_iter().map(|(name, types)| (name, types, None)));
    for (column, types, of) in expected {
        // Column names compare without case, as the server compares them.
        let found = present
            .iter()
            .find(|(name, ..)| name.eq_ignore_ascii_case(column));
        let Some((_, data_type, collation)) = found else {
            problems.push(format!(
                "column {column:?} is missing; add it: ALTER TABLE {table_name} ADD COLUMN {} {}",
                quote(column),
                expected_type(table, column),
            ));
            continue;
        };
        let typed = stored_types || !matches!(of.map(|of| of.content), Some(Content::Stored(_)));
        if typed && !types.contains(&data_type.to_ascii_lowercase().as_str()) {
            problems.push(format!(
                "column {column:?} is {data_type}, not {}; change it: ALTER TABLE {table_name} \
                 MODIFY {} {}",
                types[0],
                quote(column),
                expected_type(table, column),
            ));
        }
        let keyed = of.is_some_and(|of| {
            of.content == Content::Id || matches!(of.role(), Some(Role::Key | Role::IdempotencyKey))
        });
        if keyed
            && of.is_some_and(|of| of.shape == ColumnShape::Text)
            && !is_bytewise(collation.as_deref())
        {
            problems.push(format!(
                "column {column:?} compares text in collation {}, which does not compare bytes \
                 (two keys could be one); change it: ALTER TABLE {table_name} MODIFY {} {}",
                collation.as_deref().unwrap_or_default(),
                quote(column),
                expected_type(table, column),
            ));
        }
    }
    crate::trace::round_trip("SELECT");
    let indexes = wire
        .fetch_all(UNIQUE_INDEXES, &[name])
        .await
        .map_err(error)?;
    let mut on = Vec::with_capacity(indexes.len());
    for row in &indexes {
        let prefix = row.integer(2).map_err(error)?.unwrap_or(0) != 0;
        let columns = row.text(1).map_err(error)?.unwrap_or_default();
        on.push((column_set(columns.split(',')), prefix));
    }
    let unique_on = |columns: Vec<&str>| {
        let wanted = column_set(columns.into_iter());
        on.iter()
            .any(|(columns, prefix)| !prefix && *columns == wanted)
    };
    if !unique_on(vec![ID_FIELD]) {
        problems.push(format!(
            "no primary key or unique index on exactly {ID_FIELD:?}; add one: ALTER TABLE \
             {table_name} ADD PRIMARY KEY ({})",
            quote(ID_FIELD)
        ));
    }
    if !unique_on(table.natural_key_names()) {
        let keys: Vec<String> = table.natural_key_names().into_iter().map(quote).collect();
        problems.push(format!(
            "no unique index on exactly the natural key ({}), without prefixes; add one: ALTER \
             TABLE {table_name} ADD CONSTRAINT {} UNIQUE ({})",
            table.natural_key_names().join(", "),
            quote(&table.natural_key_constraint),
            keys.join(", "),
        ));
    }
    Ok(problems)
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
    let wanted = column_set(columns.split(','));
    crate::trace::round_trip("SELECT");
    let name = Param::Text(Some(table.model.collection()));
    let rows = wire.fetch_all(UNIQUE_INDEXES, &[name]).await.ok()?;
    rows.iter().find_map(|row| {
        let name = row.text(0).ok().flatten()?;
        (column_set(row.text(1).ok().flatten()?.split(',')) == wanted).then_some(name)
    })
}

/// What the session's `sql_mode` lacks for idem's writes: strict mode, without which a value a
/// column cannot hold is cut or replaced with a warning (and the NULL that keeps an upsert off
/// another document's row is written as `''`); and assignments made in order, which
/// `SIMULTANEOUS_ASSIGNMENT` (part of `ORACLE`) turns off, so that the columns of an upsert would
/// not see its decision.
async fn session_mode_problems(
    wire: &impl Wire,
    document: &DocumentRef,
) -> Result<Vec<String>, Error> {
    crate::trace::round_trip("SELECT");
    let mode = wire
        .fetch_optional("SELECT @@SESSION.sql_mode", &[])
        .await
        .and_then(|row| row.map(|row| row.text(0)).transpose())
        .map_err(|source| mysql_error(document, source))?
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
             CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES'), or set it in the server's configuration"
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
