//! One client of a chaos run: the operations it draws, each idem call retried until it passes,
//! every outcome checked against the client's own view, and the log the model is computed from.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Applied, BatchReport, Deletion, Id, Idempotent, OpId, Outcome};

use super::rng::derive_seed;
use super::{
    lock, Account, Award, Backend, Event, Failure, Note, NoteKey, Operation, Receipt, Settings,
    Shared, SplitMix64, BANK, EVERYONE, HOT_NOTES, MAX_PROBLEMS, POINTS_PER_AWARD, POINTS_PER_NOTE,
    RACY_NOTES,
};

/// Notes per client, including the ones deleted before they were pushed: this many, plus one per
/// four operations of the client, so that deletions never outrun creations.
const MIN_NOTES: usize = 16;
/// A user earns `notes-N` once N of their notes were live.
const NOTE_BADGES: [usize; 11] = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144];
/// A client that completed `k * MILESTONE_EVERY` operations has reached `milestone-k`.
const MILESTONE_EVERY: usize = 25;
/// How far back a deliberate replay reaches (a client's own operations or receipts).
const RECENT: usize = 16;

/// One attempt of an idem call, borrowing the client's backend.
type Attempt<'a, T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'a>>;

/// What the callers were told of one operation on one account.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct EffectSeen {
    /// Calls told `Applied`.
    pub(super) applied: u32,
    /// A call applying it had a failed attempt that may have applied it.
    pub(super) uncertain: bool,
}

/// A client's counts.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) calls: u64,
    pub(super) retries: u64,
    pub(super) reconnects: u64,
    pub(super) failed_calls: u64,
    pub(super) inserted: u64,
    pub(super) awarded: u64,
    pub(super) applied: u64,
    pub(super) recorded: u64,
    pub(super) replays_skipped: u64,
    pub(super) wrong_outcomes: u64,
    pub(super) problems: Vec<String>,
}

impl Tally {
    pub(super) fn absorb(&mut self, other: Tally) {
        self.calls += other.calls;
        self.retries += other.retries;
        self.reconnects += other.reconnects;
        self.failed_calls += other.failed_calls;
        self.inserted += other.inserted;
        self.awarded += other.awarded;
        self.applied += other.applied;
        self.recorded += other.recorded;
        self.replays_skipped += other.replays_skipped;
        self.wrong_outcomes += other.wrong_outcomes;
        self.problems.extend(other.problems);
    }

    fn problem(&mut self, problem: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem);
        }
    }
}

/// A note as its owning client knows it.
#[derive(Clone, Debug)]
struct LocalNote {
    key: NoteKey,
    /// What the server holds, by the rules: (version, deleted).
    stored: Option<(i64, bool)>,
    /// The newest version the client made.
    newest: i64,
    /// Versions pushed so far.
    history: Vec<i64>,
    /// Where its points operation sits on the owner's account, once credited.
    credited_at: Option<u64>,
}

/// A money operation, kept for deliberate replays: each step's account, amount and position.
#[derive(Clone, Debug)]
struct Recent {
    operation: String,
    steps: Vec<(String, i64, u64)>,
}

/// A receipt recorded, kept for deliberate replays.
#[derive(Clone, Debug)]
struct LocalReceipt {
    receipt: Receipt,
    id: Id,
}

/// A call failed for good: the client stops.
struct Stop;

type Step<T = ()> = Result<T, Stop>;

/// What a client hands back.
pub(super) struct Finished {
    pub(super) done: usize,
    pub(super) log: Vec<Event>,
    pub(super) effects: HashMap<(String, String), EffectSeen>,
    pub(super) tally: Tally,
}

pub(super) struct Worker<B> {
    user: String,
    /// Draws the operations: consumed only by them, so they are a function of the seed.
    rng: SplitMix64,
    /// Draws the backoff jitter.
    jitter: SplitMix64,
    backend: B,
    connected_once: bool,
    shared: Arc<Shared>,
    max_attempts: u32,
    /// The most notes this client makes.
    max_notes: usize,
    notes: Vec<LocalNote>,
    /// Badges whose bonus this client has seen applied, and where on the account.
    bonuses: BTreeMap<String, u64>,
    /// Racy notes this client deleted.
    racy_deleted: BTreeSet<u64>,
    /// Own badges known stored.
    own_awards: BTreeSet<String>,
    recent: VecDeque<Recent>,
    receipts: VecDeque<LocalReceipt>,
    sequence: u64,
    done: usize,
    log: Vec<Event>,
    effects: HashMap<(String, String), EffectSeen>,
    tally: Tally,
}

