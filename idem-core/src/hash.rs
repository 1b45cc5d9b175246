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

use std::fmt;
use std::str::FromStr;

use serde::ser::{self, Serialize};
use sha2::{Digest, Sha256};

use crate::model::Model;

pub use crate::model::HashAlgorithm;

/// A content hash, stored as 64 lowercase hex digits (SHA-256) or `blake3:` and 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash {
    algorithm: HashAlgorithm,
    bytes: [u8; 32],
}

impl ContentHash {
    /// A SHA-256 hash from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        ContentHash {
            algorithm: HashAlgorithm::Sha256,
            bytes,
        }
    }

    /// A hash of `algorithm` from its 32 bytes.
    pub const fn from_parts(algorithm: HashAlgorithm, bytes: [u8; 32]) -> Self {
        ContentHash { algorithm, bytes }
    }

    /// The 32 bytes of the hash.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// The hash function that made it.
    pub const fn algorithm(&self) -> HashAlgorithm {
        self.algorithm
    }

    /// The stored form.
    pub fn to_hex(&self) -> String {
        let digits = hex_digits(&self.bytes);
        [self.algorithm.prefix(), as_text(&digits)].concat()
    }

    /// The stored form, held inline ([`ShortText`](crate::short_text::ShortText)): what a
    /// prepared document carries.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
    pub(crate) fn to_short_text(self) -> crate::short_text::ShortText {
        short_lower_hex(self.algorithm.prefix(), &self.bytes)
    }
}

/// The 64 lowercase hex digits of 32 bytes, by a table: formatting each byte with `{:02x}` was a
/// measurable part of preparing a batch (one hash and several digests per document).
fn hex_digits(bytes: &[u8; 32]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = [0u8; 64];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    hex
}

/// [`hex_digits`] as text (they are ASCII, so the check cannot fail).
fn as_text(digits: &[u8; 64]) -> &str {
    std::str::from_utf8(digits).unwrap_or_default()
}

/// `prefix` and the 64 lowercase hex digits of `bytes`, held inline.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn short_lower_hex(prefix: &str, bytes: &[u8; 32]) -> crate::short_text::ShortText {
    crate::short_text::ShortText::new(&[prefix, as_text(&hex_digits(bytes))])
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.algorithm.prefix())?;
        f.write_str(as_text(&hex_digits(&self.bytes)))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

/// The text is not a stored content hash.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a content hash is 64 hex digits, after `blake3:` for BLAKE3")]
pub struct ContentHashParseError;

impl FromStr for ContentHash {
    type Err = ContentHashParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        #[cfg(feature = "blake3")]
        if let Some(hex) = text.strip_prefix(HashAlgorithm::Blake3.prefix()) {
            let sha = ContentHash::from_str(hex)?;
            return Ok(ContentHash::from_parts(HashAlgorithm::Blake3, sha.bytes));
        }
        bytes_of_hex(text)
            .map(ContentHash::from_bytes)
            .ok_or(ContentHashParseError)
    }
}

/// The 32 bytes written as `hex`, 64 hex digits of either case; `None` for any other text.
fn bytes_of_hex(hex: &str) -> Option<[u8; 32]> {
    let digit = |byte: u8| {
        char::from(byte)
            .to_digit(16)
            .and_then(|value| u8::try_from(value).ok())
    };
    if hex.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

impl Serialize for ContentHash {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

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
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
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
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
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
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
pub(crate) fn guard_digest<T: Serialize + ?Sized>(
    value: &T,
    is_null: bool,
) -> Result<Option<crate::short_text::ShortText>, String> {
    if is_null {
        return Ok(None);
    }
    hash_value(value).map(|hash| Some(hash.to_short_text()))
}

/// Four SHA-256 blocks: one call to the hasher for a document of a few hundred bytes. Smaller
/// batches measured slower (the `content_hash` bench): each call has a fixed cost.
const SHA256_BATCH: usize = 256;
/// Sixteen BLAKE3 chunks: BLAKE3 hashes the chunks it is given together in parallel (SIMD), and
/// one chunk at a time measured 2.8× slower than hashing the whole encoding at once.
#[cfg(feature = "blake3")]
const BLAKE3_BATCH: usize = 16 << 10;

/// A 256-bit hash function the sink can feed.
trait Hasher32 {
    const ALGORITHM: HashAlgorithm;
    fn new() -> Self;
    fn update(&mut self, bytes: &[u8]);
    fn finish(&mut self) -> [u8; 32];
}

impl Hasher32 for Sha256 {
    const ALGORITHM: HashAlgorithm = HashAlgorithm::Sha256;
    #[inline]
    fn new() -> Self {
        Digest::new()
    }
    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        Digest::update(self, bytes);
    }
    #[inline]
    fn finish(&mut self) -> [u8; 32] {
        self.finalize_reset().into()
    }
}

#[cfg(feature = "blake3")]
impl Hasher32 for blake3::Hasher {
    const ALGORITHM: HashAlgorithm = HashAlgorithm::Blake3;
    #[inline]
    fn new() -> Self {
        blake3::Hasher::new()
    }
    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        blake3::Hasher::update(self, bytes);
    }
    #[inline]
    fn finish(&mut self) -> [u8; 32] {
        blake3::Hasher::finalize(self).into()
    }
}

