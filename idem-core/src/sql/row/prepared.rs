//! A document's whole row: the text of each sent column beside its light form, straight from
//! what serde writes where [`scan::walk`] vouches for the document (else through JSON:
//! [`super::through_json`]), and the texts a statement sends of it.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::light::picked_parts;
use super::LightRow;
use crate::engine::Prepared;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::Field;
use crate::short_text::ShortText;
use crate::sql::layout::{Content, Layout};
use crate::sql::scan;
use crate::sql::texts::ColumnTexts;

/// A document as the columns of its row, and what the engine reads of it ([`Prepared`], which
/// it dereferences to).
#[derive(Debug)]
pub(crate) struct PreparedRow {
    pub light: LightRow,
    /// The text of each sent column (`None`: NULL), in [`Layout::sent`] order; `None` too for
    /// the id, the hash and the version key, which [`PreparedRow::sent_value`] reads from the
    /// prepared document instead of a copy of each per row.
    pub(super) texts: ColumnTexts,
}

impl std::ops::Deref for PreparedRow {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.light.prepared
    }
}

impl PreparedRow {
    /// Prepares `doc` under its derived id.
    pub fn new<T: Idempotent + Serialize>(doc: &T, table: &Layout) -> Result<Self, Error> {
        PreparedRow::with_id(doc, doc.id()?, table)
    }

    /// Prepares `doc` under `id` (an event's id is not derived): straight from what serde
    /// writes where [`scan::walk`] vouches for it, else through JSON.
    pub fn with_id<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Self, Error> {
        match PreparedRow::walked(doc, id, table)? {
            Some(row) => Ok(row),
            None => PreparedRow::through_json(doc, id, table),
        }
    }

    /// `doc`'s whole row from its light form ([`LightRow::new`]): its columns encoded, its id,
    /// content hash and digests taken as the light form has them (the tests of
    /// `light_row_agreement` hold the two preparations to the same parts).
    pub fn completed<T: Idempotent + Serialize>(
        light: &LightRow,
        doc: &T,
        table: &Layout,
    ) -> Result<Self, Error> {
        match scan::walk(doc, table, true) {
            Some(mut walked) => {
                let (key_texts, guarded) = picked_parts(light.model, table, &mut walked.picked);
                let light = LightRow {
                    prepared: light.prepared.clone(),
                    key_texts,
                    guarded,
                };
                Ok(PreparedRow::of_walked(light, walked, table))
            }
            None => PreparedRow::with_id(doc, light.id, table),
        }
    }

    /// `doc`'s row under `id` from [`scan::walk`]'s texts, or `None` where it could not vouch
    /// for the document.
    pub(super) fn walked<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Option<Self>, Error> {
        let Some(mut walked) = scan::walk(doc, table, true) else {
            return Ok(None);
        };
        let picked = std::mem::take(&mut walked.picked);
        let Some(light) = LightRow::from_picked(doc, id, table, picked)? else {
            return Ok(None);
        };
        Ok(Some(PreparedRow::of_walked(light, walked, table)))
    }

    /// The row of `light`'s document from the texts [`scan::walk`] wrote of it: its digests
    /// and the entries no column holds written into theirs.
    fn of_walked(light: LightRow, walked: scan::Walked, table: &Layout) -> Self {
        let mut texts = walked.columns;
        let mut extra = Some(walked.extra).filter(|extra| !extra.is_empty());
        for (position, &index) in table.sent.iter().enumerate() {
            match table.columns[index].content {
                // Read from the light row itself ([`PreparedRow::sent_value`]).
                Content::Id | Content::Hash | Content::VersionKey | Content::Stored(_) => {}
                Content::Digests => texts.write_text(position, |out| {
                    write_digests_text(&light.digests, out);
                }),
                Content::Extra => {
                    if let Some(extra) = extra.take() {
                        texts.write_text(position, |out| {
                            // Writing to a `String` cannot fail.
                            let _ = write!(out, "{}", Value::Object(extra));
                        });
                    }
                }
            }
        }
        table.row_sizes.saw(&mut texts);
        PreparedRow { light, texts }
    }
    /// The row's value of sent column `index` of `table`.
    pub fn value_of(&self, table: &Layout, index: usize) -> Option<&str> {
        let position = table.sent.iter().position(|&sent| sent == index)?;
        self.sent_value(table, position)
    }

    /// The text of the sent column at `position` (in [`Layout::sent`] order) of `table`, the
    /// table the row was prepared for.
    pub fn sent_value<'r>(&'r self, table: &Layout, position: usize) -> Option<&'r str> {
        match table.columns[table.sent[position]].content {
            Content::Id => Some(&self.id_text),
            Content::Hash => Some(&self.hash),
            Content::VersionKey => self.version_key.as_deref(),
            Content::Stored(_) | Content::Digests | Content::Extra => self.texts.get(position),
        }
    }

    /// How many sent columns the row holds a value for: as many as `table` sends, for the table
    /// it was prepared for.
    // Only PostgreSQL's column arrays check it (a short one would be padded with NULLs).
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub fn sent_len(&self) -> usize {
        self.texts.len()
    }
}

/// Writes the digests column's text to `out`: the one digest of every guarded field
/// ([`crate::hash::frozen_digest`]) in hex, which the statements store as its bytes.
pub(super) fn write_digests_text(
    digests: &[(&'static Field, Option<ShortText>)],
    out: &mut String,
) {
    let digests = digests
        .iter()
        .map(|(field, digest)| (*field, digest.as_deref()));
    out.push_str(&crate::hash::frozen_digest(digests));
}
