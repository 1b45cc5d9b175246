//! The audit of a MongoDB collection before idem takes it over: one pass over the collection,
//! sorted by the natural key, that checks each document's id, content hash and (for a typed
//! audit) its shape, and finds natural keys held by more than one document.
//!
//! # Bounded memory
//!
//! The collection is read through one cursor, sorted by the natural key, so the documents that
//! share a key arrive one after the other: finding duplicates needs only the current key and the
//! first few ids holding it, whatever the size of the collection. The server walks the
//! natural-key index when there is one (any index on those fields, unique or not), and otherwise
//! sorts, spilling to disk if it must (`allowDiskUse`). The report keeps counts and at most
//! [`SAMPLES_PER_KIND`](crate::audit::SAMPLES_PER_KIND) samples of each kind.
//!
//! Writes made during the scan may or may not be seen, as with any cursor: the report describes
//! the collection as the scan found it.

use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::compare::{bson_equal, show};
use super::write::{field_digest, stored_digest, stored_id_text};
use super::{mongo_error, natural_key_pattern, Store};
use crate::audit::{
    is_model_field, AuditProgress, AuditReport, DuplicateTracker, HashCheck, HashDiagnosis,
    ScannedKey, ShownKey, ShownValue, UnknownField, UnknownReason,
};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::hash::{is_hashed_stored_field, ContentHash};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model, ID_FIELD, RESERVED_FIELDS};
use crate::model_check::ModelCheck;
use crate::trace::{Call, CallKind};

/// The field a document half moved by [`Store::adopt`] carries: where it came from and the
/// natural key it set aside. See `adopt.rs`.
pub(crate) use crate::model::ADOPTION_FIELD;

/// What a typed audit (or adopt) learns by deserializing a stored document into the type.
pub(crate) struct TypedReading {
    id: Result<Id, Error>,
    hash: Result<ContentHash, Error>,
    /// The stored form of the version's order key, for a type with versions.
    pub version_key: Option<String>,
}

/// Deserializes a stored document into `T`: the reading of a typed audit. `Err` says why it
/// does not deserialize.
pub(crate) type ReadTyped = fn(&Document) -> Result<TypedReading, String>;

/// How stored documents are read: into the type, or as stored for a model given at run time.
#[derive(Clone, Copy)]
pub(crate) enum Reading<'a> {
    /// Deserialized into the type, whose id and content hash are then exact.
    Typed(ReadTyped),
    /// As stored: ids from the stored key values, content hashes from the stored fields, taken
    /// in `field_order` (the type's order; stored order if empty), but those the model does not
    /// have: fields `field_order` does not list, and those `left_out`.
    Stored {
        field_order: &'a [&'a str],
        left_out: &'a [UnknownField],
    },
}

/// [`ReadTyped`] for `T`. The fields idem writes itself are removed first, so a type with
/// `#[serde(deny_unknown_fields)]` reads its own documents.
pub(crate) fn read_typed<T>(stored: &Document) -> Result<TypedReading, String>
where
    T: Idempotent + Serialize + DeserializeOwned,
{
    let mut content = stored.clone();
    for name in [ID_FIELD, T::MODEL.hash_field(), ADOPTION_FIELD]
        .into_iter()
        .chain(RESERVED_FIELDS.iter().copied())
    {
        content.remove(name);
    }
    let value: T = super::text_keys::from_document(content)?;
    Ok(TypedReading {
        id: value.id(),
        hash: value.content_hash(),
        version_key: value.version_key().map(|key| key.to_stored()),
    })
}

/// Where a document stands against the id derived from it.
pub(crate) enum Placement {
    /// Under its derived id.
    Derived,
    /// Under an id that is no idem id (an ObjectId, other text, a number).
    Legacy(Id),
    /// Under an idem id, but another one than derived.
    Orphan(Id),
    /// No id can be derived from it, for the reason given.
    Underivable(String),
    /// Not checked: an event type's id is random, assigned by its first write.
    Unchecked,
}

impl Placement {
    /// The derived id of a document that is not under it.
    pub(crate) fn misplaced(&self) -> Option<Id> {
        match self {
            Placement::Legacy(id) | Placement::Orphan(id) => Some(*id),
            _ => None,
        }
    }
}

