//! What every chaos run shares, whatever the backend: the seeded PRNG, the documents, the
//! workload the clients play, the model of what the server must hold, the check of the stored
//! state against it, and the report. A backend ([`crate::chaos`] for MongoDB,
//! [`crate::pg_chaos`] for PostgreSQL, [`crate::mysql_chaos`] for MariaDB; the SQL servers'
//! share [`ServerConfig`]) sets the run up, injects the faults, implements
//! [`Backend`] (the idem calls of one client and its connection), reads the stored state back
//! raw into [`Stored`], and hands both to [`run_clients`] and [`Findings::judge`].
//!
//! Each client plays an offline-first device owning a user (`u0`, `u1`, …): it edits notes
//! (`#[idem(version)]`, a version per edit; `#[idem(tombstone)]`), upserts them alone and in
//! batches (`upsert_many`) holding duplicates, two versions of one note and stale copies, replays
//! stale copies alone, deletes notes (some before they were ever pushed) and re-pushes deleted
//! ones, edits hot notes every client shares (versions from a shared counter: the highest wins)
//! and races edits against deletions of racy shared notes (once deleted, never live again).
//! Every note held live earns its owner 10 points once (`apply_once`, op id from the note);
//! awards derived from the notes, and milestones every client races for, go through
//! `insert_new`, each own award earning 5 points once; credits, debits and transfers to a shared
//! bank account go through `apply_once` with an op id per logical operation, and recent ones are
//! replayed deliberately. Where the backend's [`Backend::MIX`] has them, half the transfers run
//! inside a transaction (debit and credit committing together), and receipts (an
//! `#[idem(idempotency_key)]` type) are recorded with `record`, recent ones recorded again.
//!
//! A document remembers its latest [`Backend::OP_WINDOW`] op ids: an operation replayed after
//! more newer ones were applied to the same document would apply again, as documented. The
//! clients count the operations applied per account and replay only those well within the
//! window; retries follow their failure at once.
//!
//! Every failed call is retried, with backoff, while its error
//! [`is_retryable`](idem_core::Error::is_retryable), as a caller would; a client whose connection
//! broke connects again first, as a pool replaces a broken connection. A call still failing
//! after `max_attempts` stops its client and is reported. Every outcome is checked on the spot
//! against what the client's own view allows (a stale copy must not say `Updated`, a replayed
//! operation must not say `Applied`…).
//!
//! At the end the stored state, read straight from the server, is compared with a model
//! computed from the operation log in plain Rust, with no idem and no database: one document per
//! natural key, under the id derived from it; every note at the newest version written, with
//! that version's content; every tombstone intact (no resurrection); each award stored once and
//! returned as new to at most one caller; each balance the sum of its distinct operations, no op
//! id recorded twice; each receipt stored once, under the id every call recording it was given,
//! with its payload. And what the callers were told is exact: a first write (a note `Inserted`,
//! an award returned, an operation `Applied`, a receipt `Inserted`) is reported to exactly one
//! call, or to none only when a call writing it had a failed attempt whose reply may have been
//! lost.
//!
//! Which operations each client makes is a pure function of the seed; the versions of shared
//! notes and which request meets which fault also depend on how the clients interleave.

mod check;
mod model;
mod report;
mod rng;
mod server;
mod worker;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use idem_core::{
    Applied, BatchReport, Error, Id, Idempotent, InsertReport, OpId, Outcome, Recorded,
};
use serde::{Deserialize, Serialize};

pub use check::{Stored, StoredAccount, StoredAward, StoredCounts, StoredNote, StoredReceipt};
pub use report::{FaultsSeen, Findings, Invariants, Report};
pub use rng::{derive_seed, SplitMix64};
pub use server::{
    identifier, worker_stores, ServerConfig, CONNECT_TIMEOUT, FULL_RUN_FAULTS, SQL_MIX,
};

use model::Model;
use worker::{EffectSeen, Finished, Tally, Worker};

// ------------------------------------------------------------------------------------------------
// The documents

