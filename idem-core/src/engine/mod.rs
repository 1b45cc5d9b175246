//! The write engine: the rules of a guarded write, written once for every backend.
//!
//! A backend's driver encodes documents for its database and sends writes; it never decides
//! what a write did. The engine does, from the driver's replies:
//!
//! - [`settle`] sends a set of prepared documents until each is settled. A driver's [`Reply`]
//!   for a document is one of: written (inserted or updated, as the server told it in the same
//!   statement), stopped by what is stored (which [`judge()`] reads for `Unchanged`, `Stale`,
//!   `Deleted` or a refusal), unseen (a writer committed meanwhile: go again), or a conflict on a
//!   unique index. The retries, the second pinned step over a document another tool stored, the
//!   reading of a conflict and the refusal of a permanent one live here.
//! - [`batch`] gives a batch the outcomes single writes would give, in rounds keyed by id and
//!   natural key, copies collapsed by id.
//! - [`record`] stores an event once under its idempotency key.
//!
//! A driver implements [`Driver`]: how to send one write, how to read what a conflict collided
//! with, and how to read the few stored values a judgement needs. The comparison rules (digests,
//! values stored by another tool, versions) are [`mod@judge`]'s.

pub(crate) mod batch;
pub(crate) mod by_id;
pub(crate) mod insert;
pub(crate) mod judge;
pub(crate) mod plan;
pub(crate) mod record;

use std::future::Future;

use serde_json::Value;

use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::hash::ContentHash;
use crate::held_key::HeldKey;
use crate::id::Id;
use crate::model::{Field, Model, Role};
use crate::outcome::Outcome;
use crate::short_text::ShortText;
use crate::verdict::StoredVersion;
use crate::MAX_ATTEMPTS;

/// How often a document written without a server guard goes again before
/// [`ErrorKind::Contention`]: enough for dozens of writers racing one document.
const UNGUARDED_ATTEMPTS: usize = 64;

pub(crate) use judge::{judge, Judged};

/// Which guarded write a statement makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Replace the stored document if the guard allows it, or insert it.
    Upsert,
    /// Set the deletion marker if it is not set, or insert the document deleted.
    Delete,
    /// Insert the document unless its natural key (an event's idempotency key) is stored; the
    /// reply of a document left alone is what holds the key.
    Record,
    /// Insert the member of a derived set unless it is stored: stored under its id, it is
    /// there already (`Unchanged`), whatever it holds.
    InsertNew,
}

impl WriteKind {
    /// The outcome of a write the server reports as done.
    fn written(self, inserted: bool) -> Outcome {
        match (self, inserted) {
            (WriteKind::Delete, _) => Outcome::Deleted,
            (WriteKind::Upsert | WriteKind::Record | WriteKind::InsertNew, true) => {
                Outcome::Inserted
            }
            (WriteKind::Upsert | WriteKind::Record, false) => Outcome::Updated,
            // An insert updates nothing: what it met was there already.
            (WriteKind::InsertNew, false) => Outcome::Unchanged,
        }
    }
}

/// What one write did to one document, as the driver read it from the server's answer.
#[derive(Debug)]
pub(crate) enum Reply<S> {
    /// Written by this very write: inserted, or updated.
    Written {
        /// Whether the document was inserted.
        inserted: bool,
    },
    /// Left alone by the guard; what is stored under the id, else under the natural key. Every
    /// driver reports the row under the id when two rows hold the id and the key apart, so that
    /// one such document gets one refusal (its key changed) whichever path wrote it.
    Stopped(S),
    /// Stopped by a document the write could not see (committed meanwhile): go again.
    Unseen,
    /// A unique index refused the write.
    Conflict(Conflict),
    /// The server refused this document for what it holds (a validator, a constraint): the
    /// others of the write are not concerned.
    Refused(Error),
}

/// Which unique index refused a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// The id or the natural key: what is stored there decides.
    Key,
    /// Another unique index, named: a permanent refusal.
    Other {
        /// The index or constraint, as the server names it.
        index: String,
    },
    /// An index the server did not say was the id's or the natural key's: a refusal naming it
    /// unless the id or the natural key turns out to be stored.
    Unclear {
        /// The index, as far as the server named it.
        index: String,
    },
}

