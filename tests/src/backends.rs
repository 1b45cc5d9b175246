//! Every backend under test behind one interface, so that a behavioural test is written once and
//! runs against MongoDB, each PostgreSQL server, SQLite and MariaDB: [`fresh_backends`] gives one
//! empty store per server, and [`Db`] calls the same primitive on whichever it is.
//!
//! The servers: `MONGODB_URI`, `IDEM_POSTGRES_URIS` (`label=uri` pairs separated by spaces, set
//! by `scripts/test` to its PostgreSQL 15 and 18 servers) or else `POSTGRES_URI`, and
//! `MYSQL_URI` (a MariaDB server). A missing server fails the test: a skipped server test proves
//! nothing.

use std::fmt;

use idem_core::sqlx::{ConnectOptions, MySqlConnection, PgConnection, SqliteConnection};
use idem_core::{BatchReport, Deletion, Error, Id, Idempotent, InsertReport, Outcome, Pushed};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_postgres::NoTls;

use crate::{fresh_database, raw_documents, stored_documents, CommandLog};

/// The PostgreSQL servers under test, as (label, URI).
pub fn postgres_servers() -> Vec<(String, String)> {
    if let Ok(list) = std::env::var("IDEM_POSTGRES_URIS") {
        let servers: Vec<(String, String)> = list
            .split_whitespace()
            .map(|pair| match pair.split_once('=') {
                Some((label, uri)) => (label.to_owned(), uri.to_owned()),
                None => ("postgres".to_owned(), pair.to_owned()),
            })
            .collect();
        if !servers.is_empty() {
            return servers;
        }
    }
    match std::env::var("POSTGRES_URI") {
        Ok(uri) => vec![("postgres".to_owned(), uri)],
        Err(_) => panic!(
            "neither IDEM_POSTGRES_URIS nor POSTGRES_URI is set: run `scripts/test`, which \
             starts PostgreSQL 15 and 18, or point POSTGRES_URI at a PostgreSQL server"
        ),
    }
}

/// A connected client of `uri` whose `search_path` is `schema`.
pub async fn postgres_client(uri: &str, schema: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = uri.parse().expect("POSTGRES_URI parses");
    config.options(format!("-c search_path={schema}"));
    let (client, connection) = config
        .connect(NoTls)
        .await
        .expect("connecting to PostgreSQL");
    tokio::spawn(async move {
        // Ends when the client is dropped; an error then is the test's own doing.
        let _ = connection.await;
    });
    client
}

/// The server process of `client`'s session: what [`until_a_session_waits_for_a_lock`] watches.
pub async fn backend_pid(client: &tokio_postgres::Client) -> i32 {
    (client.query_one("SELECT pg_backend_pid()", &[]).await)
        .expect("reading pg_backend_pid()")
        .get(0)
}

