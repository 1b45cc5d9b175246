//! The audit of a MongoDB collection before idem takes it over: one pass over the collection
//! sorted by the natural key (why its memory stays bounded is on [`Store::audit`]), each
//! document judged by core's rules ([`crate::audit`]) as MongoDB stores it ([`StoredBson`]).

use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::errors::{next_document, Naming};
use super::write::{field_digest, stored_digest, stored_id_text};
use super::{natural_key_pattern, Store};
use crate::audit::{
    hashed_fields, AuditPass, AuditProgress, AuditReport, DigestReading, FieldsSeen, HashDiagnosis,
    Judged, ModelSample, StoredDocument, StoredKey, TypedReading, UnknownField,
};
use crate::document::DocumentRef;
use crate::engine::StoredDigest;
use crate::error::Error;
#[cfg(doc)]
use crate::error::ErrorKind;
use crate::hash::{is_hashed_stored_field, ContentHash};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model, ID_FIELD};
use crate::trace::{Call, CallKind};

/// The field a document half moved by [`Store::adopt`] carries: where it came from and the
/// natural key it set aside (`adopt/moves.rs`).
pub(crate) use crate::model::ADOPTION_FIELD;

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

/// [`ReadTyped`] for `T` ([`TypedReading::of`]), read as a typed read reads it.
pub(crate) fn read_typed<T>(stored: &Document) -> Result<TypedReading, String>
where
    T: Idempotent + Serialize + DeserializeOwned,
{
    let value: T = super::text_keys::from_stored(&T::MODEL, stored.clone())?;
    Ok(TypedReading::of(&value))
}

/// Judges one stored document of `model` ([`crate::audit::judge`]).
pub(crate) fn judge(model: &Model, reading: Reading<'_>, document: &Document) -> Judged {
    let typed = match reading {
        Reading::Typed(read) => Some(read(document)),
        Reading::Stored { .. } => None,
    };
    let stored = StoredBson {
        model,
        reading,
        document,
    };
    crate::audit::judge(model, typed, &stored)
}

/// A stored document as the judgement reads it, its hashed fields as [`Reading::Stored`] says.
struct StoredBson<'d> {
    model: &'d Model,
    reading: Reading<'d>,
    document: &'d Document,
}

impl StoredDocument for StoredBson<'_> {
    fn id_text(&self) -> Option<&str> {
        self.document.get(ID_FIELD).and_then(Bson::as_str)
    }

    fn neutral(&self, field: &Field) -> serde_json::Value {
        self.document
            .get(field.stored_name())
            .map_or(serde_json::Value::Null, neutral)
    }

    fn stored_hash(&self, model: &Model) -> Option<&str> {
        self.document.get_str(model.hash_field()).ok()
    }

    fn stored_digest(&self, field: &Field) -> StoredDigest<'_> {
        stored_digest(self.document, field)
    }

    fn value_digests(&self, field: &Field) -> Vec<DigestReading> {
        vec![field_digest(self.document, field)]
    }

    /// The content hash of the stored fields ([`stored_fields_hash`]'s rule). With an empty
    /// `field_order` the stored order is taken, which is the type's only if the server kept the
    /// order the document was written in (servers may not: SecantusDB puts a batch upsert's
    /// fields in another order). A nested struct is stored as a sub-document in the order it
    /// was written, but reads as a map: for such types only the typed audit checks hashes
    /// exactly.
    ///
    /// [`stored_fields_hash`]: crate::hash::stored_fields_hash
    fn stored_hashes(&self) -> (Vec<ContentHash>, bool) {
        let (model, document) = (self.model, self.document);
        let (field_order, left_out) = match self.reading {
            Reading::Stored {
                field_order,
                left_out,
            } => (field_order, left_out),
            Reading::Typed(_) => (&[][..], &[][..]),
        };
        let fields = hashed_fields(model, field_order, left_out, stored_fields(document));
        let hash = crate::hash::stored_fields_hash(model, field_order, &fields);
        let nested = document
            .iter()
            .any(|(name, value)| is_hashed_stored_field(model, name) && holds_document(value));
        (hash.ok().into_iter().collect(), nested)
    }
}

/// A stored document's fields, by name.
fn stored_fields(document: &Document) -> impl Iterator<Item = (&str, &Bson)> {
    document.iter().map(|(name, value)| (name.as_str(), value))
}

/// Whether `value` holds a sub-document at any depth.
fn holds_document(value: &Bson) -> bool {
    match value {
        Bson::Document(_) => true,
        Bson::Array(items) => items.iter().any(holds_document),
        _ => false,
    }
}

/// The natural key of a stored document, missing fields as null (as a unique index holds
/// them).
pub(crate) fn stored_natural_key(model: &Model, stored: &Document) -> StoredKey<Bson> {
    StoredKey::of(model, |name| {
        stored.get(name).cloned().unwrap_or(Bson::Null)
    })
}