impl Conflict {
    /// Whether what the conflict met must be read to settle the write: every conflict but
    /// another named index.
    fn needs_a_read(&self) -> bool {
        !matches!(self, Conflict::Other { .. })
    }
}

/// A stored guarded field's digest, as a driver reads it: one per field (MongoDB), or one of
/// every guarded field together (the SQL stores, [`StoredDigest::Whole`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Only MongoDB keeps a digest per field.
#[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
pub(crate) enum StoredDigest<'s> {
    /// The document carries no digests at all: another tool wrote it.
    NoDigests,
    /// No digest for this field: never written.
    Unwritten,
    /// This digest.
    Digest(&'s str),
    /// Something that is not a digest.
    Other,
    /// One digest of every guarded field together, as the SQL stores keep it
    /// ([`crate::hash::frozen_digest`]): the same as the incoming document's, every field is as
    /// its digest says; another, the fields are compared by value, as without digests.
    #[cfg_attr(not(feature = "_sql_store"), allow(dead_code))]
    Whole(&'s str),
}

#[cfg(feature = "mongodb")]
impl<'s> StoredDigest<'s> {
    /// The digest stored for a field, from its entry in a document's digests object (`None`:
    /// no entry), the same on every store: missing or null, never written; text, the digest;
    /// anything else, no digest a write stores.
    pub(crate) fn of_entry<V: StoredScalar>(entry: Option<&'s V>) -> Self {
        match entry {
            Some(value) if !value.is_null() => value
                .text()
                .map_or(StoredDigest::Other, StoredDigest::Digest),
            _ => StoredDigest::Unwritten,
        }
    }
}

/// A stored value as the digest rules read it (BSON).
#[cfg(feature = "mongodb")]
pub(crate) trait StoredScalar {
    /// Whether the value is null.
    fn is_null(&self) -> bool;
    /// The value's text, where it is text.
    fn text(&self) -> Option<&str>;
}

/// The digest a write stores for the guarded `field` holding a value (`hashed`, as the store
/// hashes it; `is_null`: the value is null): none where a null means never written (an
/// `Option`, [`Field::null_is_unwritten`]); any other null is a value like any other, which a
/// later write may not change. Every store's writes, audits and adoptions digest a guarded
/// value here.
pub(crate) fn guarded_value_digest<T: serde::Serialize + ?Sized>(
    field: &Field,
    hashed: &T,
    is_null: bool,
) -> Result<Option<ShortText>, String> {
    crate::hash::guard_digest(hashed, is_null && field.null_is_unwritten())
}

/// Refuses a serialized document, before anything is sent, that writes a name idem writes itself
/// (an entry of a `#[serde(flatten)]` map named `_id`, say), or that leaves out a key field or the
/// idempotency key (a custom `Serialize` impl): keys feed the id and find the document. `names`
/// are the stored names the document writes; `holds_key(name)` says whether it wrote a value a
/// key can be read from under `name` (each encoding tells its own nulls). `name_document` names
/// the document in a refusal, built only for one.
pub(crate) fn check_written_names<'n>(
    model: &Model,
    name_document: impl FnOnce() -> DocumentRef,
    mut names: impl Iterator<Item = &'n String>,
    holds_key: impl Fn(&str) -> bool,
) -> Result<(), Error> {
    if let Some(reserved) = names.find(|name| model.is_reserved(name)) {
        return Err(Error::new(
            name_document(),
            ErrorKind::ReservedName {
                stored_name: reserved.clone(),
            },
        ));
    }
    let keys = model
        .fields()
        .iter()
        .filter(|field| matches!(field.role(), Role::Key | Role::IdempotencyKey));
    for field in keys {
        if !holds_key(field.stored_name()) {
            return Err(Error::new(
                name_document(),
                ErrorKind::FieldNotSerialized {
                    field: field.name(),
                    stored_name: field.stored_name(),
                },
            ));
        }
    }
    Ok(())
}

