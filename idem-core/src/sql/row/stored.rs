//! What a statement returns of a stored row that stopped a write, and the stored digest of its
//! guarded fields.

use serde_json::Value;

use crate::engine::StoredDigest;
use crate::model::Model;
use crate::verdict::StoredVersion;

/// What a stored row that stopped a write holds, as the statement returns it.
#[derive(Clone, Debug)]
pub(crate) struct StoredRow {
    pub id: String,
    pub tombstoned: bool,
    pub hash: Option<String>,
    /// The digest of the guarded fields as stored, in hex; `None` for a row without one
    /// (another tool wrote it, or a table made before kept digests otherwise).
    pub digests_text: Option<String>,
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
            digests_text,
            version_key: text(4),
            guarded_values: (5..5 + guarded).map(text).collect(),
            version_value: model.version_field().and_then(|_| text(5 + guarded)),
            natural_key: None,
        }
    }

    /// The stored digest of the guarded fields, the same for each.
    pub fn digest(&self) -> StoredDigest<'_> {
        self.digests_text
            .as_deref()
            .map_or(StoredDigest::NoDigests, StoredDigest::Whole)
    }

    /// The stored version order key.
    pub fn version(&self) -> StoredVersion<'_> {
        self.version_key
            .as_deref()
            .map_or(StoredVersion::Absent, StoredVersion::Key)
    }
}

/// The stored digest of the guarded fields in a digests column read as JSON, as the audit
/// reads it: no digest where there is no such column or it holds none (as
/// [`StoredRow::from_texts`] reads it for the engine).
pub(crate) fn digest_in(digests: Option<&Value>) -> StoredDigest<'_> {
    match digests {
        Some(Value::String(digest)) => StoredDigest::Whole(digest),
        _ => StoredDigest::NoDigests,
    }
}