/// The outcomes the client's view allows for a copy at `rev` meeting `stored`; `retried` when an
/// earlier attempt of the same call may have written it already.
fn allowed(stored: Option<(i64, bool)>, rev: i64, retried: bool) -> &'static [Outcome] {
    use Outcome::*;
    match (stored, retried) {
        (None, false) => &[Inserted],
        (None, true) => &[Inserted, Unchanged],
        (Some((_, true)), _) => &[Deleted],
        (Some((stored, false)), false) if rev > stored => &[Updated],
        (Some((stored, false)), true) if rev > stored => &[Updated, Unchanged],
        (Some((stored, false)), _) if rev == stored => &[Unchanged],
        (Some(_), _) => &[Stale],
    }
}

fn is_live(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Inserted | Outcome::Updated | Outcome::Unchanged
    )
}

impl<B: Backend> Worker<B> {
    /// Client `index` of a run, playing `user` through `backend`, about to make `operations`.
    pub(super) fn new(
        user: String,
        index: u64,
        settings: &Settings,
        backend: B,
        shared: Arc<Shared>,
        operations: usize,
    ) -> Self {
        Worker {
            user,
            rng: SplitMix64::new(derive_seed(settings.seed, index)),
            jitter: SplitMix64::new(derive_seed(settings.seed, index << 32 | 0xffff)),
            backend,
            connected_once: false,
            shared,
            max_attempts: settings.max_attempts,
            max_notes: MIN_NOTES + operations / 4,
            notes: Vec::new(),
            bonuses: BTreeMap::new(),
            racy_deleted: BTreeSet::new(),
            own_awards: BTreeSet::new(),
            recent: VecDeque::new(),
            receipts: VecDeque::new(),
            sequence: 0,
            done: 0,
            log: Vec::new(),
            effects: HashMap::new(),
            tally: Tally::default(),
        }
    }

    pub(super) async fn run(mut self, operations: usize) -> Finished {
        for _ in 0..operations {
            let step = match self.draw_operation() {
                Operation::Edit => self.edit().await,
                Operation::Batch => self.batch().await,
                Operation::StaleReplay => self.stale_replay().await,
                Operation::Delete => self.delete().await,
                Operation::RepushDeleted => self.repush_deleted().await,
                Operation::HotEdit => self.hot_edit().await,
                Operation::RacyEditOrDelete => self.racy_edit_or_delete().await,
                Operation::Awards => self.awards().await,
                Operation::Credit => self.credit().await,
                Operation::Transfer => self.transfer().await,
                Operation::ReplayOperation => self.replay_operation().await,
                Operation::RecordReceipt => self.record_receipt().await,
                Operation::ReplayReceipt => self.replay_receipt().await,
            };
            if step.is_err() {
                break;
            }
            self.done += 1;
        }
        Finished {
            done: self.done,
            log: self.log,
            effects: self.effects,
            tally: self.tally,
        }
    }

    /// The next operation, by the backend's mix: one draw in `0..100`.
    fn draw_operation(&mut self) -> Operation {
        let draw = self.rng.below(100);
        B::MIX
            .iter()
            .find(|(bound, _)| draw < *bound)
            .or(B::MIX.last())
            .map_or(Operation::Edit, |(_, operation)| *operation)
    }

    // -- connections and retries

    /// Makes sure the client holds an open connection, connecting (again) if it does not.
    async fn connect(&mut self) -> Step {
        if self.backend.is_connected() {
            return Ok(());
        }
        self.backend.disconnect();
        let mut failed = 0;
        loop {
            match self.backend.connect().await {
                Ok(()) => {
                    if self.connected_once {
                        self.tally.reconnects += 1;
                    }
                    self.connected_once = true;
                    return Ok(());
                }
                Err(error) => {
                    failed += 1;
                    if failed >= self.max_attempts {
                        self.tally.failed_calls += 1;
                        let problem = format!(
                            "{}: connecting failed for good after {failed} attempt(s): {error}",
                            self.user
                        );
                        self.tally.problem(problem);
                        return Err(Stop);
                    }
                    self.backoff(failed).await;
                }
            }
        }
    }

    /// Decides on a failed attempt: `Err(Stop)` when it cannot pass (not retryable, or too many
    /// attempts); otherwise counts the retry, drops a broken connection and backs off.
    async fn attempt_failed(&mut self, failed: &mut u32, what: &str, failure: Failure) -> Step {
        if !failure.retryable || *failed + 1 >= self.max_attempts {
            self.tally.failed_calls += 1;
            let problem = format!(
                "{}: {what} failed for good after {} attempt(s): {}",
                self.user,
                *failed + 1,
                failure.message
            );
            self.tally.problem(problem);
            return Err(Stop);
        }
        *failed += 1;
        self.tally.retries += 1;
        if failure.broken || !self.backend.is_connected() {
            self.backend.disconnect();
        }
        self.backoff(*failed).await;
        Ok(())
    }

    async fn backoff(&mut self, failed: u32) {
        let millis = (1u64 << failed.min(6)) + self.jitter.below(4);
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }

