//! The rule that makes a batch agree with single writes: `upsert_many(docs)` gives each document
//! the outcome that upserting the documents one by one, in input order, would give, and leaves
//! the same stored state. Backend-neutral.
//!
//! A batch is sent in rounds: round `n` holds the `n`-th distinct content written to each id, so
//! no round touches an id twice (a multi-row statement may not) and the rounds replay the input
//! order. A document whose content hash equals that of the previous document with its id is not
//! sent at all: written one by one it would meet what that document left, so its outcome follows
//! from that document's ([`copy_outcome`]).

use std::collections::HashMap;
use std::fmt;

use crate::error::Error;
use crate::outcome::Outcome;

/// How a batch is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchPlan {
    /// Input indexes per round, in input order within each round.
    pub rounds: Vec<Vec<usize>>,
    /// Each document not sent, with the earlier document (same id, same content) whose outcome
    /// decides its own, in input order.
    pub copies: Vec<(usize, usize)>,
}

/// Plans a batch from each input's id and content hash (`None` for an input refused before
/// sending).
pub fn plan_batch<'a>(inputs: impl IntoIterator<Item = Option<(&'a str, &'a str)>>) -> BatchPlan {
    let mut planner = BatchPlanner::default();
    for (index, input) in inputs.into_iter().enumerate() {
        if let Some((id, hash)) = input {
            planner.add(index, id, hash);
        }
    }
    planner.plan
}

/// [`plan_batch`] one input at a time: an input's place depends only on the inputs before it,
/// so a backend can send the first round's rows while it prepares the next ones.
#[derive(Debug, Default)]
pub struct BatchPlanner {
    /// The plan so far.
    pub plan: BatchPlan,
    /// Per id: the last input with that id, its content hash, and how many rounds it has used.
    last: HashMap<String, (usize, String, usize)>,
}

/// Where [`BatchPlanner::add`] put an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Sent in this round.
    Round(usize),
    /// Not sent: it copies the earlier input with this index.
    CopyOf(usize),
}

impl BatchPlanner {
    /// Places input `index` (after every earlier one) with its id and content hash.
    pub fn add(&mut self, index: usize, id: &str, hash: &str) -> Placement {
        let round = match self.last.get(id) {
            Some((previous, previous_hash, _)) if previous_hash == hash => {
                self.plan.copies.push((index, *previous));
                return Placement::CopyOf(*previous);
            }
            Some(&(_, _, rounds_used)) => rounds_used,
            None => 0,
        };
        if self.plan.rounds.len() == round {
            self.plan.rounds.push(Vec::new());
        }
        self.plan.rounds[round].push(index);
        self.last
            .insert(id.to_owned(), (index, hash.to_owned(), round + 1));
        Placement::Round(round)
    }
}

/// The outcome of a document not sent, from that of the earlier document with the same id and
/// content: after it was written or found written, the same content is `Unchanged`; `Stale`,
/// `Deleted` and refusals repeat, since the same content meets the same stored document.
pub fn copy_outcome(original: &Result<Outcome, Error>) -> Result<Outcome, Error> {
    match original {
        Ok(Outcome::Inserted | Outcome::Updated | Outcome::Unchanged) => Ok(Outcome::Unchanged),
        Ok(other) => Ok(*other),
        Err(error) => Err(error.clone()),
    }
}

/// What one `upsert_many` did: an outcome or error per input document, in input order.
#[derive(Debug)]
pub struct BatchReport {
    outcomes: Vec<Result<Outcome, Error>>,
    collapsed: usize,
}

impl BatchReport {
    /// A report of `outcomes`, one per input in input order, `collapsed` of them not sent.
    #[cfg(any(feature = "mongodb", feature = "postgres"))]
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

    #[test]
    fn each_distinct_content_of_an_id_goes_in_its_own_round_in_input_order() {
        let inputs = [
            Some(("a", "1")),
            Some(("b", "1")),
            Some(("a", "2")),
            None,
            Some(("a", "2")),
            Some(("a", "1")),
            Some(("b", "1")),
        ];
        let plan = plan_batch(inputs);
        assert_eq!(plan.rounds, vec![vec![0, 1], vec![2], vec![5]]);
        assert_eq!(plan.copies, vec![(4, 2), (6, 1)]);
    }

    #[test]
    fn a_report_iterates_with_each_inputs_index_and_offers_the_errors_alone() {
        let refusal = Error::Contention {
            document: Box::new(crate::model::DocumentRef {
                collection: "posts",
                natural_key: crate::model::NaturalKey::new(Vec::new()),
                id: None,
            }),
        };
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
