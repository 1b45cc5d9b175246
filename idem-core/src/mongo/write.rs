//! One document ready to write, and the judgement of a stored document against it. The single
//! upsert, the batch upsert and `delete` all build their commands and read their verdicts here.

use std::cmp::Ordering;

use mongodb::bson::{self, doc, Bson, Document};
use serde::Serialize;

use super::compare::{bson_equal, show, version_order};
use crate::error::Error;
use crate::id::Id;
use crate::model::{DocumentRef, Field, Idempotent, Model, Role};
use crate::outcome::Outcome;

/// MongoDB's limit on one stored document (`maxBsonObjectSize` on every server).
pub(crate) const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// One document ready to write: id, hash and stored form, computed before any round trip.
pub(crate) struct PreparedWrite {
    pub model: &'static Model,
    pub document: DocumentRef,
    pub id: Id,
    pub id_text: String,
    pub hash: String,
    /// The fields an upsert sets: every stored field but `_id`, the tombstone and the pushed
    /// lists, plus the content hash.
    pub body: Document,
    /// The tombstone value the document carries, if set.
    pub tombstone: Option<Bson>,
}

/// What a stored document means for an incoming write.
pub(crate) enum Verdict {
    /// The guarded update replaces it (or, if nothing is stored, inserts).
    Replace,
    /// Nothing to write: `Unchanged`, `Stale` or `Deleted`.
    Settled(Outcome),
    /// The write would change a frozen field.
    Refused(Error),
}

impl PreparedWrite {
    /// Prepares `doc` under its derived id.
    pub fn new<T: Idempotent + Serialize>(doc: &T) -> Result<Self, Error> {
        PreparedWrite::with_id(doc, doc.id()?)
    }

