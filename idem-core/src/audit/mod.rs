//! What an audit of stored data finds before idem takes a collection (or table) over, in a form
//! every backend reports alike: counts and a few sample ids for each kind of problem, a human
//! summary (`Display`) and a serializable one (`Serialize`, for JSON).
//!
//! A backend fills the report while it streams its documents once; see
//! [`mongo::Store::audit`](crate::mongo::Store::audit).
//!
//! What a store's audit and adoption decide about a stored document (its derived id, its
//! hashes and digests, whether and where it moves, which duplicate stays) is decided here, the
//! same for every store; a store only reads its documents and writes the moves.

mod finding;
mod report;

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod adoption;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod derivation;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod digests;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod duplicates;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod fields;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod hash_check;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod judged;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod pass;

pub use finding::{
    AuditProgress, DuplicateKey, Duplicates, Finding, Sample, ShownKey, ShownValue, UnknownField,
    UnknownReason, SAMPLES_PER_KIND,
};
pub use report::{AdoptReport, AuditReport};

#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use adoption::{check_derived_ids, ModelSample, RunLimits};
#[cfg(feature = "mongodb")]
pub(crate) use adoption::{index_after_moves, kept_of_group, leave_duplicates, Halt, MoveEnd};
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use derivation::derive_from_stored;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use digests::DigestReading;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use duplicates::StoredKey;
#[cfg(feature = "mongodb")]
pub(crate) use duplicates::{kept_by_value, KeyValue, Ordered};
#[cfg(feature = "mongodb")]
pub(crate) use fields::{hashed_fields, FieldsSeen};
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use fields::{is_model_field, note_unknown};
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use hash_check::HashDiagnosis;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use judged::{judge, Judged, StoredDocument, TypedReading};
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use pass::AuditPass;