/// A note a device edits: a version per edit, a tombstone once deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes")]
#[serde(rename_all = "camelCase")]
pub struct Note {
    #[idem(key)]
    owner: String,
    #[idem(key)]
    note_id: String,
    #[idem(timestamp)]
    created_at: i64,
    #[idem(version)]
    rev: i64,
    text: String,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

impl Note {
    fn key(&self) -> NoteKey {
        NoteKey {
            owner: self.owner.clone(),
            note_id: self.note_id.clone(),
        }
    }
}

/// A badge, derived from a user's notes (or a milestone all clients race for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
pub struct Award {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
}

/// A points account; its `balance` moves only through `apply_once`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
pub struct Account {
    #[idem(key)]
    owner: String,
    #[idem(effect)]
    balance: i64,
}

/// The stored name of the accounts' effect field.
pub const BALANCE: &str = "balance";

/// A receipt: no natural key, made idempotent by the key the device sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "receipts")]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    #[idem(idempotency_key)]
    request_key: String,
    user: String,
    amount: i64,
}

/// The owner of the hot notes every client edits.
const HOT_OWNER: &str = "shared";
/// The user of the milestone awards every client races for.
const EVERYONE: &str = "everyone";
/// The account transfers credit.
const BANK: &str = "bank";
const HOT_NOTES: u64 = 6;
/// Shared notes that clients also delete, racing their edits.
const RACY_NOTES: u64 = 4;
const POINTS_PER_NOTE: i64 = 10;
const POINTS_PER_AWARD: i64 = 5;
/// 2025-01-01T00:00:00Z.
const BASE_MS: i64 = 1_735_689_600_000;
const YEAR_MS: u64 = 365 * 86_400_000;
/// How many problems a report spells out.
pub const MAX_PROBLEMS: usize = 20;

/// The users of a run with `clients` clients, one each: `u0`, `u1`, …
pub fn users(clients: usize) -> Vec<String> {
    (0..clients).map(|i| format!("u{i}")).collect()
}

/// The accounts a run opens before its clients start: one per user, and the bank.
pub fn accounts(users: &[String]) -> Vec<Account> {
    account_owners(users)
        .map(|owner| Account {
            owner: owner.to_owned(),
            balance: 0,
        })
        .collect()
}

fn account_owners(users: &[String]) -> impl Iterator<Item = &str> {
    users.iter().map(String::as_str).chain([BANK])
}

/// A note's natural key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NoteKey {
    owner: String,
    note_id: String,
}

impl NoteKey {
    fn owned(user: &str, number: usize) -> Self {
        NoteKey {
            owner: user.to_owned(),
            note_id: format!("n{number}"),
        }
    }

    fn hot(number: u64) -> Self {
        NoteKey {
            owner: HOT_OWNER.to_owned(),
            note_id: format!("h{number}"),
        }
    }

    /// A shared note that clients also delete: `shared/d<n>`.
    fn racy(number: u64) -> Self {
        NoteKey {
            owner: HOT_OWNER.to_owned(),
            note_id: format!("d{number}"),
        }
    }

    /// Whether every client writes this note (a hot or a racy one).
    fn is_hot(&self) -> bool {
        self.owner == HOT_OWNER
    }

    /// Whether clients race deletions of this note against its edits.
    fn is_racy(&self) -> bool {
        self.is_hot() && self.note_id.starts_with('d')
    }

    /// The creation time: a pure function of the key (FNV-1a over it, within a year).
    fn created_at(&self) -> i64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.owner.bytes().chain([b'/']).chain(self.note_id.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        BASE_MS + (hash % YEAR_MS) as i64
    }

    /// The deletion marker: a pure function of the key.
    fn marker(&self) -> i64 {
        self.created_at() + 3_600_000
    }

    /// The text of revision `rev`: a pure function of key and revision, so that two copies with
    /// the same version always carry the same content.
    fn text(&self, rev: i64) -> String {
        let words = [
            "rain", "coffee", "trains", "bread", "letters", "rivers", "maps",
        ];
        let word = words[(rev.unsigned_abs() % words.len() as u64) as usize];
        format!(
            "{}/{} revision {rev}: notes about {word}",
            self.owner, self.note_id
        )
    }

    fn note(&self, rev: i64, deleted: bool) -> Note {
        Note {
            owner: self.owner.clone(),
            note_id: self.note_id.clone(),
            created_at: self.created_at(),
            rev,
            text: self.text(rev),
            deleted_at: deleted.then(|| self.marker()),
        }
    }
}

impl fmt::Display for NoteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.note_id)
    }
}

// ------------------------------------------------------------------------------------------------
// The operation log

