//! What the caller of [`Store::adopt`](crate::mongo::Store::adopt) chooses: the options of a run, and
//! the rule that picks which of the documents sharing a natural key stays, with the order of
//! BSON values that rule compares by.

use std::cmp::Ordering;
use std::fmt;

use mongodb::bson::{Bson, Document};

use crate::audit::{kept_by_value, Ordered};
use crate::mongo::compare::number;

/// The suffix of the collection that duplicates set aside by a [`DuplicateRule::Keep`] rule are
/// moved to.
pub const ARCHIVE_SUFFIX: &str = "_idem_duplicates";

/// What [`Store::adopt`](crate::mongo::Store::adopt) does with documents that share a natural key.
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub enum DuplicateRule {
    /// Leave them all where they are and list them in the report.
    #[default]
    Report,
    /// Keep the document at the index the function returns (among the documents sharing a key,
    /// in the order the collection returns them) and move the others to the archive collection.
    /// An index out of range keeps them all and reports them.
    Keep(fn(&[Document]) -> usize),
    /// Keep the document with the greatest value of this stored field (the newest by an
    /// `updatedAt`, the highest revision) and archive the others. Numbers compare by value, dates
    /// by instant, text by its UTF-8 bytes; a key whose greatest value is held twice, or whose
    /// documents lack the field or hold values of different kinds, is left and reported.
    KeepGreatest(&'static str),
    /// The same, keeping the document with the least value of the field (the first written).
    KeepLeast(&'static str),
}

impl DuplicateRule {
    /// The index of the document to keep among `group`, or `None` to leave them all; an index
    /// out of range is core's to refuse ([`crate::audit::kept_of_group`]).
    pub(super) fn choose(&self, group: &[Document]) -> Option<usize> {
        let (field, direction) = match *self {
            DuplicateRule::Report => return None,
            DuplicateRule::Keep(choose) => return Some(choose(group)),
            DuplicateRule::KeepGreatest(field) => (field, Ordering::Greater),
            DuplicateRule::KeepLeast(field) => (field, Ordering::Less),
        };
        // The document whose `field` is the most `direction` ([`kept_by_value`]'s rule).
        let values: Vec<Option<Ordered<'_>>> = group
            .iter()
            .map(|document| ordered(document.get(field)))
            .collect();
        kept_by_value(&values, direction)
    }
}

/// `value` as the duplicate rules order it ([`Ordered`]); `None` for a kind not ordered.
fn ordered(value: Option<&Bson>) -> Option<Ordered<'_>> {
    match value? {
        Bson::DateTime(date) => Some(Ordered::Date(date.timestamp_millis())),
        Bson::String(text) => Some(Ordered::Text(text)),
        value => number(value).filter(|n| !n.is_nan()).map(Ordered::Number),
    }
}

impl fmt::Debug for DuplicateRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DuplicateRule::Report => f.write_str("Report"),
            DuplicateRule::Keep(_) => f.write_str("Keep(…)"),
            DuplicateRule::KeepGreatest(field) => write!(f, "KeepGreatest({field:?})"),
            DuplicateRule::KeepLeast(field) => write!(f, "KeepLeast({field:?})"),
        }
    }
}

/// How [`Store::adopt`](crate::mongo::Store::adopt) runs.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct AdoptOptions {
    /// What to do with documents sharing a natural key.
    pub duplicates: DuplicateRule,
    /// Stop before the document after this many (moved, finished or archived), leaving the
    /// collection in a state the next run finishes: to bound the work of one call.
    pub max_documents: Option<u64>,
    /// Stop after this many writes (each move takes three, each archived duplicate two), even in
    /// the middle of a document's move: what an interruption at any point leaves, for tests of
    /// the resumption. [`AdoptOptions::max_documents`] is the limit to bound a run with.
    #[doc(hidden)]
    pub max_writes: Option<u64>,
    /// [`Store::adopt_model`](crate::mongo::Store::adopt_model) moves documents even when the stored
    /// ones were written with another model than the one given (see [`crate::model_check`]):
    /// for a deliberate change of keys, timestamp or scheme. Off by default, when such a run is
    /// refused.
    pub ignore_model_check: bool,
    /// [`Store::adopt_model`](crate::mongo::Store::adopt_model) moves documents even when they hold
    /// fields that are not fields of the model given (see
    /// [`AuditReport::unknown_fields`](crate::AuditReport::unknown_fields)), leaving them out
    /// of the content hashes stored: they are no fields of the type. Off by default, when such
    /// a run is refused: a model that misses a field of the type would store hashes the type
    /// does not compute, and the next upsert of every document would rewrite it.
    pub allow_unknown_fields: bool,
}

impl AdoptOptions {
    /// Moves documents even when they hold fields that are not the model's, leaving them out
    /// of the hashes; see [`AdoptOptions::allow_unknown_fields`].
    pub fn allowing_unknown_fields(mut self) -> Self {
        self.allow_unknown_fields = true;
        self
    }

    /// Duplicates are handled by `rule`.
    pub fn with_duplicates(mut self, rule: DuplicateRule) -> Self {
        self.duplicates = rule;
        self
    }

    /// Moves documents even when the stored ones match another model than the one given; see
    /// [`AdoptOptions::ignore_model_check`].
    pub fn ignoring_model_check(mut self) -> Self {
        self.ignore_model_check = true;
        self
    }

    /// Stop after `documents` documents; see [`AdoptOptions::max_documents`].
    pub fn with_max_documents(mut self, documents: u64) -> Self {
        self.max_documents = Some(documents);
        self
    }

    /// Stop after `writes` writes, even inside a move; see [`AdoptOptions::max_writes`].
    #[doc(hidden)]
    pub fn with_max_writes(mut self, writes: u64) -> Self {
        self.max_writes = Some(writes);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, DateTime};

    fn group(values: &[Bson]) -> Vec<Document> {
        values
            .iter()
            .map(|value| doc! { "at": value.clone() })
            .collect()
    }

    #[test]
    fn the_greatest_or_least_value_is_kept_and_a_tie_is_left() {
        let numbers = group(&[Bson::Int32(3), Bson::Double(5.5), Bson::Int64(1)]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&numbers), Some(1));
        assert_eq!(DuplicateRule::KeepLeast("at").choose(&numbers), Some(2));
        let dates = group(&[
            Bson::DateTime(DateTime::from_millis(20)),
            Bson::DateTime(DateTime::from_millis(10)),
        ]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&dates), Some(0));
        let tied = group(&[Bson::Int32(5), Bson::Int32(3), Bson::Int64(5)]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&tied), None);
        assert_eq!(DuplicateRule::KeepLeast("at").choose(&tied), Some(1));
        let mixed = group(&[Bson::Int32(5), Bson::String("6".into())]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&mixed), None);
        let missing = vec![doc! { "at": 1 }, doc! {}];
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&missing), None);
        assert_eq!(DuplicateRule::Report.choose(&numbers), None);
    }
}
