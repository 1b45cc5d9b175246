//! Whether the guard digests stored beside a document (`idemFrozen`) are its stored values'.

use crate::engine::StoredDigest;
use crate::model::Field;
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

/// One reading of a stored value's digest ([`crate::hash::guard_digest`]'s answer).
pub(crate) type DigestReading = Result<Option<ShortText>, String>;
