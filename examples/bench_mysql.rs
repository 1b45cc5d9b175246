//! MariaDB benchmark: idem's `upsert_many` beside the hand-written ways, on the same rows and the
//! same table in one run, with statements and rows written counted exactly.
//!
//! The scenarios, each over `--rows` posts (default 10,000; the rows of `bench_sqlite`):
//!
//! 1. new rows into an empty table;
//! 2. an unchanged re-ingest of the same rows;
//! 3. a re-ingest with every tenth row changed (a new title).
//!
//! The ways, each on idem's own table (`Store::create_table_sql::<Post>()`) in a database of the
//! benchmark's own, created at the start and dropped at the end:
//!
//! - a plain multi-row `INSERT`, one statement per chunk, in one transaction: the floor for new
//!   rows (scenario 1 only), and the baseline of scenario 1's ratios;
//! - one multi-row `INSERT … ON DUPLICATE KEY UPDATE` per chunk, in one transaction: the
//!   baseline of scenarios 2 and 3;
//! - one `INSERT … ON DUPLICATE KEY UPDATE` per row, in one transaction;
//! - idem's `upsert_many` inside one transaction of the caller's (one commit, as the
//!   hand-written ways);
//! - idem's `upsert_many`, a transaction of its own per chunk (what the targets are read on).
//!
//! Chunks are `--chunk` rows (default 1,000, idem's default) for idem and the multi-row
//! statements alike. The hand-written ways fill every column, idem's own too (`_id`, the content
//! hash, the write marker…), with the values idem stores, read back from a table idem wrote before
//! any timing: every way stores the same bytes, and pays none of idem's CPU (ids, hashes,
//! serialization). `LOAD DATA LOCAL INFILE`, the bulk path of the `mariadb` client, is not among
//! them: sqlx's MySQL driver does not offer the local-infile capability, so the server refuses
//! the statement (error 4166); the run tries it once and prints what the server said.
//!
//! Each round of each way starts from the same table: `TRUNCATE`, then the scenario's stored rows
//! put back (untimed), on a fresh connection. Ways run interleaved (A, B, C, then C, B, A…); the
//! time is the median over the rounds, the ratio that median over the baseline's.
//!
//! How each count is made exact:
//!
//! - statements: one more pass of each way (untimed) runs through a TCP relay in this process that
//!   parses the MySQL protocol the client sends: every command packet (sequence number 0) is
//!   counted by its command byte; `COM_QUERY` and `COM_STMT_EXECUTE` are statements (`BEGIN`,
//!   `COMMIT` and `SAVEPOINT` included), `COM_STMT_PREPARE` is counted apart (sqlx prepares each
//!   distinct statement once per connection). The hand-written ways count their own `execute`
//!   calls, and the run fails if the two ever differ. For idem, its own count beside it: the
//!   `round trip` events of its `tracing` feature (the statements it counts as its work; its
//!   `BEGIN`, `SAVEPOINT` and `COMMIT` are not among them).
//! - rows written: rows inserted are the table's `COUNT(*)` after less before (no way deletes);
//!   rows updated are the delta of the writing session's `Handler_update` (`SHOW SESSION STATUS`),
//!   which the server bumps once per row an update changes: an `ON DUPLICATE KEY UPDATE` that
//!   meets a row holding the very values leaves it alone, uncounted. (`Handler_write` would not
//!   do: it counts every attempted insert, the ones that met a duplicate key too; MariaDB 10.11
//!   has no `Innodb_rows_*` counters left.) The run checks the method on the hand-written ways:
//!   each must write what its statements must (every row when new, none when unchanged, exactly
//!   the rows whose values differ when changed), or the run fails.
//!
//! ```text
//! eval "$(scripts/mariadb-server start)"
//! cargo run --release -p idem-examples --example bench_mysql -- [--rounds 5] [--rows 10000]
//!     [--chunk 1000] [--only new,unchanged,changed] [--tsv FILE]
//! scripts/mariadb-server stop
//! ```
//!
//! Exit status 0 when every exact target (rows written) was met, 1 when one was missed, 2 when
//! the benchmark failed.

