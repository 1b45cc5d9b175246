//! Stored values read back from their columns' texts as the JSON values serde wrote, and a
//! stored row read back as its type.

use serde_json::Value;

use crate::column::ColumnShape;
use crate::model::Field;
use crate::sql::json::{self, Cell};
use crate::sql::layout::{Content, Layout};

/// The shape of `field`'s column.
pub(crate) fn shape_of(table: &Layout, field: &Field) -> ColumnShape {
    table
        .column_of(field)
        .map_or(ColumnShape::Structured, |index| table.columns[index].shape)
}

/// A stored value, read back as text from its column, as the JSON value serde wrote (a
/// non-finite float, which JSON cannot hold, as the text PostgreSQL wrote).
pub(crate) fn stored_value(table: &Layout, field: &Field, text: &str) -> Value {
    value_from_text(shape_of(table, field), text)
}

/// A column's value of `shape`, read back as text, as the JSON value serde wrote (a
/// non-finite float, which JSON cannot hold, as its text).
pub(crate) fn value_from_text(shape: ColumnShape, text: &str) -> Value {
    let parsed = match shape {
        ColumnShape::Text => return Value::from(text),
        ColumnShape::Integer => text.parse::<i64>().ok().map(Value::from),
        ColumnShape::Float => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        // Any other text is no boolean: it stays text, which a `bool` does not read.
        ColumnShape::Boolean => match text {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => serde_json::from_str(text).ok(),
    };
    parsed.unwrap_or_else(|| Value::from(text))
}

/// A row of `table`, its columns as JSON (PostgreSQL's `to_jsonb` of the row, SQLite's values by
/// their shapes), read as `T`: the one reading of `get`, `find`, the audit and the adoption.
pub(crate) fn row_as<T: serde::de::DeserializeOwned>(
    table: &Layout,
    stored: serde_json::Map<String, Value>,
) -> Result<T, String> {
    json::from_cells(row_cells(table, stored))
}

/// The stored fields of a row as serde reads them: idem's own columns left out, the entries of
/// flattened fields back beside the others, a column the row left out (NULL where
/// serde may do without the field, [`Column::may_be_absent`](crate::Column::may_be_absent)) as
/// absent, any other NULL as null, and NaN and the infinities as floats (held as their text).
fn row_cells(table: &Layout, stored: serde_json::Map<String, Value>) -> Vec<(String, Cell)> {
    let mut cells = Vec::with_capacity(stored.len());
    for (name, value) in stored {
        let Some(column) = table.column_named(&name).map(|index| &table.columns[index]) else {
            // A column the model does not know (added by a migration): not the type's.
            continue;
        };
        match (column.content, column.shape, value) {
            (Content::Extra, _, Value::Object(extra)) => {
                cells.extend(
                    extra
                        .into_iter()
                        .map(|(name, value)| (name, Cell::Json(value))),
                );
            }
            (Content::Stored(_), ColumnShape::Float, Value::String(text)) => {
                match text.parse::<f64>() {
                    Ok(float) => cells.push((name, Cell::Float(float))),
                    Err(_) => cells.push((name, Cell::Json(Value::String(text)))),
                }
            }
            (Content::Stored(_), _, value) => cells.push((name, Cell::Json(value))),
            // The id, the hash, the digests, the version key and the op ids are idem's.
            _ => {}
        }
    }
    cells
}
