//! The offline-sync scenario shared by the `offline_sync` (MongoDB) and `offline_sync_postgres`
//! (PostgreSQL) examples: the stored types, the award rule, the steps a journaling client pushes,
//! the expected final state computed from them in plain Rust (no idem, no database), and the
//! side-by-side comparison with the state read back.

use std::collections::{BTreeMap, BTreeSet};

use idem_core::{BatchReport, Deletion, Idempotent};
use serde::{Deserialize, Serialize};

/// A journal entry, as the device keeps it and the server stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "entries")]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[idem(key)]
    pub user_id: String,
    /// Chosen by the device when the entry is created.
    #[idem(key)]
    pub entry_id: String,
    /// Unix ms; gives the id its time part.
    #[idem(timestamp)]
    pub created_at: i64,
    /// Bumped by the device on every edit: only a strictly newer revision replaces the stored one.
    #[idem(version)]
    pub revision: i64,
    pub text: String,
    /// Set when the entry is deleted; written only by `Store::delete`, never cleared.
    #[idem(tombstone)]
    pub deleted_at: Option<i64>,
}

/// A badge a user earned. Derived from the stored entries, never edited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
#[serde(rename_all = "camelCase")]
pub struct Award {
    #[idem(key)]
    pub user_id: String,
    #[idem(key)]
    pub badge: String,
}

/// A user's points account. Its `points` move only through `Store::apply_once`: an upsert
/// writes them when it creates the account and never again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
#[serde(rename_all = "camelCase")]
pub struct Account {
    #[idem(key)]
    pub user_id: String,
    #[idem(effect)]
    pub points: i64,
}

/// Points credited per entry, once per entry however often it is pushed.
pub const POINTS_PER_ENTRY: i64 = 10;
pub const DAY_MS: i64 = 86_400_000;
/// 2024-03-04T00:00:00Z, a Monday: day 0 of the scenario.
pub const DAY_0: i64 = 1_709_510_400_000;
pub const USER: &str = "ada";

// ------------------------------------------------------------------------------------------------
// The award rule

/// The badges earned by a user whose live entries were created at `created_at`: a pure rule
/// (same entries, same badges) that is monotonic in the entries (more entries never earn fewer).
/// A badge once stored stays earned, even if entries are deleted later.
pub fn badges_for(created_at: impl IntoIterator<Item = i64>) -> BTreeSet<&'static str> {
    let created_at: Vec<i64> = created_at.into_iter().collect();
    let mut badges = BTreeSet::new();
    for (threshold, badge) in [(1, "first-entry"), (5, "five-entries"), (10, "ten-entries")] {
        if created_at.len() >= threshold {
            badges.insert(badge);
        }
    }
    // Entries on three consecutive calendar days (UTC).
    let days: BTreeSet<i64> = created_at.iter().map(|ms| ms.div_euclid(DAY_MS)).collect();
    let mut run = 0;
    let mut previous = None;
    for &day in &days {
        run = if previous == Some(day - 1) {
            run + 1
        } else {
            1
        };
        previous = Some(day);
        if run >= 3 {
            badges.insert("streak-3");
        }
    }
    badges
}

// ------------------------------------------------------------------------------------------------
// The sync call, as the client sees it

/// How often the client calls the endpoint with one batch before giving up.
pub const MAX_ATTEMPTS: u32 = 5;

/// What one sync call did, as the endpoint answers the client.
pub struct SyncReply {
    /// The live copies of entries, upserted.
    pub entries: BatchReport,
    /// One outcome per deletion in the batch: `Deleted`, or `AlreadyDeleted` if it already was.
    pub deletions: Vec<Deletion>,
    /// Entries credited by this call, and entries whose points an earlier call had credited.
    pub credited: usize,
    pub already_credited: usize,
    /// The awards this call inserted: the ones to celebrate.
    pub celebrated: Vec<Award>,
}

/// Prints what a step did: the reply of its successful sync call after `failed` failed ones, the
/// balance `before` and `after` it, and how many stored documents (rows) it wrote, in `unit`.
pub fn report_step(
    reply: &SyncReply,
    failed: u32,
    (before, after): (i64, i64),
    written: u64,
    unit: &str,
) {
    if failed > 0 {
        println!("   succeeded  on attempt {}", failed + 1);
    }
    if !reply.entries.outcomes().is_empty() {
        println!("   entries    {}", reply.entries);
        for error in reply
            .entries
            .outcomes()
            .iter()
            .filter_map(|r| r.as_ref().err())
        {
            println!("   refused    {error}");
        }
    }
    if !reply.deletions.is_empty() {
        let outcomes: Vec<&str> = reply.deletions.iter().map(|o| o.name()).collect();
        println!("   deletions  {}", outcomes.join(", "));
    }
    println!(
        "   points     {} entries credited now, {} credited before",
        reply.credited, reply.already_credited
    );
    let celebrated: Vec<&str> = reply.celebrated.iter().map(|a| a.badge.as_str()).collect();
    if celebrated.is_empty() {
        println!("   celebrated (nothing new)");
    } else {
        println!("   celebrated {}", celebrated.join(", "));
    }
    println!(
        "   balance    {after} points ({:+}); {unit} written: {written}",
        after - before
    );
}

