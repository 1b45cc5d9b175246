//! The check: the stored state, read raw straight from the server by the backend, against the
//! model.

use std::collections::{BTreeMap, BTreeSet};

use idem_core::Id;

use super::model::Model;
use super::report::Invariants;
use super::{note_problem, Account, Award, Note, NoteKey};

/// Everything a run left stored, as the backend read it (each field as stored, not as idem
/// would read it back).
#[derive(Clone, Debug, Default)]
pub struct Stored {
    pub notes: Vec<StoredNote>,
    pub awards: Vec<StoredAward>,
    pub accounts: Vec<StoredAccount>,
    pub receipts: Vec<StoredReceipt>,
}

/// A stored note. `None` where the field is missing or not of the type written.
#[derive(Clone, Debug, Default)]
pub struct StoredNote {
    pub id: Option<String>,
    pub owner: String,
    pub note_id: String,
    pub created_at: Option<i64>,
    pub rev: Option<i64>,
    pub text: Option<String>,
    /// A deletion marker is stored (of any type).
    pub deleted: bool,
    /// The deletion marker, if it is an integer.
    pub marker: Option<i64>,
}

/// A stored award.
#[derive(Clone, Debug, Default)]
pub struct StoredAward {
    pub id: Option<String>,
    pub user: String,
    pub badge: String,
}

/// A stored account.
#[derive(Clone, Debug, Default)]
pub struct StoredAccount {
    pub id: Option<String>,
    pub owner: String,
    /// The balance, 0 when missing.
    pub balance: i64,
    /// The op ids the account recorded, in their stored order.
    pub applied_ops: Vec<String>,
}

/// A stored receipt.
#[derive(Clone, Debug, Default)]
pub struct StoredReceipt {
    pub id: String,
    pub request_key: String,
    pub user: Option<String>,
    pub amount: Option<i64>,
}

/// How many of each were stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoredCounts {
    pub live_notes: u64,
    pub deleted_notes: u64,
    pub awards: u64,
    pub accounts: u64,
    pub receipts: u64,
}

/// Whether `stored` is the id derived from the key fields.
fn id_matches(stored: Option<&str>, derived: Result<Id, idem_core::Error>) -> bool {
    match (stored, derived) {
        (Some(stored), Ok(derived)) => stored == derived.to_string(),
        _ => false,
    }
}

/// Counts the keys stored more than once as duplicates (the extra copies).
fn duplicates<K: Ord + std::fmt::Display>(
    seen: &BTreeMap<K, u64>,
    what: &str,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) {
    for (key, count) in seen.iter().filter(|(_, count)| **count > 1) {
        invariants.duplicates += count - 1;
        note_problem(problems, format!("{what} {key} is stored {count} times"));
    }
}

/// Compares the stored state with the model, counting every violation.
pub(super) fn check(
    stored: &Stored,
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) -> StoredCounts {
    let (live_notes, deleted_notes) = check_notes(&stored.notes, model, invariants, problems);
    check_awards(&stored.awards, model, invariants, problems);
    check_accounts(&stored.accounts, model, invariants, problems);
    check_receipts(&stored.receipts, model, invariants, problems);
    StoredCounts {
        live_notes,
        deleted_notes,
        awards: stored.awards.len() as u64,
        accounts: stored.accounts.len() as u64,
        receipts: stored.receipts.len() as u64,
    }
}

/// One document per note, under its derived id, at the newest version written with that
/// version's content; deleted notes stay deleted, their tombstone as written. Returns the live
/// and deleted notes stored.
fn check_notes(
    notes: &[StoredNote],
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) -> (u64, u64) {
    let mut problem = |text: String| note_problem(problems, text);
    let mut seen: BTreeMap<NoteKey, u64> = BTreeMap::new();
    let (mut live, mut deleted) = (0, 0);
    for stored in notes {
        let key = NoteKey {
            owner: stored.owner.clone(),
            note_id: stored.note_id.clone(),
        };
        *seen.entry(key.clone()).or_default() += 1;
        let derived = Note::derive_id(&key.owner, &key.note_id, &stored.created_at.unwrap_or(-1));
        if !id_matches(stored.id.as_deref(), derived) {
            invariants.orphans += 1;
            problem(format!(
                "note {key} is stored under _id {:?}, not the id derived from its key",
                stored.id
            ));
        }
        if stored.deleted {
            deleted += 1;
        } else {
            live += 1;
        }
        let Some(expected) = model.notes.get(&key) else {
            invariants.orphans += 1;
            problem(format!("note {key} is stored but was never written"));
            continue;
        };
        match (expected.deleted, stored.deleted) {
            (true, false) => {
                invariants.resurrections += 1;
                problem(format!("note {key} was deleted but is stored live"));
            }
            (true, true) if stored.marker != Some(key.marker()) => {
                invariants.tombstones_altered += 1;
                problem(format!(
                    "note {key}: tombstone {:?} is not the one written ({})",
                    stored.marker,
                    key.marker()
                ));
            }
            (false, true) => {
                invariants.wrong_content += 1;
                problem(format!(
                    "note {key} was never deleted but is stored deleted"
                ));
            }
            _ => {}
        }
        let racy_and_deleted = expected.deleted && expected.racy.is_some();
        let text_of = |rev: i64| stored.text.as_deref() == Some(key.text(rev).as_str());
        match stored.rev {
            // A racy note keeps the version stored when it was deleted: any version written.
            Some(rev) if racy_and_deleted => {
                let written = expected
                    .racy
                    .as_ref()
                    .is_some_and(|revs| revs.contains(&rev));
                if !written || !text_of(rev) {
                    invariants.wrong_content += 1;
                    problem(format!(
                        "racy note {key} is stored deleted at r{rev}, a version never written"
                    ));
                }
            }
            Some(rev) if rev < expected.rev => {
                invariants.lost_updates += 1;
                problem(format!(
                    "note {key} is stored at r{rev}, the newest written is r{}",
                    expected.rev
                ));
            }
            Some(rev) if rev == expected.rev => {
                if !text_of(rev) || stored.created_at != Some(key.created_at()) {
                    invariants.wrong_content += 1;
                    problem(format!("note {key} r{rev} has content not of its version"));
                }
            }
            rev => {
                invariants.wrong_content += 1;
                problem(format!(
                    "note {key} is stored at {rev:?}, the newest written is r{}",
                    expected.rev
                ));
            }
        }
    }
    duplicates(&seen, "note", invariants, problems);
    for key in model.notes.keys().filter(|key| !seen.contains_key(*key)) {
        invariants.missing += 1;
        note_problem(
            problems,
            format!("note {key} was written but is not stored"),
        );
    }
    (live, deleted)
}

