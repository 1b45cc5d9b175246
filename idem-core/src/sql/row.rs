//! One document ready to write as a row: the text of each sent column, its hash, digests and
//! version key; and what a statement returns of a stored row, read as the engine asks
//! (the SQL drivers').

use serde::Serialize;
use serde_json::{Map, Value};

use super::layout::{Content, Layout, TableColumn};
use crate::column::ColumnShape;
use crate::engine::{check_written_names, Prepared};
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model};
use crate::sql::json;

/// A document as the columns of its row, and what the engine reads of it ([`Prepared`], which
/// it dereferences to).
#[derive(Debug)]
pub(crate) struct PreparedRow {
    prepared: Prepared,
    /// The text of each sent column (`None`: NULL), in [`Layout::sent`] order.
    pub values: Vec<Option<String>>,
    /// Each guarded field's incoming value and the value as shown, in `digests` order.
    pub guarded: Vec<(Value, String)>,
}

impl std::ops::Deref for PreparedRow {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

/// What a stored row that stopped a write holds, as the statement returns it.
#[derive(Clone, Debug)]
pub(crate) struct StoredRow {
    pub id: String,
    pub tombstoned: bool,
    pub hash: Option<String>,
    /// The digests column as stored, and parsed; `None` for a row without digests (another
    /// tool wrote it).
    pub digests_text: Option<String>,
    pub digests: Option<Map<String, Value>>,
    pub version_key: Option<String>,
    /// The guarded fields' values as text, in [`Model::digested_fields`] order.
    pub guarded_values: Vec<Option<String>>,
    /// The version field's value as text, for a type with versions.
    pub version_value: Option<String>,
    /// The natural-key columns as text, for a row read by id; `None` for a row found by its
    /// natural key, which holds the incoming one.
    pub natural_key: Option<Vec<Option<String>>>,
}

impl PreparedRow {
    /// Prepares `doc` under its derived id.
    pub fn new<T: Idempotent + Serialize>(doc: &T, table: &Layout) -> Result<Self, Error> {
        PreparedRow::with_id(doc, doc.id()?, table)
    }