const NULL: u8 = 0x00;
const BOOL: u8 = 0x01;
const INTEGER: u8 = 0x02;
const LARGE_UNSIGNED: u8 = 0x03;
const FLOAT: u8 = 0x04;
const TEXT: u8 = 0x05;
const BYTES: u8 = 0x06;
const SEQ_START: u8 = 0x07;
const SEQ_END: u8 = 0x08;
const MAP_START: u8 = 0x09;
const MAP_END: u8 = 0x0a;
const STRUCT_START: u8 = 0x0b;
const STRUCT_END: u8 = 0x0c;
const UNIT_VARIANT: u8 = 0x0d;
const VARIANT: u8 = 0x0e;

/// The bits every NaN hashes as.
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// Where canonical bytes go: a hasher, or a buffer while map entries wait to be sorted.
trait Sink {
    fn write(&mut self, bytes: &[u8]);

    /// A tag, a length and that many bytes: text, bytes and field names. One call, so a sink
    /// can check its room once.
    #[inline]
    fn write_tagged(&mut self, tag: u8, payload: &[u8]) {
        self.write(&tagged_header(tag, payload.len()));
        self.write(payload);
    }

    /// An integer: its tag and 16 big-endian bytes.
    #[inline]
    fn write_integer(&mut self, value: i128) {
        self.write(&[INTEGER]);
        self.write(&value.to_be_bytes());
    }
}

/// `source` into `target`, of the same length. Field names and most values are a few bytes
/// long, for which a call to `memcpy` costs more than the copy: up to 32 bytes, two overlapping
/// fixed-size copies do it inline.
#[inline(always)]
fn copy_short(target: &mut [u8], source: &[u8]) {
    let len = source.len();
    match len {
        0 => {}
        1..=3 => {
            target[0] = source[0];
            target[len / 2] = source[len / 2];
            target[len - 1] = source[len - 1];
        }
        4..=7 => {
            target[..4].copy_from_slice(&source[..4]);
            target[len - 4..].copy_from_slice(&source[len - 4..]);
        }
        8..=16 => {
            target[..8].copy_from_slice(&source[..8]);
            target[len - 8..].copy_from_slice(&source[len - 8..]);
        }
        17..=32 => {
            target[..16].copy_from_slice(&source[..16]);
            target[len - 16..].copy_from_slice(&source[len - 16..]);
        }
        _ => target.copy_from_slice(source),
    }
}

/// The tag and the big-endian u64 length that open a text or bytes value.
#[inline(always)]
fn tagged_header(tag: u8, len: usize) -> [u8; 9] {
    let mut header = [tag; 9];
    header[1..].copy_from_slice(&(len as u64).to_be_bytes());
    header
}

impl Sink for Vec<u8> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// The hasher behind a buffer of `BATCH` bytes. The encoding makes many writes of a few bytes;
/// batching them keeps the hasher's per-call cost off the profile. The hasher is given whole
/// buffers until the last, so it never copies into its own, and the whole batches of a long
/// value are hashed where they lie.
struct HashSink<H, const BATCH: usize> {
    hasher: H,
    buffer: [u8; BATCH],
    /// Bytes in `buffer`, always below `BATCH`.
    len: usize,
}

