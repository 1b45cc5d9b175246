//! A type's MySQL-family table: its columns' declared types, the DDL that creates it, and the
//! statements idem sends to it, over the marker dialects' shared
//! [`Table`](crate::sql::marker_table::Table) in the MySQL family's words.
//!
//! Parameters are anonymous (`?`), each bound once, in the order they appear; a batch is cut
//! into chunks under the 65,535 a prepared statement may hold. There is no alias for the row
//! an upsert inserts: `VALUES(col)` names its value, a bare column the stored one.

use crate::column::ColumnShape;
use crate::model::{Field, Role, APPLIED_OPS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
use crate::sql::guard::{upsert_guard, GuardWords};
use crate::sql::layout::{Content, Layout, TableColumn};
use crate::sql::marker_sql::{parameter_rows, Words};
use crate::sql::marker_table::MarkerWords;

/// The collation that compares text byte for byte (NO PAD: `utf8mb4_bin` ignores trailing
/// spaces). MariaDB's; MySQL 8 and TiDB name theirs `utf8mb4_0900_bin`.
pub(crate) const BYTEWISE: &str = "utf8mb4_nopad_bin";

/// The bytes InnoDB's B-tree index key may hold (16 KiB pages, `DYNAMIC` rows).
const KEY_BYTES: usize = 3_072;

/// The longest text key column, in characters, where the key leaves room.
const KEY_CHARS: usize = 255;

/// The boolean column expression `column` (a MySQL-family `BOOLEAN`, which holds integers) as
/// `true` or `false`, as a column of any type reads.
fn boolean_text(column: &str) -> String {
    format!("(CASE WHEN {column} IS NULL THEN NULL WHEN {column} THEN 'true' ELSE 'false' END)")
}

/// How the MySQL family writes the words of the statements' shared parts and of the guard.
pub(crate) const WORDS: Words = Words {
    quote,
    literal,
    same: "<=>",
    never_deleted: "0",
    text_cast: "",
    false_literal: "0",
    bytewise: BYTEWISE,
    // Not `COLLATE`, which a column of another character set refuses.
    byte_order: |column| format!("CAST({column} AS BINARY)"),
    distinct: |stored, incoming| format!("NOT ({stored} <=> {incoming})"),
    from_hex: |hex| format!("UNHEX({hex})"),
    to_hex: |bytes| format!("LOWER(HEX({bytes}))"),
};

/// How the MySQL family's guard names the rows, in its [`WORDS`]: there is no alias for the row
/// an upsert inserts, so the stored row's columns are bare and the incoming row's `VALUES(col)`.
struct Guard;

impl GuardWords for Guard {
    fn words(&self) -> &Words {
        &WORDS
    }

    fn stored(&self, column: &str) -> String {
        column.to_owned()
    }

    fn incoming(&self, column: &str) -> String {
        format!("VALUES({column})")
    }
}

/// A quoted identifier.
pub(crate) fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A quoted string literal (a backslash escapes unless `NO_BACKSLASH_ESCAPES`: doubled).
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The JSON path of the top-level entry `name`, as a literal.
pub(crate) fn json_path(name: &str) -> String {
    WORDS.json_path(name)
}

/// Whether a column holds a natural or idempotency key.
fn is_key(column: &TableColumn) -> bool {
    matches!(column.role(), Some(Role::Key | Role::IdempotencyKey))
}

/// The name of a column's type, in messages.
pub(crate) fn type_name(column: &TableColumn) -> &'static str {
    match (column.content, column.shape) {
        (Content::Hash, _) => "BINARY(32)",
        (Content::Id | Content::VersionKey, _) | (_, ColumnShape::Text) => "text",
        (Content::Digests, _) => "VARBINARY(16)",
        (Content::Extra, _) => "JSON",
        (_, ColumnShape::Integer) => "BIGINT",
        (_, ColumnShape::Boolean) => "BOOLEAN",
        (_, ColumnShape::Float) => "DOUBLE",
        (_, ColumnShape::Structured | ColumnShape::Flattened) => "JSON",
    }
}

