//! The judgement of a stored document against an incoming write, in terms every backend shares.
//!
//! The write engine reads what is stored under the write's id through a driver and reduces it to
//! a [`Stored`]: whether it carries a deletion marker, how each guarded field compares, its
//! version's order key and its content hash. [`Stored::judge`] then says what the write does. A
//! backend's server-side guard must agree with `Stored::server_may_replace` (its tests')
//! exactly: a document the guard left alone is judged here for its outcome, and a batch sends only the writes this
//! side expects the guard to let through, so a guard that disagreed would loop or misreport what
//! was written.

use std::cmp::Ordering;

use crate::model::Field;
use crate::outcome::Outcome;

/// How a stored guarded field (the timestamp or a frozen field) compares with the incoming one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// Never written (absent or null): the write may set it.
    Unwritten,
    /// The same canonical value.
    Same,
    /// A value whose stored digest is not the incoming one's, or stored without idem's digests
    /// (by another tool, or before digests existed), so that a server guard cannot compare it;
    /// `same` is the comparison of the values made here, which are the truth: another value is
    /// refused. The server guard stops at such a document, and the backend writes it in a second
    /// step pinned to what it read.
    Foreign {
        /// Whether the stored value equals the incoming one.
        same: bool,
    },
}

/// A stored version's order key, as far as it can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredVersion<'a> {
    /// Neither an order key nor a version stored: never versioned, so any version replaces it.
    Absent,
    /// No order key, but a version field stored (by another tool, or before the type had
    /// versions): its value's key. A server guard cannot read it, so only a second step pinned
    /// to what was read replaces such a document.
    Foreign(crate::VersionKey),
    /// No order key, and a version field whose value does not read as the version's type: it
    /// cannot be ordered, so no write replaces it (`Stale`) until `adopt` completes it.
    Unordered,
    /// An order key ([`crate::VersionKey`] text).
    Key(&'a str),
    /// Something else stored in the order key's place, which sorts before every key (a MongoDB
    /// field holds any type; a PostgreSQL `text` column only text).
    #[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
    BeforeKeys,
    /// Something else, which sorts after every key.
    #[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
    AfterKeys,
}

/// What a backend read of the stored document, reduced to what the judgement needs.
#[derive(Clone, Debug)]
pub struct Stored<'a> {
    /// The deletion marker is set.
    pub tombstoned: bool,
    /// Each guarded field with its comparison, in the model's order.
    pub guarded: Vec<(&'static Field, Guarded)>,
    /// The stored version's order key; `None` for a type without versions.
    pub version: Option<StoredVersion<'a>>,
    /// The stored content hash, if any.
    pub hash: Option<&'a str>,
}

/// What a stored document means for an incoming write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The write replaces it.
    Replace,
    /// Nothing to write: `Unchanged`, `Stale` or `Deleted`.
    Settled(Outcome),
    /// The write would change this guarded field.
    Refused(&'static Field),
}

