//! The MongoDB chaos run: concurrent clients writing through idem while the network loses
//! acknowledgements, then a check of the stored state against a model computed without idem. The
//! workload, the model, the check and the report are [`crate::chaos_workload`]'s; this module
//! sets the run up on MongoDB, injects the faults, and reads the stored documents back.
//!
//! [`run`] starts `clients` tokio tasks (at least 8), each with its own [`mongodb::Client`] over
//! `retryWrites=false`, and shares `operations` logical operations among them. Faults come from
//! one of two sources ([`Mode`]):
//!
//! - [`Mode::Proxy`]: every client connects through a [`Proxy`] speaking [`MongoWire`], which
//!   loses acknowledgements, drops requests and kills connections at the configured rates per
//!   write request;
//! - [`Mode::FailPoint`]: every client connects straight to the server, and the server's
//!   `failCommand` fail point, scoped to the run's `appName`, is armed at random so that each
//!   write fails with `writeConcernError` (the write is applied, its acknowledgement replaced by
//!   an error) at the lost-ack rate, or with `closeConnection` (the request is dropped) at the
//!   drop rate. Killed connections are proxy-only. The server has one `failCommand` fail point: a
//!   concurrent user of the same server who arms it too replaces ours (and ours theirs).
//!
//! A fault that breaks a connection (every proxy fault, a dropped request in fail-point mode)
//! makes the driver mark the server unknown and wait for its monitor's next check, at least
//! 0.5 s after the previous one: that wait, per client, is most of a faulty run's time. More
//! clients make a run faster; a write-concern error costs nothing of the kind. The driver
//! replaces broken connections itself, so the clients never connect again.
//!
//! The clients play the workload without transactions (a MongoDB transaction needs a replica
//! set) and without receipts; at the end the stored documents are read raw, straight from the
//! server.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use idem_core::mongo::{Store, APPLIED_OPS_FIELD, DEFAULT_OP_WINDOW};
use idem_core::{Applied, BatchReport, Id, OpId, Outcome};
use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::{ClientOptions, ServerAddress, ServerMonitoringMode};
use mongodb::{Client, Database};

use crate::chaos_workload::{
    self, derive_seed, run_clients, Account, Award, Backend, Failure, FaultsSeen, Findings, Note,
    Operation, Settings, SplitMix64, Stored, StoredAccount, StoredAward, StoredNote, BALANCE,
    MAX_PROBLEMS,
};
use crate::proxy::{Faults, MongoWire, Proxy, ProxyConfig};

/// What a run did and found.
pub use crate::chaos_workload::Report;

// ------------------------------------------------------------------------------------------------
// Configuration

/// Where the faults come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A fault-injecting TCP proxy between every client and the server.
    Proxy,
    /// The server's `failCommand` fail point, armed at random.
    FailPoint,
}

impl Mode {
    /// `proxy` or `failpoint`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Proxy => "proxy",
            Mode::FailPoint => "failpoint",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "proxy" => Ok(Mode::Proxy),
            "failpoint" | "fail-point" => Ok(Mode::FailPoint),
            other => Err(format!("unknown mode {other:?}: use proxy or failpoint")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a chaos run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// The server (a MongoDB URI). The run always adds `retryWrites=false`.
    pub uri: String,
    /// The database written to: dropped at the start, and at the end of a clean run unless
    /// `keep_database`.
    pub database: String,
    /// Where the faults come from.
    pub mode: Mode,
    /// Seeds the operations and the faults.
    pub seed: u64,
    /// Concurrent clients, each with its own driver client: at least 8.
    pub clients: usize,
    /// Logical operations, shared among the clients.
    pub operations: usize,
    /// Fault rates per write request.
    pub faults: Faults,
    /// Attempts per call before a client gives up on it (and stops).
    pub max_attempts: u32,
    /// Keep the database after a clean run.
    pub keep_database: bool,
}

impl Config {
    /// The full run: 8 clients, 10,000 operations, 30% lost acknowledgements, 5% dropped
    /// requests and, through the proxy, 5% killed connections.
    pub fn new(uri: impl Into<String>, mode: Mode) -> Self {
        Config {
            uri: uri.into(),
            database: format!("idem_chaos_{}_{}", mode.name(), std::process::id()),
            mode,
            seed: 1,
            clients: 8,
            operations: 10_000,
            faults: Faults {
                lost_ack: 0.3,
                drop_request: 0.05,
                kill_connection: if mode == Mode::Proxy { 0.05 } else { 0.0 },
            },
            max_attempts: 50,
            keep_database: false,
        }
    }