/// The `DATA_TYPE`s `information_schema` may give a column idem's writes can use: MariaDB's
/// `JSON` is `LONGTEXT`, MySQL's its own type.
pub(crate) fn data_types(column: &TableColumn) -> &'static [&'static str] {
    match (column.content, column.shape) {
        (Content::Hash, _) => &["binary"],
        (Content::Id | Content::VersionKey, _) => &["varchar", "char"],
        (Content::Digests, _) => &["varbinary"],
        // A `CHAR` drops trailing spaces as it reads: "x " would be read back as "x".
        (_, ColumnShape::Text) if is_key(column) => &["varchar"],
        (_, ColumnShape::Text) => &["longtext", "mediumtext", "text", "varchar"],
        (_, ColumnShape::Integer) => &["bigint"],
        (_, ColumnShape::Boolean) => &["tinyint"],
        (_, ColumnShape::Float) => &["double"],
        _ => &["longtext", "json"],
    }
}

/// The shape of a column of `DATA_TYPE` `declared` (upper case): what a model given at run
/// time reads it as (MariaDB's `JSON`, a `LONGTEXT`, named `JSON` by the catalog read; a
/// `BOOLEAN`, a `TINYINT(1)`, named `BOOLEAN` by it, as sqlx reads its cells: any other
/// `TINYINT` holds integers).
pub(crate) fn shape_of(declared: &str) -> ColumnShape {
    match declared {
        "BOOLEAN" => ColumnShape::Boolean,
        "BIGINT" | "INT" | "MEDIUMINT" | "SMALLINT" | "TINYINT" => ColumnShape::Integer,
        "DOUBLE" | "FLOAT" | "DECIMAL" => ColumnShape::Float,
        "JSON" => ColumnShape::Structured,
        _ => ColumnShape::Text,
    }
}

/// The length of a text natural-key column of `layout`: the key's index within [`KEY_BYTES`].
fn key_chars(layout: &Layout) -> usize {
    let keys = layout.columns.iter().filter(|column| is_key(column));
    let (texts, fixed) = keys.fold((0, 0), |(texts, fixed), column| match column.shape {
        ColumnShape::Text => (texts + 1, fixed),
        ColumnShape::Boolean => (texts, fixed + 1),
        _ => (texts, fixed + 8),
    });
    // Four bytes a character in utf8mb4.
    let key_chars = KEY_BYTES.saturating_sub(fixed) / (4 * texts).max(1);
    key_chars.clamp(1, KEY_CHARS)
}

/// A type's MySQL-family table and the parts of the statements idem sends to it.
pub(crate) type Table = crate::sql::marker_table::Table<super::MySql>;

impl MarkerWords for super::MySql {
    const WORDS: Words = WORDS;
    /// The 65,535 a prepared statement may hold, less the update's marker.
    const ROW_PARAMETERS: usize = 65_535 - 1;
    const INSERT_ALIAS: &'static str = "";
    const FRESH_INSERT: &'static str = "INSERT INTO";

    fn declared(table: &Table, column: &TableColumn) -> String {
        let text = |length: usize| {
            format!("VARCHAR({length}) CHARACTER SET utf8mb4 COLLATE {BYTEWISE} NOT NULL")
        };
        match (column.content, column.shape) {
            (Content::Id, _) => text(26),
            // Its 32 bytes: fixed, as every hash has them, with no length to store.
            (Content::Hash, _) => "BINARY(32)".to_owned(),
            (Content::VersionKey, _) => text(32).replace(" NOT NULL", ""),
            (_, ColumnShape::Text) if is_key(column) => text(key_chars(table)),
            (_, ColumnShape::Text) => format!("LONGTEXT CHARACTER SET utf8mb4 COLLATE {BYTEWISE}"),
            // A `DOUBLE` holds neither NaN nor the infinities: a document holding one is refused
            // (1366, naming the column), where the other stores keep it.
            (_, ColumnShape::Float) => "DOUBLE".to_owned(),
            (_, _) if column.role() == Some(Role::Pushed) => "JSON NOT NULL DEFAULT '[]'".into(),
            _ => match type_name(column) {
                keyed if is_key(column) => format!("{keyed} NOT NULL"),
                other => other.to_owned(),
            },
        }
    }

