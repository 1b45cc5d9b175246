//! What the derive tells the runtime about a type: its collection, id scheme, and the role of
//! each field, under the names serde stores them.

use std::fmt;

use crate::error::{Error, ErrorKind};
use crate::hash::{ContentHash, HashAlgorithm};
use crate::id::{Id, IdScheme, KeyValue};
use crate::version::VersionKey;

/// A type whose writes are idempotent by construction. Derive it with `#[derive(Idempotent)]`.
pub trait Idempotent {
    /// The type's collection, id scheme and field roles.
    const MODEL: Model;

    /// The document's deterministic id, from its key fields and timestamp.
    fn id(&self) -> Result<Id, Error>;

    /// The values of the key fields, in declaration order.
    fn natural_key(&self) -> NaturalKey;

    /// The content hash: the model's hash algorithm (SHA-256 unless `hash_algorithm` says
    /// otherwise) over the canonical encoding of every stored field except the hash field and
    /// those other routes own or that do not count as content: volatile, tombstone, pushed and
    /// effect fields.
    fn content_hash(&self) -> Result<ContentHash, Error>
    where
        Self: serde::Serialize,
    {
        crate::hash::content_hash(self, &Self::MODEL)
            .map_err(|message| Error::new(self.document_ref(), ErrorKind::Serialize { message }))
    }

    /// The collection and natural key, as errors name the document.
    fn document_ref(&self) -> DocumentRef {
        DocumentRef::new(&Self::MODEL, self.natural_key())
    }

    /// A deterministic operation id for an effect of this document, for
    /// [`apply_once`](crate::mongo::Store::apply_once): the same document and purpose always give
    /// the same op id, so the effect applies once however often the document is written, and
    /// two different (document, purpose) pairs never give the same op id, so neither effect is
    /// skipped as already applied.
    ///
    /// A document's op id is `{id}:{purpose}`: the id's 26 characters, `:` and the purpose.
    ///
    /// An event type's id is assigned by its first write, so its op id comes from its
    /// collection and idempotency key instead: `{collection}:{key}:{purpose}`, where the
    /// collection and the key (its text; an integer in decimal, a boolean as `true` or
    /// `false`) are each written as they are if they are not empty and hold no `:`, and
    /// otherwise as `:`, their length in UTF-8 bytes in decimal, `:` and themselves. The key
    /// `r:bonus` with the purpose `credit` gives `payments::7:r:bonus:credit`, the key `r` with
    /// the purpose `bonus:credit` gives `payments:r:bonus:credit`. A collection of 26 Crockford
    /// base32 characters (in either case), which could be a document's id, is length-prefixed
    /// too, so an event's op id never reads as `{id}:{purpose}`. Keys and collections without
    /// `:` keep the op ids earlier versions gave them, so an event replayed after an upgrade is
    /// still recognised as applied. docs/SPEC.md (section 4) specifies the layout.
    fn op_id(&self, purpose: &str) -> Result<OpId, Error> {
        /// `text` as a part of an event's op id: as is, or length-prefixed where it could be
        /// misread (empty, holding the separator, or, for the collection, reading as an id).
        fn part(text: &str, could_read_as_id: bool) -> std::borrow::Cow<'_, str> {
            let reads_as_id = could_read_as_id
                && text.len() == 26
                && text.bytes().all(|byte| {
                    byte.is_ascii_alphanumeric()
                        && !matches!(byte.to_ascii_uppercase(), b'I' | b'L' | b'O' | b'U')
                });
            if text.is_empty() || text.contains(':') || reads_as_id {
                format!(":{}:{text}", text.len()).into()
            } else {
                text.into()
            }
        }
        if Self::MODEL.idempotency_key_field().is_some() {
            let key = idempotency_key(self)?;
            return Ok(OpId::new(format!(
                "{}:{}:{purpose}",
                part(Self::MODEL.collection(), true),
                part(&key, false)
            )));
        }
        Ok(OpId::new(format!("{}:{purpose}", self.id()?)))
    }

    /// The order key of the document's `#[idem(version)]` field, if it has one.
    fn version_key(&self) -> Option<VersionKey> {
        None
    }

    /// The order key of a stored value of the `#[idem(version)]` field, read back as its type:
    /// how a document stored without idem's order key is ordered. `None` for a type without
    /// versions, or a value that does not read as the field's type.
    #[doc(hidden)]
    fn stored_version_key(_value: &serde_json::Value) -> Option<VersionKey>
    where
        Self: Sized,
    {
        None
    }

    /// Every field serde writes, in declaration order, with the kind of value it holds: what a
    /// backend with typed columns makes its table of. The derive lists every field that is not
    /// `#[serde(skip)]`ped.
    fn stored_columns() -> Vec<crate::column::Column>
    where
        Self: Sized,
    {
        Vec::new()
    }
}

