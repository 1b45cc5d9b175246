//! The PostgreSQL chaos run: concurrent clients writing through idem while a fault-injecting
//! proxy loses replies, drops requests and kills connections, then a check of the stored rows
//! against a model computed without idem. The workload, the model, the check and the report are
//! [`crate::chaos_workload`]'s; this module sets the run up on PostgreSQL, connects the clients
//! through the proxy, and reads the stored rows back.
//!
//! [`run`] makes a fresh schema, creates the tables and the accounts on a direct connection,
//! starts a [`Proxy`] speaking [`PostgresWire`] in front of the server and `clients` tokio tasks
//! (at least 2), each with its own connection through the proxy (`-c search_path=<schema>`),
//! sharing one [`idem_core::postgres::Store`]. A client whose connection the proxy closed or
//! reset connects again before its next attempt, as a pool replaces a broken connection. Half the
//! transfers run inside a transaction, and receipts are recorded. At the end the rows are read
//! straight from the server (not through the proxy).

use std::net::SocketAddr;
use std::time::Instant;

use idem_core::postgres::{Change, Store, APPLIED_OPS_FIELD, DEFAULT_OP_WINDOW};
use idem_core::{Applied, BatchReport, Id, OpId, Outcome, Recorded};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, NoTls};

use crate::chaos_workload::{
    self, derive_seed, in_transaction, run_clients, worker_stores, Account, Award, Backend,
    Failure, Note, Operation, Receipt, Stored, StoredAccount, StoredAward, StoredNote,
    StoredReceipt, TransactionFailure, BALANCE, CONNECT_TIMEOUT, SQL_MIX,
};
use crate::pg_proxy::{PostgresWire, Proxy, ProxyConfig};

/// What a run did and found.
pub use crate::chaos_workload::Report;

// ------------------------------------------------------------------------------------------------
// Configuration

/// What a PostgreSQL chaos run does.
pub use crate::chaos_workload::ServerConfig as Config;

pub use crate::chaos_workload::identifier;

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
        .connect_timeout(CONNECT_TIMEOUT);
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
// The clients

/// One client's idem calls, on its own connection through the proxy.
struct PgBackend {
    /// Shared by every client; it checks each table through the proxy (reads pass).
    store: Store,
    /// What `upsert_many` goes through: `store`, or one sending chunks of two.
    batches: Store,
    /// How to connect (through the proxy).
    connection: tokio_postgres::Config,
    client: Option<Client>,
}

impl PgBackend {
    fn client(&self) -> Result<&Client, Failure> {
        self.client.as_ref().ok_or_else(Failure::not_connected)
    }
}

/// The failure a driver error means: the connection is in doubt unless the server answered
/// with an error code.
fn driver_failure(error: tokio_postgres::Error) -> Failure {
    let message = error.to_string();
    let closed = error.is_closed();
    let mut failure = Failure::of_driver(&idem_core::postgres::driver_error(error));
    failure.broken |= closed;
    failure.message = message;
    failure
}

impl Backend for PgBackend {
    const MIX: &'static [(u64, Operation)] = SQL_MIX;
    const TRANSFERS_IN_TRANSACTIONS: bool = true;
    const OP_WINDOW: u64 = DEFAULT_OP_WINDOW as u64;

