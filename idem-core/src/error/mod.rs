//! The one error type of idem.
//!
//! Every refusal names the document (collection and natural key) and the field, and is raised
//! before anything of that document is written: when you see one, its stored data is as it was
//! (in a batch or an `insert_new`, the other documents are written or refused on their own).

mod backend;
mod kind;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::document::DocumentRef;
pub use crate::id::TimestampProblem;
pub use backend::BackendError;
pub use kind::ErrorKind;

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
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
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
    #[cfg(any(feature = "_sqlx_store", feature = "sqlx-postgres"))]
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
