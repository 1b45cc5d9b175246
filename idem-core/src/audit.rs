//! What an audit of stored data finds before idem takes a collection (or table) over, in a form
//! every backend reports alike: counts and a few sample ids for each kind of problem, a human
//! summary (`Display`) and a serializable one (`Serialize`, for JSON).
//!
//! A backend fills the report while it streams its documents once; see
//! [`mongo::Store::audit`](crate::mongo::Store::audit).

use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use serde_json::Value;

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use crate::engine::StoredDigest;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use crate::error::ErrorKind;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use crate::id::{derive_id, Id, IdKey, IdTimestamp, KeyPart};
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use crate::model::{Field, Model};
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
use crate::short_text::ShortText;

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
    fn show(&self, f: &mut fmt::Formatter<'_>, name: &str, advice: &str) -> fmt::Result {
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

/// What an audit found in one collection (or table). Each document is counted under every
/// problem it has, so the counts may add up to more than the documents scanned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AuditReport {
    /// The collection or table audited.
    pub collection: String,
    /// Documents read.
    pub scanned: u64,
    /// Documents with no problem at all.
    pub clean: u64,
    /// Natural keys held by more than one document.
    pub duplicates: Duplicates,
    /// Documents whose `_id` is not an idem id at all (an ObjectId, a number, other text): written
    /// by another tool. `adopt` moves them to their derived ids.
    pub legacy_ids: Finding,
    /// Documents under an idem id that is not the one derived from their content: a field
    /// feeding the id (a key, the timestamp) was changed by other code, orphaning them.
    pub orphans: Finding,
    /// Documents from which no id can be derived: a key or the timestamp is missing, empty, of a
    /// type that is no key or time, or out of range.
    pub underivable: Finding,
    /// Documents without a content hash (written by another tool).
    pub missing_hash: Finding,
    /// Documents whose stored content hash is not the hash of their stored content: changed by
    /// another tool after idem wrote them.
    pub hash_mismatch: Finding,
    /// Documents whose stored content hash an audit without the type cannot check: it differs
    /// from the hash of their stored values, but they hold nested objects, which the type may
    /// have hashed as structs in an order the store does not keep (PostgreSQL's `jsonb` keeps
    /// none). Not a problem: the audit with the type (`Store::audit::<T>`) checks them. Always
    /// empty for a typed audit.
    pub hash_unchecked: Finding,
    /// Documents whose stored guard digests (`idemFrozen`) are not their stored values': a
    /// frozen field's or the timestamp's value, or the digest, changed after idem wrote them.
    /// Each sample's detail names the field, and says where it has no digest beside a written
    /// value. A re-ingest of the same content leaves such a document `Unchanged`; the next write
    /// that changes it is refused for that field, or, where it has no digest, may set it.
    pub digest_mismatch: Finding,
    /// Documents that do not deserialize into the type: only checked by a typed audit (`None`
    /// when the model was given at run time).
    pub undeserializable: Option<Finding>,
    /// Documents an interrupted `adopt` left half moved: running `adopt` again finishes them.
    pub moves_in_progress: Finding,
    /// Stored fields (columns) that are not fields of the model audited with, each with how the
    /// audit knows. Their values are left out of the content hashes the audit computes (the
    /// type never hashes them), and, for a model given at run time, `adopt` refuses to run while
    /// there are any, unless told to leave them out (`AdoptOptions::allow_unknown_fields`,
    /// `--allow-unknown-fields`): a wrong model would store hashes the type does not compute.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_fields: Vec<UnknownField>,
    /// For a model given at run time without its list of fields (no `field_order`, no
    /// `--fields`): the stored fields the content hashes cover that the model does not name.
    /// The audit takes each for a hashed field of the type, in stored order; a hash that
    /// differs may then be the model's mistake rather than a change by another tool, and the
    /// summary says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unnamed_fields: Vec<String>,
    /// What a PostgreSQL table lacks for idem's writes, as the check before the first write
    /// names it: the table itself, a column missing or of another type, the unique constraint
    /// on the natural key. Always empty for a MongoDB collection, whose index idem builds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub table_problems: Vec<String>,
    /// For a model given at run time: the stored documents were written with another model
    /// (see [`crate::model_check`]), so the orphans and legacy ids counted here are the flags'
    /// mistake, and `adopt` refuses to move them.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_mismatch: Option<crate::model_check::ModelMismatch>,
}

