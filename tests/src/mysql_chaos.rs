//! The MariaDB chaos run: concurrent clients writing through idem while a fault-injecting proxy
//! speaking the MySQL wire protocol loses replies, drops requests and kills connections, then a
//! check of the stored rows against a model computed without idem. The workload, the model, the
//! check and the report are [`crate::chaos_workload`]'s, the configuration the SQL servers'
//! ([`ServerConfig`](crate::chaos_workload::ServerConfig)); this module sets the run up on
//! MariaDB, connects the clients through the proxy, and reads the stored rows back.
//!
//! [`run`] makes a fresh database (the configuration's `schema`) on the server of its URI,
//! creates the tables and the accounts on a direct connection, starts a [`Proxy`] speaking
//! [`MysqlWire`] in front of the server and `clients` tokio tasks (at least 2), each with its own
//! sqlx connection through the proxy (TLS off, so that the proxy reads the statements), sharing
//! one [`idem_core::mysql::Store`]. The proxy faults each write statement sent outside a
//! transaction (idem's own transaction around a write is one, faulted at its `COMMIT`) and the
//! `COMMIT` of a transaction that wrote. A client whose connection broke connects again before
//! its next attempt, as a pool replaces a broken connection. Half the transfers run inside a
//! sqlx transaction (`store.apply_once(&mut *tx, …)` for each step, then `COMMIT`), and receipts
//! are recorded. At the end the rows are read straight from the server (not through the proxy).

use std::time::Instant;

use idem_core::model::APPLIED_OPS_FIELD;
use idem_core::mysql::{driver_error, Store};
use idem_core::sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use idem_core::sqlx::{self, ConnectOptions, Connection, MySqlConnection};
use idem_core::{Applied, BatchReport, Change, Id, OpId, Outcome, Recorded};
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::chaos_workload::{
    self, derive_seed, in_transaction, run_clients, worker_stores, Account, Award, Backend,
    Failure, Note, Operation, Receipt, Stored, StoredAccount, StoredAward, StoredNote,
    StoredReceipt, TransactionFailure, BALANCE, CONNECT_TIMEOUT, SQL_MIX,
};
use crate::mysql_proxy::{MysqlWire, Proxy, ProxyConfig};
use crate::mysql_rows::quoted;

/// What a run did and found.
pub use crate::chaos_workload::Report;
/// What a MariaDB chaos run does; its `schema` is the database written to.
pub use crate::chaos_workload::ServerConfig as Config;

// ------------------------------------------------------------------------------------------------
// Connections

/// The connection options of the server at `uri`.
pub fn server_options(uri: &str) -> Result<MySqlConnectOptions, String> {
    uri.parse()
        .map_err(|e| format!("the server URI {uri:?}: {e}"))
}

/// `host:port` of the server of `options`: what the proxy relays to.
pub fn upstream_address(options: &MySqlConnectOptions) -> String {
    let host = options.get_host();
    // An IPv6 address needs brackets, which the URI's host may have kept.
    match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]:{}", options.get_port()),
        false => format!("{host}:{}", options.get_port()),
    }
}

/// A connection of `options`, given up after [`CONNECT_TIMEOUT`].
pub async fn connect(options: &MySqlConnectOptions) -> Result<MySqlConnection, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(connected) => connected.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no connection within {CONNECT_TIMEOUT:?}")),
    }
}

async fn execute(connection: &mut MySqlConnection, sql: String) -> Result<(), String> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
        .execute(connection)
        .await
        .map(drop)
        .map_err(|e| format!("{sql}: {e}"))
}

// ------------------------------------------------------------------------------------------------
// The clients

/// One client's idem calls, on its own connection through the proxy. The connection sits
/// behind a lock only because the store's calls borrow it mutably: one client, one call at a
/// time, so the lock is never contended.
struct MysqlBackend {
    /// Shared by every client; it checks each table through the proxy (reads pass).
    store: Store,
    /// What `upsert_many` goes through: `store`, or one sending chunks of three.
    batches: Store,
    /// How to connect (through the proxy).
    options: MySqlConnectOptions,
    connection: Mutex<Option<MySqlConnection>>,
}

impl MysqlBackend {
    /// A client not connected yet, connecting with `options`.
    fn new(store: Store, batches: Store, options: &MySqlConnectOptions) -> Self {
        MysqlBackend {
            store,
            batches,
            options: options.clone(),
            connection: Mutex::new(None),
        }
    }
}

/// The failure a driver error means: the connection is in doubt unless the server answered
/// with an error number.
fn driver_failure(error: sqlx::Error) -> Failure {
    Failure::of_driver(&driver_error(error))
}

