//! The rule that makes a batch agree with single writes: `upsert_many(docs)` gives each document
//! the outcome that upserting the documents one by one, in input order, would give, and leaves
//! the same stored state. Backend-neutral: the engine plans every batch and `insert_new` with it.
//!
//! A batch is sent in rounds: a document goes in the round after the last one that holds its id
//! or its natural key, so no round touches a document twice (a multi-row statement may not, and
//! two ids of one natural key would collide in one) and the rounds replay the input order. A
//! document whose id and content hash equal those of the previous document with its id is not
//! sent at all: written one by one it would meet what that document left, so its outcome follows
//! from that document's ([`copy_outcome`]). Copies are found by id, never by natural key alone: a
//! document with the natural key of an earlier one under another id (a moved timestamp) is a
//! write of its own, refused as a single upsert would refuse it.

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use crate::error::Error;
use crate::held_key::HeldKey;
use crate::id::Id;
use crate::outcome::Outcome;
use crate::short_text::ShortText;

/// How a batch is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchPlan {
    /// Input indexes per round, in input order within each round.
    pub rounds: Vec<Vec<usize>>,
    /// Each document not sent, with the earlier document (same id, same content) whose outcome
    /// decides its own, in input order.
    pub copies: Vec<(usize, usize)>,
}

/// One input of a batch, as the plan needs it.
#[derive(Clone, Copy, Debug)]
pub struct Planned<'a> {
    /// The derived id.
    pub id: Id,
    /// The natural key.
    pub key: &'a HeldKey,
    /// The content hash's text.
    pub hash: ShortText,
}

/// Plans a batch (`None` for an input refused before sending): the planner's rule over a whole
/// batch at once, as its tests state it.
#[cfg(test)]
pub fn plan_batch<'a>(inputs: impl IntoIterator<Item = Option<Planned<'a>>>) -> BatchPlan {
    let mut planner = BatchPlanner::default();
    for (index, input) in inputs.into_iter().enumerate() {
        if let Some(input) = input {
            planner.add(index, input);
        }
    }
    planner.plan
}

/// `plan_batch` (the rule over a whole batch, as its tests state it) one input at a time: an
/// input's place depends only on the inputs before it, so a backend can send the first round's
/// rows while it prepares the next ones. It keeps what
/// it needs of each input in fixed-size keys (the id, a copy of the content hash's text, which
/// [`ShortText`] holds whole for every algorithm, a keyed hash of the natural key), borrowing
/// nothing: the inputs can be dropped as their rounds are
/// written, and no key costs an allocation (planning was a tenth of a batch's time when each
/// input cost three owned map keys).
#[derive(Debug, Default)]
pub struct BatchPlanner {
    /// The plan so far.
    pub plan: BatchPlan,
    /// Per id: the last input with that id, its content hash, and the next round it may go in.
    by_id: HashMap<Id, LastOfId, RandomState>,
    /// Per natural key, by its hash under `key_hasher`: the next round it may go in. Two keys
    /// that hash alike put the later input in a later round than it needs, which writes it all
    /// the same (a round more, never another outcome); one key always hashes alike.
    rounds_by_key: HashMap<u64, usize, RandomState>,
    /// The maps' hashing is foldhash's, seeded at random: SipHash, the standard library's, was
    /// half of the planner's time, and what crafted collisions could cost here is rounds more,
    /// never an outcome.
    key_hasher: RandomState,
}

/// What the planner remembers of an id.
#[derive(Debug)]
struct LastOfId {
    index: usize,
    hash: ShortText,
    next_round: usize,
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
    /// A planner for `inputs` inputs, its maps sized once: growing them input by input was
    /// most of its time.
    pub fn with_capacity(inputs: usize) -> Self {
        BatchPlanner {
            plan: BatchPlan::default(),
            by_id: HashMap::with_capacity_and_hasher(inputs, RandomState::default()),
            rounds_by_key: HashMap::with_capacity_and_hasher(inputs, RandomState::default()),
            key_hasher: RandomState::default(),
        }
    }

    /// Places input `index` (after every earlier one).
    pub fn add(&mut self, index: usize, input: Planned<'_>) -> Placement {
        let hash = input.hash;
        let key = self.key_hasher.hash_one(input.key);
        let last = self.by_id.get(&input.id);
        if let Some(last) = last.filter(|last| last.hash == hash) {
            self.plan.copies.push((index, last.index));
            return Placement::CopyOf(last.index);
        }
        let round = last
            .map(|last| last.next_round)
            .into_iter()
            .chain(self.rounds_by_key.get(&key).copied())
            .max()
            .unwrap_or(0);
        if self.plan.rounds.len() == round {
            self.plan.rounds.push(Vec::new());
        }
        self.plan.rounds[round].push(index);
        self.by_id.insert(
            input.id,
            LastOfId {
                index,
                hash,
                next_round: round + 1,
            },
        );
        self.rounds_by_key.insert(key, round + 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A natural key of one text field.
    fn key(value: &str) -> HeldKey {
        HeldKey::of(&[&value])
    }

    /// An id named by one letter.
    fn id(name: &str) -> Id {
        Id::from(ulid::Ulid(u128::from(name.as_bytes()[0])))
    }

    #[test]
    fn each_distinct_content_of_an_id_goes_in_its_own_round_in_input_order() {
        let keys: Vec<HeldKey> = ["a", "b"].map(key).into();
        let input = |name: &'static str, hash: &str| {
            Some(Planned {
                id: id(name),
                key: &keys[usize::from(name == "b")],
                hash: ShortText::new(&[hash]),
            })
        };
        let inputs = [
            input("a", "1"),
            input("b", "1"),
            input("a", "2"),
            None,
            input("a", "2"),
            input("a", "1"),
            input("b", "1"),
        ];
        let plan = plan_batch(inputs);
        assert_eq!(plan.rounds, vec![vec![0, 1], vec![2], vec![5]]);
        assert_eq!(plan.copies, vec![(4, 2), (6, 1)]);
    }

    #[test]
    fn one_natural_key_under_two_ids_is_two_writes_in_two_rounds_never_a_copy() {
        let one_key = key("k");
        let input = |name, hash: &str| {
            Some(Planned {
                id: id(name),
                key: &one_key,
                hash: ShortText::new(&[hash]),
            })
        };
        let plan = plan_batch([input("a", "1"), input("b", "1"), input("a", "1")]);
        assert_eq!(plan.rounds, vec![vec![0], vec![1]]);
        assert_eq!(plan.copies, vec![(2, 0)]);
    }
}
