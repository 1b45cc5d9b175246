//! The one error type of idem.
//!
//! Every refusal names the document (collection and natural key) and the field, and is raised
//! before anything is written: when you see one, the stored data is as it was.

use std::fmt;

use crate::id::Id;
use crate::model::DocumentRef;

/// Why a timestamp cannot be an id's time part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampProblem {
    /// Before 1970-01-01T00:00:00Z: a ULID's time part is unsigned.
    BeforeUnixEpoch,
    /// After 2^48 − 1 ms since the epoch (10889-08-02T05:31:50.655Z).
    AfterUlidRange,
}

impl fmt::Display for TimestampProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimestampProblem::BeforeUnixEpoch => "it is before the Unix epoch (1970-01-01)",
            TimestampProblem::AfterUlidRange => {
                "it is past the last ULID millisecond (2^48 - 1 ms, year 10889)"
            }
        })
    }
}

/// Everything that can go wrong in idem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The timestamp field cannot be an id's time part; it is never wrapped or clamped.
    #[error("{document}: timestamp field `{field}` = {value} cannot be an id: {problem}")]
    TimestampOutOfRange {
        /// The document refused.
        document: DocumentRef,
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
        "{document}: key field `{field}` = {value:?} contains ':', which the `joined` id scheme \
         cannot tell from its separator; use `id_scheme = \"v1\"` or remove the ':'"
    )]
    AmbiguousKey {
        /// The document refused.
        document: DocumentRef,
        /// The key field.
        field: &'static str,
        /// Its value.
        value: String,
    },

    /// A key value is the empty string: almost always a missing value, and every such document
    /// would get the same id.
    #[error("{document}: key field `{field}` is empty; a key must identify the document")]
    EmptyKey {
        /// The document refused.
        document: DocumentRef,
        /// The key field.
        field: &'static str,
    },

    /// The write would change a field that may never change once written: a `frozen` field, or a
    /// field that feeds the id (changing it would derive a new id and orphan the stored
    /// document). Nothing was written.
    #[error(
        "{document}: field `{field}` may not change once written (stored as {stored_id}): \
         stored {stored}, incoming {incoming}; nothing was written"
    )]
    FrozenFieldChanged {
        /// The document refused.
        document: DocumentRef,
        /// The id the document is stored under.
        stored_id: Id,
        /// The field that differs (`_id` if only the id itself differs).
        field: &'static str,
        /// The stored value, as shown.
        stored: String,
        /// The incoming value, as shown.
        incoming: String,
    },

    /// A field idem must read back is not in the serialized document under its expected name:
    /// the type's `Serialize` impl does not write it (for example a custom impl, or serde
    /// attributes the derive could not see).
    #[error("{document}: field `{field}` is not written by serde under the name {stored_name:?}")]
    FieldNotSerialized {
        /// The document refused.
        document: DocumentRef,
        /// The field.
        field: &'static str,
        /// The name idem expected serde to write.
        stored_name: &'static str,
    },

    /// The document's `Serialize` impl failed.
    #[error("{document}: could not serialize the document: {message}")]
    Serialize {
        /// The document refused.
        document: DocumentRef,
        /// What the serializer said.
        message: String,
    },

    /// The concurrent writers on this document did not let a write settle after several
    /// attempts. Nothing was lost; retrying the call is safe.
    #[error("{document}: concurrent writes kept changing the document; retrying is safe")]
    Contention {
        /// The document.
        document: DocumentRef,
    },

    /// The MongoDB driver failed; its error is kept whole, with its kind, code and labels.
    #[cfg(feature = "mongodb")]
    #[error("{document}: MongoDB: {source}")]
    Mongo {
        /// The document being written, or the collection alone for collection-wide calls.
        document: DocumentRef,
        /// The driver's error.
        source: mongodb::error::Error,
    },
}

impl Error {
    /// The document this error is about.
    pub fn document(&self) -> &DocumentRef {
        match self {
            Error::TimestampOutOfRange { document, .. }
            | Error::AmbiguousKey { document, .. }
            | Error::EmptyKey { document, .. }
            | Error::FrozenFieldChanged { document, .. }
            | Error::FieldNotSerialized { document, .. }
            | Error::Serialize { document, .. }
            | Error::Contention { document } => document,
            #[cfg(feature = "mongodb")]
            Error::Mongo { document, .. } => document,
        }
    }

    /// The driver's error, if the driver failed. Use it to decide on retries from its labels
    /// and codes.
    #[cfg(feature = "mongodb")]
    pub fn as_mongo(&self) -> Option<&mongodb::error::Error> {
        match self {
            Error::Mongo { source, .. } => Some(source),
            _ => None,
        }
    }
}
