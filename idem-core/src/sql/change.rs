//! The changes of an `apply_once` as a SQL store sends them: each effect column's new value as
//! text, set or added to the stored one, refused before anything is sent when the column cannot
//! hold it. The statement around them is each dialect's.

use super::layout::{Layout, TableColumn};
use super::row::column_text;
use crate::change::{self, Change, ChangeKind, SqlValue};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::sql::json;

/// One change, encoded: the column it changes, its value as text, and whether the value is
/// added to the stored one (`COALESCE(column, 0) + value`) or replaces it.
pub(crate) struct EncodedChange<'t> {
    pub column: &'t TableColumn,
    pub value: Option<String>,
    pub adds: bool,
}

/// Encodes `changes` for `table`, whose columns' types `sql_type` names (in messages); a value
/// only a float column holds (NaN, an infinity) goes to a float column alone. Refuses, naming
/// the document and the field, a change to a column that is not an effect field, an addition to
/// one that is no number, and a value its column cannot hold.
pub(crate) fn encode<'t>(
    table: &'t Layout,
    changes: &[Change],
    document: &DocumentRef,
    sql_type: fn(&TableColumn) -> &'static str,
) -> Result<Vec<EncodedChange<'t>>, Error> {
    let model = table.model;
    let refuse = |path: &str| {
        Error::new(
            document.clone(),
            ErrorKind::NotAnEffectField {
                path: path.to_owned(),
            },
        )
    };
    let serialize_error =
        |message: String| Error::new(document.clone(), ErrorKind::Serialize { message });
    let mut encoded = Vec::with_capacity(changes.len());
    for change in changes {
        let field = model
            .effect_fields()
            .find(|field| field.stored_name() == change.field)
            .ok_or_else(|| refuse(change.field))?;
        let column = table
            .column_of(field)
            .map(|index| &table.columns[index])
            .ok_or_else(|| refuse(change.field))?;
        let (value, adds) = match &change.kind {
            ChangeKind::Add(amount)
                if matches!(column.shape, ColumnShape::Integer | ColumnShape::Float) =>
            {
                (Some(amount.to_string()), true)
            }
            ChangeKind::Add(_) => {
                return Err(serialize_error(format!(
                    "cannot add to column {:?}, which is {}",
                    column.name,
                    sql_type(column)
                )))
            }
            ChangeKind::Invalid(problem) => {
                return Err(change::invalid(document, change.field, problem))
            }
            ChangeKind::Set(value) => match &value.json {
                SqlValue::Json(value) => (
                    column_text(column, Some(value)).map_err(|expected| {
                        serialize_error(format!(
                            "column {:?} holds {expected}, not {value}",
                            column.name
                        ))
                    })?,
                    false,
                ),
                SqlValue::NonFinite(float) if column.shape == ColumnShape::Float => {
                    (Some(json::show_float(*float)), false)
                }
                SqlValue::NonFinite(float) => {
                    return Err(serialize_error(format!(
                        "column {:?} is {}, which cannot hold {}: only a float column holds NaN \
                         and the infinities",
                        column.name,
                        sql_type(column),
                        json::show_float(*float)
                    )))
                }
                SqlValue::Invalid(problem) => {
                    return Err(change::invalid(document, change.field, problem))
                }
            },
        };
        encoded.push(EncodedChange {
            column,
            value,
            adds,
        });
    }
    Ok(encoded)
}
