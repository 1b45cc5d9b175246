//! What a statement returns of a stored row that stopped a write, and the stored digests of its
//! guarded fields.

use serde_json::{Map, Value};

use crate::engine::StoredDigest;
use crate::model::{Field, Model};
use crate::verdict::StoredVersion;

/// What a stored row that stopped a write holds, as the statement returns it.
#[derive(Clone, Debug)]
pub(crate) struct StoredRow {
    pub id: String,
    pub tombstoned: bool,
    pub hash: Option<String>,
    /// The digests column as stored, and parsed; `None` for a row without digests (another
    /// tool wrote it).
    pub digests_text: Option<String>,
    pub digests: Option<Map<String, Value>>,
    pub version_key: Option<String>,
    /// The guarded fields' values as text, in [`Model::digested_fields`] order.
    pub guarded_values: Vec<Option<String>>,
    /// The version field's value as text, for a type with versions.
    pub version_value: Option<String>,
    /// The natural-key columns as text, for a row read by id; `None` for a row found by its
    /// natural key, which holds the incoming one.
    pub natural_key: Option<Vec<Option<String>>>,
}

impl StoredRow {
    /// A row's stored state from its texts, in the order the SQL drivers select it: id, (the
    /// deletion, given as `tombstoned`), hash, digests, version key, each guarded field, then
    /// the version field for a type with versions.
    pub fn from_texts(model: &Model, texts: &[Option<String>], tombstoned: bool) -> StoredRow {
        let text = |at: usize| texts.get(at).cloned().flatten();
        let guarded = model.digested_fields().count();
        let digests_text = text(3);
        StoredRow {
            id: text(0).unwrap_or_default(),
            tombstoned,
            hash: text(2),
            digests: digests_text
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
            digests_text,
            version_key: text(4),
            guarded_values: (5..5 + guarded).map(text).collect(),
            version_value: model.version_field().and_then(|_| text(5 + guarded)),
            natural_key: None,
        }
    }

    /// The stored digest of a guarded field.
    pub fn digest(&self, field: &Field) -> StoredDigest<'_> {
        match &self.digests {
            None => StoredDigest::NoDigests,
            Some(digests) => digest_of(digests, field),
        }
    }

    /// The stored version order key.
    pub fn version(&self) -> StoredVersion<'_> {
        self.version_key
            .as_deref()
            .map_or(StoredVersion::Absent, StoredVersion::Key)
    }
}

/// The digest of `field` in a digests column read as JSON, as the audit reads it: no digests
/// where there is no such column, or it holds no object (as [`StoredRow::from_texts`] reads
/// it for the engine, and the MongoDB store a field that is no document).
pub(crate) fn digest_in<'s>(digests: Option<&'s Value>, field: &Field) -> StoredDigest<'s> {
    match digests {
        Some(Value::Object(digests)) => digest_of(digests, field),
        _ => StoredDigest::NoDigests,
    }
}

/// The digest of `field` in a digests object.
fn digest_of<'s>(digests: &'s Map<String, Value>, field: &Field) -> StoredDigest<'s> {
    StoredDigest::of_entry(digests.get(field.stored_name()))
}
