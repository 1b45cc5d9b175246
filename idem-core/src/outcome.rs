//! What a write did.

use std::fmt;

use crate::id::Id;

/// What an upsert did to the stored document.
///
/// `Inserted` is what the server answered to this call. When an insert's acknowledgement is lost
/// and the call is retried, the retry finds the document and says `Unchanged`: do not hang an
/// effect that must happen exactly once on `Inserted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// No document had this id; this call stored it.
    Inserted,
    /// The stored document's content differed; this call replaced it.
    Updated,
    /// The stored document already had this content; nothing was written.
    Unchanged,
    /// The stored document has a newer version (or the same version with other content); this
    /// replay was not written.
    Stale,
    /// The stored document is marked deleted; it was not resurrected.
    Deleted,
}

impl Outcome {
    /// The outcome's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Inserted => "Inserted",
            Outcome::Updated => "Updated",
            Outcome::Unchanged => "Unchanged",
            Outcome::Stale => "Stale",
            Outcome::Deleted => "Deleted",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Outcome {
    /// Whether this write stored something.
    pub const fn wrote(self) -> bool {
        matches!(self, Outcome::Inserted | Outcome::Updated)
    }
}

/// What a delete did: `delete` and `delete_by_id` on every store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Deletion {
    /// This call set the deletion marker (storing the document deleted if it was not stored,
    /// so a later replay of its creation does not bring it back).
    Deleted,
    /// It was marked deleted already; the first marker stays and nothing was written.
    AlreadyDeleted,
}

impl Deletion {
    /// The outcome's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Deletion::Deleted => "Deleted",
            Deletion::AlreadyDeleted => "AlreadyDeleted",
        }
    }

    /// Whether this call wrote the marker.
    pub const fn wrote(self) -> bool {
        matches!(self, Deletion::Deleted)
    }

    /// The deletion an engine outcome of a delete stands for: written (`Deleted`), or
    /// found deleted (`Unchanged`).
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn of(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Deleted => Deletion::Deleted,
            _ => Deletion::AlreadyDeleted,
        }
    }
}

impl fmt::Display for Deletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a unique push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pushed {
    /// No item with this key was in the list; this call appended it.
    Appended,
    /// An item with this key was in the list already; nothing was written.
    AlreadyPresent,
}

impl Pushed {
    /// The outcome's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Pushed::Appended => "Appended",
            Pushed::AlreadyPresent => "AlreadyPresent",
        }
    }
}

impl fmt::Display for Pushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an operation applied once did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Applied {
    /// The op id was new to the document; this call applied the update and recorded the op id,
    /// in one atomic write.
    Applied,
    /// The document had recorded this op id; nothing was written.
    AlreadyApplied,
}

impl Applied {
    /// The outcome's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Applied::Applied => "Applied",
            Applied::AlreadyApplied => "AlreadyApplied",
        }
    }
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What recording an event did, and the id it is stored under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The event's id: random, fixed by its first write.
    pub id: Id,
    /// `Inserted` for the first write of this key, `Unchanged` for a retry.
    pub outcome: Outcome,
}

impl Recorded {
    /// What recording the event under `id` did.
    pub fn new(id: Id, outcome: Outcome) -> Self {
        Recorded { id, outcome }
    }
}

impl fmt::Display for Recorded {
    /// The outcome and the id: `Inserted 01HKH83CR0N3DA3M2JT88QY84H`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.outcome, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_shows_its_name() {
        assert_eq!(Outcome::Unchanged.to_string(), "Unchanged");
        assert_eq!(Pushed::AlreadyPresent.to_string(), "AlreadyPresent");
        assert_eq!(Applied::Applied.to_string(), "Applied");
        let id = Id::from(ulid::Ulid::from_parts(1, 2));
        assert_eq!(
            Recorded::new(id, Outcome::Inserted).to_string(),
            format!("Inserted {id}")
        );
    }
}
