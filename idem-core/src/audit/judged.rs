//! One stored document (a table's row) as an audit and an adoption judge it, the same on every
//! store: the id it derives and where it stands against it, its content hash against the
//! hashes its content may have, its guard digests against its values, and, read as the type,
//! whether it reads as one. A store says how its documents are read ([`StoredDocument`], and
//! the type's reading, [`TypedReading`]); what they are is decided here.

use serde_json::Value;

use super::derivation::derive_from_stored;
use super::digests::{field_not_as_digested, DigestMismatch, DigestReading};
use super::hash_check::HashCheck;
use super::report::AuditReport;
use crate::engine::StoredDigest;
use crate::hash::ContentHash;
use crate::id::Id;
use crate::model::{Field, Model};
use crate::short_text::ShortText;

/// What a store learns by reading a stored document as the type.
pub(crate) struct TypedReading {
    /// The id the value derives, or why it derives none.
    pub id: Result<Id, String>,
    /// The value's content hash, where it has one.
    pub hash: Option<ContentHash>,
    /// Each guarded field's digest as a write of the value stores it, in
    /// [`Model::digested_fields`] order; `None` where the store does not compute them, and the
    /// stored values' digests are taken, as without the type.
    pub digests: Option<Vec<Option<ShortText>>>,
    /// The stored form of the version's order key, for a type with versions.
    pub version_key: Option<String>,
}

impl TypedReading {
    /// What `value`, a stored document read as its type, says of itself: its id, its content
    /// hash and its version's order key; its digests are taken from the stored values, which
    /// a write of it stores as they are.
    pub fn of<T: crate::Idempotent + serde::Serialize>(value: &T) -> Self {
        TypedReading {
            id: value.id().map_err(|error| error.to_string()),
            hash: value.content_hash().ok(),
            digests: None,
            version_key: value.version_key().map(|key| key.to_stored()),
        }
    }
}

/// A stored document as a store reads it for its judgement.
pub(crate) trait StoredDocument {
    /// The stored `_id` where it is text (an idem id is): other ids are legacy ones.
    fn id_text(&self) -> Option<&str>;
    /// `field`'s stored value in the neutral form [`derive_from_stored`] reads (a date as its
    /// milliseconds); null where it is missing.
    fn neutral(&self, field: &Field) -> Value;
    /// The stored content hash, if there is one.
    fn stored_hash(&self, model: &Model) -> Option<&str>;
    /// The guard digest stored for `field`.
    fn stored_digest(&self, field: &Field) -> StoredDigest<'_>;
    /// The digests `field`'s stored value may have, one per reading of it where the store
    /// cannot tell how it was written.
    fn value_digests(&self, field: &Field) -> Vec<DigestReading>;
    /// Read without the type: the hashes the stored values may have (the first is the one to
    /// store), and whether they hold nested objects, whose hash only the type knows.
    fn stored_hashes(&self) -> (Vec<ContentHash>, bool);
}

/// Where a document stands against the id derived from it.
pub(crate) enum Placement {
    /// Under its derived id.
    Derived,
    /// Under an id that is no idem id (an ObjectId, other text, a number): `adopt` moves it.
    Legacy(Id),
    /// Under an idem id, but another one than derived: a field feeding the id changed.
    Orphan(Id),
    /// No id can be derived from it, for the reason given.
    Underivable(String),
    /// Not checked: an event type's id is random, assigned by its first write.
    Unchecked,
}