/// Runs `call` on the client's connection, or fails as not connected.
macro_rules! on_connection {
    ($backend:expr, |$connection:ident| $call:expr) => {{
        let mut guard = $backend.connection.lock().await;
        let $connection = guard.as_mut().ok_or_else(Failure::not_connected)?;
        $call.await.map_err(|e| Failure::of(&e))
    }};
}

impl Backend for MysqlBackend {
    const MIX: &'static [(u64, Operation)] = SQL_MIX;
    const TRANSFERS_IN_TRANSACTIONS: bool = true;
    const OP_WINDOW: u64 = idem_core::mysql::DEFAULT_OP_WINDOW as u64;

    fn is_connected(&self) -> bool {
        self.connection
            .try_lock()
            .map_or(true, |connection| connection.is_some())
    }

    async fn connect(&mut self) -> Result<(), String> {
        let connection = connect(&self.options).await?;
        *self.connection.get_mut() = Some(connection);
        Ok(())
    }

    fn disconnect(&mut self) {
        // Dropped, not closed: a broken connection has no one to say goodbye to.
        *self.connection.get_mut() = None;
    }

    async fn upsert(&self, note: Note) -> Result<Outcome, Failure> {
        on_connection!(self, |connection| self.store.upsert(connection, &note))
    }

    async fn upsert_many(&self, notes: Vec<Note>) -> Result<BatchReport, Failure> {
        on_connection!(self, |connection| self
            .batches
            .upsert_many(connection, &notes))
    }

    async fn delete(&self, note: Note) -> Result<idem_core::Deletion, Failure> {
        on_connection!(self, |connection| self.store.delete(connection, &note))
    }

    async fn insert_new(&self, awards: Vec<Award>) -> Result<Vec<Award>, Failure> {
        on_connection!(self, |connection| self
            .store
            .insert_new(connection, &awards))
        .and_then(Failure::of_insert_report)
    }

    async fn apply_once(&self, account: Id, op: OpId, amount: i64) -> Result<Applied, Failure> {
        let changes = [Change::add(BALANCE, amount)];
        on_connection!(self, |connection| self
            .store
            .apply_once::<Account>(connection, account, &op, &changes))
    }

    async fn record(&self, receipt: Receipt) -> Result<Recorded, Failure> {
        on_connection!(self, |connection| self.store.record(connection, &receipt))
    }

    /// A failed attempt rolled back, unless its `COMMIT` failed: then it may have committed.
    async fn apply_in_transaction(
        &mut self,
        op: OpId,
        steps: Vec<(Id, i64)>,
    ) -> Result<Vec<Applied>, TransactionFailure> {
        let begun = begin(self.connection.get_mut().as_mut(), &self.store, op);
        in_transaction(
            begun,
            steps,
            |(tx, store, op), id, changes| {
                Box::pin(store.apply_once::<Account>(tx, id, op, changes))
            },
            commit,
        )
        .await
    }
}

type Transaction<'c> = sqlx::Transaction<'c, sqlx::MySql>;

/// A transaction of the caller's on `connection`, with what its steps need.
async fn begin<'c>(
    connection: Option<&'c mut MySqlConnection>,
    store: &'c Store,
    op: OpId,
) -> Result<(Transaction<'c>, &'c Store, OpId), Failure> {
    let connection = connection.ok_or_else(Failure::not_connected)?;
    let tx = connection.begin().await.map_err(driver_failure)?;
    Ok((tx, store, op))
}