impl AuditReport {
    /// An empty report for `collection`; `typed` says whether documents are checked against a
    /// type.
    pub fn new(collection: impl Into<String>, typed: bool) -> Self {
        AuditReport {
            collection: collection.into(),
            undeserializable: typed.then(Finding::default),
            ..AuditReport::default()
        }
    }

    /// Whether the audit found nothing to fix: idem can take the collection over as it is.
    pub fn is_clean(&self) -> bool {
        self.clean == self.scanned && self.table_problems.is_empty() && !self.has_model_mismatch()
    }

    /// Whether the documents were written with another model than the one audited with.
    pub fn has_model_mismatch(&self) -> bool {
        #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
        return self.model_mismatch.is_some();
        #[cfg(not(any(feature = "mongodb", feature = "_postgres", feature = "sqlite")))]
        return false;
    }

    /// Whether the documents were checked against a type (a typed audit), not a model given at
    /// run time.
    fn is_typed(&self) -> bool {
        self.undeserializable.is_some()
    }

    /// The stored fields the stored hashes show the type does not hash.
    fn unhashed_by_the_type(&self) -> Vec<&str> {
        self.unknown_fields
            .iter()
            .filter(|field| field.reason == UnknownReason::NotInStoredHashes)
            .map(|field| field.name.as_str())
            .collect()
    }

    /// What to do about hashes that differ: blamed on another tool only where nothing about the
    /// model given at run time may explain them.
    fn hash_mismatch_advice(&self) -> String {
        let unhashed = self.unhashed_by_the_type();
        if !unhashed.is_empty() {
            return format!(
                "likely the model, not the data: the stored hashes match the content without \
                 {}. If the type has such a field but does not hash it, name it with \
                 `--volatile`, `--effect`, `--tombstone` or `--push-by`; if it is no field of \
                 the type, list the type's fields with `--fields`; or give the type's model \
                 with `--model FILE` (written by `idem_core::model_file::write`)",
                backticked(&unhashed)
            );
        }
        if !self.is_typed() && !self.unnamed_fields.is_empty() {
            let unnamed: Vec<&str> = self.unnamed_fields.iter().map(String::as_str).collect();
            return format!(
                "either the model given is not the type's, or another tool changed them after \
                 idem wrote them. The hashes computed here cover {} (fields no flag names), in \
                 stored order: if the type leaves one out, name it with `--volatile`, \
                 `--effect`, `--tombstone` or `--push-by`; list the type's fields in its order \
                 with `--fields`, or give its model with `--model FILE`. If the model is right, \
                 the next upsert of each writes it again",
                backticked(&unnamed)
            );
        }
        "another tool changed them after idem wrote them: the next upsert of each writes it \
         again"
            .to_owned()
    }