    fn settings(&self) -> Settings {
        Settings {
            seed: self.seed,
            clients: self.clients,
            operations: self.operations,
            max_attempts: self.max_attempts,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.faults.validate()?;
        self.settings().validate(8)?;
        if self.mode == Mode::FailPoint && self.faults.kill_connection > 0.0 {
            return Err(
                "killed connections need the proxy: in failpoint mode the kill rate must be 0"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The commands the fail point fails.
const FAILED_COMMANDS: [&str; 4] = ["insert", "update", "delete", "findAndModify"];
const INJECTED: &str = "acknowledgement lost (injected by the chaos run)";

// ------------------------------------------------------------------------------------------------
// The clients

/// One client's idem calls, on its own driver client.
struct MongoBackend {
    store: Store,
}

impl Backend for MongoBackend {
    const MIX: &'static [(u64, Operation)] = &[
        (22, Operation::Edit),
        (36, Operation::Batch),
        (44, Operation::StaleReplay),
        (50, Operation::Delete),
        (55, Operation::RepushDeleted),
        (63, Operation::HotEdit),
        (67, Operation::RacyEditOrDelete),
        (76, Operation::Awards),
        (88, Operation::Credit),
        (94, Operation::Transfer),
        (100, Operation::ReplayOperation),
    ];
    const TRANSFERS_IN_TRANSACTIONS: bool = false;
    const OP_WINDOW: u64 = DEFAULT_OP_WINDOW as u64;

    /// The driver keeps its own pool and replaces broken connections itself.
    fn is_connected(&self) -> bool {
        true
    }

    async fn connect(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn disconnect(&mut self) {}

    async fn upsert(&self, note: Note) -> Result<Outcome, Failure> {
        self.store.upsert(&note).await.map_err(|e| Failure::of(&e))
    }

    async fn upsert_many(&self, notes: Vec<Note>) -> Result<BatchReport, Failure> {
        self.store
            .upsert_many(&notes)
            .await
            .map_err(|e| Failure::of(&e))
    }

    async fn delete(&self, note: Note) -> Result<idem_core::Deletion, Failure> {
        self.store.delete(&note).await.map_err(|e| Failure::of(&e))
    }

    async fn insert_new(&self, awards: Vec<Award>) -> Result<Vec<Award>, Failure> {
        self.store
            .insert_new(&awards)
            .await
            .map_err(|e| Failure::of(&e))
            .and_then(Failure::of_insert_report)
    }

    async fn apply_once(&self, account: Id, op: OpId, amount: i64) -> Result<Applied, Failure> {
        self.store
            .apply_once::<Account>(account, &op, &[idem_core::Change::add(BALANCE, amount)])
            .await
            .map_err(|e| Failure::of(&e))
    }
}

// ------------------------------------------------------------------------------------------------
// Running it

/// Distinguishes the runs of one process (their fail-point `appName`s).
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Runs the chaos run described by `config` and checks the stored state. `Err` only when the run
/// could not be set up or checked (no server, a bad configuration); everything the run finds is
/// in the report.
pub async fn run(config: &Config) -> Result<Report, String> {
    config.validate()?;
    let settings = config.settings();
    let started = Instant::now();
    let run_number = RUNS.fetch_add(1, Ordering::Relaxed);
    let app_name = format!("idem-chaos-{}-{run_number}", std::process::id());

    let admin_options = client_options(&config.uri, Some("idem-chaos-admin"), None).await?;
    let upstream = upstream_address(&admin_options)?;
    let admin = Client::with_options(admin_options).map_err(|e| format!("client: {e}"))?;
    let database = admin.database(&config.database);
    database
        .drop()
        .await
        .map_err(|e| format!("dropping {}: {e}", config.database))?;
    let setup = Store::new(database.clone());
    let accounts = chaos_workload::accounts(&chaos_workload::users(config.clients));
    let set_up = async {
        setup.ensure_indexes::<Note>().await?;
        setup.ensure_indexes::<Award>().await?;
        setup.ensure_indexes::<Account>().await?;
        setup.insert_new(&accounts).await
    };
    set_up.await.map_err(|e| format!("setting up: {e}"))?;

    let proxy = match config.mode {
        Mode::Proxy => {
            let proxy_config = ProxyConfig::new(derive_seed(config.seed, u64::MAX), config.faults);
            let proxy = Proxy::start(&upstream, MongoWire, proxy_config)
                .await
                .map_err(|e| format!("starting the proxy in front of {upstream}: {e}"))?;
            Some(proxy)
        }
        Mode::FailPoint => None,
    };
    let fail_points = match config.mode {
        Mode::FailPoint => {
            let fail_points = Arc::new(FailPoints::new(
                admin.clone(),
                app_name.clone(),
                config.faults,
                derive_seed(config.seed, u64::MAX - 1),
            ));
            fail_points.arm().await.map_err(|e| {
                format!("arming the failCommand fail point (is the server started with test commands?): {e}")
            })?;
            Some(fail_points)
        }
        Mode::Proxy => None,
    };

    let mut backends = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        let mut options = client_options(
            &config.uri,
            Some(&app_name),
            proxy.as_ref().map(Proxy::addr),
        )
        .await?;
        if let Some(fail_points) = &fail_points {
            let fail_points = Arc::clone(fail_points);
            options.command_event_handler = Some(EventHandler::callback(move |event| {
                fail_points.observe(event);
            }));
        }
        let client = Client::with_options(options).map_err(|e| format!("client: {e}"))?;
        backends.push(MongoBackend {
            store: Store::new(client.database(&config.database)),
        });
    }
    let clients = run_clients(&settings, backends).await?;

    let proxy_stats = match proxy {
        Some(proxy) => Some(proxy.shutdown().await),
        None => None,
    };
    let mut problems = Vec::new();
    if let Some(fail_points) = &fail_points {
        fail_points
            .disarm()
            .await
            .map_err(|e| format!("disarming the fail point: {e}"))?;
        problems.extend(
            fail_points
                .problems
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..),
        );
    }
    let stored = read_stored(&database)
        .await
        .map_err(|e| format!("reading the stored state back: {e}"))?;
    let findings = Findings::judge(clients, &stored, problems);

    let faults_seen = match (proxy_stats, &fail_points) {
        (Some(stats), _) => FaultsSeen {
            requests_forwarded: Some(stats.requests_forwarded),
            write_requests: stats.write_requests,
            lost_replies: stats.replies_dropped,
            requests_dropped: stats.requests_dropped,
            connections_killed: stats.connections_killed,
        },
        (None, Some(fail_points)) => fail_points.seen(),
        (None, None) => FaultsSeen::default(),
    };
    let report = Report {
        title: format!("idem chaos run: MongoDB, mode {}", config.mode),
        seed: config.seed,
        clients: config.clients,
        faults: config.faults,
        faults_seen,
        findings,
        duration: started.elapsed(),
    };
    if report.passed() && !config.keep_database {
        let _ = database.drop().await;
    }
    Ok(report)
}

// ------------------------------------------------------------------------------------------------
// Reading the stored documents back, raw

async fn raw(database: &Database, collection: &str) -> mongodb::error::Result<Vec<Document>> {
    let mut cursor = database
        .collection::<Document>(collection)
        .find(doc! {})
        .await?;
    let mut documents = Vec::new();
    while cursor.advance().await? {
        documents.push(cursor.deserialize_current()?);
    }
    Ok(documents)
}

/// An integer however the server stored it; `None` for anything else.
fn integer(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(n) if n.fract() == 0.0 => Some(*n as i64),
        _ => None,
    }
}

fn string(document: &Document, field: &str) -> Option<String> {
    document.get_str(field).ok().map(str::to_owned)
}

/// The run's documents, as stored. The workload records no receipts on MongoDB.
async fn read_stored(database: &Database) -> mongodb::error::Result<Stored> {
    let (notes, awards, accounts) = (
        raw(database, "notes").await?,
        raw(database, "awards").await?,
        raw(database, "accounts").await?,
    );
    let notes = notes.iter().map(|stored| {
        let marker = stored.get("deletedAt").filter(|m| !matches!(m, Bson::Null));
        StoredNote {
            id: string(stored, "_id"),
            owner: string(stored, "owner").unwrap_or_default(),
            note_id: string(stored, "noteId").unwrap_or_default(),
            created_at: integer(stored.get("createdAt")),
            rev: integer(stored.get("rev")),
            text: string(stored, "text"),
            deleted: marker.is_some(),
            marker: integer(marker),
        }
    });
    let awards = awards.iter().map(|stored| StoredAward {
        id: string(stored, "_id"),
        user: string(stored, "user").unwrap_or_default(),
        badge: string(stored, "badge").unwrap_or_default(),
    });
    let accounts = accounts.iter().map(|stored| StoredAccount {
        id: string(stored, "_id"),
        owner: string(stored, "owner").unwrap_or_default(),
        balance: integer(stored.get(BALANCE)).unwrap_or(0),
        applied_ops: stored
            .get_array(APPLIED_OPS_FIELD)
            .map(|ops| {
                ops.iter()
                    .filter_map(Bson::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    });
    Ok(Stored {
        notes: notes.collect(),
        awards: awards.collect(),
        accounts: accounts.collect(),
        receipts: Vec::new(),
    })
}

// ------------------------------------------------------------------------------------------------
// Connections and the fail point

/// Driver options for `uri` over `retryWrites=false`, failing fast (5 s to select a server, 2 s
/// to connect), polling the server's state, named `app_name`, and optionally connecting through
/// the proxy at `via` (directly: the server's own address in its `hello` would lead the driver
/// around the proxy).
pub async fn client_options(
    uri: &str,
    app_name: Option<&str>,
    via: Option<SocketAddr>,
) -> Result<ClientOptions, String> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|e| format!("the server URI {uri:?}: {e}"))?;
    options.retry_writes = Some(false);
    options.app_name = app_name.map(str::to_owned);
    options.server_selection_timeout = Some(Duration::from_secs(5));
    options.connect_timeout = Some(Duration::from_secs(2));
    // Streaming monitoring would wait out shutdown-type errors; polling rechecks at once.
    options.server_monitoring_mode = Some(ServerMonitoringMode::Poll);
    if let Some(proxy) = via {
        options.hosts = vec![ServerAddress::Tcp {
            host: proxy.ip().to_string(),
            port: Some(proxy.port()),
        }];
        // The server names its own address in `hello`: without a direct connection the driver
        // would discover it and go around the proxy.
        options.direct_connection = Some(true);
        options.repl_set_name = None;
    }
    Ok(options)
}

/// `host:port` of the (first) server in the options: what a [`Proxy`] relays to.
pub fn upstream_address(options: &ClientOptions) -> Result<String, String> {
    match options.hosts.first() {
        Some(ServerAddress::Tcp { host, port }) => {
            let port = port.unwrap_or(27017);
            Ok(if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            })
        }
        _ => Err("the proxy needs a server URI with a TCP host".into()),
    }
}

/// The server's `failCommand` fail point, scoped to the run's `appName`, armed so that each write
/// command fails with the configured probability, independently.
///
/// The server keeps one fail point, armed as "skip S matching commands, then fail the next T".
/// An independent fault per write with probability p is a sequence of alternating runs: passes
/// (geometric, mean (1 − p) / p) and faults (geometric, mean 1 / (1 − p)). Each arming draws
/// one of each, and a run's kind (lost acknowledgement or dropped request) in proportion to the
/// rates. The clients' command monitoring counts write commands and sees each fault fire; after
/// the last fault of a run it arms the next, taking the writes that passed meanwhile off the
/// next skip. If a fault were ever missed, the arming is renewed once many more writes passed
/// than it could cover.
///
/// Fired faults are counted from the replies the driver receives, not from the errors callers
/// see: the driver reports a write error (a duplicate key, which idem then classifies) in place
/// of a write-concern error that came with it.
struct FailPoints {
    admin: Client,
    app_name: String,
    faults: Faults,
    rng: tokio::sync::Mutex<SplitMix64>,
    /// Write commands the run's clients started.
    writes: AtomicU64,
    /// Write-concern errors injected (replies carrying ours).
    lost_acks: AtomicU64,
    /// Connections closed instead of running a write (network errors on write commands).
    dropped: AtomicU64,
    /// Faults the current arming has yet to fire.
    pending: AtomicU64,
    /// `writes` when the last fault fired.
    last_fired_at: AtomicU64,
    /// `writes` when the current arming was made, and how many writes it covers.
    armed_at: AtomicU64,
    armed_span: AtomicU64,
    /// An arming task runs.
    arming: AtomicBool,
    /// Another arming was asked for.
    requested: AtomicBool,
    /// Set by `disarm`: no arming after it.
    stopped: AtomicBool,
    problems: Mutex<Vec<String>>,
}

impl FailPoints {
    fn new(admin: Client, app_name: String, faults: Faults, seed: u64) -> Self {
        FailPoints {
            admin,
            app_name,
            faults,
            rng: tokio::sync::Mutex::new(SplitMix64::new(seed)),
            writes: AtomicU64::new(0),
            lost_acks: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            last_fired_at: AtomicU64::new(0),
            armed_at: AtomicU64::new(0),
            armed_span: AtomicU64::new(0),
            arming: AtomicBool::new(false),
            requested: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            problems: Mutex::default(),
        }
    }

    /// Arms the next run of passes and faults.
    async fn arm(&self) -> mongodb::error::Result<()> {
        let mut rng = self.rng.lock().await;
        let rate = self.faults.lost_ack + self.faults.drop_request;
        if rate <= 0.0 || self.stopped.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Geometric draws: failures before the first success, with success probability `q`.
        let mut geometric = |q: f64| -> u64 {
            if q >= 1.0 {
                return 0;
            }
            let u = 1.0 - rng.unit(); // in (0, 1]
            (u.ln() / (1.0 - q).ln()).floor().min(1e6) as u64
        };
        let passes = geometric(rate);
        let mut faults = 1 + geometric(1.0 - rate);
        let lost_ack = rng.unit() * rate < self.faults.lost_ack;
        drop(rng);
        let writes = self.writes.load(Ordering::Relaxed);
        let passed = writes.saturating_sub(self.last_fired_at.load(Ordering::Relaxed));
        let skip = passes.saturating_sub(passed);
        // Writes of other clients pass while an arming is in flight; make up for the faults
        // they would have met, up to 16 at a time, so the rate converges to the configured one.
        let fired = self.lost_acks.load(Ordering::Relaxed) + self.dropped.load(Ordering::Relaxed);
        let behind = rate * writes as f64 - fired as f64;
        if behind >= 1.0 {
            faults += (behind as u64).min(16);
        }
        let mut data = doc! { "failCommands": FAILED_COMMANDS.to_vec(), "appName": &self.app_name };
        if lost_ack {
            // Code 64 (WriteConcernFailed), not a shutdown code: the driver keeps the server
            // selectable, as it does when a real write concern times out.
            data.insert(
                "writeConcernError",
                doc! { "code": 64, "codeName": "WriteConcernFailed", "errmsg": INJECTED },
            );
        } else {
            data.insert("closeConnection", true);
        }
        self.pending.store(faults, Ordering::Relaxed);
        self.armed_at.store(writes, Ordering::Relaxed);
        self.armed_span.store(skip + faults, Ordering::Relaxed);
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.admin
            .database("admin")
            .run_command(doc! {
                "configureFailPoint": "failCommand",
                "mode": { "skip": as_i64(skip), "times": as_i64(faults) },
                "data": data,
            })
            .await
            .map(drop)
    }

    /// Arms the next run in the background. One task arms at a time; a request made while it
    /// runs (the new run may fire before its `configureFailPoint` reply is read) makes it arm
    /// again.
    fn rearm(self: &Arc<Self>) {
        self.requested.store(true, Ordering::SeqCst);
        if self.arming.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.arming.store(false, Ordering::SeqCst);
            return;
        };
        let fail_points = Arc::clone(self);
        runtime.spawn(async move {
            loop {
                while fail_points.requested.swap(false, Ordering::SeqCst) {
                    if let Err(error) = fail_points.arm().await {
                        let mut problems = fail_points
                            .problems
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        if problems.len() < MAX_PROBLEMS {
                            problems.push(format!("arming the fail point failed: {error}"));
                        }
                    }
                }
                fail_points.arming.store(false, Ordering::SeqCst);
                // A request between the last check and now saw `arming` set: serve it.
                if !fail_points.requested.load(Ordering::SeqCst)
                    || fail_points.arming.swap(true, Ordering::SeqCst)
                {
                    break;
                }
            }
        });
    }

    /// Counts write commands and fired faults from a client's command monitoring; arms the next
    /// run after the last fault of this one.
    fn observe(self: &Arc<Self>, event: CommandEvent) {
        let is_write = |name: &str| FAILED_COMMANDS.contains(&name);
        let counter = match &event {
            CommandEvent::Started(started) if is_write(&started.command_name) => {
                let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
                let covered =
                    self.armed_at.load(Ordering::Relaxed) + self.armed_span.load(Ordering::Relaxed);
                if writes > covered + 200 {
                    // A fault went unseen: renew the arming.
                    self.rearm();
                }
                return;
            }
            CommandEvent::Succeeded(succeeded) => {
                let injected = succeeded
                    .reply
                    .get_document("writeConcernError")
                    .and_then(|concern| concern.get_str("errmsg"))
                    .is_ok_and(|message| message == INJECTED);
                if !injected {
                    return;
                }
                &self.lost_acks
            }
            CommandEvent::Failed(failed) => {
                let dropped = is_write(&failed.command_name)
                    && matches!(
                        failed.failure.kind.as_ref(),
                        mongodb::error::ErrorKind::Io(_)
                    );
                if !dropped {
                    return;
                }
                &self.dropped
            }
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.last_fired_at
            .store(self.writes.load(Ordering::Relaxed), Ordering::Relaxed);
        let left = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .map_or(0, |before| before - 1);
        if left == 0 {
            self.rearm();
        }
    }

    /// The faults fired so far.
    fn seen(&self) -> FaultsSeen {
        FaultsSeen {
            requests_forwarded: None,
            write_requests: self.writes.load(Ordering::Relaxed),
            lost_replies: self.lost_acks.load(Ordering::Relaxed),
            requests_dropped: self.dropped.load(Ordering::Relaxed),
            connections_killed: 0,
        }
    }

    async fn disarm(&self) -> mongodb::error::Result<()> {
        let _rng = self.rng.lock().await;
        self.stopped.store(true, Ordering::Relaxed);
        self.admin
            .database("admin")
            .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
            .await
            .map(drop)
    }
}