/// Waits until the session of server process `waiter` ([`backend_pid`]) waits for a lock
/// another session holds (a write queued behind a test's open transaction); fails the test
/// after 20 seconds. By its process, not by its database: the suites share one binary and one
/// database, and another test's session waiting meanwhile would end the wait too early.
pub async fn until_a_session_waits_for_a_lock(observer: &tokio_postgres::Client, waiter: i32) {
    let started = std::time::Instant::now();
    loop {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = $1",
                &[&waiter],
            )
            .await
            .expect("reading pg_stat_activity")
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the session of process {waiter} waited for no lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// `store.adopt::<T>` on a session of its own while another session holds `edit` (a statement
/// on the rows of `schema`) in an open transaction, committed only once the adoption waits on
/// its row lock (which `observer`, outside both, sees): the adoption then meets a row version
/// newer than the one it read. Returns the adoption's report.
pub async fn adopt_during_an_edit<T>(
    store: &idem_core::postgres::Store,
    observer: &tokio_postgres::Client,
    uri: &str,
    schema: &str,
    edit: &str,
) -> idem_core::AdoptReport
where
    T: Idempotent + Serialize + serde::de::DeserializeOwned + 'static,
{
    let mut editor = postgres_client(uri, schema).await;
    let editing = editor
        .transaction()
        .await
        .expect("opening the edit's transaction");
    editing.execute(edit, &[]).await.expect("the edit");
    let adopter = postgres_client(uri, schema).await;
    let adopter_pid = backend_pid(&adopter).await;
    let adopting = {
        let store = store.clone();
        tokio::spawn(async move { store.adopt::<T, _>(&adopter).await })
    };
    until_a_session_waits_for_a_lock(observer, adopter_pid).await;
    editing.commit().await.expect("committing the edit");
    let report = adopting.await.expect("the adoption's task");
    report.unwrap_or_else(|error| panic!("the adoption during an edit: {error}"))
}

/// How [`rows_shown`] shows a row with its version (`xmin`), which any write changes.
pub const WITH_VERSION: &str = "t.xmin::text || ' ' || t::text";

/// Each row of `table`, ordered by id, as `shown` (an SQL expression over the row `t`, such as
/// [`WITH_VERSION`]) writes it.
pub async fn rows_shown(client: &tokio_postgres::Client, table: &str, shown: &str) -> Vec<String> {
    client
        .query(
            &format!("SELECT {shown} FROM \"{table}\" t ORDER BY \"_id\""),
            &[],
        )
        .await
        .unwrap_or_else(|error| panic!("reading {table}: {error}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A sqlx connection to the server at `uri` whose `search_path` is `schema`.
pub async fn sqlx_connection(uri: &str, schema: &str) -> PgConnection {
    let options: idem_core::sqlx::postgres::PgConnectOptions =
        uri.parse().expect("POSTGRES_URI parses");
    options
        .options([("search_path", schema)])
        .connect()
        .await
        .expect("connecting to PostgreSQL through sqlx")
}

/// Calls the PostgreSQL store of a [`Db::Postgres`] through the driver it is under test with:
/// `$client` (tokio-postgres) or the connection in `$sqlx`, bound to `$c` for `$call`.
#[macro_export]
macro_rules! through_postgres {
    ($sqlx:expr, $client:expr, |$c:ident| $call:expr) => {
        match $sqlx {
            Some(connection) => {
                let mut connection = connection.lock().await;
                let $c = &mut *connection;
                $call
            }
            None => {
                let $c = $client;
                $call
            }
        }
    };
}

/// An empty schema on the server at `uri`, named `{prefix}_{test}_{process id}` (dropped first
/// if an earlier run left it), and a client whose `search_path` is that schema.
pub async fn fresh_schema(uri: &str, prefix: &str, test: &str) -> (String, tokio_postgres::Client) {
    let schema = format!("{prefix}_{test}_{}", std::process::id()).to_lowercase();
    let admin = postgres_client(uri, "public").await;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .expect("a fresh schema");
    let client = postgres_client(uri, &schema).await;
    (schema, client)
}

/// One store under test. A handful exist per test, so the size of the PostgreSQL variant (its
/// client) does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Db {
    /// MongoDB: a fresh database.
    Mongo {
        store: idem_core::mongo::Store,
        log: CommandLog,
    },
    /// PostgreSQL: a fresh schema on one server, written through tokio-postgres, or through
    /// sqlx where `sqlx` holds a connection (`client` then only inspects what was stored).
    Postgres {
        label: String,
        uri: String,
        schema: String,
        client: tokio_postgres::Client,
        sqlx: Option<tokio::sync::Mutex<PgConnection>>,
        store: idem_core::postgres::Store,
    },
    /// SQLite: a fresh database file, in WAL mode, and one connection to it.
    Sqlite {
        path: std::path::PathBuf,
        connection: tokio::sync::Mutex<SqliteConnection>,
        store: idem_core::sqlite::Store,
    },
    /// MariaDB: a fresh database on the server of `MYSQL_URI`, and one connection to it.
    Mysql {
        uri: String,
        database: String,
        connection: tokio::sync::Mutex<MySqlConnection>,
        store: idem_core::mysql::Store,
    },
}

/// A connection to the SQLite database file `path` as an application opens one: created if
/// missing, WAL mode (readers do not block the writer), a busy timeout for racing writers.
pub async fn sqlite_connection(path: &std::path::Path) -> SqliteConnection {
    let options = idem_core::sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(idem_core::sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(std::time::Duration::from_secs(30));
    options
        .connect()
        .await
        .unwrap_or_else(|error| panic!("opening {}: {error}", path.display()))
}

/// A fresh SQLite database file for `test`, named after it and the process.
pub async fn fresh_sqlite(test: &str) -> Db {
    let directory = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&directory).expect("a directory for the test databases");
    let path = directory.join(format!("{test}_{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Db::Sqlite {
        connection: tokio::sync::Mutex::new(sqlite_connection(&path).await),
        path,
        store: idem_core::sqlite::Store::new(),
    }
}

/// The MariaDB server under test: `MYSQL_URI`, which `scripts/test` sets after starting one.
pub fn mysql_server() -> String {
    std::env::var("MYSQL_URI").unwrap_or_else(|_| {
        panic!(
            "MYSQL_URI is not set: run `scripts/test`, which starts a MariaDB server, or point \
             MYSQL_URI at a MariaDB (10.11 or later) server (mysql://user:password@host:port/db)"
        )
    })
}

/// A connection to `database` on the MariaDB server at `uri`, as an application opens one (the
/// driver's defaults).
pub async fn mysql_connection(uri: &str, database: &str) -> MySqlConnection {
    let options: idem_core::sqlx::mysql::MySqlConnectOptions =
        uri.parse().expect("MYSQL_URI parses");
    options
        .database(database)
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connecting to MariaDB, database {database}: {error}"))
}

/// A fresh MariaDB database for `test` on the server of `MYSQL_URI`, named `idem_{test}_{random}`
/// (concurrent runs against one server never share one), and a connection to it. Like the
/// PostgreSQL schemas, it stays on the server after the test, for a look at what it holds.
pub async fn fresh_mysql(test: &str) -> Db {
    let uri = mysql_server();
    let test: String = test
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '_',
        })
        .take(40)
        .collect();
    // A database name is at most 64 characters: 5 + 40 + 1 + 16.
    let random =
        u64::try_from(u128::from(ulid::Ulid::generate()) & u128::from(u64::MAX)).expect("64 bits");
    let database = format!("idem_{test}_{random:016x}");
    let options: idem_core::sqlx::mysql::MySqlConnectOptions =
        uri.parse().expect("MYSQL_URI parses");
    let mut admin = options
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connecting to MariaDB at MYSQL_URI: {error}"));
    crate::mysql_rows::run(
        &mut admin,
        &format!("CREATE DATABASE {}", crate::mysql_rows::quoted(&database)),
    )
    .await;
    let connection = mysql_connection(&uri, &database).await;
    Db::Mysql {
        uri,
        database,
        connection: tokio::sync::Mutex::new(connection),
        store: idem_core::mysql::Store::new(),
    }
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Db::Mongo { store, .. } if !store.uses_natural_key_index() => {
                f.write_str("mongodb-no-key-index")
            }
            Db::Mongo { store, .. } if !store.uses_update_pipelines() => {
                f.write_str("mongodb-operators")
            }
            Db::Mongo { .. } => f.write_str("mongodb"),
            Db::Postgres { label, .. } => f.write_str(label),
            Db::Sqlite { .. } => f.write_str("sqlite"),
            Db::Mysql { .. } => f.write_str("mariadb"),
        }
    }
}

