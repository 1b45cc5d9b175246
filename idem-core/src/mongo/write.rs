//! One document ready to write: its stored form and the server-side guard that decides whether
//! it replaces the stored document. The single upsert, the batch upsert, `delete`, `insert_new`
//! and `record` all build their commands here; the engine judges what they meet
//! ([`crate::engine`]).
//!
//! The guard is an aggregation expression over the stored document, in the same terms as
//! [`crate::verdict::Stored::judge`]: not deleted; each guarded field never written or holding
//! the incoming digest (a document without digests only where none of those fields is written);
//! and a strictly newer version order key (a document with a version but no order key stops it),
//! or without versions another content hash. A write that replaces a document stamps it with its
//! own marker, so the document the server returns says whether this very write replaced it.

use mongodb::bson::{self, bson, doc, Bson, Document};
use serde::Serialize;

use super::compare::show;
use crate::engine::{
    check_written_names, guarded_value_digest, Prepared, Preparing, StoredDigest, StoredScalar,
};
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{
    Field, Model, Role, APPLIED_OPS_FIELD, FROZEN_DIGESTS_FIELD, ID_FIELD, INSERTING_FIELD,
    VERSION_KEY_FIELD, WRITE_MARKER_FIELD,
};
use crate::outcome::Outcome;
use crate::push::path_step;
use crate::short_text::ShortText;

/// The prefixes of a write marker: the write inserted the document, or replaced it.
const INSERTED: &str = "i:";
const UPDATED: &str = "u:";

/// MongoDB's limit on one stored document (`maxBsonObjectSize` on every server).
pub(crate) const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// One document ready to write: what the engine reads of it ([`Prepared`], which it
/// dereferences to) and its stored form, computed before any round trip.
pub(crate) struct PreparedWrite {
    prepared: Prepared,
    /// The fields an upsert writes: what serde wrote less the fields other routes own, plus the
    /// content hash, the guarded fields' digests and the version's order key. No `_id`.
    pub body: Document,
    /// The incoming values of the effect fields: written when the document is inserted only.
    effects: Document,
    /// This write's random marker: a document it replaced holds it in `idemWrite`.
    marker: String,
    /// The tombstone value the document carries, if set.
    pub tombstone: Option<Bson>,
}

impl std::ops::Deref for PreparedWrite {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

impl PreparedWrite {
    /// Prepares `doc` under its derived id.
    pub fn new<T: Idempotent + Serialize>(doc: &T) -> Result<Self, Error> {
        PreparedWrite::with_id(doc, doc.id()?)
    }

