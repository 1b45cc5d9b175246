//! Reading and writing MariaDB rows as the tests see them, without idem: each row's values by
//! the types of their columns, and rows written as another tool writes them. Identifiers are
//! quoted with backticks, MariaDB's own quotes (a double quote is a string's unless the session's
//! `sql_mode` has `ANSI_QUOTES`).

use idem_core::sqlx::{self, Column, MySqlConnection, Row, TypeInfo, ValueRef};
use idem_core::{ColumnShape, Idempotent};
use serde_json::{Map, Value};

/// A quoted MariaDB identifier.
pub fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Whether `error` is MariaDB's "table doesn't exist" (error 1146, SQLSTATE 42S02).
fn is_missing_table(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(error) => error.code().as_deref() == Some("42S02"),
        _ => false,
    }
}

/// The value of column `index` of `row` by its column's type: integers and floats as numbers
/// (a non-finite float as its name, which no JSON number holds), every other type as its text.
fn value(row: &sqlx::mysql::MySqlRow, index: usize) -> Value {
    let raw = row.try_get_raw(index).expect("a column");
    if raw.is_null() {
        return Value::Null;
    }
    let name = raw.type_info().name().to_owned();
    let failed = |error: sqlx::Error| -> Value {
        panic!(
            "mariadb: column {} ({name}): {error}",
            row.column(index).name()
        )
    };
    match name.as_str() {
        "BOOLEAN" | "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" => row
            .try_get_unchecked::<i64, _>(index)
            .map_or_else(failed, Value::from),
        unsigned if unsigned.ends_with("UNSIGNED") => row
            .try_get_unchecked::<u64, _>(index)
            .map_or_else(failed, Value::from),
        "FLOAT" | "DOUBLE" => {
            let float = row
                .try_get_unchecked::<f64, _>(index)
                .unwrap_or_else(|error| panic!("mariadb: a float: {error}"));
            match serde_json::Number::from_f64(float) {
                Some(number) => Value::Number(number),
                None if float.is_nan() => Value::from("NaN"),
                None if float > 0.0 => Value::from("Infinity"),
                None => Value::from("-Infinity"),
            }
        }
        _ => match row.try_get_unchecked::<String, _>(index) {
            Ok(text) => Value::from(text),
            // Bytes that are no UTF-8 (a binary column), shown as hex.
            Err(_) => hex_of(row, index),
        },
    }
}

/// The bytes of column `index` of `row` as hex (the content hash's, as idem reads it).
fn hex_of(row: &sqlx::mysql::MySqlRow, index: usize) -> Value {
    let bytes = row
        .try_get_unchecked::<Vec<u8>, _>(index)
        .unwrap_or_else(|error| panic!("mariadb: a column's bytes: {error}"));
    Value::from(
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>(),
    )
}

/// Each row of `collection` in `_id` order, as its columns' names and stored values (by their
/// columns' types: integers, floats, text, NULL); empty if there is no such table.
pub async fn rows(connection: &mut MySqlConnection, collection: &str) -> Vec<Vec<(String, Value)>> {
    let sql = format!(
        "SELECT * FROM {} ORDER BY {}",
        quoted(collection),
        quoted(idem_core::model::ID_FIELD)
    );
    let rows = match sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut *connection)
        .await
    {
        Ok(rows) => rows,
        Err(error) if is_missing_table(&error) => return Vec::new(),
        Err(error) => panic!("mariadb: reading back {collection}: {error}"),
    };
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|index| (row.column(index).name().to_owned(), value(row, index)))
                .collect()
        })
        .collect()
}

/// What `T`'s table holds exactly, one line per row in `_id` order, with the write marker
/// every statement of idem's sets anew: equal before and after a call, nothing was written.
pub async fn raw<T: Idempotent>(connection: &mut MySqlConnection) -> Vec<String> {
    rows(connection, T::MODEL.collection())
        .await
        .into_iter()
        .map(|row| serde_json::to_string(&row).expect("a row as JSON"))
        .collect()
}

/// The stored fields of each row of `T`, in `_id` order, as serde wrote them
/// ([`crate::sql_rows::documents`]).
pub async fn stored<T: Idempotent>(connection: &mut MySqlConnection) -> Vec<Map<String, Value>> {
    crate::sql_rows::documents::<T>(rows(connection, T::MODEL.collection()).await)
}

/// Replaces the row under `id` with `entries`, as a tool that knows nothing of idem writes it
/// ([`crate::sql_rows::another_tools_row`]).
pub async fn write_as_another_tool<T: Idempotent>(
    connection: &mut MySqlConnection,
    id: &str,
    entries: Map<String, Value>,
) {
    let table = quoted(T::MODEL.collection());
    let row = crate::sql_rows::another_tools_row::<T>(id, entries);
    let delete = format!(
        "DELETE FROM {table} WHERE {} = ?",
        quoted(idem_core::model::ID_FIELD)
    );
    sqlx::query(sqlx::AssertSqlSafe(delete))
        .bind(id)
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("mariadb: deleting as another tool: {error}"));
    let names: Vec<String> = row.keys().map(|name| quoted(name)).collect();
    let placeholders = vec!["?"; row.len()];
    let insert = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        names.join(", "),
        placeholders.join(", ")
    );
    // A nested value's column holds JSON text (MariaDB checks it is valid JSON): a string there
    // is written as JSON's, quoted.
    let structured: Vec<&'static str> = T::stored_columns()
        .iter()
        .filter(|column| column.shape() == ColumnShape::Structured)
        .map(|column| column.stored_name())
        .chain(T::MODEL.pushed_fields().map(|field| field.stored_name()))
        .collect();
    // A float's column holds its text (a `DOUBLE` made by hand reads the text as the float):
    // JSON's, the shortest that reads back as the very float.
    let floats: Vec<&'static str> = T::stored_columns()
        .iter()
        .filter(|column| column.shape() == ColumnShape::Float)
        .map(|column| column.stored_name())
        .collect();
    let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
    for (name, value) in &row {
        query = match value {
            Value::Null => query.bind(None::<String>),
            json if structured.contains(&name.as_str()) => query.bind(json.to_string()),
            Value::Number(number) if floats.contains(&name.as_str()) => {
                query.bind(number.to_string())
            }
            Value::Bool(flag) => query.bind(*flag),
            Value::Number(number) => match (number.as_i64(), number.as_u64()) {
                (Some(integer), _) => query.bind(integer),
                (None, Some(unsigned)) => query.bind(unsigned),
                (None, None) => query.bind(number.as_f64()),
            },
            Value::String(text) => query.bind(text.clone()),
            nested => query.bind(nested.to_string()),
        };
    }
    query
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("mariadb: writing as another tool: {error}"));
}

/// Runs `sql` (one statement or several, separated by `;`), a change another tool makes.
pub async fn run(connection: &mut MySqlConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("mariadb: running {sql}: {error}"));
}

/// The content hash the row `id` of `T` is stored with.
pub async fn stored_content_hash<T: Idempotent>(
    connection: &mut MySqlConnection,
    id: &str,
) -> Option<String> {
    let model = &T::MODEL;
    let sql = format!(
        "SELECT LOWER(HEX({})) FROM {} WHERE {} = ?",
        quoted(model.hash_field()),
        quoted(model.collection()),
        quoted(idem_core::model::ID_FIELD)
    );
    sqlx::query_scalar::<_, Option<String>>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("mariadb: reading {id} back: {error}"))
        .unwrap_or_else(|| panic!("mariadb: no row {id} in {}", model.collection()))
}
