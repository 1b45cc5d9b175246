//! What one `insert_new` did: for each member, in input order, whether this call inserted it,
//! found it stored already, or refused it. Backend-neutral.
//!
//! A refusal concerns its member alone: the members stored beside it are in the report, so the
//! effects hung on them run even when another member of the same call is refused. A retry would
//! find them stored and could not tell them apart from members stored long ago.

use std::fmt;

use crate::error::Error;

/// What `insert_new` did with one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Insertion {
    /// No document had this member's id; this call stored it.
    Inserted,
    /// The member was stored already (by an earlier call, a racing caller, or an earlier copy of
    /// it in the same call); nothing was written.
    AlreadyStored,
}

impl Insertion {
    /// The result's name, as shown in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Insertion::Inserted => "Inserted",
            Insertion::AlreadyStored => "AlreadyStored",
        }
    }
}

impl fmt::Display for Insertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The result of a member that repeats an earlier member of the same call: once that one is
/// stored, by this call or before it, this one is stored already; a refusal repeats, since the
/// same member meets the same stored document.
pub fn copy_insertion(original: &Result<Insertion, Error>) -> Result<Insertion, Error> {
    match original {
        Ok(_) => Ok(Insertion::AlreadyStored),
        Err(error) => Err(error.clone()),
    }
}

/// What one `insert_new` did: a result per member, in input order, and the members this call
/// inserted, whose effects are this caller's to run.
#[derive(Debug)]
pub struct InsertReport<T> {
    results: Vec<Result<Insertion, Error>>,
    inserted: Vec<T>,
}

impl<T: Clone> InsertReport<T> {
    /// The report of `members`, with `results` one per member in the same order.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn new(members: &[T], results: Vec<Result<Insertion, Error>>) -> Self {
        debug_assert_eq!(members.len(), results.len(), "one result per member");
        let inserted = members
            .iter()
            .zip(&results)
            .filter(|(_, result)| matches!(result, Ok(Insertion::Inserted)))
            .map(|(member, _)| member.clone())
            .collect();
        InsertReport { results, inserted }
    }
}

impl<T> InsertReport<T> {
    /// The members this call inserted, in input order: exactly one of racing callers gets each.
    pub fn inserted(&self) -> &[T] {
        &self.inserted
    }

    /// The members this call inserted, owned.
    pub fn into_inserted(self) -> Vec<T> {
        self.inserted
    }

    /// The result (or refusal) of each member, in input order.
    pub fn results(&self) -> &[Result<Insertion, Error>] {
        &self.results
    }

    /// Each member's index in the call with its result or refusal, in input order:
    /// `for (index, result) in report.iter() { … members[index] … }`.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Result<Insertion, Error>)> {
        self.results.iter().enumerate()
    }

    /// The refusals and failures alone, each with its member's index.
    pub fn errors(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.iter()
            .filter_map(|(index, result)| result.as_ref().err().map(|error| (index, error)))
    }

    /// How many members had `insertion`.
    pub fn count(&self, insertion: Insertion) -> usize {
        self.results
            .iter()
            .filter(|result| matches!(result, Ok(found) if *found == insertion))
            .count()
    }

    /// How many members were refused.
    pub fn refused(&self) -> usize {
        self.results.iter().filter(|result| result.is_err()).count()
    }
}

impl<T> fmt::Display for InsertReport<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} inserted, {} stored already, {} refused",
            self.count(Insertion::Inserted),
            self.count(Insertion::AlreadyStored),
            self.refused()
        )
    }
}

#[cfg(all(
    test,
    any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")
))]
mod tests {
    use super::*;
    use crate::document::{DocumentRef, NaturalKey};
    use crate::ErrorKind;

    fn refusal() -> Error {
        Error::new(
            DocumentRef {
                collection: "awards",
                natural_key: NaturalKey::new(Vec::new()),
                id: None,
            },
            ErrorKind::NotFound,
        )
    }

    #[test]
    fn the_report_returns_the_inserted_members_in_input_order_beside_the_refusals() {
        let results = vec![
            Ok(Insertion::Inserted),
            Err(refusal()),
            Ok(Insertion::AlreadyStored),
            Ok(Insertion::Inserted),
        ];
        let report = InsertReport::new(&["a", "b", "c", "d"], results);
        assert_eq!(report.inserted(), ["a", "d"]);
        assert_eq!(report.count(Insertion::AlreadyStored), 1);
        assert_eq!(report.refused(), 1);
        assert_eq!(
            report.errors().map(|(index, _)| index).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(
            report.to_string(),
            "2 inserted, 1 stored already, 1 refused"
        );
        assert_eq!(report.into_inserted(), ["a", "d"]);
    }

    #[test]
    fn a_copy_of_a_stored_member_is_stored_already_and_a_refusal_repeats() {
        assert_eq!(
            copy_insertion(&Ok(Insertion::Inserted)).ok(),
            Some(Insertion::AlreadyStored)
        );
        assert_eq!(
            copy_insertion(&Ok(Insertion::AlreadyStored)).ok(),
            Some(Insertion::AlreadyStored)
        );
        assert!(matches!(
            copy_insertion(&Err(refusal())).map_err(Error::into_kind),
            Err(ErrorKind::NotFound)
        ));
    }
}
