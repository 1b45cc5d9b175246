//! An offline-first journaling client syncing to a server endpoint, with exact side effects.
//!
//! A journal app keeps entries on the device and pushes them in batches whenever it is online:
//! after a relaunch it replays what it already sent, a second device pushes its older copies, and
//! the network loses acknowledgements. Every push runs effects on the server: 10 points per entry,
//! and awards ("first-entry", "five-entries", "ten-entries", "streak-3") celebrated when earned.
//! This example shows that with idem each of those converges to the same exact state however the
//! pushes are repeated:
//!
//! - `Entry` (keys `user_id` + `entry_id`, id timestamp `created_at`, version `revision`,
//!   tombstone `deleted_at`) is written with `Store::upsert_many`: a replay is `Unchanged`, an
//!   older revision is `Stale`, two revisions of one entry in a batch collapse to the newest, and
//!   a deleted entry is never resurrected (`Deleted`);
//! - points move only through `Store::apply_once` (`$inc`) keyed by `entry.op_id("points")`, so a
//!   replayed entry never credits twice;
//! - awards are a derived set written with `Store::insert_new`, which returns exactly the awards
//!   this call inserted: only those are celebrated.
//!
//! The server "endpoint" is the function `sync`; the client is `push`, which retries a failed
//! sync call the way a real client would. In the step with lost acknowledgements the server's
//! `failCommand` fail point (scoped to this client's `appName`) applies the next two `update`
//! commands but fails their replies. At the end the expected state, computed from the scenario's
//! data in plain Rust (no idem, no database), is printed beside the state read back from the
//! database, raw. The documents written are counted from the driver's command monitoring.
//!
//! Run it against any MongoDB-compatible server (`scripts/demo-sync` runs and checks it):
//!
//! ```text
//! eval "$(scripts/test-server start)"
//! cargo run -p idem-examples --example offline_sync -- [--database NAME]
//! cargo run -p idem-examples --example offline_sync -- --drop [--database NAME]
//! scripts/test-server stop
//! ```
//!
//! `MONGODB_URI` names the server (`retryWrites=false` is fine: idem does not need retryable
//! writes). `--database` defaults to `idem_offline_sync_demo`; it is dropped at the start of each
//! run, so every run starts fresh. `--drop` only drops it. Lost acknowledgements need a server
//! that accepts `configureFailPoint` (mongod or SecantusDB with test commands enabled); on any
//! other server that step runs without them and says so.
//!
//! Exit status: 0 when the state read back matches the expected state ("state matches: …"); 1
//! when it differs; 2 on a usage or connection problem, or a sync that failed for good.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::mongo::{BatchReport, Store};
use idem_core::{Applied, DocumentRef, Error, Idempotent, Outcome};
use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use serde::{Deserialize, Serialize};

/// A journal entry, as the device keeps it and the server stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "entries")]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[idem(key)]
    user_id: String,
    /// Chosen by the device when the entry is created.
    #[idem(key)]
    entry_id: String,
    /// Unix ms; gives the id its time part.
    #[idem(timestamp)]
    created_at: i64,
    /// Bumped by the device on every edit: only a strictly newer revision replaces the stored one.
    #[idem(version)]
    revision: i64,
    text: String,
    /// Set when the entry is deleted; written only by `Store::delete`, never cleared.
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

/// A badge a user earned. Derived from the stored entries, never edited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
#[serde(rename_all = "camelCase")]
struct Award {
    #[idem(key)]
    user_id: String,
    #[idem(key)]
    badge: String,
}

/// A user's points account. Its `points` move only through `Store::apply_once`: an upsert
/// writes them when it creates the account and never again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
#[serde(rename_all = "camelCase")]
struct Account {
    #[idem(key)]
    user_id: String,
    #[idem(effect)]
    points: i64,
}

/// Points credited per entry, once per entry however often it is pushed.
const POINTS_PER_ENTRY: i64 = 10;
const DAY_MS: i64 = 86_400_000;
/// 2024-03-04T00:00:00Z, a Monday: day 0 of the scenario.
const DAY_0: i64 = 1_709_510_400_000;
const USER: &str = "ada";

// ------------------------------------------------------------------------------------------------
// The award rule

