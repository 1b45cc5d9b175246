//! A document's whole row through its JSON, where the texts serde writes could not be vouched
//! for: every refusal of a document's content is this encoding's.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::prepared::write_digests_text;
use super::{write_column_text, LightRow, PreparedRow};
use crate::column::ColumnShape;
use crate::engine::{check_written_names, Preparing};
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::Model;
use crate::short_text::ShortText;
use crate::sql::json;
use crate::sql::layout::{Content, Layout};
use crate::sql::texts::ColumnTexts;

impl PreparedRow {
    /// `doc`'s row under `id` through its JSON ([`json::to_document`]): every refusal of a
    /// document's content is this encoding's.
    pub(super) fn through_json<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let preparing = Preparing::begin(doc, id)?;
        let document = || preparing.document();
        let serialize_error = |message| preparing.serialize_error(message);
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
        check_written_names(model, document, entries.keys(), |name| {
            entries.get(name).is_some_and(|value| !value.is_null())
        })?;
        let guarded = model
            .digested_fields()
            .map(|field| {
                if let Some(float) = non_finite_of(field.stored_name()) {
                    let digest = float_digest(float).map_err(&serialize_error)?;
                    let shown = json::show_float(float);
                    return Ok(((field, digest), (Value::from(shown.as_str()), Some(shown))));
                }
                let value = entries.get(field.stored_name()).unwrap_or(&Value::Null);
                let digest = crate::engine::guarded_value_digest(field, value, value.is_null())
                    .map_err(&serialize_error)?;
                Ok(((field, digest), (value.clone(), None)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let (digests, guarded): (Vec<_>, Vec<_>) = guarded.into_iter().unzip();
        let prepared = preparing.finish(digests);
        let mut texts = ColumnTexts::new(table.sent.len(), &table.row_sizes);
        for (position, &index) in table.sent.iter().enumerate() {
            let column = &table.columns[index];
            match column.content {
                // Read from the prepared document itself ([`PreparedRow::sent_value`]).
                Content::Id | Content::Hash | Content::VersionKey => {}
                Content::Digests => texts.write_text(position, |out| {
                    write_digests_text(&prepared.digests, out);
                }),
                // Filled last, from what no column took.
                Content::Extra => {}
                Content::Stored(_) => {
                    let value = entries.remove(column.name);
                    if let Some(float) = non_finite_of(column.name) {
                        if column.shape != ColumnShape::Float {
                            return Err(serialize_error(non_finite_outside_float(
                                column.name,
                                float,
                            )));
                        }
                        texts.set(position, Some(&json::show_float(float)));
                        continue;
                    }
                    texts
                        .write(position, |out| {
                            write_column_text(column, value.as_ref(), out)
                        })
                        .map_err(|expected| {
                            serialize_error(format!(
                                "field {:?} holds {}, where its column holds {expected}",
                                column.name,
                                value.as_ref().unwrap_or(&Value::Null)
                            ))
                        })?;
                }
            }
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
                    texts.write_text(position, |out| {
                        // Writing to a `String` cannot fail.
                        let _ = write!(out, "{}", Value::Object(entries));
                    });
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
        let key_texts = model
            .natural_key_fields()
            .map(|field| {
                let column = table.column_of(field)?;
                let position = table.sent.iter().position(|&sent| sent == column)?;
                texts.get(position).map(str::to_owned)
            })
            .collect();
        table.row_sizes.saw(&mut texts);
        Ok(PreparedRow {
            light: LightRow {
                prepared,
                key_texts,
                guarded,
            },
            texts,
        })
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

/// The digest of a float JSON cannot hold, as the content hash encodes it.
fn float_digest(float: f64) -> Result<Option<ShortText>, String> {
    crate::hash::guard_digest(&float, false)
}
