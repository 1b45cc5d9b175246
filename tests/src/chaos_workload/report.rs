//! The report of a chaos run: the faults injected, the invariants (each must be 0), what callers
//! observed against the truth, and a verdict.

use std::fmt;
use std::time::Duration;

use super::check::StoredCounts;
use crate::fault_proxy::Faults;

/// The invariants; each must be 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invariants {
    /// Natural keys (or idempotency keys) stored more than once (extra documents).
    pub duplicates: u64,
    /// Documents whose `_id` is not the id derived from their key, or that the model does not
    /// know at all.
    pub orphans: u64,
    /// Documents the model expects that are not stored (notes, accounts, receipts).
    pub missing: u64,
    /// Notes stored at an older version than the newest one written.
    pub lost_updates: u64,
    /// Notes deleted in the model but stored live.
    pub resurrections: u64,
    /// Tombstones whose marker differs from the one written.
    pub tombstones_altered: u64,
    /// Notes whose stored content is wrong otherwise (a version never written, text not of its
    /// version, a live note stored deleted, a changed creation time).
    pub wrong_content: u64,
    /// Accounts credited beyond the sum of their distinct operations, plus op ids recorded twice.
    pub double_credits: u64,
    /// Accounts below the sum of their distinct operations.
    pub lost_credits: u64,
    /// Awards derived but not stored.
    pub missing_awards: u64,
    /// Awards returned as new by more than one `insert_new` call (extra returns).
    pub double_awards: u64,
    /// Notes reported `Inserted` by more than one call (extra reports).
    pub double_inserts: u64,
    /// Operations reported `Applied` to an account by more than one call (extra reports).
    pub double_applied: u64,
    /// Receipts reported `Inserted` by more than one call (extra reports).
    pub double_recorded: u64,
    /// Receipts stored under another id than a call was given, or with another payload.
    pub receipts_altered: u64,
    /// First writes (a note inserted, an award, an operation applied, a receipt) reported to no
    /// call, although no call writing them had a failed attempt.
    pub unreported_firsts: u64,
    /// Outcomes a call returned that its client's view rules out.
    pub wrong_outcomes: u64,
    /// Calls (or connections) that never succeeded.
    pub failed_calls: u64,
}

impl Invariants {
    /// Each invariant with its name, in report order.
    pub fn rows(&self) -> [(&'static str, u64); 18] {
        [
            ("duplicates", self.duplicates),
            ("orphans", self.orphans),
            ("missing documents", self.missing),
            ("lost updates", self.lost_updates),
            ("resurrections", self.resurrections),
            ("tombstones altered", self.tombstones_altered),
            ("wrong content", self.wrong_content),
            ("double credits", self.double_credits),
            ("lost credits", self.lost_credits),
            ("missing awards", self.missing_awards),
            ("awards returned twice", self.double_awards),
            ("notes reported Inserted twice", self.double_inserts),
            ("operations reported Applied twice", self.double_applied),
            ("receipts reported Inserted twice", self.double_recorded),
            (
                "receipts under another id or payload",
                self.receipts_altered,
            ),
            ("first writes reported to no caller", self.unreported_firsts),
            ("outcomes contradicting the client", self.wrong_outcomes),
            ("calls that never succeeded", self.failed_calls),
        ]
    }

    /// The sum of all counts: 0 for a clean run.
    pub fn total(&self) -> u64 {
        self.rows().iter().map(|(_, count)| count).sum()
    }
}

/// The faults that actually happened, as the proxy or the fail point counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultsSeen {
    /// Requests forwarded to the server, when a proxy relayed them.
    pub requests_forwarded: Option<u64>,
    /// Write requests the faults could hit.
    pub write_requests: u64,
    /// Replies lost after the server applied the write: lost acknowledgements.
    pub lost_replies: u64,
    /// Write requests dropped before reaching the server.
    pub requests_dropped: u64,
    /// Connections reset right after a write request was forwarded.
    pub connections_killed: u64,
}

impl FaultsSeen {
    /// Faults that actually happened.
    pub fn total(&self) -> u64 {
        self.lost_replies + self.requests_dropped + self.connections_killed
    }
}

