//! Text of a bounded length held inline: the id, the content hash and each guard digest of a
//! prepared document. A batch makes one of each for every document it prepares; a heap
//! allocation for each (and its free) was a measurable part of preparing a row.

use std::fmt;

/// Text of at most [`ShortText::CAPACITY`] bytes, held without an allocation. Dereferences to
/// `str`; equal texts are equal values.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ShortText {
    len: u8,
    bytes: [u8; ShortText::CAPACITY],
}

impl ShortText {
    /// Enough for a hash's text: an algorithm's prefix (`blake3:`) and 64 hex digits; and for
    /// an id's 26 characters.
    pub const CAPACITY: usize = 80;

    /// `parts` joined, cut at a character boundary to at most [`ShortText::CAPACITY`] bytes:
    /// what idem holds in one is shorter (an id is 26 bytes, a hash's text at most 71; the
    /// hash module's tests hold every algorithm to it).
    pub fn new(parts: &[&str]) -> ShortText {
        let mut bytes = [0; ShortText::CAPACITY];
        let mut len = 0;
        for part in parts {
            let room = ShortText::CAPACITY - len;
            let taken = match part.len() <= room {
                true => part.len(),
                false => (0..=room)
                    .rev()
                    .find(|&at| part.is_char_boundary(at))
                    .unwrap_or(0),
            };
            bytes[len..len + taken].copy_from_slice(&part.as_bytes()[..taken]);
            len += taken;
            if taken < part.len() {
                break;
            }
        }
        ShortText {
            len: u8::try_from(len).unwrap_or(u8::MAX),
            bytes,
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only whole `str`s are ever copied in, so the bytes are UTF-8: the check cannot fail.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::ops::Deref for ShortText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ShortText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ShortText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ShortText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

#[cfg(test)]
mod tests {
    use super::ShortText;

    #[test]
    fn joins_parts_and_cuts_at_its_capacity_on_a_character_boundary() {
        let hex = "0123456789abcdef".repeat(4);
        let text = ShortText::new(&["blake3:", &hex]);
        assert_eq!(text.as_str(), format!("blake3:{hex}"));
        let full = "x".repeat(ShortText::CAPACITY);
        assert_eq!(ShortText::new(&[&full, "y"]).as_str(), full);
        let almost = "x".repeat(ShortText::CAPACITY - 1);
        // "é" is two bytes: it does not fit in the one left, and nothing after it is taken.
        assert_eq!(ShortText::new(&[&almost, "é", "z"]).as_str(), almost);
        assert_eq!(ShortText::new(&[]).as_str(), "");
    }

    #[test]
    fn equal_texts_are_equal_values_whatever_their_parts() {
        let joined = ShortText::new(&["ab", "c"]);
        assert_eq!(joined, ShortText::new(&["abc"]));
        assert_ne!(joined, ShortText::new(&["abc\0"]));
    }
}
