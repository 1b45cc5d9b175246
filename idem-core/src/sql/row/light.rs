//! A document's light form: what a lookup sends of it and a judgement reads of it, without its
//! columns, prepared where the columns of a row that may never be written are not worth
//! encoding.

use serde::Serialize;
use serde_json::Value;

use super::{column_text, PreparedRow};
use crate::column::ColumnShape;
use crate::engine::batch::Ready;
use crate::engine::{check_written_names, Prepared, Preparing};
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::Model;
use crate::sql::layout::Layout;
use crate::sql::scan;

/// What a lookup sends of a document and a judgement reads of it, without its columns: the
/// engine's part ([`Prepared`], which it dereferences to), the text of each natural-key column,
/// and each guarded field's value. [`LightRow::new`] prepares only this, where the columns of a
/// row that may never be written are not worth encoding.
#[derive(Debug)]
pub(crate) struct LightRow {
    pub(super) prepared: Prepared,
    /// The text of each natural-key field's column, in [`Model::natural_key_fields`] order.
    pub key_texts: Vec<Option<String>>,
    /// Each guarded field's incoming value, in `digests` order, and how a refusal shows it
    /// where that is not its JSON (a NaN, which JSON cannot hold).
    pub guarded: GuardedValues,
}

/// Guarded fields' values, each with how a refusal shows it where that is not its JSON.
type GuardedValues = Vec<(Value, Option<String>)>;

impl std::ops::Deref for LightRow {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

/// `doc` prepared for a lookup on `table` ([`crate::engine::batch::BatchDriver::prepare_light`]):
/// light where [`LightRow::new`] vouches for it, else whole.
pub(crate) fn prepare_light<T: Idempotent + Serialize>(
    doc: &T,
    table: &Layout,
) -> Result<Ready<LightRow, PreparedRow>, Error> {
    match LightRow::new(doc, table)? {
        Some(light) => Ok(Ready::Light(light)),
        None => PreparedRow::new(doc, table).map(Ready::Whole),
    }
}

impl LightRow {
    /// `doc`'s light form under its derived id, or `None` where [`scan`] cannot vouch that its
    /// whole row would encode ([`PreparedRow::new`], which says what is wrong).
    pub fn new<T: Idempotent + Serialize>(
        doc: &T,
        table: &Layout,
    ) -> Result<Option<LightRow>, Error> {
        match scan::walk(doc, table, false) {
            Some(walked) => LightRow::from_picked(doc, doc.id()?, table, walked.picked),
            None => Ok(None),
        }
    }

    /// The light form of `doc` under `id`, from the values [`scan::walk`] picked (each as its
    /// column takes it), which the guarded values are moved out of; `None` where the key is
    /// missing or null, or a digest cannot be made.
    pub(super) fn from_picked<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
        mut picked: Vec<(&'static str, Value)>,
    ) -> Result<Option<LightRow>, Error> {
        let model: &'static Model = &T::MODEL;
        let picked_value = |name: &str| {
            picked
                .iter()
                .find(|(picked, _)| *picked == name)
                .map(|(_, value)| value)
        };
        let holds_key = |name: &str| picked_value(name).is_some_and(|value| !value.is_null());
        // The refusal itself is the JSON encoding's (`None` sends the document there), so the
        // document it would name is never built here.
        let unnamed = || crate::DocumentRef::collection(model);
        if check_written_names(model, unnamed, std::iter::empty(), holds_key).is_err() {
            return Ok(None);
        }
        let (key_texts, guarded) = picked_parts(model, table, &mut picked);
        let preparing = Preparing::begin(doc, id)?;
        let mut digests = Vec::with_capacity(guarded.len());
        for (field, (value, _)) in model.digested_fields().zip(&guarded) {
            let Ok(digest) = crate::engine::guarded_value_digest(field, value, value.is_null())
            else {
                return Ok(None);
            };
            digests.push((field, digest));
        }
        Ok(Some(LightRow {
            prepared: preparing.finish(digests),
            key_texts,
            guarded,
        }))
    }
}

/// The text of each natural-key column and each guarded field's value, moved out of the values
/// [`scan::walk`] picked (each as its column takes it): a field has one role in the model (a
/// key is never also a guarded field), so each value is taken once.
pub(super) fn picked_parts(
    model: &'static Model,
    table: &Layout,
    picked: &mut [(&'static str, Value)],
) -> (Vec<Option<String>>, GuardedValues) {
    fn take<'p>(picked: &'p mut [(&'static str, Value)], name: &str) -> Option<&'p mut Value> {
        picked
            .iter_mut()
            .find(|(picked, _)| *picked == name)
            .map(|(_, value)| value)
    }
    let key_texts = model
        .natural_key_fields()
        .map(|field| {
            let column = &table.columns[table.column_of(field)?];
            match (column.shape, take(picked, field.stored_name())) {
                // The picked text itself, moved, not copied.
                (ColumnShape::Text, Some(Value::String(text))) => Some(std::mem::take(text)),
                (_, value) => column_text(column, value.as_deref()).ok().flatten(),
            }
        })
        .collect();
    let guarded = model
        .digested_fields()
        .map(|field| {
            let value = take(picked, field.stored_name()).map_or(Value::Null, std::mem::take);
            (value, None)
        })
        .collect();
    (key_texts, guarded)
}
