//! Every attribute keyword, once.

use std::fmt;

use syn::{Ident, Path};

#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Symbol(pub &'static str);

pub const IDEM: Symbol = Symbol("idem");
pub const SERDE: Symbol = Symbol("serde");

// Container attributes.
pub const COLLECTION: Symbol = Symbol("collection");
pub const CRATE: Symbol = Symbol("crate");
pub const ID_SCHEME: Symbol = Symbol("id_scheme");
pub const HASH_FIELD: Symbol = Symbol("hash_field");

// Field attributes.
pub const KEY: Symbol = Symbol("key");
pub const TIMESTAMP: Symbol = Symbol("timestamp");
pub const FROZEN: Symbol = Symbol("frozen");
pub const VOLATILE: Symbol = Symbol("volatile");

pub const HASH_ALGORITHM: Symbol = Symbol("hash_algorithm");
pub const CONTAINER_ATTRIBUTES: &[Symbol] =
    &[COLLECTION, CRATE, ID_SCHEME, HASH_FIELD, HASH_ALGORITHM];

// The content-hash algorithms `hash_algorithm` accepts.
pub const HASH_SHA256: &str = "sha256";
pub const HASH_BLAKE3: &str = "blake3";
pub const VERSION: Symbol = Symbol("version");
pub const TOMBSTONE: Symbol = Symbol("tombstone");
pub const PUSH_BY: Symbol = Symbol("push_by");
pub const IDEMPOTENCY_KEY: Symbol = Symbol("idempotency_key");
pub const EFFECT: Symbol = Symbol("effect");

// The serde attributes that change what is stored.
pub const RENAME: Symbol = Symbol("rename");
pub const RENAME_ALL: Symbol = Symbol("rename_all");
pub const SERIALIZE: Symbol = Symbol("serialize");
pub const SKIP: Symbol = Symbol("skip");
pub const SKIP_SERIALIZING: Symbol = Symbol("skip_serializing");
pub const SKIP_SERIALIZING_IF: Symbol = Symbol("skip_serializing_if");
pub const FLATTEN: Symbol = Symbol("flatten");
pub const DEFAULT: Symbol = Symbol("default");
pub const TAG: Symbol = Symbol("tag");
pub const CONTENT: Symbol = Symbol("content");
pub const UNTAGGED: Symbol = Symbol("untagged");

// The id schemes `id_scheme` accepts.
pub const SCHEME_V1: &str = "v1";
pub const SCHEME_JOINED: &str = "joined";

/// The field stored under this name is the id; idem derives it.
pub const ID_FIELD: &str = "_id";

pub const DEFAULT_HASH_FIELD: &str = "sourceHash";

/// The stored names idem writes itself besides `_id` and the hash field: the runtime's
/// `RESERVED_FIELDS`, spelled out because the runtime depends on this crate, not the reverse.
pub const RESERVED_FIELDS: &[&str] = &[
    "idemFrozen",
    "idemVersion",
    "idemAppliedOps",
    "idemWrite",
    "idemExtra",
    "idemAdopt",
    "idemNew",
];

impl PartialEq<Symbol> for Ident {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl PartialEq<Symbol> for Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<Symbol> for &Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}