    /// What to do about stored fields the model does not have.
    fn unknown_fields_advice(&self) -> &'static str {
        if self.is_typed() {
            "nothing if they are no fields of the type: idem neither reads nor hashes them (on \
             MongoDB an upsert replaces the whole document, which drops them). If the type \
             should have them, add them to it"
        } else {
            "they are left out of the content hashes computed here. If one is a field of the \
             type, list it with `--fields` (every field, in the type's order) or give the type's \
             model with `--model FILE`; if the type has it but does not hash it, name it with \
             `--volatile`, `--effect`, `--tombstone` or `--push-by`. `adopt` refuses to store \
             hashes while they exist, unless `--allow-unknown-fields` says they are not the \
             type's"
        }
    }

    /// The kinds of problems found per document, with how each is named in the summary and
    /// what to do about it.
    fn findings(&self) -> Vec<(&'static str, String, &Finding)> {
        let mut findings =
            vec![
            (
                "legacy ids (not idem ids)",
                "`idem adopt --yes` (or `Store::adopt`) moves them to their derived ids".into(),
                &self.legacy_ids,
            ),
            (
                "orphans (an idem id, but not the one derived from the content)",
                "a key or the timestamp was changed after idem wrote them; if that was meant, \
                 `idem adopt --yes` moves them to the id the content derives now".into(),
                &self.orphans,
            ),
            (
                "no id can be derived (a key or the timestamp is missing or unusable)",
                "fix or remove these documents: `adopt` leaves them, and idem's writes never \
                 touch them".into(),
                &self.underivable,
            ),
            (
                "without a content hash",
                "nothing to do: the next upsert of each writes its hash (`adopt` does too)".into(),
                &self.missing_hash,
            ),
            (
                "stored content hash differs from the content",
                self.hash_mismatch_advice(),
                &self.hash_mismatch,
            ),
            (
                "a stored guard digest differs from its value (a frozen field or the timestamp)",
                "another tool changed the value or `idemFrozen` after idem wrote them (or the \
                 field became frozen since): the next write that changes each is refused for \
                 that field, or, where it has no digest, may set it. If the stored value is the \
                 right one, clear `idemFrozen` on them (NULL; `$unset` on MongoDB): idem then \
                 compares the value itself and writes its digest again with the next change".into(),
                &self.digest_mismatch,
            ),
        ];
        if let Some(undeserializable) = &self.undeserializable {
            findings.push((
                "do not deserialize into the type",
                "fix these documents or the type: idem reads them as the type".into(),
                undeserializable,
            ));
        }
        findings.push((
            "half moved by an interrupted `adopt`",
            "run `adopt` again: it finishes them first".into(),
            &self.moves_in_progress,
        ));
        findings
    }
}

/// Names in backticks, joined by commas.
fn backticked(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    quoted.join(", ")
}

/// `n` and `noun`, singular for one: `1 key`, `2 keys`.
fn counted(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// The duplicated natural keys as a summary shows them, with `heading` and what to do.
fn show_duplicates(
    f: &mut fmt::Formatter<'_>,
    duplicates: &Duplicates,
    heading: &str,
    advice: &str,
) -> fmt::Result {
    writeln!(
        f,
        "  {heading}: {} held by {}",
        counted(duplicates.keys, "key"),
        counted(duplicates.documents, "document")
    )?;
    for duplicate in &duplicates.samples {
        writeln!(
            f,
            "    {} in {}: {}",
            duplicate.key,
            counted(duplicate.documents, "document"),
            duplicate.sample_ids.join(", ")
        )?;
    }
    let more = duplicates.keys - duplicates.samples.len() as u64;
    if more > 0 {
        writeln!(
            f,
            "    … and {} more (a report keeps the first {SAMPLES_PER_KIND})",
            counted(more, "key")
        )?;
    }
    writeln!(f, "    to do: {advice}")
}

/// What to do about duplicated natural keys.
const DUPLICATES_ADVICE: &str = "keep one document per key: merge or remove the others by \
     hand, or on MongoDB let adopt keep one by a field's value (`idem adopt --keep-duplicate \
     greatest:updatedAt`, or a `DuplicateRule`), which archives the others";

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "`{}`: {} documents scanned, {} clean",
            self.collection, self.scanned, self.clean
        )?;
        #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
        if let Some(mismatch) = &self.model_mismatch {
            writeln!(f, "  WRONG MODEL: {mismatch}")?;
        }
        if !self.table_problems.is_empty() {
            writeln!(f, "  the table lacks what idem's writes need:")?;
            for problem in &self.table_problems {
                writeln!(f, "    {problem}")?;
            }
        }
        if !self.unknown_fields.is_empty() {
            writeln!(f, "  stored fields the model does not have:")?;
            for field in &self.unknown_fields {
                writeln!(f, "    {field}")?;
            }
            writeln!(f, "    to do: {}", self.unknown_fields_advice())?;
        }
        if self.duplicates.keys > 0 {
            show_duplicates(
                f,
                &self.duplicates,
                "natural-key duplicates (they block the unique natural-key index, and idem's \
                 writes with it)",
                DUPLICATES_ADVICE,
            )?;
        }
        for (name, advice, finding) in self.findings() {
            if !finding.is_empty() {
                finding.show(f, name, &advice)?;
            }
        }
        if !self.hash_unchecked.is_empty() {
            self.hash_unchecked.show(
                f,
                "content hash not checked (nested objects, whose order only the type knows)",
                "nothing, or audit with the type (`Store::audit::<T>`), which checks them",
            )?;
        }
        if self.is_clean() {
            writeln!(f, "  no problems found")?;
        }
        Ok(())
    }
}

