//! Typed reads of a SQL store: a row by id or by natural key, as its type.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::dialect::SqlDialect;
use super::wire::{Cells, DbFailure, Param, Wire};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::sql::json::{self, Cell};
use crate::sql::layout::{Content, Layout};
use crate::sql::row::{value_from_text, StoredRow};

/// The stored columns of `table` (and a flattened field's entries), each as the dialect reads
/// it ([`SqlDialect::read_of`]), for [`row_from_texts`]; and which columns they are.
pub(crate) fn select_row_columns<D: SqlDialect>(
    table: &D::Table,
    alias: &str,
) -> (String, Vec<usize>) {
    let columns: Vec<usize> = (0..table.columns.len())
        .filter(|&index| {
            matches!(
                table.columns[index].content,
                Content::Stored(_) | Content::Extra
            )
        })
        .collect();
    let list: Vec<String> = columns
        .iter()
        .map(|&index| D::read_of(table, alias, table.columns[index].name))
        .collect();
    (list.join(", "), columns)
}

/// A row's stored fields, read as text, as serde reads them: NULL where serde may do without
/// the field as absent, any other NULL as null, a flattened field's entries beside the others.
pub(crate) fn row_from_texts<T: DeserializeOwned>(
    table: &Layout,
    columns: &[usize],
    texts: Vec<Option<String>>,
) -> Result<T, String> {
    let mut cells = Vec::with_capacity(texts.len());
    for (&index, text) in columns.iter().zip(texts) {
        let column = &table.columns[index];
        match (column.content, text) {
            (Content::Extra, Some(text)) => {
                if let Ok(Value::Object(entries)) = serde_json::from_str::<Value>(&text) {
                    cells.extend(
                        entries
                            .into_iter()
                            .map(|(name, value)| (name, Cell::Json(value))),
                    );
                }
            }
            (Content::Extra, None) => {}
            (_, None) if column.null_is_absent => {}
            (_, None) => cells.push((column.name.to_owned(), Cell::Json(Value::Null))),
            (_, Some(text)) if column.shape == ColumnShape::Float => {
                let cell = match text.parse::<f64>() {
                    Ok(float) => Cell::Float(float),
                    Err(_) => Cell::Json(Value::String(text)),
                };
                cells.push((column.name.to_owned(), cell));
            }
            (_, Some(text)) => cells.push((
                column.name.to_owned(),
                Cell::Json(value_from_text(column.shape, &text)),
            )),
        }
    }
    json::from_cells(cells)
}

/// Reads the row of `table` (aliased `t`) meeting `condition` (over `?` parameters `values`)
/// as `T`.
pub(crate) async fn read_one<D: SqlDialect, T: DeserializeOwned>(
    wire: &impl Wire,
    table: &D::Table,
    condition: &str,
    values: &[Param<'_>],
    document: DocumentRef,
) -> Result<Option<T>, Error> {
    let (list, columns) = select_row_columns::<D>(table, "t");
    let name = D::quote(table.model.collection());
    let sql = format!("SELECT {list} FROM {name} t WHERE {condition}");
    crate::trace::round_trip("SELECT");
    let Some(row) = wire
        .fetch_optional(&sql, values)
        .await
        .map_err(|source| D::error(&document, source))?
    else {
        return Ok(None);
    };
    let texts: Vec<Option<String>> = (0..columns.len())
        .map(|index| row.text(index))
        .collect::<Result<_, _>>()
        .map_err(|source| D::error(&document, source))?;
    row_from_texts(table, &columns, texts)
        .map(Some)
        .map_err(|message| Error::new(document, ErrorKind::Deserialize { message }))
}

/// The stored row in `row`'s columns from `at` to the last, as every SQL driver's statements
/// return a row they met: its stored state ([`Layout::stored_state_columns`]: the id first, then
/// whether it is deleted, …), then its natural-key columns as text.
pub(crate) fn stored_row<R: Cells>(
    row: &R,
    at: usize,
    table: &Layout,
) -> Result<StoredRow, DbFailure> {
    let keys = table.model.natural_key_fields().count();
    let mut texts = Vec::with_capacity(row.len() - at);
    for index in at..row.len() {
        texts.push(match index - at {
            1 => None,
            _ => row.text(index)?,
        });
    }
    let tombstoned = row.boolean(at + 1)?.unwrap_or(false);
    let mut stored = StoredRow::from_texts(table.model, &texts[..texts.len() - keys], tombstoned);
    stored.natural_key = Some(texts[texts.len() - keys..].to_vec());
    Ok(stored)
}