/// An empty store on every server under test, named after `test`: MongoDB three times (as every
/// server takes it, without update pipelines, as engines that lack them are written to, and
/// without the natural-key index, as a collection sharded on a hashed `_id` is written to),
/// then each PostgreSQL server (through tokio-postgres and through sqlx), SQLite and MariaDB.
pub async fn fresh_backends(test: &str) -> Vec<Db> {
    let (database, log) = fresh_database(test).await;
    let (without_pipelines, operators_log) = fresh_database(&format!("{test}_ops")).await;
    let mut backends = vec![
        Db::Mongo {
            store: idem_core::mongo::Store::new(database),
            log,
        },
        Db::Mongo {
            store: idem_core::mongo::Store::new(without_pipelines).with_update_pipelines(false),
            log: operators_log,
        },
    ];
    // The layout of a collection sharded on a hashed `_id`: no natural-key index, `_id` the
    // only guard; a case whose type's id has a time part skips it (`Db::guards_by_id_alone`).
    let (without_index, no_index_log) = fresh_database(&format!("{test}_nki")).await;
    backends.push(Db::Mongo {
        store: idem_core::mongo::Store::new(without_index).with_natural_key_index(false),
        log: no_index_log,
    });
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "t", test).await;
        backends.push(Db::Postgres {
            label: label.clone(),
            uri: uri.clone(),
            schema,
            client,
            sqlx: None,
            store: idem_core::postgres::Store::new(),
        });
        let (schema, client) = fresh_schema(&uri, "s", test).await;
        backends.push(Db::Postgres {
            label: format!("{label}-sqlx"),
            sqlx: Some(tokio::sync::Mutex::new(
                sqlx_connection(&uri, &schema).await,
            )),
            uri: uri.clone(),
            schema,
            client,
            store: idem_core::postgres::Store::new(),
        });
        // Tables partitioned by their natural key (issue 44), on PostgreSQL 18 only.
        if label == "pg18" {
            let (schema, client) = fresh_schema(&uri, "p", test).await;
            let by = idem_core::postgres::PartitionBy::Hash { partitions: 4 };
            backends.push(Db::Postgres {
                label: format!("{label}-partitioned"),
                uri: uri.clone(),
                schema,
                client,
                sqlx: None,
                store: idem_core::postgres::Store::new().with_partitions(by),
            });
            // Inserted rows told by the write marker, as on engines without `xmax` (issue 44).
            let (schema, client) = fresh_schema(&uri, "m", test).await;
            backends.push(Db::Postgres {
                label: format!("{label}-marker"),
                uri: uri.clone(),
                schema,
                client,
                sqlx: None,
                store: idem_core::postgres::Store::new().with_write_marker(true),
            });
        }
    }
    backends.push(fresh_sqlite(test).await);
    backends.push(fresh_mysql(test).await);
    backends
}

/// [`fresh_backends`] but the embedded one: for a fault only a server has (a reply lost on the
/// network after the write committed), which an embedded database, answering in the caller's
/// own process, cannot meet.
pub async fn fresh_server_backends(test: &str) -> Vec<Db> {
    let mut backends = fresh_backends(test).await;
    backends.retain(|db| !matches!(db, Db::Sqlite { .. }));
    backends
}

