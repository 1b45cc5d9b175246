//! A type's SQLite table: its columns' declared types, the DDL that creates it, and the
//! statements idem sends to it, over the marker dialects' shared
//! [`Table`](crate::sql::marker_table::Table) in SQLite's words.
//!
//! Values are bound one parameter per column and row (`VALUES (?1, ?2, …), (…)`), as SQLite
//! has no array parameters; a batch is cut into chunks that stay under SQLite's limit of bound
//! parameters. A column's declared type gives it its affinity; booleans are integers, nested
//! values JSON text. A float JSON cannot hold (NaN, an infinity) is stored as its text, which a
//! `REAL` column keeps as it is.

use crate::column::ColumnShape;
use crate::model::{Field, Role, APPLIED_OPS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::guard::conflict_action;
pub(crate) use crate::sql::guard::{literal, quote};
use crate::sql::layout::{Content, TableColumn};
use crate::sql::marker_sql::{parameter_rows, Words};
use crate::sql::marker_table::MarkerWords;

/// A boolean column expression as `true` or `false`: a number as SQLite tests it (true unless
/// zero), and the texts other tools write for booleans (`t` and `f`, as Rails did, `true` and
/// `false`, in any case) as they mean; any other value as its text, which reads as no boolean
/// (a row holding it does not read as its type, where it read as `false`).
fn boolean_text(column: &str) -> String {
    format!(
        "(CASE WHEN {column} IS NULL THEN NULL \
         WHEN typeof({column}) IN ('integer', 'real') \
         THEN (CASE WHEN {column} THEN 'true' ELSE 'false' END) \
         WHEN lower({column}) IN ('t', 'true') THEN 'true' \
         WHEN lower({column}) IN ('f', 'false') THEN 'false' \
         ELSE CAST({column} AS TEXT) END)"
    )
}

/// How SQLite writes the words of the statements' shared parts and of the guard.
pub(crate) const WORDS: Words = Words {
    quote,
    literal,
    same: "IS",
    never_deleted: "0",
    text_cast: "",
    false_literal: "0",
    bytewise: "BINARY",
    byte_order: |column| format!("{column} COLLATE BINARY"),
    distinct: |stored, incoming| format!("{stored} IS NOT {incoming}"),
    from_hex: |hex| format!("unhex({hex})"),
    // `hex(NULL)` is `''`.
    to_hex: |bytes| format!("nullif(lower(hex({bytes})), '')"),
};

/// A column's declared type. A boolean's and a structured value's name their shape, so that a
/// model given at run time reads them as what they hold ([`shape_of`]); by SQLite's affinity
/// rules `BOOLEAN` stores integers as `INTEGER` does, and `JSON_TEXT` text as `TEXT` does.
pub(crate) fn sql_type(column: &TableColumn) -> &'static str {
    match (column.content, column.shape) {
        (Content::Hash | Content::Digests, _) => "BLOB",
        (Content::Id | Content::VersionKey | Content::Extra, _) => "TEXT",
        (_, ColumnShape::Text) => "TEXT",
        (_, ColumnShape::Integer) => "INTEGER",
        (_, ColumnShape::Boolean) => "BOOLEAN",
        (_, ColumnShape::Float) => "REAL",
        (_, ColumnShape::Structured | ColumnShape::Flattened) => "JSON_TEXT",
    }
}

/// Whether a column declared `found` (upper case) is one idem's writes can use where it
/// declares `expected`: the same type, or the one a table made before booleans and structured
/// values had their own names declared for them (`INTEGER`, `TEXT`: the same storage).
pub(crate) fn declared_as(found: &str, expected: &str) -> bool {
    found == expected
        || matches!(
            (expected, found),
            ("BOOLEAN", "INTEGER") | ("JSON_TEXT", "TEXT")
        )
        // Text affinity, which `VARCHAR(n)` has too, and no limit: text as idem declares it.
        || (expected == "TEXT"
            && !found.contains("INT")
            && ["CHAR", "CLOB", "TEXT"].iter().any(|word| found.contains(word)))
}