// ------------------------------------------------------------------------------------------------
// The scenario

/// Day `day` of the scenario at `hh:mm` UTC, in Unix ms.
fn at(day: i64, hh: i64, mm: i64) -> i64 {
    DAY_0 + day * DAY_MS + (hh * 60 + mm) * 60_000
}

/// The first revision of an entry of `USER`.
fn entry(entry_id: &str, created_at: i64, text: &str) -> Entry {
    Entry {
        user_id: USER.to_owned(),
        entry_id: entry_id.to_owned(),
        created_at,
        revision: 1,
        text: text.to_owned(),
        deleted_at: None,
    }
}

/// One push of the scenario: who pushes what, and the faults on the way.
pub struct Step {
    pub label: &'static str,
    pub title: &'static str,
    pub batch: Vec<Entry>,
    /// How many acknowledgements the server loses during this step (each example simulates
    /// that its own way, and says how).
    pub lost_acks: i32,
}

/// The steps, in order: replays, two revisions of one entry in a batch, a stale copy from a
/// second device, a deletion and the re-push of the deleted entry, and a batch crossing the
/// five-entries threshold while acknowledgements are lost, then its replay.
pub fn scenario() -> Vec<Step> {
    let e01 = entry(
        "e01",
        at(0, 8, 10),
        "Started a journal. The coffee was good.",
    );
    let e02_r1 = entry(
        "e02",
        at(0, 21, 40),
        "Rain all afternoon; read two chapters.",
    );
    let e02_r2 = Entry {
        revision: 2,
        text: "Rain all afternoon; read two chapters of Middlemarch.".to_owned(),
        ..e02_r1.clone()
    };
    let e02_r3 = Entry {
        revision: 3,
        text: "Rain all afternoon; finished book one of Middlemarch.".to_owned(),
        ..e02_r1.clone()
    };
    let e03 = entry("e03", at(1, 9, 5), "Walked to the market for bread.");
    let e03_deleted = Entry {
        deleted_at: Some(at(2, 18, 0)),
        ..e03.clone()
    };
    let e04 = entry("e04", at(2, 7, 50), "Slept badly. Long run anyway.");
    let e05 = entry("e05", at(3, 12, 15), "Lunch with Sam at the noodle place.");
    let e06 = entry("e06", at(3, 22, 30), "Planning the weekend trip.");

    let first = vec![e01.clone(), e02_r1.clone(), e03.clone()];
    let threshold = vec![e05, e06];
    vec![
        Step {
            label: "1",
            title: "phone: first push of three entries",
            batch: first.clone(),
            lost_acks: 0,
        },
        Step {
            label: "2",
            title: "phone, relaunched: replays the same batch",
            batch: first,
            lost_acks: 0,
        },
        Step {
            label: "3",
            title: "phone: e02 edited twice offline (both revisions queued, newest first), new e04",
            batch: vec![e02_r3, e04, e02_r2],
            lost_acks: 0,
        },
        Step {
            label: "4",
            title: "laptop, offline since step 1: pushes its copies (e02 still at revision 1)",
            batch: vec![e01, e02_r1],
            lost_acks: 0,
        },
        Step {
            label: "5a",
            title: "phone: deletes e03",
            batch: vec![e03_deleted],
            lost_acks: 0,
        },
        Step {
            label: "5b",
            title: "laptop: re-pushes its live copy of e03",
            batch: vec![e03],
            lost_acks: 0,
        },
        Step {
            label: "6a",
            title: "phone: e05 and e06, the fifth live entry; the server loses 2 acknowledgements",
            batch: threshold.clone(),
            lost_acks: 2,
        },
        Step {
            label: "6b",
            title: "phone, relaunched: replays the same batch",
            batch: threshold,
            lost_acks: 0,
        },
    ]
}

// ------------------------------------------------------------------------------------------------
// The state, expected and actual

/// What the server should hold for `USER`, and what it does.
#[derive(Debug, Default, PartialEq)]
pub struct State {
    /// Entry id -> (revision, text) of every live entry.
    pub live: BTreeMap<String, (i64, String)>,
    pub deleted: BTreeSet<String>,
    pub awards: BTreeSet<String>,
    pub points: i64,
    /// Stored documents (rows) per collection (table): entries, awards, accounts.
    pub stored: (u64, u64, u64),
}