/// One stored document as the audit reads it.
pub(crate) struct Inspection {
    /// The stored `_id` as text.
    pub stored_id: String,
    pub placement: Placement,
    /// The stored content hash against the hash of the document's content: from the type for
    /// a typed reading, else from the stored fields.
    pub hash: HashCheck,
    /// Why the document does not deserialize into the type (typed readings only).
    pub undeserializable: Option<String>,
    /// The version's order key, from a typed reading.
    pub version_key: Option<String>,
    /// The first guarded field whose stored digest is not its stored value's, and how.
    pub digest_mismatch: Option<(&'static Field, crate::audit::DigestMismatch)>,
}

/// Reads one stored document of `model`; `read_typed` also deserializes it into the type.
pub(crate) fn inspect(model: &Model, reading: Reading<'_>, stored: &Document) -> Inspection {
    let (typed, field_order, left_out) = match reading {
        Reading::Typed(read) => (Some(read(stored)), &[][..], &[][..]),
        Reading::Stored {
            field_order,
            left_out,
        } => (None, field_order, left_out),
    };
    let (typed_id, typed_hash, version_key, undeserializable) = match typed {
        Some(Ok(reading)) => (
            Some(reading.id),
            Some(reading.hash),
            reading.version_key,
            None,
        ),
        Some(Err(why)) => (None, None, None, Some(why)),
        None => (None, None, None, None),
    };
    let stored_id = stored_id_text(stored).unwrap_or_else(|| "(no _id)".to_owned());
    let placement = if model.idempotency_key_field().is_some() {
        Placement::Unchecked
    } else {
        let derived = match typed_id {
            Some(id) => id.map_err(|error| error.to_string()),
            None => derive_from_stored(model, stored),
        };
        match derived {
            Err(why) => Placement::Underivable(why),
            Ok(id) => match stored.get(ID_FIELD) {
                Some(Bson::String(text)) if *text == id.to_string() => Placement::Derived,
                Some(Bson::String(text)) if text.parse::<Id>().is_ok() => Placement::Orphan(id),
                _ => Placement::Legacy(id),
            },
        }
    };
    let (content_hash, nested_unknown) = match (typed_hash, &undeserializable) {
        (Some(hash), _) => (hash.ok(), false),
        // A document that is not a `T` has no hash of a `T`.
        (None, Some(_)) => (None, false),
        (None, None) => (
            stored_content_hash(model, field_order, left_out, stored).ok(),
            stored
                .iter()
                .any(|(name, value)| is_hashed_stored_field(model, name) && holds_document(value)),
        ),
    };
    Inspection {
        stored_id,
        placement,
        hash: HashCheck {
            stored: stored.get_str(model.hash_field()).ok().map(str::to_owned),
            computed: content_hash.into_iter().collect(),
            nested_unknown,
        },
        undeserializable,
        version_key,
        digest_mismatch: crate::audit::field_not_as_digested(model.digested_fields().map(
            |field| {
                (
                    field,
                    stored_digest(stored, field),
                    vec![field_digest(stored, field)],
                )
            },
        )),
    }
}

/// Whether `value` holds a sub-document at any depth.
fn holds_document(value: &Bson) -> bool {
    match value {
        Bson::Document(_) => true,
        Bson::Array(items) => items.iter().any(holds_document),
        _ => false,
    }
}

/// The id derived from a stored document's key fields and timestamp ([`crate::audit`]'s
/// rule), a BSON date read as its milliseconds.
pub(crate) fn derive_from_stored(model: &Model, stored: &Document) -> Result<Id, String> {
    let neutral = |field: &Field| {
        stored
            .get(field.stored_name())
            .map_or(serde_json::Value::Null, neutral)
    };
    let key: Vec<serde_json::Value> = model.natural_key_fields().map(neutral).collect();
    let timestamp = model.timestamp_field().map(neutral);
    crate::audit::derive_from_stored(model, &key, timestamp.as_ref())
}

/// The content hash of a stored document from its stored fields, for a model given at run time
/// ([`stored_fields_hash`](crate::hash::stored_fields_hash)'s rule). With an empty
/// `field_order` the stored order is taken, which is the type's only if the server kept the
/// order the document was written in (servers may not: SecantusDB puts a batch upsert's fields
/// in another order). A nested struct is stored as a sub-document in the order it was written,
/// but reads as a map: for such types only the typed audit checks hashes exactly.
pub(crate) fn stored_content_hash(
    model: &Model,
    field_order: &[&str],
    left_out: &[UnknownField],
    stored: &Document,
) -> Result<ContentHash, String> {
    crate::hash::stored_fields_hash(
        model,
        field_order,
        &hashed_fields(model, field_order, left_out, stored),
    )
}

/// The stored fields of a document that the content hash of a model given at run time covers:
/// all but those the model does not have (not in `field_order` where it lists them, or
/// `left_out`).
fn hashed_fields<'d>(
    model: &Model,
    field_order: &[&str],
    left_out: &[UnknownField],
    stored: &'d Document,
) -> Vec<(&'d str, &'d Bson)> {
    stored
        .iter()
        .filter(|(name, _)| {
            is_model_field(model, field_order, name)
                && !left_out.iter().any(|field| field.name == **name)
        })
        .map(|(name, value)| (name.as_str(), value))
        .collect()
}