    /// A boolean as `true` or `false` (its type would not survive a `UNION`), any other as
    /// stored.
    fn read_column(table: &Table, alias: &str, name: &str) -> String {
        let column = format!("{alias}.{}", quote(name));
        match table.shape_named(name) {
            Some(ColumnShape::Boolean) => boolean_text(&column),
            _ => column,
        }
    }

    /// The first assignment refuses a row met that is not this document's (`_id` set longer
    /// than it may be, which strict mode refuses); the second sets the write marker to the
    /// update's (the one parameter after the rows) where the row may be replaced; each later
    /// one replaces its column where the marker is the update's, which is the insert's with `u`
    /// for `i`.
    fn write_sql(table: &Table, statement: Statement, rows: usize) -> String {
        let marker = quote(WRITE_MARKER_FIELD);
        let id = quote(ID_FIELD);
        // As it is, the plain insert of fresh rows, which any stored id or key fails whole.
        let insert = table.insert_rows("INSERT INTO", statement, rows);
        let (condition, replaced): (String, Vec<&str>) = match statement {
            Statement::Upsert => (
                upsert_guard(table, &Guard),
                (table.columns.iter())
                    .filter(|column| column.is_replaced())
                    .map(|column| column.name)
                    .collect(),
            ),
            Statement::Delete => match table.model.tombstone_field() {
                Some(field) => (
                    format!("{} IS NULL", quote(field.stored_name())),
                    vec![field.stored_name()],
                ),
                None => ("0".to_owned(), Vec::new()),
            },
            // A row met is left as it is; which one it was, the read after says.
            Statement::InsertNew => return format!("{insert} ON DUPLICATE KEY UPDATE {id} = {id}"),
        };
        let mut same_row = vec![format!("{id} = VALUES({id})")];
        same_row.extend(
            table
                .natural_key_names()
                .into_iter()
                .map(|name| format!("{0} = VALUES({0})", quote(name))),
        );
        let updating = format!("{marker} <=> CONCAT('u', SUBSTRING(VALUES({marker}), 2))");
        // A row met that holds neither the id nor the natural key was met through another
        // unique index (MariaDB checks a long one, `USING HASH`, before the primary key): the
        // write fails on the id set longer than any `VARCHAR` (1406; a NULL would stay in an
        // `_id` without NOT NULL, adopt's), and the plain insert of the row names the index.
        let mut set = vec![format!(
            "{id} = IF({} OR {}, {id}, REPEAT('-', 65536))",
            same_row[0],
            match same_row[1..].join(" AND ") {
                none if none.is_empty() => "0".to_owned(),
                key => format!("({key})"),
            }
        )];
        set.push(format!(
            "{marker} = IF({} AND {condition}, ?, {marker})",
            same_row.join(" AND ")
        ));
        set.extend(
            replaced
                .into_iter()
                .map(|name| format!("{0} = IF({updating}, VALUES({0}), {0})", quote(name))),
        );
        format!("{insert} ON DUPLICATE KEY UPDATE {}", set.join(", "))
    }

    /// Two locking reads, each through its unique index, which see (and keep locked) the rows
    /// the write met, where a plain read would see the transaction's snapshot.
    fn select_stored_sql(table: &Table, rows: usize) -> String {
        let keys = table.natural_key_names();
        let mut selected = vec![format!("t.{}", quote(WRITE_MARKER_FIELD))];
        selected.extend(table.stored_row_columns("t"));
        let select = format!("SELECT {} FROM {} t", selected.join(", "), table.name());
        format!(
            "({select} WHERE t.{id} IN ({ids}) FOR UPDATE) UNION \
             ({select} WHERE ({key}) IN ({tuples}) FOR UPDATE)",
            id = quote(ID_FIELD),
            ids = vec!["?"; rows].join(", "),
            key = WORDS.key_list(table, "t."),
            tuples = parameter_rows(keys.len(), rows),
        )
    }