use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::mysql::Store;
use idem_core::sqlx::mysql::{MySqlConnectOptions, MySqlRow, MySqlSslMode};
use idem_core::sqlx::{self, ConnectOptions, Connection, MySqlConnection};
use idem_examples::bench::{
    fmt_duration, median_duration, order, post, print_table, print_targets, targets_tsv, Post,
    Target,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TABLE: &str = "posts";

// ------------------------------------------------------------------------------------------------
// Counting idem's round trips: its `tracing` events

/// Counts idem's `round trip` events (target `idem`, a `command` field); nothing else is enabled,
/// so sqlx's statement logging stays off.
struct RoundTrips(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RoundTrips {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        match metadata.target() == "idem" {
            true => tracing::subscriber::Interest::always(),
            false => tracing::subscriber::Interest::never(),
        }
    }

    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        metadata.target() == "idem"
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().fields().field("command").is_some() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Counting the statements on the wire

/// What clients sent through the relay, by command.
#[derive(Default)]
struct WireCounts {
    /// `COM_QUERY` and `COM_STMT_EXECUTE`.
    statements: AtomicU64,
    /// `COM_STMT_PREPARE`.
    prepares: AtomicU64,
    /// Every other command (`COM_STMT_CLOSE`, `COM_PING`, `COM_QUIT`…).
    other: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Wire {
    statements: u64,
    prepares: u64,
    other: u64,
    bytes: u64,
}

impl WireCounts {
    fn snapshot(&self) -> Wire {
        Wire {
            statements: self.statements.load(Ordering::SeqCst),
            prepares: self.prepares.load(Ordering::SeqCst),
            other: self.other.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
        }
    }
}

impl Wire {
    fn since(self, earlier: Wire) -> Wire {
        Wire {
            statements: self.statements - earlier.statements,
            prepares: self.prepares - earlier.prepares,
            other: self.other - earlier.other,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;

/// Splits the client's byte stream into MySQL packets (3-byte length, sequence number, payload)
/// and counts the commands: packets of sequence number 0 that do not continue a packet of the
/// maximum length. The handshake's packets from the client have sequence numbers from 1.
#[derive(Default)]
struct Frames {
    header: [u8; 4],
    have: usize,
    /// The payload bytes still to pass over.
    skip: usize,
    /// The command byte of the packet whose header was just read is next.
    command_next: bool,
    /// The last packet had the maximum length: the next one continues it.
    continued: bool,
}

impl Frames {
    fn feed(&mut self, mut bytes: &[u8], counts: &WireCounts) {
        counts.bytes.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        while !bytes.is_empty() {
            if self.command_next {
                self.command_next = false;
                let counter = match bytes[0] {
                    COM_QUERY | COM_STMT_EXECUTE => &counts.statements,
                    COM_STMT_PREPARE => &counts.prepares,
                    _ => &counts.other,
                };
                counter.fetch_add(1, Ordering::SeqCst);
                self.skip -= 1;
                bytes = &bytes[1..];
                continue;
            }
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (4 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 4 {
                break;
            }
            self.have = 0;
            let length =
                u32::from_le_bytes([self.header[0], self.header[1], self.header[2], 0]) as usize;
            let sequence = self.header[3];
            self.skip = length;
            self.command_next = sequence == 0 && !self.continued && length > 0;
            self.continued = length == 0xFF_FFFF;
        }
    }
}

/// A relay on a free local port to `upstream`, counting what each client sends into `counts`.
async fn relay(upstream: (String, u16), counts: Arc<WireCounts>) -> Result<u16, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let counts = counts.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let down = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                });
                let mut frames = Frames::default();
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    let n = match client_read.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    frames.feed(&buffer[..n], &counts);
                    if server_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = server_write.shutdown().await;
                let _ = down.await;
            });
        }
    });
    Ok(port)
}

// ------------------------------------------------------------------------------------------------
// The rows idem stores

/// A stored value, as the server typed it.
#[derive(Clone, PartialEq)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
}

/// Rows read back from idem's table: the column names, then each row's values, by `_id`.
#[derive(Clone)]
struct Rows {
    names: Vec<String>,
    cells: Vec<Vec<Cell>>,
}