/// The badges earned by a user whose live entries were created at `created_at`: a pure rule
/// (same entries, same badges) that is monotonic in the entries (more entries never earn fewer).
/// A badge once stored stays earned, even if entries are deleted later.
fn badges_for(created_at: impl IntoIterator<Item = i64>) -> BTreeSet<&'static str> {
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
// The server endpoint

/// What one sync call did, as the endpoint answers the client.
struct SyncReply {
    /// The live copies of entries, upserted.
    entries: BatchReport,
    /// One outcome per deletion in the batch: `Deleted`, or `Unchanged` if it already was.
    deletions: Vec<Outcome>,
    /// Entries credited by this call, and entries whose points an earlier call had credited.
    credited: usize,
    already_credited: usize,
    /// The awards this call inserted: the ones to celebrate.
    celebrated: Vec<Award>,
}

/// The sync endpoint: stores a pushed batch and runs its effects. Safe to call again with the
/// same batch, whatever the previous call did before it failed.
///
/// An entry with `deleted_at` set is a deletion; the others are live copies. Each user in the
/// batch gets 10 points per entry the server holds (a deleted entry keeps the points it earned
/// while it was live; an entry deleted before it ever reached the server earns none), and every
/// award the rule derives from the user's stored live entries.
async fn sync(store: &Store, batch: &[Entry]) -> Result<SyncReply, Error> {
    let (deletions, copies): (Vec<&Entry>, Vec<&Entry>) =
        batch.iter().partition(|entry| entry.deleted_at.is_some());

    // Deletions first: a deletion wins over any copy of the same entry in the batch. Deleting an
    // entry the server never saw stores it deleted, so its creation, replayed later, stays dead.
    let mut deleted = Vec::with_capacity(deletions.len());
    for entry in deletions {
        deleted.push(store.delete(entry).await?);
    }

    // One read and at most one write for the whole batch. Per-entry refusals (an entry whose
    // `created_at` changed, say) are in the report and earn nothing; they do not fail the call.
    let copies: Vec<Entry> = copies.into_iter().cloned().collect();
    let report = store.upsert_many(&copies).await?;

    // Open an account for every user in the batch, if it is not open yet.
    let users: BTreeSet<&str> = batch.iter().map(|entry| entry.user_id.as_str()).collect();
    let accounts: Vec<Account> = users
        .iter()
        .map(|user| Account {
            user_id: (*user).to_owned(),
            points: 0,
        })
        .collect();
    store.insert_new(&accounts).await?;

    // Points. Credit every entry the server holds as pushed — `Inserted`, `Updated` *or*
    // `Unchanged` — not only the `Inserted` ones: when the acknowledgement of the write that
    // inserted an entry is lost, this call fails before crediting, and its retry finds the entry
    // stored and reports `Unchanged`. Crediting only on `Inserted` would lose those points for
    // good. Crediting on every replay is safe because the op id is derived from the entry (its
    // id: user, entry id, creation time; not its revision or text), so `apply_once` applies it
    // once per entry however often, and by however many devices, the entry is pushed.
    // `Stale` (a newer revision is stored, and its push credited the entry) and `Deleted`
    // (settled while the entry was live, or never live) earn nothing here.
    let mut credited = 0;
    let mut already_credited = 0;
    for (entry, outcome) in copies.iter().zip(report.outcomes()) {
        if !matches!(
            outcome,
            Ok(Outcome::Inserted | Outcome::Updated | Outcome::Unchanged)
        ) {
            continue;
        }
        let account = Account::derive_id(&entry.user_id)?;
        let op = entry.op_id("points")?;
        let credit = doc! { "$inc": { "points": POINTS_PER_ENTRY } };
        if store.apply_once::<Account>(account, &op, credit).await? == Applied::Applied {
            credited += 1;
        } else {
            already_credited += 1;
        }
    }

    // Awards: the full set the rule derives from what is stored, every time. `insert_new`
    // returns only the members this call inserted, so a replay celebrates nothing again.
    let mut celebrated = Vec::new();
    for user in users {
        let live = live_entries(store, user).await?;
        let earned: Vec<Award> = badges_for(live.iter().map(|entry| entry.created_at))
            .into_iter()
            .map(|badge| Award {
                user_id: user.to_owned(),
                badge: badge.to_owned(),
            })
            .collect();
        celebrated.extend(store.insert_new(&earned).await?);
    }

    Ok(SyncReply {
        entries: report,
        deletions: deleted,
        credited,
        already_credited,
        celebrated,
    })
}

