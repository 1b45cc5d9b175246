//! What a report counts and shows: a kind of problem ([`Finding`]) with its samples, the
//! values of a natural key as stored ([`ShownKey`]), natural keys held twice ([`Duplicates`]),
//! and stored fields the model does not have ([`UnknownField`]).

use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// How many sample ids a report keeps for each kind of problem, and how many duplicated natural
/// keys it shows.
pub const SAMPLES_PER_KIND: usize = 5;

/// How far an audit has come, passed to its progress callback after each document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditProgress {
    /// Documents read so far.
    pub scanned: u64,
    /// The number of documents the server estimates the collection holds, if it said.
    pub total: Option<u64>,
}

impl AuditProgress {
    /// Progress after `scanned` documents out of an estimated `total`.
    pub fn new(scanned: u64, total: Option<u64>) -> Self {
        AuditProgress { scanned, total }
    }
}

/// One kind of problem: how many documents have it, and the first few of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// Documents with this problem.
    pub count: u64,
    /// The first [`SAMPLES_PER_KIND`] of them, in the order the audit read them.
    pub samples: Vec<Sample>,
}

impl Finding {
    /// Counts one more document, keeping it as a sample while there is room.
    pub fn record(&mut self, id: String, detail: Option<String>) {
        self.keep(Sample {
            id,
            derived_id: None,
            detail,
        });
    }

    /// Counts one more document that belongs under `derived_id`, keeping it as a sample while
    /// there is room.
    pub fn record_misplaced(&mut self, id: String, derived_id: String) {
        self.keep(Sample {
            id,
            derived_id: Some(derived_id),
            detail: None,
        });
    }

    fn keep(&mut self, sample: Sample) {
        self.count += 1;
        if self.samples.len() < SAMPLES_PER_KIND {
            self.samples.push(sample);
        }
    }

    /// The finding as a summary shows it: `name: count`, its samples, how many more there are,
    /// and what to do about them (`advice`).
    pub(super) fn show(&self, f: &mut fmt::Formatter<'_>, name: &str, advice: &str) -> fmt::Result {
        writeln!(f, "  {name}: {}", self.count)?;
        for sample in &self.samples {
            let shown = match (&sample.derived_id, &sample.detail) {
                (Some(derived), Some(detail)) => format!(" (derived id {derived}; {detail})"),
                (Some(derived), None) => format!(" (derived id {derived})"),
                (None, Some(detail)) => format!(" ({detail})"),
                (None, None) => String::new(),
            };
            writeln!(f, "    {}{shown}", sample.id)?;
        }
        let more = self.count - self.samples.len() as u64;
        if more > 0 {
            writeln!(
                f,
                "    … and {more} more (a report keeps the first {SAMPLES_PER_KIND})"
            )?;
        }
        if !advice.is_empty() {
            writeln!(f, "    to do: {advice}")?;
        }
        Ok(())
    }

    /// Whether no document has this problem.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A document an audit shows as an example of a problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Sample {
    /// The stored id as text (an ObjectId as its 24 hex digits).
    pub id: String,
    /// The id a misplaced document belongs under (a legacy id, an orphan), or a moved one was
    /// moved to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derived_id: Option<String>,
    /// What the audit saw, where the ids do not say: why no id can be derived, the document does
    /// not deserialize, or could not be moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A stored value shown in a report: a natural-key value as the server holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShownValue {
    /// Text.
    Text(String),
    /// An integer.
    Integer(i64),
    /// A boolean.
    Bool(bool),
    /// Missing or null: a unique index holds both as null, so they collide too.
    Null,
    /// Any other value, as the backend writes it (MongoDB: relaxed extended JSON).
    Other(String),
}

impl ShownValue {
    /// A stored value in JSON as a report shows it: an integer as one, any other number, an
    /// array or an object as JSON text (how MongoDB's relaxed extended JSON shows a date, a
    /// double or an ObjectId).
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn from_json(value: serde_json::Value) -> Self {
        match value {
            serde_json::Value::String(text) => ShownValue::Text(text),
            serde_json::Value::Bool(flag) => ShownValue::Bool(flag),
            serde_json::Value::Null => ShownValue::Null,
            serde_json::Value::Number(number) => match number.as_i64() {
                Some(integer) => ShownValue::Integer(integer),
                None => ShownValue::Other(number.to_string()),
            },
            other => ShownValue::Other(other.to_string()),
        }
    }
}