/// Every row of the table, by `_id`.
async fn read_rows(connection: &mut MySqlConnection) -> Result<Rows, BoxError> {
    use sqlx::{Column, Row, TypeInfo, ValueRef};
    let read: Vec<MySqlRow> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT * FROM {TABLE} ORDER BY `_id`"
    )))
    .fetch_all(&mut *connection)
    .await?;
    let first = read.first().ok_or("idem's table is empty")?;
    let names: Vec<String> = first
        .columns()
        .iter()
        .map(|column| column.name().to_owned())
        .collect();
    let mut cells = Vec::with_capacity(read.len());
    for row in &read {
        let mut values = Vec::with_capacity(names.len());
        for index in 0..names.len() {
            let raw = row.try_get_raw(index)?;
            if raw.is_null() {
                values.push(Cell::Null);
                continue;
            }
            let kind = raw.type_info().name().to_owned();
            values.push(match kind.as_str() {
                "BOOLEAN" | "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" => {
                    Cell::Integer(row.try_get(index)?)
                }
                "FLOAT" | "DOUBLE" => Cell::Real(row.try_get(index)?),
                "BINARY" | "VARBINARY" | "BLOB" | "TINYBLOB" | "MEDIUMBLOB" | "LONGBLOB" => {
                    Cell::Bytes(row.try_get(index)?)
                }
                _ => Cell::Text(row.try_get(index)?),
            });
        }
        cells.push(values);
    }
    Ok(Rows { names, cells })
}

fn bind<'q>(
    mut query: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    row: &'q [Cell],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    for cell in row {
        query = match cell {
            Cell::Null => query.bind(None::<&str>),
            Cell::Integer(value) => query.bind(*value),
            Cell::Real(value) => query.bind(*value),
            Cell::Text(value) => query.bind(value.as_str()),
            Cell::Bytes(value) => query.bind(value.as_slice()),
        };
    }
    query
}

// ------------------------------------------------------------------------------------------------
// The ways

#[derive(Clone, Copy, PartialEq)]
enum Way {
    PlainInsert,
    MultiRowUpsert,
    RowByRow,
    IdemInTransaction,
    Idem,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::PlainInsert => "plain multi-row INSERT per chunk, one transaction",
            Way::MultiRowUpsert => {
                "multi-row INSERT … ON DUPLICATE KEY UPDATE per chunk, one transaction"
            }
            Way::RowByRow => "INSERT … ON DUPLICATE KEY UPDATE per row, one transaction",
            Way::IdemInTransaction => "idem upsert_many inside one transaction",
            Way::Idem => "idem upsert_many",
        }
    }

    fn is_idem(self) -> bool {
        matches!(self, Way::Idem | Way::IdemInTransaction)
    }
}

/// What the hand-written statements are made of.
struct Sql {
    /// `INSERT INTO posts (every column) VALUES ` — rows appended.
    insert: String,
    /// One row's placeholders.
    tuple: String,
    /// ` ON DUPLICATE KEY UPDATE col = VALUES(col), …` over every column but `_id`.
    on_duplicate: String,
}

impl Sql {
    fn new(names: &[String]) -> Self {
        let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
        let assignments: Vec<String> = quoted
            .iter()
            .filter(|name| name.as_str() != "`_id`")
            .map(|name| format!("{name} = VALUES({name})"))
            .collect();
        Sql {
            insert: format!("INSERT INTO {TABLE} ({}) VALUES ", quoted.join(", ")),
            tuple: format!("({})", vec!["?"; names.len()].join(", ")),
            on_duplicate: format!(" ON DUPLICATE KEY UPDATE {}", assignments.join(", ")),
        }
    }

    fn rows(&self, count: usize, upsert: bool) -> String {
        let mut sql = self.insert.clone();
        sql.push_str(&vec![self.tuple.as_str(); count].join(", "));
        if upsert {
            sql.push_str(&self.on_duplicate);
        }
        sql
    }
}

struct Bench {
    store: Store,
    /// The options of a connection to the benchmark's database, straight to the server.
    direct: MySqlConnectOptions,
    /// The same through the counting relay.
    relayed: MySqlConnectOptions,
    /// A connection of the benchmark's own: truncates, puts stored rows back, counts rows.
    admin: MySqlConnection,
    wire: Arc<WireCounts>,
    round_trips: Arc<AtomicU64>,
    sql: Sql,
    chunk: usize,
}

/// One write: its duration, rows inserted and updated, statements made (by the benchmark's own
/// count for the hand-written ways, by idem's round-trip events for idem's).
struct Sample {
    took: Duration,
    inserted: u64,
    updated: u64,
    calls: u64,
    /// What the relay counted, on a relayed run.
    wire: Option<Wire>,
}

