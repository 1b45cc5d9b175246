//! The text a column is sent for a value, or what the column expects of it.

use std::fmt;

use serde_json::Value;

use crate::column::ColumnShape;
use crate::sql::layout::TableColumn;

/// The text sent for `value` (`None`: serde left the field out) in `column`, or what the column
/// expects if `value` is of another kind. Absent values are NULL, and so are nulls, but in a
/// `jsonb` column where NULL reads back as absent: there a null is JSON `null`, so that it reads
/// back as the null serde wrote, not as the field's default.
pub(crate) fn column_text(
    column: &TableColumn,
    value: Option<&Value>,
) -> Result<Option<String>, &'static str> {
    let mut text = String::new();
    Ok(write_column_text(column, value, &mut text)?.then_some(text))
}

/// Writes the text [`column_text`] sends for `value` to `out`, and says whether there is one
/// (`false`: NULL, and nothing written), or what the column expects.
pub(crate) fn write_column_text(
    column: &TableColumn,
    value: Option<&Value>,
    out: &mut impl fmt::Write,
) -> Result<bool, &'static str> {
    let Some(value) = value else {
        return Ok(false);
    };
    // Writing to a `String` or to nothing cannot fail.
    let _ = match (column.shape, value) {
        (ColumnShape::Structured, Value::Null) if column.null_is_absent => out.write_str("null"),
        (_, Value::Null) => return Ok(false),
        (ColumnShape::Text, Value::String(text)) => out.write_str(text),
        (ColumnShape::Text, _) => return Err("text"),
        (ColumnShape::Integer, Value::Number(number)) => {
            let number = number.as_i64().ok_or("an integer in i64's range")?;
            write!(out, "{number}")
        }
        (ColumnShape::Integer, _) => return Err("an integer"),
        (ColumnShape::Float, Value::Number(number)) => write!(out, "{number}"),
        (ColumnShape::Float, _) => return Err("a number"),
        (ColumnShape::Boolean, Value::Bool(flag)) => write!(out, "{flag}"),
        (ColumnShape::Boolean, _) => return Err("a boolean"),
        _ => write!(out, "{value}"),
    };
    Ok(true)
}

/// A text written nowhere: where only whether a value has a column's text matters.
pub(crate) struct Discard;

impl fmt::Write for Discard {
    fn write_str(&mut self, _text: &str) -> fmt::Result {
        Ok(())
    }
}