/// The natural-key values of a stored document, missing fields as null (as a unique index
/// holds them).
pub(crate) fn stored_natural_key(model: &Model, stored: &Document) -> Vec<(&'static str, Bson)> {
    model
        .natural_key_fields()
        .map(|field| {
            let value = stored
                .get(field.stored_name())
                .cloned()
                .unwrap_or(Bson::Null);
            (field.stored_name(), value)
        })
        .collect()
}

/// Whether two natural keys collide in a unique index: equal as a filter compares them.
pub(crate) fn same_natural_key(a: &[(&str, Bson)], b: &[(&str, Bson)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((_, x), (_, y))| bson_equal(x, y))
}

/// A natural key as a report shows it.
pub(crate) fn shown_key(key: &[(&str, Bson)]) -> ShownKey {
    ShownKey(
        key.iter()
            .map(|(field, value)| {
                let shown = match value {
                    Bson::String(text) => ShownValue::Text(text.clone()),
                    Bson::Int32(n) => ShownValue::Integer(i64::from(*n)),
                    Bson::Int64(n) => ShownValue::Integer(*n),
                    Bson::Boolean(b) => ShownValue::Bool(*b),
                    Bson::Null => ShownValue::Null,
                    other => ShownValue::Other(show(other)),
                };
                ((*field).to_owned(), shown)
            })
            .collect(),
    )
}

