//! What the SQL stores' row readers and writers in the tests share, beside their drivers'
//! reads ([`crate::sqlite_rows`], [`crate::mysql_rows`]): a stored row turned back into the
//! fields serde wrote, and the row another tool writes.

use idem_core::{ColumnShape, Idempotent};
use serde_json::{Map, Value};

/// The stored fields of each of `rows` (a table of `T`, as its columns' names and values), as
/// serde wrote them: booleans, floats and nested values read back by their columns' shapes, a
/// flattened field's entries beside the others, with `_id`, without idem's own columns and
/// without nulls.
pub fn documents<T: Idempotent>(rows: Vec<Vec<(String, Value)>>) -> Vec<Map<String, Value>> {
    let model = &T::MODEL;
    let columns = T::stored_columns();
    let shape = |name: &str| {
        columns
            .iter()
            .find(|column| column.stored_name() == name)
            .map(|column| column.shape())
    };
    rows.into_iter()
        .map(|row| {
            let mut document = Map::new();
            for (name, value) in row {
                if name == idem_core::model::EXTRA_FIELDS_FIELD {
                    if let Some(Value::Object(extra)) = value
                        .as_str()
                        .and_then(|text| serde_json::from_str(text).ok())
                    {
                        document.extend(extra);
                    }
                    continue;
                }
                let own = name != "_id"
                    && (name == model.hash_field()
                        || idem_core::model::RESERVED_FIELDS.contains(&name.as_str()));
                if own || value.is_null() {
                    continue;
                }
                let value = match (shape(&name), value) {
                    (Some(ColumnShape::Boolean), Value::Number(flag)) => {
                        Value::Bool(flag.as_i64() != Some(0))
                    }
                    (Some(ColumnShape::Structured), Value::String(text)) => {
                        serde_json::from_str(&text).unwrap_or(Value::String(text))
                    }
                    // A float's text: a number, or the text of NaN or an infinity as it is.
                    (Some(ColumnShape::Float), Value::String(text)) => text
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map_or(Value::String(text), Value::Number),
                    (_, value) => value,
                };
                if !value.is_null() {
                    document.insert(name, value);
                }
            }
            document
        })
        .collect()
}

/// The row under `id` holding `entries`, as a tool that knows nothing of idem writes it: no
/// hash, digests or version key; op ids and pushed lists empty; the entries no column holds (a
/// flattened field's) where idem keeps them. Nested values stay JSON values: PostgreSQL's
/// columns take them as `jsonb`, SQLite's and MariaDB's as their JSON text.
pub fn another_tools_row<T: Idempotent>(
    id: &str,
    entries: Map<String, Value>,
) -> Map<String, Value> {
    let columns: Vec<&'static str> = T::stored_columns()
        .iter()
        .filter(|column| column.shape() != ColumnShape::Flattened)
        .map(|column| column.stored_name())
        .collect();
    let (mut row, extra): (Map<String, Value>, Map<String, Value>) = entries
        .into_iter()
        .partition(|(name, _)| columns.contains(&name.as_str()));
    row.insert(idem_core::model::ID_FIELD.to_owned(), Value::from(id));
    row.insert(
        idem_core::model::APPLIED_OPS_FIELD.to_owned(),
        Value::Array(Vec::new()),
    );
    for field in T::MODEL.pushed_fields() {
        let list = row
            .entry(field.stored_name())
            .or_insert(Value::Array(Vec::new()));
        if list.is_null() {
            *list = Value::Array(Vec::new());
        }
    }
    if !extra.is_empty() {
        row.insert(
            idem_core::model::EXTRA_FIELDS_FIELD.to_owned(),
            Value::Object(extra),
        );
    }
    row
}