/// One stored document as judged.
pub(crate) struct Judged {
    /// The id derived from the document (from the type where it reads as one, else from its
    /// stored values), `None` for an event type.
    pub derived: Option<Result<Id, String>>,
    /// The stored `_id`, where it is text.
    pub stored_id: Option<String>,
    /// The stored content hash against the hash of the content.
    pub hash: HashCheck,
    /// Why the document does not read as the type (typed readings only).
    pub undeserializable: Option<String>,
    /// The first guarded field whose stored digest is not its stored value's, and how.
    pub digest_mismatch: Option<(&'static Field, DigestMismatch)>,
    /// The version's order key, from a typed reading. Only MongoDB's adoption stamps it from
    /// here; the SQL stores' takes it from the row prepared as a write.
    #[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
    pub version_key: Option<String>,
}

/// Judges one stored document of `model`: `typed` is its reading as the type (`Some(Err(why))`
/// where it does not read as one), `None` for a model given at run time.
pub(crate) fn judge(
    model: &Model,
    typed: Option<Result<TypedReading, String>>,
    stored: &impl StoredDocument,
) -> Judged {
    let from_stored = || {
        let key: Vec<Value> = model
            .natural_key_fields()
            .map(|field| stored.neutral(field))
            .collect();
        let timestamp = model.timestamp_field().map(|field| stored.neutral(field));
        derive_from_stored(model, &key, timestamp.as_ref())
    };
    let (derived, computed, nested_unknown, undeserializable, digests, version_key) = match typed {
        Some(Ok(reading)) => (
            reading.id,
            reading.hash.into_iter().collect(),
            false,
            None,
            reading.digests,
            reading.version_key,
        ),
        // A document that is not a `T` has no hash of a `T`.
        Some(Err(why)) => (from_stored(), Vec::new(), false, Some(why), None, None),
        None => {
            let (computed, nested) = stored.stored_hashes();
            (from_stored(), computed, nested, None, None, None)
        }
    };
    let readings: Vec<Vec<DigestReading>> = match digests {
        // The type's digests are exact: one reading each.
        Some(digests) => digests.into_iter().map(|digest| vec![Ok(digest)]).collect(),
        None => model
            .digested_fields()
            .map(|field| stored.value_digests(field))
            .collect(),
    };
    let digest_mismatch = field_not_as_digested(
        model
            .digested_fields()
            .zip(readings)
            .map(|(field, readings)| (field, stored.stored_digest(field), readings)),
    );
    Judged {
        derived: model.idempotency_key_field().is_none().then_some(derived),
        stored_id: stored.id_text().map(str::to_owned),
        hash: HashCheck {
            stored: stored.stored_hash(model).map(str::to_owned),
            computed,
            nested_unknown,
        },
        undeserializable,
        digest_mismatch,
        version_key,
    }
}

impl Judged {
    /// Where the document stands against its derived id.
    pub fn placement(&self) -> Placement {
        match &self.derived {
            None => Placement::Unchecked,
            Some(Err(why)) => Placement::Underivable(why.clone()),
            Some(Ok(derived)) => match self.stored_id.as_deref() {
                Some(text) if *text == derived.to_string() => Placement::Derived,
                Some(text) if text.parse::<Id>().is_ok() => Placement::Orphan(*derived),
                _ => Placement::Legacy(*derived),
            },
        }
    }

    /// Counts the document's problems in `report`, `shown` as its id; returns whether it has
    /// none.
    pub fn record(&self, report: &mut AuditReport, shown: &str) -> bool {
        let mut clean = true;
        let id = shown.to_owned();
        match self.placement() {
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
                report.underivable.record(id.clone(), Some(why));
                clean = false;
            }
            Placement::Derived | Placement::Unchecked => {}
        }
        clean &= self.hash.record(report, &id);
        if let Some((field, how)) = self.digest_mismatch {
            report
                .digest_mismatch
                .record(id.clone(), Some(how.detail(field)));
            clean = false;
        }
        if let (Some(why), Some(finding)) = (&self.undeserializable, &mut report.undeserializable) {
            finding.record(id, Some(why.clone()));
            clean = false;
        }
        clean
    }

    /// The id an adoption moves the document to and the content hash it stores with it
    /// ([`HashCheck::to_store`]), wherever the document is now; `Err` says why it cannot move.
    pub fn destination(&self) -> Result<(Id, String), String> {
        if let Some(why) = &self.undeserializable {
            return Err(format!("does not deserialize into the type: {why}"));
        }
        let id = match &self.derived {
            None => {
                return Err(
                    "an event's id is assigned by its first write: there is none to move to".into(),
                )
            }
            Some(derived) => derived.clone()?,
        };
        let hash = self
            .hash
            .to_store()
            .ok_or_else(|| "its content hash cannot be computed".to_owned())?;
        Ok((id, hash))
    }

    /// [`Judged::destination`] of a document an adoption moves: `Ok(None)` for one under its
    /// derived id already (or an event's, whose id is not derived), which stays where it is.
    /// The SQL stores move every row to its [`Judged::destination`], one under it in place.
    #[cfg(feature = "mongodb")]
    pub fn move_target(&self) -> Result<Option<(Id, String)>, String> {
        let stays = matches!(self.placement(), Placement::Derived | Placement::Unchecked);
        if stays && self.undeserializable.is_none() {
            return Ok(None);
        }
        self.destination().map(Some)
    }
}