async fn commit((tx, ..): (Transaction<'_>, &Store, OpId)) -> Result<(), Failure> {
    tx.commit().await.map_err(driver_failure)
}

// ------------------------------------------------------------------------------------------------
// Running it

/// Runs the chaos run described by `config` and checks the stored rows. `Err` only when the run
/// could not be set up or checked (no server, a bad configuration); everything the run finds is
/// in the report.
pub async fn run(config: &Config) -> Result<Report, String> {
    config.validate()?;
    let started = Instant::now();
    let base = server_options(&config.uri)?;
    let upstream = upstream_address(&base);
    let database = quoted(&config.schema);

    let mut admin = connect(&base)
        .await
        .map_err(|e| format!("connecting to {}: {e}", config.label))?;
    execute(&mut admin, format!("DROP DATABASE IF EXISTS {database}")).await?;
    execute(&mut admin, format!("CREATE DATABASE {database}")).await?;
    let server_version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut admin)
        .await
        .map_err(|e| format!("reading the server version: {e}"))?;
    let mut direct = connect(&base.clone().database(&config.schema))
        .await
        .map_err(|e| format!("connecting to {}: {e}", config.label))?;
    let accounts = chaos_workload::accounts(&chaos_workload::users(config.clients));
    let setup = Store::new();
    let set_up = async {
        setup.ensure_table::<Note>(&mut direct).await?;
        setup.ensure_table::<Award>(&mut direct).await?;
        setup.ensure_table::<Account>(&mut direct).await?;
        setup.ensure_table::<Receipt>(&mut direct).await?;
        setup.insert_new(&mut direct, &accounts).await
    };
    set_up.await.map_err(|e| format!("setting up: {e}"))?;

    let proxy_config = ProxyConfig::new(derive_seed(config.seed, u64::MAX), config.faults);
    let proxy = Proxy::start(&upstream, MysqlWire, proxy_config)
        .await
        .map_err(|e| format!("starting the proxy in front of {upstream}: {e}"))?;
    let through_proxy = base
        .clone()
        .host(&proxy.addr().ip().to_string())
        .port(proxy.addr().port())
        .database(&config.schema)
        .ssl_mode(MySqlSslMode::Disabled);

    // Every other worker's batches go in chunks of three, taking the batch's shortcuts.
    let chunked = Store::new().with_batch_chunk(3).with_shortcuts_from(3);
    let stores = worker_stores(config.clients, &Store::new(), &chunked);
    let backends = (stores.into_iter())
        .map(|(store, batches)| MysqlBackend::new(store, batches, &through_proxy))
        .collect();
    let clients = run_clients(&config.settings(), backends).await?;
    let stats = proxy.shutdown().await;

    let stored = read_stored(&mut direct).await;
    let title = format!("idem chaos run: MariaDB {}", config.label);
    let title = format!("{title} (server {server_version})");
    let report = config.report(title, stats, clients, &stored, started);
    if report.passed() && !config.keep_schema {
        let _ = execute(&mut admin, format!("DROP DATABASE IF EXISTS {database}")).await;
    }
    Ok(report)
}

// ------------------------------------------------------------------------------------------------
// Reading the stored rows back

/// The rows of `table`, each by its columns' names, as stored ([`crate::mysql_rows::rows`]).
async fn table(connection: &mut MySqlConnection, table: &str) -> Vec<Map<String, Value>> {
    let rows = crate::mysql_rows::rows(connection, table).await;
    rows.into_iter()
        .map(|row| row.into_iter().collect())
        .collect()
}

/// A column's text, if it holds text.
fn text(row: &Map<String, Value>, column: &str) -> Option<String> {
    row.get(column).and_then(Value::as_str).map(str::to_owned)
}

/// A column's integer, if it holds one.
fn integer(row: &Map<String, Value>, column: &str) -> Option<i64> {
    row.get(column).and_then(Value::as_i64)
}

fn note(row: &Map<String, Value>) -> StoredNote {
    StoredNote {
        id: text(row, "_id"),
        owner: text(row, "owner").unwrap_or_default(),
        note_id: text(row, "noteId").unwrap_or_default(),
        created_at: integer(row, "createdAt"),
        rev: integer(row, "rev"),
        text: text(row, "text"),
        deleted: row.get("deletedAt").is_some_and(|marker| !marker.is_null()),
        marker: integer(row, "deletedAt"),
    }
}

fn award(row: &Map<String, Value>) -> StoredAward {
    StoredAward {
        id: text(row, "_id"),
        user: text(row, "user").unwrap_or_default(),
        badge: text(row, "badge").unwrap_or_default(),
    }
}

/// An account, its op ids read from the JSON text of their column.
fn account(row: &Map<String, Value>) -> StoredAccount {
    StoredAccount {
        id: text(row, "_id"),
        owner: text(row, "owner").unwrap_or_default(),
        balance: integer(row, BALANCE).unwrap_or(0),
        applied_ops: text(row, APPLIED_OPS_FIELD)
            .and_then(|ops| serde_json::from_str(&ops).ok())
            .unwrap_or_default(),
    }
}

fn receipt(row: &Map<String, Value>) -> StoredReceipt {
    StoredReceipt {
        id: text(row, "_id").unwrap_or_default(),
        request_key: text(row, "requestKey").unwrap_or_default(),
        user: text(row, "user"),
        amount: integer(row, "amount"),
    }
}

/// The run's rows, as stored.
async fn read_stored(connection: &mut MySqlConnection) -> Stored {
    let notes = table(connection, "notes").await;
    let awards = table(connection, "awards").await;
    let accounts = table(connection, "accounts").await;
    let receipts = table(connection, "receipts").await;
    Stored {
        notes: notes.iter().map(note).collect(),
        awards: awards.iter().map(award).collect(),
        accounts: accounts.iter().map(account).collect(),
        receipts: receipts.iter().map(receipt).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_upstream_of_a_uri() {
        let upstream = |uri| upstream_address(&server_options(uri).unwrap());
        assert_eq!(
            upstream("mysql://root@127.0.0.1:3307/idem"),
            "127.0.0.1:3307"
        );
        assert_eq!(upstream("mysql://root@[::1]:3307/idem"), "[::1]:3307");
    }
}
