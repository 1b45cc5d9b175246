//! Typed reads: a row by id or by natural key, as its type.

use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::SqliteConnection;

use super::errors::sqlite_error;
use super::table::{quote, Table};
use super::{bind_text, Store};
use crate::column::ColumnShape;
use crate::document::{DocumentRef, NaturalKey};
use crate::error::{Error, ErrorKind};
use crate::id::{Id, KeyValue};
use crate::idempotent::Idempotent;
use crate::model::ID_FIELD;
use crate::sql::json::{self, Cell};
use crate::sql::layout::Content;
use crate::sql::row::value_from_text;
use crate::trace::{Call, CallKind};

impl Store {
    /// The row stored under `id`, as `T`; `None` if none is. A deleted row is returned with its
    /// tombstone set; one that does not read as `T` is [`ErrorKind::Deserialize`].
    pub async fn get<T>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
    ) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let call = Call::new(CallKind::Get, T::MODEL.collection(), || Some(id));
        call.run_detached(async move {
            let document = DocumentRef::by_id(&T::MODEL, id);
            let table = self.table::<T>(connection, &document).await?;
            let condition = format!("t.{} = ?1", quote(ID_FIELD));
            let id_text = id.to_string();
            read_one(
                connection,
                &table,
                &condition,
                &[(ColumnShape::Text, id_text.as_str())],
                document,
            )
            .await
        })
        .await
    }

    /// The row stored under the natural key `key`, as `T`; `None` if none is.
    pub async fn find<T>(
        &self,
        connection: &mut SqliteConnection,
        key: &NaturalKey,
    ) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let call = Call::find(T::MODEL.collection(), key);
        call.run_detached(async move {
            let model = &T::MODEL;
            let document = DocumentRef::new(model, key.clone());
            if !key.fits(model, &T::stored_columns(), &document)? {
                return Ok(None);
            }
            let table = self.table::<T>(connection, &document).await?;
            let mut conditions = Vec::new();
            let mut texts = Vec::new();
            for (field, (_, value)) in model.natural_key_fields().zip(key.parts()) {
                let Some(index) = table.column_of(field) else {
                    return Ok(None);
                };
                let text = match value {
                    KeyValue::Text(text) => text.clone(),
                    KeyValue::Integer(number) => number.to_string(),
                    KeyValue::Bool(flag) => flag.to_string(),
                    // No stored key holds it: keys are text, bool or integers up to 64 bits.
                    _ => return Ok(None),
                };
                texts.push((table.columns[index].shape, text));
                conditions.push(format!(
                    "t.{} = ?{}",
                    quote(field.stored_name()),
                    texts.len()
                ));
            }
            let values: Vec<(ColumnShape, &str)> = texts
                .iter()
                .map(|(shape, text)| (*shape, text.as_str()))
                .collect();
            read_one(
                connection,
                &table,
                &conditions.join(" AND "),
                &values,
                document,
            )
            .await
        })
        .await
    }
}

/// The stored columns of `table` (and a flattened field's entries) as text, for
/// [`row_from_texts`].
pub(super) fn select_row_columns(table: &Table, alias: &str) -> (String, Vec<usize>) {
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
        .map(|&index| table.read_of(alias, table.columns[index].name))
        .collect();
    (list.join(", "), columns)
}

/// A row's stored fields, read as text, as serde reads them: NULL where serde may do without
/// the field as absent, any other NULL as null, a flattened field's entries beside the others.
pub(super) fn row_from_texts<T: DeserializeOwned>(
    table: &Table,
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

/// Reads the row of `table` meeting `condition` (over `?n` parameters `values`) as `T`.
async fn read_one<T: DeserializeOwned>(
    connection: &mut SqliteConnection,
    table: &Table,
    condition: &str,
    values: &[(ColumnShape, &str)],
    document: DocumentRef,
) -> Result<Option<T>, Error> {
    let (list, columns) = select_row_columns(table, "t");
    let sql = format!("SELECT {list} FROM {} t WHERE {condition}", table.name());
    let mut query = sqlx::query(super::statement(&sql));
    for (shape, text) in values {
        query = bind_text(query, *shape, Some(text));
    }
    crate::trace::round_trip("SELECT");
    let Some(row) = query
        .fetch_optional(&mut *connection)
        .await
        .map_err(|source| sqlite_error(&document, source))?
    else {
        return Ok(None);
    };
    let texts: Vec<Option<String>> = (0..columns.len())
        .map(|index| super::table::cell_text(&row, index))
        .collect::<Result<_, _>>()
        .map_err(|source| sqlite_error(&document, source))?;
    row_from_texts(table, &columns, texts)
        .map(Some)
        .map_err(|message| Error::new(document, ErrorKind::Deserialize { message }))
}
