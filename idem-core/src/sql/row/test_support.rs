//! For the tests: how a document's light preparation and its row straight from serde compare
//! with the ways they stand in for, and the preparation of rows whose cost they count.

use serde::Serialize;
use serde_json::Value;

use super::{LightRow, PreparedRow};
use crate::idempotent::Idempotent;
use crate::sql::layout::{Content, Layout};

/// How `doc`'s light preparation (`LightRow::new`) compares with its whole one
/// (`PreparedRow::new`) on the table of `T`, for the tests that hold the first to the
/// second: `Ok(true)` where the light one vouched for the document, both agree on all a
/// lookup sends and a judgement reads, and the row completed from the light one
/// (`PreparedRow::completed`) sends what the whole one sends; `Ok(false)` where it did not
/// vouch (the whole one then decides, refusal included); `Err` says how they disagree.
pub fn light_row_agreement<T: Idempotent + Serialize>(doc: &T) -> Result<bool, String> {
    let table = Layout::new(&T::MODEL, &T::stored_columns());
    let light = LightRow::new(doc, &table);
    let whole = PreparedRow::new(doc, &table);
    let (light, whole) = match (light, whole) {
        (Ok(None), _) => return Ok(false),
        (Ok(Some(light)), Ok(whole)) => {
            let completed =
                PreparedRow::completed(&light, doc, &table).map_err(|error| error.to_string())?;
            for position in 0..table.sent.len() {
                let (sent, expected) = (
                    completed.sent_value(&table, position),
                    whole.sent_value(&table, position),
                );
                if sent != expected {
                    return Err(format!(
                        "completed column {:?}: {sent:?}, whole {expected:?}",
                        table.columns[table.sent[position]].name
                    ));
                }
            }
            (light, whole.light)
        }
        (Ok(Some(_)), Err(refusal)) => {
            return Err(format!("vouched for a document the row refuses: {refusal}"))
        }
        (Err(light), Err(whole)) if light.to_string() == whole.to_string() => return Ok(false),
        (Err(light), whole) => {
            return Err(format!(
                "refused with {light}, where the row gives {whole:?}"
            ))
        }
    };
    match light_parts(&light) == light_parts(&whole) {
        true => Ok(true),
        false => Err(format!(
            "light: {}\nwhole: {}",
            light_parts(&light),
            light_parts(&whole)
        )),
    }
}

/// How `doc`'s row straight from what serde writes (`scan::walk`) compares with its row
/// through JSON, on the table of `T`, for the tests that hold the first to the second:
/// `Ok(true)` where the walk vouched for the document and both rows are the same (the extra
/// column's entries compared as JSON, whatever their order), `Ok(false)` where it did not;
/// `Err` says how they differ.
pub fn row_encoding_agreement<T: Idempotent + Serialize>(doc: &T) -> Result<bool, String> {
    let table = Layout::new(&T::MODEL, &T::stored_columns());
    let id = doc.id().map_err(|error| error.to_string())?;
    let (walked, json) = match (
        PreparedRow::walked(doc, id, &table),
        PreparedRow::through_json(doc, id, &table),
    ) {
        (Ok(None), _) => return Ok(false),
        (Ok(Some(walked)), Ok(json)) => (walked, json),
        (Ok(Some(_)), Err(refusal)) => {
            return Err(format!(
                "walked a document the JSON encoding refuses: {refusal}"
            ))
        }
        (Err(walked), Err(json)) if walked.to_string() == json.to_string() => return Ok(false),
        (Err(walked), json) => {
            return Err(format!(
                "refused with {walked}, where the JSON encoding gives {json:?}"
            ))
        }
    };
    if light_parts(&walked.light) != light_parts(&json.light) {
        return Err(format!(
            "walked: {}\njson:   {}",
            light_parts(&walked.light),
            light_parts(&json.light)
        ));
    }
    for (position, &index) in table.sent.iter().enumerate() {
        let (walked, json) = (
            walked.sent_value(&table, position),
            json.sent_value(&table, position),
        );
        let column = &table.columns[index];
        let same = match (column.content, walked, json) {
            (Content::Extra, Some(walked), Some(json)) => {
                serde_json::from_str::<Value>(walked).ok() == serde_json::from_str(json).ok()
            }
            _ => walked == json,
        };
        if !same {
            return Err(format!(
                "column {:?}: walked {walked:?}, json {json:?}",
                column.name
            ));
        }
    }
    Ok(true)
}

/// Documents of `T` prepared as rows of its table, as the SQL stores prepare each row they
/// write, for the tests that count what preparing a row costs.
pub struct RowPreparation<T> {
    table: Layout,
    of: std::marker::PhantomData<fn(&T)>,
}

impl<T: Idempotent + Serialize> RowPreparation<T> {
    /// The preparation of rows of `T`'s table.
    // Each call lays the table out, which `Default` would hide.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RowPreparation {
            table: Layout::new(&T::MODEL, &T::stored_columns()),
            of: std::marker::PhantomData,
        }
    }

    /// Prepares `doc`'s whole row, then drops it: how many of its sent columns hold a text.
    pub fn prepare(&self, doc: &T) -> Result<usize, String> {
        let row = PreparedRow::new(doc, &self.table).map_err(|error| error.to_string())?;
        Ok((0..self.table.sent.len())
            .filter(|&position| row.sent_value(&self.table, position).is_some())
            .count())
    }
}

/// All a lookup sends and a judgement reads of `row`, as text to compare.
fn light_parts(row: &LightRow) -> String {
    let digests: Vec<(&'static str, Option<&str>)> = row
        .digests
        .iter()
        .map(|(field, digest)| (field.stored_name(), digest.as_deref()))
        .collect();
    format!(
        "id {} hash {} version key {:?} document {:?} digests {:?} keys {:?} guarded {:?}",
        row.id_text,
        row.hash,
        row.version_key,
        row.document(),
        digests,
        row.key_texts,
        row.guarded
    )
}