/// A document's stored content hash against the hashes its content may have.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
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

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
impl HashCheck {
    /// Whether the stored hash is one the content has.
    pub fn matches(&self) -> bool {
        let stored = self.stored.as_deref();
        self.computed
            .iter()
            .any(|hash| Some(hash.to_hex().as_str()) == stored)
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

/// Whether `name` is a field of a model whose fields are `listed` (the type's stored fields in
/// its order; a model given at run time lists them with `field_order`): listed, a field with a
/// role, or a name idem writes itself. With nothing listed every stored name is one.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn is_model_field(model: &Model, listed: &[&str], name: &str) -> bool {
    listed.is_empty()
        || listed.contains(&name)
        || model.is_reserved(name)
        || model
            .fields()
            .iter()
            .any(|field| field.stored_name() == name)
}

/// The stored names, among `names`, that the content hash of a model given at run time covers
/// without any flag naming them: each is taken for a hashed field of the type.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn unnamed_fields<'n>(
    model: &Model,
    names: impl IntoIterator<Item = &'n str>,
) -> Vec<String> {
    names
        .into_iter()
        .filter(|name| {
            crate::hash::is_hashed_stored_field(model, name)
                && !model
                    .fields()
                    .iter()
                    .any(|field| field.stored_name() == *name)
        })
        .map(str::to_owned)
        .collect()
}

/// Adds `field` to `report`'s unknown fields unless one of that name is there.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn note_unknown(unknown: &mut Vec<UnknownField>, field: UnknownField) {
    if !unknown.iter().any(|known| known.name == field.name) {
        unknown.push(field);
    }
}

/// How many documents whose stored hash differs from their content a [`HashDiagnosis`]
/// examines.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
const DIAGNOSED_DOCUMENTS: u32 = 16;

/// For a model given at run time: which stored field, left out, makes the stored hashes match
/// the content. A field the type does not hash (an effect, a tombstone, one no flag named, a
/// column another tool added) makes every document idem wrote differ from its hash; left out,
/// they match. Examines the first [`DIAGNOSED_DOCUMENTS`] documents whose hash differs.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
#[derive(Default)]
pub(crate) struct HashDiagnosis {
    examined: u32,
    explained: Vec<(String, u32)>,
}

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
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

/// What an adoption with a model given at run time decides before it moves anything, on every
/// store: refused where the stored documents show another model (`mismatch`, unless
/// `ignore_model_check`), and where stored fields are not the model's (`unknown`, unless
/// `allow_unknown_fields`), since the hashes it would store may not be the type's.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn check_adoption(
    model: &Model,
    mismatch: Option<crate::model_check::ModelMismatch>,
    unknown: &[UnknownField],
    ignore_model_check: bool,
    allow_unknown_fields: bool,
) -> Result<(), crate::Error> {
    if let (Some(mismatch), false) = (mismatch, ignore_model_check) {
        return Err(mismatch.refusal(model));
    }
    if unknown.is_empty() || allow_unknown_fields {
        return Ok(());
    }
    let shown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
    Err(crate::Error::schema_mismatch(
        model,
        format!(
            "stored fields that are not fields of the model given: {}; adoption would store \
             content hashes the type may not compute, so the next upsert of each document would \
             rewrite it. Give the type's fields (`--fields`, in its order, or `--model FILE`), \
             name the fields the type does not hash (`--volatile`, `--effect`, `--tombstone`, \
             `--push-by`), or, if they are no fields of the type, leave them out of the hashes \
             with `--allow-unknown-fields` (`AdoptOptions::allowing_unknown_fields`); nothing \
             was moved",
            shown.join("; ")
        ),
    ))
}