/// The step to the field or map key `key` in a path a message shows: `.name`, or `["odd key"]`
/// for a key that is not a plain name.
#[cfg(any(feature = "mongodb", feature = "postgres"))]
pub(crate) fn path_step(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_') {
        format!(".{key}")
    } else {
        format!("[{key:?}]")
    }
}

/// The `push_by` list of `model` whose Rust name is `field`, or the refusal naming it: what both
/// backends check before a push.
#[cfg(any(feature = "mongodb", feature = "postgres"))]
pub(crate) fn pushed_list(
    model: &'static Model,
    field: &'static str,
    document: &DocumentRef,
) -> Result<&'static Field, Error> {
    model
        .fields()
        .iter()
        .find(|f| f.name() == field && f.role() == Role::Pushed)
        .ok_or_else(|| Error::new(document.clone(), ErrorKind::NotAPushedField { field }))
}

/// The refusal of an item pushed to `list` whose key is a list: keys compare whole, and MongoDB
/// would match a list against each of its elements, so two items could pass for one.
#[cfg(any(feature = "mongodb", feature = "postgres"))]
pub(crate) fn item_key_is_a_list(document: DocumentRef, list: &Field) -> Error {
    Error::new(
        document,
        ErrorKind::Serialize {
            message: format!(
                "the item pushed to `{}` has a list under its key `{}`; a key is compared whole, \
             so it is a scalar or a struct, not a list",
                list.name(),
                list.item_key()
            ),
        },
    )
}

/// The refusal of an item pushed to `list` with no value under its key: absent, or null, since
/// items without a key would all fold into the first one pushed. `written` lists the stored
/// names the item writes a value under, in its order.
#[cfg(any(feature = "mongodb", feature = "postgres"))]
pub(crate) fn item_without_key<'a>(
    document: DocumentRef,
    list: &Field,
    written: impl IntoIterator<Item = &'a String>,
) -> Error {
    Error::new(
        document,
        ErrorKind::ItemWithoutKey {
            field: list.name(),
            item_key: list.item_key(),
            written: written.into_iter().cloned().collect(),
        },
    )
}

/// The idempotency key of an event, as text; an empty key is refused, since requests that lost
/// their key would all fold into the first one.
pub(crate) fn idempotency_key<T: Idempotent + ?Sized>(event: &T) -> Result<String, Error> {
    match event.natural_key().parts() {
        [(field, KeyValue::Text(text))] if text.is_empty() => Err(Error::new(
            event.document_ref(),
            ErrorKind::EmptyKey {
                field,
                stored_name: T::MODEL
                    .idempotency_key_field()
                    .map_or(field, |key| key.stored_name()),
            },
        )),
        [(_, KeyValue::Text(text))] => Ok(text.clone()),
        [(_, other)] => Ok(other.to_string()),
        _ => Err(Error::new(event.document_ref(), ErrorKind::NoDerivedId)),
    }
}

/// The stored id of every document.
pub const ID_FIELD: &str = "_id";

/// Where a stored document keeps the digests of its timestamp and frozen fields: the canonical
/// form that guards compare, so an unchanged map in another order or an array holding nulls
/// compares as the value it is.
pub const FROZEN_DIGESTS_FIELD: &str = "idemFrozen";

