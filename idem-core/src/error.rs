//! The one error type of idem.
//!
//! Every refusal names the document (collection and natural key) and the field, and is raised
//! before anything of that document is written: when you see one, its stored data is as it was
//! (in a batch or an `insert_new`, the other documents are written or refused on their own).

use std::fmt;
use std::sync::Arc;

use crate::document::DocumentRef;
use crate::id::Id;
pub use crate::id::TimestampProblem;

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

/// What went wrong, without the document it went wrong for (which [`Error`] holds).
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

/// A database driver's error, kept whole, with what idem read from it: which backend, the
/// server's code (a MongoDB code as decimal text, a PostgreSQL SQLSTATE) and whether the same call
/// may succeed if made again.
#[derive(Clone)]
pub struct BackendError {
    backend: &'static str,
    code: Option<String>,
    retryable: bool,
    refuses_document: bool,
    message: String,
    /// The constraint the server named, and the schema of its table.
    constraint: Option<(String, Option<String>)>,
    source: Arc<dyn std::error::Error + Send + Sync + 'static>,
}

impl BackendError {
    /// Wraps a driver error. `code` is the server's code if the server answered; `retryable`
    /// says whether the same call may succeed if made again (the connection failed, the server
    /// asked for a retry).
    pub fn new(
        backend: &'static str,
        code: Option<String>,
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError {
            backend,
            code,
            retryable,
            refuses_document: false,
            message: source.to_string(),
            constraint: None,
            source: Arc::new(source),
        }
    }

    /// The same error shown with `message` instead of the driver's own text (which for a
    /// server error may not include what the server said).
    pub fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }

    /// The same error, marked as the server's refusal of the document itself (a value its
    /// column cannot hold, a key too long for its index): sending the same document again
    /// fails the same way, so [`Error::is_refusal`] holds.
    pub fn refusing_document(mut self) -> Self {
        self.refuses_document = true;
        self
    }

    /// The same error, naming the constraint the server reported and its table's schema.
    pub fn with_constraint(mut self, name: String, schema: Option<String>) -> Self {
        self.constraint = Some((name, schema));
        self
    }

    /// The constraint or index the server named in its refusal (a unique violation's, a
    /// CHECK's), if it named one.
    pub fn constraint(&self) -> Option<&str> {
        self.constraint.as_ref().map(|(name, _)| name.as_str())
    }

    /// The schema of the table whose constraint the server named.
    pub fn constraint_schema(&self) -> Option<&str> {
        self.constraint.as_ref()?.1.as_deref()
    }

    /// Whether the server refused the document itself, not the call (see
    /// [`BackendError::refusing_document`]).
    pub fn refuses_document(&self) -> bool {
        self.refuses_document
    }

    /// The backend's name: `"MongoDB"` or `"PostgreSQL"`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The server's code, if the server answered: a MongoDB error code as decimal text, or a
    /// PostgreSQL SQLSTATE such as `"40001"`.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// Whether the same call may succeed if made again.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The driver's error, to inspect with `downcast_ref`.
    pub fn driver_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("backend", &self.backend)
            .field("code", &self.code)
            .field("retryable", &self.retryable)
            .field("refuses_document", &self.refuses_document)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.message)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Everything that can go wrong in idem: what went wrong ([`Error::kind`]) and the document it
/// went wrong for ([`Error::document`]), shown as `<document>: <what>`.
///
/// ```
/// # use idem_core::{Error, ErrorKind};
/// fn frozen_field(error: &Error) -> Option<&'static str> {
///     match error.kind() {
///         ErrorKind::FrozenFieldChanged { field, .. } => Some(*field),
///         _ => None,
///     }
/// }
/// ```
#[derive(Clone)]
pub struct Error(Box<Failure>);

/// An error's parts, boxed so that a `Result<_, Error>` stays one pointer wider than its value.
#[derive(Clone, Debug)]
struct Failure {
    document: DocumentRef,
    kind: ErrorKind,
}

impl Error {
    /// The error `kind` for `document`.
    pub fn new(document: impl Into<DocumentRef>, kind: ErrorKind) -> Self {
        Error(Box::new(Failure {
            document: document.into(),
            kind,
        }))
    }

    /// [`ErrorKind::SchemaMismatch`] for the collection or table of `model`: `problem` says what
    /// it lacks.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
    pub(crate) fn schema_mismatch(model: &crate::model::Model, problem: String) -> Self {
        Error::new(
            DocumentRef::collection(model),
            ErrorKind::SchemaMismatch {
                collection: model.collection().to_owned(),
                problem,
            },
        )
    }

