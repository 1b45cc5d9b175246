//! What went wrong: each kind of error, with its message.

use super::BackendError;
use crate::id::{Id, TimestampProblem};

/// A field as an error names it: its Rust name, and the name serde stores it under when that
/// differs (`published_at` (stored as `publishedAt`)), so the message leads to the struct and to
/// the stored document alike.
fn shown_field(field: &str, stored_name: &str) -> String {
    if field == stored_name {
        format!("`{field}`")
    } else {
        format!("`{field}` (stored as `{stored_name}`)")
    }
}

/// Stored names as a message lists them.
fn shown_names(names: &[String]) -> String {
    if names.is_empty() {
        return "no field at all (it is not a struct or map)".to_owned();
    }
    let names: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    names.join(", ")
}

/// What went wrong, without the document it went wrong for (which [`Error`](super::Error) holds).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The timestamp field cannot be an id's time part; it is never wrapped or clamped.
    #[error(
        "timestamp field {} = {value} cannot be an id: {problem}",
        shown_field(.field, .stored_name)
    )]
    TimestampOutOfRange {
        /// The timestamp field's stored name (what serde writes).
        stored_name: &'static str,
        /// The timestamp field.
        field: &'static str,
        /// The value, as shown.
        value: String,
        /// What is wrong with it.
        problem: TimestampProblem,
    },

    /// A key value contains the separator of the `joined` id scheme, so two different keys could
    /// get the same id.
    #[error(
        "key field {} = {value:?} contains ':', which the `joined` id scheme \
         cannot tell from its separator; use `id_scheme = \"v1\"` or remove the ':'",
        shown_field(.field, .stored_name)
    )]
    AmbiguousKey {
        /// The key field's stored name (what serde writes).
        stored_name: &'static str,
        /// The key field.
        field: &'static str,
        /// Its value.
        value: String,
    },

    /// A natural key given to `find` does not name the type's key fields, in declaration order,
    /// each with a value of its field's kind (text, an integer, a boolean). Nothing was read.
    #[error("the natural key does not fit the type: {problem}")]
    KeyMismatch {
        /// What is wrong, and the fields the type's key has.
        problem: String,
    },

    /// A key value is the empty string: almost always a missing value, and every such document
    /// would get the same id.
    #[error(
        "key field {} is empty; a key must identify the document",
        shown_field(.field, .stored_name)
    )]
    EmptyKey {
        /// The key field's stored name (what serde writes).
        stored_name: &'static str,
        /// The key field.
        field: &'static str,
    },

    /// The write would change a field that may never change once written: a `frozen` field, or a
    /// field that feeds the id (changing it would derive a new id and orphan the stored
    /// document). Nothing was written.
    #[error(
        "field {} may not change once written (the document stored under _id {stored_id}): \
         stored {stored}, incoming {incoming}; nothing was written",
        shown_field(.field, .stored_name)
    )]
    FrozenFieldChanged {
        /// The field's stored name (what serde writes).
        stored_name: &'static str,
        /// The `_id` the stored document has, as text (an ObjectId's hex for a document another
        /// tool wrote).
        stored_id: String,
        /// The field that differs.
        field: &'static str,
        /// The stored value, as shown; followed, in parentheses, by a note where the guard
        /// refused a value that reads back as the incoming one (its stored digest is not this
        /// value's).
        stored: String,
        /// The incoming value, as shown.
        incoming: String,
    },

    /// The document's natural key is stored under another id than the one it derives, and no
    /// stored field says why (the timestamp reads back the same): another tool stored it under
    /// its own id (an ObjectId, say), the type's id scheme changed, or the timestamp's stored
    /// form is coarser than the id's milliseconds (a time stored in seconds) and the
    /// milliseconds moved. Writing it would fork the natural key into a second document.
    /// Nothing was written; `adopt` moves documents another tool stored to their derived ids.
    #[error(
        "its natural key is stored under _id {stored_id}, not under the id it \
         derives, {derived_id} (another tool's id, an id scheme that changed, or a timestamp \
         stored coarser than milliseconds whose milliseconds moved); nothing was written"
    )]
    IdChanged {
        /// The `_id` the stored document has, as text (an ObjectId's hex for a document another
        /// tool wrote).
        stored_id: String,
        /// The id the incoming document derives.
        derived_id: String,
    },

    /// A field idem must read back is not in the serialized document under its expected name:
    /// the type's `Serialize` impl does not write it (for example a custom impl, or serde
    /// attributes the derive could not see).
    #[error("field `{field}` is not written by serde under the name {stored_name:?}")]
    FieldNotSerialized {
        /// The field.
        field: &'static str,
        /// The name idem expected serde to write.
        stored_name: &'static str,
    },

    /// The document's `Serialize` impl failed.
    #[error("could not serialize the document: {message}")]
    Serialize {
        /// What the serializer said.
        message: String,
    },

    /// A stored document did not deserialize into the type it was read as (written by other
    /// code, or by an older version of the type). Nothing was changed.
    #[error("the stored document does not read as the type: {message}")]
    Deserialize {
        /// What the deserializer said.
        message: String,
    },

    /// The concurrent writers on this document did not let a write settle after several
    /// attempts. Nothing was lost; retrying the call is safe.
    #[error("concurrent writes kept changing the document; retrying is safe")]
    Contention,

    /// An event's idempotency key was used before with another payload: a retry must send the
    /// same request. Nothing was written.
    #[error(
        "idempotency key `{field}` was first used for another payload (stored under _id \
         {stored_id}); nothing was written"
    )]
    IdempotencyKeyReused {
        /// The idempotency-key field.
        field: &'static str,
        /// The id of the event first recorded under this key.
        stored_id: Id,
    },

    /// No document is stored under this id.
    #[error("no such document")]
    NotFound,

    /// `delete` needs the tombstone field set to the marker to store.
    #[error("tombstone field `{field}` is None; set it to the deletion marker to store")]
    TombstoneNotSet {
        /// The tombstone field.
        field: &'static str,
    },

    /// `delete` was called for a type without a `#[idem(tombstone)]` field.
    #[error("the type has no `#[idem(tombstone)]` field to mark deletions with")]
    NoTombstoneField,

    /// A push named a field that is not a `#[idem(push_by = "…")]` list of the type.
    #[error("`{field}` is not a `#[idem(push_by = \"…\")]` field")]
    NotAPushedField {
        /// The field named.
        field: &'static str,
    },

    /// An item pushed to a unique list lacks the field that tells items apart: the key was
    /// `None`, or the item writes it under another name (a `rename_all` on the item type that
    /// `push_by` does not spell), which `written` shows.
    #[error(
        "the item pushed to `{field}` has no `{item_key}` field to tell it apart; \
         it writes {}",
        shown_names(.written)
    )]
    ItemWithoutKey {
        /// The pushed list.
        field: &'static str,
        /// The stored name of the item key.
        item_key: &'static str,
        /// The stored names the item writes (with a value other than null), in its order; empty
        /// for an item that is not a struct or map.
        written: Vec<String>,
    },

    /// The stored document would exceed the server's size limit; refused before sending.
    #[error("the stored document would be {size} bytes, over the server's limit of {limit}")]
    DocumentTooLarge {
        /// Its BSON size in bytes.
        size: usize,
        /// The server's `maxBsonObjectSize`.
        limit: usize,
    },

    /// The document writes a stored name that idem writes itself (`_id`, the hash field, or a
    /// reserved `idem…` field), for example through a `#[serde(flatten)]` map. Nothing was
    /// written.
    #[error(
        "the document writes a field named {stored_name:?}, which idem writes itself; \
         rename the entry; nothing was written"
    )]
    ReservedName {
        /// The stored name.
        stored_name: String,
    },

    /// The write collides with another stored document on a unique index that is not idem's
    /// natural-key index (a unique `email`, or an index left by an older key set). Retrying gives
    /// the same answer. Nothing was written.
    #[error(
        "another stored document has the same value in unique index `{index}`; \
         nothing was written"
    )]
    UniqueIndexConflict {
        /// The index, as the server named it.
        index: String,
    },

    /// `record`: the event's idempotency key is already stored, under an `_id` that idem did not
    /// assign (a document another tool wrote). Nothing was written. An upsert, a delete or an
    /// `insert_new` that meets a natural key stored under another id reports
    /// [`ErrorKind::IdChanged`] instead (or [`ErrorKind::FrozenFieldChanged`] on the timestamp, if that
    /// moved).
    #[error(
        "the key is already stored under _id {stored_id}, which idem did not assign; \
         nothing was written"
    )]
    ForeignId {
        /// The stored `_id`, as text.
        stored_id: String,
    },

    /// `apply_once` was given an update that touches a field it does not own: only
    /// `#[idem(effect)]` fields are changed by operations. Nothing was written.
    #[error(
        "the update touches `{path}`, which is not an `#[idem(effect)]` field of the \
         type; operations change only effect fields; nothing was written"
    )]
    NotAnEffectField {
        /// The path in the update.
        path: String,
    },

    /// `apply_once` would add past the range of a 64-bit integer: the stored value plus the
    /// amount does not fit the integer field. Refused by every backend (where SQLite alone would
    /// have made the sum a float); the operation is not recorded, and nothing was written.
    #[error("adding to `{field}` would leave the range of a 64-bit integer; nothing was written")]
    AddOutOfRange {
        /// The integer field (its stored name); of an operation adding to several, the first,
        /// where the backend does not say which.
        field: String,
    },

    /// `apply_once` was given an op id holding the character U+0000, which the SQL stores cannot
    /// keep in text (PostgreSQL refuses it, SQLite's text functions end at it): refused on every
    /// store alike, before anything is sent. Nothing was written.
    #[error(
        "the op id {op_id:?} holds the character U+0000, which the SQL stores cannot keep in \
         text; give the operation an op id without it; nothing was written"
    )]
    OpIdHoldsNul {
        /// The op id, as given.
        op_id: String,
    },

    /// Event types (with an `idempotency_key` and no `key`) get a random id at their first write:
    /// there is none to derive. `Store::record` returns it.
    #[error("an event's id is assigned by its first write, not derived")]
    NoDerivedId,

    /// The server refused one write of a batch with an error of its own.
    #[error("the server refused the write: {message} (code {code})")]
    WriteRefused {
        /// The server's error code.
        code: i32,
        /// The server's message.
        message: String,
        /// Whether the server's code says the same write may succeed if sent again.
        retryable: bool,
    },

    /// The server applied a batch but did not confirm it (a write-concern error): the writes may
    /// or may not have landed. Retrying the same call is safe and converges.
    #[error("the server did not confirm the write ({message}, code {code}); retrying is safe")]
    NotConfirmed {
        /// The server's error code.
        code: i32,
        /// The server's message.
        message: String,
    },

    /// The table or collection does not match the model (a column missing or of another type,
    /// no unique constraint or index on exactly the natural key): found before any write, or
    /// by the server refusing a statement for the table's shape. Nothing was written.
    #[error("`{collection}` does not match the model: {problem}")]
    SchemaMismatch {
        /// The table or collection.
        collection: String,
        /// What is wrong, naming the column or index.
        problem: String,
    },

    /// The unique natural-key index cannot be built: documents already stored share a natural
    /// key. No document being written is at fault, and idem writes nothing to the collection
    /// until the duplicates are gone; an audit lists them all.
    #[error(
        "the unique index `{index}` cannot be built: more than one stored document \
         has the natural key {duplicate_key}; run an audit (`idem audit`, or `Store::audit`) to \
         list every duplicate, then merge or remove them (`Store::adopt` can, by a rule you give)"
    )]
    DuplicateNaturalKeys {
        /// The index, as idem names it.
        index: String,
        /// One natural key held by more than one document, as the server showed it (or as a
        /// read of the collection found it).
        duplicate_key: String,
    },

    /// The database or its driver failed; the driver's error is kept whole as the source.
    #[error("{source}")]
    Backend {
        /// The driver's error, with the backend's code and whether retrying may help.
        source: BackendError,
    },
}