    /// Prepares `doc` under `id` (an event's id is not derived).
    pub fn with_id<T: Idempotent + Serialize>(doc: &T, id: Id) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let hash = doc.content_hash()?.to_hex();
        let document = doc.document_ref();
        let mut body = bson::to_document(doc).map_err(|error| Error::Serialize {
            document: Box::new(document.clone()),
            message: error.to_string(),
        })?;
        let must_be_stored = model.fields().iter().filter(|field| {
            field.role().is_frozen() || matches!(field.role(), Role::Version | Role::IdempotencyKey)
        });
        for field in must_be_stored {
            if !body.contains_key(field.stored_name()) {
                return Err(Error::FieldNotSerialized {
                    document: Box::new(document),
                    field: field.name(),
                    stored_name: field.stored_name(),
                });
            }
        }
        let tombstone = model
            .tombstone_field()
            .and_then(|field| body.get(field.stored_name()))
            .filter(|marker| !matches!(marker, Bson::Null))
            .cloned();
        for field in model
            .fields()
            .iter()
            .filter(|field| !model.is_upserted(field.stored_name()))
        {
            body.remove(field.stored_name());
        }
        body.insert(model.hash_field(), hash.clone());
        // With room for the `_id` the upsert adds.
        let size = bson_size(&body) + 40;
        if size > MAX_DOCUMENT_BYTES {
            return Err(Error::DocumentTooLarge {
                document: Box::new(document),
                size,
                limit: MAX_DOCUMENT_BYTES,
            });
        }
        Ok(PreparedWrite {
            model,
            document,
            id,
            id_text: id.to_string(),
            hash,
            body,
            tombstone,
        })
    }

    fn value(&self, field: &Field) -> &Bson {
        // `with_id` checked that every frozen, version and key field is in the body.
        self.body.get(field.stored_name()).unwrap_or(&Bson::Null)
    }

    /// The incoming version, if the type has one.
    pub fn version(&self) -> Option<&Bson> {
        self.model.version_field().map(|field| self.value(field))
    }

    /// `{k1: {$eq: v1}, …}` over the natural-key fields. `$eq` keeps a value that looks like an
    /// operator document from being read as one.
    pub fn natural_key_filter(&self) -> Document {
        self.model
            .natural_key_fields()
            .map(|field| {
                let value = self.value(field).clone();
                (
                    field.stored_name().to_owned(),
                    Bson::Document(doc! { "$eq": value }),
                )
            })
            .collect()
    }

    /// Matches the stored document only if this write may replace it: same id and natural key,
    /// not deleted, every frozen field equal or never written, and either an older version or
    /// (without versions) another content hash.
    pub fn guarded_filter(&self) -> Document {
        let mut filter = doc! { "_id": self.id_text.as_str() };
        filter.extend(self.natural_key_filter());
        if let Some(tombstone) = self.model.tombstone_field() {
            filter.insert(tombstone.stored_name(), doc! { "$eq": Bson::Null });
        }
        // Every condition is on its own top-level field, never under `$and`/`$or`, so a server
        // finds the document by `_id` and checks the rest on it. `$in: [v, null]` matches the
        // value, or a field never written (missing or null).
        for field in self
            .model
            .frozen_fields()
            .filter(|field| field.role() != Role::Key)
        {
            let unchanged = doc! { "$in": [self.value(field).clone(), Bson::Null] };
            filter.insert(field.stored_name(), unchanged);
        }
        match self.model.version_field() {
            // Older, never written, or of another type: only a stored version at least as new
            // blocks the write.
            Some(field) => {
                let older = doc! { "$not": { "$gte": self.value(field).clone() } };
                filter.insert(field.stored_name(), older);
            }
            None => {
                filter.insert(self.model.hash_field(), doc! { "$ne": self.hash.as_str() });
            }
        }
        filter
    }

    /// Sets the upserted fields; a new document also gets its pushed lists, empty.
    pub fn update(&self) -> Document {
        let mut update = doc! { "$set": self.body.clone() };
        let empty_lists = self.empty_lists();
        if !empty_lists.is_empty() {
            update.insert("$setOnInsert", empty_lists);
        }
        update
    }

    /// The whole document as a first write stores it: `_id`, the upserted fields, and the
    /// pushed lists, empty. What `insert_new`, `record` and `delete` insert.
    pub fn inserted_document(&self) -> Document {
        let mut document = doc! { "_id": self.id_text.as_str() };
        document.extend(self.body.clone());
        document.extend(self.empty_lists());
        document
    }

    /// Each pushed list, empty: a new document starts them so.
    fn empty_lists(&self) -> Document {
        self.model
            .pushed_fields()
            .map(|field| (field.stored_name().to_owned(), Bson::Array(Vec::new())))
            .collect()
    }

    /// What the stored document under this id means for this write.
    pub fn judge(&self, stored: &Document) -> Verdict {
        if is_tombstoned(self.model, stored) {
            return Verdict::Settled(Outcome::Deleted);
        }
        if let Some(refusal) = self.frozen_change(stored) {
            return Verdict::Refused(refusal);
        }
        let same_content = stored.get_str(self.model.hash_field()).ok() == Some(self.hash.as_str());
        let (Some(field), Some(incoming)) = (self.model.version_field(), self.version()) else {
            return if same_content {
                Verdict::Settled(Outcome::Unchanged)
            } else {
                Verdict::Replace
            };
        };
        let stored_version = stored
            .get(field.stored_name())
            .filter(|version| !is_null(version));
        match stored_version.and_then(|stored| version_order(stored, incoming)) {
            // Never written, older, or of another type: the guarded filter replaces it.
            None | Some(Ordering::Less) => Verdict::Replace,
            Some(Ordering::Equal) if same_content => Verdict::Settled(Outcome::Unchanged),
            // Same version with other content, or a newer stored version: the stored document
            // stands.
            Some(_) => Verdict::Settled(Outcome::Stale),
        }
    }

    /// The refusal for a stored document under this id whose frozen field differs, if any. A
    /// field never written is not a change.
    fn frozen_change(&self, stored: &Document) -> Option<Error> {
        self.model.frozen_fields().find_map(|field| {
            let stored_value = stored.get(field.stored_name())?;
            if is_null(stored_value) && field.role() != Role::Key {
                return None;
            }
            let incoming = self.value(field);
            (!bson_equal(stored_value, incoming))
                .then(|| self.refusal(stored, field.name(), Some(stored_value), incoming))
        })
    }

    /// The refusal for the natural key stored under another id: the field feeding the id that
    /// differs (the timestamp, or `_id` itself if the id was derived another way).
    pub fn id_change(&self, stored: &Document) -> Error {
        let feeding = self.model.key_fields().chain(self.model.timestamp_field());
        for field in feeding {
            let stored_value = stored.get(field.stored_name());
            let incoming = self.value(field);
            if !stored_value.is_some_and(|value| bson_equal(value, incoming)) {
                return self.refusal(stored, field.name(), stored_value, incoming);
            }
        }
        let stored_id = stored.get("_id");
        self.refusal(
            stored,
            "_id",
            stored_id,
            &Bson::String(self.id_text.clone()),
        )
    }

    fn refusal(
        &self,
        stored: &Document,
        field: &'static str,
        stored_value: Option<&Bson>,
        incoming: &Bson,
    ) -> Error {
        Error::FrozenFieldChanged {
            document: Box::new(self.document.clone()),
            stored_id: stored_id(stored).unwrap_or(self.id),
            field,
            stored: stored_value.map_or_else(|| "(missing)".to_owned(), show),
            incoming: show(incoming),
        }
    }

    /// The fields a judgement reads, for a projection.
    pub fn judged_fields(&self) -> Document {
        let mut projection = doc! { "_id": 1, self.model.hash_field(): 1 };
        let judged = self.model.fields().iter().filter(|field| {
            field.role().is_frozen() || matches!(field.role(), Role::Version | Role::Tombstone)
        });
        for field in judged {
            projection.insert(field.stored_name(), 1);
        }
        projection
    }
}

