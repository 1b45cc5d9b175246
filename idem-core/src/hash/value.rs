//! The content hash as a value: its bytes, the algorithm that made them, and its stored text
//! (hex digits, after a prefix naming any algorithm but SHA-256), written and parsed.

use std::fmt;
use std::str::FromStr;

use serde::ser::{self, Serialize};

use super::HashAlgorithm;

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
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
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
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
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
