//! The PostgreSQL chaos run: concurrent workers writing through idem while a fault-injecting
//! proxy loses replies, drops requests and kills connections, then a check of the stored rows
//! against a model computed without idem. The PostgreSQL counterpart of [`crate::chaos`].
//!
//! [`run`] makes a fresh schema, creates the tables and the accounts on a direct connection,
//! starts a [`PgProxy`] in front of the server and `clients` tokio tasks (at least 2), each with
//! its own connection through the proxy (`-c search_path=<schema>`), sharing one
//! [`idem_core::postgres::Store`]. A worker whose connection the proxy closed or reset connects
//! again before its next attempt, as a pool replaces a broken connection. Every failed call is
//! retried, with backoff, while its error [`is_retryable`](idem_core::Error::is_retryable), as a
//! caller would; a call still failing after `max_attempts` stops its worker and is reported.
//!
//! Each worker plays an offline-first device owning a user (`u0`, `u1`, …), as in the MongoDB
//! run: it edits notes (`#[idem(version)]`, a version per edit; `#[idem(tombstone)]`), upserts
//! them alone and in batches (`upsert_many`) holding duplicates, two versions of one note and
//! stale copies, replays stale copies alone, deletes notes (some before they were ever pushed)
//! and re-pushes deleted ones, edits hot notes every worker shares (versions from a shared
//! counter: the highest wins) and races edits against deletions of racy shared notes (once
//! deleted, never live again). Every note held live earns its owner 10 points once
//! (`apply_once` with `Change::add`, op id from the note); awards derived from the notes, and
//! milestones every worker races for, go through `insert_new`, each own award earning 5 points
//! once; credits, debits and transfers to a shared bank account go through `apply_once` with an
//! op id per logical operation (half the transfers inside a transaction, debit and credit
//! committing together), and recent ones are replayed deliberately; receipts (an
//! `#[idem(idempotency_key)]` type) are recorded with `record`, and recent ones recorded again.
//!
//! A row remembers its latest [`DEFAULT_OP_WINDOW`] op ids: an operation replayed after more
//! newer ones were applied to the same row would apply again, as documented. The workers count
//! the operations applied per account and replay only those well within the window; retries
//! follow their failure at once.
//!
//! Every outcome is checked on the spot against what the worker's own view allows. At the end
//! the rows are read straight from the server (not through the proxy) and compared with a model
//! computed from the operation log in plain Rust: one row per natural key, under the id derived
//! from it; every note at the newest version written, with that version's content; every
//! tombstone intact (no resurrection); each award stored once and returned as new to at most one
//! caller; each balance the sum of its distinct operations, no op id recorded twice; each receipt
//! stored once, under the id every call recording it was given, with its payload. And what the
//! callers were told is exact: a first write (a note `Inserted`, an award returned, an operation
//! `Applied`, a receipt `Inserted`) is reported to exactly one call, or to none only when a call
//! writing it had a failed attempt whose reply may have been lost.
//!
//! Which operations each worker makes is a pure function of the seed; the versions of shared
//! notes and which batch meets which fault also depend on how the workers interleave.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use idem_core::postgres::{Change, Store, APPLIED_OPS_FIELD, DEFAULT_OP_WINDOW};
use idem_core::{Applied, BatchReport, Error, Id, Idempotent, OpId, Outcome};
use serde::{Deserialize, Serialize};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, NoTls};

use crate::chaos::{derive_seed, SplitMix64};
use crate::pg_proxy::{Faults, PgProxy, PgProxyConfig, PgProxyStats};

// ------------------------------------------------------------------------------------------------
// Configuration

/// What a PostgreSQL chaos run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Names the server in the report (`pg15`, `pg18`…).
    pub label: String,
    /// The server (a PostgreSQL URI).
    pub uri: String,
    /// The schema written to: dropped and created at the start, dropped at the end of a passing
    /// run unless `keep_schema`.
    pub schema: String,
    /// Seeds the operations and the faults.
    pub seed: u64,
    /// Concurrent workers, each with its own connection: at least 2.
    pub clients: usize,
    /// Logical operations, shared among the workers.
    pub operations: usize,
    /// Fault rates per write batch.
    pub faults: Faults,
    /// Attempts per call (and per connection) before a worker gives up on it (and stops).
    pub max_attempts: u32,
    /// Keep the schema after a passing run.
    pub keep_schema: bool,
}

impl Config {
    /// The full run on the server `label` at `uri`: 8 workers, 10,000 operations, 30% lost
    /// replies, 5% dropped requests and 5% killed connections.
    pub fn new(label: impl Into<String>, uri: impl Into<String>) -> Self {
        let label = label.into();
        let schema = format!("idem_chaos_{}_{}", identifier(&label), std::process::id());
        Config {
            label,
            uri: uri.into(),
            schema,
            seed: 1,
            clients: 8,
            operations: 10_000,
            faults: Faults {
                lost_ack: 0.3,
                drop_request: 0.05,
                kill_connection: 0.05,
            },
            max_attempts: 50,
            keep_schema: false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.faults.validate()?;
        if self.clients < 2 {
            return Err(format!(
                "a chaos run needs at least 2 clients, not {}",
                self.clients
            ));
        }
        if self.operations == 0 {
            return Err("a chaos run needs at least one operation".into());
        }
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if self.schema.is_empty()
            || !self
                .schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!(
                "the schema name {:?} must be lowercase letters, digits and _",
                self.schema
            ));
        }
        Ok(())
    }
}