    /// Prepares `doc` under `id` (an event's id is not derived).
    pub fn with_id<T: Idempotent + Serialize>(doc: &T, id: Id) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let preparing = Preparing::begin(doc, id)?;
        let document = || preparing.document();
        let serialize_error = |message| preparing.serialize_error(message);
        let mut body = super::text_keys::to_document(doc)
            .map_err(|error| serialize_error(bson_refusal(doc, &error)))?;
        // The driver would fail the whole command on it, a batch's other documents included.
        if let Some(problem) = nul_name_problem(&body) {
            return Err(serialize_error(problem));
        }
        // Present, even as null: MongoDB stores and indexes a null key as any other value.
        check_written_names(model, document, body.keys(), |name| body.contains_key(name))?;
        let tombstone = model
            .tombstone_field()
            .and_then(|field| body.get(field.stored_name()))
            .filter(|marker| !marker.is_null())
            .cloned();
        let mut effects = Document::new();
        for field in model.fields() {
            let value = body.remove(field.stored_name());
            match (field.role(), value) {
                (Role::Effect, Some(initial)) => {
                    effects.insert(field.stored_name(), initial);
                }
                (role, Some(value)) if !role.is_owned_elsewhere() => {
                    body.insert(field.stored_name(), value);
                }
                _ => {}
            }
        }
        let digests = model
            .digested_fields()
            .map(|field| {
                let digest = field_digest(&body, field).map_err(&serialize_error)?;
                Ok((field, digest))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let prepared = preparing.finish(digests);
        let version_key = prepared.version_key.as_deref();
        stamp(
            &mut body,
            model,
            &prepared.hash,
            &prepared.digests,
            version_key,
        );
        let write = PreparedWrite {
            prepared,
            body,
            effects,
            marker: ulid::Ulid::generate().to_string(),
            tombstone,
        };
        let size = bson_size(&write.inserted_document());
        if size > MAX_DOCUMENT_BYTES {
            return Err(Error::new(
                write.prepared.document(),
                ErrorKind::DocumentTooLarge {
                    size,
                    limit: MAX_DOCUMENT_BYTES,
                },
            ));
        }
        Ok(write)
    }

    /// The incoming value of `field` (null if serde did not write it).
    pub fn value(&self, field: &Field) -> &Bson {
        self.body.get(field.stored_name()).unwrap_or(&Bson::Null)
    }

    /// `{k1: {$eq: v1}, …}` over the natural-key fields ([`equal_to`]).
    pub fn natural_key_filter(&self) -> Document {
        let key = self.model.natural_key_fields();
        equal_to(key.map(|field| (field.stored_name(), self.value(field))))
    }

    /// The document by `_id`, with the natural-key fields beside it so a collection sharded on
    /// the natural key routes the write to one shard.
    pub fn query(&self) -> Document {
        let mut query = doc! { ID_FIELD: self.id_text.as_str() };
        query.extend(self.natural_key_filter());
        query
    }

    /// The query of the single upsert and of a batch's: [`PreparedWrite::query`], and
    /// [`INSERTING_FIELD`] null, which the server copies into a document it inserts
    /// ([`PreparedWrite::inserting`]).
    pub fn upsert_query(&self) -> Document {
        let mut query = self.query();
        query.insert(INSERTING_FIELD, doc! { "$eq": Bson::Null });
        query
    }

    /// The single upsert's update: replace the stored document if the guard allows, else leave
    /// it as it is, in one command that returns the document as it is afterwards. Its write
    /// marker says whether this write replaced it ([`PreparedWrite::written_here`]).
    pub fn conditional_replacement(&self) -> Vec<Document> {
        let root = Bson::String("$$ROOT".to_owned());
        vec![doc! { "$replaceWith": { "$cond": [self.guard(), self.replacement(), root] } }]
    }

    /// The pinned second step's update: the replacement, unconditional.
    pub fn replacement_pipeline(&self) -> Vec<Document> {
        vec![doc! { "$replaceWith": self.replacement() }]
    }

    /// Whether the document in the pipeline is one the write is inserting: it starts as what
    /// its query names ([`PreparedWrite::upsert_query`]), [`INSERTING_FIELD`] null among them,
    /// where no stored document holds that field. A stored document holding nothing but the id
    /// and natural key is not taken for it.
    fn inserting(&self) -> Bson {
        bson!({ "$eq": [{ "$type": field_path(INSERTING_FIELD) }, "null"] })
    }

    /// The document a write leaves: the incoming fields, then the fields other routes own as
    /// stored (a new document starts its pushed lists empty and its effect fields at their
    /// incoming values). A field serde did not write is gone afterwards.
    fn replacement(&self) -> Bson {
        let incoming = self.incoming();
        let inserting = self.inserting();
        let mut owned = Document::new();
        for (name, pushed) in self.owned_fields() {
            let stored = field_path(name);
            let kept = match (pushed, self.effects.get(name)) {
                (true, _) => bson!({ "$ifNull": [stored, { "$literal": [] }] }),
                // An effect field is written when the document is inserted, never again: a
                // field `apply_once` removed stays removed.
                (false, Some(initial)) => bson!({ "$cond": [
                    inserting.clone(),
                    { "$literal": initial.clone() },
                    stored,
                ] }),
                (false, None) => stored,
            };
            owned.insert(name, kept);
        }
        owned.insert(
            WRITE_MARKER_FIELD,
            bson!({ "$cond": [inserting, self.marked(INSERTED), self.marked(UPDATED)] }),
        );
        bson!({ "$mergeObjects": [{ "$literal": incoming }, owned] })
    }

    /// The incoming fields under `_id`: what every write stores first.
    fn incoming(&self) -> Document {
        let mut incoming = doc! { ID_FIELD: self.id_text.as_str() };
        incoming.extend(self.body.clone());
        incoming
    }

    /// The write marker this write stores when it inserts (`INSERTED`) or updates.
    fn marked(&self, how: &str) -> String {
        format!("{how}{}", self.marker)
    }

    /// What this write did to `stored`, the document as its command left it: `Inserted` or
    /// `Updated` if it holds this write's marker, `None` if another write (or none) left it so.
    pub fn written_here(&self, stored: &Document) -> Option<Outcome> {
        let marker = stored.get_str(WRITE_MARKER_FIELD).ok()?;
        if marker == self.marked(INSERTED) {
            Some(Outcome::Inserted)
        } else if marker == self.marked(UPDATED) {
            Some(Outcome::Updated)
        } else {
            None
        }
    }

    /// The server-side guard: whether this write may replace the stored document (`$$ROOT`).
    /// `Stored::server_may_replace` (in [`crate::verdict`], for its tests) states the same rule.
    fn guard(&self) -> Bson {
        let mut conditions: Vec<Bson> = Vec::new();
        if let Some(tombstone) = self.model.tombstone_field() {
            conditions.push(is_unwritten(field_path(tombstone.stored_name())));
        }
        if !self.digests.is_empty() {
            let digested = self
                .digests
                .iter()
                .map(|(field, digest)| {
                    let stored =
                        field_path(&format!("{FROZEN_DIGESTS_FIELD}.{}", field.stored_name()));
                    // No digest beside others' is "never written" only in an `Option` whose
                    // value is not written either; elsewhere (a field made frozen since, a null
                    // another type left) this side compares the values.
                    let unwritten = match field.null_is_unwritten() {
                        true => bson!({ "$and": [
                            is_unwritten(stored.clone()),
                            is_unwritten(field_path(field.stored_name())),
                        ] }),
                        false => Bson::Boolean(false),
                    };
                    match digest {
                        Some(digest) => bson!({ "$or": [
                            unwritten,
                            { "$eq": [stored, digest.as_str()] },
                        ] }),
                        None => unwritten,
                    }
                })
                .collect::<Vec<_>>();
            // A stored null (or a field left out) is "never written" only in an `Option`
            // field; elsewhere the guard cannot compare it, and this side does, but in the
            // document the upsert is inserting ([`PreparedWrite::inserting`]).
            let inserting = self.inserting();
            let unwritten = self
                .digests
                .iter()
                .map(|(field, _)| match field.null_is_unwritten() {
                    true => is_unwritten(field_path(field.stored_name())),
                    false => inserting.clone(),
                })
                .collect::<Vec<_>>();
            conditions.push(bson!({ "$cond": [
                { "$eq": [{ "$type": field_path(FROZEN_DIGESTS_FIELD) }, "object"] },
                { "$and": digested },
                { "$and": unwritten },
            ] }));
        }
        match &self.version_key {
            Some(key) => {
                let stored = field_path(VERSION_KEY_FIELD);
                // A version stored without its order key is compared on this side, which
                // writes it in a second step pinned to what it read.
                let never_versioned = match self.model.version_field() {
                    Some(field) => bson!({ "$and": [
                        is_unwritten(stored.clone()),
                        is_unwritten(field_path(field.stored_name())),
                    ] }),
                    None => is_unwritten(stored.clone()),
                };
                // A missing key sorts before every string: `$lt` alone would let it through.
                let older = bson!({ "$and": [
                    { "$not": [is_unwritten(stored.clone())] },
                    { "$lt": [stored, key.as_str()] },
                ] });
                conditions.push(bson!({ "$or": [never_versioned, older] }));
            }
            None => {
                let stored = bson!({ "$ifNull": [field_path(self.model.hash_field()), null] });
                conditions.push(bson!({ "$ne": [stored, self.hash.as_str()] }));
            }
        }
        bson!({ "$and": conditions })
    }

    /// The filter of the second step that writes over a document stored without digests or
    /// without a version's order key: it matches only while the document is as it was read, so
    /// nothing written in between is lost.
    pub fn pinned_query(&self, stored: &Document) -> Document {
        let mut query = self.query();
        let pinned = self
            .model
            .tombstone_field()
            .into_iter()
            .chain(self.model.version_field())
            .chain(self.digests.iter().map(|(field, _)| *field))
            .map(Field::stored_name)
            .chain([
                self.model.hash_field(),
                VERSION_KEY_FIELD,
                FROZEN_DIGESTS_FIELD,
            ]);
        for name in pinned {
            let value = stored.get(name).cloned().unwrap_or(Bson::Null);
            query.insert(name, doc! { "$eq": value });
        }
        query
    }

    /// The pinned second step without an update pipeline: the filter matching `stored` only
    /// while it is as read (its guarded state, and the fields other routes own, which the
    /// replacement copies from it), and the replacement: the incoming fields, the owned fields
    /// as read, and this write's marker.
    pub fn pinned_replacement(&self, stored: &Document) -> (Document, Document) {
        let mut query = self.pinned_query(stored);
        let mut replacement = self.incoming();
        for (name, pushed) in self.owned_fields() {
            let value = stored.get(name).cloned();
            let appended_only = pushed || name == APPLIED_OPS_FIELD;
            match &value {
                // A pushed list or the op ids only grow at their end (a push; an op id recorded
                // and the oldest cut): the length and last item tell that one changed, so the
                // query does not carry the whole list a second time beside the replacement.
                Some(Bson::Array(items)) if appended_only => {
                    query.insert(name, doc! { "$size": items.len() as i64 });
                    if let Some(last) = items.last() {
                        query.insert(
                            format!("{name}.{}", items.len() - 1),
                            doc! { "$eq": last.clone() },
                        );
                    }
                }
                value => {
                    query.insert(name, doc! { "$eq": value.clone().unwrap_or(Bson::Null) });
                }
            }
            let kept = match value {
                // A list another tool left null or missing starts empty, as a first write has it.
                None | Some(Bson::Null) if pushed => Some(Bson::Array(Vec::new())),
                value => value,
            };
            if let Some(kept) = kept {
                replacement.insert(name, kept);
            }
        }
        replacement.insert(WRITE_MARKER_FIELD, self.marked(UPDATED));
        (query, replacement)
    }

    /// The stored names of the fields an upsert keeps as stored (pushed lists, effect fields,
    /// the tombstone and the applied op ids), each with whether it is a pushed list.
    fn owned_fields(&self) -> impl Iterator<Item = (&'static str, bool)> {
        self.model
            .fields()
            .iter()
            .filter(|field| matches!(field.role(), Role::Pushed | Role::Effect | Role::Tombstone))
            .map(|field| (field.stored_name(), field.role() == Role::Pushed))
            .chain([(APPLIED_OPS_FIELD, false)])
    }

    /// The whole document as a first write stores it: `_id`, the upserted fields, the effect
    /// fields' initial values and the pushed lists, empty. What `insert_new`, `record` and
    /// `delete` insert, and what the size limit is checked on.
    pub fn inserted_document(&self) -> Document {
        let mut document = self.incoming();
        document.extend(self.effects.clone());
        document.insert(WRITE_MARKER_FIELD, self.marked(INSERTED));
        for field in self.model.pushed_fields() {
            document.insert(field.stored_name(), Bson::Array(Vec::new()));
        }
        document
    }

    /// The fields a reading needs and those an upsert keeps as stored, for the read before a
    /// write without an update pipeline ([`PreparedWrite::pinned_replacement`]).
    pub fn judged_and_owned_fields(&self) -> Document {
        let mut projection = self.judged_fields();
        for (name, _) in self.owned_fields() {
            projection.insert(name, 1);
        }
        projection
    }

    /// The fields a reading needs, for a projection.
    pub fn judged_fields(&self) -> Document {
        let mut projection = doc! {
            ID_FIELD: 1,
            self.model.hash_field(): 1,
            FROZEN_DIGESTS_FIELD: 1,
            VERSION_KEY_FIELD: 1,
            WRITE_MARKER_FIELD: 1,
        };
        let judged = self.model.fields().iter().filter(|field| {
            matches!(
                field.role(),
                Role::Key
                    | Role::IdempotencyKey
                    | Role::Timestamp
                    | Role::Frozen
                    | Role::Tombstone
                    | Role::Version
            )
        });
        for field in judged {
            projection.insert(field.stored_name(), 1);
        }
        projection
    }
}

/// What BSON refused in `doc` (a `u64` above `i64::MAX`, which it cannot hold), naming the
/// top-level field whose value it refuses where it finds one: the error says what, not where.
fn bson_refusal<T: Serialize>(doc: &T, error: &bson::ser::Error) -> String {
    let refused = match serde_json::to_value(doc) {
        Ok(serde_json::Value::Object(fields)) => fields
            .into_iter()
            .find(|(_, value)| bson::to_bson(value).is_err())
            .map(|(name, _)| name),
        _ => None,
    };
    match refused {
        Some(name) => format!("field {name}: {error}"),
        None => error.to_string(),
    }
}

/// `{name: {$eq: value}, …}`: the documents holding each value. `$eq` keeps a value that looks
/// like an operator document from being read as one.
pub(crate) fn equal_to<'v>(fields: impl IntoIterator<Item = (&'v str, &'v Bson)>) -> Document {
    (fields.into_iter())
        .map(|(name, value)| {
            (
                name.to_owned(),
                Bson::Document(doc! { "$eq": value.clone() }),
            )
        })
        .collect()
}

/// `$name`: the stored field in an aggregation expression. Names with a `.` or a leading `$`
/// are refused for role fields by the derive, so the path is the field.
fn field_path(name: &str) -> Bson {
    Bson::String(format!("${name}"))
}

/// Missing or null: never written, as an `Option` left `None`.
fn is_unwritten(path: Bson) -> Bson {
    bson!({ "$eq": [{ "$ifNull": [path, null] }, null] })
}

/// The digest of `field`'s value in `document`, as a write stores it
/// ([`guarded_value_digest`]'s rule; a field serde left out reads as a null, as the SQL stores
/// read the NULL it leaves in its column). The write's, adoption's and the audit's.
pub(crate) fn field_digest(
    document: &Document,
    field: &Field,
) -> Result<Option<ShortText>, String> {
    let value = document.get(field.stored_name()).unwrap_or(&Bson::Null);
    guarded_value_digest(field, value, value.is_null())
}

/// Adds to `document` what idem stores beside a document's fields, in this order: the content
/// `hash`; `idemFrozen`, each guarded field's digest (`digests`, in [`Model::digested_fields`]
/// order) where it has one, for a model with guarded fields; and the version's order key. What a
/// write stores, and an adoption's move.
pub(crate) fn stamp(
    document: &mut Document,
    model: &Model,
    hash: &str,
    digests: &[(&Field, Option<ShortText>)],
    version_key: Option<&str>,
) {
    document.insert(model.hash_field(), hash);
    if !digests.is_empty() {
        let stored = digests.iter().filter_map(|(field, digest)| {
            let digest = Bson::String(digest.as_deref()?.to_owned());
            Some((field.stored_name().to_owned(), digest))
        });
        document.insert(FROZEN_DIGESTS_FIELD, stored.collect::<Document>());
    }
    if let Some(key) = version_key {
        document.insert(VERSION_KEY_FIELD, key);
    }
}

/// The digest stored for `field` in a document's `idemFrozen` ([`StoredDigest::of_entry`]), as
/// the judgement and the audit read it: none at all where `idemFrozen` is no document.
pub(crate) fn stored_digest<'s>(stored: &'s Document, field: &Field) -> StoredDigest<'s> {
    match stored.get_document(FROZEN_DIGESTS_FIELD) {
        Ok(digests) => StoredDigest::of_entry(digests.get(field.stored_name())),
        Err(_) => StoredDigest::NoDigests,
    }
}