    /// The document this error is about (for collection-wide calls, the collection alone).
    pub fn document(&self) -> &DocumentRef {
        &self.0.document
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// What went wrong, by value.
    pub fn into_kind(self) -> ErrorKind {
        self.0.kind
    }

    /// Whether the write was refused because of the document itself (a frozen field changed, a
    /// key or timestamp out of range, an oversized document, a reused idempotency key…).
    /// Nothing was written, and sending the same document again gives the same refusal. A failure
    /// of the database or the connection is no refusal, and neither is contention.
    pub fn is_refusal(&self) -> bool {
        match self.kind() {
            ErrorKind::Contention
            | ErrorKind::NotConfirmed { .. }
            | ErrorKind::SchemaMismatch { .. }
            | ErrorKind::Deserialize { .. }
            | ErrorKind::DuplicateNaturalKeys { .. } => false,
            ErrorKind::Backend { source } => source.refuses_document(),
            ErrorKind::WriteRefused { retryable, .. } => !retryable,
            _ => true,
        }
    }

    /// Whether the same call may succeed if made again: the server could not be reached or did
    /// not confirm the write, or concurrent writers kept changing the document. Every idem write
    /// is safe to retry.
    pub fn is_retryable(&self) -> bool {
        match self.kind() {
            ErrorKind::Contention | ErrorKind::NotConfirmed { .. } => true,
            ErrorKind::WriteRefused { retryable, .. } => *retryable,
            ErrorKind::Backend { source } => source.is_retryable(),
            _ => false,
        }
    }

    /// The database's error, if the database or its driver failed.
    pub fn as_backend(&self) -> Option<&BackendError> {
        match self.kind() {
            ErrorKind::Backend { source } => Some(source),
            _ => None,
        }
    }

    /// The MongoDB driver's error, if it failed. Use it to decide on retries from its labels and
    /// codes.
    #[cfg(feature = "mongodb")]
    pub fn as_mongo(&self) -> Option<&mongodb::error::Error> {
        self.as_backend()?.driver_error().downcast_ref()
    }

    /// The PostgreSQL driver's error, if it failed; its SQLSTATE is also in
    /// [`BackendError::code`].
    #[cfg(feature = "postgres")]
    pub fn as_postgres(&self) -> Option<&tokio_postgres::Error> {
        self.as_backend()?.driver_error().downcast_ref()
    }

    /// sqlx's error, if a call through sqlx failed (SQLite, or PostgreSQL through sqlx); its
    /// SQLSTATE or SQLite code is also in [`BackendError::code`].
    #[cfg(any(feature = "sqlite", feature = "sqlx-postgres"))]
    pub fn as_sqlx(&self) -> Option<&sqlx::Error> {
        self.as_backend()?.driver_error().downcast_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.document(), self.kind())
    }
}

/// `{:?}` reads as the message does, after the kind's name, and with the document's id where
/// the message names it by natural key alone: `FrozenFieldChanged: `posts` {slug: "hello"} (_id
/// 01J…): field …`. It is what a `main` returning `Result<_, Box<dyn Error>>` prints. `{:#?}`
/// shows the structure: the document and the kind, field by field.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("Error")
                .field("document", self.document())
                .field("kind", self.kind())
                .finish();
        }
        let document = self.document();
        write!(f, "{}: {document}", variant_name(self.kind()))?;
        if let (Some(id), false) = (&document.id, document.natural_key.parts().is_empty()) {
            write!(f, " (_id {id})")?;
        }
        write!(f, ": {}", self.kind())
    }
}

/// The name of `kind`'s variant: what its derived `Debug` writes first.
fn variant_name(kind: &ErrorKind) -> String {
    /// Keeps what is written up to the first character an identifier does not hold, then
    /// stops the writing.
    struct Name(String);

    impl fmt::Write for Name {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            match text.find(|c: char| !(c.is_alphanumeric() || c == '_')) {
                Some(end) => {
                    self.0.push_str(&text[..end]);
                    Err(fmt::Error)
                }
                None => {
                    self.0.push_str(text);
                    Ok(())
                }
            }
        }
    }

    let mut name = Name(String::new());
    // Fails on purpose, once the name is written.
    let _ = fmt::write(&mut name, format_args!("{kind:?}"));
    name.0
}

/// The source is the [`BackendError`] of [`ErrorKind::Backend`] (whose own source is the driver's
/// error), and nothing otherwise: the kind's own message is already in this error's.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::NaturalKey;
    use crate::id::KeyValue;

    fn document(natural_key: Vec<(&'static str, KeyValue)>, id: Option<Id>) -> DocumentRef {
        DocumentRef {
            collection: "posts",
            natural_key: NaturalKey::new(natural_key),
            id,
        }
    }

    #[test]
    fn debug_reads_as_the_message_after_the_kinds_name_with_the_id_where_known() {
        let id: Id = "01HF8T5N00V0E6QXCPFM1ZB4K3".parse().unwrap();
        let slug = vec![("slug", KeyValue::Text("hello".into()))];
        let frozen = ErrorKind::FrozenFieldChanged {
            stored_name: "authorId",
            stored_id: id.to_string(),
            field: "author_id",
            stored: "\"ada\"".into(),
            incoming: "\"grace\"".into(),
        };
        let by_key = Error::new(document(slug.clone(), Some(id)), frozen.clone());
        assert_eq!(
            format!("{by_key:?}"),
            format!("FrozenFieldChanged: `posts` {{slug: \"hello\"}} (_id {id}): {frozen}")
        );
        let underivable = Error::new(document(slug, None), ErrorKind::Contention);
        assert_eq!(
            format!("{underivable:?}"),
            format!("Contention: {underivable}")
        );
        let by_id = Error::new(document(Vec::new(), Some(id)), ErrorKind::NotFound);
        assert_eq!(
            format!("{by_id:?}"),
            format!("NotFound: `posts` document {id}: no such document")
        );
        let structure = format!("{by_key:#?}");
        assert!(structure.starts_with("Error {\n"), "{structure}");
        assert!(structure.contains("FrozenFieldChanged {"), "{structure}");
    }
}