/// `text` as a lowercase SQL identifier part: letters and digits kept, anything else `_`.
pub fn identifier(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// The documents

/// A note a device edits: a version per edit, a tombstone once deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes")]
#[serde(rename_all = "camelCase")]
struct Note {
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

/// A badge, derived from a user's notes (or a milestone all workers race for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
struct Award {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
}

/// A points account; its `balance` moves only through `apply_once`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
struct Account {
    #[idem(key)]
    owner: String,
    #[idem(effect)]
    balance: i64,
}

/// A receipt: no natural key, made idempotent by the key the device sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "receipts")]
#[serde(rename_all = "camelCase")]
struct Receipt {
    #[idem(idempotency_key)]
    request_key: String,
    user: String,
    amount: i64,
}

/// The stored name of the accounts' effect column.
const BALANCE: &str = "balance";
/// The owner of the hot notes every worker edits.
const HOT_OWNER: &str = "shared";
/// The user of the milestone awards every worker races for.
const EVERYONE: &str = "everyone";
/// The account transfers credit.
const BANK: &str = "bank";
const HOT_NOTES: u64 = 6;
/// Shared notes that workers also delete, racing their edits.
const RACY_NOTES: u64 = 4;
/// Notes per worker, including the ones deleted before they were pushed: this many, plus one per
/// four operations of the worker, so that deletions never outrun creations.
const MIN_NOTES: usize = 16;
const POINTS_PER_NOTE: i64 = 10;
const POINTS_PER_AWARD: i64 = 5;
/// A user earns `notes-N` once N of their notes were live.
const NOTE_BADGES: [usize; 11] = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144];
/// A worker that completed `k * MILESTONE_EVERY` operations has reached `milestone-k`.
const MILESTONE_EVERY: usize = 25;
/// How far back a deliberate replay reaches (a worker's own operations or receipts).
const RECENT: usize = 16;
/// 2025-01-01T00:00:00Z.
const BASE_MS: i64 = 1_735_689_600_000;
const YEAR_MS: u64 = 365 * 86_400_000;
/// How many problems a report spells out.
const MAX_PROBLEMS: usize = 20;

/// A note's natural key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct NoteKey {
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

    /// A shared note that workers also delete: `shared/d<n>`.
    fn racy(number: u64) -> Self {
        NoteKey {
            owner: HOT_OWNER.to_owned(),
            note_id: format!("d{number}"),
        }
    }

    /// Whether every worker writes this note (a hot or a racy one).
    fn is_hot(&self) -> bool {
        self.owner == HOT_OWNER
    }

    /// Whether workers race deletions of this note against its edits.
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

/// What a worker did, once the call succeeded: the model's input.
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
// The report

/// The invariants; each must be 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invariants {
    /// Natural keys (or idempotency keys) stored in more than one row (extra rows).
    pub duplicates: u64,
    /// Rows whose `_id` is not the id derived from their key, or that the model does not know.
    pub orphans: u64,
    /// Rows the model expects that are not stored (notes, accounts, receipts).
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
    /// Outcomes a call returned that its worker's view rules out.
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
            ("missing rows", self.missing),
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

/// What a PostgreSQL chaos run did and found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The server's label.
    pub label: String,
    /// The server's `server_version`.
    pub server_version: String,
    /// The seed.
    pub seed: u64,
    /// Concurrent workers.
    pub clients: usize,
    /// The configured fault rates.
    pub faults: Faults,
    /// Logical operations completed.
    pub operations: u64,
    /// Calls to idem (each retried until it succeeded); a transaction counts as one.
    pub calls: u64,
    /// Failed attempts that were retried.
    pub retries: u64,
    /// Connections made again after the proxy closed or reset one.
    pub reconnects: u64,
    /// What the proxy did.
    pub proxy: PgProxyStats,
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
    /// Stored notes live and deleted, awards, accounts, receipts.
    pub stored: (u64, u64, u64, u64, u64),
    /// Replays skipped because the operation had left the row's op window.
    pub replays_skipped: u64,
    /// How long the run took: setup, workers, check.
    pub duration: Duration,
    /// How long the workers ran.
    pub clients_duration: Duration,
    /// The first problems found, in words.
    pub problems: Vec<String>,
}

impl Report {
    /// Faults that actually happened.
    pub fn faults_injected(&self) -> u64 {
        self.proxy.replies_dropped + self.proxy.requests_dropped + self.proxy.connections_killed
    }

    /// Whether every invariant holds.
    pub fn is_clean(&self) -> bool {
        self.invariants.total() == 0
    }

    /// Whether what callers observed is at most the truth (always required).
    pub fn observed_within_truth(&self) -> bool {
        self.observed_inserted <= self.true_inserted
            && self.observed_awarded <= self.true_awarded
            && self.observed_applied <= self.true_applied
            && self.observed_recorded <= self.true_recorded
    }

    /// Whether what callers observed is exactly the truth (required without faults).
    pub fn observed_equals_truth(&self) -> bool {
        self.observed_inserted == self.true_inserted
            && self.observed_awarded == self.true_awarded
            && self.observed_applied == self.true_applied
            && self.observed_recorded == self.true_recorded
    }