    /// Makes one idem call until it succeeds, connecting again when the connection broke;
    /// returns its value and whether an earlier attempt failed (and so may have written).
    /// `Err(Stop)` when the call fails for good.
    async fn call<T>(
        &mut self,
        what: &str,
        attempt: impl for<'a> Fn(&'a B) -> Attempt<'a, T>,
    ) -> Step<(T, bool)> {
        self.tally.calls += 1;
        let mut failed: u32 = 0;
        loop {
            self.connect().await?;
            match attempt(&self.backend).await {
                Ok(value) => return Ok((value, failed > 0)),
                Err(failure) => self.attempt_failed(&mut failed, what, failure).await?,
            }
        }
    }

    // -- calls

    async fn upsert(&mut self, note: &Note) -> Step<(Outcome, bool)> {
        let (outcome, retried) = self
            .call("upsert", |backend| Box::pin(backend.upsert(note.clone())))
            .await?;
        if outcome == Outcome::Inserted {
            self.record_inserted(note);
        }
        if retried {
            lock(&self.shared.uncertain_notes).insert(note.key());
        }
        Ok((outcome, retried))
    }

    /// `upsert_many`, retried whole until no document's outcome is an error worth retrying.
    async fn upsert_many(&mut self, notes: &[Note]) -> Step<(BatchReport, bool)> {
        let mut retried = false;
        let mut failed = 0;
        loop {
            let (report, call_retried): (BatchReport, bool) = self
                .call("upsert_many", |backend| {
                    Box::pin(backend.upsert_many(notes.to_vec()))
                })
                .await?;
            retried |= call_retried;
            for (note, outcome) in notes.iter().zip(report.outcomes()) {
                if matches!(outcome, Ok(Outcome::Inserted)) {
                    self.record_inserted(note);
                }
            }
            let error = report
                .outcomes()
                .iter()
                .find_map(|outcome| outcome.as_ref().err());
            match error {
                None => {
                    if retried {
                        let mut uncertain = lock(&self.shared.uncertain_notes);
                        uncertain.extend(notes.iter().map(Note::key));
                    }
                    return Ok((report, retried));
                }
                Some(error) => {
                    let failure = Failure::of(error);
                    retried = true;
                    self.attempt_failed(&mut failed, "a batch document", failure)
                        .await?;
                }
            }
        }
    }

    async fn delete_note(&mut self, note: &Note) -> Step<(Deletion, bool)> {
        self.call("delete", |backend| Box::pin(backend.delete(note.clone())))
            .await
    }

    async fn insert_new(&mut self, members: &[Award]) -> Step<(Vec<Award>, bool)> {
        let (new, retried) = self
            .call("insert_new", |backend| {
                Box::pin(backend.insert_new(members.to_vec()))
            })
            .await?;
        if retried {
            let mut uncertain = lock(&self.shared.uncertain_awards);
            for award in members {
                uncertain.insert((award.user.clone(), award.badge.clone()));
            }
        }
        Ok((new, retried))
    }

    fn account_id(&mut self, account: &str) -> Step<Id> {
        Account::derive_id(account).map_err(|error| {
            self.tally.failed_calls += 1;
            self.tally
                .problem(format!("account id of {account}: {error}"));
            Stop
        })
    }

    /// Notes what the callers were told of `op` on `account`.
    fn seen(&mut self, account: &str, op: &OpId, applied: Applied, uncertain: bool) {
        let seen = self
            .effects
            .entry((account.to_owned(), op.as_str().to_owned()))
            .or_default();
        if applied == Applied::Applied {
            seen.applied += 1;
            self.tally.applied += 1;
        }
        seen.uncertain |= uncertain;
    }

    /// `apply_once` of `balance + amount` on `account`, checked against `expect_new`: whether
    /// this op id is new to the account as far as the client knows. Returns the operation's
    /// position on the account when new.
    async fn apply(
        &mut self,
        account: &str,
        op: &OpId,
        amount: i64,
        expect_new: bool,
    ) -> Step<u64> {
        let id = self.account_id(account)?;
        let (applied, retried) = self
            .call("apply_once", |backend| {
                Box::pin(backend.apply_once(id, op.clone(), amount))
            })
            .await?;
        self.seen(account, op, applied, retried);
        let fine = match (expect_new, retried) {
            (true, false) => applied == Applied::Applied,
            (true, true) => true,
            (false, _) => applied == Applied::AlreadyApplied,
        };
        if !fine {
            self.wrong(format!(
                "apply_once of {} on account {account} answered {applied:?} (expected {})",
                op.as_str(),
                if expect_new {
                    "Applied"
                } else {
                    "AlreadyApplied"
                }
            ));
        }
        Ok(if expect_new {
            self.shared.count_op(account)
        } else {
            0
        })
    }

    fn wrong(&mut self, problem: String) {
        self.tally.wrong_outcomes += 1;
        let problem = format!("{}: {problem}", self.user);
        self.tally.problem(problem);
    }

    /// Counts an `Inserted`: per note for the whole run, and as observed by callers unless the
    /// note is racy (a deletion may have created it first, so the truth is not known).
    fn record_inserted(&mut self, note: &Note) {
        let key = note.key();
        if !key.is_racy() {
            self.tally.inserted += 1;
        }
        *lock(&self.shared.inserted).entry(key).or_default() += 1;
    }

    fn record_awarded(&mut self, awards: &[Award]) {
        self.tally.awarded += awards.len() as u64;
        let mut awarded = lock(&self.shared.awarded);
        for award in awards {
            *awarded
                .entry((award.user.clone(), award.badge.clone()))
                .or_default() += 1;
        }
    }

    // -- the client's view of its notes

    fn new_note(&mut self) -> Option<usize> {
        if self.notes.len() >= self.max_notes {
            return None;
        }
        let key = NoteKey::owned(&self.user, self.notes.len());
        self.notes.push(LocalNote {
            key,
            stored: None,
            newest: 0,
            history: Vec::new(),
            credited_at: None,
        });
        Some(self.notes.len() - 1)
    }

    fn notes_where(&self, pick: impl Fn(&LocalNote) -> bool) -> Vec<usize> {
        (0..self.notes.len())
            .filter(|&i| pick(&self.notes[i]))
            .collect()
    }

    fn random_of(&mut self, indexes: &[usize]) -> Option<usize> {
        if indexes.is_empty() {
            None
        } else {
            Some(indexes[self.rng.index(indexes.len())])
        }
    }

    /// A note to edit: a new one now and then (while there is room), else a live one.
    fn note_to_edit(&mut self) -> Option<usize> {
        let live = self.notes_where(|n| matches!(n.stored, Some((_, false))));
        if live.is_empty() || self.rng.chance(0.3) {
            if let Some(index) = self.new_note() {
                return Some(index);
            }
        }
        self.random_of(&live)
    }

    /// The next version of note `index`.
    fn next_version(&mut self, index: usize) -> i64 {
        let note = &mut self.notes[index];
        note.newest += 1;
        note.newest
    }

    /// Applies a copy at `rev` the way the rules say the server does, and logs it.
    fn pushed(&mut self, index: usize, rev: i64) {
        let note = &mut self.notes[index];
        note.stored = match note.stored {
            None => Some((rev, false)),
            Some((stored, false)) if rev > stored => Some((rev, false)),
            other => other,
        };
        note.history.push(rev);
        self.log.push(Event::Pushed {
            key: note.key.clone(),
            rev,
        });
    }

    /// Credits a note's points once it was held live: on every live outcome, through
    /// `apply_once` keyed by the note (a replay while the op id is well inside the window).
    async fn credit_note(&mut self, index: usize) -> Step {
        let key = self.notes[index].key.clone();
        let credited_at = self.notes[index].credited_at;
        if let Some(position) = credited_at {
            if !self.shared.remembered(&self.user, position) {
                self.tally.replays_skipped += 1;
                return Ok(());
            }
        }
        let op = match key.note(1, false).op_id("points") {
            Ok(op) => op,
            Err(error) => {
                self.tally.failed_calls += 1;
                self.tally.problem(format!("op id of {key}: {error}"));
                return Err(Stop);
            }
        };
        let user = self.user.clone();
        let position = self
            .apply(&user, &op, POINTS_PER_NOTE, credited_at.is_none())
            .await?;
        if credited_at.is_none() {
            self.notes[index].credited_at = Some(position);
        }
        Ok(())
    }

    /// Upserts note `index` at `rev` alone, checks the outcome, credits it if live.
    async fn push_one(&mut self, index: usize, rev: i64) -> Step {
        let key = self.notes[index].key.clone();
        let before = self.notes[index].stored;
        let note = key.note(rev, false);
        let (outcome, retried) = self.upsert(&note).await?;
        let expected = allowed(before, rev, retried);
        if !expected.contains(&outcome) {
            self.wrong(format!(
                "upsert of {key} r{rev} over {before:?} answered {outcome} (expected one of {expected:?})"
            ));
        }
        self.pushed(index, rev);
        if is_live(outcome) {
            self.credit_note(index).await?;
        }
        Ok(())
    }

    // -- the operations

    /// Edits a note (a new one now and then) and pushes it alone.
    async fn edit(&mut self) -> Step {
        let Some(index) = self.note_to_edit() else {
            return self.hot_edit().await;
        };
        let rev = self.next_version(index);
        self.push_one(index, rev).await
    }

    /// Replays an old copy of a note alone: `Stale`, `Unchanged` or `Deleted`.
    async fn stale_replay(&mut self) -> Step {
        let pushed = self.notes_where(|n| !n.history.is_empty());
        let Some(index) = self.random_of(&pushed) else {
            return self.edit().await;
        };
        let history = &self.notes[index].history;
        let rev = history[self.rng.index(history.len())];
        self.push_one(index, rev).await
    }

    /// Deletes a live note, or one never pushed (it is stored deleted).
    async fn delete(&mut self) -> Step {
        let live = self.notes_where(|n| matches!(n.stored, Some((_, false))));
        let index = if live.is_empty() || self.rng.chance(0.25) {
            match self.new_note() {
                Some(index) => index,
                None => match self.random_of(&live) {
                    Some(index) => index,
                    None => return self.hot_edit().await,
                },
            }
        } else {
            match self.random_of(&live) {
                Some(index) => index,
                None => return self.hot_edit().await,
            }
        };
        if self.notes[index].newest == 0 {
            self.notes[index].newest = 1;
        }
        let rev = self.notes[index].newest;
        let key = self.notes[index].key.clone();
        let before = self.notes[index].stored;
        let (outcome, retried) = self.delete_note(&key.note(rev, true)).await?;
        let fine = match before {
            Some((_, true)) => outcome == Deletion::AlreadyDeleted,
            _ => outcome == Deletion::Deleted || (retried && outcome == Deletion::AlreadyDeleted),
        };
        if !fine {
            self.wrong(format!(
                "delete of {key} over {before:?} answered {outcome}"
            ));
        }
        // A deletion keeps the stored version, or stores this copy if nothing was stored.
        let note = &mut self.notes[index];
        note.stored = Some((note.stored.map_or(rev, |(stored, _)| stored), true));
        self.log.push(Event::Deleted { key, rev });
        Ok(())
    }

    /// Pushes a newer copy of a deleted note: `Deleted`, never resurrected.
    async fn repush_deleted(&mut self) -> Step {
        let deleted = self.notes_where(|n| matches!(n.stored, Some((_, true))));
        let Some(index) = self.random_of(&deleted) else {
            return self.edit().await;
        };
        let rev = self.next_version(index);
        self.push_one(index, rev).await
    }

    /// Pushes a batch of 2 to 7 copies: new versions, exact duplicates, two versions of one note
    /// (in either order), stale copies and copies of deleted notes.
    async fn batch(&mut self) -> Step {
        let size = 2 + self.rng.index(5);
        let mut copies: Vec<(usize, i64)> = Vec::with_capacity(size + 1);
        for _ in 0..size {
            let choice = self.rng.below(100);
            let copy = match choice {
                // An exact duplicate of a copy already in the batch.
                40..=54 if !copies.is_empty() => Some(copies[self.rng.index(copies.len())]),
                // An older version of a copy in the batch, before or after it.
                55..=69 if !copies.is_empty() => {
                    let (index, rev) = copies[self.rng.index(copies.len())];
                    (rev > 1).then(|| (index, rev - 1 - self.rng.between(0, (rev - 2).min(2))))
                }
                // A stale copy of a pushed note.
                70..=84 => {
                    let pushed = self.notes_where(|n| !n.history.is_empty());
                    self.random_of(&pushed).map(|index| {
                        let history = &self.notes[index].history;
                        (index, history[self.rng.index(history.len())])
                    })
                }
                // A newer copy of a deleted note.
                85..=99 => {
                    let deleted = self.notes_where(|n| matches!(n.stored, Some((_, true))));
                    self.random_of(&deleted)
                        .map(|index| (index, self.next_version(index)))
                }
                _ => None,
            };
            // By default, and when the choice had nothing to work on: a new version.
            let copy = match copy {
                Some(copy) => copy,
                None => match self.note_to_edit() {
                    Some(index) => (index, self.next_version(index)),
                    None => continue,
                },
            };
            let at = if self.rng.chance(0.5) {
                copies.len()
            } else {
                self.rng.index(copies.len() + 1)
            };
            copies.insert(at, copy);
        }
        if copies.is_empty() {
            return self.hot_edit().await;
        }
        let notes: Vec<Note> = copies
            .iter()
            .map(|&(index, rev)| self.notes[index].key.note(rev, false))
            .collect();
        let (report, retried) = self.upsert_many(&notes).await?;
        // A batch answers each copy as upserting the copies one by one, in order, would: each is
        // judged against what the copies before it left. A retried batch may meet what its lost
        // attempt wrote: a copy older than another copy of its note in the batch then finds that
        // newer one stored, and is Stale.
        let mut newest: HashMap<usize, i64> = HashMap::new();
        for &(index, rev) in &copies {
            let entry = newest.entry(index).or_insert(rev);
            *entry = (*entry).max(rev);
        }
        let mut live = BTreeSet::new();
        for (&(index, rev), outcome) in copies.iter().zip(report.outcomes()) {
            let before = self.notes[index].stored;
            if let Ok(outcome) = outcome {
                let mut expected = allowed(before, rev, retried).to_vec();
                if retried && newest[&index] > rev {
                    expected.push(Outcome::Stale);
                }
                if !expected.contains(outcome) {
                    let key = &self.notes[index].key;
                    self.wrong(format!(
                        "batch copy {key} r{rev} over {before:?} answered {outcome} (expected one of {expected:?})"
                    ));
                }
                if is_live(*outcome) {
                    live.insert(index);
                }
            }
            self.pushed(index, rev);
        }
        for index in live {
            self.credit_note(index).await?;
        }
        Ok(())
    }

    /// Edits a note every client edits: the highest version wins.
    async fn hot_edit(&mut self) -> Step {
        let number = self.rng.below(HOT_NOTES);
        let key = NoteKey::hot(number);
        let counter = &self.shared.hot_revs[number as usize];
        let notes: Vec<Note> = if self.rng.chance(0.7) {
            let rev = counter.fetch_add(1, Ordering::Relaxed) + 1;
            vec![key.note(rev, false)]
        } else {
            // A batch with two versions and a duplicate.
            let older = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let newer = counter.fetch_add(1, Ordering::Relaxed) + 1;
            vec![
                key.note(newer, false),
                key.note(older, false),
                key.note(newer, false),
            ]
        };
        let outcomes: Vec<Outcome> = if let [note] = notes.as_slice() {
            let (outcome, _) = self.upsert(note).await?;
            vec![outcome]
        } else {
            let (report, _) = self.upsert_many(&notes).await?;
            report
                .outcomes()
                .iter()
                .filter_map(|o| o.clone().ok())
                .collect()
        };
        if outcomes.contains(&Outcome::Deleted) {
            self.wrong(format!("a hot note {key} (never deleted) answered Deleted"));
        }
        for note in &notes {
            self.log.push(Event::Pushed {
                key: key.clone(),
                rev: note.rev,
            });
        }
        Ok(())
    }

    /// Edits or deletes a note every client may delete. Once deleted it stays deleted: after
    /// this client's own deletion, its pushes must answer `Deleted`.
    async fn racy_edit_or_delete(&mut self) -> Step {
        let number = self.rng.below(RACY_NOTES);
        let key = NoteKey::racy(number);
        let counter = &self.shared.racy_revs[number as usize];
        let deleted_before = self.racy_deleted.contains(&number);
        if self.rng.chance(0.3) {
            let rev = counter.load(Ordering::Relaxed).max(1);
            let (outcome, _) = self.delete_note(&key.note(rev, true)).await?;
            let fine = if deleted_before {
                outcome == Deletion::AlreadyDeleted
            } else {
                matches!(outcome, Deletion::Deleted | Deletion::AlreadyDeleted)
            };
            if !fine {
                self.wrong(format!("delete of racy note {key} answered {outcome}"));
            }
            self.racy_deleted.insert(number);
            self.log.push(Event::Deleted { key, rev });
        } else {
            let rev = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let note = key.note(rev, false);
            let (outcome, _) = self.upsert(&note).await?;
            if deleted_before && outcome != Outcome::Deleted {
                self.wrong(format!(
                    "racy note {key}, deleted by this client, answered {outcome} to r{rev}"
                ));
            }
            self.log.push(Event::Pushed { key, rev });
        }
        Ok(())
    }

    /// Derives the awards from the notes held live and inserts the full set; credits each
    /// award's bonus once. Then the shared milestones, which every client races for.
    async fn awards(&mut self) -> Step {
        let held = self
            .notes
            .iter()
            .filter(|n| n.credited_at.is_some())
            .count();
        let members: Vec<Award> = NOTE_BADGES
            .iter()
            .filter(|&&threshold| held >= threshold)
            .map(|threshold| Award {
                user: self.user.clone(),
                badge: format!("notes-{threshold}"),
            })
            .collect();
        if !members.is_empty() {
            let (new, retried) = self.insert_new(&members).await?;
            self.record_awarded(&new);
            let expected: Vec<&Award> = members
                .iter()
                .filter(|award| !self.own_awards.contains(&award.badge))
                .collect();
            let fine = if retried {
                new.iter().all(|award| expected.contains(&award))
            } else {
                new.iter().collect::<Vec<_>>() == expected
            };
            if !fine {
                let got: Vec<&str> = new.iter().map(|a| a.badge.as_str()).collect();
                let wanted: Vec<&str> = expected.iter().map(|a| a.badge.as_str()).collect();
                self.wrong(format!("insert_new returned {got:?}, expected {wanted:?}"));
            }
            for award in &members {
                self.own_awards.insert(award.badge.clone());
                self.log.push(Event::Earned {
                    user: award.user.clone(),
                    badge: award.badge.clone(),
                });
            }
            // Every award's bonus, not only the ones returned: when a reply was lost, the retry
            // returned nothing, and the bonus is still due. Already credited ones are replayed
            // now and then (`AlreadyApplied`) while the op id is well inside the window.
            for award in &members {
                let credited = self.bonuses.get(&award.badge).copied();
                if let Some(position) = credited {
                    if !self.rng.chance(0.2) {
                        continue;
                    }
                    if !self.shared.remembered(&self.user, position) {
                        self.tally.replays_skipped += 1;
                        continue;
                    }
                }
                let op = award.op_id("bonus").map_err(|error| {
                    self.tally.failed_calls += 1;
                    self.tally.problem(format!("op id of an award: {error}"));
                    Stop
                })?;
                let user = self.user.clone();
                let position = self
                    .apply(&user, &op, POINTS_PER_AWARD, credited.is_none())
                    .await?;
                if credited.is_none() {
                    self.bonuses.insert(award.badge.clone(), position);
                }
            }
        }
        let reached = self.done / MILESTONE_EVERY;
        let milestones: Vec<Award> = (0..=reached)
            .map(|k| Award {
                user: EVERYONE.to_owned(),
                badge: format!("milestone-{k}"),
            })
            .collect();
        let (new, _) = self.insert_new(&milestones).await?;
        if new.iter().any(|award| !milestones.contains(award)) {
            self.wrong("insert_new returned a member it was not given".into());
        }
        self.record_awarded(&new);
        for award in &milestones {
            self.log.push(Event::Earned {
                user: award.user.clone(),
                badge: award.badge.clone(),
            });
        }
        Ok(())
    }

    fn next_operation(&mut self) -> String {
        self.sequence += 1;
        format!("{}:op{}", self.user, self.sequence)
    }

    /// Logs that `amount` moved on `account` by `operation`.
    fn log_move(&mut self, account: &str, operation: &str, amount: i64) {
        self.log.push(Event::Moved {
            account: account.to_owned(),
            operation: operation.to_owned(),
            amount,
        });
    }

    fn remember(&mut self, recent: Recent) {
        self.recent.push_back(recent);
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// Applies the steps of a money operation, one call each; each step's op id is new to its
    /// account.
    async fn money(&mut self, operation: String, steps: Vec<(String, i64)>) -> Step {
        let op = OpId::new(operation.clone());
        let mut positioned = Vec::with_capacity(steps.len());
        for (account, amount) in steps {
            let position = self.apply(&account, &op, amount, true).await?;
            self.log_move(&account, &operation, amount);
            positioned.push((account, amount, position));
        }
        self.remember(Recent {
            operation,
            steps: positioned,
        });
        Ok(())
    }

    /// Applies the steps of a money operation inside one transaction, retried whole. A failed
    /// attempt rolled back: the attempt that commits answers `Applied` for every step, unless a
    /// `COMMIT` failed (it may have committed), and then every step answers alike.
    async fn money_in_transaction(&mut self, operation: String, steps: Vec<(String, i64)>) -> Step {
        let op = OpId::new(operation.clone());
        let mut ids = Vec::with_capacity(steps.len());
        for (account, _) in &steps {
            ids.push(self.account_id(account)?);
        }
        let steps_by_id: Vec<(Id, i64)> = ids
            .into_iter()
            .zip(steps.iter().map(|(_, amount)| *amount))
            .collect();
        self.tally.calls += 1;
        let mut failed = 0u32;
        // A `COMMIT` failed: that attempt may have committed.
        let mut uncertain = false;
        let applied = loop {
            self.connect().await?;
            let attempt = self
                .backend
                .apply_in_transaction(op.clone(), steps_by_id.clone())
                .await;
            match attempt {
                Ok(applied) => break applied,
                Err(failed_attempt) => {
                    uncertain |= failed_attempt.at_commit;
                    let failure = failed_attempt.failure;
                    self.attempt_failed(&mut failed, "a transfer in a transaction", failure)
                        .await?;
                }
            }
        };
        for ((account, _), outcome) in steps.iter().zip(&applied) {
            self.seen(account, &op, *outcome, uncertain);
        }
        let fine = if uncertain {
            applied.iter().all(|outcome| *outcome == applied[0])
        } else {
            applied.iter().all(|outcome| *outcome == Applied::Applied)
        };
        if !fine {
            self.wrong(format!(
                "the transaction of {operation} (a failed COMMIT before: {uncertain}) answered {applied:?}"
            ));
        }
        let mut positioned = Vec::with_capacity(steps.len());
        for (account, amount) in steps {
            let position = self.shared.count_op(&account);
            self.log_move(&account, &operation, amount);
            positioned.push((account, amount, position));
        }
        self.remember(Recent {
            operation,
            steps: positioned,
        });
        Ok(())
    }

    /// A credit or a debit of the client's own account.
    async fn credit(&mut self) -> Step {
        let mut amount = self.rng.between(-100, 100);
        if amount == 0 {
            amount = 1;
        }
        let operation = self.next_operation();
        let user = self.user.clone();
        self.money(operation, vec![(user, amount)]).await
    }

    /// A transfer to the shared bank: one op id, debited here, credited there; half of them in
    /// a transaction where the backend makes transactions.
    async fn transfer(&mut self) -> Step {
        let amount = self.rng.between(1, 50);
        let in_transaction = B::TRANSFERS_IN_TRANSACTIONS && self.rng.chance(0.5);
        let operation = self.next_operation();
        let steps = vec![(self.user.clone(), -amount), (BANK.to_owned(), amount)];
        if in_transaction {
            self.money_in_transaction(operation, steps).await
        } else {
            self.money(operation, steps).await
        }
    }

    /// Replays a recent money operation whole, deliberately: every step `AlreadyApplied`.
    async fn replay_operation(&mut self) -> Step {
        let replayable: Vec<usize> = (0..self.recent.len())
            .filter(|&i| {
                self.recent[i]
                    .steps
                    .iter()
                    .all(|(account, _, position)| self.shared.remembered(account, *position))
            })
            .collect();
        if replayable.is_empty() {
            if !self.recent.is_empty() {
                self.tally.replays_skipped += 1;
            }
            return self.credit().await;
        }
        let recent = self.recent[replayable[self.rng.index(replayable.len())]].clone();
        let op = OpId::new(recent.operation.clone());
        for (account, amount, _) in &recent.steps {
            self.apply(account, &op, *amount, false).await?;
            self.log_move(account, &recent.operation, *amount);
        }
        Ok(())
    }

    /// Records a new receipt: `Inserted` (or `Unchanged` after a failed attempt that landed).
    async fn record_receipt(&mut self) -> Step {
        self.sequence += 1;
        let receipt = Receipt {
            request_key: format!("{}:receipt{}", self.user, self.sequence),
            user: self.user.clone(),
            amount: self.rng.between(1, 500),
        };
        let (recorded, retried) = self
            .call("record", |backend| {
                Box::pin(backend.record(receipt.clone()))
            })
            .await?;
        let expected: &[Outcome] = if retried {
            &[Outcome::Inserted, Outcome::Unchanged]
        } else {
            &[Outcome::Inserted]
        };
        if !expected.contains(&recorded.outcome) {
            self.wrong(format!(
                "record of receipt {} answered {} (expected one of {expected:?})",
                receipt.request_key, recorded.outcome
            ));
        }
        self.recorded(&receipt, recorded.id, recorded.outcome, retried);
        self.receipts.push_back(LocalReceipt {
            receipt,
            id: recorded.id,
        });
        if self.receipts.len() > RECENT {
            self.receipts.pop_front();
        }
        Ok(())
    }

    /// Records a recent receipt again, deliberately: `Unchanged`, under the id first given.
    async fn replay_receipt(&mut self) -> Step {
        if self.receipts.is_empty() {
            return self.record_receipt().await;
        }
        let local = self.receipts[self.rng.index(self.receipts.len())].clone();
        let receipt = &local.receipt;
        let (recorded, retried) = self
            .call("record", |backend| {
                Box::pin(backend.record(receipt.clone()))
            })
            .await?;
        if recorded.outcome != Outcome::Unchanged || recorded.id != local.id {
            self.wrong(format!(
                "record of receipt {} again answered {} under {} (expected Unchanged under {})",
                receipt.request_key, recorded.outcome, recorded.id, local.id
            ));
        }
        self.recorded(receipt, recorded.id, recorded.outcome, retried);
        Ok(())
    }

    fn recorded(&mut self, receipt: &Receipt, id: Id, outcome: Outcome, uncertain: bool) {
        let inserted = outcome == Outcome::Inserted;
        if inserted {
            self.tally.recorded += 1;
        }
        self.log.push(Event::Recorded {
            key: receipt.request_key.clone(),
            user: receipt.user.clone(),
            amount: receipt.amount,
            id,
            inserted,
            uncertain,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_outcomes_follow_the_rules() {
        use Outcome::*;
        assert_eq!(allowed(None, 1, false), &[Inserted]);
        assert_eq!(allowed(Some((2, false)), 3, true), &[Updated, Unchanged]);
        assert_eq!(allowed(Some((2, false)), 2, false), &[Unchanged]);
        assert_eq!(allowed(Some((2, false)), 1, true), &[Stale]);
        assert_eq!(allowed(Some((2, true)), 9, false), &[Deleted]);
    }
}