/// The cursor over every document of `model`'s collection, sorted by the natural key (documents
/// sharing a key come one after the other), and the server's estimate of how many there are:
/// from the collection's metadata, cheap, and only used to draw progress. Sorted under the
/// simple collation, whatever the collection's default: under a case-insensitive one "Alpha",
/// "alpha", "Alpha" may come in that order, and the two "Alpha" would not be seen together.
pub(crate) async fn sorted_by_natural_key(
    collection: &Collection<Document>,
    model: &Model,
) -> Result<(mongodb::Cursor<Document>, Option<u64>), Error> {
    let total = collection.estimated_document_count().await.ok();
    let find = (collection.find(doc! {}).sort(natural_key_pattern(model)))
        .collation(super::schema::simple_collation());
    let cursor = find.allow_disk_use(true).await;
    Ok((cursor.naming(&DocumentRef::collection(model))?, total))
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
            .naming(&whole)?;
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
        Err(Error::schema_mismatch(model, problem))
    }
}

/// The one audit both the typed and the run-time calls make: one pass over the collection
/// ([`AuditPass`]).
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
    call.run(async move {
        let collection = store.database.collection::<Document>(model.collection());
        let collection_ref = DocumentRef::collection(model);
        let (mut cursor, total) = sorted_by_natural_key(&collection, model).await?;
        let typed = matches!(reading, Reading::Typed(_));
        let mut report = AuditReport::new(model.collection(), typed);
        let mut pass = AuditPass::new(model, typed);
        let mut fields = FieldsSeen::default();
        while let Some(stored) = next_document(&mut cursor, &collection_ref).await? {
            report.scanned += 1;
            let shown = stored_id_text(&stored).unwrap_or_else(|| "(no _id)".to_owned());
            if stored.contains_key(ADOPTION_FIELD) {
                // Its key is set aside while it moves: it holds no natural key yet.
                report.moves_in_progress.record(shown, None);
            } else {
                let judged = judge(model, reading, &stored);
                fields.see(model, listed, stored.keys().map(String::as_str));
                if let Some(diagnosis) = pass.diagnosis_of(&judged) {
                    examine_hash(diagnosis, model, listed, &stored);
                }
                pass.check_model(&shown, || neutral_fields(&stored));
                let key = stored_natural_key(model, &stored);
                pass.count(&mut report, &judged, &shown, Some(key));
            }
            progress(&AuditProgress::new(report.scanned, total));
        }
        report.unknown_fields = fields.unknown;
        let stored_names = (!typed && listed.is_empty()).then_some(&fields.names);
        pass.finish(
            &mut report,
            stored_names.map(|names| names.iter().map(String::as_str)),
        );
        Ok(report)
    })
    .await
}

/// Shows the hash diagnosis a document whose stored hash differs from its stored fields'.
fn examine_hash(diagnosis: &mut HashDiagnosis, model: &Model, listed: &[&str], stored: &Document) {
    if let Ok(stored_hash) = stored.get_str(model.hash_field()) {
        let hashed = hashed_fields(model, listed, &[], stored_fields(stored));
        diagnosis.examine(model, listed, &hashed, stored_hash, |value| {
            matches!(value, Bson::Null)
        });
    }
}

impl Store {
    /// Reads the sample an adoption of `model` (given at run time) checks before it moves
    /// anything ([`ModelSample`]): the documents whose `_id` is a string, until enough are
    /// examined, not the whole collection. Returns also the stored fields `field_order` does
    /// not list, where it lists them.
    pub(super) async fn model_sample<'m>(
        &self,
        model: &'m Model,
        field_order: &[&str],
    ) -> Result<(ModelSample<'m>, Vec<UnknownField>), Error> {
        let whole = DocumentRef::collection(model);
        let mut sample = ModelSample::new(model);
        let mut fields = FieldsSeen::default();
        crate::trace::round_trip("find");
        let collection = self.raw_collection(model);
        let find = collection.find(doc! { ID_FIELD: { "$type": "string" } });
        let mut cursor = find.await.naming(&whole)?;
        while !sample.check.is_done() {
            let Some(stored) = next_document(&mut cursor, &whole).await? else {
                break;
            };
            let id = stored_id_text(&stored).unwrap_or_default();
            if sample.check.wants(&id) && !stored.contains_key(ADOPTION_FIELD) {
                sample.check.examine(&id, &neutral_fields(&stored));
                fields.see(model, field_order, stored.keys().map(String::as_str));
                examine_hash(&mut sample.diagnosis, model, field_order, &stored);
            }
        }
        Ok((sample, fields.unknown))
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