    /// Whether the run passed: invariants hold, observations are within the truth, and equal to
    /// it when no fault happened.
    pub fn passed(&self) -> bool {
        self.is_clean()
            && self.observed_within_truth()
            && (self.faults_injected() > 0 || self.observed_equals_truth())
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
        writeln!(
            f,
            "idem PostgreSQL chaos run: {} (PostgreSQL {}), seed {}, {} clients",
            self.label, self.server_version, self.seed, self.clients
        )?;
        writeln!(
            f,
            "fault rates per write batch: lost reply {}, dropped request {}, killed connection {}",
            percent(self.faults.lost_ack),
            percent(self.faults.drop_request),
            percent(self.faults.kill_connection)
        )?;
        writeln!(f)?;
        row(f, "operations", &self.operations)?;
        row(f, "calls to idem", &self.calls)?;
        row(f, "retries (failed attempts retried)", &self.retries)?;
        row(f, "reconnections", &self.reconnects)?;
        row(f, "batches forwarded", &self.proxy.batches_forwarded)?;
        row(f, "write batches", &self.proxy.write_batches)?;
        row(f, "replies lost", &self.proxy.replies_dropped)?;
        row(f, "requests dropped", &self.proxy.requests_dropped)?;
        row(f, "connections killed", &self.proxy.connections_killed)?;
        let writes = self.proxy.write_batches;
        if writes > 0 {
            let share = |n: u64| format!("{:.1}%", n as f64 * 100.0 / writes as f64);
            let shares = format!(
                "{} / {}",
                share(self.proxy.replies_dropped),
                share(self.faults_injected())
            );
            row(f, "of write batches: lost replies / faulted", &shares)?;
        }
        row(
            f,
            "replays skipped (left the op window)",
            &self.replays_skipped,
        )?;
        writeln!(f)?;
        writeln!(f, "  {:<40} {:>10}", "invariant (each must be 0)", "count")?;
        for (name, count) in self.invariants.rows() {
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
        let pairs = [
            (
                "Inserted (notes)",
                self.observed_inserted,
                self.true_inserted,
            ),
            (
                "newly awarded (insert_new)",
                self.observed_awarded,
                self.true_awarded,
            ),
            (
                "Applied (apply_once)",
                self.observed_applied,
                self.true_applied,
            ),
            (
                "Inserted (record)",
                self.observed_recorded,
                self.true_recorded,
            ),
        ];
        for (name, observed, truth) in pairs {
            let ok = if faulty {
                observed <= truth
            } else {
                observed == truth
            };
            let mark = if ok { "" } else { "  <-- VIOLATED" };
            writeln!(f, "  {name:<40} {observed:>10} {truth:>10}{mark}")?;
        }
        writeln!(f)?;
        let (live, deleted, awards, accounts, receipts) = self.stored;
        writeln!(
            f,
            "  stored: {live} live notes, {deleted} deleted notes, {awards} awards, {accounts} accounts, {receipts} receipts"
        )?;
        writeln!(
            f,
            "  duration: {:.1} s ({:.1} s of client operations)",
            self.duration.as_secs_f64(),
            self.clients_duration.as_secs_f64()
        )?;
        for problem in &self.problems {
            writeln!(f, "  problem: {problem}")?;
        }
        write!(
            f,
            "  verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

// ------------------------------------------------------------------------------------------------
// Connections

/// `host:port` of the (first) server of `config`: what the proxy relays to.
pub fn upstream_address(config: &tokio_postgres::Config) -> Result<String, String> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) if host.contains(':') => Ok(format!("[{host}]:{port}")),
        Some(Host::Tcp(host)) => Ok(format!("{host}:{port}")),
        None => Ok(format!("localhost:{port}")),
        #[allow(unreachable_patterns)]
        Some(_) => Err("the proxy needs a server URI with a TCP host".into()),
    }
}

/// The connection settings of `base` (user, password, database) with `search_path` set to
/// `schema`, connecting to the proxy at `via`, or to the server itself.
pub fn connection_config(
    base: &tokio_postgres::Config,
    schema: &str,
    via: Option<SocketAddr>,
) -> tokio_postgres::Config {
    let mut config = match via {
        Some(proxy) => {
            let mut config = tokio_postgres::Config::new();
            config.host(proxy.ip().to_string()).port(proxy.port());
            if let Some(user) = base.get_user() {
                config.user(user);
            }
            if let Some(password) = base.get_password() {
                config.password(password);
            }
            if let Some(dbname) = base.get_dbname() {
                config.dbname(dbname);
            }
            config.ssl_mode(SslMode::Disable);
            config
        }
        None => base.clone(),
    };
    config
        .options(format!("-c search_path={schema}"))
        .application_name("idem-pg-chaos")
        .connect_timeout(Duration::from_secs(5));
    config
}

/// A connected client of `config`, its connection driven by a task of its own.
pub async fn connect(config: &tokio_postgres::Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the connection breaks: the caller sees either.
        let _ = connection.await;
    });
    Ok(client)
}

// ------------------------------------------------------------------------------------------------
// Running it

