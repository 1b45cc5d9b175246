//! What the derive tells the runtime about a type: its collection, id scheme, and the role of
//! each field, under the names serde stores them.

use std::fmt;

use crate::id::IdScheme;

/// The hash function over the canonical bytes. Chosen per type with
/// `#[idem(hash_algorithm = "…")]`; recorded in the stored hash, so hashes of two algorithms
/// never compare equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum HashAlgorithm {
    /// SHA-256, stored as 64 lowercase hex digits. The default: the fastest here for documents
    /// of a few KB (the CPU's SHA extensions).
    #[default]
    Sha256,
    /// BLAKE3 (feature `blake3`), stored as `blake3:` and 64 lowercase hex digits. Several times
    /// faster than SHA-256 on documents of tens of KB, slower on small ones.
    #[cfg(feature = "blake3")]
    Blake3,
}

impl HashAlgorithm {
    /// The prefix of the stored form: none for SHA-256, so hashes stored before algorithms were
    /// selectable stay valid.
    pub(crate) const fn prefix(self) -> &'static str {
        match self {
            HashAlgorithm::Sha256 => "",
            #[cfg(feature = "blake3")]
            HashAlgorithm::Blake3 => "blake3:",
        }
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

/// Where MongoDB's upsert marks the document it is inserting: the single upsert's query asks
/// for it to be null, which every stored document matches (none holds it) and which the server
/// copies into the document it inserts, so the update tells that document from a stored one
/// holding nothing but its id and natural key. No stored document keeps it.
pub const INSERTING_FIELD: &str = "idemNew";

/// The stored names idem writes besides `_id` and the hash field.
pub const RESERVED_FIELDS: &[&str] = &[
    FROZEN_DIGESTS_FIELD,
    VERSION_KEY_FIELD,
    APPLIED_OPS_FIELD,
    WRITE_MARKER_FIELD,
    EXTRA_FIELDS_FIELD,
    ADOPTION_FIELD,
    INSERTING_FIELD,
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

/// The id of one operation applied by [`apply_once`](crate::mongo::Store::apply_once): the same
/// op id is applied to a document at most once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(String);

impl OpId {
    /// An op id from any text that identifies the operation (a request id, a ULID, or
    /// [`Idempotent::op_id`](crate::Idempotent::op_id) of a triggering document). Text holding
    /// U+0000 is refused by `apply_once` on every store
    /// ([`OpIdHoldsNul`](crate::ErrorKind::OpIdHoldsNul)): the SQL stores cannot keep it.
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