/// How a guarded field's stored digest is not its stored value's.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DigestMismatch {
    /// Another digest (or something that is no digest): the next write that changes the
    /// document is refused for the field.
    Differs,
    /// No digest beside a written value: the guard takes the field for one never written,
    /// which the next write may set.
    Missing,
}

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
impl DigestMismatch {
    /// How a report's sample names the field.
    pub fn detail(self, field: &Field) -> String {
        match self {
            DigestMismatch::Differs => format!("`{}`", field.stored_name()),
            DigestMismatch::Missing => format!(
                "`{}`: no digest beside its value, which the next write may change",
                field.stored_name()
            ),
        }
    }
}

/// The first guarded field (a frozen field or the timestamp) whose stored digest is not the
/// digest of its stored value, and how, from each guarded field's stored digest and the
/// digests its stored value may have (one per reading of it where the store cannot tell how
/// it was written; `Err`, a value that cannot be digested, which the other checks report). A
/// document stored without digests (by another tool) has none to check: its values are
/// compared as values.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn field_not_as_digested<'s>(
    guarded: impl IntoIterator<Item = (&'static Field, StoredDigest<'s>, Vec<DigestReading>)>,
) -> Option<(&'static Field, DigestMismatch)> {
    for (field, stored, readings) in guarded {
        if stored == StoredDigest::NoDigests {
            return None;
        }
        let digests: Vec<Option<ShortText>> = readings.into_iter().filter_map(Result::ok).collect();
        let as_digested = digests.is_empty()
            || digests.iter().any(|digest| match (stored, digest) {
                (StoredDigest::Unwritten, None) => true,
                (StoredDigest::Digest(stored), Some(digest)) => stored == digest.as_str(),
                _ => false,
            });
        if !as_digested {
            let how = match stored {
                StoredDigest::Unwritten => DigestMismatch::Missing,
                _ => DigestMismatch::Differs,
            };
            return Some((field, how));
        }
    }
    None
}

/// One reading of a stored value's digest ([`crate::hash::guard_digest`]'s answer).
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) type DigestReading = Result<Option<ShortText>, String>;

/// What an adoption did: the documents it moved to their derived ids, and those it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AdoptReport {
    /// The collection or table adopted.
    pub collection: String,
    /// Documents moved to their derived ids (each sample's detail names the derived id).
    pub moved: Finding,
    /// Documents an interrupted adoption had half moved, finished now.
    pub finished: Finding,
    /// Natural keys held by more than one document, left where they are: no rule was given to
    /// choose between them.
    pub duplicates: Duplicates,
    /// Documents a duplicate rule set aside, moved whole to the archive collection.
    pub archived: Finding,
    /// Documents that could not be moved, each with the reason; nothing was lost.
    pub failed: Finding,
    /// Whether the adoption stopped at its limit (documents or writes) before the end: running
    /// it again goes on.
    pub stopped: bool,
}

impl AdoptReport {
    /// An empty report for `collection`.
    pub fn new(collection: impl Into<String>) -> Self {
        AdoptReport {
            collection: collection.into(),
            ..AdoptReport::default()
        }
    }

    /// Whether every document is under its derived id now: nothing failed, no duplicate was
    /// left, and the adoption was not stopped early.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty() && self.duplicates.keys == 0 && !self.stopped
    }
}

