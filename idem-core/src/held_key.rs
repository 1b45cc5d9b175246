//! A document's natural key as a prepared document holds it: bytes, inline when short, which
//! become a [`NaturalKey`] only when an error names the document.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::document::NaturalKey;
use crate::id::{KeyPart, KeyValue};
use crate::model::Model;

/// A document's natural key held as bytes, built without an allocation for the short keys most
/// documents have: a batch holds one for each document it prepares, and a [`NaturalKey`] (a list
/// and a `String` for each text value) cost three allocations of the dozen a row took, for
/// errors alone. [`HeldKey::natural_key`] gives the very key the type's
/// [`Idempotent::natural_key`](crate::Idempotent::natural_key) gives, when an error names the
/// document; equal keys hold equal bytes, so a batch's planner hashes and compares them as
/// they are.
#[derive(Clone)]
pub(crate) struct HeldKey(KeyBytes);

/// The bytes of a [`HeldKey`]: each value a tag, then a text's length (8 bytes, little-endian)
/// and UTF-8 bytes, an integer's 16 bytes, or a boolean's one.
#[derive(Clone)]
enum KeyBytes {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(Vec<u8>),
}

/// What a [`HeldKey`] holds inline: two text keys of about twenty bytes each (a slug and a
/// language) with their tags and lengths.
const INLINE_KEY_BYTES: usize = 62;

const TEXT: u8 = 0;
const INTEGER: u8 = 1;
const LARGE_UNSIGNED: u8 = 2;
const BOOL: u8 = 3;

impl HeldKey {
    /// The key of these values, in declaration order.
    pub fn of(values: &[&dyn crate::IdKey]) -> HeldKey {
        let mut held = KeyBytes::Inline {
            len: 0,
            bytes: [0; INLINE_KEY_BYTES],
        };
        for value in values {
            // As `Idempotent::natural_key` holds it: a `char` as its text, an unsigned integer
            // as an integer where it fits `i128`.
            match value.key_part().normalized() {
                KeyPart::Text(text) => held.put_text(text),
                KeyPart::Char(c) => held.put_text(c.encode_utf8(&mut [0; 4])),
                KeyPart::LargeUnsigned(value) => {
                    held.put(&[&[LARGE_UNSIGNED], &value.to_le_bytes()])
                }
                KeyPart::Integer(value) => held.put(&[&[INTEGER], &value.to_le_bytes()]),
                KeyPart::Bool(value) => held.put(&[&[BOOL, u8::from(value)]]),
            }
        }
        HeldKey(held)
    }

    /// The held bytes.
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }

    /// The natural key of a document of `model`: its key fields' names with the held values.
    pub fn natural_key(&self, model: &Model) -> NaturalKey {
        let mut bytes = self.bytes();
        let mut take = |count: usize| {
            let (taken, rest) = bytes.split_at(count.min(bytes.len()));
            bytes = rest;
            taken
        };
        let mut parts = Vec::new();
        for field in model.natural_key_fields() {
            let value = match take(1).first() {
                Some(&TEXT) => {
                    let len = take(8).try_into().map_or(0, u64::from_le_bytes);
                    let text = take(usize::try_from(len).unwrap_or(usize::MAX));
                    // Written from a `&str` by `of`, whole.
                    KeyValue::Text(String::from_utf8_lossy(text).into_owned())
                }
                Some(&INTEGER) => {
                    KeyValue::Integer(take(16).try_into().map_or(0, i128::from_le_bytes))
                }
                Some(&LARGE_UNSIGNED) => {
                    KeyValue::LargeUnsigned(take(16).try_into().map_or(0, u128::from_le_bytes))
                }
                Some(&BOOL) => KeyValue::Bool(take(1) == [1]),
                _ => break,
            };
            parts.push((field.name(), value));
        }
        NaturalKey::new(parts)
    }
}

