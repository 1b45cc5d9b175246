//! The model: what the server must hold, from the operation logs alone (no idem, no database).

use std::collections::{BTreeMap, BTreeSet};

use idem_core::Id;

use super::{account_owners, Event, NoteKey, EVERYONE, POINTS_PER_AWARD, POINTS_PER_NOTE};

#[derive(Clone, Debug)]
pub(super) struct ModelNote {
    /// The newest version: the one stored if the note is live.
    pub(super) rev: i64,
    pub(super) deleted: bool,
    /// For a racy note, every version written: a deleted one keeps whichever was stored when
    /// the first deletion landed.
    pub(super) racy: Option<BTreeSet<i64>>,
}

#[derive(Clone, Debug)]
pub(super) struct ModelReceipt {
    pub(super) user: String,
    pub(super) amount: i64,
    /// Every id a call recording it was given.
    pub(super) ids: BTreeSet<Id>,
    /// Calls told `Inserted`.
    pub(super) inserted: u32,
    /// A call recording it first had a failed attempt.
    pub(super) uncertain: bool,
    /// Recorded with another payload by some call (the workload never does).
    pub(super) payloads_differ: bool,
}

/// What the server must hold, and what callers may have been told, after the logged events.
pub(super) struct Model {
    pub(super) notes: BTreeMap<NoteKey, ModelNote>,
    /// Notes first created by an upsert.
    pub(super) inserted: BTreeSet<NoteKey>,
    pub(super) awards: BTreeSet<(String, String)>,
    pub(super) balances: BTreeMap<String, i64>,
    /// Distinct effects: (account, operation) pairs, notes held live, own awards.
    pub(super) effects: u64,
    pub(super) receipts: BTreeMap<String, ModelReceipt>,
}

impl Model {
    /// Replays the logs: per note, a copy replaces the stored one only if it is live and the
    /// copy strictly newer; a deletion marks it (storing the copy if nothing was stored); a
    /// deleted note stays deleted. A note earns its owner 10 points once if it was ever held
    /// live, an award its user 5 points; a money operation counts once per account. A receipt
    /// is stored once, under the one id every call was given.
    pub(super) fn from_logs(logs: &[Vec<Event>], users: &[String]) -> Model {
        let mut notes: BTreeMap<NoteKey, ModelNote> = BTreeMap::new();
        let mut inserted = BTreeSet::new();
        let mut awards = BTreeSet::new();
        let mut moves: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut receipts: BTreeMap<String, ModelReceipt> = BTreeMap::new();
        // Each client's log in its order; clients own disjoint notes but the hot ones, and for
        // those (never deleted) the newest version wins whatever the order.
        for event in logs.iter().flatten() {
            match event {
                // Racy notes: the order across clients is unknown, so only what holds in every
                // order: deleted if any deletion landed; if live, at the newest version.
                Event::Pushed { key, rev } | Event::Deleted { key, rev } if key.is_racy() => {
                    let note = notes.entry(key.clone()).or_insert(ModelNote {
                        rev: *rev,
                        deleted: false,
                        racy: Some(BTreeSet::new()),
                    });
                    note.rev = note.rev.max(*rev);
                    note.deleted |= matches!(event, Event::Deleted { .. });
                    if let Some(revs) = &mut note.racy {
                        revs.insert(*rev);
                    }
                }
                Event::Pushed { key, rev } => match notes.get_mut(key) {
                    None => {
                        notes.insert(
                            key.clone(),
                            ModelNote {
                                rev: *rev,
                                deleted: false,
                                racy: None,
                            },
                        );
                        inserted.insert(key.clone());
                    }
                    Some(note) if !note.deleted => {
                        note.rev = note.rev.max(*rev);
                    }
                    Some(_) => {}
                },
                Event::Deleted { key, rev } => {
                    notes
                        .entry(key.clone())
                        .or_insert(ModelNote {
                            rev: *rev,
                            deleted: true,
                            racy: None,
                        })
                        .deleted = true;
                }
                Event::Earned { user, badge } => {
                    awards.insert((user.clone(), badge.clone()));
                }
                Event::Moved {
                    account,
                    operation,
                    amount,
                } => {
                    let first = *moves
                        .entry((account.clone(), operation.clone()))
                        .or_insert(*amount);
                    assert_eq!(
                        first, *amount,
                        "the chaos client replayed {operation} on {account} with another amount"
                    );
                }
                Event::Recorded {
                    key,
                    user,
                    amount,
                    id,
                    inserted,
                    uncertain,
                } => {
                    let receipt = receipts.entry(key.clone()).or_insert(ModelReceipt {
                        user: user.clone(),
                        amount: *amount,
                        ids: BTreeSet::new(),
                        inserted: 0,
                        uncertain: false,
                        payloads_differ: false,
                    });
                    receipt.ids.insert(*id);
                    receipt.inserted += u32::from(*inserted);
                    receipt.uncertain |= *uncertain;
                    receipt.payloads_differ |= receipt.user != *user || receipt.amount != *amount;
                }
            }
        }
        let mut balances: BTreeMap<String, i64> = account_owners(users)
            .map(|owner| (owner.to_owned(), 0))
            .collect();
        for ((account, _), amount) in &moves {
            *balances.entry(account.clone()).or_default() += amount;
        }
        let mut effects = moves.len() as u64;
        for key in inserted.iter().filter(|key| !key.is_hot()) {
            *balances.entry(key.owner.clone()).or_default() += POINTS_PER_NOTE;
            effects += 1;
        }
        for (user, _) in awards.iter().filter(|(user, _)| user != EVERYONE) {
            *balances.entry(user.clone()).or_default() += POINTS_PER_AWARD;
            effects += 1;
        }
        Model {
            notes,
            inserted,
            awards,
            balances,
            effects,
            receipts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_keeps_the_newest_version_and_never_resurrects() {
        let key = NoteKey::owned("u0", 0);
        let other = NoteKey::owned("u0", 1);
        let id = Id::from(ulid::Ulid::from_parts(1, 2));
        let log = vec![
            Event::Pushed {
                key: key.clone(),
                rev: 2,
            },
            Event::Pushed {
                key: key.clone(),
                rev: 1,
            },
            Event::Deleted {
                key: other.clone(),
                rev: 1,
            },
            Event::Pushed {
                key: other.clone(),
                rev: 2,
            },
            Event::Moved {
                account: "u0".into(),
                operation: "u0:op1".into(),
                amount: 7,
            },
            Event::Moved {
                account: "u0".into(),
                operation: "u0:op1".into(),
                amount: 7,
            },
            Event::Recorded {
                key: "u0:receipt2".into(),
                user: "u0".into(),
                amount: 3,
                id,
                inserted: true,
                uncertain: false,
            },
            Event::Recorded {
                key: "u0:receipt2".into(),
                user: "u0".into(),
                amount: 3,
                id,
                inserted: false,
                uncertain: false,
            },
        ];
        let model = Model::from_logs(&[log], &["u0".to_owned()]);
        assert_eq!(model.notes[&key].rev, 2);
        assert!(!model.notes[&key].deleted);
        assert!(model.notes[&other].deleted);
        assert_eq!(model.inserted.len(), 1);
        // 7 once, and 10 points for the one note ever held live.
        assert_eq!(model.balances["u0"], 17);
        assert_eq!(model.effects, 2);
        let receipt = &model.receipts["u0:receipt2"];
        assert_eq!((receipt.ids.len(), receipt.inserted), (1, 1));
        assert!(!receipt.payloads_differ);
    }
}