/// The `_id` of a stored document as text, whoever wrote it ([`id_text`]).
pub(crate) fn stored_id_text(stored: &Document) -> Option<String> {
    stored.get(ID_FIELD).map(id_text)
}

/// A stored `_id` as text: an idem id or other text as itself, an ObjectId as its hex digits,
/// anything else as relaxed extended JSON.
pub(crate) fn id_text(id: &Bson) -> String {
    match id {
        Bson::String(id) => id.clone(),
        Bson::ObjectId(id) => id.to_hex(),
        other => show(other),
    }
}

/// Whether a stored document carries a deletion marker.
pub(crate) fn is_tombstoned(model: &Model, stored: &Document) -> bool {
    model
        .tombstone_field()
        .and_then(|field| stored.get(field.stored_name()))
        .is_some_and(|marker| !marker.is_null())
}

/// Why `document` cannot be sent, if a field name in it (nested documents and arrays included)
/// holds U+0000: BSON writes names as C strings, which end at the first zero byte.
pub(crate) fn nul_name_problem(document: &Document) -> Option<String> {
    nul_in_names(document).map(|path| {
        format!(
            "the name of field {} holds the character U+0000, which a BSON field name cannot \
             hold",
            path.strip_prefix('.').unwrap_or(&path)
        )
    })
}

/// The path of the first field name in `document` that holds U+0000.
fn nul_in_names(document: &Document) -> Option<String> {
    document.iter().find_map(|(name, value)| {
        if name.contains('\0') {
            return Some(path_step(name));
        }
        nul_in_value(value).map(|inner| path_step(name) + &inner)
    })
}

fn nul_in_value(value: &Bson) -> Option<String> {
    match value {
        Bson::Document(document) => nul_in_names(document),
        Bson::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| nul_in_value(item).map(|inner| format!("[{index}]{inner}"))),
        Bson::JavaScriptCodeWithScope(code) => nul_in_names(&code.scope),
        _ => None,
    }
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
    fn bson_size_is_the_length_of_the_encoding_for_every_type() -> Result<(), bson::ser::Error> {
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
            assert_eq!(bson_size(&alone), bson::to_vec(&alone)?.len(), "{key}");
        }
        assert_eq!(bson_size(&document), bson::to_vec(&document)?.len());
        assert_eq!(bson_size(&Document::new()), 5);
        Ok(())
    }
}