/// What the clients did and the check found: [`Findings::judge`].
#[derive(Clone, Debug)]
pub struct Findings {
    /// Logical operations completed.
    pub operations: u64,
    /// Calls to idem (each retried until it succeeded); a transaction counts as one.
    pub calls: u64,
    /// Failed attempts that were retried.
    pub retries: u64,
    /// Connections the clients made again after one broke.
    pub reconnects: u64,
    /// Replays skipped because the operation had left the document's op window.
    pub replays_skipped: u64,
    /// The invariants, each 0 in a clean run.
    pub invariants: Invariants,
    /// `Inserted` outcomes of note upserts the callers saw.
    pub observed_inserted: u64,
    /// Notes first created by an upsert (not by a delete): the `Inserted` a fault-free run sees.
    pub true_inserted: u64,
    /// Members `insert_new` returned as new.
    pub observed_awarded: u64,
    /// Distinct awards derived.
    pub true_awarded: u64,
    /// `Applied` outcomes of `apply_once`.
    pub observed_applied: u64,
    /// Distinct effects: operations per account, points per note held live, bonus per award.
    pub true_applied: u64,
    /// `Inserted` outcomes of `record`.
    pub observed_recorded: u64,
    /// Distinct receipts recorded.
    pub true_recorded: u64,
    /// What is stored.
    pub stored: StoredCounts,
    /// How long the clients ran.
    pub clients_duration: Duration,
    /// The first problems found, in words.
    pub problems: Vec<String>,
}

/// What a chaos run did and found.
#[derive(Clone, Debug)]
pub struct Report {
    /// What ran where: the backend, the server, where the faults come from.
    pub title: String,
    /// The seed.
    pub seed: u64,
    /// Concurrent clients.
    pub clients: usize,
    /// The configured fault rates.
    pub faults: Faults,
    /// The faults that happened.
    pub faults_seen: FaultsSeen,
    /// What the clients did and the check found.
    pub findings: Findings,
    /// How long the run took: setup, clients, check.
    pub duration: Duration,
}

impl Report {
    /// Faults that actually happened.
    pub fn faults_injected(&self) -> u64 {
        self.faults_seen.total()
    }

    /// Whether every invariant holds.
    pub fn is_clean(&self) -> bool {
        self.findings.invariants.total() == 0
    }

    /// What callers observed and the truth, by name.
    fn observations(&self) -> [(&'static str, u64, u64); 4] {
        let f = &self.findings;
        [
            ("Inserted (notes)", f.observed_inserted, f.true_inserted),
            (
                "newly awarded (insert_new)",
                f.observed_awarded,
                f.true_awarded,
            ),
            ("Applied (apply_once)", f.observed_applied, f.true_applied),
            ("Inserted (record)", f.observed_recorded, f.true_recorded),
        ]
    }

    /// Whether what callers observed is at most the truth (always required).
    pub fn observed_within_truth(&self) -> bool {
        self.observations()
            .iter()
            .all(|(_, observed, truth)| observed <= truth)
    }

    /// Whether what callers observed is exactly the truth (required without faults).
    pub fn observed_equals_truth(&self) -> bool {
        self.observations()
            .iter()
            .all(|(_, observed, truth)| observed == truth)
    }

    /// Whether the run passed: invariants hold, observations are within the truth, and equal to
    /// it when no fault happened.
    pub fn passed(&self) -> bool {
        self.is_clean()
            && self.observed_within_truth()
            && (self.faults_injected() > 0 || self.observed_equals_truth())
    }
}

/// Assertions the tests of every backend make on a report, each failing with the report.
impl Report {
    /// Every invariant held, callers never observed more than the truth, and all `operations`
    /// completed.
    pub fn assert_sound(&self, operations: usize) {
        assert_eq!(
            self.findings.invariants.total(),
            0,
            "every invariant holds:\n{self}"
        );
        assert!(
            self.observed_within_truth(),
            "callers never observe more than the truth:\n{self}"
        );
        assert_eq!(
            self.findings.operations, operations as u64,
            "every operation completed:\n{self}"
        );
    }