impl Bench {
    /// Puts the table back to holding `stored` (or nothing).
    async fn reset(&mut self, stored: Option<&Rows>) -> Result<(), BoxError> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("TRUNCATE TABLE {TABLE}")))
            .execute(&mut self.admin)
            .await?;
        if let Some(rows) = stored {
            let mut transaction = self.admin.begin().await?;
            for chunk in rows.cells.chunks(self.chunk) {
                let sql = self.sql.rows(chunk.len(), false);
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for row in chunk {
                    query = bind(query, row);
                }
                query.execute(&mut *transaction).await?;
            }
            transaction.commit().await?;
        }
        Ok(())
    }

    async fn count_rows(&mut self) -> Result<u64, BoxError> {
        let count: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {TABLE}")))
                .fetch_one(&mut self.admin)
                .await?;
        Ok(count as u64)
    }

    /// One write of `input` (idem's documents, or the values idem stores for them) the way
    /// `way` does, timed, on a fresh table holding `stored`.
    async fn measure(
        &mut self,
        way: Way,
        stored: Option<&Rows>,
        posts: &[Post],
        values: &Rows,
        relayed: bool,
    ) -> Result<Sample, BoxError> {
        self.reset(stored).await?;
        let options = match relayed {
            true => &self.relayed,
            false => &self.direct,
        };
        let mut connection = options.connect().await?;
        let updated_before = handler_update(&mut connection).await?;
        let rows_before = self.count_rows().await?;
        let trips_before = self.round_trips.load(Ordering::SeqCst);
        let wire_before = self.wire.snapshot();
        let started = Instant::now();
        let calls = self.write(&mut connection, way, posts, values).await?;
        let took = started.elapsed();
        let wire = self.wire.snapshot().since(wire_before);
        let trips = self.round_trips.load(Ordering::SeqCst) - trips_before;
        let updated_after = handler_update(&mut connection).await?;
        let rows_after = self.count_rows().await?;
        connection.close().await?;
        Ok(Sample {
            took,
            inserted: rows_after - rows_before,
            updated: updated_after - updated_before,
            calls: calls.unwrap_or(trips),
            wire: relayed.then_some(wire),
        })
    }

    /// Writes the way `way` does; returns the statements made by the benchmark's own count (for
    /// the hand-written ways; `None` for idem's).
    async fn write(
        &self,
        connection: &mut MySqlConnection,
        way: Way,
        posts: &[Post],
        values: &Rows,
    ) -> Result<Option<u64>, BoxError> {
        match way {
            Way::Idem => {
                all_written(self.store.upsert_many(connection, posts).await?)?;
                Ok(None)
            }
            Way::IdemInTransaction => {
                let mut transaction = connection.begin().await?;
                all_written(self.store.upsert_many(&mut transaction, posts).await?)?;
                transaction.commit().await?;
                Ok(None)
            }
            Way::PlainInsert | Way::MultiRowUpsert => {
                let upsert = way == Way::MultiRowUpsert;
                // BEGIN and COMMIT.
                let mut calls = 2;
                let mut transaction = connection.begin().await?;
                for chunk in values.cells.chunks(self.chunk) {
                    let sql = self.sql.rows(chunk.len(), upsert);
                    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for row in chunk {
                        query = bind(query, row);
                    }
                    query.execute(&mut *transaction).await?;
                    calls += 1;
                }
                transaction.commit().await?;
                Ok(Some(calls))
            }
            Way::RowByRow => {
                let sql = self.sql.rows(1, true);
                let mut calls = 2;
                let mut transaction = connection.begin().await?;
                for row in &values.cells {
                    bind(sqlx::query(sqlx::AssertSqlSafe(sql.as_str())), row)
                        .execute(&mut *transaction)
                        .await?;
                    calls += 1;
                }
                transaction.commit().await?;
                Ok(Some(calls))
            }
        }
    }
}

/// The session's `Handler_update`: the rows its updates changed so far.
async fn handler_update(connection: &mut MySqlConnection) -> Result<u64, BoxError> {
    let (_, value): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_update'")
        .fetch_one(connection)
        .await?;
    Ok(value.parse()?)
}

/// An error if idem refused any row of `report`: every way must write every row.
fn all_written(report: idem_core::BatchReport) -> Result<(), BoxError> {
    match report.refused() {
        0 => Ok(()),
        _ => Err(format!("idem refused rows: {report}").into()),
    }
}

/// `1 statement`, `10 statements`.
fn plural(count: u64, noun: &str) -> String {
    format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
}

