//! Deterministic ids: a ULID whose time part is a timestamp of the document and whose 80 random
//! bits are the first 10 bytes of a SHA-256 over the document's key values.
//!
//! The byte layouts are specified in `docs/SPEC.md`, with test vectors that a script in another
//! language recomputes. In short:
//!
//! - [`IdScheme::V1`] hashes, for each key in declaration order, a type tag and a length-prefixed
//!   value: `0x01 ‖ u64-be(len) ‖ utf8` for text, `0x02 ‖ i128-be` for integers that fit an
//!   `i128`, `0x03 ‖ u128-be` for larger unsigned integers, `0x04 ‖ 0x00|0x01` for booleans. Every
//!   key is self-delimiting, so two different key tuples never share an encoding.
//! - [`IdScheme::Joined`] hashes the keys' text joined by `:`, byte-identical to the reference
//!   helper `sha256(slug + ":" + lang)`. A key containing `:` would make two tuples collide, so it
//!   is refused.
//!
//! Both schemes refuse an empty text key: it is almost always a missing value, and would give
//! every such document the same id.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

mod derivation;

pub use derivation::{derive_id, natural_key};

/// The largest millisecond count a ULID's 48-bit time part holds (year 10889).
pub const MAX_TIMESTAMP_MS: u64 = (1 << 48) - 1;

/// The separator of [`IdScheme::Joined`].
pub const JOINED_SEPARATOR: char = ':';

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

/// A document id: a ULID, displayed as its 26-character Crockford base32 form and stored as the
/// `_id` string.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(ulid::Ulid);

impl Id {
    /// Builds an id from its two parts: milliseconds since the Unix epoch (at most
    /// [`MAX_TIMESTAMP_MS`]) and the 80-bit hash part, as 10 bytes.
    pub fn from_parts(timestamp_ms: u64, hash_part: [u8; 10]) -> Result<Self, TimestampProblem> {
        if timestamp_ms > MAX_TIMESTAMP_MS {
            return Err(TimestampProblem::AfterUlidRange);
        }
        let mut random = [0u8; 16];
        random[6..].copy_from_slice(&hash_part);
        Ok(Id(ulid::Ulid::from_parts(
            timestamp_ms,
            u128::from_be_bytes(random),
        )))
    }

    /// Milliseconds since the Unix epoch held in the id's time part.
    pub fn timestamp_ms(&self) -> u64 {
        self.0.timestamp_ms()
    }

    /// The 80-bit part derived from the key values.
    pub fn hash_part(&self) -> [u8; 10] {
        let bytes = self.0.to_bytes();
        let mut part = [0u8; 10];
        part.copy_from_slice(&bytes[6..]);
        part
    }

    /// The 16 bytes of the ULID, big-endian.
    pub fn to_bytes(&self) -> [u8; 16] {
        self.0.to_bytes()
    }

    /// The id as a [`ulid::Ulid`].
    pub fn to_ulid(&self) -> ulid::Ulid {
        self.0
    }
}

impl From<ulid::Ulid> for Id {
    fn from(ulid: ulid::Ulid) -> Self {
        Id(ulid)
    }
}

impl From<Id> for ulid::Ulid {
    fn from(id: Id) -> Self {
        id.0
    }
}

/// The id as MongoDB stores it under `_id`: its 26-character text, so a filter can be written
/// by hand, `doc! { "_id": post.id()? }`.
#[cfg(feature = "mongodb")]
impl From<Id> for mongodb::bson::Bson {
    fn from(id: Id) -> Self {
        mongodb::bson::Bson::String(id.to_string())
    }
}

impl Id {
    /// The id as stored: its 26 characters, without the formatting machinery `to_string`
    /// goes through (once per document of a batch).
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn to_text(self) -> crate::short_text::ShortText {
        let mut buffer = [0u8; ulid::ULID_LEN];
        crate::short_text::ShortText::new(&[self.0.array_to_str(&mut buffer)])
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buffer = [0u8; ulid::ULID_LEN];
        f.write_str(self.0.array_to_str(&mut buffer))
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({self})")
    }
}

impl FromStr for Id {
    type Err = ulid::DecodeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ulid::Ulid::from_string(text).map(Id)
    }
}

impl serde::Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buffer = [0u8; ulid::ULID_LEN];
        serializer.serialize_str(self.0.array_to_str(&mut buffer))
    }
}

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl serde::de::Visitor<'_> for IdVisitor {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 26-character ULID string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Id, E> {
                text.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(IdVisitor)
    }
}