/// Where a stored document keeps its version's order key ([`crate::VersionKey`]).
pub const VERSION_KEY_FIELD: &str = "idemVersion";

/// Where `apply_once` records the op ids applied to a document.
pub const APPLIED_OPS_FIELD: &str = "idemAppliedOps";

/// Where a stored document records which write last replaced it: `i:` or `u:` (inserted or
/// updated) and that write's random marker. A write reads its own marker back to know what it
/// did, even where a server reports a racing insert without the document it found.
pub const WRITE_MARKER_FIELD: &str = "idemWrite";

/// Where a backend with typed columns keeps the entries of `#[serde(flatten)]` fields, whose
/// names the type does not declare.
pub const EXTRA_FIELDS_FIELD: &str = "idemExtra";

/// Where `adopt` marks a copy it has set aside under its derived id while it moves a legacy
/// document there (the old id and the natural key it will restore).
pub const ADOPTION_FIELD: &str = "idemAdopt";

/// The stored names idem writes besides `_id` and the hash field.
pub const RESERVED_FIELDS: &[&str] = &[
    FROZEN_DIGESTS_FIELD,
    VERSION_KEY_FIELD,
    APPLIED_OPS_FIELD,
    WRITE_MARKER_FIELD,
    EXTRA_FIELDS_FIELD,
    ADOPTION_FIELD,
];

/// What a field does for idem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// Identifies the document; feeds the id's hash part; frozen.
    Key,
    /// Gives the id its time part; frozen.
    Timestamp,
    /// May never change once written.
    Frozen,
    /// Stored but not part of the content hash: changing it alone writes nothing.
    Volatile,
    /// Orders replays: a write replaces the stored document only if this is strictly newer.
    Version,
    /// The deletion marker: written only by `delete`, never by an upsert, never cleared.
    Tombstone,
    /// A list owned by its push route: upserts neither write nor hash it; they start it empty.
    Pushed,
    /// Identifies a request of a type with no natural key (an event): the id is random, fixed by
    /// the first write, and a retry with the same key finds it.
    IdempotencyKey,
    /// Owned by `apply_once`: an upsert writes it when it inserts the document and never again,
    /// so a replayed upsert cannot undo an operation; not part of the content hash.
    Effect,
}

impl Role {
    /// Whether a field of this role is left out of the content hash.
    const fn is_unhashed(self) -> bool {
        matches!(
            self,
            Role::Volatile | Role::Tombstone | Role::Pushed | Role::Effect
        )
    }

    /// Whether another route than the upsert owns the stored field after the insert: the
    /// tombstone (`delete`), a pushed list (its push) and an effect field (`apply_once`).
    pub const fn is_owned_elsewhere(self) -> bool {
        matches!(self, Role::Tombstone | Role::Pushed | Role::Effect)
    }

    /// Whether a stored value of this field may never change.
    pub const fn is_frozen(self) -> bool {
        matches!(self, Role::Key | Role::Timestamp | Role::Frozen)
    }
}

/// One field with a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    name: &'static str,
    stored_name: &'static str,
    role: Role,
    item_key: &'static str,
    optional: bool,
}

impl Field {
    /// A field: its Rust name, the name serde stores it under, and its role.
    pub const fn new(name: &'static str, stored_name: &'static str, role: Role) -> Self {
        Field {
            name,
            stored_name,
            role,
            item_key: "",
            optional: false,
        }
    }

    /// A [`Role::Pushed`] list whose items are told apart by their field `item_key` (its stored
    /// name).
    pub const fn pushed(
        name: &'static str,
        stored_name: &'static str,
        item_key: &'static str,
    ) -> Self {
        Field {
            name,
            stored_name,
            role: Role::Pushed,
            item_key,
            optional: false,
        }
    }

    /// The same field, of an `Option` type: a null stored there (`None`, or the field left out)
    /// is a value never written, which a first write may set. In any other field (`()`, a unit
    /// struct, `serde_json::Value`) null is a value like any other, and a frozen one stays.
    pub const fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// Whether a null in this field means it was never written ([`Field::optional`]).
    pub const fn null_is_unwritten(&self) -> bool {
        self.optional
    }

