//! A document's natural key as a prepared document holds it: bytes, inline when short, which
//! become a [`NaturalKey`] only when an error names the document.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::document::NaturalKey;
use crate::id::{decode_key_v1, encode_key_v1};
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

/// The bytes of a [`HeldKey`]: each value as the `v1` id scheme encodes a key
/// ([`encode_key_v1`]: a tag, then a text's length and bytes, an integer's 16 bytes or a
/// boolean's one), so distinct keys hold distinct bytes.
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

impl HeldKey {
    /// The key of these values, in declaration order.
    pub fn of(values: &[&dyn crate::IdKey]) -> HeldKey {
        let mut held = KeyBytes::Inline {
            len: 0,
            bytes: [0; INLINE_KEY_BYTES],
        };
        for value in values {
            encode_key_v1(value.key_part(), |bytes| held.put(bytes));
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
        NaturalKey::new(
            model
                .natural_key_fields()
                .map_while(|field| Some((field.name(), decode_key_v1(&mut bytes)?)))
                .collect(),
        )
    }
}

impl KeyBytes {
    /// Appends `bytes`, moving them all to the heap once they outgrow the inline room.
    fn put(&mut self, bytes: &[u8]) {
        match self {
            KeyBytes::Inline { len, bytes: room }
                if usize::from(*len) + bytes.len() <= INLINE_KEY_BYTES =>
            {
                let at = usize::from(*len);
                room[at..at + bytes.len()].copy_from_slice(bytes);
                // At most `INLINE_KEY_BYTES`, checked above.
                *len = (at + bytes.len()) as u8;
            }
            KeyBytes::Inline { len, bytes: room } => {
                let mut heap = Vec::with_capacity(2 * INLINE_KEY_BYTES);
                heap.extend_from_slice(&room[..usize::from(*len)]);
                heap.extend_from_slice(bytes);
                *self = KeyBytes::Heap(heap);
            }
            KeyBytes::Heap(heap) => heap.extend_from_slice(bytes),
        }
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