/// What every driver's prepared document holds beside its own encoding, computed before any
/// round trip: the engine reads a document through this (a driver's document dereferences to
/// it).
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    /// The type's model.
    pub model: &'static Model,
    /// Its natural key, which [`Prepared::document`] names it by.
    pub key: HeldKey,
    /// The id it is written under.
    pub id: Id,
    /// The id, as stored.
    pub id_text: ShortText,
    /// The content hash, as stored.
    pub hash: ShortText,
    /// The content hash itself, whose bytes a lookup may send instead of its text.
    // Read by the PostgreSQL lookup only.
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub content_hash: ContentHash,
    /// The version's order key, for a type with versions.
    pub version_key: Option<String>,
    /// Each guarded field with the digest of its incoming value (`None`: never written).
    pub digests: Vec<(&'static Field, Option<ShortText>)>,
    /// Reads a stored version back as the type's ([`crate::Idempotent::stored_version_key`]).
    pub stored_version: fn(&Value) -> Option<crate::VersionKey>,
}

impl Prepared {
    /// `doc`'s part of its prepared form, under `id`, with its content hash and the digests of
    /// its guarded fields as the driver computed them from its own encoding.
    pub fn new<T: crate::Idempotent>(
        doc: &T,
        id: Id,
        hash: ContentHash,
        digests: Vec<(&'static Field, Option<ShortText>)>,
    ) -> Self {
        Prepared {
            model: &T::MODEL,
            key: doc.with_key_values(HeldKey::of),
            id,
            id_text: id.to_text(),
            hash: hash.to_short_text(),
            content_hash: hash,
            version_key: T::MODEL
                .version_field()
                .and(doc.version_key())
                .map(|key| key.to_stored()),
            digests,
            stored_version: T::stored_version_key,
        }
    }

    /// How errors name the document: built when one does, not for every document prepared.
    pub fn document(&self) -> DocumentRef {
        DocumentRef::new(self.model, self.key.natural_key(self.model))
            .with_derived_id(self.model, self.id)
    }
}

/// A document's preparation under an id, begun alike by every store's encoding: its content
/// hash, and how a refusal of its content names it before it is prepared.
pub(crate) struct Preparing<'d, T> {
    doc: &'d T,
    id: Id,
    hash: ContentHash,
}

impl<'d, T: crate::Idempotent + serde::Serialize> Preparing<'d, T> {
    /// Begins preparing `doc` under `id` with its content hash; a hash refused is refused naming
    /// the document under `id`.
    pub fn begin(doc: &'d T, id: Id) -> Result<Self, Error> {
        let document = || doc.document_ref().with_derived_id(&T::MODEL, id);
        let hash = doc
            .content_hash()
            .map_err(|error| Error::new(document(), error.into_kind()))?;
        Ok(Preparing { doc, id, hash })
    }

    /// How a refusal names the document: its own name, under the id it is written under.
    pub fn document(&self) -> DocumentRef {
        self.doc.document_ref().with_derived_id(&T::MODEL, self.id)
    }

    /// [`ErrorKind::Serialize`] with `message`, naming the document.
    pub fn serialize_error(&self, message: String) -> Error {
        Error::new(self.document(), ErrorKind::Serialize { message })
    }

    /// The prepared form, with the digests of its guarded fields as the store's encoding
    /// computed them.
    pub fn finish(&self, digests: Vec<(&'static Field, Option<ShortText>)>) -> Prepared {
        Prepared::new(self.doc, self.id, self.hash, digests)
    }
}

/// One database's side of a write: it encodes and sends, the engine decides.
pub(crate) trait Driver: Sync {
    /// A document ready to send.
    type Doc: std::ops::Deref<Target = Prepared> + Send + Sync;
    /// What a judgement reads of a document: its id, natural key, hashes and guarded values,
    /// which a driver may prepare without encoding the rest
    /// ([`batch::BatchDriver::prepare_light`]).
    type Light: std::ops::Deref<Target = Prepared> + Send + Sync;
    /// What the driver read of a stored document.
    type Stored: Send + Sync;

    /// Sends one write of `kind` for `docs` (distinct ids and natural keys) and returns one
    /// reply per document, in order. An error concerns the whole write: nothing of it was
    /// written, unless the error says so.
    fn write(
        &self,
        kind: WriteKind,
        docs: &[&Self::Doc],
    ) -> impl Future<Output = Result<Vec<Reply<Self::Stored>>, Error>> + Send;

    /// Replaces `stored`, a document the server guard cannot compare (another tool's, without
    /// digests, or one without the version's order key; any, where the driver's writes carry
    /// no guard), with `doc`, only while it is as it was read. Replies `Written`, `Unseen` if it changed meanwhile, or the conflict or refusal
    /// the server answered for it.
    fn write_pinned(
        &self,
        doc: &Self::Doc,
        stored: &Self::Stored,
    ) -> impl Future<Output = Result<Reply<Self::Stored>, Error>> + Send;

