//! Which stored fields are the model's: those it lists or gives a role, those idem writes itself,
//! and, for a model given at run time, those the content hash covers without a flag naming
//! them.

use super::finding::UnknownField;
#[cfg(feature = "mongodb")]
use super::finding::UnknownReason;
use crate::model::Model;

/// Whether `name` is a field of a model whose fields are `listed` (the type's stored fields in
/// its order; a model given at run time lists them with `field_order`): listed, a field with a
/// role, or a name idem writes itself. With nothing listed every stored name is one.
pub(crate) fn is_model_field(model: &Model, listed: &[&str], name: &str) -> bool {
    listed.is_empty()
        || listed.contains(&name)
        || model.is_reserved(name)
        || model
            .fields()
            .iter()
            .any(|field| field.stored_name() == name)
}

/// The stored names, among `names`, that the content hash of a model given at run time covers
/// without any flag naming them: each is taken for a hashed field of the type.
pub(crate) fn unnamed_fields<'n>(
    model: &Model,
    names: impl IntoIterator<Item = &'n str>,
) -> Vec<String> {
    names
        .into_iter()
        .filter(|name| {
            crate::hash::is_hashed_stored_field(model, name)
                && !model
                    .fields()
                    .iter()
                    .any(|field| field.stored_name() == *name)
        })
        .map(str::to_owned)
        .collect()
}

/// Adds `field` to `report`'s unknown fields unless one of that name is there.
pub(crate) fn note_unknown(unknown: &mut Vec<UnknownField>, field: UnknownField) {
    if !unknown.iter().any(|known| known.name == field.name) {
        unknown.push(field);
    }
}

/// The stored fields of a document that the content hash of a model given at run time covers:
/// all but those the model does not have (not in `field_order` where it lists them, or
/// `left_out`), in stored order. A table's are its columns ([`crate::sql`] reads them from its
/// layout); a MongoDB document's are its own.
#[cfg(feature = "mongodb")]
pub(crate) fn hashed_fields<'d, V>(
    model: &Model,
    field_order: &[&str],
    left_out: &[UnknownField],
    stored: impl IntoIterator<Item = (&'d str, &'d V)>,
) -> Vec<(&'d str, &'d V)> {
    stored
        .into_iter()
        .filter(|(name, _)| {
            is_model_field(model, field_order, name)
                && !left_out.iter().any(|field| field.name == *name)
        })
        .collect()
}

/// How many distinct stored names an audit keeps: enough to name what a model misses, bounded
/// whatever the documents hold.
#[cfg(feature = "mongodb")]
const NAMES_KEPT: usize = 64;

/// The stored field names an audit met, and those the model does not have: for a store whose
/// documents may each hold other fields (a table's columns are known from its catalog).
#[cfg(feature = "mongodb")]
#[derive(Default)]
pub(crate) struct FieldsSeen {
    /// The names met, in the order met, at most [`NAMES_KEPT`].
    pub names: Vec<String>,
    /// Those of them the model does not have.
    pub unknown: Vec<UnknownField>,
}

#[cfg(feature = "mongodb")]
impl FieldsSeen {
    /// Notes the names of one stored document of `model`, whose fields are `listed`.
    pub fn see<'n>(
        &mut self,
        model: &Model,
        listed: &[&str],
        names: impl IntoIterator<Item = &'n str>,
    ) {
        for name in names {
            if self.names.len() >= NAMES_KEPT {
                return;
            }
            if self.names.iter().any(|seen| seen == name) {
                continue;
            }
            self.names.push(name.to_owned());
            if !is_model_field(model, listed, name) {
                self.unknown
                    .push(UnknownField::new(name, UnknownReason::NotListed));
            }
        }
    }
}
