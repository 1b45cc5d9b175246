//! Where the canonical bytes go: a hash function, fed in batches, or a buffer while map
//! entries wait to be sorted.

use sha2::{Digest, Sha256};

use super::tags::INTEGER;
use super::{ContentHash, HashAlgorithm};

/// Four SHA-256 blocks: one call to the hasher for a document of a few hundred bytes. Smaller
/// batches measured slower (the `content_hash` bench): each call has a fixed cost.
pub(super) const SHA256_BATCH: usize = 256;
/// Sixteen BLAKE3 chunks: BLAKE3 hashes the chunks it is given together in parallel (SIMD), and
/// one chunk at a time measured 2.8× slower than hashing the whole encoding at once.
#[cfg(feature = "blake3")]
pub(super) const BLAKE3_BATCH: usize = 16 << 10;

/// A 256-bit hash function the sink can feed.
pub(super) trait Hasher32 {
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

/// Where canonical bytes go: a hasher, or a buffer while map entries wait to be sorted.
pub(super) trait Sink {
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
pub(super) struct HashSink<H, const BATCH: usize> {
    hasher: H,
    buffer: [u8; BATCH],
    /// Bytes in `buffer`, always below `BATCH`.
    len: usize,
}

impl<H: Hasher32, const BATCH: usize> HashSink<H, BATCH> {
    #[inline]
    pub(super) fn new() -> Self {
        HashSink {
            hasher: H::new(),
            buffer: [0; BATCH],
            len: 0,
        }
    }

    #[inline]
    pub(super) fn finish(&mut self) -> ContentHash {
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