/// The stored entries of `user` that are not deleted.
async fn live_entries(store: &Store, user: &str) -> Result<Vec<Entry>, Error> {
    // The stored (camelCase) names; a live entry has no `deletedAt`, which `null` matches.
    let filter = doc! { "userId": user, "deletedAt": null };
    let read = async {
        let mut cursor = store.collection::<Entry>().find(filter).await?;
        let mut entries = Vec::new();
        while cursor.advance().await? {
            entries.push(cursor.deserialize_current()?);
        }
        Ok(entries)
    };
    // As an idem error, so that the client decides on retries the same way for every failure.
    read.await.map_err(|source| Error::Backend {
        document: Box::new(DocumentRef::collection(&Entry::MODEL)),
        source: idem_core::mongo::driver_error(source),
    })
}

// ------------------------------------------------------------------------------------------------
// The client

/// How often the client calls `sync` with one batch before giving up.
const MAX_ATTEMPTS: u32 = 5;

/// Pushes `batch` as a client does: on a failure that may pass (no answer, an unconfirmed write)
/// it sends the very same batch again. Returns the reply and how many attempts failed.
async fn push(store: &Store, batch: &[Entry]) -> Result<(SyncReply, u32), Error> {
    let mut failed = 0;
    loop {
        match sync(store, batch).await {
            Ok(reply) => return Ok((reply, failed)),
            Err(error) if error.is_retryable() && failed + 1 < MAX_ATTEMPTS => {
                failed += 1;
                println!("   attempt {failed} failed: {}", brief(&error));
                println!(
                    "   -> the client cannot know what was stored: it pushes the same batch again"
                );
                tokio::time::sleep(Duration::from_millis(50 * u64::from(failed))).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The error as one line.
fn brief(error: &Error) -> String {
    match error {
        Error::Backend { document, .. } => match error.as_mongo() {
            Some(source) => format!("{document}: {}", driver_brief(source)),
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

/// A driver error as one line: its own text ends with the server's raw reply, in hex.
fn driver_brief(error: &mongodb::error::Error) -> String {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(failure) => format!("{} (code {})", failure.message, failure.code),
        ErrorKind::Write(WriteFailure::WriteError(failure)) => {
            format!("{} (code {})", failure.message, failure.code)
        }
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => format!(
            "the write was not confirmed: {} (code {})",
            concern.message, concern.code
        ),
        _ => error.to_string(),
    }
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

struct Step {
    label: &'static str,
    title: &'static str,
    batch: Vec<Entry>,
    /// How many `update` acknowledgements the server loses during this step.
    lost_acks: i32,
}

fn scenario() -> Vec<Step> {
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
struct State {
    /// Entry id -> (revision, text) of every live entry.
    live: BTreeMap<String, (i64, String)>,
    deleted: BTreeSet<String>,
    awards: BTreeSet<String>,
    points: i64,
    /// Stored documents per collection: entries, awards, accounts.
    documents: (u64, u64, u64),
}

/// The expected final state, from the scenario's data alone: a plain model of what the steps
/// mean, with no lost acknowledgement, no retry, no idem and no database.
fn expected_state(steps: &[Step]) -> State {
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
    let documents = (held.len() as u64, awards.len() as u64, 1);
    State {
        live,
        deleted,
        points: POINTS_PER_ENTRY * credited.len() as i64,
        awards,
        documents,
    }
}

/// The state as stored, from the raw documents (not through the idem types).
async fn actual_state(store: &Store) -> Result<State, Fatal> {
    let database = store.database();
    let mut state = State::default();
    for stored in raw_documents(database, "entries").await? {
        let entry_id = stored
            .get_str("entryId")
            .unwrap_or("(no entryId)")
            .to_owned();
        if stored
            .get("deletedAt")
            .is_some_and(|marker| marker != &Bson::Null)
        {
            state.deleted.insert(entry_id);
        } else {
            let revision = stored.get("revision").and_then(integer).unwrap_or(-1);
            let text = stored.get_str("text").unwrap_or("(no text)").to_owned();
            state.live.insert(entry_id, (revision, text));
        }
        state.documents.0 += 1;
    }
    for stored in raw_documents(database, "awards").await? {
        let badge = stored.get_str("badge").unwrap_or("(no badge)").to_owned();
        state.awards.insert(badge);
        state.documents.1 += 1;
    }
    for stored in raw_documents(database, "accounts").await? {
        if stored.get_str("userId") == Ok(USER) {
            state.points = stored.get("points").and_then(integer).unwrap_or(0);
        }
        state.documents.2 += 1;
    }
    Ok(state)
}

/// The balance of `USER`, as stored.
async fn balance(store: &Store) -> Result<i64, Fatal> {
    let account = store
        .database()
        .collection::<Document>("accounts")
        .find_one(doc! { "userId": USER })
        .await?;
    Ok(account
        .and_then(|account| account.get("points").and_then(integer))
        .unwrap_or(0))
}

async fn raw_documents(database: &mongodb::Database, name: &str) -> Result<Vec<Document>, Fatal> {
    let mut cursor = database.collection::<Document>(name).find(doc! {}).await?;
    let mut documents = Vec::new();
    while cursor.advance().await? {
        documents.push(cursor.deserialize_current()?);
    }
    Ok(documents)
}

fn integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

/// Prints the two states side by side; returns whether they are equal.
fn compare(expected: &State, actual: &State) -> bool {
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
    let documents = |(entries, awards, accounts): (u64, u64, u64)| {
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
        "documents".into(),
        documents(expected.documents),
        documents(actual.documents),
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

// ------------------------------------------------------------------------------------------------
// Running it

const DEFAULT_DATABASE: &str = "idem_offline_sync_demo";
const USAGE: &str = "\
usage: offline_sync [--database NAME]
       offline_sync --drop [--database NAME]

Drops database NAME (default: idem_offline_sync_demo) on the server named by MONGODB_URI, plays
the offline-sync scenario against it, and compares the final state with the expected one.
--drop only drops the database.";

/// A problem that stops the run: exit status 2.
struct Fatal(String);

impl<E: std::fmt::Display> From<E> for Fatal {
    fn from(error: E) -> Self {
        Fatal(error.to_string())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(Fatal(message)) => {
            eprintln!("offline_sync: error: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<ExitCode, Fatal> {
    let mut database = DEFAULT_DATABASE.to_owned();
    let mut drop_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "--drop" => drop_only = true,
            "--database" => {
                database = args
                    .next()
                    .ok_or_else(|| Fatal(format!("--database needs a value\n\n{USAGE}")))?;
            }
            other => return Err(Fatal(format!("unexpected argument {other:?}\n\n{USAGE}"))),
        }
    }
    let uri = std::env::var("MONGODB_URI").map_err(|_| {
        Fatal(
            "MONGODB_URI is not set: point it at a MongoDB-compatible server, for example \
             `eval \"$(scripts/test-server start)\"`"
                .to_owned(),
        )
    })?;
    // The fail point only hits commands of this client, even on a shared server.
    let app_name = format!("idem-offline-sync-{}", std::process::id());
    let (client, monitor) = monitored_client(&uri, &app_name).await?;
    let store = Store::new(client.database(&database));
    store.database().drop().await?;
    if drop_only {
        println!("dropped database {database}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("database {database} (fresh); user {USER:?}; {POINTS_PER_ENTRY} points per entry");
    store.ensure_indexes::<Entry>().await?;
    store.ensure_indexes::<Award>().await?;
    store.ensure_indexes::<Account>().await?;

    let steps = scenario();
    let mut lost_acks = (0, 0); // (injected, failed attempts retried)
    let mut injection_unavailable = false;
    for step in &steps {
        println!();
        println!("-- step {}: {}", step.label, step.title);
        let pushed: Vec<String> = step.batch.iter().map(describe_pushed).collect();
        println!("   push       {}", pushed.join(", "));
        let before = balance(&store).await?;
        let _ = monitor.take();
        let armed = if step.lost_acks > 0 {
            match lose_acknowledgements(&client, &app_name, step.lost_acks).await {
                Ok(()) => {
                    println!(
                        "   fault      the next {} updates are applied and their replies lost",
                        step.lost_acks
                    );
                    lost_acks.0 += step.lost_acks;
                    true
                }
                Err(error) => {
                    println!(
                        "   fault      fault injection unavailable (configureFailPoint: {}); \
                         no acknowledgement is lost",
                        driver_brief(&error)
                    );
                    injection_unavailable = true;
                    false
                }
            }
        } else {
            false
        };
        let result = push(&store, &step.batch).await;
        if armed {
            clear_fail_point(&client).await?;
        }
        let (reply, failed) =
            result.map_err(|error| Fatal(format!("step {}: {error}", step.label)))?;
        lost_acks.1 += failed;
        let written = monitor.take().documents_written;
        let after = balance(&store).await?;
        report_step(&reply, failed, before, after, written);
    }

    println!();
    println!("-- the final state");
    if injection_unavailable {
        println!("lost acknowledgements: fault injection unavailable on this server");
    } else {
        println!(
            "lost acknowledgements: {} armed, {} sync call(s) failed and were retried",
            lost_acks.0, lost_acks.1
        );
    }
    let expected = expected_state(&steps);
    let actual = actual_state(&store).await?;
    println!();
    let matches = compare(&expected, &actual);
    println!();
    if matches {
        println!(
            "state matches: {} live entries, {} deleted, {} awards, {} points",
            expected.live.len(),
            expected.deleted.len(),
            expected.awards.len(),
            expected.points
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("STATE DIFFERS: the rows marked X do not match the expected state");
        Ok(ExitCode::FAILURE)
    }
}

/// `e02 r3` for a live copy, `e03 (deletion)` for a deletion.
fn describe_pushed(entry: &Entry) -> String {
    match entry.deleted_at {
        Some(_) => format!("{} (deletion)", entry.entry_id),
        None => format!("{} r{}", entry.entry_id, entry.revision),
    }
}

fn report_step(reply: &SyncReply, failed: u32, before: i64, after: i64, written: u64) {
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
        "   balance    {after} points ({:+}); documents written: {written}",
        after - before
    );
}

/// Arms the `failCommand` fail point: the next `times` `update` commands of client `app_name`
/// are applied, then answered with a write-concern error (a lost acknowledgement).
async fn lose_acknowledgements(
    client: &Client,
    app_name: &str,
    times: i32,
) -> mongodb::error::Result<()> {
    client
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": {
                "failCommands": ["update"],
                "appName": app_name,
                // WriteConcernFailed, as when a real write concern times out: unlike a
                // shutdown code, it leaves the server selectable, so the retry goes at once.
                "writeConcernError": {
                    "code": 64,
                    "codeName": "WriteConcernFailed",
                    "errmsg": "acknowledgement lost (injected)",
                },
            },
        })
        .await
        .map(drop)
}

async fn clear_fail_point(client: &Client) -> mongodb::error::Result<()> {
    client
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .map(drop)
}

// ------------------------------------------------------------------------------------------------
// Command monitoring

/// What the server said it wrote, from command monitoring.
#[derive(Clone, Default)]
struct Monitor(Arc<Mutex<Commands>>);

#[derive(Default)]
struct Commands {
    /// Documents inserted, upserted or modified, as the write commands' replies report (also
    /// when the reply carries a write-concern error: the write was applied).
    documents_written: u64,
}

impl Monitor {
    fn observe(&self, event: CommandEvent) {
        let CommandEvent::Succeeded(succeeded) = event else {
            return;
        };
        let reply = &succeeded.reply;
        let count = |field: &str| reply.get(field).and_then(integer).unwrap_or(0).max(0) as u64;
        let written = match succeeded.command_name.as_str() {
            "update" => count("nModified") + reply.get_array("upserted").map_or(0, Vec::len) as u64,
            "insert" => count("n"),
            _ => 0,
        };
        let mut commands = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        commands.documents_written += written;
    }

    /// Everything recorded so far; starts over.
    fn take(&self) -> Commands {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A client of `uri`, named `app_name`, whose commands `Monitor` records.
async fn monitored_client(uri: &str, app_name: &str) -> Result<(Client, Monitor), Fatal> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|error| Fatal(format!("MONGODB_URI: {error}")))?;
    // Fail fast when no server answers, unless the URI says otherwise.
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    options.app_name = Some(app_name.to_owned());
    let monitor = Monitor::default();
    let recorder = monitor.clone();
    options.command_event_handler =
        Some(EventHandler::callback(move |event| recorder.observe(event)));
    Ok((Client::with_options(options)?, monitor))
}