/// Runs the chaos run described by `config` and checks the stored rows. `Err` only when the run
/// could not be set up or checked (no server, a bad configuration); everything the run finds is
/// in the report.
pub async fn run(config: &Config) -> Result<Report, String> {
    config.validate()?;
    let started = Instant::now();
    let base: tokio_postgres::Config = config
        .uri
        .parse()
        .map_err(|e| format!("the server URI {:?}: {e}", config.uri))?;
    let upstream = upstream_address(&base)?;
    let schema = &config.schema;

    let admin = connect(&connection_config(&base, "public", None))
        .await
        .map_err(|e| format!("connecting to {}: {e}", config.label))?;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .map_err(|e| format!("making the schema {schema}: {e}"))?;
    let server_version: String = admin
        .query_one("SELECT current_setting('server_version')", &[])
        .await
        .map_err(|e| format!("reading the server version: {e}"))?
        .get(0);
    let direct = connect(&connection_config(&base, schema, None))
        .await
        .map_err(|e| format!("connecting to {}: {e}", config.label))?;
    let users: Vec<String> = (0..config.clients).map(|i| format!("u{i}")).collect();
    let accounts: Vec<Account> = users
        .iter()
        .map(String::as_str)
        .chain([BANK])
        .map(|owner| Account {
            owner: owner.to_owned(),
            balance: 0,
        })
        .collect();
    let setup = Store::new();
    let set_up = async {
        setup.ensure_table::<Note, _>(&direct).await?;
        setup.ensure_table::<Award, _>(&direct).await?;
        setup.ensure_table::<Account, _>(&direct).await?;
        setup.ensure_table::<Receipt, _>(&direct).await?;
        setup.insert_new(&direct, &accounts).await
    };
    set_up.await.map_err(|e| format!("setting up: {e}"))?;

    let proxy_config = PgProxyConfig::new(derive_seed(config.seed, u64::MAX), config.faults);
    let proxy = PgProxy::start(&upstream, proxy_config)
        .await
        .map_err(|e| format!("starting the proxy in front of {upstream}: {e}"))?;
    let through_proxy = connection_config(&base, schema, Some(proxy.addr()));

    let shared = Arc::new(Shared {
        hot_revs: (0..HOT_NOTES).map(|_| AtomicI64::new(0)).collect(),
        racy_revs: (0..RACY_NOTES).map(|_| AtomicI64::new(0)).collect(),
        inserted: Mutex::default(),
        uncertain_notes: Mutex::default(),
        awarded: Mutex::default(),
        uncertain_awards: Mutex::default(),
        account_ops: accounts
            .iter()
            .map(|account| (account.owner.clone(), AtomicU64::new(0)))
            .collect(),
    });

    // The workers share one store, which checks each table through the proxy (reads pass).
    let store = Store::new();
    let clients_started = Instant::now();
    let mut tasks = Vec::with_capacity(config.clients);
    for (index, user) in users.iter().enumerate() {
        let operations = config.operations / config.clients
            + usize::from(index < config.operations % config.clients);
        let worker = Worker {
            user: user.clone(),
            rng: SplitMix64::new(derive_seed(config.seed, index as u64)),
            jitter: SplitMix64::new(derive_seed(config.seed, (index as u64) << 32 | 0xffff)),
            store: store.clone(),
            connection: through_proxy.clone(),
            client: None,
            connected_once: false,
            shared: Arc::clone(&shared),
            max_attempts: config.max_attempts,
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
        };
        tasks.push(tokio::spawn(worker.run(operations)));
    }
    let mut logs = Vec::with_capacity(tasks.len());
    let mut tally = Tally::default();
    let mut effects: HashMap<(String, String), EffectSeen> = HashMap::new();
    let mut operations = 0;
    for task in tasks {
        let finished = task
            .await
            .map_err(|e| format!("a worker task failed: {e}"))?;
        operations += finished.done as u64;
        tally.absorb(finished.tally);
        logs.push(finished.log);
        for (key, seen) in finished.effects {
            let entry = effects.entry(key).or_default();
            entry.applied += seen.applied;
            entry.uncertain |= seen.uncertain;
        }
    }
    let clients_duration = clients_started.elapsed();
    let proxy_stats = proxy.shutdown().await;

    let model = Model::from_logs(&logs, &users);
    let mut invariants = Invariants {
        wrong_outcomes: tally.wrong_outcomes,
        failed_calls: tally.failed_calls,
        ..Invariants::default()
    };
    let mut problems = tally.problems;
    let problem = |problems: &mut Vec<String>, text: String| {
        if problems.len() < MAX_PROBLEMS * 2 {
            problems.push(text);
        }
    };
    // What the callers were told, against the model.
    {
        let inserted = lock(&shared.inserted);
        let uncertain = lock(&shared.uncertain_notes);
        for (key, times) in inserted.iter().filter(|(_, times)| **times > 1) {
            invariants.double_inserts += u64::from(times - 1);
            problem(
                &mut problems,
                format!("note {key} was reported Inserted {times} times"),
            );
        }
        for key in &model.inserted {
            if !inserted.contains_key(key) && !uncertain.contains(key) {
                invariants.unreported_firsts += 1;
                problem(
                    &mut problems,
                    format!("note {key} was inserted by an upsert, but no call was told so"),
                );
            }
        }
        let awarded = lock(&shared.awarded);
        let uncertain = lock(&shared.uncertain_awards);
        for ((user, badge), times) in awarded.iter().filter(|(_, times)| **times > 1) {
            invariants.double_awards += u64::from(times - 1);
            problem(
                &mut problems,
                format!("award {user}/{badge} was returned as new {times} times"),
            );
        }
        for award in &model.awards {
            if !awarded.contains_key(award) && !uncertain.contains(award) {
                invariants.unreported_firsts += 1;
                problem(
                    &mut problems,
                    format!(
                        "award {}/{} was returned as new to no call",
                        award.0, award.1
                    ),
                );
            }
        }
    }
    for ((account, operation), seen) in &effects {
        if seen.applied > 1 {
            invariants.double_applied += u64::from(seen.applied - 1);
            problem(
                &mut problems,
                format!(
                    "operation {operation} on {account} was reported Applied {} times",
                    seen.applied
                ),
            );
        } else if seen.applied == 0 && !seen.uncertain {
            invariants.unreported_firsts += 1;
            problem(
                &mut problems,
                format!("operation {operation} on {account} was reported Applied to no call"),
            );
        }
    }
    for (key, receipt) in &model.receipts {
        if receipt.inserted > 1 {
            invariants.double_recorded += u64::from(receipt.inserted - 1);
            problem(
                &mut problems,
                format!(
                    "receipt {key} was reported Inserted {} times",
                    receipt.inserted
                ),
            );
        } else if receipt.inserted == 0 && !receipt.uncertain {
            invariants.unreported_firsts += 1;
            problem(
                &mut problems,
                format!("receipt {key} was reported Inserted to no call"),
            );
        }
    }
    let stored = check(&direct, &model, &mut invariants, &mut problems)
        .await
        .map_err(|e| format!("reading the stored rows back: {e}"))?;
    problems.truncate(MAX_PROBLEMS);

    let true_applied = effects.len() as u64;
    if true_applied != model.effects {
        problems.push(format!(
            "the workers applied {true_applied} distinct operations, the model counts {}",
            model.effects
        ));
        invariants.wrong_outcomes += 1;
    }
    let report = Report {
        label: config.label.clone(),
        server_version,
        seed: config.seed,
        clients: config.clients,
        faults: config.faults,
        operations,
        calls: tally.calls,
        retries: tally.retries,
        reconnects: tally.reconnects,
        proxy: proxy_stats,
        invariants,
        observed_inserted: tally.inserted,
        true_inserted: model.inserted.iter().filter(|key| !key.is_racy()).count() as u64,
        observed_awarded: tally.awarded,
        true_awarded: model.awards.len() as u64,
        observed_applied: tally.applied,
        true_applied: model.effects,
        observed_recorded: tally.recorded,
        true_recorded: model.receipts.len() as u64,
        stored,
        replays_skipped: tally.replays_skipped,
        duration: started.elapsed(),
        clients_duration,
        problems,
    };
    if report.passed() && !config.keep_schema {
        let _ = admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
    Ok(report)
}

// ------------------------------------------------------------------------------------------------
// The workers

/// State all workers share.
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
    /// row's op window.
    account_ops: HashMap<String, AtomicU64>,
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
        self.ops_on(account).saturating_sub(position) < DEFAULT_OP_WINDOW as u64 / 2
    }
}

