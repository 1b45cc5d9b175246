//! Ids (spec section 1): key values (1.3), the scheme inputs of `v1` (1.4) and `joined` (1.5),
//! and the hash part (1.1).

use sha2::{Digest, Sha256};

/// A key value as the spec sees it (1.3): what is left of a key once its Rust type is forgotten.
/// Two keys are the same value exactly when they are equal here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyValue {
    /// Text; a char is its one-character text.
    Text(String),
    /// An integer in `−2^127 ..= 2^127 − 1`, whatever its Rust width.
    Integer(i128),
    /// An integer in `2^127 ..= 2^128 − 1`: a `u128` above `i128::MAX`.
    LargeUnsigned(u128),
    /// `true` or `false`.
    Bool(bool),
}

impl From<String> for KeyValue {
    fn from(text: String) -> Self {
        KeyValue::Text(text)
    }
}

impl From<&str> for KeyValue {
    fn from(text: &str) -> Self {
        KeyValue::Text(text.to_owned())
    }
}

impl From<char> for KeyValue {
    fn from(c: char) -> Self {
        KeyValue::Text(c.to_string())
    }
}

impl From<bool> for KeyValue {
    fn from(b: bool) -> Self {
        KeyValue::Bool(b)
    }
}

macro_rules! from_integer {
    ($($int:ty),*) => {$(
        impl From<$int> for KeyValue {
            fn from(n: $int) -> Self {
                KeyValue::Integer(n.into())
            }
        }
    )*};
}

from_integer!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

impl From<isize> for KeyValue {
    fn from(n: isize) -> Self {
        // At most 64 bits wide on every target Rust supports.
        KeyValue::Integer(n as i128)
    }
}

impl From<usize> for KeyValue {
    fn from(n: usize) -> Self {
        KeyValue::Integer(n as i128)
    }
}

impl From<u128> for KeyValue {
    fn from(n: u128) -> Self {
        match i128::try_from(n) {
            Ok(fits) => KeyValue::Integer(fits),
            Err(_) => KeyValue::LargeUnsigned(n),
        }
    }
}