/// How the 80 bits after the timestamp are derived from the key values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IdScheme {
    /// SHA-256 over a typed, length-prefixed encoding of the keys: injective, the default.
    #[default]
    V1,
    /// SHA-256 over the keys' text joined by `:`: compatible with the reference helper, for
    /// collections whose ids were made by it. A key containing `:` is refused.
    Joined,
}

impl IdScheme {
    /// The name used in `#[idem(id_scheme = "…")]`.
    pub const fn name(self) -> &'static str {
        match self {
            IdScheme::V1 => "v1",
            IdScheme::Joined => "joined",
        }
    }
}

/// A key value in a form every backend and error message can show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyValue {
    /// A text key.
    Text(String),
    /// An integer key.
    Integer(i128),
    /// An unsigned integer key above `i128::MAX`.
    LargeUnsigned(u128),
    /// A boolean key.
    Bool(bool),
}

/// How much of a text key a message shows.
const SHOWN_KEY_BYTES: usize = 64;

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A key too long to be useful in a message (a btree refuses keys of a few KiB, and
            // errors about it would repeat the key whole) is shown by its start and length.
            KeyValue::Text(text) if text.len() > SHOWN_KEY_BYTES => {
                let mut end = SHOWN_KEY_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                write!(f, "{:?}… ({} bytes)", &text[..end], text.len())
            }
            KeyValue::Text(text) => write!(f, "{text:?}"),
            KeyValue::Integer(value) => write!(f, "{value}"),
            KeyValue::LargeUnsigned(value) => write!(f, "{value}"),
            KeyValue::Bool(value) => write!(f, "{value}"),
        }
    }
}

/// A key value borrowed for encoding: what [`IdKey`] types reduce to.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum KeyPart<'a> {
    /// Text, hashed as its UTF-8 bytes.
    Text(&'a str),
    /// One character, hashed exactly as the one-character text.
    Char(char),
    /// A signed or unsigned integer that fits an `i128`.
    Integer(i128),
    /// An unsigned integer above `i128::MAX`.
    LargeUnsigned(u128),
    /// A boolean.
    Bool(bool),
}

impl<'a> KeyPart<'a> {
    /// The part as keys compare: an unsigned integer that fits an `i128` is that integer. A
    /// hand-written `IdKey` may return a small value as `LargeUnsigned`; it is the same key as
    /// every built-in impl's `Integer`, with the same id.
    pub(crate) fn normalized(self) -> KeyPart<'a> {
        match self {
            KeyPart::LargeUnsigned(value) => i128::try_from(value).map_or(self, KeyPart::Integer),
            other => other,
        }
    }

    fn to_key_value(self) -> KeyValue {
        match self.normalized() {
            KeyPart::Text(text) => KeyValue::Text(text.to_owned()),
            KeyPart::Char(c) => KeyValue::Text(c.to_string()),
            KeyPart::Integer(value) => KeyValue::Integer(value),
            KeyPart::LargeUnsigned(value) => KeyValue::LargeUnsigned(value),
            KeyPart::Bool(value) => KeyValue::Bool(value),
        }
    }
}

/// A type whose values can identify a document: it has one unambiguous byte encoding.
///
/// Implemented for text (`str`, `String`, `char`, `Box<str>`, `Cow<str>`, `Rc<str>`, `Arc<str>`),
/// integers of every width, and `bool`. Floats are not keys: `0.1 + 0.2` and `0.3` differ, NaN
/// has many encodings, and `-0.0 == 0.0`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[idem(key)]` field: it has no stable byte encoding for the id",
    label = "not an id key type",
    note = "key fields must be text (`String`, `&str`, `char`), an integer or `bool`; floats are never keys",
    note = "if this is a newtype, implement `idem_core::IdKey` for it by returning its inner value's `KeyPart`, and `idem_core::StoredKey` if its values are stored keys"
)]
pub trait IdKey {
    /// The value to encode.
    fn key_part(&self) -> KeyPart<'_>;
}

/// A natural key's value encodes as the key it was taken from: the same id, the same key.
impl IdKey for KeyValue {
    fn key_part(&self) -> KeyPart<'_> {
        match self {
            KeyValue::Text(text) => KeyPart::Text(text),
            KeyValue::Integer(value) => KeyPart::Integer(*value),
            KeyValue::LargeUnsigned(value) => KeyPart::LargeUnsigned(*value),
            KeyValue::Bool(value) => KeyPart::Bool(*value),
        }
    }
}