/// A stored null is a field never written, as an `Option` left `None`.
fn is_null(value: &Bson) -> bool {
    matches!(value, Bson::Null)
}

/// The id of a stored document, if idem wrote it (a ULID string).
pub(crate) fn stored_id(stored: &Document) -> Option<Id> {
    stored.get_str("_id").ok().and_then(|id| id.parse().ok())
}

/// Whether a stored document carries a deletion marker.
pub(crate) fn is_tombstoned(model: &Model, stored: &Document) -> bool {
    model
        .tombstone_field()
        .and_then(|field| stored.get(field.stored_name()))
        .is_some_and(|marker| !matches!(marker, Bson::Null))
}

/// The size of `document` encoded as BSON, computed from the document without encoding it.
pub(crate) fn bson_size(document: &Document) -> usize {
    5 + document
        .iter()
        .map(|(key, value)| element_size(key.len(), value))
        .sum::<usize>()
}

/// A type byte, the key as a C string, then the value.
fn element_size(key_len: usize, value: &Bson) -> usize {
    1 + key_len + 1 + value_size(value)
}

fn value_size(value: &Bson) -> usize {
    match value {
        Bson::Double(_) | Bson::Int64(_) | Bson::Timestamp(_) | Bson::DateTime(_) => 8,
        Bson::String(text) | Bson::JavaScriptCode(text) | Bson::Symbol(text) => 4 + text.len() + 1,
        Bson::Array(items) => {
            5 + items
                .iter()
                .enumerate()
                .map(|(index, item)| element_size(decimal_digits(index), item))
                .sum::<usize>()
        }
        Bson::Document(document) => bson_size(document),
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MaxKey | Bson::MinKey => 0,
        Bson::RegularExpression(regex) => regex.pattern.len() + 1 + regex.options.len() + 1,
        Bson::JavaScriptCodeWithScope(code) => 4 + 4 + code.code.len() + 1 + bson_size(&code.scope),
        Bson::Int32(_) => 4,
        Bson::Binary(binary) => {
            // The old binary subtype repeats the length inside the payload.
            let repeated_length = if binary.subtype == bson::spec::BinarySubtype::BinaryOld {
                4
            } else {
                0
            };
            4 + 1 + repeated_length + binary.bytes.len()
        }
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        // Deprecated, and its parts are private: measured by encoding it alone, less the 7 bytes
        // of a one-element document with an empty key.
        Bson::DbPointer(_) => {
            bson::to_vec(&doc! { "": value.clone() }).map_or(usize::MAX, |bytes| bytes.len() - 7)
        }
    }
}

/// The length of `n` in decimal: the key of array item `n`.
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use mongodb::bson::oid::ObjectId;
    use mongodb::bson::spec::BinarySubtype;
    use mongodb::bson::{Binary, DateTime, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp};

    use super::*;

    #[test]
    fn bson_size_is_the_length_of_the_encoding_for_every_type() {
        let items: Vec<Bson> = (0..1005).map(Bson::Int32).collect();
        let document = doc! {
            "double": 1.5,
            "string": "héllo",
            "empty": "",
            "array": items,
            "nested": { "a": [ { "b": null }, [] ], "c": {} },
            "bool": true,
            "null": null,
            "regex": Regex { pattern: "^a.*b$".into(), options: "im".into() },
            "code": Bson::JavaScriptCode("function() {}".into()),
            "scoped": JavaScriptCodeWithScope { code: "x".into(), scope: doc! { "x": 1 } },
            "int32": 7_i32,
            "int64": 7_i64,
            "timestamp": Timestamp { time: 1, increment: 2 },
            "binary": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "old binary": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
            "oid": ObjectId::new(),
            "date": DateTime::from_millis(1_700_000_000_000),
            "symbol": Bson::Symbol("s".into()),
            "decimal": Decimal128::from_bytes([0; 16]),
            "undefined": Bson::Undefined,
            "max": Bson::MaxKey,
            "min": Bson::MinKey,
        };
        for (key, value) in &document {
            let alone = doc! { key: value.clone() };
            assert_eq!(
                bson_size(&alone),
                bson::to_vec(&alone).unwrap().len(),
                "{key}"
            );
        }
        assert_eq!(bson_size(&document), bson::to_vec(&document).unwrap().len());
        assert_eq!(bson_size(&Document::new()), 5);
    }
}