/// Each award derived stored once, under its derived id.
fn check_awards(
    awards: &[StoredAward],
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in awards {
        let key = (stored.user.clone(), stored.badge.clone());
        *seen.entry(format!("{}/{}", key.0, key.1)).or_default() += 1;
        let derived = Award::derive_id(&key.0, &key.1);
        if !id_matches(stored.id.as_deref(), derived) || !model.awards.contains(&key) {
            invariants.orphans += 1;
            note_problem(
                problems,
                format!(
                    "award {}/{} is stored under an unexpected id or was never derived",
                    key.0, key.1
                ),
            );
        }
    }
    duplicates(&seen, "award", invariants, problems);
    for (user, badge) in &model.awards {
        if !seen.contains_key(&format!("{user}/{badge}")) {
            invariants.missing_awards += 1;
            note_problem(
                problems,
                format!("award {user}/{badge} was derived but is not stored"),
            );
        }
    }
}

/// Each account stored once, under its derived id, holding the sum of its distinct operations
/// and no op id twice.
fn check_accounts(
    accounts: &[StoredAccount],
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) {
    let mut problem = |text: String| note_problem(problems, text);
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in accounts {
        let owner = &stored.owner;
        *seen.entry(owner.clone()).or_default() += 1;
        if !id_matches(stored.id.as_deref(), Account::derive_id(owner)) {
            invariants.orphans += 1;
            problem(format!("account {owner} is stored under an unexpected id"));
        }
        let Some(&expected) = model.balances.get(owner) else {
            invariants.orphans += 1;
            problem(format!("account {owner} was never opened"));
            continue;
        };
        let balance = stored.balance;
        if balance != expected {
            if balance > expected {
                invariants.double_credits += 1;
            } else {
                invariants.lost_credits += 1;
            }
            problem(format!(
                "account {owner} holds {balance}, the sum of its distinct operations is {expected}"
            ));
        }
        let distinct: BTreeSet<&str> = stored.applied_ops.iter().map(String::as_str).collect();
        if distinct.len() < stored.applied_ops.len() {
            invariants.double_credits += (stored.applied_ops.len() - distinct.len()) as u64;
            problem(format!("account {owner} recorded an op id twice"));
        }
    }
    duplicates(&seen, "account", invariants, problems);
    for owner in model
        .balances
        .keys()
        .filter(|owner| !seen.contains_key(*owner))
    {
        invariants.missing += 1;
        note_problem(problems, format!("account {owner} is not stored"));
    }
}

/// Each receipt recorded stored once, under the one id every call recording it was given, with
/// its payload.
fn check_receipts(
    receipts: &[StoredReceipt],
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) {
    let mut problem = |text: String| note_problem(problems, text);
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in receipts {
        let key = &stored.request_key;
        *seen.entry(key.clone()).or_default() += 1;
        let Some(expected) = model.receipts.get(key) else {
            invariants.orphans += 1;
            problem(format!("receipt {key} is stored but was never recorded"));
            continue;
        };
        let given: Vec<String> = expected.ids.iter().map(Id::to_string).collect();
        if given != [stored.id.clone()] {
            invariants.receipts_altered += 1;
            problem(format!(
                "receipt {key} is stored under {}; the calls recording it were given {given:?}",
                stored.id
            ));
        }
        if expected.payloads_differ
            || stored.user.as_deref() != Some(expected.user.as_str())
            || stored.amount != Some(expected.amount)
        {
            invariants.receipts_altered += 1;
            problem(format!(
                "receipt {key} holds {:?}/{:?}, recorded as {}/{}",
                stored.user, stored.amount, expected.user, expected.amount
            ));
        }
    }
    duplicates(&seen, "receipt", invariants, problems);
    for key in model.receipts.keys().filter(|key| !seen.contains_key(*key)) {
        invariants.missing += 1;
        note_problem(
            problems,
            format!("receipt {key} was recorded but is not stored"),
        );
    }
}