/// What a client did, once the call succeeded: the model's input.
#[derive(Clone, Debug)]
enum Event {
    /// A copy of a note at `rev` was upserted (alone or in a batch).
    Pushed { key: NoteKey, rev: i64 },
    /// The note was deleted with a copy at `rev`.
    Deleted { key: NoteKey, rev: i64 },
    /// `insert_new` was called with this member.
    Earned { user: String, badge: String },
    /// `amount` moved on `account` by the logical operation `operation`.
    Moved {
        account: String,
        operation: String,
        amount: i64,
    },
    /// A receipt was recorded (first or again), and the call was given `id`.
    Recorded {
        key: String,
        user: String,
        amount: i64,
        id: Id,
        /// The call answered `Inserted`.
        inserted: bool,
        /// An earlier attempt of the call failed (its reply may have been lost).
        uncertain: bool,
    },
}

// ------------------------------------------------------------------------------------------------
// The backend

/// The operations a client draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Edits a note (a new one now and then) and pushes it alone.
    Edit,
    /// Pushes a batch of copies, with duplicates, two versions of a note and stale copies.
    Batch,
    /// Replays an old copy of a note alone.
    StaleReplay,
    /// Deletes a live note, or one never pushed.
    Delete,
    /// Pushes a newer copy of a deleted note.
    RepushDeleted,
    /// Edits a note every client edits.
    HotEdit,
    /// Edits or deletes a note every client may delete.
    RacyEditOrDelete,
    /// Inserts the awards derived from the notes, and the shared milestones.
    Awards,
    /// Credits or debits the client's own account.
    Credit,
    /// Moves points to the bank.
    Transfer,
    /// Replays a recent money operation whole.
    ReplayOperation,
    /// Records a new receipt.
    RecordReceipt,
    /// Records a recent receipt again.
    ReplayReceipt,
}

/// Why an attempt failed, for the retry decision.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The same call may pass if made again.
    pub retryable: bool,
    /// The connection is gone or in doubt: connect again before the next attempt.
    pub broken: bool,
    /// What went wrong, for the report.
    pub message: String,
}

impl Failure {
    /// The failure an idem error means: retryable as idem says; the connection in doubt when the
    /// database gave no error code (the driver or the network failed).
    pub fn of(error: &Error) -> Self {
        let driver_kind = error
            .as_mongo()
            .map(|mongo| format!(" ({:?})", mongo.kind))
            .unwrap_or_default();
        Failure {
            retryable: error.is_retryable(),
            broken: error
                .as_backend()
                .is_some_and(|backend| backend.code().is_none()),
            message: format!("{error}{driver_kind}"),
        }
    }

    /// The failure a driver error (as idem reports it) means: the connection in doubt unless
    /// the server answered with an error code.
    pub fn of_driver(error: &idem_core::BackendError) -> Self {
        Failure {
            retryable: error.is_retryable(),
            broken: error.code().is_none(),
            message: error.to_string(),
        }
    }

    /// An attempt of a client that holds no connection: retried once it connected again.
    pub fn not_connected() -> Self {
        Failure {
            retryable: true,
            broken: true,
            message: "not connected".into(),
        }
    }

    /// The members an `insert_new` inserted, or the failure of its first refused member: the
    /// workload derives no member a store may refuse, so a refusal is the run's to report.
    pub fn of_insert_report<T>(report: InsertReport<T>) -> Result<Vec<T>, Self> {
        let refusal = report.errors().next().map(|(_, error)| Failure::of(error));
        match refusal {
            Some(failure) => Err(failure),
            None => Ok(report.into_inserted()),
        }
    }

    /// A call the backend does not make: never retried, so a mix naming it fails loudly.
    fn unsupported(call: &str) -> Self {
        Failure {
            retryable: false,
            broken: false,
            message: format!("{call} is not part of this backend's workload"),
        }
    }
}

/// A transaction's attempt failed; `at_commit` when its `COMMIT` did, so it may have committed.
#[derive(Clone, Debug)]
pub struct TransactionFailure {
    pub failure: Failure,
    pub at_commit: bool,
}

impl TransactionFailure {
    /// The attempt failed before its `COMMIT`: it rolled back.
    pub fn before_commit(failure: Failure) -> Self {
        TransactionFailure {
            failure,
            at_commit: false,
        }
    }

    /// The attempt's `COMMIT` failed: it may have committed.
    pub fn at_commit(failure: Failure) -> Self {
        TransactionFailure {
            failure,
            at_commit: true,
        }
    }
}

/// One `apply_once` inside the caller's transaction, borrowing what it needs from the step's
/// context.
pub type TransactionStep<'a> = Pin<Box<dyn Future<Output = Result<Applied, Error>> + Send + 'a>>;