    /// A plain read, which takes no lock.
    ///
    /// The incoming rows are a `JSON_TABLE` over an array of one array per row, which reads text
    /// in the byte-for-byte collation and integers as `BIGINT`s, so that each comparison with a
    /// key column meets its index. Not a `VALUES` list: in a prepared statement MariaDB 10.11
    /// reads its parameters as empty strings (MDEV-35747). Nor rows joined by `UNION ALL`, which
    /// cost the server about twice as much for a chunk of 1,000 (10–15 ms against 5). The last
    /// row is the total row of `GROUP BY … WITH ROLLUP` over the incoming rows, so that they
    /// are read once: a `WITH` table named twice is parsed again for its second name, which
    /// made preparing the statement for a chunk of 1,000 cost 50–70 ms instead of 3. The row
    /// under the natural key is read only for an incoming row none is stored under the id of,
    /// as a re-ingest's rows all are.
    fn look_up_sql(table: &Table, rows: usize) -> Option<String> {
        let keys = table.natural_key_names();
        let contents = crate::sql::marker::compared_contents(table);
        let id = quote(ID_FIELD);
        let text = format!("LONGTEXT CHARACTER SET utf8mb4 COLLATE {BYTEWISE}");
        // The incoming rows' columns, in the order each row's values are bound. An id has 26
        // characters: as a `VARCHAR`, not a `LONGTEXT`, it groups in memory.
        let mut columns = vec![format!(
            "id VARCHAR(26) CHARACTER SET utf8mb4 COLLATE {BYTEWISE} PATH '$[0]'"
        )];
        columns.extend(
            (0..contents.len()).map(|at| format!("content{at} {text} PATH '$[{}]'", 1 + at)),
        );
        for (at, name) in keys.iter().enumerate() {
            let sql_type = match table.shape_named(name) {
                Some(ColumnShape::Integer | ColumnShape::Boolean) => "BIGINT",
                _ => text.as_str(),
            };
            columns.push(format!(
                "key{at} {sql_type} PATH '$[{}]'",
                1 + contents.len() + at
            ));
        }
        let key = |at: usize| format!("v.key{at}");
        let mut same = vec![format!("u.{id} IS NOT NULL")];
        let content = |at: usize| WORDS.compared_value(table, at, format!("v.content{at}"));
        same.extend(WORDS.stored_unchanged(table, key, content));
        let by_key = WORDS.holds_key(table, "f", key);
        let row = format!(
            "JSON_ARRAY({})",
            vec!["?"; 1 + contents.len() + keys.len()].join(", ")
        );
        // The total row (no id) holds the ids meeting none and the count of rows stored
        // unchanged where the others hold the stored id and whether the row is deleted.
        let state = table.stored_row_columns("s");
        let mut selected = vec![
            "r.i".to_owned(),
            format!(
                "CASE WHEN r.i IS NULL THEN r.meeting_none ELSE {} END",
                state[0]
            ),
            format!(
                "CASE WHEN r.i IS NULL THEN r.unchanged ELSE {} END",
                state[1]
            ),
        ];
        selected.extend(state.into_iter().skip(2));
        // `stopping`: '' (no id is empty) for a row stored unchanged, else the id of the row
        // it meets, else NULL.
        Some(format!(
            "SELECT {selected} FROM (SELECT k.i, MIN(k.stopping) AS stopping, \
             GROUP_CONCAT(CASE WHEN k.stopping IS NULL THEN k.i END SEPARATOR ',') \
             AS meeting_none, COUNT(CASE WHEN k.stopping = '' THEN 1 END) AS unchanged \
             FROM (SELECT v.id AS i, CASE WHEN {same} THEN '' ELSE COALESCE(u.{id}, \
             (SELECT f.{id} FROM {table} f WHERE {by_key})) END AS stopping \
             FROM JSON_TABLE(JSON_ARRAY({incoming}), '$[*]' COLUMNS ({columns})) v \
             LEFT JOIN {table} u ON u.{id} = v.id) k GROUP BY k.i WITH ROLLUP) r \
             LEFT JOIN {table} s ON r.i IS NOT NULL AND s.{id} = r.stopping \
             WHERE r.i IS NULL OR s.{id} IS NOT NULL",
            selected = selected.join(", "),
            table = table.name(),
            same = same.join(" AND "),
            incoming = vec![row.as_str(); rows].join(", "),
            columns = columns.join(", "),
        ))
    }