    /// For a pushed list, the stored name of the field that identifies an item.
    pub const fn item_key(&self) -> &'static str {
        self.item_key
    }

    /// The field's name in the Rust type.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The name serde writes, after `rename` and `rename_all`.
    pub const fn stored_name(&self) -> &'static str {
        self.stored_name
    }

    /// What the field does.
    pub const fn role(&self) -> Role {
        self.role
    }
}

/// A type's metadata, generated by the derive. Backend-neutral.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    collection: &'static str,
    id_scheme: IdScheme,
    hash_field: &'static str,
    fields: &'static [Field],
    hash_algorithm: HashAlgorithm,
    /// Bit `n % 64` is set for the length `n` of every stored name `is_hashed` refuses: most
    /// fields are accepted on one test, without comparing names.
    unhashed_lengths: u64,
}

impl Model {
    /// The metadata of a type. `fields` lists the fields with a role, in declaration order.
    pub const fn new(
        collection: &'static str,
        id_scheme: IdScheme,
        hash_field: &'static str,
        fields: &'static [Field],
    ) -> Self {
        let mut unhashed_lengths = 1 << (hash_field.len() % 64);
        let mut index = 0;
        while index < fields.len() {
            if fields[index].role.is_unhashed() {
                unhashed_lengths |= 1 << (fields[index].stored_name.len() % 64);
            }
            index += 1;
        }
        Model {
            collection,
            id_scheme,
            hash_field,
            fields,
            hash_algorithm: HashAlgorithm::Sha256,
            unhashed_lengths,
        }
    }

    /// The same model hashing with `algorithm` (`#[idem(hash_algorithm = "…")]`).
    pub const fn with_hash_algorithm(mut self, algorithm: HashAlgorithm) -> Self {
        self.hash_algorithm = algorithm;
        self
    }

    /// The content-hash function.
    pub const fn hash_algorithm(&self) -> HashAlgorithm {
        self.hash_algorithm
    }

    /// The collection (or table) name.
    pub const fn collection(&self) -> &'static str {
        self.collection
    }

    /// How ids are derived.
    pub const fn id_scheme(&self) -> IdScheme {
        self.id_scheme
    }

    /// The stored field holding the content hash.
    pub const fn hash_field(&self) -> &'static str {
        self.hash_field
    }

    /// The fields with a role, in declaration order.
    pub const fn fields(&self) -> &'static [Field] {
        self.fields
    }

    /// The key fields, in declaration order.
    pub fn key_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.with_role(Role::Key)
    }

    /// The fields a unique index covers: the key fields, or an event type's idempotency key.
    pub fn natural_key_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.fields
            .iter()
            .filter(|field| matches!(field.role, Role::Key | Role::IdempotencyKey))
    }

    /// The timestamp field, if any.
    pub fn timestamp_field(&self) -> Option<&'static Field> {
        self.with_role(Role::Timestamp).next()
    }

    /// The fields whose stored value may never change: keys, timestamp and frozen fields.
    pub fn frozen_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.fields.iter().filter(|field| field.role.is_frozen())
    }

    /// Whether the stored field `stored_name` is part of the content hash: every upserted field
    /// except the volatile ones and the hash field itself.
    #[inline]
    pub fn is_hashed(&self, stored_name: &str) -> bool {
        if self.unhashed_lengths & (1 << (stored_name.len() % 64)) == 0 {
            return true;
        }
        stored_name != self.hash_field
            && !self
                .fields
                .iter()
                .any(|field| field.stored_name == stored_name && field.role.is_unhashed())
    }

    /// The version field, if any.
    pub fn version_field(&self) -> Option<&'static Field> {
        self.with_role(Role::Version).next()
    }

    /// The tombstone field, if any.
    pub fn tombstone_field(&self) -> Option<&'static Field> {
        self.with_role(Role::Tombstone).next()
    }

    /// The idempotency-key field of an event type, if any.
    pub fn idempotency_key_field(&self) -> Option<&'static Field> {
        self.with_role(Role::IdempotencyKey).next()
    }

    /// The lists owned by their push routes.
    pub fn pushed_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.with_role(Role::Pushed)
    }

    /// Whether an upsert writes the stored field `stored_name`: all but the fields other routes
    /// own (the tombstone, pushed lists, effect fields).
    pub fn is_upserted(&self, stored_name: &str) -> bool {
        !self
            .fields
            .iter()
            .any(|field| field.stored_name == stored_name && field.role.is_owned_elsewhere())
    }

    /// The fields only `apply_once` changes.
    pub fn effect_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.with_role(Role::Effect)
    }

    /// The fields whose stored value is guarded by a digest: the timestamp and the frozen
    /// fields. Keys are guarded by the id and the natural-key match themselves.
    pub fn digested_fields(&self) -> impl Iterator<Item = &'static Field> {
        self.fields
            .iter()
            .filter(|field| matches!(field.role, Role::Timestamp | Role::Frozen))
    }

    /// Whether `stored_name` is a name idem writes itself, which no document may store: `_id`,
    /// the hash field, and the fields of [`RESERVED_FIELDS`].
    pub fn is_reserved(&self, stored_name: &str) -> bool {
        stored_name == ID_FIELD
            || stored_name == self.hash_field
            || RESERVED_FIELDS.contains(&stored_name)
    }

    fn with_role(&self, role: Role) -> impl Iterator<Item = &'static Field> {
        self.fields.iter().filter(move |field| field.role == role)
    }
}