/// A transfer inside the caller's transaction: `begin` opens it (with what its steps need),
/// `apply` (an `apply_once` in it) of `balance + amount` on each `(account, amount)` in order,
/// then `commit`. The outcomes, or the failure of the first step that failed (the transaction
/// rolled back) or of the `COMMIT` (it may have committed).
pub async fn in_transaction<C: Send, Committed>(
    begin: impl Future<Output = Result<C, Failure>>,
    steps: Vec<(Id, i64)>,
    apply: impl for<'a> Fn(&'a mut C, Id, &'a [idem_core::Change]) -> TransactionStep<'a>,
    commit: impl FnOnce(C) -> Committed,
) -> Result<Vec<Applied>, TransactionFailure>
where
    Committed: Future<Output = Result<(), Failure>>,
{
    let mut transaction = begin.await.map_err(TransactionFailure::before_commit)?;
    let mut applied = Vec::with_capacity(steps.len());
    for (id, amount) in steps {
        let changes = [idem_core::Change::add(BALANCE, amount)];
        let outcome = apply(&mut transaction, id, &changes)
            .await
            .map_err(|e| TransactionFailure::before_commit(Failure::of(&e)))?;
        applied.push(outcome);
    }
    commit(transaction)
        .await
        .map_err(TransactionFailure::at_commit)?;
    Ok(applied)
}

