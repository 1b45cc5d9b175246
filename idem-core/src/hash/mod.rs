//! The content hash: SHA-256 over a canonical encoding of a value, streamed from its `Serialize`
//! impl with no intermediate document.
//!
//! The encoding is specified in `docs/SPEC.md` with golden vectors. Each value is a tag byte and
//! a payload:
//!
//! | value | encoding |
//! |---|---|
//! | `None`, `()`, unit struct | `0x00` |
//! | `bool` | `0x01`, then `0x00` or `0x01` |
//! | integer that fits `i128` | `0x02`, then 16 bytes big-endian two's complement |
//! | unsigned integer above `i128::MAX` | `0x03`, then 16 bytes big-endian |
//! | float (`f32` widened to `f64`) | `0x04`, then the 8 bytes of the IEEE 754 bits, big-endian; every NaN is `0x7ff8000000000000` and `-0.0` is `0.0` |
//! | text (`str`, `char`) | `0x05`, then the byte length as u64 big-endian, then UTF-8 |
//! | bytes | `0x06`, then the length as u64 big-endian, then the bytes |
//! | sequence, tuple, tuple struct | `0x07`, the items, `0x08` |
//! | map | `0x09`, the entries (key then value) sorted by the bytes of the key's encoding, `0x0a` |
//! | struct | `0x0b`, for each field in the order serde writes them: the name as text, then the value; `0x0c` |
//! | unit variant | `0x0d`, then the variant name as text |
//! | newtype, tuple or struct variant | `0x0e`, the variant name as text, then the value, sequence or struct |
//!
//! `Some(v)` and newtype structs encode as `v`. Integers of every width encode alike, so widening
//! a field from `i32` to `i64` keeps the hashes. Map entries are sorted, so a `HashMap` hashes the
//! same in every insertion order and on every run. Struct fields keep serde's order: reordering
//! the fields of a type changes its hashes, and the next ingest rewrites each document once.
//!
//! A document's content hash is the hash of its top-level value with the volatile fields and the
//! hash field left out.

mod compound;
mod encoder;
// The stores' guard digest, which a build without a store does not make.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
mod frozen;
mod sink;
mod tags;
#[cfg(all(
    test,
    any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")
))]
mod tests;
mod value;

use serde::Serialize;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
use sha2::Digest;
use sha2::Sha256;

use crate::model::Model;
use encoder::Encoder;
#[cfg(feature = "blake3")]
use sink::BLAKE3_BATCH;
use sink::{HashSink, Hasher32, SHA256_BATCH};

pub use crate::model::HashAlgorithm;
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) use frozen::frozen_digest;
pub use value::{ContentHash, ContentHashParseError};

/// The content hash of a document of `model`: its hashed fields only, with the model's
/// algorithm.
pub fn content_hash<T: Serialize + ?Sized>(
    value: &T,
    model: &Model,
) -> Result<ContentHash, String> {
    match model.hash_algorithm() {
        HashAlgorithm::Sha256 => hash_with::<Sha256, SHA256_BATCH, T>(value, Some(model)),
        #[cfg(feature = "blake3")]
        HashAlgorithm::Blake3 => hash_with::<blake3::Hasher, BLAKE3_BATCH, T>(value, Some(model)),
    }
}

/// `BATCH` is how many bytes the sink gathers before each call to the hasher.
fn hash_with<H: Hasher32, const BATCH: usize, T: Serialize + ?Sized>(
    value: &T,
    top_level: Option<&Model>,
) -> Result<ContentHash, String> {
    let mut sink = HashSink::<H, BATCH>::new();
    value.serialize(Encoder {
        sink: &mut sink,
        top_level,
        unique_names: top_level.is_some(),
    })?;
    Ok(sink.finish())
}