    /// Whether this driver's writes of `kind` carry the guard, so that a document they left
    /// alone but the verdict would replace changed meanwhile. `false` for a server that cannot
    /// state the guard (MongoDB without update pipelines): the documents it stops are as read
    /// before the write, and each replacement is a second step pinned to what was read.
    fn guards_on_server(&self, _kind: WriteKind) -> bool {
        true
    }

    /// What each conflict of `docs` collided with, in their order: the document under its id,
    /// else one holding its natural key under another id. One read per document unless the
    /// driver reads them together.
    fn read_conflicts(
        &self,
        docs: &[&Self::Doc],
    ) -> impl Future<Output = Result<Vec<Option<Self::Stored>>, Error>> + Send {
        async move {
            let mut stored = Vec::with_capacity(docs.len());
            for doc in docs {
                stored.push(self.read_conflict(doc).await?);
            }
            Ok(stored)
        }
    }

    /// What a conflict collided with: the document under `doc`'s id, else one holding its
    /// natural key under another id.
    fn read_conflict(
        &self,
        doc: &Self::Doc,
    ) -> impl Future<Output = Result<Option<Self::Stored>, Error>> + Send;

    /// What a judgement reads of a whole document.
    fn light_of<'d>(&self, doc: &'d Self::Doc) -> &'d Self::Light;
    /// The incoming value of a guarded field, in the neutral form.
    fn incoming_value(&self, doc: &Self::Light, field: &Field) -> Value;
    /// The incoming value of `field`, as a refusal shows it.
    fn incoming_shown(&self, doc: &Self::Light, field: &Field) -> String;
    /// The stored id as text, whoever wrote it.
    fn stored_id(&self, stored: &Self::Stored) -> Option<String>;
    /// Whether the deletion marker is set.
    fn is_tombstoned(&self, stored: &Self::Stored) -> bool;
    /// The stored content hash.
    fn stored_hash<'s>(&self, stored: &'s Self::Stored) -> Option<&'s str>;
    /// The stored digest of a guarded field; a SQL driver answers each with the one digest of
    /// them all ([`StoredDigest::Whole`]), which the judgement compares once.
    fn stored_digest<'s>(&self, stored: &'s Self::Stored, field: &Field) -> StoredDigest<'s>;
    /// The stored version order key.
    fn stored_version<'s>(&self, stored: &'s Self::Stored) -> StoredVersion<'s>;
    /// The stored value of `field` in the neutral form: `None` if missing, `Some(Value::Null)`
    /// for a stored null (a column's NULL).
    fn stored_value(&self, stored: &Self::Stored, field: &Field) -> Option<Value>;
    /// The stored value of `field`, as a refusal shows it; `None` if missing.
    fn stored_shown(&self, stored: &Self::Stored, field: &Field) -> Option<String>;
    /// The first natural-key field whose stored value is not `doc`'s, as the database's unique
    /// index compares them.
    fn key_differs(&self, doc: &Self::Light, stored: &Self::Stored) -> Option<&'static Field>;
}

/// [`settle`] for one document: its outcome.
pub(crate) async fn settle_one<D: Driver>(
    driver: &D,
    kind: WriteKind,
    doc: &D::Doc,
) -> Result<Outcome, Error> {
    let mut outcomes = settle(driver, kind, &[doc]).await?;
    outcomes
        .pop()
        .unwrap_or_else(|| Err(contention(&doc.document())))
}

