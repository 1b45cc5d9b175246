//! What a write did.

use std::fmt;

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
}

impl Outcome {
    /// The outcome's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Inserted => "Inserted",
            Outcome::Updated => "Updated",
            Outcome::Unchanged => "Unchanged",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