impl fmt::Display for AdoptReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "`{}`:", self.collection)?;
        let findings = [
            ("moved", "", &self.moved),
            ("half moved before, finished now", "", &self.finished),
            (
                "duplicates set aside to the archive",
                "nothing is lost: each is whole in the archive collection, under its own id",
                &self.archived,
            ),
            (
                "could not be moved",
                "each says why; fix those documents and run `adopt` again",
                &self.failed,
            ),
        ];
        for (name, advice, finding) in findings {
            if !finding.is_empty() {
                finding.show(f, name, advice)?;
            }
        }
        if self.duplicates.keys > 0 {
            show_duplicates(
                f,
                &self.duplicates,
                "natural-key duplicates left in place",
                DUPLICATES_ADVICE,
            )?;
        }
        if self.stopped {
            writeln!(f, "  stopped at the limit: run it again to go on")?;
        }
        if self.moved.is_empty() && self.finished.is_empty() && self.is_complete() {
            writeln!(
                f,
                "  nothing to move: every document is under its derived id"
            )?;
        }
        Ok(())
    }
}

/// A natural key as a scan in natural-key order compares and shows it.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) trait ScannedKey {
    /// Whether `self` and `other` collide in the unique natural-key index.
    fn collides_with(&self, other: &Self) -> bool;
    /// The key as a report shows it.
    fn shown(&self) -> ShownKey;
}

/// The holders of the natural key a scan in natural-key order is at: documents or rows sharing a
/// key come one after the other, so finding duplicates needs only the current key and its first
/// few ids, whatever the size of the collection or table. Both backends' audits count with it.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) struct DuplicateTracker<K> {
    current: Option<KeyHolders<K>>,
}

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
struct KeyHolders<K> {
    key: K,
    holders: u64,
    sample_ids: Vec<String>,
    /// Whether the first holder was counted clean: it is not, once a second one shows the key
    /// is duplicated.
    first_was_clean: bool,
}

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
impl<K: ScannedKey> DuplicateTracker<K> {
    /// A scan that has met no key yet.
    pub fn new() -> Self {
        DuplicateTracker { current: None }
    }

    /// Counts a holder of `key` (`None`: a key that collides with no other, such as one with a
    /// NULL part in a PostgreSQL unique constraint) with its id, and whether it has no problem
    /// of its own; counts it clean in `report` unless it is a second or later holder of its
    /// key. The first holder of a duplicated key leaves the clean count when the second arrives.
    pub fn count(&mut self, report: &mut AuditReport, key: Option<K>, id: &str, clean: bool) {
        if let (Some(current), Some(key)) = (self.current.as_mut(), key.as_ref()) {
            if current.key.collides_with(key) {
                current.holders += 1;
                if current.sample_ids.len() < SAMPLES_PER_KIND {
                    current.sample_ids.push(id.to_owned());
                }
                if current.holders == 2 && current.first_was_clean {
                    report.clean -= 1;
                }
                return;
            }
        }
        self.finish_key(report);
        if clean {
            report.clean += 1;
        }
        self.current = key.map(|key| KeyHolders {
            key,
            holders: 1,
            sample_ids: vec![id.to_owned()],
            first_was_clean: clean,
        });
    }

    /// Ends the scan: the last key is reported if it was duplicated.
    pub fn finish(mut self, report: &mut AuditReport) {
        self.finish_key(report);
    }

    fn finish_key(&mut self, report: &mut AuditReport) {
        if let Some(done) = self.current.take() {
            if done.holders > 1 {
                report
                    .duplicates
                    .record(done.key.shown(), done.holders, done.sample_ids);
            }
        }
    }
}

/// A key value read from a stored document.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
struct StoredKeyValue<'a>(KeyPart<'a>);

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
impl IdKey for StoredKeyValue<'_> {
    fn key_part(&self) -> KeyPart<'_> {
        self.0
    }
}