impl<H: Hasher32, const BATCH: usize> HashSink<H, BATCH> {
    #[inline]
    fn new() -> Self {
        HashSink {
            hasher: H::new(),
            buffer: [0; BATCH],
            len: 0,
        }
    }

    #[inline]
    fn finish(&mut self) -> ContentHash {
        self.hasher.update(&self.buffer[..self.len]);
        ContentHash::from_parts(H::ALGORITHM, self.hasher.finish())
    }

    /// `bytes` fill the buffer: hash it, hash the whole batches of the rest where they lie, and
    /// keep the tail.
    #[inline(never)]
    fn spill(&mut self, bytes: &[u8]) {
        let (head, rest) = bytes.split_at(BATCH - self.len);
        self.buffer[self.len..].copy_from_slice(head);
        self.hasher.update(&self.buffer);
        let whole = rest.len() - rest.len() % BATCH;
        if whole > 0 {
            self.hasher.update(&rest[..whole]);
        }
        let tail = &rest[whole..];
        self.buffer[..tail.len()].copy_from_slice(tail);
        self.len = tail.len();
    }
}

impl<H: Hasher32, const BATCH: usize> Sink for HashSink<H, BATCH> {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end < BATCH {
            self.buffer[self.len..end].copy_from_slice(bytes);
            self.len = end;
        } else {
            self.spill(bytes);
        }
    }

    #[inline(always)]
    fn write_tagged(&mut self, tag: u8, payload: &[u8]) {
        let start = self.len;
        let end = start + 9 + payload.len();
        if end < BATCH {
            self.buffer[start..start + 9].copy_from_slice(&tagged_header(tag, payload.len()));
            copy_short(&mut self.buffer[start + 9..end], payload);
            self.len = end;
        } else {
            self.write(&tagged_header(tag, payload.len()));
            self.write(payload);
        }
    }

    #[inline(always)]
    fn write_integer(&mut self, value: i128) {
        let start = self.len;
        if start + 17 < BATCH {
            // Written in place: assembling the 17 bytes on the stack first costs a store
            // forwarding stall on every integer.
            self.buffer[start] = INTEGER;
            self.buffer[start + 1..start + 9]
                .copy_from_slice(&((value >> 64) as u64).to_be_bytes());
            self.buffer[start + 9..start + 17].copy_from_slice(&(value as u64).to_be_bytes());
            self.len = start + 17;
        } else {
            self.write(&[INTEGER]);
            self.write(&value.to_be_bytes());
        }
    }
}

/// An error raised by a value's own `Serialize` impl. A `Box<str>`, so every `Result` the
/// encoder returns fits two registers.
#[derive(Debug)]
struct EncodeError(Box<str>);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

impl ser::Error for EncodeError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        EncodeError(message.to_string().into_boxed_str())
    }
}

impl From<EncodeError> for String {
    fn from(error: EncodeError) -> String {
        error.0.into_string()
    }
}

/// The canonical serializer. `top_level` is set for the document itself, whose volatile fields
/// and hash field are left out; nested values have it unset. `unique_names` is set all through a
/// document: a map (a struct with a flattened field among them) that writes one text key twice
/// cannot be stored, since a stored document keeps one value per name, and is refused.
struct Encoder<'s, S: Sink> {
    sink: &'s mut S,
    top_level: Option<&'s Model>,
    unique_names: bool,
}

impl<S: Sink> Encoder<'_, S> {
    #[inline(always)]
    fn text(&mut self, text: &str) {
        write_text(self.sink, TEXT, text.as_bytes());
    }

    #[inline(always)]
    fn integer(self, value: i128) -> Result<(), EncodeError> {
        self.sink.write_integer(value);
        Ok(())
    }
}

#[inline(always)]
fn write_text<S: Sink>(sink: &mut S, tag: u8, bytes: &[u8]) {
    sink.write_tagged(tag, bytes);
}

fn nested<S: Sink>(sink: &mut S, unique_names: bool) -> Encoder<'_, S> {
    Encoder {
        sink,
        top_level: None,
        unique_names,
    }
}