/// Sends `docs` until each is settled: written, or judged from what stopped it. Documents that
/// meet a writer committed meanwhile go again, at most [`MAX_ATTEMPTS`] times (64 where the
/// driver's writes carry no guard: [`Driver::guards_on_server`]). When a write of
/// several documents fails for what one of them holds (a value the server refuses, another
/// constraint), each goes alone, so the others are written and the one is named by its reply.
pub(crate) async fn settle<D: Driver>(
    driver: &D,
    kind: WriteKind,
    docs: &[&D::Doc],
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; docs.len()];
    let mut one_by_one = false;
    // A write without a server guard is a compare-and-swap on what was read: each of n racing
    // writers may lose n - 1 times before its turn, where a guarded write loses at most once.
    let attempts = match driver.guards_on_server(kind) {
        true => MAX_ATTEMPTS,
        false => UNGUARDED_ATTEMPTS,
    };
    for attempt in 0..attempts {
        let pending: Vec<usize> = (0..docs.len())
            .filter(|&index| outcomes[index].is_none())
            .collect();
        if pending.is_empty() {
            break;
        }
        if attempt > 0 && !one_by_one {
            crate::trace::retry("a concurrent writer changed the document");
        }
        let groups: Vec<Vec<usize>> = if one_by_one {
            pending.iter().map(|&index| vec![index]).collect()
        } else {
            vec![pending]
        };
        for group in groups {
            let sent: Vec<&D::Doc> = group.iter().map(|&index| docs[index]).collect();
            let replies = match driver.write(kind, &sent).await {
                Ok(replies) => replies,
                // Which document the server refused, each going alone tells: the driver
                // answers a refusal of one document as that document's reply.
                Err(error) if refuses_a_document(&error) && group.len() > 1 => {
                    one_by_one = true;
                    continue;
                }
                Err(error) => return Err(error),
            };
            // The documents a conflict stopped are read together, in one round trip where the
            // driver can.
            let mut conflicted = Vec::new();
            for (&index, reply) in group.iter().zip(replies) {
                match reply {
                    Reply::Conflict(conflict) if conflict.needs_a_read() => {
                        conflicted.push((index, conflict));
                    }
                    reply => {
                        outcomes[index] = settle_reply(driver, kind, docs[index], reply).await?
                    }
                }
            }
            if conflicted.is_empty() {
                continue;
            }
            let read: Vec<&D::Doc> = conflicted.iter().map(|&(index, _)| docs[index]).collect();
            let stored = driver.read_conflicts(&read).await?;
            for ((index, conflict), stored) in conflicted.into_iter().zip(stored) {
                outcomes[index] = match (stored, conflict) {
                    (Some(stored), _) => settle_stopped(driver, kind, docs[index], &stored).await?,
                    (None, Conflict::Unclear { index: name } | Conflict::Other { index: name }) => {
                        Some(Err(unique_index_conflict(&docs[index].document(), name)))
                    }
                    // The holder of the id or natural key is gone since the write (deleted, or
                    // moved by `adopt`): the write goes again.
                    (None, Conflict::Key) => None,
                };
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .zip(docs)
        .map(|(outcome, doc)| outcome.unwrap_or_else(|| Err(contention(&doc.document()))))
        .collect())
}

/// The outcome a reply settles, or `None` if the document goes again.
async fn settle_reply<D: Driver>(
    driver: &D,
    kind: WriteKind,
    doc: &D::Doc,
    reply: Reply<D::Stored>,
) -> Result<Option<Result<Outcome, Error>>, Error> {
    match reply {
        Reply::Written { inserted } => Ok(Some(Ok(kind.written(inserted)))),
        Reply::Unseen => Ok(None),
        Reply::Refused(refusal) => Ok(Some(Err(refusal))),
        Reply::Stopped(stored) => settle_stopped(driver, kind, doc, &stored).await,
        Reply::Conflict(Conflict::Other { index }) => {
            Ok(Some(Err(unique_index_conflict(&doc.document(), index))))
        }
        // Read first, by `settle`.
        Reply::Conflict(Conflict::Key | Conflict::Unclear { .. }) => Ok(None),
    }
}

/// The outcome for a document the write did not replace, judged from what is stored; a
/// document another tool stored that the write may replace (or any, where the driver's writes
/// carry no guard) is written in a second step pinned to what was read. `None`: it changed
/// meanwhile, and the write goes again.
pub(crate) async fn settle_stopped<D: Driver>(
    driver: &D,
    kind: WriteKind,
    doc: &D::Doc,
    stored: &D::Stored,
) -> Result<Option<Result<Outcome, Error>>, Error> {
    match judge(driver, kind, driver.light_of(doc), stored) {
        Judged::Settled(outcome) => Ok(Some(Ok(outcome))),
        Judged::Refused(refusal) => Ok(Some(Err(refusal))),
        Judged::Replace { foreign } if foreign || !driver.guards_on_server(kind) => {
            Ok(pinned_outcome(doc, driver.write_pinned(doc, stored).await?))
        }
        // Changed between the write and what it returned: goes again.
        Judged::Replace { .. } => Ok(None),
    }
}

/// The outcome of a pinned second step's reply, or `None` if the document changed since it was
/// read and goes again. The step replaces a document under its own id and natural key, so a
/// unique index it collides with is another one.
pub(crate) fn pinned_outcome<S>(doc: &Prepared, reply: Reply<S>) -> Option<Result<Outcome, Error>> {
    match reply {
        Reply::Written { .. } => Some(Ok(Outcome::Updated)),
        Reply::Unseen | Reply::Stopped(_) | Reply::Conflict(Conflict::Key) => None,
        Reply::Conflict(Conflict::Other { index } | Conflict::Unclear { index }) => {
            Some(Err(unique_index_conflict(&doc.document(), index)))
        }
        Reply::Refused(refusal) => Some(Err(refusal)),
    }
}

/// Whether the server refused a value one document holds (another constraint, a value out of
/// range): the same document fails the same way however often it is sent.
pub(crate) fn refuses_a_document(error: &Error) -> bool {
    error
        .as_backend()
        .is_some_and(|backend| backend.refuses_document())
}

/// The refusal of a write that collides with a unique index other than the natural key's.
pub(crate) fn unique_index_conflict(document: &DocumentRef, index: String) -> Error {
    Error::new(document.clone(), ErrorKind::UniqueIndexConflict { index })
}

/// The tombstone field of `model`, or [`ErrorKind::NoTombstoneField`] for a type without one.
pub(crate) fn tombstone_field(
    model: &Model,
    document: &DocumentRef,
) -> Result<&'static crate::model::Field, Error> {
    model
        .tombstone_field()
        .ok_or_else(|| Error::new(document.clone(), ErrorKind::NoTombstoneField))
}

