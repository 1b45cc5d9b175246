//! The one digest the SQL stores keep of a document's guarded fields (`idemFrozen`): 16 bytes,
//! where a digest per field as text took about twenty times the room.

use sha2::{Digest, Sha256};

use crate::model::Field;
use crate::short_text::ShortText;

/// The bytes of the digest kept.
pub(crate) const FROZEN_DIGEST_BYTES: usize = 16;

/// The digest of a document's guarded fields, in lowercase hex: the first
/// [`FROZEN_DIGEST_BYTES`] of SHA-256 over, for each field in `digests` order
/// ([`crate::model::Model::digested_fields`]), its stored name and its value's digest
/// ([`crate::engine::guarded_value_digest`]), or a mark that it was never written. Each part is
/// framed by its length (a name, a digest) or a tag (written or not), so that no two lists of
/// fields and digests give the same bytes. Every SQL write, batch, audit and adoption makes it
/// here.
pub(crate) fn frozen_digest<'f>(
    digests: impl IntoIterator<Item = (&'f Field, Option<&'f str>)>,
) -> ShortText {
    let mut hasher = Sha256::new();
    let framed = |hasher: &mut Sha256, text: &str| {
        hasher.update((text.len() as u64).to_be_bytes());
        hasher.update(text.as_bytes());
    };
    for (field, digest) in digests {
        framed(&mut hasher, field.stored_name());
        match digest {
            None => hasher.update([0]),
            Some(digest) => {
                hasher.update([1]);
                framed(&mut hasher, digest);
            }
        }
    }
    let bytes = hasher.finalize();
    let mut hex = [0u8; 2 * FROZEN_DIGEST_BYTES];
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in hex.chunks_exact_mut(2).zip(&bytes[..FROZEN_DIGEST_BYTES]) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    ShortText::new(&[std::str::from_utf8(&hex).unwrap_or_default()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    static A: Field = Field::new("a", "a", Role::Frozen);
    static B: Field = Field::new("b", "b", Role::Frozen);
    static AB: Field = Field::new("ab", "ab", Role::Frozen);

    #[test]
    fn the_digest_tells_fields_values_and_unwritten_ones_apart() {
        let one = frozen_digest([(&A, Some("x")), (&B, None)]);
        assert_eq!(one.len(), 32);
        assert!(one.bytes().all(|byte| byte.is_ascii_hexdigit()));
        assert_eq!(one, frozen_digest([(&A, Some("x")), (&B, None)]));
        let others = [
            frozen_digest([(&A, Some("x"))]),
            frozen_digest([(&A, Some("x")), (&B, Some(""))]),
            frozen_digest([(&A, None), (&B, Some("x"))]),
            frozen_digest([(&B, None), (&A, Some("x"))]),
            frozen_digest([(&AB, Some("x"))]),
            frozen_digest([(&A, Some("bx"))]),
            frozen_digest([]),
        ];
        for other in others {
            assert_ne!(one, other);
        }
        // A name and a digest run together are not another name and digest.
        assert_ne!(
            frozen_digest([(&A, Some("bx"))]),
            frozen_digest([(&AB, Some("x"))])
        );
    }
}
