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

    /// The kinds of problems found per document, with how each is named in the summary and
    /// what to do about it.
    fn findings(&self) -> Vec<(&'static str, &'static str, &Finding)> {
        let mut findings = vec![
            (
                "legacy ids (not idem ids)",
                "`idem adopt --yes` (or `Store::adopt`) moves them to their derived ids",
                &self.legacy_ids,
            ),
            (
                "orphans (an idem id, but not the one derived from the content)",
                "a key or the timestamp was changed after idem wrote them; if that was meant, \
                 `idem adopt --yes` moves them to the id the content derives now",
                &self.orphans,
            ),
            (
                "no id can be derived (a key or the timestamp is missing or unusable)",
                "fix or remove these documents: `adopt` leaves them, and idem's writes never \
                 touch them",
                &self.underivable,
            ),
            (
                "without a content hash",
                "nothing to do: the next upsert of each writes its hash (`adopt` does too)",
                &self.missing_hash,
            ),
            (
                "stored content hash differs from the content",
                "another tool changed them after idem wrote them: the next upsert of each \
                 writes it again",
                &self.hash_mismatch,
            ),
            (
                "a stored guard digest differs from its value (a frozen field or the timestamp)",
                "another tool changed the value or `idemFrozen` after idem wrote them (or the \
                 field became frozen since): the next write that changes each is refused for \
                 that field, or, where it has no digest, may set it. If the stored value is the \
                 right one, clear `idemFrozen` on them (NULL; `$unset` on MongoDB): idem then \
                 compares the value itself and writes its digest again with the next change",
                &self.digest_mismatch,
            ),
        ];
        if let Some(undeserializable) = &self.undeserializable {
            findings.push((
                "do not deserialize into the type",
                "fix these documents or the type: idem reads them as the type",
                undeserializable,
            ));
        }
        findings.push((
            "half moved by an interrupted `adopt`",
            "run `adopt` again: it finishes them first",
            &self.moves_in_progress,
        ));
        findings
    }
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
                finding.show(f, name, advice)?;
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
    fn matches(&self) -> bool {
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