/// The expected final state, from the scenario's data alone: a plain model of what the steps
/// mean, with no lost acknowledgement, no retry, no idem and no database.
pub fn expected_state(steps: &[Step]) -> State {
    struct Held {
        created_at: i64,
        revision: i64,
        text: String,
        deleted: bool,
    }
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    let mut credited: BTreeSet<String> = BTreeSet::new();
    let mut awards: BTreeSet<String> = BTreeSet::new();
    for step in steps {
        let (deletions, copies): (Vec<&Entry>, Vec<&Entry>) = step
            .batch
            .iter()
            .partition(|entry| entry.deleted_at.is_some());
        for entry in deletions {
            held.entry(entry.entry_id.clone())
                .or_insert_with(|| Held {
                    created_at: entry.created_at,
                    revision: entry.revision,
                    text: entry.text.clone(),
                    deleted: true,
                })
                .deleted = true;
        }
        for entry in &copies {
            let copy = Held {
                created_at: entry.created_at,
                revision: entry.revision,
                text: entry.text.clone(),
                deleted: false,
            };
            match held.get_mut(&entry.entry_id) {
                None => {
                    held.insert(entry.entry_id.clone(), copy);
                }
                // Only a strictly newer revision of a live entry replaces it.
                Some(stored) if !stored.deleted && entry.revision > stored.revision => {
                    *stored = copy;
                }
                Some(_) => {}
            }
        }
        // An entry earns its points the first time the server holds it live.
        for entry in &copies {
            if held.get(&entry.entry_id).is_some_and(|held| !held.deleted) {
                credited.insert(entry.entry_id.clone());
            }
        }
        let live = held.values().filter(|held| !held.deleted);
        awards.extend(
            badges_for(live.map(|held| held.created_at))
                .into_iter()
                .map(str::to_owned),
        );
    }
    let live: BTreeMap<String, (i64, String)> = held
        .iter()
        .filter(|(_, held)| !held.deleted)
        .map(|(id, held)| (id.clone(), (held.revision, held.text.clone())))
        .collect();
    let deleted: BTreeSet<String> = held
        .iter()
        .filter(|(_, held)| held.deleted)
        .map(|(id, _)| id.clone())
        .collect();
    let stored = (held.len() as u64, awards.len() as u64, 1);
    State {
        live,
        deleted,
        points: POINTS_PER_ENTRY * credited.len() as i64,
        awards,
        stored,
    }
}

/// Prints the two states side by side, counting what is stored in `unit` ("documents",
/// "rows"); returns whether they are equal.
pub fn compare(expected: &State, actual: &State, unit: &str) -> bool {
    let describe = |state: &State, id: &str| match (state.live.get(id), state.deleted.contains(id))
    {
        (Some((revision, text)), false) => format!("live, rev {revision}: {}", quoted(text)),
        (None, true) => "deleted".to_owned(),
        (None, false) => "(absent)".to_owned(),
        (Some(_), true) => "(live and deleted)".to_owned(),
    };
    let list = |set: &BTreeSet<String>| {
        if set.is_empty() {
            "(none)".to_owned()
        } else {
            set.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    };
    let stored = |(entries, awards, accounts): (u64, u64, u64)| {
        format!("{entries} entries, {awards} awards, {accounts} account(s)")
    };

    let ids: BTreeSet<&String> = [expected, actual]
        .iter()
        .flat_map(|state| state.live.keys().chain(&state.deleted))
        .collect();
    let mut rows: Vec<(String, String, String)> = ids
        .into_iter()
        .map(|id| {
            (
                format!("entry {id}"),
                describe(expected, id),
                describe(actual, id),
            )
        })
        .collect();
    rows.push((
        "awards".into(),
        list(&expected.awards),
        list(&actual.awards),
    ));
    rows.push((
        "points".into(),
        expected.points.to_string(),
        actual.points.to_string(),
    ));
    rows.push((
        unit.to_owned(),
        stored(expected.stored),
        stored(actual.stored),
    ));

    let width = rows
        .iter()
        .map(|(_, expected, _)| expected.chars().count())
        .chain(["expected".len()])
        .max()
        .unwrap_or(0);
    println!(
        "    {:<9}  {:<width$}  actual (read back, raw)",
        "", "expected"
    );
    for (what, expected, actual) in &rows {
        let mark = if expected == actual { ' ' } else { 'X' };
        println!("  {mark} {what:<9}  {expected:<width$}  {actual}");
    }
    // Equal rows can hide a difference (a text cut short), so the verdict compares the states.
    expected == actual
}

/// `"text"`, cut to 30 characters.
fn quoted(text: &str) -> String {
    const MAX: usize = 30;
    if text.chars().count() <= MAX {
        format!("{text:?}")
    } else {
        let cut: String = text.chars().take(MAX - 1).collect();
        format!("\"{cut}…\"")
    }
}

/// `e02 r3` for a live copy, `e03 (deletion)` for a deletion.
pub fn describe_pushed(entry: &Entry) -> String {
    match entry.deleted_at {
        Some(_) => format!("{} (deletion)", entry.entry_id),
        None => format!("{} r{}", entry.entry_id, entry.revision),
    }
}