impl KeyValue {
    /// `enc(key)` of scheme `v1` (1.4), appended to `out`.
    fn encode_v1(&self, out: &mut Vec<u8>) {
        match self {
            KeyValue::Text(text) => {
                out.push(0x01);
                out.extend_from_slice(&(text.len() as u64).to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            KeyValue::Integer(n) => {
                out.push(0x02);
                out.extend_from_slice(&n.to_be_bytes());
            }
            KeyValue::LargeUnsigned(n) => {
                out.push(0x03);
                out.extend_from_slice(&n.to_be_bytes());
            }
            KeyValue::Bool(b) => out.extend_from_slice(&[0x04, u8::from(*b)]),
        }
    }

    /// `text(key)` of scheme `joined` (1.5): the text itself, or the decimal form of an integer,
    /// or `true` / `false`.
    pub fn joined_text(&self) -> String {
        match self {
            KeyValue::Text(text) => text.clone(),
            KeyValue::Integer(n) => n.to_string(),
            KeyValue::LargeUnsigned(n) => n.to_string(),
            KeyValue::Bool(b) => b.to_string(),
        }
    }
}

/// The `v1` scheme input (1.4): the keys' encodings, concatenated in order. Every key tuple has
/// one, empty text keys included; whether `v1` accepts the tuple is a separate question (1.6).
pub fn v1_input(keys: &[KeyValue]) -> Vec<u8> {
    let mut input = Vec::new();
    for key in keys {
        key.encode_v1(&mut input);
    }
    input
}

/// The `joined` scheme input (1.5): the keys' texts joined by `:`. Like [`v1_input`], it does not
/// say whether `joined` accepts the tuple (no text empty, none with a `:`).
pub fn joined_input(keys: &[KeyValue]) -> String {
    let texts: Vec<String> = keys.iter().map(KeyValue::joined_text).collect();
    texts.join(":")
}

/// The hash part of an id (1.1): the first 10 bytes of SHA-256 over the scheme input.
pub fn hash_part(input: &[u8]) -> [u8; 10] {
    let digest = Sha256::digest(input);
    let mut part = [0u8; 10];
    part.copy_from_slice(&digest[..10]);
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Hex as the spec writes it, one key per line, with spaces between tag, length and bytes.
    fn spec_hex(lines: &[&str]) -> String {
        lines.concat().replace(' ', "")
    }

    /// The worked examples of 1.4, byte for byte.
    #[test]
    fn v1_input_is_the_worked_examples() {
        let ascii = v1_input(&["hello-world".into(), "en".into()]);
        let expected = spec_hex(&[
            "01 000000000000000b 68656c6c6f2d776f726c64",
            "01 0000000000000002 656e",
        ]);
        assert_eq!(hex(&ascii), expected);
        let three = v1_input(&["tenant-7".into(), 12345i32.into(), true.into()]);
        let expected = spec_hex(&[
            "01 0000000000000008 74656e616e742d37",
            "02 00000000000000000000000000003039",
            "04 01",
        ]);
        assert_eq!(hex(&three), expected);
        let negative = v1_input(&[(-1i8).into()]);
        assert_eq!(
            hex(&negative),
            spec_hex(&["02 ffffffffffffffffffffffffffffffff"])
        );
        let large = v1_input(&[(1u128 << 127).into()]);
        assert_eq!(
            hex(&large),
            spec_hex(&["03 80000000000000000000000000000000"])
        );
    }

    /// Hash parts of vectors in the table of 1.7.
    #[test]
    fn hash_parts_are_the_vectors() {
        let v1 = |keys: &[KeyValue]| hex(&hash_part(&v1_input(keys)));
        let joined = |keys: &[KeyValue]| hex(&hash_part(joined_input(keys).as_bytes()));
        let post = ["hello-world".into(), "en".into()];
        let three = ["tenant-7".into(), 12345u64.into(), true.into()];
        assert_eq!(v1(&post), "8f6736524177b0700fc1");
        assert_eq!(
            v1(&["café-crème".into(), "日本語".into()]),
            "90db412d17571a76a750"
        );
        assert_eq!(v1(&[42usize.into()]), "17e750069c3700821a9e");
        assert_eq!(v1(&[i128::MIN.into()]), "4ab93f8ee5fbf076b428");
        assert_eq!(v1(&[u128::MAX.into()]), "74f680723ad4d0496e21");
        assert_eq!(v1(&["42".into()]), "48231f166d92ca816a6e");
        assert_eq!(v1(&[false.into()]), "c0ba8a33ac67f44abff5");
        assert_eq!(v1(&['x'.into()]), "ee424718d3d6699ea21b");
        assert_eq!(v1(&["x".into()]), "ee424718d3d6699ea21b");
        assert_eq!(v1(&three), "dff87867a7da6ad5df15");
        assert_eq!(v1(&["a:b".into(), "c".into()]), "f16391503ae5e19fa98a");
        assert_eq!(joined(&post), "12d80df373615009e843");
        assert_eq!(joined(&["hello-world".into()]), "afa27b44d43b02a9fea4");
        assert_eq!(joined(&[42isize.into()]), "73475cb40a568e8da8a0");
        assert_eq!(joined(&["42".into()]), "73475cb40a568e8da8a0");
        assert_eq!(joined(&[(-1i64).into()]), "1bad6b8cf97131fceab8");
        assert_eq!(joined(&[u128::MAX.into()]), "f315ff319bf588e20211");
        assert_eq!(joined(&[true.into(), false.into()]), "8262cbf5cd56ea131070");
        assert_eq!(joined(&['x'.into()]), "2d711642b726b0440162");
        assert_eq!(joined(&three), "106c497b3ffbc646cb44");
    }

    /// Only a `u128` above `i128::MAX` is a large unsigned integer; every width of the same
    /// number is the same value.
    #[test]
    fn integers_are_values_not_widths() {
        assert_eq!(
            KeyValue::from(i128::MAX as u128),
            KeyValue::Integer(i128::MAX)
        );
        assert_eq!(
            KeyValue::from(i128::MAX as u128 + 1),
            KeyValue::LargeUnsigned(1 << 127)
        );
        assert_eq!(KeyValue::from(7u8), KeyValue::from(7i64));
        assert_eq!(
            KeyValue::from(usize::MAX),
            KeyValue::from(usize::MAX as u64)
        );
        assert_eq!(
            KeyValue::from(isize::MIN),
            KeyValue::from(isize::MIN as i64)
        );
    }
}