impl KeyBytes {
    /// Appends `parts`, moving the bytes to the heap once they outgrow the inline room.
    fn put(&mut self, parts: &[&[u8]]) {
        let added: usize = parts.iter().map(|part| part.len()).sum();
        match self {
            KeyBytes::Inline { len, bytes } if usize::from(*len) + added <= INLINE_KEY_BYTES => {
                let mut at = usize::from(*len);
                for part in parts {
                    bytes[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                // At most `INLINE_KEY_BYTES`, checked above.
                *len = at as u8;
            }
            KeyBytes::Inline { len, bytes } => {
                let mut heap = Vec::with_capacity(usize::from(*len) + added);
                heap.extend_from_slice(&bytes[..usize::from(*len)]);
                parts.iter().for_each(|part| heap.extend_from_slice(part));
                *self = KeyBytes::Heap(heap);
            }
            KeyBytes::Heap(heap) => parts.iter().for_each(|part| heap.extend_from_slice(part)),
        }
    }

    fn put_text(&mut self, text: &str) {
        let len = (text.len() as u64).to_le_bytes();
        self.put(&[&[TEXT], &len, text.as_bytes()]);
    }
}

impl PartialEq for HeldKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for HeldKey {}

impl Hash for HeldKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl fmt::Debug for HeldKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HeldKey").field(&self.bytes()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IdScheme, Role};

    fn model(keys: usize) -> Model {
        const FIELDS: [crate::Field; 4] = [
            crate::Field::new("a", "a", Role::Key),
            crate::Field::new("b", "b", Role::Key),
            crate::Field::new("c", "c", Role::Key),
            crate::Field::new("d", "d", Role::Key),
        ];
        let fields: &'static [crate::Field] = Box::leak(FIELDS[..keys].to_vec().into_boxed_slice());
        Model::new("things", IdScheme::V1, "_hash", fields)
    }

    #[test]
    fn a_held_key_gives_back_the_natural_key_of_every_kind_of_value() {
        let (long, forty) = ("x".repeat(100), "x".repeat(40));
        let cases: Vec<Vec<&dyn crate::IdKey>> = vec![
            vec![&"post-000001", &"en"],
            vec![&"", &'é'],
            vec![&-4i64, &u128::MAX],
            vec![&7u128, &true, &false],
            vec![&long, &"ü😀", &0u8, &i128::MIN],
            // Inline until the third value, which moves the bytes to the heap.
            vec![&forty, &"cccc", &1u8],
        ];
        for values in cases {
            let model = model(values.len());
            let expected = crate::id::natural_key(&model, &values);
            let held = HeldKey::of(&values);
            assert_eq!(
                held.natural_key(&model),
                expected,
                "{values:?}",
                values = expected
            );
        }
    }

    #[test]
    fn held_keys_are_equal_exactly_when_their_natural_keys_are() {
        let (seventy, seventy_one) = ("x".repeat(70), "x".repeat(71));
        // Two texts of 40 and 4 bytes fill the inline room exactly; one byte more spills.
        let (forty, forty_one) = ("x".repeat(40), "x".repeat(41));
        let keys: Vec<Vec<&dyn crate::IdKey>> = vec![
            vec![&"ab", &"c"],
            vec![&"a", &"bc"],
            vec![&"ab", &'c'],
            vec![&1u8, &"c"],
            vec![&"1", &"c"],
            vec![&1i128, &"c"],
            vec![&true, &"c"],
            vec![&"true", &"c"],
            vec![&seventy, &"c"],
            vec![&seventy_one, &"c"],
            vec![&forty, &"cccc"],
            vec![&forty_one, &"cccc"],
            vec![&forty, &"ccccc"],
        ];
        let model = model(2);
        for (i, left) in keys.iter().enumerate() {
            for (j, right) in keys.iter().enumerate() {
                let same_key =
                    crate::id::natural_key(&model, left) == crate::id::natural_key(&model, right);
                assert_eq!(
                    HeldKey::of(left) == HeldKey::of(right),
                    same_key,
                    "cases {i} and {j}"
                );
            }
        }
    }
}