    /// Each sent column bound once, a column not replaced taking its own value back.
    fn pinned_sql(table: &Table) -> String {
        let (set, conditions) = table.pinned_parts(
            || "?".to_owned(),
            |name, placeholder, replaced| match replaced {
                true => Some(format!("t.{name} = {placeholder}")),
                false => Some(format!(
                    "t.{name} = IF({placeholder} IS NULL, t.{name}, t.{name})"
                )),
            },
            |name, placeholder| match table.shape_named(name) {
                // Text compared with an integer would be compared as a double.
                Some(ColumnShape::Integer) => {
                    format!("t.{} <=> CAST({placeholder} AS SIGNED)", quote(name))
                }
                _ => format!("{} <=> {placeholder}", table.read_of("t", name)),
            },
        );
        format!("UPDATE {} t SET {set} WHERE {conditions}", table.name())
    }

    fn mark_deleted_sql(table: &Table, tombstone: &Field) -> String {
        // The id comes first among the parameters, as the `SET` does not: the values are
        // joined as a row, in their order.
        format!(
            "UPDATE {table} t JOIN (SELECT ? AS i, ? AS m, ? AS w) p \
             ON t.{id} = p.i SET t.{tomb} = p.m, t.{marker} = p.w WHERE t.{tomb} IS NULL",
            table = table.name(),
            tomb = quote(tombstone.stored_name()),
            marker = quote(crate::model::WRITE_MARKER_FIELD),
            id = quote(ID_FIELD),
        )
    }
}

impl Table {
    /// `CREATE TABLE IF NOT EXISTS …`, its rows clustered on the natural key where they can be
    /// ([`Table::clustered`]): the primary key on it and a unique constraint on the id
    /// ([`Table::id_constraint`]). InnoDB keeps a table's rows in the order of its primary key,
    /// so that a random id there would scatter each write over the whole table. Otherwise the
    /// primary key on the id and the unique constraint on the natural key, as earlier releases
    /// made every table.
    pub fn create_sql(&self) -> String {
        let primary = match self.clustered() {
            true => self.natural_key_list(),
            false => quote(ID_FIELD),
        };
        let own = [
            // NULL until `apply_once` first records an op: an empty list would cost each row.
            format!("{} JSON", quote(APPLIED_OPS_FIELD)),
            format!(
                "{} VARCHAR(27) CHARACTER SET utf8mb4 COLLATE {BYTEWISE}",
                quote(WRITE_MARKER_FIELD)
            ),
            format!("PRIMARY KEY ({primary})"),
        ];
        let after = format!(" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={BYTEWISE}");
        self.create_table(&own, self.clustered(), &after)
    }

    /// Whether `ensure_table` clusters the rows on the natural key: whether each of its columns
    /// may be in a primary key, `NOT NULL` and whole, as a derived type's keys (text, integers,
    /// booleans) all are; not a model given at run time whose key column is a float (declared
    /// nullable) or `JSON` (whose unique index is a hash of it).
    pub(crate) fn clustered(&self) -> bool {
        let keys = self.columns.iter().filter(|column| is_key(column));
        keys.map(|column| column.shape).all(|shape| {
            matches!(
                shape,
                ColumnShape::Text | ColumnShape::Integer | ColumnShape::Boolean
            )
        })
    }
}