/// The id derived from a stored document's key values (`key`, in declaration order; null for
/// one missing) and timestamp, in the neutral form, for a document that does not read as its
/// type: keys as text, integers or booleans, the timestamp as integer milliseconds (a driver
/// gives a stored date as its milliseconds). Other stored types (a chrono timestamp stored as
/// text, a `SystemTime` stored as a struct) need the typed audit. Every backend's audit derives
/// ids of untyped documents here.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn derive_from_stored(
    model: &Model,
    key: &[Value],
    timestamp: Option<&Value>,
) -> Result<Id, String> {
    let parts = model
        .natural_key_fields()
        .zip(key)
        .map(|(field, value)| match value {
            Value::String(text) => Ok(StoredKeyValue(KeyPart::Text(text))),
            Value::Bool(flag) => Ok(StoredKeyValue(KeyPart::Bool(*flag))),
            Value::Number(number) => number
                .as_i64()
                .map(i128::from)
                .or_else(|| number.as_u64().map(i128::from))
                .map(|integer| StoredKeyValue(KeyPart::Integer(integer)))
                .ok_or_else(|| unusable(field, value, "a key is an integer")),
            _ => Err(unusable(
                field,
                value,
                "a key is text, an integer or a boolean",
            )),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let keys: Vec<&dyn IdKey> = parts.iter().map(|part| part as &dyn IdKey).collect();
    let millis = match (model.timestamp_field(), timestamp) {
        (Some(field), Some(value)) => Some(value.as_i64().ok_or_else(|| {
            unusable(
                field,
                value,
                "a timestamp is integer milliseconds or a date",
            )
        })?),
        (Some(field), None) => return Err(unusable(field, &Value::Null, "")),
        (None, _) => None,
    };
    let timestamp = millis.as_ref().map(|millis| millis as &dyn IdTimestamp);
    derive_id(model, &keys, timestamp).map_err(|error| match error.kind() {
        ErrorKind::EmptyKey { field, .. } => format!("key field `{field}` is empty"),
        ErrorKind::AmbiguousKey { field, value, .. } => format!(
            "key field `{field}` = {value:?} contains ':', which the joined scheme cannot tell \
             from its separator"
        ),
        ErrorKind::TimestampOutOfRange { field, problem, .. } => {
            format!("timestamp field `{field}`: {problem}")
        }
        _ => error.to_string(),
    })
}

/// Why a stored value cannot feed the id.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
fn unusable(field: &Field, value: &Value, expected: &str) -> String {
    match value {
        Value::Null => format!("`{}` is missing", field.stored_name()),
        value => format!("`{}` holds {value}, but {expected}", field.stored_name()),
    }
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

    #[test]
    fn a_report_reads_as_a_summary() {
        let mut report = AuditReport::new("posts", false);
        report.scanned = 3;
        report.clean = 1;
        let key = ShownKey(vec![
            ("slug".into(), ShownValue::Text("a".into())),
            ("lang".into(), ShownValue::Null),
        ]);
        report
            .duplicates
            .record(key, 2, vec!["x".into(), "y".into()]);
        report.missing_hash.record("x".into(), None);
        for n in 0..7 {
            report
                .legacy_ids
                .record_misplaced(format!("legacy-{n}"), format!("derived-{n}"));
        }
        let summary = report.to_string();
        assert!(summary.contains("{slug: \"a\", lang: null} in 2 documents: x, y"));
        assert!(
            summary.contains(": 1 key held by 2 documents\n"),
            "{summary}"
        );
        assert!(summary.contains("without a content hash: 1\n    x\n    to do: "));
        assert!(
            summary
                .contains("  legacy ids (not idem ids): 7\n    legacy-0 (derived id derived-0)\n"),
            "{summary}"
        );
        assert!(
            summary.contains(
                "    legacy-4 (derived id derived-4)\n    … and 2 more (a report \
                 keeps the first 5)\n    to do: `idem adopt --yes`"
            ),
            "{summary}"
        );
        // Every problem the summary lists says what to do about it.
        let problems = summary
            .lines()
            .filter(|line| line.starts_with("  "))
            .count()
            - summary
                .lines()
                .filter(|line| line.starts_with("    "))
                .count();
        assert_eq!(
            summary.matches("    to do: ").count(),
            problems,
            "{summary}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["legacy_ids"]["samples"][0],
            serde_json::json!({ "id": "legacy-0", "derived_id": "derived-0" })
        );
        assert!(!report.is_clean());
    }
}
