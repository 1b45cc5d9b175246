//! Whether the guard digests stored beside a document (`idemFrozen`) are its stored values': one
//! per field (MongoDB), or one of them all (the SQL stores).

use crate::engine::StoredDigest;
use crate::model::{Field, FROZEN_DIGESTS_FIELD};
use crate::short_text::ShortText;

/// How a guarded field's stored digest is not its stored value's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DigestMismatch {
    /// Another digest (or something that is no digest): the next write that changes the
    /// document is refused for the field.
    Differs,
    /// No digest beside a written value: the guard takes the field for one never written,
    /// which the next write may set.
    Missing,
    /// The one digest of every guarded field a SQL store keeps is not the digest of their
    /// stored values: it names no field, and the next write compares the values themselves.
    Whole,
}

impl DigestMismatch {
    /// How a report's sample names the field.
    pub fn detail(self, field: &Field) -> String {
        match self {
            DigestMismatch::Differs => format!("`{}`", field.stored_name()),
            DigestMismatch::Missing => format!(
                "`{}`: no digest beside its value, which the next write may change",
                field.stored_name()
            ),
            DigestMismatch::Whole => format!(
                "`{FROZEN_DIGESTS_FIELD}`: not the digest of the guarded fields' stored values \
                 (one digest of them all, naming none), which the next write compares one by one"
            ),
        }
    }
}

/// The first guarded field (a frozen field or the timestamp) whose stored digest is not the
/// digest of its stored value, and how, from each guarded field's stored digest and the
/// digests its stored value may have (one per reading of it where the store cannot tell how
/// it was written; `Err`, a value that cannot be digested, which the other checks report). A
/// document stored without digests (by another tool) has none to check: its values are
/// compared as values.
pub(crate) fn field_not_as_digested<'s>(
    guarded: impl IntoIterator<Item = (&'static Field, StoredDigest<'s>, Vec<DigestReading>)>,
) -> Option<(&'static Field, DigestMismatch)> {
    let guarded: Vec<_> = guarded.into_iter().collect();
    if let Some((first, StoredDigest::Whole(stored), _)) = guarded.first() {
        let readings = guarded
            .iter()
            .map(|(field, _, readings)| (*field, readings));
        return (!whole_as_digested(stored, readings)).then_some((first, DigestMismatch::Whole));
    }
    for (field, stored, readings) in guarded {
        if stored == StoredDigest::NoDigests {
            return None;
        }
        let digests: Vec<Option<ShortText>> = readings.into_iter().filter_map(Result::ok).collect();
        let as_digested = digests.is_empty()
            || digests.iter().any(|digest| match (stored, digest) {
                (StoredDigest::Unwritten, None) => true,
                (StoredDigest::Digest(stored), Some(digest)) => stored == digest.as_str(),
                _ => false,
            });
        if !as_digested {
            let how = match stored {
                StoredDigest::Unwritten => DigestMismatch::Missing,
                _ => DigestMismatch::Differs,
            };
            return Some((field, how));
        }
    }
    None
}

/// The most combinations of the readings of the guarded fields' stored values a check of one
/// digest of them all tries: each reading but the first is a guess at how a value was written.
const MOST_COMBINATIONS: usize = 64;

/// Whether `stored`, the one digest of every guarded field, is that of their stored values
/// ([`crate::hash::frozen_digest`]), for some combination of the readings of each; a digest made
/// by `to_jsonb` (`\x` then hex) read as its hex. A field whose value cannot be digested leaves
/// nothing to check.
fn whole_as_digested<'r>(
    stored: &str,
    guarded: impl Iterator<Item = (&'static Field, &'r Vec<DigestReading>)>,
) -> bool {
    let stored = stored.strip_prefix("\\x").unwrap_or(stored);
    let mut fields = Vec::new();
    for (field, readings) in guarded {
        let digests: Vec<Option<&str>> = (readings.iter())
            .filter_map(|reading| reading.as_ref().ok())
            .map(|digest| digest.as_deref())
            .collect();
        if digests.is_empty() {
            return true;
        }
        fields.push((field, digests));
    }
    let mut chosen = vec![0; fields.len()];
    for _ in 0..MOST_COMBINATIONS {
        let digests = fields.iter().zip(&chosen);
        let digest = crate::hash::frozen_digest(digests.map(|((field, d), &at)| (*field, d[at])));
        if digest.as_str() == stored {
            return true;
        }
        // The next combination, the first field's readings turning fastest.
        let Some(at) = (0..fields.len()).find(|&at| chosen[at] + 1 < fields[at].1.len()) else {
            return false;
        };
        chosen[at] += 1;
        chosen[..at].fill(0);
    }
    false
}

/// One reading of a stored value's digest ([`crate::hash::guard_digest`]'s answer).
pub(crate) type DigestReading = Result<Option<ShortText>, String>;
