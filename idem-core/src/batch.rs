//! What one `upsert_many` did: an outcome or error per input document, in input order (see the
//! engine's batch plan for how a batch gives each the outcome single writes would).

use std::fmt;

use crate::error::Error;
use crate::outcome::Outcome;

/// What one `upsert_many` did: an outcome or error per input document, in input order.
#[derive(Debug)]
pub struct BatchReport {
    outcomes: Vec<Result<Outcome, Error>>,
    collapsed: usize,
}

impl BatchReport {
    /// A report of `outcomes`, one per input in input order, `collapsed` of them not sent.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn new(outcomes: Vec<Result<Outcome, Error>>, collapsed: usize) -> Self {
        BatchReport {
            outcomes,
            collapsed,
        }
    }

    /// The outcome (or refusal) of each input document, in input order.
    pub fn outcomes(&self) -> &[Result<Outcome, Error>] {
        &self.outcomes
    }

    /// The outcomes, owned.
    pub fn into_outcomes(self) -> Vec<Result<Outcome, Error>> {
        self.outcomes
    }

    /// Each input's index in the batch with its outcome or refusal, in input order:
    /// `for (index, outcome) in report.iter() { … docs[index] … }`.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Result<Outcome, Error>)> {
        self.outcomes.iter().enumerate()
    }

    /// The refusals and failures alone, each with its input's index.
    pub fn errors(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.iter()
            .filter_map(|(index, outcome)| outcome.as_ref().err().map(|error| (index, error)))
    }

    /// How many input documents had `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.outcomes
            .iter()
            .filter(|result| matches!(result, Ok(o) if *o == outcome))
            .count()
    }

    /// How many input documents were refused.
    pub fn refused(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|result| result.is_err())
            .count()
    }

    /// How many input documents repeated an earlier one of the same batch, same id and same
    /// content, and were not sent: each reports `Unchanged` if that earlier document was written
    /// or found written, and its `Stale`, `Deleted` or refusal otherwise. A document with the same id and other content is not
    /// collapsed: it goes in a later statement, as if upserted after the earlier one.
    pub fn collapsed(&self) -> usize {
        self.collapsed
    }
}

impl fmt::Display for BatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcomes = [
            Outcome::Inserted,
            Outcome::Updated,
            Outcome::Unchanged,
            Outcome::Stale,
            Outcome::Deleted,
        ];
        for outcome in outcomes {
            write!(
                f,
                "{} {}, ",
                self.count(outcome),
                outcome.name().to_lowercase()
            )?;
        }
        write!(
            f,
            "{} refused ({} collapsed in the batch)",
            self.refused(),
            self.collapsed
        )
    }
}

impl<'r> IntoIterator for &'r BatchReport {
    type Item = (usize, &'r Result<Outcome, Error>);
    type IntoIter = std::iter::Enumerate<std::slice::Iter<'r, Result<Outcome, Error>>>;

    /// [`BatchReport::iter`].
    fn into_iter(self) -> Self::IntoIter {
        self.outcomes.iter().enumerate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_report_iterates_with_each_inputs_index_and_offers_the_errors_alone() {
        let refusal = Error::new(
            crate::document::DocumentRef {
                collection: "posts",
                natural_key: crate::document::NaturalKey::new(Vec::new()),
                id: None,
            },
            ErrorKind::Contention,
        );
        let report = BatchReport {
            outcomes: vec![Ok(Outcome::Inserted), Err(refusal), Ok(Outcome::Unchanged)],
            collapsed: 0,
        };
        let indexes: Vec<usize> = report.iter().map(|(index, _)| index).collect();
        assert_eq!(indexes, [0, 1, 2]);
        let errors: Vec<usize> = report.errors().map(|(index, _)| index).collect();
        assert_eq!(errors, [1]);
        assert_eq!((&report).into_iter().count(), 3);
    }
}