/// One client's idem calls and its connection. Each call is one attempt; the workload retries.
pub trait Backend: Send + Sync + 'static {
    /// The operations a client draws, as cumulative percentiles: an operation is drawn for a
    /// uniform number in `0..100` below its bound and at or above the one before.
    const MIX: &'static [(u64, Operation)];
    /// Whether half the transfers commit their debit and credit in one transaction.
    const TRANSFERS_IN_TRANSACTIONS: bool;
    /// How many op ids a document remembers.
    const OP_WINDOW: u64;

    /// Whether the client holds a usable connection.
    fn is_connected(&self) -> bool;
    /// Connects (again); `Err` with the reason when it could not.
    fn connect(&mut self) -> impl Future<Output = Result<(), String>> + Send;
    /// Forgets a connection that broke or is in doubt.
    fn disconnect(&mut self);

    fn upsert(&self, note: Note) -> impl Future<Output = Result<Outcome, Failure>> + Send;
    fn upsert_many(
        &self,
        notes: Vec<Note>,
    ) -> impl Future<Output = Result<BatchReport, Failure>> + Send;
    fn delete(
        &self,
        note: Note,
    ) -> impl Future<Output = Result<idem_core::Deletion, Failure>> + Send;
    fn insert_new(
        &self,
        awards: Vec<Award>,
    ) -> impl Future<Output = Result<Vec<Award>, Failure>> + Send;
    /// `apply_once` of `balance + amount` on the account with id `account`.
    fn apply_once(
        &self,
        account: Id,
        op: OpId,
        amount: i64,
    ) -> impl Future<Output = Result<Applied, Failure>> + Send;

    /// `record` of a receipt: needed when [`Backend::MIX`] records receipts.
    fn record(&self, receipt: Receipt) -> impl Future<Output = Result<Recorded, Failure>> + Send {
        let _ = receipt;
        async { Err(Failure::unsupported("record")) }
    }

    /// `apply_once` of each `(account, amount)` with `op`, in one transaction: needed when
    /// [`Backend::TRANSFERS_IN_TRANSACTIONS`].
    fn apply_in_transaction(
        &mut self,
        op: OpId,
        steps: Vec<(Id, i64)>,
    ) -> impl Future<Output = Result<Vec<Applied>, TransactionFailure>> + Send {
        let _ = (op, steps);
        async {
            Err(TransactionFailure::before_commit(Failure::unsupported(
                "a transaction",
            )))
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Running the clients

/// What every chaos run is given, whatever its backend.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Seeds the operations (and, in the backend, the faults).
    pub seed: u64,
    /// Concurrent clients.
    pub clients: usize,
    /// Logical operations, shared among the clients.
    pub operations: usize,
    /// Attempts per call (and per connection) before a client gives up on it (and stops).
    pub max_attempts: u32,
}

impl Settings {
    /// Refuses a run that could not mean anything: fewer than `min_clients` clients, no
    /// operation, no attempt.
    pub fn validate(&self, min_clients: usize) -> Result<(), String> {
        if self.clients < min_clients {
            return Err(format!(
                "a chaos run needs at least {min_clients} clients, not {}",
                self.clients
            ));
        }
        if self.operations == 0 {
            return Err("a chaos run needs at least one operation".into());
        }
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        Ok(())
    }

    /// The operations of client `index`: an even share, the first ones taking the remainder.
    fn operations_of(&self, index: usize) -> usize {
        self.operations / self.clients + usize::from(index < self.operations % self.clients)
    }
}

/// State all clients share.
struct Shared {
    /// The newest version handed out per hot note.
    hot_revs: Vec<AtomicI64>,
    /// The newest version handed out per racy note.
    racy_revs: Vec<AtomicI64>,
    /// How often each note was reported `Inserted`.
    inserted: Mutex<HashMap<NoteKey, u32>>,
    /// Notes written by a call that had a failed attempt: its `Inserted` may have been lost.
    uncertain_notes: Mutex<HashSet<NoteKey>>,
    /// How often each award was returned as new.
    awarded: Mutex<HashMap<(String, String), u32>>,
    /// Awards given to an `insert_new` call that had a failed attempt.
    uncertain_awards: Mutex<HashSet<(String, String)>>,
    /// Distinct operations applied so far per account: how far an op id is from leaving the
    /// document's op window.
    account_ops: HashMap<String, AtomicU64>,
    /// [`Backend::OP_WINDOW`].
    op_window: u64,
}

impl Shared {
    /// Distinct operations applied to `account` so far.
    fn ops_on(&self, account: &str) -> u64 {
        self.account_ops
            .get(account)
            .map_or(0, |count| count.load(Ordering::Relaxed))
    }

    /// Counts a new operation on `account`; its position (the operations before it).
    fn count_op(&self, account: &str) -> u64 {
        self.account_ops
            .get(account)
            .map_or(0, |count| count.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether the operation at `position` on `account` is well inside the op window: at most
    /// half a window of operations came after it.
    fn remembered(&self, account: &str, position: u64) -> bool {
        self.ops_on(account).saturating_sub(position) < self.op_window / 2
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the clients did, for [`Findings::judge`].
pub struct Clients {
    users: Vec<String>,
    operations: u64,
    logs: Vec<Vec<Event>>,
    effects: HashMap<(String, String), EffectSeen>,
    tally: Tally,
    shared: Arc<Shared>,
    duration: Duration,
}

/// Runs one client per backend in `backends` (the users' in order, see [`users`]), each its
/// share of the operations, and waits for all of them.
pub async fn run_clients<B: Backend>(
    settings: &Settings,
    backends: Vec<B>,
) -> Result<Clients, String> {
    let users = users(settings.clients);
    let shared = Arc::new(Shared {
        hot_revs: (0..HOT_NOTES).map(|_| AtomicI64::new(0)).collect(),
        racy_revs: (0..RACY_NOTES).map(|_| AtomicI64::new(0)).collect(),
        inserted: Mutex::default(),
        uncertain_notes: Mutex::default(),
        awarded: Mutex::default(),
        uncertain_awards: Mutex::default(),
        account_ops: account_owners(&users)
            .map(|owner| (owner.to_owned(), AtomicU64::new(0)))
            .collect(),
        op_window: B::OP_WINDOW,
    });
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(settings.clients);
    for (index, (user, backend)) in users.iter().zip(backends).enumerate() {
        let operations = settings.operations_of(index);
        let worker = Worker::new(
            user.clone(),
            index as u64,
            settings,
            backend,
            Arc::clone(&shared),
            operations,
        );
        tasks.push(tokio::spawn(worker.run(operations)));
    }
    let mut logs = Vec::with_capacity(tasks.len());
    let mut tally = Tally::default();
    let mut effects: HashMap<(String, String), EffectSeen> = HashMap::new();
    let mut operations = 0;
    for task in tasks {
        let Finished {
            done,
            log,
            effects: seen_by_client,
            tally: client_tally,
        } = task
            .await
            .map_err(|e| format!("a client task failed: {e}"))?;
        operations += done as u64;
        tally.absorb(client_tally);
        logs.push(log);
        for (key, seen) in seen_by_client {
            let entry = effects.entry(key).or_default();
            entry.applied += seen.applied;
            entry.uncertain |= seen.uncertain;
        }
    }
    Ok(Clients {
        users,
        operations,
        logs,
        effects,
        tally,
        shared,
        duration: started.elapsed(),
    })
}

/// Adds `text` to `problems` unless they are already twice as many as a report shows.
fn note_problem(problems: &mut Vec<String>, text: String) {
    if problems.len() < MAX_PROBLEMS * 2 {
        problems.push(text);
    }
}

impl Findings {
    /// Judges what the clients did and what is stored against the model of their logs: the
    /// invariants, what callers were told against the truth, and the first problems in words,
    /// after `problems` the backend found itself.
    pub fn judge(clients: Clients, stored: &Stored, mut problems: Vec<String>) -> Findings {
        let model = Model::from_logs(&clients.logs, &clients.users);
        let tally = clients.tally;
        let mut invariants = Invariants {
            wrong_outcomes: tally.wrong_outcomes,
            failed_calls: tally.failed_calls,
            ..Invariants::default()
        };
        let mut all_problems = tally.problems;
        all_problems.append(&mut problems);
        let mut problems = all_problems;
        told_callers(
            &clients.shared,
            &clients.effects,
            &model,
            &mut invariants,
            &mut problems,
        );
        let stored_counts = check::check(stored, &model, &mut invariants, &mut problems);
        let applied_by_clients = clients.effects.len() as u64;
        if applied_by_clients != model.effects {
            invariants.wrong_outcomes += 1;
            problems.insert(
                0,
                format!(
                    "the clients applied {applied_by_clients} distinct operations, the model counts {}",
                    model.effects
                ),
            );
        }
        problems.truncate(MAX_PROBLEMS);
        Findings {
            operations: clients.operations,
            calls: tally.calls,
            retries: tally.retries,
            reconnects: tally.reconnects,
            replays_skipped: tally.replays_skipped,
            invariants,
            observed_inserted: tally.inserted,
            true_inserted: model.inserted.iter().filter(|key| !key.is_racy()).count() as u64,
            observed_awarded: tally.awarded,
            true_awarded: model.awards.len() as u64,
            observed_applied: tally.applied,
            true_applied: model.effects,
            observed_recorded: tally.recorded,
            true_recorded: model.receipts.len() as u64,
            stored: stored_counts,
            clients_duration: clients.duration,
            problems,
        }
    }
}

/// What the callers were told, against the model: each first write reported to exactly one
/// call, or to none only when a call making it had a failed attempt.
fn told_callers(
    shared: &Shared,
    effects: &HashMap<(String, String), EffectSeen>,
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) {
    let inserted = lock(&shared.inserted);
    let uncertain = lock(&shared.uncertain_notes);
    for (key, times) in inserted.iter().filter(|(_, times)| **times > 1) {
        invariants.double_inserts += u64::from(times - 1);
        note_problem(
            problems,
            format!("note {key} was reported Inserted {times} times"),
        );
    }
    for key in &model.inserted {
        if !inserted.contains_key(key) && !uncertain.contains(key) {
            invariants.unreported_firsts += 1;
            note_problem(
                problems,
                format!("note {key} was inserted by an upsert, but no call was told so"),
            );
        }
    }
    let awarded = lock(&shared.awarded);
    let uncertain = lock(&shared.uncertain_awards);
    for ((user, badge), times) in awarded.iter().filter(|(_, times)| **times > 1) {
        invariants.double_awards += u64::from(times - 1);
        note_problem(
            problems,
            format!("award {user}/{badge} was returned as new {times} times"),
        );
    }
    for (user, badge) in &model.awards {
        if !awarded.contains_key(&(user.clone(), badge.clone()))
            && !uncertain.contains(&(user.clone(), badge.clone()))
        {
            invariants.unreported_firsts += 1;
            note_problem(
                problems,
                format!("award {user}/{badge} was returned as new to no call"),
            );
        }
    }
    for ((account, operation), seen) in effects {
        if seen.applied > 1 {
            invariants.double_applied += u64::from(seen.applied - 1);
            note_problem(
                problems,
                format!(
                    "operation {operation} on {account} was reported Applied {} times",
                    seen.applied
                ),
            );
        } else if seen.applied == 0 && !seen.uncertain {
            invariants.unreported_firsts += 1;
            note_problem(
                problems,
                format!("operation {operation} on {account} was reported Applied to no call"),
            );
        }
    }
    for (key, receipt) in &model.receipts {
        if receipt.inserted > 1 {
            invariants.double_recorded += u64::from(receipt.inserted - 1);
            note_problem(
                problems,
                format!(
                    "receipt {key} was reported Inserted {} times",
                    receipt.inserted
                ),
            );
        } else if receipt.inserted == 0 && !receipt.uncertain {
            invariants.unreported_firsts += 1;
            note_problem(
                problems,
                format!("receipt {key} was reported Inserted to no call"),
            );
        }
    }
}