    fn is_connected(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|client| !client.is_closed())
    }

    async fn connect(&mut self) -> Result<(), String> {
        let client = connect(&self.connection).await.map_err(|e| e.to_string())?;
        self.client = Some(client);
        Ok(())
    }

    fn disconnect(&mut self) {
        self.client = None;
    }

    async fn upsert(&self, note: Note) -> Result<Outcome, Failure> {
        let client = self.client()?;
        self.store
            .upsert(client, &note)
            .await
            .map_err(|e| Failure::of(&e))
    }

    async fn upsert_many(&self, notes: Vec<Note>) -> Result<BatchReport, Failure> {
        let client = self.client()?;
        self.batches
            .upsert_many(client, &notes)
            .await
            .map_err(|e| Failure::of(&e))
    }

    async fn delete(&self, note: Note) -> Result<idem_core::Deletion, Failure> {
        let client = self.client()?;
        self.store
            .delete(client, &note)
            .await
            .map_err(|e| Failure::of(&e))
    }

    async fn insert_new(&self, awards: Vec<Award>) -> Result<Vec<Award>, Failure> {
        let client = self.client()?;
        self.store
            .insert_new(client, &awards)
            .await
            .map_err(|e| Failure::of(&e))
            .and_then(Failure::of_insert_report)
    }

    async fn apply_once(&self, account: Id, op: OpId, amount: i64) -> Result<Applied, Failure> {
        let client = self.client()?;
        let changes = [Change::add(BALANCE, amount)];
        self.store
            .apply_once::<Account, _>(client, account, &op, &changes)
            .await
            .map_err(|e| Failure::of(&e))
    }

    async fn record(&self, receipt: Receipt) -> Result<Recorded, Failure> {
        let client = self.client()?;
        self.store
            .record(client, &receipt)
            .await
            .map_err(|e| Failure::of(&e))
    }

    /// A failed attempt rolled back, unless its `COMMIT` failed: then it may have committed.
    async fn apply_in_transaction(
        &mut self,
        op: OpId,
        steps: Vec<(Id, i64)>,
    ) -> Result<Vec<Applied>, TransactionFailure> {
        let store = &self.store;
        let client = self.client.as_mut();
        in_transaction(
            async move {
                let client = client.ok_or_else(Failure::not_connected)?;
                Ok((
                    client.transaction().await.map_err(driver_failure)?,
                    store,
                    op,
                ))
            },
            steps,
            |(tx, store, op), id, changes| {
                Box::pin(store.apply_once::<Account, _>(&*tx, id, op, changes))
            },
            |(tx, ..)| async move { tx.commit().await.map_err(driver_failure) },
        )
        .await
    }
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
    let accounts = chaos_workload::accounts(&chaos_workload::users(config.clients));
    let setup = Store::new();
    let set_up = async {
        setup.ensure_table::<Note, _>(&direct).await?;
        setup.ensure_table::<Award, _>(&direct).await?;
        setup.ensure_table::<Account, _>(&direct).await?;
        setup.ensure_table::<Receipt, _>(&direct).await?;
        setup.insert_new(&direct, &accounts).await
    };
    set_up.await.map_err(|e| format!("setting up: {e}"))?;

    let proxy_config = ProxyConfig::new(derive_seed(config.seed, u64::MAX), config.faults);
    let proxy = Proxy::start(&upstream, PostgresWire, proxy_config)
        .await
        .map_err(|e| format!("starting the proxy in front of {upstream}: {e}"))?;
    let through_proxy = connection_config(&base, schema, Some(proxy.addr()));

    // Every other worker's batches go in chunks of three, taking the batch's shortcuts.
    let chunked = Store::new().with_batch_chunk(3).with_shortcuts_from(3);
    let backends = worker_stores(config.clients, &Store::new(), &chunked)
        .into_iter()
        .map(|(store, batches)| PgBackend {
            store,
            batches,
            connection: through_proxy.clone(),
            client: None,
        })
        .collect();
    let clients = run_clients(&config.settings(), backends).await?;
    let stats = proxy.shutdown().await;

    let stored = read_stored(&direct)
        .await
        .map_err(|e| format!("reading the stored rows back: {e}"))?;
    let title = format!(
        "idem chaos run: PostgreSQL {} (PostgreSQL {server_version})",
        config.label
    );
    let report = config.report(title, stats, clients, &stored, started);
    if report.passed() && !config.keep_schema {
        let _ = admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
    Ok(report)
}

// ------------------------------------------------------------------------------------------------
// Reading the stored rows back

/// The run's rows, as stored.
async fn read_stored(client: &Client) -> Result<Stored, tokio_postgres::Error> {
    let text = |row: &tokio_postgres::Row, column: usize| -> String {
        row.get::<_, Option<String>>(column).unwrap_or_default()
    };
    let notes = client
        .query(
            "SELECT \"_id\", \"owner\", \"noteId\", \"createdAt\", \"rev\", \"text\", \
             \"deletedAt\" FROM notes",
            &[],
        )
        .await?;
    let notes = notes.iter().map(|stored| {
        let marker: Option<i64> = stored.get(6);
        StoredNote {
            id: Some(stored.get(0)),
            owner: text(stored, 1),
            note_id: text(stored, 2),
            created_at: stored.get(3),
            rev: stored.get(4),
            text: stored.get(5),
            deleted: marker.is_some(),
            marker,
        }
    });
    let awards = client
        .query("SELECT \"_id\", \"user\", \"badge\" FROM awards", &[])
        .await?;
    let awards = awards.iter().map(|stored| StoredAward {
        id: Some(stored.get(0)),
        user: text(stored, 1),
        badge: text(stored, 2),
    });
    let accounts = client
        .query(
            &format!(
                "SELECT \"_id\", \"owner\", \"{BALANCE}\", \"{APPLIED_OPS_FIELD}\"::text \
                 FROM accounts"
            ),
            &[],
        )
        .await?;
    let accounts = accounts.iter().map(|stored| {
        let ops: Option<String> = stored.get(3);
        StoredAccount {
            id: Some(stored.get(0)),
            owner: text(stored, 1),
            balance: stored.get::<_, Option<i64>>(2).unwrap_or(0),
            applied_ops: ops
                .as_deref()
                .and_then(|ops| serde_json::from_str(ops).ok())
                .unwrap_or_default(),
        }
    });
    let receipts = client
        .query(
            "SELECT \"_id\", \"requestKey\", \"user\", \"amount\" FROM receipts",
            &[],
        )
        .await?;
    let receipts = receipts.iter().map(|stored| StoredReceipt {
        id: stored.get(0),
        request_key: text(stored, 1),
        user: stored.get(2),
        amount: stored.get(3),
    });
    Ok(Stored {
        notes: notes.collect(),
        awards: awards.collect(),
        accounts: accounts.collect(),
        receipts: receipts.collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_upstream_of_a_uri() {
        let config: tokio_postgres::Config = "postgres://idem@127.0.0.1:5433/idem".parse().unwrap();
        assert_eq!(upstream_address(&config).unwrap(), "127.0.0.1:5433");
        assert_eq!(identifier("pg-18"), "pg_18");
    }
}
