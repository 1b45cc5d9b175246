//! Whether a stored content hash is the content's, and, for a model given at run time, which
//! stored field the type leaves out of it.

use serde::Serialize;

use super::fields::unnamed_fields;
use super::finding::{UnknownField, UnknownReason};
use super::report::AuditReport;
use crate::model::Model;

/// A document's stored content hash against the hashes its content may have.
pub(crate) struct HashCheck {
    /// The stored content hash, if the document has one.
    pub stored: Option<String>,
    /// The hashes of the content: the type's, for a typed reading; for a model given at run
    /// time, one per reading of the stored values (a null column read as null or as absent).
    /// The first is the one to store. Empty if none can be computed.
    pub computed: Vec<crate::hash::ContentHash>,
    /// Whether the content holds nested objects read without the type, whose hash the type may
    /// compute otherwise (a struct, in an order the store may not keep).
    pub nested_unknown: bool,
}

impl HashCheck {
    /// Whether the stored hash is one the content has.
    pub fn matches(&self) -> bool {
        let stored = self.stored.as_deref();
        self.computed
            .iter()
            .any(|hash| Some(hash.to_hex().as_str()) == stored)
    }

    /// Whether the stored hash is known to differ from every hash the content may have: one
    /// that is neither missing, nor unknown, nor left unchecked for nested objects.
    pub fn differs(&self) -> bool {
        self.stored.is_some()
            && !self.computed.is_empty()
            && !self.matches()
            && !self.nested_unknown
    }

    /// Counts the document's hash in `report`; returns whether it is no problem.
    pub fn record(&self, report: &mut AuditReport, id: &str) -> bool {
        match &self.stored {
            None => {
                report.missing_hash.record(id.to_owned(), None);
                false
            }
            Some(_) if self.computed.is_empty() || self.matches() => true,
            Some(_) if self.nested_unknown => {
                report.hash_unchecked.record(id.to_owned(), None);
                true
            }
            Some(_) => {
                report.hash_mismatch.record(id.to_owned(), None);
                false
            }
        }
    }

    /// The hash an adopted document stores: the stored one where it may be right (it matches,
    /// or cannot be checked), else the content's; `None` if neither is known.
    pub fn to_store(&self) -> Option<String> {
        match &self.stored {
            Some(stored) if self.matches() || self.nested_unknown => Some(stored.clone()),
            _ => self.computed.first().map(|hash| hash.to_hex()),
        }
    }
}

/// How many documents whose stored hash differs from their content a [`HashDiagnosis`]
/// examines.
const DIAGNOSED_DOCUMENTS: u32 = 16;

/// For a model given at run time: which stored field, left out, makes the stored hashes match
/// the content. A field the type does not hash (an effect, a tombstone, one no flag named, a
/// column another tool added) makes every document idem wrote differ from its hash; left out,
/// they match. Examines the first [`DIAGNOSED_DOCUMENTS`] documents whose hash differs.
#[derive(Default)]
pub(crate) struct HashDiagnosis {
    examined: u32,
    explained: Vec<(String, u32)>,
}

impl HashDiagnosis {
    /// Whether it examines more documents.
    pub fn wants(&self) -> bool {
        self.examined < DIAGNOSED_DOCUMENTS
    }

    /// Examines one document: `fields` as the hash covers them (in stored order, `field_order`
    /// first), with `stored_hash`. A document whose hash matches its content (nulls read as
    /// values or as absent) is not counted.
    pub fn examine<V: Serialize>(
        &mut self,
        model: &Model,
        field_order: &[&str],
        fields: &[(&str, V)],
        stored_hash: &str,
        is_null: impl Fn(&V) -> bool,
    ) {
        if !self.wants() {
            return;
        }
        let all: Vec<(&str, &V)> = fields.iter().map(|(name, value)| (*name, value)).collect();
        let without_nulls: Vec<(&str, &V)> = all
            .iter()
            .copied()
            .filter(|(_, value)| !is_null(value))
            .collect();
        let readings = [all, without_nulls];
        let matches = |fields: &[(&str, &V)], left_out: Option<&str>| {
            let kept: Vec<(&str, &V)> = fields
                .iter()
                .copied()
                .filter(|(name, _)| Some(*name) != left_out)
                .collect();
            crate::hash::stored_fields_hash(model, field_order, &kept)
                .is_ok_and(|hash| hash.to_hex() == stored_hash)
        };
        if readings.iter().any(|fields| matches(fields, None)) {
            return;
        }
        self.examined += 1;
        for name in unnamed_fields(model, fields.iter().map(|(name, _)| *name)) {
            if readings.iter().any(|fields| matches(fields, Some(&name))) {
                match self.explained.iter_mut().find(|(known, _)| *known == name) {
                    Some((_, count)) => *count += 1,
                    None => self.explained.push((name, 1)),
                }
            }
        }
    }

    /// The fields whose absence explains at least half the documents examined.
    pub fn finding(&self) -> Vec<UnknownField> {
        self.explained
            .iter()
            .filter(|(_, count)| 2 * count >= self.examined)
            .map(|(name, _)| UnknownField::new(name.clone(), UnknownReason::NotInStoredHashes))
            .collect()
    }
}