impl<'s, S: Sink> ser::Serializer for Encoder<'s, S> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Sequence<'s, S>;
    type SerializeTuple = Sequence<'s, S>;
    type SerializeTupleStruct = Sequence<'s, S>;
    type SerializeTupleVariant = Sequence<'s, S>;
    type SerializeMap = Map<'s, S>;
    type SerializeStruct = Struct<'s, S>;
    type SerializeStructVariant = Struct<'s, S>;

    fn serialize_bool(self, value: bool) -> Result<(), EncodeError> {
        self.sink.write(&[BOOL, u8::from(value)]);
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i16(self, value: i16) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i32(self, value: i32) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i64(self, value: i64) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i128(self, value: i128) -> Result<(), EncodeError> {
        self.integer(value)
    }

    fn serialize_u8(self, value: u8) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u16(self, value: u16) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u32(self, value: u32) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u64(self, value: u64) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u128(self, value: u128) -> Result<(), EncodeError> {
        match i128::try_from(value) {
            Ok(fits) => self.integer(fits),
            Err(_) => {
                self.sink.write(&[LARGE_UNSIGNED]);
                self.sink.write(&value.to_be_bytes());
                Ok(())
            }
        }
    }

    fn serialize_f32(self, value: f32) -> Result<(), EncodeError> {
        self.serialize_f64(value.into())
    }

    fn serialize_f64(self, value: f64) -> Result<(), EncodeError> {
        let bits = if value.is_nan() {
            CANONICAL_NAN
        } else if value == 0.0 {
            0
        } else {
            value.to_bits()
        };
        self.sink.write(&[FLOAT]);
        self.sink.write(&bits.to_be_bytes());
        Ok(())
    }

    fn serialize_char(mut self, value: char) -> Result<(), EncodeError> {
        self.text(value.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }

    fn serialize_str(mut self, value: &str) -> Result<(), EncodeError> {
        self.text(value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), EncodeError> {
        write_text(self.sink, BYTES, value);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), EncodeError> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), EncodeError> {
        self.sink.write(&[NULL]);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), EncodeError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), EncodeError> {
        self.sink.write(&[UNIT_VARIANT]);
        self.text(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Sequence<'s, S>, EncodeError> {
        self.sink.write(&[SEQ_START]);
        Ok(Sequence {
            sink: self.sink,
            unique_names: self.unique_names,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Sequence<'s, S>, EncodeError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Sequence<'s, S>, EncodeError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Sequence<'s, S>, EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        self.serialize_seq(Some(len))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Map<'s, S>, EncodeError> {
        // The hint is the exact entry count for std maps; capped, since any impl can give one.
        let entries = len.unwrap_or(0).min(1024);
        Ok(Map {
            sink: self.sink,
            top_level: self.top_level,
            unique_names: self.unique_names,
            buffer: Vec::new(),
            entries: Vec::with_capacity(entries),
        })
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Struct<'s, S>, EncodeError> {
        self.sink.write(&[STRUCT_START]);
        Ok(Struct {
            sink: self.sink,
            top_level: self.top_level,
            unique_names: self.unique_names,
        })
    }

    fn serialize_struct_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Struct<'s, S>, EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        self.sink.write(&[STRUCT_START]);
        Ok(Struct {
            sink: self.sink,
            top_level: None,
            unique_names: self.unique_names,
        })
    }
}

/// Items written in order, between the sequence tags.
struct Sequence<'s, S: Sink> {
    sink: &'s mut S,
    unique_names: bool,
}

impl<S: Sink> Sequence<'_, S> {
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn close(self) -> Result<(), EncodeError> {
        self.sink.write(&[SEQ_END]);
        Ok(())
    }
}

impl<S: Sink> ser::SerializeSeq for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTuple for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTupleStruct for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTupleVariant for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

/// Struct fields, written as they come: their order is fixed by the type.
struct Struct<'s, S: Sink> {
    sink: &'s mut S,
    top_level: Option<&'s Model>,
    unique_names: bool,
}