    /// Prepares `doc` under `id` (an event's id is not derived).
    pub fn with_id<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let document = doc.document_ref();
        let serialize_error =
            |message: String| Error::new(document.clone(), ErrorKind::Serialize { message });
        let hash = doc.content_hash()?.to_hex();
        let (document_value, non_finite) =
            json::to_document(doc).map_err(|error| serialize_error(error.message()))?;
        let mut entries = match document_value {
            Value::Object(entries) => entries,
            other => {
                return Err(serialize_error(format!(
                    "serde wrote {other} where a row needs a struct's fields"
                )))
            }
        };
        let non_finite_of = |name: &str| {
            non_finite
                .iter()
                .find(|(kept, _)| kept == name)
                .map(|&(_, value)| value)
        };
        // A key column cannot hold a null: JSON's null is no key here.
        check_written_names(model, &document, entries.keys(), |name| {
            entries.get(name).is_some_and(|value| !value.is_null())
        })?;
        let guarded = model
            .digested_fields()
            .map(|field| {
                if let Some(float) = non_finite_of(field.stored_name()) {
                    let digest = float_digest(float).map_err(&serialize_error)?;
                    let shown = json::show_float(float);
                    return Ok(((field, digest), (Value::from(shown.as_str()), shown)));
                }
                let value = entries.get(field.stored_name()).unwrap_or(&Value::Null);
                let unwritten = value.is_null() && field.null_is_unwritten();
                let digest =
                    crate::hash::guard_digest(value, unwritten).map_err(&serialize_error)?;
                Ok(((field, digest), (value.clone(), value.to_string())))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let (digests, guarded): (Vec<_>, Vec<_>) = guarded.into_iter().unzip();
        let prepared = Prepared::new(doc, document.clone(), id, hash, digests);
        let mut values = Vec::with_capacity(table.sent.len());
        for &index in &table.sent {
            let column = &table.columns[index];
            let text = match column.content {
                Content::Id => Some(prepared.id_text.clone()),
                Content::Hash => Some(prepared.hash.clone()),
                Content::VersionKey => prepared.version_key.clone(),
                Content::Digests => {
                    let digests: Map<String, Value> = prepared
                        .digests
                        .iter()
                        .filter_map(|(field, digest)| {
                            Some((field.stored_name().to_owned(), Value::from(digest.clone()?)))
                        })
                        .collect();
                    Some(Value::Object(digests).to_string())
                }
                // Filled last, from what no column took.
                Content::Extra => None,
                Content::Stored(_) => {
                    let value = entries.remove(column.name);
                    if let Some(float) = non_finite_of(column.name) {
                        if column.shape != ColumnShape::Float {
                            return Err(serialize_error(non_finite_outside_float(
                                column.name,
                                float,
                            )));
                        }
                        values.push(Some(json::show_float(float)));
                        continue;
                    }
                    column_text(column, value.as_ref()).map_err(|expected| {
                        serialize_error(format!(
                            "field {:?} holds {}, where its column holds {expected}",
                            column.name,
                            value.as_ref().unwrap_or(&Value::Null)
                        ))
                    })?
                }
            };
            values.push(text);
        }
        // A flattened entry holding NaN or an infinity has no column of its own to keep it.
        if let Some((name, float)) = non_finite
            .iter()
            .find(|(name, _)| table.column_named(name).is_none())
        {
            return Err(serialize_error(non_finite_outside_float(name, *float)));
        }
        // Pushed lists are not written by an upsert: a new row starts with an empty one.
        for field in model.pushed_fields() {
            entries.remove(field.stored_name());
        }
        match table.column_with(Content::Extra) {
            Some(extra) => {
                let position = table.sent.iter().position(|&index| index == extra);
                if let (Some(position), false) = (position, entries.is_empty()) {
                    values[position] = Some(Value::Object(entries).to_string());
                }
            }
            None => {
                if let Some(name) = entries.keys().next() {
                    return Err(serialize_error(format!(
                        "serde wrote a field {name:?} that the type does not declare (a \
                         custom Serialize?); a row has a column for each declared field only"
                    )));
                }
            }
        }
        Ok(PreparedRow {
            prepared,
            values,
            guarded,
        })
    }

    /// The row's value of sent column `index` of `table`.
    pub fn value_of(&self, table: &Layout, index: usize) -> Option<&str> {
        let position = table.sent.iter().position(|&sent| sent == index)?;
        self.values[position].as_deref()
    }

    /// The parameters of the pinned replacement after the sent columns: the stored hash,
    /// digests, version key and version, and guarded values, as read.
    /// The statement's conditions follow the table's columns, and so do these.
    pub fn pinned_parameters(&self, table: &Layout, stored: &StoredRow) -> Vec<Option<String>> {
        let mut parameters = vec![stored.hash.clone()];
        if table.column_with(Content::Digests).is_some() {
            parameters.push(stored.digests_text.clone());
        }
        if table.column_with(Content::VersionKey).is_some() {
            parameters.push(stored.version_key.clone());
            if self.model.version_field().is_some() {
                parameters.push(stored.version_value.clone());
            }
        }
        parameters.extend(stored.guarded_values.iter().cloned());
        parameters
    }
}

/// The text sent for `value` (`None`: serde left the field out) in `column`, or what the column
/// expects if `value` is of another kind. Absent values are NULL, and so are nulls, but in a
/// `jsonb` column where NULL reads back as absent: there a null is JSON `null`, so that it reads
/// back as the null serde wrote, not as the field's default.
pub(crate) fn column_text(
    column: &TableColumn,
    value: Option<&Value>,
) -> Result<Option<String>, &'static str> {
    let Some(value) = value else {
        return Ok(None);
    };
    match (column.shape, value) {
        (ColumnShape::Structured, Value::Null) if column.null_is_absent => {
            Ok(Some("null".to_owned()))
        }
        (_, Value::Null) => Ok(None),
        (ColumnShape::Text, Value::String(text)) => Ok(Some(text.clone())),
        (ColumnShape::Text, _) => Err("text"),
        (ColumnShape::Integer, Value::Number(number)) => number
            .as_i64()
            .map(|number| Some(number.to_string()))
            .ok_or("an integer in i64's range"),
        (ColumnShape::Integer, _) => Err("an integer"),
        (ColumnShape::Float, Value::Number(number)) => Ok(Some(number.to_string())),
        (ColumnShape::Float, _) => Err("a number"),
        (ColumnShape::Boolean, Value::Bool(flag)) => Ok(Some(flag.to_string())),
        (ColumnShape::Boolean, _) => Err("a boolean"),
        _ => Ok(Some(value.to_string())),
    }
}

/// The refusal of a non-finite float that only a `double precision` column could hold.
fn non_finite_outside_float(name: &str, float: f64) -> String {
    json::JsonError::NonFinite {
        path: crate::push::path_step(name),
        value: float,
    }
    .message()
}

/// The shape of `field`'s column.
pub(crate) fn shape_of(table: &Layout, field: &Field) -> ColumnShape {
    table
        .column_of(field)
        .map_or(ColumnShape::Structured, |index| table.columns[index].shape)
}

/// A stored value, read back as text from its column, as the JSON value serde wrote (a
/// non-finite float, which JSON cannot hold, as the text PostgreSQL wrote).
pub(crate) fn stored_value(table: &Layout, field: &Field, text: &str) -> Value {
    let shape = shape_of(table, field);
    let parsed = match shape {
        ColumnShape::Text => return Value::from(text),
        ColumnShape::Integer => text.parse::<i64>().ok().map(Value::from),
        ColumnShape::Float => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ColumnShape::Boolean => Some(Value::Bool(text == "true")),
        _ => serde_json::from_str(text).ok(),
    };
    parsed.unwrap_or_else(|| Value::from(text))
}

/// The digest of a float JSON cannot hold, as the content hash encodes it.
fn float_digest(float: f64) -> Result<Option<String>, String> {
    crate::hash::guard_digest(&float, false)
}