impl Db {
    /// Whether this is a PostgreSQL store.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Db::Postgres { .. })
    }

    /// Whether this is a PostgreSQL store whose tables are partitioned by their natural key.
    pub fn is_partitioned(&self) -> bool {
        matches!(self, Db::Postgres { label, .. } if label.ends_with("-partitioned"))
    }

    /// Whether this is a PostgreSQL store that tells inserted rows by the write marker column
    /// (`with_write_marker`), which the table check then asks for.
    pub fn has_write_marker(&self) -> bool {
        matches!(self, Db::Postgres { label, .. } if label.ends_with("-marker"))
    }

    /// Whether this is the SQLite store.
    pub fn is_sqlite(&self) -> bool {
        matches!(self, Db::Sqlite { .. })
    }

    /// Whether this is the MariaDB store.
    pub fn is_mysql(&self) -> bool {
        matches!(self, Db::Mysql { .. })
    }

    /// Whether this store writes rows of a SQL table (PostgreSQL, SQLite, MariaDB).
    pub fn is_sql(&self) -> bool {
        self.is_postgres() || self.is_sqlite() || self.is_mysql()
    }

    /// Whether `_id` is this store's only guard against two documents for one natural key
    /// (MongoDB without the natural-key index, a collection sharded on a hashed `_id`): it
    /// refuses a type whose id has a time part or is random (an event's), and a case writing
    /// one skips it.
    pub fn guards_by_id_alone(&self) -> bool {
        matches!(self, Db::Mongo { store, .. } if !store.uses_natural_key_index())
    }

    /// The commands this store's client sent, on MongoDB; `None` on the SQL stores, where
    /// [`Db::raw`] (each row's version or write marker) shows a write instead.
    pub fn command_log(&self) -> Option<&CommandLog> {
        match self {
            Db::Mongo { log, .. } => Some(log),
            Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. } => None,
        }
    }

    /// Another connection to the same store, for a racing writer (sharing what the store
    /// learned).
    pub async fn another(&self) -> Db {
        match self {
            Db::Mongo { store, log } => Db::Mongo {
                store: store.clone(),
                log: log.clone(),
            },
            Db::Postgres {
                label,
                uri,
                schema,
                store,
                sqlx,
                ..
            } => Db::Postgres {
                label: label.clone(),
                uri: uri.clone(),
                schema: schema.clone(),
                client: postgres_client(uri, schema).await,
                sqlx: match sqlx {
                    Some(_) => Some(tokio::sync::Mutex::new(sqlx_connection(uri, schema).await)),
                    None => None,
                },
                store: store.clone(),
            },
            Db::Sqlite { path, store, .. } => Db::Sqlite {
                path: path.clone(),
                connection: tokio::sync::Mutex::new(sqlite_connection(path).await),
                store: store.clone(),
            },
            Db::Mysql {
                uri,
                database,
                store,
                ..
            } => Db::Mysql {
                uri: uri.clone(),
                database: database.clone(),
                connection: tokio::sync::Mutex::new(mysql_connection(uri, database).await),
                store: store.clone(),
            },
        }
    }

    /// [`another`](Db::another) whose store has learned nothing of its tables yet, as a new
    /// store of the same configuration would be: its next write checks the table again.
    pub async fn unlearned(&self) -> Db {
        let mut db = self.another().await;
        match &mut db {
            Db::Mongo { store, .. } => *store = store.unlearned(),
            Db::Postgres { store, .. } => *store = store.unlearned(),
            Db::Sqlite { store, .. } => *store = store.unlearned(),
            Db::Mysql { store, .. } => *store = store.unlearned(),
        }
        db
    }

    /// The natural-key index (MongoDB) or the table (PostgreSQL, SQLite, MariaDB) of `T`.
    pub async fn ensure<T: Idempotent>(&self) {
        match self {
            Db::Mongo { store, .. } => store.ensure_indexes::<T>().await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.ensure_table::<T, _>(c).await),
            Db::Sqlite {
                store, connection, ..
            } => store.ensure_table::<T>(&mut *connection.lock().await).await,
            Db::Mysql {
                store, connection, ..
            } => store.ensure_table::<T>(&mut *connection.lock().await).await,
        }
        .unwrap_or_else(|error| panic!("{self}: preparing {}: {error}", T::MODEL.collection()))
    }

    pub async fn upsert<T: Idempotent + Serialize + Sync>(
        &self,
        doc: &T,
    ) -> Result<Outcome, Error> {
        match self {
            Db::Mongo { store, .. } => store.upsert(doc).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.upsert(c, doc).await),
            Db::Sqlite {
                store, connection, ..
            } => store.upsert(&mut *connection.lock().await, doc).await,
            Db::Mysql {
                store, connection, ..
            } => store.upsert(&mut *connection.lock().await, doc).await,
        }
    }

    pub async fn upsert_many<T: Idempotent + Serialize + Sync>(
        &self,
        docs: &[T],
    ) -> Result<BatchReport, Error> {
        match self {
            Db::Mongo { store, .. } => store.upsert_many(docs).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.upsert_many(c, docs).await),
            Db::Sqlite {
                store, connection, ..
            } => store.upsert_many(&mut *connection.lock().await, docs).await,
            Db::Mysql {
                store, connection, ..
            } => store.upsert_many(&mut *connection.lock().await, docs).await,
        }
    }

    /// The audit of `T`'s collection or table, read as `T`.
    pub async fn audit<T>(&self) -> idem_core::AuditReport
    where
        T: Idempotent + Serialize + serde::de::DeserializeOwned,
    {
        match self {
            Db::Mongo { store, .. } => store.audit::<T>().await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.audit::<T, _>(c).await),
            Db::Sqlite {
                store, connection, ..
            } => store.audit::<T>(&mut *connection.lock().await).await,
            Db::Mysql {
                store, connection, ..
            } => store.audit::<T>(&mut *connection.lock().await).await,
        }
        .unwrap()
    }

    /// The audit of `T`'s collection or table with its model given at run time, as `idem audit`
    /// reads it.
    pub async fn audit_model<T: Idempotent>(&self) -> idem_core::AuditReport {
        let model = &T::MODEL;
        match self {
            Db::Mongo { store, .. } => store.audit_model(model, &[], |_| {}).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store
                .audit_model(c, model, &[], |_| {})
                .await),
            Db::Sqlite {
                store, connection, ..
            } => {
                store
                    .audit_model(&mut *connection.lock().await, model, &[], |_| {})
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                store
                    .audit_model(&mut *connection.lock().await, model, &[], |_| {})
                    .await
            }
        }
        .unwrap()
    }

    /// Adopts `T`'s collection or table as the type reads it.
    pub async fn adopt<T>(&self) -> idem_core::AdoptReport
    where
        T: Idempotent + Serialize + serde::de::DeserializeOwned,
    {
        match self {
            Db::Mongo { store, .. } => store.adopt::<T>(Default::default()).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.adopt::<T, _>(c).await),
            Db::Sqlite {
                store, connection, ..
            } => store.adopt::<T>(&mut *connection.lock().await).await,
            Db::Mysql {
                store, connection, ..
            } => store.adopt::<T>(&mut *connection.lock().await).await,
        }
        .unwrap_or_else(|error| panic!("{self}: adopting: {error}"))
    }

    /// Adopts `T`'s collection or table with its model given at run time, as `idem adopt --yes`
    /// does.
    pub async fn adopt_model<T: Idempotent>(&self) -> idem_core::AdoptReport {
        self.adopt_model_at_most::<T>(None).await
    }

    /// [`Db::adopt_model`], stopping after `max_documents` documents moved (`--max-documents`).
    pub async fn adopt_model_at_most<T: Idempotent>(
        &self,
        max_documents: Option<u64>,
    ) -> idem_core::AdoptReport {
        let model = &T::MODEL;
        let mut options = idem_core::sqlite::AdoptOptions::default();
        options.max_documents = max_documents;
        match self {
            Db::Mongo { store, .. } => {
                let mut options = idem_core::mongo::AdoptOptions::default();
                options.max_documents = max_documents;
                store.adopt_model(model, &[], options).await
            }
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store
                .adopt_model(c, model, &[], options)
                .await),
            Db::Sqlite {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                store
                    .adopt_model(&mut connection, model, &[], options)
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                store
                    .adopt_model(&mut connection, model, &[], options)
                    .await
            }
        }
        .unwrap()
    }

    pub async fn delete<T: Idempotent + Serialize + Sync>(
        &self,
        doc: &T,
    ) -> Result<Deletion, Error> {
        match self {
            Db::Mongo { store, .. } => store.delete(doc).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.delete(c, doc).await),
            Db::Sqlite {
                store, connection, ..
            } => store.delete(&mut *connection.lock().await, doc).await,
            Db::Mysql {
                store, connection, ..
            } => store.delete(&mut *connection.lock().await, doc).await,
        }
    }

    pub async fn delete_by_id<T: Idempotent, M: Serialize + Sync>(
        &self,
        id: Id,
        marker: &M,
    ) -> Result<Deletion, Error> {
        match self {
            Db::Mongo { store, .. } => store.delete_by_id::<T, M>(id, marker).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| {
                store.delete_by_id::<T, M, _>(c, id, marker).await
            }),
            Db::Sqlite {
                store, connection, ..
            } => {
                store
                    .delete_by_id::<T, M>(&mut *connection.lock().await, id, marker)
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                store
                    .delete_by_id::<T, M>(&mut *connection.lock().await, id, marker)
                    .await
            }
        }
    }

    pub async fn insert_new<T: Idempotent + Serialize + Sync + Clone>(
        &self,
        members: &[T],
    ) -> Result<InsertReport<T>, Error> {
        match self {
            Db::Mongo { store, .. } => store.insert_new(members).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.insert_new(c, members).await),
            Db::Sqlite {
                store, connection, ..
            } => {
                store
                    .insert_new(&mut *connection.lock().await, members)
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                store
                    .insert_new(&mut *connection.lock().await, members)
                    .await
            }
        }
    }

    pub async fn push<T: Idempotent, I: Serialize + Sync>(
        &self,
        id: Id,
        field: &'static str,
        item: &I,
    ) -> Result<Pushed, Error> {
        match self {
            Db::Mongo { store, .. } => store.push::<T, I>(id, field, item).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| {
                store.push::<T, I, _>(c, id, field, item).await
            }),
            Db::Sqlite {
                store, connection, ..
            } => {
                store
                    .push::<T, I>(&mut *connection.lock().await, id, field, item)
                    .await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                store
                    .push::<T, I>(&mut *connection.lock().await, id, field, item)
                    .await
            }
        }
    }

    /// The document stored under `id`, read as `T` (`store.get`).
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned + Send,
    {
        match self {
            Db::Mongo { store, .. } => store.get::<T>(id).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| store.get::<T, _>(c, id).await),
            Db::Sqlite {
                store, connection, ..
            } => store.get::<T>(&mut *connection.lock().await, id).await,
            Db::Mysql {
                store, connection, ..
            } => store.get::<T>(&mut *connection.lock().await, id).await,
        }
    }

    /// The document stored under `key`, read as `T`, through [`idem_core::Backend::find`]: what
    /// the generated `find` calls.
    pub async fn find<T>(&self, key: idem_core::NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + serde::de::DeserializeOwned + Send,
    {
        use idem_core::Backend;
        match self {
            Db::Mongo { store, .. } => Backend::find::<T>(store, key).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => through_postgres!(sqlx, client, |c| Backend::find::<T>(&store.on(c), key)
                .await),
            Db::Sqlite {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                Backend::find::<T>(&store.on(&mut connection), key).await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                Backend::find::<T>(&store.on(&mut connection), key).await
            }
        }
    }

    /// What `T`'s collection or table holds exactly, in id order: each document's bytes
    /// (MongoDB), or each row's text with its row version (PostgreSQL, where `xmin` shows even
    /// a rewrite of the same values), or each row's values with the write marker every write
    /// of idem's sets anew (SQLite, MariaDB). Equal before and after a call: nothing was
    /// written.
    pub async fn raw<T: Idempotent>(&self) -> Vec<String> {
        let collection = T::MODEL.collection();
        match self {
            Db::Mongo { store, .. } => raw_documents(store.database(), collection)
                .await
                .iter()
                .map(|document| format!("{:?}", document.as_bytes()))
                .collect(),
            Db::Postgres { client, .. } => {
                let sql = format!(
                    "SELECT t.xmin::text || ' ' || t::text FROM \"{collection}\" t ORDER BY \"_id\""
                );
                match client.query(&sql, &[]).await {
                    Ok(rows) => rows.iter().map(|row| row.get(0)).collect(),
                    // No table yet: nothing stored.
                    Err(error) if error.code().map(|c| c.code()) == Some("42P01") => Vec::new(),
                    Err(error) => panic!("{self}: reading back: {error}"),
                }
            }
            Db::Sqlite { connection, .. } => {
                crate::sqlite_rows::raw::<T>(&mut *connection.lock().await).await
            }
            Db::Mysql { connection, .. } => {
                crate::mysql_rows::raw::<T>(&mut *connection.lock().await).await
            }
        }
    }

    /// The stored documents of `T` in id order, as JSON objects of what serde wrote plus the
    /// fields other routes own, with `_id` and without idem's own fields or nulls: the same
    /// shape on every backend.
    pub async fn stored<T: Idempotent>(&self) -> Vec<Map<String, Value>> {
        let model = &T::MODEL;
        let own = |name: &str| {
            name != "_id"
                && (name == model.hash_field() || idem_core::model::RESERVED_FIELDS.contains(&name))
        };
        match self {
            Db::Mongo { store, .. } => stored_documents(store.database(), model.collection())
                .await
                .into_iter()
                .map(|document| {
                    match mongodb::bson::Bson::Document(document).into_relaxed_extjson() {
                        Value::Object(entries) => entries
                            .into_iter()
                            .filter(|(name, value)| !own(name) && !value.is_null())
                            .collect(),
                        other => panic!("{self}: a document read back as {other}"),
                    }
                })
                .collect(),
            Db::Postgres { client, .. } => {
                let sql = format!(
                    "SELECT to_jsonb(t)::text FROM \"{}\" t ORDER BY \"_id\"",
                    model.collection()
                );
                let rows = client
                    .query(&sql, &[])
                    .await
                    .unwrap_or_else(|error| panic!("{self}: reading back: {error}"));
                rows.iter()
                    .map(|row| {
                        let text: String = row.get(0);
                        let Ok(Value::Object(mut entries)) = serde_json::from_str(&text) else {
                            panic!("{self}: a row read back as {text}");
                        };
                        let extra = match entries.remove(idem_core::model::EXTRA_FIELDS_FIELD) {
                            Some(Value::Object(extra)) => extra,
                            _ => Map::new(),
                        };
                        entries.remove(idem_core::model::APPLIED_OPS_FIELD);
                        let mut document: Map<String, Value> = entries
                            .into_iter()
                            .filter(|(name, value)| !own(name) && !value.is_null())
                            .collect();
                        document.extend(extra);
                        document
                    })
                    .collect()
            }
            Db::Sqlite { connection, .. } => {
                crate::sqlite_rows::stored::<T>(&mut *connection.lock().await).await
            }
            Db::Mysql { connection, .. } => {
                crate::mysql_rows::stored::<T>(&mut *connection.lock().await).await
            }
        }
    }

    /// `T`'s collection or table emptied, in a store of this one's configuration that starts
    /// afresh (`unlearned`), in place of this one.
    /// MongoDB: the collection dropped, and a new store that has not checked its index yet (a
    /// store remembers the indexes it made, and the dropped collection's went with it).
    /// PostgreSQL: the table dropped and made again by a new store, on a new connection (a
    /// table must exist before anyone writes to it).
    pub async fn reset<T: Idempotent>(&self) -> Db {
        let collection = T::MODEL.collection();
        match self {
            Db::Mongo { store, log } => {
                store
                    .database()
                    .collection::<mongodb::bson::Document>(collection)
                    .drop()
                    .await
                    .unwrap_or_else(|error| panic!("{self}: dropping {collection}: {error}"));
                Db::Mongo {
                    store: store.unlearned(),
                    log: log.clone(),
                }
            }
            Db::Postgres {
                label,
                uri,
                schema,
                client,
                sqlx,
                store,
            } => {
                client
                    .batch_execute(&format!("DROP TABLE IF EXISTS {}", self.quote(collection)))
                    .await
                    .unwrap_or_else(|error| panic!("{self}: dropping {collection}: {error}"));
                let fresh = Db::Postgres {
                    label: label.clone(),
                    uri: uri.clone(),
                    schema: schema.clone(),
                    client: postgres_client(uri, schema).await,
                    sqlx: match sqlx {
                        Some(_) => {
                            Some(tokio::sync::Mutex::new(sqlx_connection(uri, schema).await))
                        }
                        None => None,
                    },
                    store: store.unlearned(),
                };
                fresh.ensure::<T>().await;
                fresh
            }
            Db::Sqlite {
                path,
                connection,
                store,
            } => {
                let drop = format!("DROP TABLE IF EXISTS {}", self.quote(collection));
                crate::sqlite_rows::run(&mut *connection.lock().await, &drop).await;
                let fresh = Db::Sqlite {
                    path: path.clone(),
                    connection: tokio::sync::Mutex::new(sqlite_connection(path).await),
                    store: store.unlearned(),
                };
                fresh.ensure::<T>().await;
                fresh
            }
            Db::Mysql {
                uri,
                database,
                connection,
                store,
            } => {
                let drop = format!("DROP TABLE IF EXISTS {}", self.quote(collection));
                crate::mysql_rows::run(&mut *connection.lock().await, &drop).await;
                let fresh = Db::Mysql {
                    uri: uri.clone(),
                    database: database.clone(),
                    connection: tokio::sync::Mutex::new(mysql_connection(uri, database).await),
                    store: store.unlearned(),
                };
                fresh.ensure::<T>().await;
                fresh
            }
        }
    }

    /// `doc` as this backend reads back what serde writes for it: the same shape as
    /// [`Db::stored`] gives (relaxed extended JSON of the BSON document on MongoDB, the JSON
    /// value on PostgreSQL), without nulls and without `_id`.
    pub fn as_stored<T: Serialize>(&self, doc: &T) -> Map<String, Value> {
        let written = match self {
            Db::Mongo { .. } => mongodb::bson::to_document(doc)
                .map(|document| mongodb::bson::Bson::Document(document).into_relaxed_extjson())
                .map_err(|error| error.to_string()),
            Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. } => {
                serde_json::to_value(doc).map_err(|error| error.to_string())
            }
        };
        match written {
            Ok(Value::Object(entries)) => entries
                .into_iter()
                .filter(|(_, value)| !value.is_null())
                .collect(),
            Ok(other) => panic!("{self}: serde wrote {other} where a document needs fields"),
            Err(error) => panic!("{self}: serializing: {error}"),
        }
    }

    /// Replaces what is stored under `doc`'s id with what serde writes for it, as a tool that
    /// knows nothing of idem would: no content hash, no frozen digests, no version key. On
    /// PostgreSQL the row is deleted and inserted again, with an empty list of op ids, an empty
    /// list for each pushed field serde leaves out, and the entries no column holds (those of
    /// flattened fields) where idem keeps them. `T`'s table must exist ([`Db::ensure`]).
    pub async fn write_as_another_tool<T: Idempotent + Serialize>(&self, doc: &T) {
        let collection = T::MODEL.collection();
        let id = doc
            .id()
            .unwrap_or_else(|error| panic!("{self}: the id of {collection}'s document: {error}"))
            .to_string();
        match self {
            Db::Mongo { store, .. } => {
                let document = mongodb::bson::to_document(doc)
                    .unwrap_or_else(|error| panic!("{self}: serializing: {error}"));
                self.replace_document(store, collection, &id, document)
                    .await;
            }
            Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. } => {
                let Ok(Value::Object(entries)) = serde_json::to_value(doc) else {
                    panic!("{self}: serde wrote no fields for a document of {collection}");
                };
                self.write_json_as_another_tool::<T>(&id, entries).await;
            }
        }
    }

    /// Replaces what is stored under `id` with `entries`, as a tool that knows nothing of idem
    /// would write them: on MongoDB as BSON (a JSON integer as an int64, any other number as a
    /// double), on PostgreSQL as [`Db::write_as_another_tool`] writes a row. What another
    /// tool's numbers look like (mongosh writes every number as a double; jsonb keeps `1` where
    /// serde wrote `1.0`) is up to the caller.
    pub async fn write_json_as_another_tool<T: Idempotent>(
        &self,
        id: &str,
        entries: Map<String, Value>,
    ) {
        let collection = T::MODEL.collection();
        match self {
            Db::Mongo { store, .. } => {
                let document = mongodb::bson::to_document(&entries)
                    .unwrap_or_else(|error| panic!("{self}: converting to BSON: {error}"));
                self.replace_document(store, collection, id, document).await;
            }
            Db::Postgres { client, .. } => {
                let row = crate::sql_rows::another_tools_row::<T>(id, entries);
                let table = self.quote(collection);
                client
                    .execute(&format!("DELETE FROM {table} WHERE \"_id\" = $1"), &[&id])
                    .await
                    .unwrap_or_else(|error| panic!("{self}: deleting as another tool: {error}"));
                let insert = format!(
                    "INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, \
                     $1::text::jsonb)"
                );
                client
                    .execute(&insert, &[&Value::Object(row).to_string()])
                    .await
                    .unwrap_or_else(|error| panic!("{self}: writing as another tool: {error}"));
            }
            Db::Sqlite { connection, .. } => {
                crate::sqlite_rows::write_as_another_tool::<T>(
                    &mut *connection.lock().await,
                    id,
                    entries,
                )
                .await
            }
            Db::Mysql { connection, .. } => {
                crate::mysql_rows::write_as_another_tool::<T>(
                    &mut *connection.lock().await,
                    id,
                    entries,
                )
                .await
            }
        }
    }

    /// Stores `document` under `id` in `collection`, replacing what is there.
    async fn replace_document(
        &self,
        store: &idem_core::mongo::Store,
        collection: &str,
        id: &str,
        mut document: mongodb::bson::Document,
    ) {
        document.insert(idem_core::model::ID_FIELD, id);
        store
            .database()
            .collection::<mongodb::bson::Document>(collection)
            .replace_one(mongodb::bson::doc! { "_id": id }, document)
            .upsert(true)
            .await
            .unwrap_or_else(|error| panic!("{self}: writing as another tool: {error}"));
    }

    /// Runs `sql` on a SQL store (its identifiers quoted as [`Db::quote`] quotes them), or
    /// `command` on MongoDB: a change another tool makes.
    pub async fn run_raw(&self, sql: &str, command: mongodb::bson::Document) {
        match self {
            Db::Mongo { store, .. } => {
                store
                    .database()
                    .run_command(command)
                    .await
                    .unwrap_or_else(|error| panic!("{self}: running a command: {error}"));
            }
            Db::Postgres { client, .. } => client
                .batch_execute(sql)
                .await
                .unwrap_or_else(|error| panic!("{self}: running {sql}: {error}")),
            Db::Sqlite { connection, .. } => {
                crate::sqlite_rows::run(&mut *connection.lock().await, sql).await
            }
            Db::Mysql { connection, .. } => {
                crate::mysql_rows::run(&mut *connection.lock().await, sql).await
            }
        }
    }

    /// Creates a unique index `name` on `field` of `T`'s collection or table, as an application
    /// adds its own constraint beside idem's.
    pub async fn create_unique_index<T: Idempotent>(&self, name: &str, field: &str) {
        let collection = T::MODEL.collection();
        let sql = format!(
            "CREATE UNIQUE INDEX {} ON {} ({})",
            self.quote(name),
            self.quote(collection),
            self.quote(field)
        );
        let command = mongodb::bson::doc! {
            "createIndexes": collection,
            "indexes": [{ "key": { field: 1 }, "name": name, "unique": true }],
        };
        self.run_raw(&sql, command).await;
    }

    /// Removes `field` from every stored document of `T` (NULL on PostgreSQL, `$unset` on
    /// MongoDB), as another route or tool would.
    pub async fn clear_field<T: Idempotent>(&self, field: &str) {
        let collection = T::MODEL.collection();
        let sql = format!(
            "UPDATE {} SET {} = NULL",
            self.quote(collection),
            self.quote(field)
        );
        let command = mongodb::bson::doc! {
            "update": collection,
            "updates": [{ "q": {}, "u": { "$unset": { field: "" } }, "multi": true }],
        };
        self.run_raw(&sql, command).await;
    }

    /// `name` as an identifier in this store's SQL: in backticks on MariaDB (where a double
    /// quote is a string's, unless `sql_mode` has `ANSI_QUOTES`), in double quotes elsewhere.
    pub fn quote(&self, name: &str) -> String {
        match self {
            Db::Mysql { .. } => crate::mysql_rows::quoted(name),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// The same store remembering only the latest `window` op ids per document (`apply_once`'s
    /// `with_op_window` on either backend), on a connection of its own.
    pub async fn with_op_window(&self, window: usize) -> Db {
        self.reconfigured(
            |store| store.with_op_window(window),
            |store| store.with_op_window(window),
            |store| store.with_op_window(window),
            |store| store.with_op_window(window),
        )
        .await
    }

    /// The same store sending batches `rows` documents per statement (`with_batch_chunk` on
    /// either backend), on a connection of its own.
    pub async fn with_batch_chunk(&self, rows: usize) -> Db {
        self.reconfigured(
            |store| store.with_batch_chunk(rows),
            |store| store.with_batch_chunk(rows),
            |store| store.with_batch_chunk(rows),
            |store| store.with_batch_chunk(rows),
        )
        .await
    }

    /// The same store taking a batch's shortcuts (the lookup before a chunk's write, the plain
    /// insert of fresh rows) on chunks of `docs` documents or more, on a connection of its own.
    /// MongoDB's store has neither shortcut and stays as it is.
    pub async fn with_shortcuts_from(&self, docs: usize) -> Db {
        self.reconfigured(
            |store| store,
            |store| store.with_shortcuts_from(docs),
            |store| store.with_shortcuts_from(docs),
            |store| store.with_shortcuts_from(docs),
        )
        .await
    }

    /// The same store, configured anew, on a connection of its own.
    async fn reconfigured(
        &self,
        mongo: impl FnOnce(idem_core::mongo::Store) -> idem_core::mongo::Store,
        postgres: impl FnOnce(idem_core::postgres::Store) -> idem_core::postgres::Store,
        sqlite: impl FnOnce(idem_core::sqlite::Store) -> idem_core::sqlite::Store,
        mysql: impl FnOnce(idem_core::mysql::Store) -> idem_core::mysql::Store,
    ) -> Db {
        match self.another().await {
            Db::Mongo { store, log } => Db::Mongo {
                store: mongo(store),
                log,
            },
            Db::Postgres {
                label,
                uri,
                schema,
                client,
                sqlx,
                store,
            } => Db::Postgres {
                label,
                uri,
                schema,
                client,
                sqlx,
                store: postgres(store),
            },
            Db::Sqlite {
                path,
                connection,
                store,
            } => Db::Sqlite {
                path,
                connection,
                store: sqlite(store),
            },
            Db::Mysql {
                uri,
                database,
                connection,
                store,
            } => Db::Mysql {
                uri,
                database,
                connection,
                store: mysql(store),
            },
        }
    }
}