impl<S: Sink> Struct<'_, S> {
    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), EncodeError> {
        if self.top_level.is_some_and(|model| !model.is_hashed(name)) {
            return Ok(());
        }
        write_text(self.sink, TEXT, name.as_bytes());
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn close(self) -> Result<(), EncodeError> {
        self.sink.write(&[STRUCT_END]);
        Ok(())
    }
}

impl<S: Sink> ser::SerializeStruct for Struct<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeStructVariant for Struct<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

/// One buffered map entry: where its key and value lie in the buffer.
struct Entry {
    key_start: usize,
    value_start: usize,
    end: usize,
}

/// Map entries, buffered until the map ends so they can be written sorted by key.
struct Map<'s, S: Sink> {
    sink: &'s mut S,
    top_level: Option<&'s Model>,
    unique_names: bool,
    buffer: Vec<u8>,
    entries: Vec<Entry>,
}

impl<S: Sink> Map<'_, S> {
    /// The key of an entry as text, if it is text.
    fn text_key(&self, entry: &Entry) -> Option<&str> {
        let key = &self.buffer[entry.key_start..entry.value_start];
        let (&tag, rest) = key.split_first()?;
        let text = rest.get(8..).filter(|_| tag == TEXT)?;
        std::str::from_utf8(text).ok()
    }
}

impl<S: Sink> ser::SerializeMap for Map<'_, S> {
    type Ok = ();
    type Error = EncodeError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        let key_start = self.buffer.len();
        key.serialize(nested(&mut self.buffer, self.unique_names))?;
        let value_start = self.buffer.len();
        self.entries.push(Entry {
            key_start,
            value_start,
            end: value_start,
        });
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        value.serialize(nested(&mut self.buffer, self.unique_names))?;
        let end = self.buffer.len();
        match self.entries.last_mut() {
            Some(entry) => entry.end = end,
            None => return Err(ser::Error::custom("map value without a key")),
        }
        Ok(())
    }

    fn end(mut self) -> Result<(), EncodeError> {
        let buffer = &self.buffer;
        // Unstable sort needs no scratch buffer; ties (two keys encoding alike) keep their
        // order through `key_start`, exactly as the stable sort did.
        self.entries.sort_unstable_by(|a, b| {
            buffer[a.key_start..a.value_start]
                .cmp(&buffer[b.key_start..b.value_start])
                .then(a.key_start.cmp(&b.key_start))
        });
        if self.unique_names {
            let repeated = self.entries.windows(2).find(|pair| {
                buffer[pair[0].key_start..pair[0].value_start]
                    == buffer[pair[1].key_start..pair[1].value_start]
            });
            if let Some(name) = repeated.and_then(|pair| self.text_key(&pair[0])) {
                return Err(ser::Error::custom(format!(
                    "the name `{name}` is written twice in one struct or map (a flattened \
                     field's entry named like another field?), and a stored document keeps \
                     only one of them"
                )));
            }
        }
        self.sink.write(&[MAP_START]);
        for entry in &self.entries {
            let excluded = match (self.top_level, self.text_key(entry)) {
                (Some(model), Some(key)) => !model.is_hashed(key),
                _ => false,
            };
            if !excluded {
                self.sink.write(&self.buffer[entry.key_start..entry.end]);
            }
        }
        self.sink.write(&[MAP_END]);
        Ok(())
    }
}

#[cfg(all(
    test,
    any(feature = "mongodb", feature = "_postgres", feature = "sqlite")
))]
mod tests {
    use super::{ContentHash, HashAlgorithm};

    /// A prepared document holds its hash's text inline: every algorithm's text must fit whole,
    /// or two hashes could be cut to the same text.
    #[test]
    fn every_algorithms_hash_text_fits_inline_whole() {
        let algorithms = [
            HashAlgorithm::Sha256,
            #[cfg(feature = "blake3")]
            HashAlgorithm::Blake3,
        ];
        for algorithm in algorithms {
            let bytes: [u8; 32] = std::array::from_fn(|at| (at * 37 + 11) as u8);
            let hash = ContentHash::from_parts(algorithm, bytes);
            assert_eq!(
                hash.to_short_text().as_str(),
                hash.to_hex(),
                "{algorithm:?}"
            );
        }
    }
}