/// The shape of a column declared `declared` (upper case), by SQLite's affinity rules and the
/// names [`sql_type`] declares: what a model given at run time reads it as. A table made before
/// those names holds booleans in `INTEGER` columns and structured values in `TEXT` ones, which
/// read as integers and text.
pub(crate) fn shape_of(declared: &str) -> ColumnShape {
    if declared.contains("JSON") {
        ColumnShape::Structured
    } else if declared.contains("BOOL") {
        ColumnShape::Boolean
    } else if declared.contains("INT") {
        ColumnShape::Integer
    } else if declared.contains("REAL") || declared.contains("FLOA") || declared.contains("DOUB") {
        ColumnShape::Float
    } else if declared.contains("CHAR") || declared.contains("CLOB") || declared.contains("TEXT") {
        ColumnShape::Text
    } else {
        ColumnShape::Structured
    }
}

pub(crate) use crate::sql::dialect::Statement;

/// A type's SQLite table and the parts of the statements idem sends to it.
pub(crate) type Table = crate::sql::marker_table::Table<super::Sqlite>;

impl MarkerWords for super::Sqlite {
    const WORDS: Words = WORDS;
    /// `SQLITE_MAX_VARIABLE_NUMBER` since 3.32, less room for the statement's own.
    const ROW_PARAMETERS: usize = 32_000;
    const INSERT_ALIAS: &'static str = " AS t";
    /// `OR ABORT`: whatever conflict rule a table made by hand gives its constraints (`ON
    /// CONFLICT REPLACE` would delete the stored row), a conflict fails the statement. Without
    /// `RETURNING`, whose rows cost as much as the insert's own through sqlx.
    const FRESH_INSERT: &'static str = "INSERT OR ABORT INTO";

    fn declared(_: &Table, column: &TableColumn) -> String {
        let constraint = match (column.content, column.role()) {
            (Content::Id, _) => " PRIMARY KEY NOT NULL",
            (_, Some(Role::Key | Role::IdempotencyKey)) => " NOT NULL",
            (_, Some(Role::Pushed)) => " NOT NULL DEFAULT '[]'",
            _ => "",
        };
        format!("{}{constraint}", sql_type(column))
    }

    /// A boolean as `true` or `false` ([`boolean_text`]), an integer as its text; any other as
    /// stored (SQLite's text of a float has 15 significant digits, not the 17 that give it back).
    fn read_column(table: &Table, alias: &str, name: &str) -> String {
        let column = format!("{alias}.{}", quote(name));
        match table.shape_named(name) {
            Some(ColumnShape::Boolean) => boolean_text(&column),
            Some(ColumnShape::Integer) => format!("CAST({column} AS TEXT)"),
            _ => column,
        }
    }

    /// Returning the id and the write marker of each row written.
    ///
    /// Parameters are anonymous (`?`), bound in the order they appear: SQLite looks a numbered
    /// one (`?12`) up by walking every name the statement has, which for a chunk of thousands
    /// made binding quadratic (measured: more than half the time of a 10,000-row batch).
    fn write_sql(table: &Table, statement: Statement, rows: usize) -> String {
        let id = quote(ID_FIELD);
        let marker = quote(WRITE_MARKER_FIELD);
        // `InsertNew`: only the natural key and the id: a conflict in another unique index is a
        // refusal naming it, not a member left alone.
        let action = conflict_action(table, statement, &WORDS, &format!(", {marker} = ?"));
        format!(
            "{insert} ON CONFLICT ({key}) {action} ON CONFLICT ({id}) DO NOTHING \
             RETURNING {id}, {marker}",
            insert = table.insert_rows("INSERT INTO", statement, rows),
            key = table.natural_key_list(),
        )
    }

    /// Two lookups, each through its unique index (the primary key, the natural key's), not a
    /// scan: the keys are joined as a `VALUES` list on the key columns themselves.
    fn select_stored_sql(table: &Table, rows: usize) -> String {
        let keys = table.natural_key_names();
        // Anonymous parameters, as in `write_sql`: the ids, then the keys row after row.
        let ids = vec!["?"; rows];
        let join = WORDS.same_key(table, "t", |at| format!("k.column{}", at + 1));
        let state = table.stored_row_columns("t").join(", ");
        format!(
            "SELECT {state} FROM {table} t WHERE t.{id} IN ({ids}) \
             UNION SELECT {state} FROM (VALUES {tuples}) k JOIN {table} t ON {join}",
            table = table.name(),
            id = quote(ID_FIELD),
            ids = ids.join(", "),
            tuples = parameter_rows(keys.len(), rows),
            join = join.join(" AND "),
        )
    }