/// The key values of one document, by field name, in declaration order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NaturalKey(Vec<(&'static str, KeyValue)>);

impl NaturalKey {
    /// A natural key from `(field, value)` pairs in declaration order.
    pub fn new(parts: Vec<(&'static str, KeyValue)>) -> Self {
        NaturalKey(parts)
    }

    /// The `(field, value)` pairs.
    pub fn parts(&self) -> &[(&'static str, KeyValue)] {
        &self.0
    }
}

impl fmt::Display for NaturalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (index, (field, value)) in self.0.iter().enumerate() {
            let separator = if index == 0 { "" } else { ", " };
            write!(f, "{separator}{field}: {value}")?;
        }
        f.write_str("}")
    }
}

/// Which document an error is about: its collection and natural key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DocumentRef {
    /// The collection.
    pub collection: &'static str,
    /// The natural key; empty for errors about a whole collection or a document known by id.
    pub natural_key: NaturalKey,
    /// The id, when the call named the document by id.
    pub id: Option<Id>,
}

impl DocumentRef {
    /// The document of `model` with this natural key.
    pub fn new(model: &Model, natural_key: NaturalKey) -> Self {
        DocumentRef {
            collection: model.collection(),
            natural_key,
            id: None,
        }
    }

    /// The document of `model` stored under `id`.
    pub fn by_id(model: &Model, id: Id) -> Self {
        DocumentRef {
            id: Some(id),
            ..DocumentRef::collection(model)
        }
    }

    /// The collection of `model` as a whole.
    pub fn collection(model: &Model) -> Self {
        DocumentRef::new(model, NaturalKey::new(Vec::new()))
    }
}

impl fmt::Display for DocumentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.id, self.natural_key.0.is_empty()) {
            (Some(id), true) => write!(f, "`{}` document {id}", self.collection),
            (None, true) => write!(f, "collection `{}`", self.collection),
            (_, false) => write!(f, "`{}` {}", self.collection, self.natural_key),
        }
    }
}

/// The id of one operation applied by [`apply_once`](crate::mongo::Store::apply_once): the same
/// op id is applied to a document at most once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(String);

impl OpId {
    /// An op id from any text that identifies the operation (a request id, a ULID, or
    /// [`Idempotent::op_id`] of a triggering document).
    pub fn new(text: impl Into<String>) -> Self {
        OpId(text.into())
    }

    /// The op id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for OpId {
    fn from(text: &str) -> Self {
        OpId::new(text)
    }
}

impl From<String> for OpId {
    fn from(text: String) -> Self {
        OpId(text)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
