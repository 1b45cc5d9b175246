//! Idempotent database writes by construction.
//!
//! Put `#[derive(Idempotent)]` on a domain struct, mark the fields that identify a document and
//! the fields that may never change, and every write of it converges under retries, replays and
//! races: the id is derived from the document, unchanged content is not written, and a write that
//! would orphan a document is refused before anything is stored.
//!
//! ```
//! use idem_core::Idempotent;
//!
//! #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Idempotent)]
//! #[idem(collection = "posts")]
//! #[serde(rename_all = "camelCase")]
//! struct Post {
//!     #[idem(key)]
//!     slug: String,
//!     #[idem(key)]
//!     lang: String,
//!     #[idem(timestamp)]
//!     published_at: i64,
//!     title: String,
//!     body: String,
//!     #[idem(volatile)]
//!     fetched_at: i64,
//!     #[idem(frozen)]
//!     author_id: String,
//! }
//!
//! let post = Post {
//!     slug: "hello-world".into(),
//!     lang: "en".into(),
//!     published_at: 1_700_000_000_000,
//!     title: "Hello".into(),
//!     body: "First post.".into(),
//!     fetched_at: 1_700_000_100_000,
//!     author_id: "ada".into(),
//! };
//!
//! // The id is a pure function of the key fields and the timestamp…
//! let id = post.id()?;
//! assert_eq!(id, Post::derive_id("hello-world", "en", &1_700_000_000_000)?);
//! assert_eq!(id.timestamp_ms(), 1_700_000_000_000);
//!
//! // …and the content hash ignores volatile fields.
//! let refetched = Post { fetched_at: 1_800_000_000_000, ..post.clone() };
//! assert_eq!(post.content_hash()?, refetched.content_hash()?);
//! # Ok::<(), idem_core::Error>(())
//! ```
//!
//! Writing it to MongoDB (see [`mongo`]):
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, Idempotent)]
//! # #[idem(collection = "posts")]
//! # struct Post { #[idem(key)] slug: String }
//! # async fn run(post: Post) -> Result<(), Box<dyn std::error::Error>> {
//! let client = idem_core::mongodb::Client::with_uri_str("mongodb://localhost:27017/?retryWrites=false").await?;
//! let store = idem_core::mongo::Store::new(client.database("blog"));
//! Post::ensure_schema(&store).await?;
//! let outcome = post.upsert(&store).await?; // Inserted, then Unchanged on every retry
//! # Ok(()) }
//! ```
//!
//! Or to PostgreSQL (see [`postgres`], feature `postgres`), inside the caller's transaction if
//! it likes:
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn run(client: tokio_postgres::Client) -> Result<(), idem_core::Error> {
//! # #[derive(serde::Serialize, idem_core::Idempotent)]
//! # #[idem(collection = "posts")]
//! # struct Post { #[idem(key)] slug: String }
//! # let post = Post { slug: "hello-world".into() };
//! let store = idem_core::postgres::Store::new();
//! store.ensure_table::<Post, _>(&client).await?;
//! let outcome = post.upsert(&store.on(&client)).await?;
//! # Ok(()) }
//! ```
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `derive` | yes | `#[derive(Idempotent)]`, re-exported from `idem-derive` |
//! | `mongodb` | yes | the MongoDB store ([`mongo`]), `bson::DateTime` timestamps, the re-exported driver (`idem_core::mongodb`) |
//! | `postgres` | no | the PostgreSQL store (`postgres`, over tokio-postgres, re-exported as `idem_core::tokio_postgres`) |
//! | `sqlx-postgres` | no | the same PostgreSQL store over sqlx's `PgConnection` (with `postgres`, over either driver) |
//! | `sqlite` | no | the SQLite store (`sqlite`, embedded: sqlx with the bundled SQLite, re-exported as `idem_core::sqlx`) |
//! | `mysql` | no | the MySQL-family store (`mysql`, MariaDB 10.11+, through sqlx's MySQL driver) |
//! | `tracing` | no | a `tracing` span per call (collection, id, outcome, round trips, retries) and events for contention, refusals and index creation; nothing when off |
//! | `chrono` | no | `chrono::DateTime<Tz>` as an id timestamp |
//! | `time` | no | `time::OffsetDateTime` as an id timestamp |
//! | `blake3` | no | BLAKE3 as the content hash (`hash_algorithm = "blake3"`) |
//!
//! A build for SQL stores only needs neither the MongoDB driver nor BSON: `default-features =
//! false, features = ["derive", "postgres"]` (or `"sqlite"`, `"mysql"`) on the `idem-core`
//! dependency (from its repository: it is not on crates.io yet).
//! Use the drivers idem re-exports, so that your versions and idem's cannot differ.
//!
//! # Attributes
//!
//! On the struct:
//!
//! | attribute | default | what it does |
//! |---|---|---|
//! | `collection = "…"` | the type name in snake_case | the collection (or table) written to; required on a generic type, whose instantiations would otherwise share one |
//! | `id_scheme = "v1"` or `"joined"` | `"v1"` | how key values become the id's 80-bit part ([`IdScheme`]) |
//! | `hash_field = "…"` | `"sourceHash"` | the stored field holding the content hash |
//! | `hash_algorithm = "…"` | `"sha256"` | the content hash's function: `"sha256"`, or `"blake3"` with the feature `blake3` |
//! | `crate = "…"` | `::idem_core` | the path to this crate, if it is renamed or re-exported |
//!
//! On a field:
//!
//! | attribute | what it does |
//! |---|---|
//! | `key` | identifies the document: feeds the id's hash part and the unique natural-key index; frozen. At least one. The type must implement [`IdKey`] and [`StoredKey`]. |
//! | `timestamp` | gives the id its time part; frozen. At most one. The type must implement [`IdTimestamp`]. Without it the time part is zero. |
//! | `frozen` | may never change once written: a write that changes it is refused with [`ErrorKind::FrozenFieldChanged`]. |
//! | `volatile` | stored, but not part of the content hash: a change to it alone writes nothing. |
//! | `version` | orders replays: a write replaces the stored document only if this is strictly newer; an older one is [`Outcome::Stale`]. At most one. The type must implement [`OrderedVersion`]. |
//! | `tombstone` | an `Option<…>` deletion marker written only by `delete` and `delete_by_id` ([`mongo::Store::delete`], `postgres::Store::delete`); upserts never write or clear it, and a deleted document answers [`Outcome::Deleted`]. At most one. |
//! | `push_by = "…"` | on a `Vec<Item>`: a list owned by its push route, its items told apart by the named (stored) item field. Upserts neither write nor hash it; `doc.push_<field>(&store, &item)` appends once. |
//! | `idempotency_key` | instead of `key`, for an event type with no natural key: the id is random, fixed by the first write (`record`: [`mongo::Store::record`], `postgres::Store::record`); a retry with the same key finds it. |
//! | `effect` | a field only `apply_once` ([`Change`]s, on every store) changes: an upsert writes it when it inserts the document and never again; not part of the content hash. |
//!
//! Stored field names are the names serde writes: `#[serde(rename)]`, `#[serde(rename_all)]`
//! and `#[serde(skip)]` are honoured.
//!
//! # What the derive generates
//!
//! For a type `Post` with keys `slug`, `lang` and timestamp `published_at`:
//!
//! - `impl idem_core::Idempotent for Post`: the [`Model`] (collection, scheme, field roles),
//!   `id()`, `natural_key()` and `with_key_values()` (the same values, borrowed),
//!   `content_hash()`;
//! - `Post::derive_id(&slug, &lang, &published_at) -> Result<Id, Error>`: the id from raw values,
//!   keys in declaration order then the timestamp, without building a `Post`. A key argument is
//!   any [`IdKey`] value or reference (`Post::derive_id("hello", "en", &ts)` gives the same id
//!   as the `String` fields would); the timestamp is a reference to the field's type;
//! - `post.id()`, `post.content_hash()`, `post.upsert(&idem)` and
//!   `Post::ensure_schema(&idem)` as inherent methods, so no trait import is needed, where
//!   `idem` is any [`Backend`]: a MongoDB store, or a SQL store's session
//!   (`store.on(&mut connection)`);
//! - for each `push_by` list `comments`, `post.push_comments(&idem, &item)`.
//!
//! An event type (with `idempotency_key`) gets no `derive_id` or inherent `id()`: its id is
//! assigned by its first write.
//!
//! # The immutability rule
//!
//! The timestamp feeds the id but does not name the document (its keys do): a new timestamp
//! derives a new id, and writing it would leave the old document behind under the old id. idem
//! refuses such a write, and any write that changes a `frozen` field, with
//! [`ErrorKind::FrozenFieldChanged`]; nothing is written and the stored document is intact. (New
//! keys name another document, which is written beside the first.) To really move a document,
//! delete the old one and write the new one as two deliberate steps.

#![warn(missing_docs)]

pub mod audit;
mod backend;
mod backend_calls;
mod batch;
mod change;
mod column;
pub mod document;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod engine;
pub mod error;
pub mod hash;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod held_key;
pub mod id;
mod idempotent;
pub mod insert;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod intern;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod map_key;
pub mod model;
// Only a model given at run time (the `idem` command's flags) can be wrong.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub mod model_check;
pub mod model_file;
#[cfg(feature = "mongodb")]
pub mod mongo;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod outcome;
#[cfg(feature = "_postgres")]
pub mod postgres;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod push;
pub mod read;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod short_text;
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod trace;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod verdict;
pub mod version;

pub use audit::{AdoptReport, AuditProgress, AuditReport};
pub use backend::Backend;
pub use batch::BatchReport;
pub use change::Change;
pub use column::{Column, ColumnShape};
pub use document::{DocumentRef, NaturalKey};
pub use error::{BackendError, Error, ErrorKind, TimestampProblem};
pub use hash::{ContentHash, HashAlgorithm};
pub use id::{Id, IdKey, IdScheme, IdTimestamp, KeyPart, KeyValue, StoredKey};
pub use idempotent::Idempotent;
pub use insert::{InsertReport, Insertion};
pub use model::{Field, Model, OpId, Role};
pub use outcome::{Applied, Deletion, Outcome, Pushed, Recorded};
pub use read::Finding;
pub use version::{OrderedVersion, VersionKey};

/// The derive: see the crate docs for its attributes and what it generates.
#[cfg(feature = "derive")]
pub use idem_derive::Idempotent;

#[cfg(feature = "mongodb")]
pub use mongodb;
#[cfg(any(feature = "_sqlx_store", feature = "sqlx-postgres"))]
pub use sqlx;
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// How often a write starts over when concurrent writers change the document between its write
/// and its read. Each attempt is safe; contention this long is reported, not hidden.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) const MAX_ATTEMPTS: usize = 8;

/// What generated code calls. Not public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use crate::backend_calls::{FindWith, PushWith, UpsertWith};
    pub use crate::column::{NeverNull, NullableValue, Probe, ScalarShape, StructuredShape};
    pub use crate::id::{derive_id, natural_key};
    #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
    pub use crate::sql::row::{light_row_agreement, row_encoding_agreement, RowPreparation};
    pub use crate::version::{stored_version_key, ReadBackVersion};
    pub use core::future::Future;
    pub use core::marker::Send;
    pub use core::option::Option::{self, None, Some};
    pub use core::result::Result;
    pub use serde::Serialize;
    pub use serde_json::Value as JsonValue;

    use crate::id::{IdKey, IdTimestamp};
    use crate::version::{OrderedVersion, VersionKey};

    /// Where the derive requires its fields' types to play their roles (`u64: StoredKey`), each
    /// requirement once, spanned on the field's type: an impl nothing else uses, so a type that
    /// cannot play its role is one error there, and no use of the document repeats it.
    pub trait FieldTypes {}

    /// A key field's value as an [`IdKey`], found first (two auto-refs deep) when its type is
    /// one: `(&&Probe::<T>::NEW).key_of(&self.field)`. The generated code reaches its fields'
    /// values through these probes rather than through bounds, which would repeat a type's
    /// error at every use; [`FieldTypes`] reports it once.
    pub trait KeyField<T> {
        /// The value as an id key.
        fn key_of<'v>(&self, value: &'v T) -> &'v dyn IdKey;
    }

    impl<T: IdKey> KeyField<T> for &Probe<T> {
        fn key_of<'v>(&self, value: &'v T) -> &'v dyn IdKey {
            value
        }
    }

    /// A timestamp field's value as an [`IdTimestamp`], found first when its type is one.
    pub trait TimestampField<T> {
        /// The value as an id timestamp.
        fn timestamp_of<'v>(&self, value: &'v T) -> &'v dyn IdTimestamp;
    }

    impl<T: IdTimestamp> TimestampField<T> for &Probe<T> {
        fn timestamp_of<'v>(&self, value: &'v T) -> &'v dyn IdTimestamp {
            value
        }
    }

    /// A version field's order key, and a stored version's, found first when its type is a
    /// version serde reads back.
    pub trait VersionField<T> {
        /// [`OrderedVersion::version_key`].
        fn version_of(&self, value: &T) -> VersionKey;

        /// [`stored_version_key`].
        fn read_back_version(&self, value: &JsonValue) -> Option<VersionKey>;
    }

    impl<T: OrderedVersion + ReadBackVersion> VersionField<T> for &Probe<T> {
        fn version_of(&self, value: &T) -> VersionKey {
            value.version_key()
        }

        fn read_back_version(&self, value: &JsonValue) -> Option<VersionKey> {
            stored_version_key::<T>(value)
        }
    }

    /// Every other type, found last: one that cannot play its field's role. The derive states
    /// each requirement once ([`FieldTypes`], or the impls' where clause for a type naming a
    /// type parameter), so such a type is a compile error there and this never runs. Method
    /// resolution sets lifetimes aside, as `FieldTypes`' requirements (written with `'static`)
    /// do, so the two agree on every type.
    pub trait UnfitField<T> {
        /// Never called.
        fn key_of<'v>(&self, _: &'v T) -> &'v dyn IdKey {
            unreachable!("a field type unfit for its role is a compile error")
        }

        /// Never called.
        fn timestamp_of<'v>(&self, _: &'v T) -> &'v dyn IdTimestamp {
            unreachable!("a field type unfit for its role is a compile error")
        }

        /// Never called.
        fn version_of(&self, _: &T) -> VersionKey {
            unreachable!("a field type unfit for its role is a compile error")
        }

        /// Never called.
        fn read_back_version(&self, _: &JsonValue) -> Option<VersionKey> {
            unreachable!("a field type unfit for its role is a compile error")
        }
    }

    // A panic, not a `Result`: the generated code calls these only where the type plays its
    // role, which `FieldTypes` makes a compile error otherwise, so a call here is a bug in the
    // derive, and the callers (an id, a content hash) have no error of their own to give.
    impl<T> UnfitField<T> for Probe<T> {}
}

/// The README's examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples, the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/GUIDE.md")]
pub struct GuideDoctests;
