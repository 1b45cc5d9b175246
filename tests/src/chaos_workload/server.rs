//! What the chaos runs of the SQL servers share ([`crate::pg_chaos`] for PostgreSQL,
//! [`crate::mysql_chaos`] for MariaDB), beside the workload: the configuration of a run, the long
//! run's settings read from the environment, the faults the wire proxy counted, the report, and
//! the checks their tests make of it. Each run goes through [`crate::fault_proxy::Proxy`] with
//! its server's wire, makes every other client's batches go in small chunks
//! ([`worker_stores`]), and reads the stored rows back straight from the server.

use std::future::Future;
use std::time::{Duration, Instant};

use super::{Clients, FaultsSeen, Findings, Operation, Report, Settings, Stored};
use crate::fault_proxy::{Faults, ProxyStats};

/// The operations of a SQL server's clients: the whole workload, transfers in transactions and
/// receipts included.
pub const SQL_MIX: &[(u64, Operation)] = &[
    (20, Operation::Edit),
    (32, Operation::Batch),
    (39, Operation::StaleReplay),
    (45, Operation::Delete),
    (49, Operation::RepushDeleted),
    (57, Operation::HotEdit),
    (61, Operation::RacyEditOrDelete),
    (69, Operation::Awards),
    (79, Operation::Credit),
    (85, Operation::Transfer),
    (89, Operation::ReplayOperation),
    (96, Operation::RecordReceipt),
    (100, Operation::ReplayReceipt),
];

/// The fault rates of a full run: 30% lost replies, 5% dropped requests, 5% killed connections.
pub const FULL_RUN_FAULTS: Faults = Faults {
    lost_ack: 0.3,
    drop_request: 0.05,
    kill_connection: 0.05,
};

/// What a chaos run on a SQL server does.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Names the server in the report (`pg15`, `pg18`, `mariadb`…).
    pub label: String,
    /// The server (a PostgreSQL or MySQL URI).
    pub uri: String,
    /// The schema (PostgreSQL) or database (MariaDB) written to: dropped and created at the
    /// start, dropped at the end of a passing run unless `keep_schema`.
    pub schema: String,
    /// Seeds the operations and the faults.
    pub seed: u64,
    /// Concurrent workers, each with its own connection: at least 2.
    pub clients: usize,
    /// Logical operations, shared among the workers.
    pub operations: usize,
    /// Fault rates per write request.
    pub faults: Faults,
    /// Attempts per call (and per connection) before a worker gives up on it (and stops).
    pub max_attempts: u32,
    /// Keep the schema after a passing run.
    pub keep_schema: bool,
}

impl ServerConfig {
    /// The full run on the server `label` at `uri`: 8 workers, 10,000 operations,
    /// [`FULL_RUN_FAULTS`].
    pub fn new(label: impl Into<String>, uri: impl Into<String>) -> Self {
        let label = label.into();
        let schema = format!("idem_chaos_{}_{}", identifier(&label), std::process::id());
        ServerConfig {
            label,
            uri: uri.into(),
            schema,
            faults: FULL_RUN_FAULTS,
            seed: 1,
            clients: 8,
            operations: 10_000,
            max_attempts: 50,
            keep_schema: false,
        }
    }

    /// A short run of the test `test` on the server `label` at `uri`, in a schema of its own.
    pub fn short(test: &str, label: &str, uri: &str, seed: u64, operations: usize) -> Self {
        let mut config = ServerConfig::new(label, uri);
        config.schema = format!(
            "idem_chaos_{test}_{}_{}",
            identifier(label),
            std::process::id()
        );
        config.seed = seed;
        config.operations = operations;
        config
    }

    /// The long run on the server `label` at `uri`, set by the environment variables named
    /// `{prefix}_OPS` (default 50,000), `_SEED` (1), `_CLIENTS` (16), `_LOST_REPLY_RATE` (0.3),
    /// `_DROP_RATE` (0.05), `_KILL_RATE` (0.05), `_MAX_ATTEMPTS` (50) and `_KEEP` (keep the
    /// schema when set). Panics on a value it cannot read.
    pub fn from_env(prefix: &str, label: &str, uri: &str) -> Self {
        fn setting<T: std::str::FromStr>(prefix: &str, name: &str, default: T) -> T {
            let name = format!("{prefix}_{name}");
            match std::env::var(&name) {
                Ok(value) => value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: cannot read {value:?}")),
                Err(_) => default,
            }
        }
        let mut config = ServerConfig::new(label, uri);
        config.operations = setting(prefix, "OPS", 50_000);
        config.seed = setting(prefix, "SEED", 1);
        config.clients = setting(prefix, "CLIENTS", 16);
        let full = FULL_RUN_FAULTS;
        config.faults = Faults {
            lost_ack: setting(prefix, "LOST_REPLY_RATE", full.lost_ack),
            drop_request: setting(prefix, "DROP_RATE", full.drop_request),
            kill_connection: setting(prefix, "KILL_RATE", full.kill_connection),
        };
        config.max_attempts = setting(prefix, "MAX_ATTEMPTS", 50);
        config.keep_schema = std::env::var_os(format!("{prefix}_KEEP")).is_some();
        config
    }