/// The canonical bytes that [`content_hash`] feeds to the model's hash function, for checking
/// and benchmarking.
pub fn canonical_document_bytes<T: Serialize + ?Sized>(
    value: &T,
    model: &Model,
) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    value.serialize(Encoder {
        sink: &mut bytes,
        top_level: Some(model),
        unique_names: true,
    })?;
    Ok(bytes)
}

/// The canonical encoding of any value, every field included.
pub fn canonical_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    value.serialize(Encoder {
        sink: &mut bytes,
        top_level: None,
        unique_names: false,
    })?;
    Ok(bytes)
}

/// The content hash of a document read as its stored fields, for a model given at run time:
/// the document is encoded as the struct it was serialized from (its hashed fields in the
/// type's order, as `docs/SPEC.md` specifies a struct) and each value as the canonical encoding
/// of its stored form. The type's order is `field_order`; fields it does not list follow in
/// stored order. Fields idem writes itself (the id, the hash, [`RESERVED_FIELDS`]) and volatile
/// ones are left out.
///
/// It equals the hash of the type's value when every stored value reads back as what the type
/// serialized. A nested struct or an enum does not: the type encodes a struct, where the stored
/// object reads as a map.
///
/// [`RESERVED_FIELDS`]: crate::model::RESERVED_FIELDS
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn stored_fields_hash<V: Serialize>(
    model: &Model,
    field_order: &[&str],
    stored: &[(&str, V)],
) -> Result<ContentHash, String> {
    // The tags of a struct and of text in the canonical encoding (docs/SPEC.md).
    const STRUCT_START: u8 = 0x0b;
    const STRUCT_END: u8 = 0x0c;
    const TEXT: u8 = 0x05;
    let listed = field_order
        .iter()
        .filter_map(|name| stored.iter().find(|(stored, _)| stored == name));
    let unlisted = stored
        .iter()
        .filter(|(name, _)| !field_order.contains(name));
    let mut bytes = vec![STRUCT_START];
    for (name, value) in listed.chain(unlisted) {
        if !is_hashed_stored_field(model, name) {
            continue;
        }
        bytes.push(TEXT);
        bytes.extend_from_slice(&(name.len() as u64).to_be_bytes());
        bytes.extend_from_slice(name.as_bytes());
        value.serialize(Encoder {
            sink: &mut bytes,
            top_level: None,
            unique_names: false,
        })?;
    }
    bytes.push(STRUCT_END);
    Ok(match model.hash_algorithm() {
        HashAlgorithm::Sha256 => ContentHash::from_bytes(Sha256::digest(&bytes).into()),
        #[cfg(feature = "blake3")]
        HashAlgorithm::Blake3 => {
            ContentHash::from_parts(HashAlgorithm::Blake3, blake3::hash(&bytes).into())
        }
    })
}

/// Whether the stored field `name` is in the content hash: not a field idem writes itself (the
/// id, the hash, [`RESERVED_FIELDS`](crate::model::RESERVED_FIELDS)), nor a volatile one.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn is_hashed_stored_field(model: &Model, name: &str) -> bool {
    use crate::model::{ID_FIELD, RESERVED_FIELDS};
    name != ID_FIELD && !RESERVED_FIELDS.contains(&name) && model.is_hashed(name)
}

/// SHA-256 over the canonical encoding of any value, every field included.
pub fn hash_value<T: Serialize + ?Sized>(value: &T) -> Result<ContentHash, String> {
    hash_with::<Sha256, SHA256_BATCH, T>(value, None)
}

/// The digest a guard compares for a stored value: [`hash_value`] in hex, in whose encoding maps
/// compare whatever their order; `None` for a null value (`is_null`), a field never written.
/// Every backend's guards and judgements use this one function.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn guard_digest<T: Serialize + ?Sized>(
    value: &T,
    is_null: bool,
) -> Result<Option<crate::short_text::ShortText>, String> {
    if is_null {
        return Ok(None);
    }
    hash_value(value).map(|hash| Some(hash.to_short_text()))
}