impl<T: IdKey + ?Sized> IdKey for &T {
    fn key_part(&self) -> KeyPart<'_> {
        (**self).key_part()
    }
}

macro_rules! text_keys {
    ($($ty:ty),*) => {$(
        impl IdKey for $ty {
            fn key_part(&self) -> KeyPart<'_> {
                KeyPart::Text(self.as_ref())
            }
        }
    )*};
}
text_keys!(
    str,
    String,
    Box<str>,
    std::rc::Rc<str>,
    std::sync::Arc<str>,
    std::borrow::Cow<'_, str>
);

macro_rules! integer_keys {
    ($($ty:ty),*) => {$(
        impl IdKey for $ty {
            fn key_part(&self) -> KeyPart<'_> {
                KeyPart::Integer(i128::from(*self))
            }
        }
    )*};
}
integer_keys!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

impl IdKey for isize {
    fn key_part(&self) -> KeyPart<'_> {
        KeyPart::Integer(*self as i128)
    }
}

impl IdKey for usize {
    fn key_part(&self) -> KeyPart<'_> {
        KeyPart::Integer(*self as i128)
    }
}

impl IdKey for u128 {
    fn key_part(&self) -> KeyPart<'_> {
        match i128::try_from(*self) {
            Ok(value) => KeyPart::Integer(value),
            Err(_) => KeyPart::LargeUnsigned(*self),
        }
    }
}

impl IdKey for bool {
    fn key_part(&self) -> KeyPart<'_> {
        KeyPart::Bool(*self)
    }
}

impl IdKey for char {
    fn key_part(&self) -> KeyPart<'_> {
        KeyPart::Char(*self)
    }
}

/// A key type that every backend can store and read back: a [`IdKey`] whose values all fit a
/// stored integer or text. `u64`, `usize`, `u128` and `i128` derive ids but are not stored keys:
/// their values above `i64::MAX` fit no BSON or PostgreSQL integer. A newtype key implements it
/// (an empty impl) when its values are stored keys.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a stored `#[idem(key)]` field: not every value of it can be stored",
    label = "not a storable key type",
    note = "a stored key is text, `char`, `bool` or an integer that fits 64 signed bits (MongoDB and PostgreSQL store no wider integer): use `i64` or a narrower integer, or keep the value as a `String`"
)]
pub trait StoredKey: IdKey {}

impl<T: StoredKey + ?Sized> StoredKey for &T {}

macro_rules! stored_keys {
    ($($ty:ty),*) => {$( impl StoredKey for $ty {} )*};
}

stored_keys!(str, String, i8, i16, i32, i64, isize, u8, u16, u32, bool, char);
impl StoredKey for std::borrow::Cow<'_, str> {}
impl StoredKey for Box<str> {}
impl StoredKey for std::sync::Arc<str> {}
impl StoredKey for std::rc::Rc<str> {}

/// A type that can give an id its time part: milliseconds since the Unix epoch.
///
/// Implemented for `i64` and `u64` (milliseconds), `std::time::SystemTime`, `bson::DateTime`
/// (feature `mongodb`), `chrono::DateTime<Tz>` (feature `chrono`) and `time::OffsetDateTime`
/// (feature `time`). Sub-millisecond precision is truncated for the id.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[idem(timestamp)]` field: it is not a supported time type",
    label = "not a timestamp type",
    note = "use `i64`/`u64` unix milliseconds, `std::time::SystemTime`, `bson::DateTime` (feature `mongodb`), `chrono::DateTime<Tz>` (feature `chrono`) or `time::OffsetDateTime` (feature `time`)"
)]
pub trait IdTimestamp {
    /// Milliseconds since the Unix epoch, or why this value has none that fits a ULID.
    fn unix_millis(&self) -> Result<u64, TimestampProblem>;

    /// The value as shown in error messages.
    fn describe(&self) -> String;
}

impl<T: IdTimestamp + ?Sized> IdTimestamp for &T {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        (**self).unix_millis()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// Checks a signed millisecond count against the ULID range.
pub(crate) fn millis_in_range(millis: i128) -> Result<u64, TimestampProblem> {
    if millis < 0 {
        Err(TimestampProblem::BeforeUnixEpoch)
    } else if millis > MAX_TIMESTAMP_MS as i128 {
        Err(TimestampProblem::AfterUlidRange)
    } else {
        Ok(millis as u64)
    }
}

impl IdTimestamp for i64 {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        millis_in_range(i128::from(*self))
    }
    fn describe(&self) -> String {
        format!("{self} ms")
    }
}