    /// The incoming rows as a `VALUES` list, settled once (`AS MATERIALIZED`) for both reads.
    fn look_up_sql(table: &Table, rows: usize) -> Option<String> {
        let keys = table.natural_key_names();
        let contents = crate::sql::marker::compared_contents(table);
        // The incoming values, as SQLite names the columns of `VALUES`.
        let incoming = |position: usize| format!("v.column{}", position + 1);
        let key_at = |at: usize| incoming(1 + contents.len() + at);
        let mut same = vec![format!("u.{} = {}", quote(ID_FIELD), incoming(0))];
        let content = |at: usize| WORDS.compared_value(table, at, incoming(1 + at));
        same.extend(WORDS.stored_unchanged(table, key_at, content));
        let by_key = WORDS.holds_key(table, "f", key_at);
        let mut selected = vec!["k.i".to_owned()];
        selected.extend(table.stored_row_columns("s"));
        let mut summary = vec![
            "NULL",
            "group_concat(CASE WHEN k.stopping IS NULL THEN k.i END, ',')",
            "sum(k.stopping = '')",
        ];
        summary.resize(selected.len(), "NULL");
        // `stopping`: '' (no id is empty) for a row stored unchanged, else the id of the row
        // it meets, else NULL.
        Some(format!(
            "WITH k AS MATERIALIZED (SELECT {id_in} AS i, \
             CASE WHEN EXISTS (SELECT 1 FROM {table} u WHERE {same}) THEN '' ELSE \
             COALESCE((SELECT f.{id} FROM {table} f WHERE f.{id} = {id_in}), \
             (SELECT f.{id} FROM {table} f WHERE {by_key})) END AS stopping \
             FROM (VALUES {tuples}) v) \
             SELECT {selected} FROM k JOIN {table} s ON s.{id} = k.stopping \
             UNION ALL SELECT {summary} FROM k",
            id_in = incoming(0),
            table = table.name(),
            id = quote(ID_FIELD),
            same = same.join(" AND "),
            tuples = parameter_rows(1 + contents.len() + keys.len(), rows),
            selected = selected.join(", "),
            summary = summary.join(", "),
        ))
    }

    /// Numbered parameters (`?1…`): the `SET` skips the sent columns it does not replace.
    fn pinned_sql(table: &Table) -> String {
        let mut parameter = 0;
        let next = move || {
            parameter += 1;
            format!("?{parameter}")
        };
        let (set, conditions) = table.pinned_parts(
            next,
            |name, placeholder, replaced| replaced.then(|| format!("{name} = {placeholder}")),
            |name, placeholder| format!("{} IS {placeholder}", table.read_of("t", name)),
        );
        format!(
            "UPDATE {} AS t SET {set} WHERE {conditions} RETURNING {}",
            table.name(),
            quote(ID_FIELD),
        )
    }

    fn mark_deleted_sql(table: &Table, tombstone: &Field) -> String {
        format!(
            "UPDATE {table} SET {tomb} = ?2, {marker} = ?3 WHERE {id} = ?1 AND {tomb} IS NULL",
            table = table.name(),
            tomb = quote(tombstone.stored_name()),
            marker = quote(WRITE_MARKER_FIELD),
            id = quote(ID_FIELD),
        )
    }
}

impl Table {
    /// `CREATE TABLE IF NOT EXISTS …` with the unique constraint on the natural key.
    pub fn create_sql(&self) -> String {
        let own = [
            // NULL until `apply_once` first records an op: an empty list would cost each row.
            format!("{} TEXT", quote(APPLIED_OPS_FIELD)),
            format!("{} TEXT", quote(WRITE_MARKER_FIELD)),
        ];
        self.create_table(&own, false, "")
    }

    /// Every column the table must have, with its declared type.
    pub fn expected_columns(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.columns
            .iter()
            .map(|column| (column.name, sql_type(column)))
            .chain([(APPLIED_OPS_FIELD, "TEXT"), (WRITE_MARKER_FIELD, "TEXT")])
    }
}