/// [`ErrorKind::TombstoneNotSet`] for a deletion whose marker is not set (`marked`), on every
/// store before anything is sent: it would store no marker, and a document still live would
/// read as deleted.
pub(crate) fn check_marked(
    tombstone: &Field,
    marked: bool,
    document: impl FnOnce() -> DocumentRef,
) -> Result<(), Error> {
    match marked {
        true => Ok(()),
        false => Err(Error::new(
            document(),
            ErrorKind::TombstoneNotSet {
                field: tombstone.name(),
            },
        )),
    }
}

/// The tombstone field `delete_by_id` stores `marker` in, with the marker as the store's
/// `encode` writes it, on every store refused before anything is sent:
/// [`ErrorKind::NoTombstoneField`] for a type without one, [`ErrorKind::TombstoneNotSet`] for a
/// null marker (the update would match, store null, and answer `Deleted` for a document still
/// live), and [`ErrorKind::Serialize`] for a marker the field does not hold (a string for an
/// `i64` field: MongoDB would store it, where the SQL stores cannot) or that `encode` refuses.
pub(crate) fn tombstone_for<M: serde::Serialize + ?Sized, V>(
    model: &Model,
    columns: &[crate::column::Column],
    marker: &M,
    document: &DocumentRef,
    encode: impl FnOnce(&M) -> Result<V, String>,
) -> Result<(&'static crate::model::Field, V), Error> {
    let tombstone = tombstone_field(model, document)?;
    let kind = serde_json::to_value(marker)
        .map_or(Some(crate::change::ValueKind::Structured), |value| {
            Some(crate::change::ValueKind::of_json(&value))
        });
    let marked = kind != Some(crate::change::ValueKind::Null);
    check_marked(tombstone, marked, || document.clone())?;
    let shape = columns
        .iter()
        .find(|column| column.stored_name() == tombstone.stored_name())
        .map(crate::column::Column::shape);
    let serialize_error = |message| Error::new(document.clone(), ErrorKind::Serialize { message });
    if let Some((expected, kind)) = shape
        .zip(kind)
        .and_then(|(shape, kind)| Some((crate::change::expected(shape, kind)?, kind)))
    {
        return Err(serialize_error(format!(
            "the deletion marker is {}, where `{}` holds {expected}",
            kind.shown(),
            tombstone.name()
        )));
    }
    Ok((tombstone, encode(marker).map_err(serialize_error)?))
}

/// The error of a document still contended after its attempts.
pub(crate) fn contention(document: &DocumentRef) -> Error {
    Error::new(document.clone(), ErrorKind::Contention)
}