impl fmt::Display for ShownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShownValue::Text(text) => write!(f, "{text:?}"),
            ShownValue::Integer(value) => write!(f, "{value}"),
            ShownValue::Bool(value) => write!(f, "{value}"),
            ShownValue::Null => f.write_str("null"),
            ShownValue::Other(shown) => f.write_str(shown),
        }
    }
}

impl Serialize for ShownValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ShownValue::Text(text) | ShownValue::Other(text) => serializer.serialize_str(text),
            ShownValue::Integer(value) => serializer.serialize_i64(*value),
            ShownValue::Bool(value) => serializer.serialize_bool(*value),
            ShownValue::Null => serializer.serialize_unit(),
        }
    }
}

/// The values of a natural key, by stored field name, in declaration order. Serialized as a map
/// (`{"slug": "hello", "lang": "en"}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShownKey(pub Vec<(String, ShownValue)>);

impl fmt::Display for ShownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::document::show_key(f, self.0.iter().map(|(field, value)| (field, value)))
    }
}

impl Serialize for ShownKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (field, value) in &self.0 {
            map.serialize_entry(field, value)?;
        }
        map.end()
    }
}

/// One natural key held by more than one document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DuplicateKey {
    /// The key's values.
    pub key: ShownKey,
    /// How many documents hold it.
    pub documents: u64,
    /// The ids of the first [`SAMPLES_PER_KIND`] of them.
    pub sample_ids: Vec<String>,
}

/// Natural keys held by more than one document: they keep the unique natural-key index from
/// being built, and idem from writing to the collection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Duplicates {
    /// Natural keys held by more than one document.
    pub keys: u64,
    /// Documents holding one of them.
    pub documents: u64,
    /// The first [`SAMPLES_PER_KIND`] of those keys.
    pub samples: Vec<DuplicateKey>,
}

impl Duplicates {
    /// Counts a natural key held by `documents` documents (two or more).
    pub fn record(&mut self, key: ShownKey, documents: u64, sample_ids: Vec<String>) {
        self.keys += 1;
        self.documents += documents;
        if self.samples.len() < SAMPLES_PER_KIND {
            self.samples.push(DuplicateKey {
                key,
                documents,
                sample_ids,
            });
        }
    }
}

/// A stored field (a column) that is not a field of the model an audit was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UnknownField {
    /// Its stored name.
    pub name: String,
    /// How the audit knows the model does not have it.
    pub reason: UnknownReason,
}

impl UnknownField {
    /// The field `name`, unknown for `reason`.
    pub fn new(name: impl Into<String>, reason: UnknownReason) -> Self {
        UnknownField {
            name: name.into(),
            reason,
        }
    }
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            UnknownReason::NotListed => "not among the model's fields",
            UnknownReason::TableKey => {
                "the table's own key (a primary key other than `_id`, an identity or serial \
                 column), which idem never writes"
            }
            UnknownReason::NotInStoredHashes => {
                "the stored content hashes match the content without it: the type does not hash \
                 it"
            }
        };
        write!(f, "`{}`: {why}", self.name)
    }
}

/// How an audit knows a stored field is not a field of its model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UnknownReason {
    /// The model lists its fields (the type's, a model file's, `--fields`), and not this one.
    NotListed,
    /// The table's own key: a primary key column other than `_id`, an identity or serial
    /// column. idem never writes one.
    TableKey,
    /// Found without the list of fields: the hashes idem stored match the content with this
    /// field left out, so the type does not hash it (it is no field of the type, or one that is
    /// volatile, an effect, a tombstone or a pushed list).
    NotInStoredHashes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_counts_every_document_and_keeps_the_first_samples() {
        let mut finding = Finding::default();
        for n in 0..(SAMPLES_PER_KIND as u64 + 3) {
            finding.record(format!("id-{n}"), None);
        }
        assert_eq!(finding.count, SAMPLES_PER_KIND as u64 + 3);
        assert_eq!(finding.samples.len(), SAMPLES_PER_KIND);
        assert_eq!(finding.samples[0].id, "id-0");
    }
}