impl IdTimestamp for u64 {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        millis_in_range(i128::from(*self))
    }
    fn describe(&self) -> String {
        format!("{self} ms")
    }
}

impl IdTimestamp for SystemTime {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        match self.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(elapsed) => millis_in_range(elapsed.as_millis() as i128),
            Err(_) => Err(TimestampProblem::BeforeUnixEpoch),
        }
    }
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

#[cfg(feature = "mongodb")]
impl IdTimestamp for mongodb::bson::DateTime {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        millis_in_range(i128::from(self.timestamp_millis()))
    }
    fn describe(&self) -> String {
        format!("{self} ({} ms)", self.timestamp_millis())
    }
}

#[cfg(feature = "chrono")]
impl<Tz: chrono::TimeZone> IdTimestamp for chrono::DateTime<Tz> {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        millis_in_range(i128::from(self.timestamp_millis()))
    }
    fn describe(&self) -> String {
        self.to_utc().to_rfc3339()
    }
}

#[cfg(feature = "time")]
impl IdTimestamp for time::OffsetDateTime {
    fn unix_millis(&self) -> Result<u64, TimestampProblem> {
        // Floor division keeps sub-millisecond instants before the epoch negative.
        millis_in_range(self.unix_timestamp_nanos().div_euclid(1_000_000))
    }
    fn describe(&self) -> String {
        self.to_string()
    }
}

/// The tag before each key in the `v1` encoding.
const V1_TEXT: u8 = 0x01;
const V1_INTEGER: u8 = 0x02;
const V1_LARGE_UNSIGNED: u8 = 0x03;
const V1_BOOL: u8 = 0x04;

/// Appends the `v1` encoding of one key to `out`: the bytes that feed SHA-256.
pub fn encode_key_v1(part: KeyPart<'_>, mut out: impl FnMut(&[u8])) {
    let mut utf8 = [0u8; 4];
    match part.normalized() {
        KeyPart::Char(c) => encode_key_v1(KeyPart::Text(c.encode_utf8(&mut utf8)), out),
        KeyPart::Text(text) => {
            out(&[V1_TEXT]);
            out(&(text.len() as u64).to_be_bytes());
            out(text.as_bytes());
        }
        KeyPart::Integer(value) => {
            out(&[V1_INTEGER]);
            out(&value.to_be_bytes());
        }
        KeyPart::LargeUnsigned(value) => {
            out(&[V1_LARGE_UNSIGNED]);
            out(&value.to_be_bytes());
        }
        KeyPart::Bool(value) => out(&[V1_BOOL, u8::from(value)]),
    }
}

/// The key at the start of `bytes`, which [`encode_key_v1`] wrote, as a natural key holds it;
/// `bytes` is left after it. `None` at the end, or where `bytes` is not that encoding.
// Read by the engine's held keys only.
#[cfg_attr(
    not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")),
    allow(dead_code)
)]
pub(crate) fn decode_key_v1(bytes: &mut &[u8]) -> Option<KeyValue> {
    let (&tag, rest) = bytes.split_first()?;
    let (value, rest) = match tag {
        V1_TEXT => {
            let (len, rest) = rest.split_first_chunk::<8>()?;
            let len = usize::try_from(u64::from_be_bytes(*len)).ok()?;
            let text = rest.get(..len)?;
            let text = std::str::from_utf8(text).ok()?.to_owned();
            (KeyValue::Text(text), &rest[len..])
        }
        V1_INTEGER => {
            let (value, rest) = rest.split_first_chunk::<16>()?;
            (KeyValue::Integer(i128::from_be_bytes(*value)), rest)
        }
        V1_LARGE_UNSIGNED => {
            let (value, rest) = rest.split_first_chunk::<16>()?;
            (KeyValue::LargeUnsigned(u128::from_be_bytes(*value)), rest)
        }
        V1_BOOL => {
            let (&value, rest) = rest.split_first()?;
            (KeyValue::Bool(value == 1), rest)
        }
        _ => return None,
    };
    *bytes = rest;
    Some(value)
}

#[cfg(all(test, feature = "mongodb"))]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_stored_as_its_text() {
        let id = Id::from(ulid::Ulid::from_parts(1_700_000_000_000, 7));
        assert_eq!(
            mongodb::bson::Bson::from(id),
            mongodb::bson::Bson::String(id.to_string())
        );
    }
}