/// What the callers were told of one operation on one account.
#[derive(Clone, Copy, Debug, Default)]
struct EffectSeen {
    /// Calls told `Applied`.
    applied: u32,
    /// A call applying it had a failed attempt that may have applied it.
    uncertain: bool,
}

/// A worker's counts.
#[derive(Default)]
struct Tally {
    calls: u64,
    retries: u64,
    reconnects: u64,
    failed_calls: u64,
    inserted: u64,
    awarded: u64,
    applied: u64,
    recorded: u64,
    replays_skipped: u64,
    wrong_outcomes: u64,
    problems: Vec<String>,
}

impl Tally {
    fn absorb(&mut self, other: Tally) {
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

/// A note as its owning worker knows it.
#[derive(Clone, Debug)]
struct LocalNote {
    key: NoteKey,
    /// What the server holds, by the rules: (version, deleted).
    stored: Option<(i64, bool)>,
    /// The newest version the worker made.
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

/// A call failed for good: the worker stops.
struct Stop;

type Step<T = ()> = Result<T, Stop>;

/// What a worker hands back.
struct Finished {
    done: usize,
    log: Vec<Event>,
    effects: HashMap<(String, String), EffectSeen>,
    tally: Tally,
}

/// Why an attempt failed, for the retry decision.
struct Failure {
    retryable: bool,
    /// The connection is gone or in doubt: connect again.
    broken: bool,
    message: String,
}

impl Failure {
    fn idem(error: &Error) -> Self {
        Failure {
            retryable: error.is_retryable(),
            broken: error
                .as_backend()
                .is_some_and(|backend| backend.code().is_none()),
            message: error.to_string(),
        }
    }

    fn driver(error: tokio_postgres::Error) -> Self {
        let message = error.to_string();
        let broken = error.is_closed() || error.code().is_none();
        let error = idem_core::postgres::driver_error(error);
        Failure {
            retryable: error.is_retryable(),
            broken,
            message,
        }
    }
}

/// Makes one idem call through the worker's connection until it succeeds, connecting again when
/// the connection broke; evaluates to its value and whether an earlier attempt failed (and so
/// may have written). `?`s out with `Stop` when the call fails for good.
macro_rules! retried {
    ($worker:ident, $what:expr, |$store:ident, $client:ident| $attempt:expr) => {{
        $worker.tally.calls += 1;
        let mut failed: u32 = 0;
        loop {
            $worker.connect().await?;
            let Some($client) = $worker.client.as_ref() else {
                continue;
            };
            let $store = &$worker.store;
            let result = $attempt.await;
            match result {
                Ok(value) => break (value, failed > 0),
                Err(error) => {
                    $worker
                        .attempt_failed(&mut failed, $what, Failure::idem(&error))
                        .await?
                }
            }
        }
    }};
}

struct Worker {
    user: String,
    /// Draws the operations: consumed only by them, so they are a function of the seed.
    rng: SplitMix64,
    /// Draws the backoff jitter.
    jitter: SplitMix64,
    store: Store,
    /// How to connect (through the proxy).
    connection: tokio_postgres::Config,
    client: Option<Client>,
    connected_once: bool,
    shared: Arc<Shared>,
    max_attempts: u32,
    /// The most notes this worker makes.
    max_notes: usize,
    notes: Vec<LocalNote>,
    /// Badges whose bonus this worker has seen applied, and where on the account.
    bonuses: BTreeMap<String, u64>,
    /// Racy notes this worker deleted.
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

/// The outcomes the worker's view allows for a copy at `rev` meeting `stored`; `retried` when an
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Worker {
    async fn run(mut self, operations: usize) -> Finished {
        for _ in 0..operations {
            let step = match self.rng.below(100) {
                0..=19 => self.edit().await,
                20..=31 => self.batch().await,
                32..=38 => self.stale_replay().await,
                39..=44 => self.delete().await,
                45..=48 => self.repush_deleted().await,
                49..=56 => self.hot_edit().await,
                57..=60 => self.racy_edit_or_delete().await,
                61..=68 => self.awards().await,
                69..=78 => self.credit().await,
                79..=84 => self.transfer().await,
                85..=88 => self.replay_operation().await,
                89..=95 => self.record_receipt().await,
                _ => self.replay_receipt().await,
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

    // -- connections and retries

    /// Makes sure the worker holds an open connection, connecting (again) if it does not.
    async fn connect(&mut self) -> Step {
        if self
            .client
            .as_ref()
            .is_some_and(|client| !client.is_closed())
        {
            return Ok(());
        }
        self.client = None;
        let mut failed = 0;
        loop {
            match connect(&self.connection).await {
                Ok(client) => {
                    if self.connected_once {
                        self.tally.reconnects += 1;
                    }
                    self.connected_once = true;
                    self.client = Some(client);
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
        let closed = self.client.as_ref().is_none_or(Client::is_closed);
        if failure.broken || closed {
            self.client = None;
        }
        self.backoff(*failed).await;
        Ok(())
    }

    async fn backoff(&mut self, failed: u32) {
        let millis = (1u64 << failed.min(6)) + self.jitter.below(4);
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }

    // -- calls

    async fn upsert(&mut self, note: &Note) -> Step<(Outcome, bool)> {
        let key = NoteKey {
            owner: note.owner.clone(),
            note_id: note.note_id.clone(),
        };
        let (outcome, retried) =
            retried!(self, "upsert", |store, client| store.upsert(client, note));
        if outcome == Outcome::Inserted {
            self.record_inserted(note);
        }
        if retried {
            lock(&self.shared.uncertain_notes).insert(key);
        }
        Ok((outcome, retried))
    }

    /// `upsert_many`, retried whole until no document's outcome is an error worth retrying.
    async fn upsert_many(&mut self, notes: &[Note]) -> Step<(BatchReport, bool)> {
        let mut retried = false;
        let mut failed = 0;
        loop {
            let (report, call_retried) = retried!(self, "upsert_many", |store, client| store
                .upsert_many(client, notes));
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
                        for note in notes {
                            uncertain.insert(NoteKey {
                                owner: note.owner.clone(),
                                note_id: note.note_id.clone(),
                            });
                        }
                    }
                    return Ok((report, retried));
                }
                Some(error) => {
                    let failure = Failure::idem(error);
                    retried = true;
                    self.attempt_failed(&mut failed, "a batch document", failure)
                        .await?;
                }
            }
        }
    }

    async fn delete_note(&mut self, note: &Note) -> Step<(Outcome, bool)> {
        Ok(retried!(self, "delete", |store, client| store.delete(client, note)))
    }

    async fn insert_new(&mut self, members: &[Award]) -> Step<(Vec<Award>, bool)> {
        let (new, retried) = retried!(self, "insert_new", |store, client| store
            .insert_new(client, members));
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
    /// this op id is new to the account as far as the worker knows. Returns the operation's
    /// position on the account when new.
    async fn apply(
        &mut self,
        account: &str,
        op: &OpId,
        amount: i64,
        expect_new: bool,
    ) -> Step<u64> {
        let id = self.account_id(account)?;
        let changes = [Change::add(BALANCE, amount)];
        let (applied, retried) = retried!(self, "apply_once", |store, client| store
            .apply_once::<Account, _>(client, id, op, &changes));
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
        let key = NoteKey {
            owner: note.owner.clone(),
            note_id: note.note_id.clone(),
        };
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

    // -- the worker's view of its notes

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
            Some((_, true)) => outcome == Outcome::Unchanged,
            _ => outcome == Outcome::Deleted || (retried && outcome == Outcome::Unchanged),
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

    /// Edits a note every worker edits: the highest version wins.
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

    /// Edits or deletes a note every worker may delete. Once deleted it stays deleted: after
    /// this worker's own deletion, its pushes must answer `Deleted`.
    async fn racy_edit_or_delete(&mut self) -> Step {
        let number = self.rng.below(RACY_NOTES);
        let key = NoteKey::racy(number);
        let counter = &self.shared.racy_revs[number as usize];
        let deleted_before = self.racy_deleted.contains(&number);
        if self.rng.chance(0.3) {
            let rev = counter.load(Ordering::Relaxed).max(1);
            let (outcome, _) = self.delete_note(&key.note(rev, true)).await?;
            let fine = if deleted_before {
                outcome == Outcome::Unchanged
            } else {
                matches!(outcome, Outcome::Deleted | Outcome::Unchanged)
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
                    "racy note {key}, deleted by this worker, answered {outcome} to r{rev}"
                ));
            }
            self.log.push(Event::Pushed { key, rev });
        }
        Ok(())
    }

    /// Derives the awards from the notes held live and inserts the full set; credits each
    /// award's bonus once. Then the shared milestones, which every worker races for.
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
            self.log.push(Event::Moved {
                account: account.clone(),
                operation: operation.clone(),
                amount,
            });
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
        self.tally.calls += 1;
        let mut failed = 0u32;
        // A `COMMIT` failed: that attempt may have committed.
        let mut uncertain = false;
        let applied = loop {
            self.connect().await?;
            let store = &self.store;
            let Some(client) = self.client.as_mut() else {
                continue;
            };
            let mut at_commit = false;
            let attempt: Result<Vec<Applied>, Failure> = async {
                let tx = client.transaction().await.map_err(Failure::driver)?;
                let mut applied = Vec::with_capacity(steps.len());
                for ((_, amount), id) in steps.iter().zip(&ids) {
                    let changes = [Change::add(BALANCE, *amount)];
                    let outcome = store
                        .apply_once::<Account, _>(&tx, *id, &op, &changes)
                        .await
                        .map_err(|error| Failure::idem(&error))?;
                    applied.push(outcome);
                }
                at_commit = true;
                tx.commit().await.map_err(Failure::driver)?;
                Ok(applied)
            }
            .await;
            match attempt {
                Ok(applied) => break applied,
                Err(failure) => {
                    uncertain |= at_commit;
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
            self.log.push(Event::Moved {
                account: account.clone(),
                operation: operation.clone(),
                amount,
            });
            positioned.push((account, amount, position));
        }
        self.remember(Recent {
            operation,
            steps: positioned,
        });
        Ok(())
    }

    /// A credit or a debit of the worker's own account.
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
    /// a transaction.
    async fn transfer(&mut self) -> Step {
        let amount = self.rng.between(1, 50);
        let in_transaction = self.rng.chance(0.5);
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
            self.log.push(Event::Moved {
                account: account.clone(),
                operation: recent.operation.clone(),
                amount: *amount,
            });
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
        let (recorded, retried) = retried!(self, "record", |store, client| store
            .record(client, &receipt));
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
        let (recorded, retried) = retried!(self, "record", |store, client| store
            .record(client, receipt));
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

// ------------------------------------------------------------------------------------------------
// The model: what the server must hold, from the operation log alone (no idem, no database)

#[derive(Clone, Debug)]
struct ModelNote {
    /// The newest version: the one stored if the note is live.
    rev: i64,
    deleted: bool,
    /// For a racy note, every version written: a deleted one keeps whichever was stored when
    /// the first deletion landed.
    racy: Option<BTreeSet<i64>>,
}

#[derive(Clone, Debug)]
struct ModelReceipt {
    user: String,
    amount: i64,
    /// Every id a call recording it was given.
    ids: BTreeSet<Id>,
    /// Calls told `Inserted`.
    inserted: u32,
    /// A call recording it first had a failed attempt.
    uncertain: bool,
    /// Recorded with another payload by some call (the workload never does).
    payloads_differ: bool,
}

struct Model {
    notes: BTreeMap<NoteKey, ModelNote>,
    /// Notes first created by an upsert.
    inserted: BTreeSet<NoteKey>,
    awards: BTreeSet<(String, String)>,
    balances: BTreeMap<String, i64>,
    /// Distinct effects: (account, operation) pairs, notes held live, own awards.
    effects: u64,
    receipts: BTreeMap<String, ModelReceipt>,
}

impl Model {
    /// Replays the logs: per note, a copy replaces the stored one only if it is live and the
    /// copy strictly newer; a deletion marks it (storing the copy if nothing was stored); a
    /// deleted note stays deleted. A note earns its owner 10 points once if it was ever held
    /// live, an award its user 5 points; a money operation counts once per account. A receipt
    /// is stored once, under the one id every call was given.
    fn from_logs(logs: &[Vec<Event>], users: &[String]) -> Model {
        let mut notes: BTreeMap<NoteKey, ModelNote> = BTreeMap::new();
        let mut inserted = BTreeSet::new();
        let mut awards = BTreeSet::new();
        let mut moves: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut receipts: BTreeMap<String, ModelReceipt> = BTreeMap::new();
        // Each worker's log in its order; workers own disjoint notes but the hot ones, and for
        // those (never deleted) the newest version wins whatever the order.
        for event in logs.iter().flatten() {
            match event {
                // Racy notes: the order across workers is unknown, so only what holds in every
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
                        "the chaos worker replayed {operation} on {account} with another amount"
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
        let mut balances: BTreeMap<String, i64> = users
            .iter()
            .map(String::as_str)
            .chain([BANK])
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

// ------------------------------------------------------------------------------------------------
// The check: the stored rows, read straight from the server, against the model

/// Compares the stored rows with the model, counting every violation; returns the stored
/// (live notes, deleted notes, awards, accounts, receipts).
async fn check(
    client: &Client,
    model: &Model,
    invariants: &mut Invariants,
    problems: &mut Vec<String>,
) -> Result<(u64, u64, u64, u64, u64), tokio_postgres::Error> {
    let mut problem = |text: String| {
        if problems.len() < MAX_PROBLEMS * 2 {
            problems.push(text);
        }
    };

    // Notes.
    let notes = client
        .query(
            "SELECT \"_id\", \"owner\", \"noteId\", \"createdAt\", \"rev\", \"text\", \
             \"deletedAt\" FROM notes",
            &[],
        )
        .await?;
    let mut seen: BTreeMap<NoteKey, u64> = BTreeMap::new();
    let (mut live, mut deleted) = (0, 0);
    for stored in &notes {
        let id: String = stored.get(0);
        let key = NoteKey {
            owner: stored.get::<_, Option<String>>(1).unwrap_or_default(),
            note_id: stored.get::<_, Option<String>>(2).unwrap_or_default(),
        };
        let created_at: Option<i64> = stored.get(3);
        let rev: Option<i64> = stored.get(4);
        let text: Option<String> = stored.get(5);
        let marker: Option<i64> = stored.get(6);
        *seen.entry(key.clone()).or_default() += 1;
        let derived = Note::derive_id(&key.owner, &key.note_id, &created_at.unwrap_or(-1));
        if derived.map(|derived| derived.to_string()).ok().as_deref() != Some(id.as_str()) {
            invariants.orphans += 1;
            problem(format!(
                "note {key} is stored under _id {id}, not the id derived from its key"
            ));
        }
        if marker.is_some() {
            deleted += 1;
        } else {
            live += 1;
        }
        let Some(expected) = model.notes.get(&key) else {
            invariants.orphans += 1;
            problem(format!("note {key} is stored but was never written"));
            continue;
        };
        match (expected.deleted, marker) {
            (true, None) => {
                invariants.resurrections += 1;
                problem(format!("note {key} was deleted but is stored live"));
            }
            (true, Some(marker)) if marker != key.marker() => {
                invariants.tombstones_altered += 1;
                problem(format!(
                    "note {key}: tombstone {marker} is not the one written ({})",
                    key.marker()
                ));
            }
            (false, Some(_)) => {
                invariants.wrong_content += 1;
                problem(format!(
                    "note {key} was never deleted but is stored deleted"
                ));
            }
            _ => {}
        }
        let racy_and_deleted = expected.deleted && expected.racy.is_some();
        let text_of = |rev: i64| text.as_deref() == Some(key.text(rev).as_str());
        match rev {
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
                if !text_of(rev) || created_at != Some(key.created_at()) {
                    invariants.wrong_content += 1;
                    problem(format!("note {key} r{rev} has content not of its version"));
                }
            }
            _ => {
                invariants.wrong_content += 1;
                problem(format!(
                    "note {key} is stored at {rev:?}, the newest written is r{}",
                    expected.rev
                ));
            }
        }
    }
    for (key, count) in &seen {
        if *count > 1 {
            invariants.duplicates += count - 1;
            problem(format!("note {key} is stored {count} times"));
        }
    }
    for key in model.notes.keys().filter(|key| !seen.contains_key(*key)) {
        invariants.missing += 1;
        problem(format!("note {key} was written but is not stored"));
    }

    // Awards.
    let awards = client
        .query("SELECT \"_id\", \"user\", \"badge\" FROM awards", &[])
        .await?;
    let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
    for stored in &awards {
        let id: String = stored.get(0);
        let key = (
            stored.get::<_, Option<String>>(1).unwrap_or_default(),
            stored.get::<_, Option<String>>(2).unwrap_or_default(),
        );
        *seen.entry(key.clone()).or_default() += 1;
        let derived = Award::derive_id(&key.0, &key.1).map(|derived| derived.to_string());
        if derived.ok().as_deref() != Some(id.as_str()) || !model.awards.contains(&key) {
            invariants.orphans += 1;
            problem(format!(
                "award {}/{} is stored under an unexpected id or was never derived",
                key.0, key.1
            ));
        }
    }
    for ((user, badge), count) in &seen {
        if *count > 1 {
            invariants.duplicates += count - 1;
            problem(format!("award {user}/{badge} is stored {count} times"));
        }
    }
    for (user, badge) in model.awards.iter().filter(|key| !seen.contains_key(*key)) {
        invariants.missing_awards += 1;
        problem(format!(
            "award {user}/{badge} was derived but is not stored"
        ));
    }

    // Accounts.
    let accounts = client
        .query(
            &format!(
                "SELECT \"_id\", \"owner\", \"balance\", \"{APPLIED_OPS_FIELD}\"::text \
                 FROM accounts"
            ),
            &[],
        )
        .await?;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in &accounts {
        let id: String = stored.get(0);
        let owner: String = stored.get::<_, Option<String>>(1).unwrap_or_default();
        *seen.entry(owner.clone()).or_default() += 1;
        let derived = Account::derive_id(&owner).map(|derived| derived.to_string());
        if derived.ok().as_deref() != Some(id.as_str()) {
            invariants.orphans += 1;
            problem(format!("account {owner} is stored under an unexpected id"));
        }
        let Some(&expected) = model.balances.get(&owner) else {
            invariants.orphans += 1;
            problem(format!("account {owner} was never opened"));
            continue;
        };
        let balance: i64 = stored.get::<_, Option<i64>>(2).unwrap_or(0);
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
        let ops: Option<String> = stored.get(3);
        let recorded: Vec<String> = ops
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let distinct: BTreeSet<&str> = recorded.iter().map(String::as_str).collect();
        if distinct.len() < recorded.len() {
            invariants.double_credits += (recorded.len() - distinct.len()) as u64;
            problem(format!("account {owner} recorded an op id twice"));
        }
    }
    for (owner, count) in &seen {
        if *count > 1 {
            invariants.duplicates += count - 1;
            problem(format!("account {owner} is stored {count} times"));
        }
    }
    for owner in model
        .balances
        .keys()
        .filter(|owner| !seen.contains_key(*owner))
    {
        invariants.missing += 1;
        problem(format!("account {owner} is not stored"));
    }

    // Receipts.
    let receipts = client
        .query(
            "SELECT \"_id\", \"requestKey\", \"user\", \"amount\" FROM receipts",
            &[],
        )
        .await?;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in &receipts {
        let id: String = stored.get(0);
        let key: String = stored.get::<_, Option<String>>(1).unwrap_or_default();
        let user: Option<String> = stored.get(2);
        let amount: Option<i64> = stored.get(3);
        *seen.entry(key.clone()).or_default() += 1;
        let Some(expected) = model.receipts.get(&key) else {
            invariants.orphans += 1;
            problem(format!("receipt {key} is stored but was never recorded"));
            continue;
        };
        let given: Vec<String> = expected.ids.iter().map(Id::to_string).collect();
        if given != [id.clone()] {
            invariants.receipts_altered += 1;
            problem(format!(
                "receipt {key} is stored under {id}; the calls recording it were given {given:?}"
            ));
        }
        if expected.payloads_differ
            || user.as_deref() != Some(expected.user.as_str())
            || amount != Some(expected.amount)
        {
            invariants.receipts_altered += 1;
            problem(format!(
                "receipt {key} holds {user:?}/{amount:?}, recorded as {}/{}",
                expected.user, expected.amount
            ));
        }
    }
    for (key, count) in &seen {
        if *count > 1 {
            invariants.duplicates += count - 1;
            problem(format!("receipt {key} is stored {count} times"));
        }
    }
    for key in model.receipts.keys().filter(|key| !seen.contains_key(*key)) {
        invariants.missing += 1;
        problem(format!("receipt {key} was recorded but is not stored"));
    }

    Ok((
        live,
        deleted,
        awards.len() as u64,
        accounts.len() as u64,
        receipts.len() as u64,
    ))
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

    #[test]
    fn allowed_outcomes_follow_the_rules() {
        use Outcome::*;
        assert_eq!(allowed(None, 1, false), &[Inserted]);
        assert_eq!(allowed(Some((2, false)), 3, true), &[Updated, Unchanged]);
        assert_eq!(allowed(Some((2, false)), 2, false), &[Unchanged]);
        assert_eq!(allowed(Some((2, false)), 1, true), &[Stale]);
        assert_eq!(allowed(Some((2, true)), 9, false), &[Deleted]);
    }

    #[test]
    fn reads_the_upstream_of_a_uri() {
        let config: tokio_postgres::Config = "postgres://idem@127.0.0.1:5433/idem".parse().unwrap();
        assert_eq!(upstream_address(&config).unwrap(), "127.0.0.1:5433");
        assert_eq!(identifier("pg-18"), "pg_18");
    }
}