impl Stored<'_> {
    /// The verdict for an incoming write with this content hash and version order key. The
    /// rules, in order: a deleted document stays deleted; the same content hash (and, with
    /// versions, the same order key) is `Unchanged`; a changed guarded field refuses the write;
    /// with versions, only a strictly newer version replaces (the same version with the same
    /// content is `Unchanged`, without a stored content hash a replacement, anything else
    /// `Stale`); without, other content replaces.
    ///
    /// The same content hash settles the write before the guarded fields are read: the hash
    /// covers every guarded value, and idem writes a document's hash and its guard digests
    /// together, so a document stored with this hash holds these guarded values. Were its
    /// digests changed behind idem's back, the next write that changes the document is the one
    /// refused (naming the field, its stored guard digest not its value's); until then there is
    /// nothing to write. A re-ingest's lookup compares the hash and the order key, never the
    /// digests, and the server-side guards let no write through for the same hash and order
    /// key (they replace for another hash, or a newer order key), so every backend gives this
    /// answer.
    pub fn judge(&self, incoming_hash: &str, incoming_version: Option<&str>) -> Verdict {
        if self.tombstoned {
            return Verdict::Settled(Outcome::Deleted);
        }
        let same_content = self.hash == Some(incoming_hash);
        let same_version = match (self.version, incoming_version) {
            (None, None) => true,
            (Some(StoredVersion::Key(stored)), Some(incoming)) => stored == incoming,
            _ => false,
        };
        if same_content && same_version {
            return Verdict::Settled(Outcome::Unchanged);
        }
        let changed = self
            .guarded
            .iter()
            .find(|(_, state)| matches!(state, Guarded::Foreign { same: false }));
        if let Some((field, _)) = changed {
            return Verdict::Refused(field);
        }
        let (Some(stored), Some(incoming)) = (self.version, incoming_version) else {
            return if same_content {
                Verdict::Settled(Outcome::Unchanged)
            } else {
                Verdict::Replace
            };
        };
        let foreign_version = matches!(stored, StoredVersion::Foreign(_));
        let order = match stored {
            StoredVersion::Absent => return Verdict::Replace,
            StoredVersion::Key(key) => key.cmp(incoming),
            StoredVersion::Foreign(key) => key.to_stored().as_str().cmp(incoming),
            StoredVersion::BeforeKeys => Ordering::Less,
            StoredVersion::AfterKeys | StoredVersion::Unordered => Ordering::Greater,
        };
        match order {
            Ordering::Less => Verdict::Replace,
            Ordering::Equal if same_content => Verdict::Settled(Outcome::Unchanged),
            // Another tool's document at this version, without a content hash to tell a retry
            // from an edit: the write completes it.
            Ordering::Equal if foreign_version && self.hash.is_none() => Verdict::Replace,
            _ => Verdict::Settled(Outcome::Stale),
        }
    }

    /// Whether a server-side guard lets the write replace this document: the verdict is
    /// `Replace` and no guarded field needs the comparison only this side can make. The rule
    /// every backend's server guard states in its own language; its tests hold them to it.
    #[cfg(test)]
    pub fn server_may_replace(&self, incoming_hash: &str, incoming_version: Option<&str>) -> bool {
        self.judge(incoming_hash, incoming_version) == Verdict::Replace && !self.has_foreign()
    }

    /// Whether a guarded field or the version is stored without idem's digests or order key,
    /// so that only this side can compare it.
    pub fn has_foreign(&self) -> bool {
        matches!(self.version, Some(StoredVersion::Foreign(_)))
            || self
                .guarded
                .iter()
                .any(|(_, state)| matches!(state, Guarded::Foreign { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    static AUTHOR: Field = Field::new("author", "author", Role::Frozen);

    fn stored<'a>(
        guarded: Guarded,
        version: Option<StoredVersion<'a>>,
        hash: &'a str,
    ) -> Stored<'a> {
        Stored {
            tombstoned: false,
            guarded: vec![(&AUTHOR, guarded)],
            version,
            hash: Some(hash),
        }
    }

    #[test]
    fn a_changed_guarded_field_refuses_any_other_content() {
        let changed = stored(Guarded::Foreign { same: false }, None, "h");
        assert_eq!(changed.judge("other", None), Verdict::Refused(&AUTHOR));
        let foreign = stored(Guarded::Foreign { same: false }, None, "h");
        assert_eq!(foreign.judge("other", None), Verdict::Refused(&AUTHOR));
        let versioned = stored(
            Guarded::Foreign { same: false },
            Some(StoredVersion::Key("05")),
            "h",
        );
        assert_eq!(versioned.judge("h", Some("06")), Verdict::Refused(&AUTHOR));
        assert_eq!(
            versioned.judge("other", Some("05")),
            Verdict::Refused(&AUTHOR)
        );
    }

    #[test]
    fn the_same_content_hash_and_version_settle_before_the_guarded_fields_are_read() {
        // A digest changed behind idem's back, the content as it was: nothing to write.
        let guarded = Guarded::Foreign { same: false };
        let unversioned = stored(guarded, None, "h");
        assert_eq!(
            unversioned.judge("h", None),
            Verdict::Settled(Outcome::Unchanged)
        );
        assert!(!unversioned.server_may_replace("h", None));
        let versioned = stored(guarded, Some(StoredVersion::Key("05")), "h");
        assert_eq!(
            versioned.judge("h", Some("05")),
            Verdict::Settled(Outcome::Unchanged)
        );
        assert!(!versioned.server_may_replace("h", Some("05")));
        // Another order key is judged as any version is, guarded fields first.
        let stale = stored(Guarded::Same, Some(StoredVersion::Key("05")), "h");
        assert_eq!(
            stale.judge("h", Some("04")),
            Verdict::Settled(Outcome::Stale)
        );
        // A version stored without its order key is not the same order key.
        let foreign = stored(
            Guarded::Same,
            Some(StoredVersion::Foreign(crate::VersionKey::new(5))),
            "h",
        );
        let rev_5 = crate::VersionKey::new(5).to_stored();
        assert_eq!(
            foreign.judge("h", Some(&rev_5)),
            Verdict::Settled(Outcome::Unchanged)
        );
        assert_eq!(
            stored(
                Guarded::Foreign { same: false },
                Some(StoredVersion::Foreign(crate::VersionKey::new(5))),
                "h"
            )
            .judge("h", Some(&rev_5)),
            Verdict::Refused(&AUTHOR)
        );
    }

    #[test]
    fn versions_replace_only_when_strictly_newer() {
        let at_5 = stored(Guarded::Same, Some(StoredVersion::Key("05")), "h");
        assert_eq!(at_5.judge("x", Some("06")), Verdict::Replace);
        assert_eq!(
            at_5.judge("h", Some("05")),
            Verdict::Settled(Outcome::Unchanged)
        );
        assert_eq!(
            at_5.judge("x", Some("05")),
            Verdict::Settled(Outcome::Stale)
        );
        assert_eq!(
            at_5.judge("h", Some("04")),
            Verdict::Settled(Outcome::Stale)
        );
        let unversioned = stored(Guarded::Same, Some(StoredVersion::Absent), "h");
        assert_eq!(unversioned.judge("h", Some("01")), Verdict::Replace);
    }

    #[test]
    fn a_version_stored_without_its_order_key_orders_replays_all_the_same() {
        let rev_10 = crate::VersionKey::new(10);
        let foreign = stored(Guarded::Same, Some(StoredVersion::Foreign(rev_10)), "h");
        let rev_5 = crate::VersionKey::new(5).to_stored();
        let rev_11 = crate::VersionKey::new(11).to_stored();
        assert_eq!(
            foreign.judge("x", Some(&rev_5)),
            Verdict::Settled(Outcome::Stale)
        );
        assert_eq!(foreign.judge("x", Some(&rev_11)), Verdict::Replace);
        assert!(!foreign.server_may_replace("x", Some(&rev_11)));
        let unordered = stored(Guarded::Same, Some(StoredVersion::Unordered), "h");
        assert_eq!(
            unordered.judge("x", Some(&rev_11)),
            Verdict::Settled(Outcome::Stale)
        );
    }

    #[test]
    fn a_foreign_document_is_replaced_here_but_never_by_the_server_guard() {
        let foreign = stored(Guarded::Foreign { same: true }, None, "old");
        assert_eq!(foreign.judge("new", None), Verdict::Replace);
        assert!(!foreign.server_may_replace("new", None));
        let ours = stored(Guarded::Unwritten, None, "old");
        assert!(ours.server_may_replace("new", None));
    }

    #[test]
    fn a_deleted_document_stays_deleted() {
        let mut deleted = stored(Guarded::Foreign { same: false }, None, "h");
        deleted.tombstoned = true;
        assert_eq!(deleted.judge("x", None), Verdict::Settled(Outcome::Deleted));
    }
}