    /// The workload's settings.
    pub fn settings(&self) -> Settings {
        Settings {
            seed: self.seed,
            clients: self.clients,
            operations: self.operations,
            max_attempts: self.max_attempts,
        }
    }

    /// Refuses a run that could not mean anything, or a schema name that is no plain identifier.
    pub fn validate(&self) -> Result<(), String> {
        self.faults.validate()?;
        self.settings().validate(2)?;
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

    /// The report of a run titled `title` that started at `started`: what the proxy counted
    /// (`stats`), and what the check of the `clients` and the `stored` rows found.
    pub fn report(
        &self,
        title: String,
        stats: ProxyStats,
        clients: Clients,
        stored: &Stored,
        started: Instant,
    ) -> Report {
        let findings = Findings::judge(clients, stored, Vec::new());
        Report {
            title,
            seed: self.seed,
            clients: self.clients,
            faults: self.faults,
            faults_seen: FaultsSeen {
                requests_forwarded: Some(stats.requests_forwarded),
                write_requests: stats.write_requests,
                lost_replies: stats.replies_dropped,
                requests_dropped: stats.requests_dropped,
                connections_killed: stats.connections_killed,
            },
            findings,
            duration: started.elapsed(),
        }
    }

    /// The report of `run` (a run of this configuration), printed, once every invariant held
    /// and every operation completed ([`Report::assert_sound`]). Panics if the run could not be
    /// set up.
    pub async fn checked(&self, run: impl Future<Output = Result<Report, String>>) -> Report {
        let report = run
            .await
            .unwrap_or_else(|e| panic!("the chaos run on {} sets up: {e}", self.label));
        println!("{report}\n");
        report.assert_sound(self.operations);
        report
    }

    /// Prints the report of the long `run` (of this configuration) and its wall time, and
    /// asserts that it passed with every operation.
    pub async fn long_run(&self, run: impl Future<Output = Result<Report, String>>) {
        let started = Instant::now();
        let report = run
            .await
            .unwrap_or_else(|e| panic!("the chaos run on {} sets up: {e}", self.label));
        println!("{report}\n");
        println!(
            "long run on {}: {} operations in {:.1} s",
            self.label,
            report.findings.operations,
            started.elapsed().as_secs_f64()
        );
        assert!(
            report.passed(),
            "the long run on {} failed:\n{report}",
            self.label
        );
        assert_eq!(
            report.findings.operations, self.operations as u64,
            "{report}"
        );
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

/// The stores of `clients` workers: `(store, batches)` each, `batches` being what its
/// `upsert_many` goes through. Every other worker sends its batches (of two to six notes)
/// through `chunked`, a store sending chunks of three that take the batch's shortcuts (a lookup
/// before the write, a plain insert of fresh rows), two chunks in flight at once, so that the
/// faults meet those paths as well as the single statement of a small batch. Only those, and no
/// smaller chunks: each write statement of a call meets a fault with the run's odds (40% by
/// default), so a call of many gives up after its attempts in a long run (`insert_new` of an
/// award for every user in chunks of two did in each run; `upsert_many` in chunks of two, once
/// in 50,000 operations).
pub fn worker_stores<S: Clone>(clients: usize, store: &S, chunked: &S) -> Vec<(S, S)> {
    (0..clients)
        .map(|worker| {
            let batches = if worker % 2 == 1 { chunked } else { store };
            (store.clone(), batches.clone())
        })
        .collect()
}

/// Assertions the tests of the SQL servers make on a report, each failing with the report.
impl Report {
    /// A run through the proxy: connections were killed and remade, every fault configured
    /// happened, and the run passed.
    pub fn assert_through_proxy(&self) {
        assert!(self.faults.kill_connection > 0.0, "{self}");
        self.assert_faults_happened();
        assert!(
            self.findings.reconnects > 0,
            "connections were remade:\n{self}"
        );
        assert!(self.passed(), "{self}");
    }

    /// A run without faults: nothing retried, and callers told exactly the truth of every kind
    /// of first write, each of which happened.
    pub fn assert_without_faults(&self) {
        let findings = &self.findings;
        assert_eq!(self.faults_injected(), 0, "{self}");
        assert_eq!(findings.retries, 0, "{self}");
        assert!(self.faults_seen.write_requests > 0, "{self}");
        assert!(
            self.observed_equals_truth(),
            "without faults every insert, award, credit and receipt is observed:\n{self}"
        );
        assert!(
            findings.true_inserted > 0
                && findings.true_awarded > 0
                && findings.true_applied > 0
                && findings.true_recorded > 0,
            "{self}"
        );
    }
}

/// How long a connection attempt may take before the client tries again.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