/// A natural key as stored: each key field's stored name and value.
struct DocumentKey(Vec<(&'static str, Bson)>);

impl ScannedKey for DocumentKey {
    fn collides_with(&self, other: &Self) -> bool {
        same_natural_key(&self.0, &other.0)
    }

    fn shown(&self) -> ShownKey {
        shown_key(&self.0)
    }
}

/// The cursor over every document of `model`'s collection, sorted by the natural key: documents
/// sharing a key come one after the other.
pub(crate) async fn sorted_by_natural_key(
    collection: &Collection<Document>,
    model: &Model,
) -> Result<mongodb::Cursor<Document>, Error> {
    collection
        .find(doc! {})
        .sort(natural_key_pattern(model))
        .allow_disk_use(true)
        .await
        .map_err(|source| mongo_error(&DocumentRef::collection(model), source))
}

impl Store {
    /// Audits `T`'s collection before idem takes it over: natural keys held by more than one
    /// document (they block the unique natural-key index), documents not under the id derived
    /// from their content (legacy ids, orphans), documents without a content hash or whose
    /// stored hash is not the hash of their content, and documents that do not deserialize into
    /// `T`. Nothing is written.
    ///
    /// The collection is read once, through one cursor sorted by the natural key, so the
    /// documents sharing a key arrive one after the other: finding duplicates needs only the
    /// current key and its first few ids, and memory stays bounded whatever the size of the
    /// collection. The server walks the natural-key index when there is one (any index on those
    /// fields), and otherwise sorts, spilling to disk if it must (`allowDiskUse`). Writes made
    /// during the scan may or may not be seen, as with any cursor.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
    /// # #[idem(collection = "posts")]
    /// # struct Post { #[idem(key)] slug: String }
    /// # async fn run(store: idem_core::mongo::Store) -> Result<(), idem_core::Error> {
    /// let report = store.audit::<Post>().await?;
    /// println!("{report}");
    /// if !report.is_clean() {
    ///     let moved = store.adopt::<Post>(idem_core::mongo::AdoptOptions::default()).await?;
    ///     println!("{moved}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn audit<T>(&self) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        self.audit_with_progress::<T>(|_| {}).await
    }

    /// [`audit`](Store::audit), calling `progress` after each document with the count so far and
    /// the server's estimate of the total.
    pub async fn audit_with_progress<T>(
        &self,
        mut progress: impl FnMut(&AuditProgress),
    ) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let columns = T::stored_columns();
        let listed: Vec<&str> = if columns
            .iter()
            .any(|column| column.shape() == crate::column::ColumnShape::Flattened)
        {
            Vec::new()
        } else {
            columns.iter().map(|column| column.stored_name()).collect()
        };
        audit_collection(
            self,
            &T::MODEL,
            (Reading::Typed(read_typed::<T>), &listed),
            &mut progress,
        )
        .await
    }

    /// Audits the collection of a model given at run time (the `idem` command line builds one
    /// from its flags), as [`audit`](Store::audit) does for a type, except that no document is
    /// checked against a type: ids are derived from the stored key values, and content hashes
    /// are computed from the stored fields, which is exact for documents of text, numbers,
    /// booleans, nulls, arrays, maps and dates, but not for nested structs or enums (their
    /// encoding is the type's, which BSON does not keep; audit those with the type).
    ///
    /// `field_order` lists the stored fields in the order the type serializes them (its
    /// declaration order), which the content hash follows; empty, the stored order is taken,
    /// which is the type's only where the server kept it.
    pub async fn audit_model(
        &self,
        model: &Model,
        field_order: &[&str],
        mut progress: impl FnMut(&AuditProgress),
    ) -> Result<AuditReport, Error> {
        self.require_collection(model).await?;
        let reading = Reading::Stored {
            field_order,
            left_out: &[],
        };
        audit_collection(self, model, (reading, field_order), &mut progress).await
    }

    /// [`ErrorKind::SchemaMismatch`] unless `model`'s collection exists: an operator naming a
    /// collection (or database) that is not there has mistyped it, and an audit of nothing
    /// would answer "no problems".
    pub(super) async fn require_collection(&self, model: &Model) -> Result<(), Error> {
        let whole = DocumentRef::collection(model);
        crate::trace::round_trip("listCollections");
        // By name, and only among those the user may use: a role limited to some collections is
        // refused a plain listing.
        let named = self
            .database
            .list_collection_names()
            .filter(doc! { "name": model.collection() })
            .authorized_collections(true)
            .await
            .map_err(|source| mongo_error(&whole, source))?;
        if !named.is_empty() {
            return Ok(());
        }
        // What is there, to name in the error; a user who may not list them gets the error alone.
        crate::trace::round_trip("listCollections");
        let names = self
            .database
            .list_collection_names()
            .authorized_collections(true)
            .await
            .unwrap_or_default();
        let database = self.database.name();
        let problem = if names.is_empty() {
            format!("database `{database}` holds no collection (it does not exist, or is empty)")
        } else {
            let mut names = names;
            names.sort();
            let shown = names.len().min(10);
            let more = match names.len() - shown {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            format!(
                "there is no such collection in database `{database}`, which holds {}{more}",
                names[..shown].join(", ")
            )
        };
        Err(Error::new(
            whole,
            ErrorKind::SchemaMismatch {
                collection: model.collection().to_owned(),
                problem,
            },
        ))
    }
}

/// The one audit both the typed and the run-time calls make.
///
/// `listed` are the model's stored fields, where it lists them: a stored field it does not
/// list is reported in [`AuditReport::unknown_fields`].
async fn audit_collection(
    store: &Store,
    model: &Model,
    (reading, listed): (Reading<'_>, &[&str]),
    progress: &mut dyn FnMut(&AuditProgress),
) -> Result<AuditReport, Error> {
    let call = Call::new(CallKind::Audit, model.collection(), || None::<Id>);
    call.run(scan_collection(store, model, (reading, listed), progress))
        .await
}

/// The audit's one pass over the collection.
async fn scan_collection(
    store: &Store,
    model: &Model,
    (reading, listed): (Reading<'_>, &[&str]),
    progress: &mut dyn FnMut(&AuditProgress),
) -> Result<AuditReport, Error> {
    let collection = store.database.collection::<Document>(model.collection());
    let collection_ref = DocumentRef::collection(model);
    // An estimate from the collection's metadata: cheap, and only used to draw progress.
    let total = collection.estimated_document_count().await.ok();
    let mut cursor = sorted_by_natural_key(&collection, model).await?;
    let typed = matches!(reading, Reading::Typed(_));
    let mut report = AuditReport::new(model.collection(), typed);
    let mut duplicates = DuplicateTracker::new();
    // A model given at run time may not be the documents' (a flag forgotten or wrong).
    let mut model_check = (!typed).then(|| ModelCheck::new(model));
    let mut diagnosis = (!typed).then(HashDiagnosis::default);
    let mut fields = FieldsSeen::default();
    while cursor
        .advance()
        .await
        .map_err(|source| mongo_error(&collection_ref, source))?
    {
        let stored: Document = cursor
            .deserialize_current()
            .map_err(|source| mongo_error(&collection_ref, source))?;
        report.scanned += 1;
        if stored.contains_key(ADOPTION_FIELD) {
            // Its key is set aside while it moves: it holds no natural key yet.
            let id = stored_id_text(&stored).unwrap_or_default();
            report.moves_in_progress.record(id, None);
        } else {
            let inspection = inspect(model, reading, &stored);
            fields.see(model, listed, &stored);
            if let (Some(diagnosis), Some(stored_hash)) =
                (diagnosis.as_mut(), inspection.hash.stored.as_deref())
            {
                let hash = &inspection.hash;
                if diagnosis.wants()
                    && !hash.computed.is_empty()
                    && !hash.matches()
                    && !hash.nested_unknown
                {
                    let hashed = hashed_fields(model, listed, &[], &stored);
                    diagnosis.examine(model, listed, &hashed, stored_hash, |value| {
                        matches!(value, Bson::Null)
                    });
                }
            }
            if let Some(check) = model_check
                .as_mut()
                .filter(|check| check.wants(&inspection.stored_id))
            {
                check.examine(&inspection.stored_id, &neutral_fields(&stored));
            }
            let clean = record_problems(&mut report, &inspection);
            let key = DocumentKey(stored_natural_key(model, &stored));
            duplicates.count(&mut report, Some(key), &inspection.stored_id, clean);
        }
        progress(&AuditProgress::new(report.scanned, total));
    }
    duplicates.finish(&mut report);
    report.model_mismatch = model_check.and_then(|check| check.finding());
    report.unknown_fields = fields.unknown;
    for field in diagnosis.iter().flat_map(HashDiagnosis::finding) {
        crate::audit::note_unknown(&mut report.unknown_fields, field);
    }
    if !typed && listed.is_empty() {
        report.unnamed_fields =
            crate::audit::unnamed_fields(model, fields.names.iter().map(String::as_str));
    }
    Ok(report)
}

/// How many distinct stored names an audit keeps: enough to name what a model misses, bounded
/// whatever the documents hold.
const NAMES_KEPT: usize = 64;

/// The stored field names an audit met, and those the model does not have.
#[derive(Default)]
struct FieldsSeen {
    names: Vec<String>,
    unknown: Vec<UnknownField>,
}

impl FieldsSeen {
    fn see(&mut self, model: &Model, listed: &[&str], stored: &Document) {
        for name in stored.keys() {
            if self.names.len() >= NAMES_KEPT {
                return;
            }
            if self.names.iter().any(|seen| seen == name) {
                continue;
            }
            self.names.push(name.clone());
            if !is_model_field(model, listed, name) {
                self.unknown
                    .push(UnknownField::new(name.as_str(), UnknownReason::NotListed));
            }
        }
    }
}

impl Store {
    /// Checks `model` against the documents stored under a ULID ([`crate::model_check`]): reads
    /// those whose `_id` is a string until enough are examined, not the whole collection.
    ///
    /// Returns also the stored fields the stored hashes show the type does not hash
    /// ([`HashDiagnosis`]) and those `field_order` does not list, where it lists them.
    pub(super) async fn model_mismatch(
        &self,
        model: &Model,
        field_order: &[&str],
    ) -> Result<(Option<crate::model_check::ModelMismatch>, Vec<UnknownField>), Error> {
        let collection = self.database.collection::<Document>(model.collection());
        let whole = DocumentRef::collection(model);
        let mut check = ModelCheck::new(model);
        let mut diagnosis = HashDiagnosis::default();
        let mut fields = FieldsSeen::default();
        crate::trace::round_trip("find");
        let mut cursor = collection
            .find(doc! { ID_FIELD: { "$type": "string" } })
            .await
            .map_err(|source| mongo_error(&whole, source))?;
        while !check.is_done()
            && cursor
                .advance()
                .await
                .map_err(|source| mongo_error(&whole, source))?
        {
            let stored: Document = cursor
                .deserialize_current()
                .map_err(|source| mongo_error(&whole, source))?;
            let id = stored_id_text(&stored).unwrap_or_default();
            if check.wants(&id) && !stored.contains_key(ADOPTION_FIELD) {
                check.examine(&id, &neutral_fields(&stored));
                fields.see(model, field_order, &stored);
                if let Ok(stored_hash) = stored.get_str(model.hash_field()) {
                    let hashed = hashed_fields(model, field_order, &[], &stored);
                    diagnosis.examine(model, field_order, &hashed, stored_hash, |value| {
                        matches!(value, Bson::Null)
                    });
                }
            }
        }
        let mut unknown = fields.unknown;
        for field in diagnosis.finding() {
            crate::audit::note_unknown(&mut unknown, field);
        }
        Ok((check.finding(), unknown))
    }
}

/// A stored document's top-level fields in the neutral form the audit derives ids from (a date
/// as its milliseconds, other values as relaxed extended JSON).
fn neutral_fields(stored: &Document) -> serde_json::Map<String, serde_json::Value> {
    stored
        .iter()
        .map(|(name, value)| (name.clone(), neutral(value)))
        .collect()
}

/// `value` in the neutral form: a date as its milliseconds.
fn neutral(value: &Bson) -> serde_json::Value {
    match value {
        Bson::DateTime(date) => serde_json::Value::from(date.timestamp_millis()),
        value => value.clone().into_relaxed_extjson(),
    }
}

/// Counts the problems of one document; returns whether it has none.
fn record_problems(report: &mut AuditReport, inspection: &Inspection) -> bool {
    let mut clean = true;
    let id = inspection.stored_id.clone();
    match &inspection.placement {
        Placement::Legacy(derived) => {
            report
                .legacy_ids
                .record_misplaced(id.clone(), derived.to_string());
            clean = false;
        }
        Placement::Orphan(derived) => {
            report
                .orphans
                .record_misplaced(id.clone(), derived.to_string());
            clean = false;
        }
        Placement::Underivable(why) => {
            report.underivable.record(id.clone(), Some(why.clone()));
            clean = false;
        }
        Placement::Derived | Placement::Unchecked => {}
    }
    clean &= inspection.hash.record(report, &id);
    if let Some((field, how)) = inspection.digest_mismatch {
        report
            .digest_mismatch
            .record(id.clone(), Some(how.detail(field)));
        clean = false;
    }
    if let (Some(why), Some(finding)) = (&inspection.undeserializable, &mut report.undeserializable)
    {
        finding.record(id, Some(why.clone()));
        clean = false;
    }
    clean
}