struct Scenario {
    key: &'static str,
    name: &'static str,
    ways: Vec<Way>,
    stored: Option<Rows>,
    posts: Vec<Post>,
    values: Rows,
    /// The rows each way must insert and update.
    expected: (u64, u64),
}

struct Args {
    rounds: usize,
    rows: usize,
    chunk: usize,
    only: Option<Vec<String>>,
    tsv: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut parsed = Args {
        rounds: 5,
        rows: 10_000,
        chunk: idem_core::mysql::DEFAULT_BATCH_CHUNK,
        only: None,
        tsv: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--rounds" => parsed.rounds = value()?.parse()?,
            "--rows" => parsed.rows = value()?.parse()?,
            "--chunk" => parsed.chunk = value()?.parse()?,
            "--only" => parsed.only = Some(value()?.split(',').map(str::to_owned).collect()),
            "--tsv" => parsed.tsv = Some(value()?.into()),
            "--help" | "-h" => {
                println!(
                    "bench_mysql [--rounds N (5)] [--rows N (10000)] [--chunk N (1000)] \
                     [--only new,unchanged,changed] [--tsv FILE]\n\
                     against the server in MYSQL_URI (MariaDB 10.11 or later)"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if parsed.rounds == 0 || parsed.rows < 10 || parsed.chunk == 0 {
        return Err("--rounds and --chunk must be at least 1, --rows at least 10".into());
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("bench_mysql: {error}");
            return ExitCode::from(2);
        }
    };
    let Ok(uri) = std::env::var("MYSQL_URI") else {
        eprintln!(
            "bench_mysql: MYSQL_URI is unset (eval \"$(scripts/mariadb-server start)\" sets it)"
        );
        return ExitCode::from(2);
    };
    let round_trips = Arc::new(AtomicU64::new(0));
    {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(RoundTrips(round_trips.clone()));
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            eprintln!("bench_mysql: could not install the counting subscriber");
            return ExitCode::from(2);
        }
    }
    let database = format!("idem_bench_{}", ulid::Ulid::generate()).to_lowercase();
    let server = match MySqlConnectOptions::from_str(&uri) {
        Ok(options) => options
            .ssl_mode(MySqlSslMode::Disabled)
            .disable_statement_logging(),
        Err(error) => {
            eprintln!("bench_mysql: MYSQL_URI: {error}");
            return ExitCode::from(2);
        }
    };
    let mut root = match server.connect().await {
        Ok(connection) => connection,
        Err(error) => {
            eprintln!("bench_mysql: connecting to MYSQL_URI: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{database}`")))
        .execute(&mut root)
        .await
    {
        eprintln!("bench_mysql: creating database {database}: {error}");
        return ExitCode::from(2);
    }
    let result = run(&args, &server, &database, round_trips).await;
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE `{database}`")))
        .execute(&mut root)
        .await;
    if let Err(error) = dropped {
        eprintln!("bench_mysql: dropping database {database}: {error}");
    }
    let _ = root.close().await;
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("bench_mysql: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run(
    args: &Args,
    server: &MySqlConnectOptions,
    database: &str,
    round_trips: Arc<AtomicU64>,
) -> Result<bool, BoxError> {
    let direct = server.clone().database(database);
    let wire = Arc::new(WireCounts::default());
    let port = relay(
        (direct.get_host().to_owned(), direct.get_port()),
        wire.clone(),
    )
    .await?;
    let relayed = direct.clone().host("127.0.0.1").port(port);
    let mut admin = direct.connect().await?;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut admin)
        .await?;
    let store = Store::new().with_batch_chunk(args.chunk);
    sqlx::raw_sql(sqlx::AssertSqlSafe(Store::create_table_sql::<Post>()))
        .execute(&mut admin)
        .await?;
    store.ensure_table::<Post>(&mut admin).await?;

    // LOAD DATA LOCAL INFILE, tried once: the client must offer the capability.
    let infile = std::env::temp_dir().join(format!("idem-bench-mysql-{}.tsv", std::process::id()));
    std::fs::write(&infile, "")?;
    let load = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE {TABLE}",
        infile.display()
    )))
    .execute(&mut admin)
    .await;
    let _ = std::fs::remove_file(&infile);
    let load_data = match load {
        Ok(_) => {
            "LOAD DATA LOCAL INFILE through sqlx: accepted (unexpected; not measured)".to_owned()
        }
        Err(sqlx::Error::Database(error)) => format!(
            "LOAD DATA LOCAL INFILE through sqlx: refused, error {} ({}): {} (sqlx's MySQL driver \
             does not offer the local-infile capability; not measured)",
            error
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map_or(0, |error| error.number()),
            error.code().unwrap_or_default(),
            error.message()
        ),
        Err(error) => {
            format!("LOAD DATA LOCAL INFILE through sqlx: failed: {error} (not measured)")
        }
    };

    let count = args.rows;
    let first: Vec<Post> = (0..count).map(|n| post(n, "Title")).collect();
    let changed: Vec<Post> = (0..count)
        .map(|n| post(n, if n % 10 == 0 { "Edited" } else { "Title" }))
        .collect();
    let changed_count = count.div_ceil(10) as u64;

    // The values idem stores: for the first ingest, and for the changed rows over it.
    let mut bench = Bench {
        store,
        direct,
        relayed,
        admin,
        wire,
        round_trips,
        sql: Sql::new(&[]),
        chunk: args.chunk,
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("TRUNCATE TABLE {TABLE}")))
        .execute(&mut bench.admin)
        .await?;
    all_written(bench.store.upsert_many(&mut bench.admin, &first).await?)?;
    let first_rows = read_rows(&mut bench.admin).await?;
    all_written(bench.store.upsert_many(&mut bench.admin, &changed).await?)?;
    let changed_rows = read_rows(&mut bench.admin).await?;
    bench.sql = Sql::new(&first_rows.names);
    let differing = first_rows
        .cells
        .iter()
        .zip(&changed_rows.cells)
        .filter(|(a, b)| a != b)
        .count() as u64;
    if differing != changed_count {
        return Err(format!(
            "idem's rows for the changed posts differ from the first ones in {differing} rows, \
             not {changed_count}"
        )
        .into());
    }

    let scenarios = [
        Scenario {
            key: "new",
            name: "new rows",
            ways: vec![
                Way::PlainInsert,
                Way::MultiRowUpsert,
                Way::RowByRow,
                Way::IdemInTransaction,
                Way::Idem,
            ],
            stored: None,
            posts: first.clone(),
            values: first_rows.clone(),
            expected: (count as u64, 0),
        },
        Scenario {
            key: "unchanged",
            name: "unchanged re-ingest",
            ways: vec![
                Way::MultiRowUpsert,
                Way::RowByRow,
                Way::IdemInTransaction,
                Way::Idem,
            ],
            stored: Some(first_rows.clone()),
            posts: first.clone(),
            values: first_rows.clone(),
            expected: (0, 0),
        },
        Scenario {
            key: "changed",
            name: "10% changed",
            ways: vec![
                Way::MultiRowUpsert,
                Way::RowByRow,
                Way::IdemInTransaction,
                Way::Idem,
            ],
            stored: Some(first_rows.clone()),
            posts: changed,
            values: changed_rows,
            expected: (0, changed_count),
        },
    ];
    if let Some(unknown) = args
        .only
        .iter()
        .flatten()
        .find(|name| !scenarios.iter().any(|s| s.key == name.as_str()))
    {
        return Err(format!("--only: no scenario {unknown:?} (new, unchanged, changed)").into());
    }

    let mut table = vec![vec![
        "scenario".to_owned(),
        "way".to_owned(),
        "median time".to_owned(),
        "ratio".to_owned(),
        "statements".to_owned(),
        "rows written".to_owned(),
    ]];
    let mut lines = String::new();
    let mut targets = Vec::new();
    for scenario in scenarios.iter().filter(|scenario| {
        args.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|name| name == scenario.key))
    }) {
        eprintln!("bench_mysql: {} ({} rounds)", scenario.name, args.rounds);
        let ways = &scenario.ways;
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
        let mut written: Vec<Option<(u64, u64)>> = vec![None; ways.len()];
        let mut calls: Vec<Option<u64>> = vec![None; ways.len()];
        let mut wires: Vec<Option<Wire>> = vec![None; ways.len()];
        // Round 0 is the relayed one, untimed: the statements on the wire.
        for round in 0..=args.rounds {
            for index in order(ways.len(), round) {
                let way = ways[index];
                let sample = bench
                    .measure(
                        way,
                        scenario.stored.as_ref(),
                        &scenario.posts,
                        &scenario.values,
                        round == 0,
                    )
                    .await?;
                let what = format!("{} / {}", scenario.name, way.name());
                let rows = (sample.inserted, sample.updated);
                if written[index].is_some_and(|seen| seen != rows) {
                    return Err(format!("{what}: the rows written differ between rounds").into());
                }
                written[index] = Some(rows);
                if calls[index].is_some_and(|seen| seen != sample.calls) {
                    return Err(format!("{what}: the statements differ between rounds").into());
                }
                calls[index] = Some(sample.calls);
                if !way.is_idem() && rows != scenario.expected {
                    return Err(format!(
                        "{what}: {} inserted and {} updated, where its statements must insert \
                         {} and update {}",
                        rows.0, rows.1, scenario.expected.0, scenario.expected.1
                    )
                    .into());
                }
                match sample.wire {
                    Some(wire) => {
                        if !way.is_idem() && wire.statements != sample.calls {
                            return Err(format!(
                                "{what}: {} statements made, {} counted on the wire",
                                sample.calls, wire.statements
                            )
                            .into());
                        }
                        wires[index] = Some(wire);
                    }
                    None => times[index].push(sample.took),
                }
            }
        }
        let medians: Vec<Duration> = times
            .iter()
            .map(|each| median_duration(each.iter().copied()))
            .collect();
        for (index, way) in ways.iter().enumerate() {
            let ratio = medians[index].as_secs_f64() / medians[0].as_secs_f64();
            let wire = wires[index].unwrap_or_default();
            let (inserted, updated) = written[index].unwrap_or_default();
            let mut statements = format!(
                "{} ({} prepared)",
                plural(wire.statements, "statement"),
                wire.prepares
            );
            if way.is_idem() {
                statements.push_str(&format!(
                    "; {} by idem's count",
                    plural(calls[index].unwrap_or_default(), "round trip")
                ));
            }
            let rows = format!(
                "{} ({inserted} inserted, {updated} updated)",
                inserted + updated
            );
            table.push(vec![
                scenario.name.to_owned(),
                way.name().to_owned(),
                fmt_duration(medians[index]),
                format!("{ratio:.2}x"),
                statements.clone(),
                rows.clone(),
            ]);
            lines.push_str(&format!(
                "row\t{}\t{}\t{}\t{}\t{}\t{}\t{ratio:.4}\n",
                scenario.name,
                way.name(),
                statements,
                rows,
                fmt_duration(medians[index]),
                u8::from(index == 0),
            ));
        }
        let idem = ways.len() - 1;
        let (inserted, updated) = written[idem].unwrap_or_default();
        let idem_written = inserted + updated;
        let ratio = medians[idem].as_secs_f64() / medians[0].as_secs_f64();
        match scenario.key {
            "new" => {
                targets.push(Target::new(
                    true,
                    inserted == count as u64 && updated == 0,
                    "new rows: each inserted once",
                    format!("{inserted} inserted, {updated} updated of {count}"),
                ));
                targets.push(Target::new(
                    false,
                    ratio <= 1.5,
                    format!(
                        "new rows: upsert_many within 1.5x of a plain multi-row INSERT ({count} rows)"
                    ),
                    format!("{ratio:.2}x"),
                ));
            }
            "unchanged" => targets.push(Target::new(
                true,
                idem_written == 0,
                "unchanged re-ingest: 0 rows written",
                plural(idem_written, "row") + " written",
            )),
            _ => targets.push(Target::new(
                true,
                (inserted, updated) == scenario.expected,
                "10% changed: exactly the changed rows written",
                format!(
                    "{} written of {} changed",
                    plural(idem_written, "row"),
                    scenario.expected.1
                ),
            )),
        }
    }
    bench.admin.close().await?;
    let setup = format!(
        "{count} rows, {} rounds, chunks of {}",
        args.rounds, args.chunk
    );
    println!("MariaDB {version}; {setup}");
    print_table(&table);
    println!("{load_data}");
    print_targets(&targets);
    if let Some(path) = &args.tsv {
        let mut out = format!("server\tMariaDB {version}\t{setup}\n");
        out.push_str(&lines);
        out.push_str(&format!("note\t{load_data}\n"));
        out.push_str(&targets_tsv(&targets));
        std::fs::write(path, out)?;
    }
    Ok(targets
        .iter()
        .all(|target| target.met || target.kind != "exact"))
}
