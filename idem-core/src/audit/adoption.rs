//! What an adoption decides before it moves anything, on every store.

use super::finding::UnknownField;
use crate::model::Model;

/// What an adoption with a model given at run time decides before it moves anything, on every
/// store: refused where the stored documents show another model (`mismatch`, unless
/// `ignore_model_check`), and where stored fields are not the model's (`unknown`, unless
/// `allow_unknown_fields`), since the hashes it would store may not be the type's.
pub(crate) fn check_adoption(
    model: &Model,
    mismatch: Option<crate::model_check::ModelMismatch>,
    unknown: &[UnknownField],
    ignore_model_check: bool,
    allow_unknown_fields: bool,
) -> Result<(), crate::Error> {
    if let (Some(mismatch), false) = (mismatch, ignore_model_check) {
        return Err(mismatch.refusal(model));
    }
    if unknown.is_empty() || allow_unknown_fields {
        return Ok(());
    }
    let shown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
    Err(crate::Error::schema_mismatch(
        model,
        format!(
            "stored fields that are not fields of the model given: {}; adoption would store \
             content hashes the type may not compute, so the next upsert of each document would \
             rewrite it. Give the type's fields (`--fields`, in its order, or `--model FILE`), \
             name the fields the type does not hash (`--volatile`, `--effect`, `--tombstone`, \
             `--push-by`), or, if they are no fields of the type, leave them out of the hashes \
             with `--allow-unknown-fields` (`AdoptOptions::allowing_unknown_fields`); nothing \
             was moved",
            shown.join("; ")
        ),
    ))
}