    /// Each fault configured above a zero rate happened, and calls were retried: the run cannot
    /// have passed vacuously.
    pub fn assert_faults_happened(&self) {
        let seen = &self.faults_seen;
        let faults = [
            ("replies were lost", self.faults.lost_ack, seen.lost_replies),
            (
                "requests were dropped",
                self.faults.drop_request,
                seen.requests_dropped,
            ),
            (
                "connections were killed",
                self.faults.kill_connection,
                seen.connections_killed,
            ),
        ];
        for (what, rate, happened) in faults {
            assert!(rate == 0.0 || happened > 0, "{what}:\n{self}");
        }
        assert!(self.findings.retries > 0, "calls were retried:\n{self}");
    }
}

fn percent(rate: f64) -> String {
    format!("{}%", (rate * 1000.0).round() / 10.0)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = |f: &mut fmt::Formatter<'_>, name: &str, value: &dyn fmt::Display| {
            writeln!(f, "  {name:<40} {value:>10}")
        };
        let seen = &self.faults_seen;
        writeln!(
            f,
            "{}, seed {}, {} clients",
            self.title, self.seed, self.clients
        )?;
        writeln!(
            f,
            "fault rates per write request: lost reply {}, dropped request {}, killed connection {}",
            percent(self.faults.lost_ack),
            percent(self.faults.drop_request),
            percent(self.faults.kill_connection)
        )?;
        writeln!(f)?;
        row(f, "operations", &self.findings.operations)?;
        row(f, "calls to idem", &self.findings.calls)?;
        row(
            f,
            "retries (failed attempts retried)",
            &self.findings.retries,
        )?;
        row(
            f,
            "connections remade by the clients",
            &self.findings.reconnects,
        )?;
        if let Some(forwarded) = seen.requests_forwarded {
            row(f, "requests forwarded", &forwarded)?;
        }
        row(f, "write requests", &seen.write_requests)?;
        row(f, "replies lost (acknowledgements)", &seen.lost_replies)?;
        row(f, "requests dropped", &seen.requests_dropped)?;
        row(f, "connections killed", &seen.connections_killed)?;
        if seen.write_requests > 0 {
            let share = |n: u64| format!("{:.1}%", n as f64 * 100.0 / seen.write_requests as f64);
            let shares = format!("{} / {}", share(seen.lost_replies), share(seen.total()));
            row(f, "of write requests: lost replies / faulted", &shares)?;
        }
        row(
            f,
            "replays skipped (left the op window)",
            &self.findings.replays_skipped,
        )?;
        writeln!(f)?;
        writeln!(f, "  {:<40} {:>10}", "invariant (each must be 0)", "count")?;
        for (name, count) in self.findings.invariants.rows() {
            let mark = if count == 0 { "" } else { "  <-- VIOLATED" };
            writeln!(f, "  {name:<40} {count:>10}{mark}")?;
        }
        writeln!(f)?;
        let faulty = self.faults_injected() > 0;
        let relation = if faulty { "<= truth" } else { "= truth" };
        writeln!(
            f,
            "  {:<40} {:>10} {:>10}   (must be {relation})",
            "observed by callers", "observed", "truth"
        )?;
        for (name, observed, truth) in self.observations() {
            let ok = if faulty {
                observed <= truth
            } else {
                observed == truth
            };
            let mark = if ok { "" } else { "  <-- VIOLATED" };
            writeln!(f, "  {name:<40} {observed:>10} {truth:>10}{mark}")?;
        }
        writeln!(f)?;
        let stored = &self.findings.stored;
        writeln!(
            f,
            "  stored: {} live notes, {} deleted notes, {} awards, {} accounts, {} receipts",
            stored.live_notes,
            stored.deleted_notes,
            stored.awards,
            stored.accounts,
            stored.receipts
        )?;
        writeln!(
            f,
            "  duration: {:.1} s ({:.1} s of client operations)",
            self.duration.as_secs_f64(),
            self.findings.clients_duration.as_secs_f64()
        )?;
        for problem in &self.findings.problems {
            writeln!(f, "  problem: {problem}")?;
        }
        write!(
            f,
            "  verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}
