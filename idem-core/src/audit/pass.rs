//! An audit's one pass over the documents of a collection (the rows of a table) in natural-key
//! order, the same on every store: each document's problems counted, natural keys held twice
//! found, and, for a model given at run time, the check that it is the documents' model and
//! the search for the field its stored hashes leave out.

use std::borrow::Borrow;

use serde_json::{Map, Value};

use super::duplicates::{DuplicateTracker, KeyValue, StoredKey};
use super::fields::{note_unknown, unnamed_fields};
use super::hash_check::HashDiagnosis;
use super::judged::Judged;
use super::report::AuditReport;
use crate::model::Model;
use crate::model_check::ModelCheck;

/// One audit's pass, told of each document in natural-key order.
pub(crate) struct AuditPass<'m, V> {
    model: &'m Model,
    duplicates: DuplicateTracker<V>,
    /// A model given at run time may not be the documents' (a flag forgotten or wrong).
    model_check: Option<ModelCheck<'m>>,
    /// For a model given at run time: which field, left out, makes stored hashes match.
    diagnosis: Option<HashDiagnosis>,
}

impl<'m, V: KeyValue> AuditPass<'m, V> {
    /// A pass over documents of `model`, read as the type (`typed`) or as stored.
    pub fn new(model: &'m Model, typed: bool) -> Self {
        AuditPass {
            model,
            duplicates: DuplicateTracker::new(),
            model_check: (!typed).then(|| ModelCheck::new(model)),
            diagnosis: (!typed).then(HashDiagnosis::default),
        }
    }

    /// Shows the model check a document under `stored_id` (text), its fields in the neutral
    /// form read only if the check wants it.
    pub fn check_model<F: Borrow<Map<String, Value>>>(
        &mut self,
        stored_id: &str,
        fields: impl FnOnce() -> F,
    ) {
        if let Some(check) = self
            .model_check
            .as_mut()
            .filter(|check| check.wants(stored_id))
        {
            check.examine(stored_id, fields().borrow());
        }
    }

    /// Whether the hash diagnosis wants to examine the next document whose hash differs: a
    /// SQL store, whose judgement takes the row, keeps it for the diagnosis only then.
    #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
    pub fn wants_diagnosis(&self) -> bool {
        self.diagnosis.as_ref().is_some_and(HashDiagnosis::wants)
    }

    /// The hash diagnosis, for a document `judged` whose stored hash differs from its content.
    pub fn diagnosis_of(&mut self, judged: &Judged) -> Option<&mut HashDiagnosis> {
        self.diagnosis
            .as_mut()
            .filter(|diagnosis| diagnosis.wants() && judged.hash.differs())
    }

    /// Counts one document, `shown` as its id, holding `key` (`None`: a key that collides
    /// with no other, such as one with a NULL part in a SQL unique constraint).
    pub fn count(
        &mut self,
        report: &mut AuditReport,
        judged: &Judged,
        shown: &str,
        key: Option<StoredKey<V>>,
    ) {
        let clean = judged.record(report, shown);
        self.duplicates.count(report, key, shown, clean);
    }

    /// Ends the pass: the last key's duplicates, the model check's finding, the fields the
    /// stored hashes leave out, and, where no field order was given (`stored_names`: the
    /// stored fields met, in stored order), the fields the hashes cover that no flag names.
    pub fn finish<'n>(
        self,
        report: &mut AuditReport,
        stored_names: Option<impl IntoIterator<Item = &'n str>>,
    ) {
        self.duplicates.finish(report);
        report.model_mismatch = self.model_check.and_then(|check| check.finding());
        if let Some(diagnosis) = &self.diagnosis {
            for field in diagnosis.finding() {
                note_unknown(&mut report.unknown_fields, field);
            }
            if let Some(names) = stored_names {
                report.unnamed_fields = unnamed_fields(self.model, names);
            }
        }
    }
}
