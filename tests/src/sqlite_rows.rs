//! Reading and writing SQLite rows as the tests see them, without idem: each row's values by
//! the types SQLite stored them as, and rows written as another tool writes them.

use idem_core::sqlx::{self, Column, Row, SqliteConnection, TypeInfo, ValueRef};
use idem_core::Idempotent;
use serde_json::{Map, Value};

/// A quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `bytes` as lowercase hex digits.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Each row of `collection` in `_id` order, as its columns' names and stored values (SQLite's
/// own types: integers, reals, text, NULL); empty if there is no such table.
pub async fn rows(
    connection: &mut SqliteConnection,
    collection: &str,
) -> Vec<Vec<(String, Value)>> {
    let sql = format!("SELECT * FROM {} ORDER BY \"_id\"", quoted(collection));
    let rows = match sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut *connection)
        .await
    {
        Ok(rows) => rows,
        Err(error) if error.to_string().contains("no such table") => return Vec::new(),
        Err(error) => panic!("sqlite: reading back {collection}: {error}"),
    };
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|index| {
                    let name = row.column(index).name().to_owned();
                    let raw = row.try_get_raw(index).expect("a column");
                    // A NULL's type is the column's declared one: asked first.
                    let value = match raw.type_info().name() {
                        _ if raw.is_null() => Value::Null,
                        "INTEGER" => Value::from(row.get::<i64, _>(index)),
                        "REAL" => serde_json::Number::from_f64(row.get::<f64, _>(index))
                            .map_or(Value::Null, Value::Number),
                        // The content hash's and `idemFrozen`'s bytes, as the hex text idem reads them as.
                        "BLOB" => Value::from(hex(&row.get::<Vec<u8>, _>(index))),
                        _ => Value::from(row.get::<String, _>(index)),
                    };
                    (name, value)
                })
                .collect()
        })
        .collect()
}

/// What `T`'s table holds exactly, one line per row in `_id` order, with the write marker
/// every statement of idem's sets anew: equal before and after a call, nothing was written.
pub async fn raw<T: Idempotent>(connection: &mut SqliteConnection) -> Vec<String> {
    rows(connection, T::MODEL.collection())
        .await
        .into_iter()
        .map(|row| serde_json::to_string(&row).expect("a row as JSON"))
        .collect()
}

/// The stored fields of each row of `T`, in `_id` order, as serde wrote them
/// ([`crate::sql_rows::documents`]).
pub async fn stored<T: Idempotent>(connection: &mut SqliteConnection) -> Vec<Map<String, Value>> {
    crate::sql_rows::documents::<T>(rows(connection, T::MODEL.collection()).await)
}

/// Replaces the row under `id` with `entries`, as a tool that knows nothing of idem writes it
/// ([`crate::sql_rows::another_tools_row`]).
pub async fn write_as_another_tool<T: Idempotent>(
    connection: &mut SqliteConnection,
    id: &str,
    entries: Map<String, Value>,
) {
    let table = quoted(T::MODEL.collection());
    let row = crate::sql_rows::another_tools_row::<T>(id, entries);
    let delete = format!("DELETE FROM {table} WHERE \"_id\" = ?1");
    sqlx::query(sqlx::AssertSqlSafe(delete))
        .bind(id)
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("sqlite: deleting as another tool: {error}"));
    let names: Vec<String> = row.keys().map(|name| quoted(name)).collect();
    let placeholders: Vec<String> = (1..=row.len()).map(|at| format!("?{at}")).collect();
    let insert = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        names.join(", "),
        placeholders.join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
    for value in row.values() {
        query = match value {
            Value::Null => query.bind(None::<String>),
            Value::Bool(flag) => query.bind(*flag),
            Value::Number(number) => match number.as_i64() {
                Some(integer) => query.bind(integer),
                None => query.bind(number.as_f64()),
            },
            Value::String(text) => query.bind(text.clone()),
            nested => query.bind(nested.to_string()),
        };
    }
    query
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("sqlite: writing as another tool: {error}"));
}

/// Runs `sql`, a change another tool makes.
pub async fn run(connection: &mut SqliteConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("sqlite: running {sql}: {error}"));
}

/// The content hash the row `id` of `T` is stored with.
pub async fn stored_content_hash<T: Idempotent>(
    connection: &mut SqliteConnection,
    id: &str,
) -> Option<String> {
    let model = &T::MODEL;
    let sql = format!(
        "SELECT nullif(lower(hex({})), '') FROM {} WHERE \"_id\" = ?1",
        quoted(model.hash_field()),
        quoted(model.collection())
    );
    sqlx::query_scalar::<_, Option<String>>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(&mut *connection)
        .await
        .unwrap_or_else(|error| panic!("sqlite: reading {id} back: {error}"))
}
