//! PostgreSQL benchmark: idem's `upsert_many` against what one writes by hand, on the same rows in
//! the same run, with statements, rows written, dead tuples and WAL bytes counted exactly.
//!
//! The scenarios, each over `--rows` blog posts (default 10,000; about 1.4 KB per row):
//!
//! 1. new rows into an empty table: `store.upsert_many` against (a) one
//!    `INSERT … ON CONFLICT (slug, lang) DO UPDATE` per row, (b) one multi-row
//!    `INSERT … VALUES (…), (…) … ON CONFLICT … DO UPDATE` per chunk and (c) binary
//!    `COPY … FROM STDIN`, the physical limit.
//! 2. re-ingest of the same rows, unchanged: `store.upsert_many` against the naive multi-row
//!    `INSERT … ON CONFLICT … DO UPDATE SET …` of every row.
//! 3. the same with every tenth row changed (a new title).
//!
//! Each re-ingest carries a new `fetchedAt` (volatile: it never makes a post "changed"), as a real
//! re-fetch would.
//!
//! In each scenario idem also writes the same rows into the table partitioned by hash of its
//! natural key (`Store::with_partitions(PartitionBy::Hash { partitions })`, `--partitions`,
//! default 4 and 16 partitions), each in a schema of its own and made by the store, interleaved
//! with the other variants in the same rounds.
//!
//! The targets, checked at the end: idem sends one write statement per chunk, and looks a chunk
//! up first (ids, keys, content hashes and version keys only) while the last lookup found it mostly stored
//! unchanged (a first ingest's first chunk, then every chunk of a re-ingest); writes each new row
//! once, with at most 1.15x the WAL of row-by-row inserts; is at least 3x faster than row by
//! row and within 1.5x of `COPY` (timed); an unchanged re-ingest writes 0 rows, leaves 0 dead
//! tuples and near-zero WAL (at most 1% of the naive upsert's), sends at most 10% of the bytes
//! the naive upsert sends (the rows' own) and takes at most 0.25x its time (timed); a changed
//! re-ingest writes exactly the changed rows. On a partitioned table idem sends exactly the
//! statements and writes exactly the rows it does on the plain table, in at most 1.2x the plain
//! table's time (the median of per-round ratios; timed). Exact targets (counts) fail the run when
//! missed; timed ones are reported.
//!
//! Fairness. Every variant writes the same table (`Store::create_table_sql::<Post>()`) and the
//! same columns: the hand-written ones fill idem's own columns (`_id`, the content hash,
//! `idemFrozen`) with exactly the values idem stores, read back from a table idem wrote before any
//! timing, so every variant stores byte-identical rows (the check step proves it: idem finds the
//! rows a hand-written variant stored `Unchanged`). The hand-written variants bind those values
//! ready-made and use statements prepared before timing, so they pay none of idem's CPU (id,
//! content hash, digests, serialization) and no parse round trip. Chunks are `--chunk` rows
//! (default 1000, idem's default) for idem and for the multi-row statements alike.
//!
//! Each round of each variant starts from the same table: `TRUNCATE`, the stored rows of the
//! scenario put back with `COPY` (untimed), then `VACUUM`, so dead tuples and WAL are those of the
//! variant alone. Autovacuum is off for the table (it would reset `n_dead_tup` behind the
//! benchmark's back). Variants run interleaved (A, B, C, then C, B, A…); the wall time is the
//! median over the rounds, and the ratio the median of per-round ratios to the scenario's
//! baseline (its first variant), each taken within its own round. Beside the wall time, the CPU
//! time of each side in the window, from Linux's `schedstat` (nanoseconds): the server's process
//! for the connection (where the server runs on this machine; `n/a` otherwise) and this process,
//! every thread summed (idem's preparation of the rows, and the connection's I/O). On a machine
//! whose cores both sides share, the two say which one a variant waits on. And the heap
//! allocations per row on the thread that drives the writes (counted by the global allocator,
//! exact): the preparation of the rows and the encoding of the statements, not the connection's
//! I/O task.
//!
//! How each count is made exact:
//!
//! - statements: the client's connection runs over a stream that parses every message the
//!   client sends; each `Query` or `Execute` message is one statement (a `COPY` is one `Execute`).
//!   The hand-written variants also count their own `execute`/`copy_in` calls, and a run fails if
//!   the two ever differ.
//! - rows written: `n_tup_ins + n_tup_upd` of `pg_stat_user_tables` (summed over the partitions
//!   of a partitioned table, whose own counters stay 0), after
//!   `pg_stat_force_next_flush()` on the writing connection (PostgreSQL 15 and later flush a
//!   backend's counters lazily; the forced flush happens before the server answers, so a read
//!   after it sees every write). It must equal what the client was told (rows affected, rows
//!   copied, idem's outcomes), or the run fails.
//! - dead tuples: `n_dead_tup` of the same view, read the same way (an update leaves one dead
//!   tuple; pruning on a later page visit can remove some before they are counted).
//! - WAL bytes: `pg_current_wal_insert_lsn()` before and after, on the writing connection. The
//!   insert position, not `pg_current_wal_lsn()` (the write position), which lags behind it by
//!   what sits in the WAL buffers when commits are asynchronous. It counts all the server's WAL in
//!   the window: on a server with nothing else running, the variant's own.
//!
//! A check step first runs every variant on 10 rows (idem on every table) and compares each
//! count with what the statements must do (10 rows inserted, 10 updated, 10 dead tuples…), the
//! dead tuples also with `pgstattuple`, and lists the WAL records of each window with `pg_walinspect`, where those
//! extensions can be created.
//!
//! Run it (release build) against PostgreSQL 15 or later; `scripts/bench` runs it against a
//! throwaway PostgreSQL 15 and 18:
//!
//! ```text
//! eval "$(scripts/pg-server start 18)"
//! cargo run --release -p idem-examples --example bench_postgres -- [--rounds 5] [--rows 10000]
//!     [--chunk 1000] [--only check,1,2,3] [--partitions 4,16] [--tsv FILE]
//! scripts/pg-server stop
//! ```
//!
//! `POSTGRES_URI` names the server. The benchmark works in a schema of its own,
//! `idem_bench_<pid>`, and the partitioned tables in `idem_bench_<pid>_p<partitions>`, all
//! dropped when done. Exit status: 0 when every exact target is met; 1 when
//! one is missed; 2 on a usage or server problem.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use idem_core::postgres::{PartitionBy, Store};
use idem_core::tokio_postgres::binary_copy::BinaryCopyInWriter;
use idem_core::tokio_postgres::config::Host;
use idem_core::tokio_postgres::types::{ToSql, Type};
use idem_core::tokio_postgres::{Client, Config, NoTls, Statement};
use idem_core::{BatchReport, Idempotent, Outcome};
use idem_examples::bench::{
    fmt_duration, median, median_duration, order, print_table, print_targets, spread, targets_tsv,
    Target,
};
use idem_examples::cli::{exit_code, fatal, Fatal, Flags};
use idem_tests::allocations::{Counting, CountingAllocator};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

// ------------------------------------------------------------------------------------------------
// The rows

/// The design's blog post: two text keys, an `i64` id timestamp, text fields, one volatile
/// field and one frozen field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "bench_posts")]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    title: String,
    body: String,
    #[idem(volatile)]
    fetched_at: i64,
    #[idem(frozen)]
    author_id: String,
}

/// The table every variant writes.
const TABLE: &str = "bench_posts";
/// The heaps that hold the rows of table `$1`: the table itself, or the partitions of a
/// partitioned one (whose own counters stay 0: its rows are its partitions').
const HEAPS: &str = "SELECT c.oid FROM pg_class c WHERE c.relkind = 'r' AND (c.oid = \
                     to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1))))";
/// The body of every post, in bytes: rows of about 1.4 KB, below the 2 KB at which PostgreSQL
/// would compress or move a value out of line.
const BODY_BYTES: usize = 1000;
/// 2024-01-01T00:00:00Z.
const EPOCH: i64 = 1_704_067_200_000;
/// The `fetchedAt` of the re-ingests.
const REFETCHED_AT: i64 = EPOCH + 1_000_000_000;
/// The rows of the check step.
const CHECK_ROWS: usize = 10;

/// `count` posts fetched at `EPOCH`, bodies all different.
fn posts(count: usize) -> Vec<Post> {
    const FILLER: &str = "Idempotent writes converge under retries, replays and races; \
                          unchanged content is never written twice. ";
    (0..count)
        .map(|i| Post {
            slug: format!("post-{i:06}"),
            lang: ["en", "fr", "de"][i % 3].to_owned(),
            published_at: EPOCH + i as i64 * 60_000,
            title: format!("Notes on idempotency, part {i:06}"),
            body: FILLER
                .chars()
                .cycle()
                .skip(i % FILLER.len())
                .take(BODY_BYTES)
                .collect(),
            fetched_at: EPOCH,
            author_id: format!("author-{:02}", i % 17),
        })
        .collect()
}

/// Whether post `index` is one of the tenth a changed re-ingest edits.
fn is_changed(index: usize) -> bool {
    index.is_multiple_of(10)
}

/// The posts as re-fetched, with every tenth one edited if `with_changes`.
fn refetched(originals: &[Post], with_changes: bool) -> Vec<Post> {
    originals
        .iter()
        .enumerate()
        .map(|(index, post)| {
            let mut post = post.clone();
            post.fetched_at = REFETCHED_AT;
            if with_changes && is_changed(index) {
                post.title.push_str(" (revised)");
            }
            post
        })
        .collect()
}

/// A row exactly as idem stores it: what the hand-written variants bind.
#[derive(Clone, Debug)]
struct Row {
    id: String,
    slug: String,
    lang: String,
    published_at: i64,
    title: String,
    body: String,
    fetched_at: i64,
    author_id: String,
    /// The content hash: its 32 bytes, as idem stores it.
    hash: Vec<u8>,
    /// `idemFrozen`: one digest of the frozen fields.
    frozen: Vec<u8>,
}

/// The columns idem writes for a `Post`, in the order of [`Row::params`]; `{hash}` is the
/// model's hash column.
const COLUMNS: [&str; 10] = [
    "_id",
    "slug",
    "lang",
    "publishedAt",
    "title",
    "body",
    "fetchedAt",
    "authorId",
    "{hash}",
    "idemFrozen",
];

/// The SQL types of [`COLUMNS`], for binary `COPY`.
const TYPES: [Type; 10] = [
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::BYTEA,
    Type::BYTEA,
];

impl Row {
    fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.id,
            &self.slug,
            &self.lang,
            &self.published_at,
            &self.title,
            &self.body,
            &self.fetched_at,
            &self.author_id,
            &self.hash,
            &self.frozen,
        ]
    }
}

/// The quoted column names.
fn columns() -> Vec<String> {
    COLUMNS
        .iter()
        .map(|name| format!("\"{}\"", name.replace("{hash}", Post::MODEL.hash_field())))
        .collect()
}

/// `INSERT INTO bench_posts AS t (…) VALUES (…), … ON CONFLICT (slug, lang) DO UPDATE SET …`
/// for `rows` rows: every column but the id and the key replaced, as idem replaces them.
fn upsert_sql(rows: usize) -> String {
    let columns = columns();
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let parameters: Vec<String> = (1..=columns.len())
                .map(|column| format!("${}", row * columns.len() + column))
                .collect();
            format!("({})", parameters.join(", "))
        })
        .collect();
    let set: Vec<String> = columns[3..]
        .iter()
        .map(|column| format!("{column} = excluded.{column}"))
        .collect();
    format!(
        "INSERT INTO {TABLE} AS t ({}) VALUES {} ON CONFLICT (\"slug\", \"lang\") DO UPDATE SET {}",
        columns.join(", "),
        values.join(", "),
        set.join(", ")
    )
}

fn copy_sql() -> String {
    format!(
        "COPY {TABLE} ({}) FROM STDIN (FORMAT binary)",
        columns().join(", ")
    )
}

// ------------------------------------------------------------------------------------------------
// Counting the statements on the wire

/// What the client sent: statements (`Query` and `Execute` messages) and bytes.
#[derive(Default)]
struct WireCounts {
    statements: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Wire {
    statements: u64,
    bytes: u64,
}

impl WireCounts {
    fn snapshot(&self) -> Wire {
        Wire {
            statements: self.statements.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
        }
    }
}

impl Wire {
    fn since(self, earlier: Wire) -> Wire {
        Wire {
            statements: self.statements - earlier.statements,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

/// Splits the client's byte stream into protocol messages: first the untyped ones (an
/// `SSLRequest` or `GSSENCRequest`, then the startup message), then `type, length, body`.
#[derive(Default)]
struct Frames {
    started: bool,
    header: [u8; 8],
    have: usize,
    skip: usize,
}

/// The codes of the untyped requests that precede the startup message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

impl Frames {
    fn feed(&mut self, mut bytes: &[u8], counts: &WireCounts) {
        counts.bytes.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let need = if self.started { 5 } else { 8 };
            let n = (need - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < need {
                break;
            }
            self.have = 0;
            let word = |at: usize| {
                u32::from_be_bytes([
                    self.header[at],
                    self.header[at + 1],
                    self.header[at + 2],
                    self.header[at + 3],
                ]) as usize
            };
            if self.started {
                if matches!(self.header[0], b'Q' | b'E') {
                    counts.statements.fetch_add(1, Ordering::SeqCst);
                }
                self.skip = word(1).saturating_sub(4);
            } else {
                let code = word(4) as u32;
                self.skip = word(0).saturating_sub(8);
                self.started = code != SSL_REQUEST && code != GSSENC_REQUEST;
            }
        }
    }
}

/// A stream that counts what the client writes to it and, for a link of limited bandwidth,
/// paces each direction to its rate.
struct Counted<S> {
    inner: S,
    frames: Frames,
    counts: Arc<WireCounts>,
    sending: Option<Pace>,
    receiving: Option<Pace>,
}

impl<S> Counted<S> {
    fn new(inner: S, counts: Arc<WireCounts>, link_mbit: Option<u32>) -> Self {
        Counted {
            inner,
            frames: Frames::default(),
            counts,
            sending: link_mbit.map(Pace::new),
            receiving: link_mbit.map(Pace::new),
        }
    }
}

/// One direction of a link of limited bandwidth: bytes pass once the link has carried the
/// earlier ones at its rate, as a token bucket without burst would let them.
struct Pace {
    bytes_per_second: f64,
    /// When the bytes passed so far will have crossed the link.
    free_at: Instant,
    waiting: Pin<Box<tokio::time::Sleep>>,
}

/// The most bytes handed over at once on a paced link, so that a large write waits its turn
/// in pieces as the link would carry them.
const PACED_PIECE: usize = 16 * 1024;

impl Pace {
    fn new(mbit: u32) -> Self {
        let now = Instant::now();
        Pace {
            bytes_per_second: f64::from(mbit) * 1_000_000.0 / 8.0,
            free_at: now,
            waiting: Box::pin(tokio::time::sleep_until(now.into())),
        }
    }

    /// Ready once the link has carried what was booked.
    fn poll_free(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.free_at > Instant::now() {
            self.waiting.as_mut().reset(self.free_at.into());
            return self.waiting.as_mut().poll(cx);
        }
        Poll::Ready(())
    }

    /// Books `bytes` onto the link.
    fn book(&mut self, bytes: usize) {
        let start = self.free_at.max(Instant::now());
        self.free_at = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_second);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(pace) = &mut this.receiving {
            if pace.poll_free(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(pace)) = (&read, &mut this.receiving) {
            pace.book(buf.filled().len() - before);
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let buf = match &mut this.sending {
            Some(pace) => {
                if pace.poll_free(cx).is_pending() {
                    return Poll::Pending;
                }
                &buf[..buf.len().min(PACED_PIECE)]
            }
            None => buf,
        };
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.frames.feed(&buf[..n], &this.counts);
            if let Some(pace) = &mut this.sending {
                pace.book(n);
            }
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A client of `uri` whose every sent message is counted in `counts`, through a link of
/// `link_mbit` Mbit/s each way if given.
async fn connect(
    uri: &str,
    counts: Arc<WireCounts>,
    link_mbit: Option<u32>,
) -> Result<Client, Fatal> {
    let config: Config = uri
        .parse()
        .map_err(|e| fatal(format!("POSTGRES_URI: {e}")))?;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) => {
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            let stream = Counted::new(stream, counts, link_mbit);
            let (client, connection) = config.connect_raw(stream, NoTls).await?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    eprintln!("bench_postgres: connection: {error}");
                }
            });
            Ok(client)
        }
        #[cfg(unix)]
        Some(Host::Unix(dir)) => {
            let stream =
                tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?;
            let stream = Counted::new(stream, counts, link_mbit);
            let (client, connection) = config.connect_raw(stream, NoTls).await?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    eprintln!("bench_postgres: connection: {error}");
                }
            });
            Ok(client)
        }
        None => Err(fatal("POSTGRES_URI names no host")),
    }
}

// ------------------------------------------------------------------------------------------------
// Results

/// One measured run of one variant.
#[derive(Clone, Copy, Debug)]
struct Sample {
    wire: Wire,
    /// `n_tup_ins + n_tup_upd`.
    written: i64,
    /// `n_dead_tup`.
    dead: i64,
    wal: u64,
    wall: Duration,
    /// The CPU time of the server's process for the connection, where the server runs on this
    /// machine.
    server_cpu: Option<Duration>,
    /// The CPU time of this process, every thread (the connection's I/O included).
    client_cpu: Option<Duration>,
    /// The heap allocations on the thread that drives the writes (the variant's preparation of
    /// the rows and the encoding of its statements; not the connection's I/O task).
    allocations: usize,
}

/// A row of the table: a variant's samples over the rounds, and its ratios to the baseline.
struct ReportRow {
    scenario: String,
    variant: String,
    statements: u64,
    sent: String,
    written: i64,
    dead: String,
    wal: String,
    wal_bytes: u64,
    wall: Duration,
    per_row: Duration,
    server_cpu: Option<Duration>,
    client_cpu: Option<Duration>,
    /// The median allocations over the rounds, per row.
    allocations_per_row: f64,
    /// Median over rounds of (this / baseline) wall time, and each round's ratio.
    ratio: Option<(f64, Vec<f64>)>,
    is_baseline: bool,
}

#[derive(Default)]
struct Report {
    server: String,
    settings: String,
    checks: Vec<String>,
    rows: Vec<ReportRow>,
    targets: Vec<Target>,
}

impl Report {
    fn target(&mut self, exact: bool, met: bool, what: impl Into<String>, measured: String) {
        self.targets.push(Target::new(exact, met, what, measured));
    }

    /// Adds the rows of a scenario whose variant 0 is the baseline.
    fn add_scenario(
        &mut self,
        scenario: &str,
        variants: &[Variant],
        samples: &[Vec<Sample>],
        rows: usize,
    ) -> Result<(), Fatal> {
        for (index, (variant, runs)) in variants.iter().zip(samples).enumerate() {
            // Statements and rows written are exact: every round must agree.
            let first = &runs[0];
            if let Some(other) = runs.iter().find(|run| {
                run.wire.statements != first.wire.statements || run.written != first.written
            }) {
                return Err(fatal(format!(
                    "{scenario} / {}: the counts differ between rounds ({} statements, {} \
                     written vs {} statements, {} written)",
                    variant.name(),
                    first.wire.statements,
                    first.written,
                    other.wire.statements,
                    other.written
                )));
            }
            let wall = median_duration(runs.iter().map(|run| run.wall));
            let ratio = (index > 0).then(|| {
                let per_round: Vec<f64> = runs
                    .iter()
                    .zip(&samples[0])
                    .map(|(run, base)| run.wall.as_secs_f64() / base.wall.as_secs_f64())
                    .collect();
                (median(&per_round), per_round)
            });
            let wal_bytes = median_u64(runs.iter().map(|run| run.wal));
            let sent = median_u64(runs.iter().map(|run| run.wire.bytes));
            self.rows.push(ReportRow {
                scenario: if index == 0 {
                    scenario.to_owned()
                } else {
                    String::new()
                },
                variant: variant.name(),
                statements: first.wire.statements,
                sent: fmt_bytes(sent),
                written: first.written,
                dead: spread_counts(runs.iter().map(|run| run.dead as u64), |n| n.to_string()),
                wal: spread_counts(runs.iter().map(|run| run.wal), fmt_bytes),
                wal_bytes,
                wall,
                per_row: wall / u32::try_from(rows.max(1)).unwrap_or(u32::MAX),
                server_cpu: median_cpu(runs.iter().map(|run| run.server_cpu)),
                client_cpu: median_cpu(runs.iter().map(|run| run.client_cpu)),
                allocations_per_row: median_u64(runs.iter().map(|run| run.allocations as u64))
                    as f64
                    / rows.max(1) as f64,
                ratio,
                is_baseline: index == 0,
            });
        }
        Ok(())
    }

    fn print(&self) {
        println!("server: {} ({})", self.server, self.settings);
        if !self.checks.is_empty() {
            println!();
            for line in &self.checks {
                println!("{line}");
            }
        }
        println!();
        let header = [
            "scenario",
            "variant",
            "statements",
            "sent",
            "rows written",
            "dead tuples",
            "WAL",
            "wall (median)",
            "server CPU",
            "client CPU",
            "allocations/row",
            "ratio",
            "ratio per round",
        ];
        let mut lines: Vec<Vec<String>> = vec![header.map(str::to_owned).to_vec()];
        for row in &self.rows {
            let (ratio, rounds) = match &row.ratio {
                Some((ratio, rounds)) => (format!("{ratio:.2}x"), spread(rounds)),
                None => ("1.00x".to_owned(), "baseline".to_owned()),
            };
            lines.push(vec![
                row.scenario.clone(),
                row.variant.clone(),
                row.statements.to_string(),
                row.sent.clone(),
                row.written.to_string(),
                row.dead.clone(),
                row.wal.clone(),
                format!(
                    "{} ({}/row)",
                    fmt_duration(row.wall),
                    fmt_duration(row.per_row)
                ),
                fmt_cpu(row.server_cpu, "n/a"),
                fmt_cpu(row.client_cpu, "n/a"),
                format!("{:.1}", row.allocations_per_row),
                ratio,
                rounds,
            ]);
        }
        print_table(&lines);
        println!();
        print_targets(&self.targets);
    }

    /// The server, every row and target, tab-separated, for `scripts/bench`.
    fn tsv(&self) -> String {
        let mut out = format!("server\t{}\t{}\n", self.server, self.settings);
        let mut scenario = String::new();
        for row in &self.rows {
            if !row.scenario.is_empty() {
                scenario.clone_from(&row.scenario);
            }
            let ratio = row
                .ratio
                .as_ref()
                .map_or_else(String::new, |(ratio, _)| format!("{ratio:.3}"));
            out.push_str(&format!(
                "row\t{scenario}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{} ({}/row)\t{}\t{ratio}\t{}\t{}\t{:.1}\n",
                row.variant,
                row.statements,
                row.sent,
                row.written,
                row.dead,
                row.wal,
                row.wal_bytes,
                fmt_duration(row.wall),
                fmt_duration(row.per_row),
                u8::from(row.is_baseline),
                fmt_cpu(row.server_cpu, ""),
                fmt_cpu(row.client_cpu, ""),
                row.allocations_per_row,
            ));
        }
        out.push_str(&targets_tsv(&self.targets));
        out
    }
}

/// The CPU time a thread or process has run, from its `schedstat` (nanoseconds, exact), where
/// Linux has it.
fn schedstat_cpu(path: impl AsRef<std::path::Path>) -> Option<Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The CPU time this process has used: every thread's, summed.
fn client_cpu() -> Option<Duration> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        total += schedstat_cpu(task.ok()?.path().join("schedstat"))?;
    }
    Some(total)
}

/// The median CPU time over the rounds, if every round has one.
fn median_cpu(values: impl Iterator<Item = Option<Duration>>) -> Option<Duration> {
    let values: Option<Vec<Duration>> = values.collect();
    values.map(|values| median_duration(values.into_iter()))
}

fn fmt_cpu(cpu: Option<Duration>, absent: &str) -> String {
    cpu.map_or_else(|| absent.to_owned(), fmt_duration)
}

/// The median of counts over the rounds, with how far apart the rounds were if they differ.
fn spread_counts(values: impl Iterator<Item = u64>, show: impl Fn(u64) -> String) -> String {
    let values: Vec<u64> = values.collect();
    let low = values.iter().copied().min().unwrap_or(0);
    let high = values.iter().copied().max().unwrap_or(0);
    let middle = median_u64(values.iter().copied());
    if low == high {
        show(middle)
    } else {
        format!("{} (rounds within {})", show(middle), show(high - low))
    }
}

/// `1 statement`, `10 statements`.
fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("{count} {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// The median of counts (the lower middle of an even number).
fn median_u64(values: impl Iterator<Item = u64>) -> u64 {
    let mut sorted: Vec<u64> = values.collect();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

fn fmt_bytes(bytes: u64) -> String {
    let value = bytes as f64;
    for (unit, scale) in [("MiB", 1024.0 * 1024.0), ("KiB", 1024.0)] {
        if value >= scale {
            return format!("{:.2} {unit}", value / scale);
        }
    }
    format!("{bytes} B")
}

// ------------------------------------------------------------------------------------------------
// The benchmark

struct Args {
    rounds: usize,
    rows: usize,
    chunk: usize,
    tsv: Option<String>,
    /// The steps to run (`check`, `1`, `2`, `3`); all when empty.
    only: Vec<String>,
    /// Whether the server runs with `fsync`, `full_page_writes` and `synchronous_commit` on
    /// for the run (set with `ALTER SYSTEM` and reset afterwards).
    durable: bool,
    /// The bandwidth of the measured client's link to the server, each way, in Mbit/s; the
    /// loopback's when `None`.
    link_mbit: Option<u32>,
    /// Runs idem's writes alone: no hand-written variant, no ratio, no target.
    only_idem: bool,
    /// The partition counts of the partitioned tables idem also writes, beside the plain one.
    partitions: Vec<u32>,
}

impl Args {
    fn runs(&self, step: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == step)
    }
}

const USAGE: &str = "\
usage: bench_postgres [--rounds N] [--rows N] [--chunk N] [--only LIST] [--durable]
                      [--link-mbit N] [--only-idem] [--partitions LIST] [--tsv FILE]

Benchmarks idem's upsert_many against hand-written writes on the PostgreSQL server named by
POSTGRES_URI (15 or later).
  --rounds N   interleaved rounds per scenario (default 5)
  --rows N     rows of each scenario (default 10000; a multiple of 10)
  --chunk N    rows per statement of idem and of the multi-row statements (default 1000)
  --only LIST  only these steps, comma-separated: check,1,2,3 (default: all)
  --durable    turn fsync, full_page_writes and synchronous_commit on for the run (ALTER SYSTEM,
               reset at the end; needs a superuser), as a production server runs: the test
               servers turn them off, which hides the cost of the writes idem avoids
  --link-mbit N  pace the measured client's connection to N Mbit/s each way, as a link of that
               bandwidth would (the loopback's latency stays): where the bytes on the wire
               decide
  --only-idem  run idem's writes alone, on the plain table and the partitioned ones (no
               hand-written variant, no ratio, no target): what to run under a profiler
  --partitions LIST  idem also writes the table partitioned by hash of its natural key
               (Store::with_partitions), once for each partition count, comma-separated
               (default: 4,16; none: not)
  --tsv FILE   also write the rows and targets, tab-separated, to FILE";

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, Fatal> {
    let mut parsed = Args {
        rounds: 5,
        rows: 10_000,
        chunk: idem_core::postgres::DEFAULT_BATCH_CHUNK,
        tsv: None,
        only: Vec::new(),
        durable: false,
        link_mbit: None,
        only_idem: false,
        partitions: vec![4, 16],
    };
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--rounds" => parsed.rounds = flags.number("--rounds")?,
            "--rows" => parsed.rows = flags.number("--rows")?,
            "--chunk" => parsed.chunk = flags.number("--chunk")?,
            "--tsv" => parsed.tsv = Some(flags.value("--tsv")?),
            "--only" => parsed.only = flags.list("--only", &["check", "1", "2", "3"])?,
            "--durable" => parsed.durable = true,
            "--only-idem" => parsed.only_idem = true,
            "--partitions" => {
                let list = flags.value("--partitions")?;
                parsed.partitions = match list.as_str() {
                    "none" => Vec::new(),
                    _ => (list.split(','))
                        .map(|n| n.trim().parse::<u32>().ok().filter(|&n| n > 0))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            flags.error(&format!(
                                "--partitions takes positive counts or none, not {list:?}"
                            ))
                        })?,
                };
            }
            "--link-mbit" => {
                let mbit = flags.number("--link-mbit")?;
                let mbit = u32::try_from(mbit).map_err(|_| {
                    fatal(format!("--link-mbit {mbit} is more than a link carries"))
                })?;
                parsed.link_mbit = Some(mbit);
            }
            other => return Err(flags.unexpected(other)),
        }
    }
    if !parsed.rows.is_multiple_of(10) {
        return Err(fatal("--rows must be a multiple of 10"));
    }
    // Ten columns a row: a multi-row statement must stay under 65,535 bind parameters.
    if parsed.chunk.min(parsed.rows) * COLUMNS.len() > usize::from(u16::MAX) {
        return Err(fatal(format!(
            "--chunk: a multi-row statement of {} rows would need more than 65535 parameters",
            parsed.chunk
        )));
    }
    Ok(Some(parsed))
}

/// The settings a durable server runs with, which the test servers turn off.
const DURABILITY: [&str; 3] = ["fsync", "full_page_writes", "synchronous_commit"];

/// Turns [`DURABILITY`] on (`ALTER SYSTEM`, one statement each: it cannot run in a transaction
/// block) or back to the configuration file's, reloads the configuration and waits until the
/// session sees the change.
async fn durable(client: &Client, on: bool) -> Result<(), Fatal> {
    for setting in DURABILITY {
        let sql = match on {
            true => format!("ALTER SYSTEM SET {setting} = on"),
            false => format!("ALTER SYSTEM RESET {setting}"),
        };
        client.batch_execute(&sql).await?;
    }
    client.batch_execute("SELECT pg_reload_conf()").await?;
    for _ in 0..100 {
        let fsync: String = client
            .query_one("SELECT setting FROM pg_settings WHERE name = 'fsync'", &[])
            .await?
            .get(0);
        if !on || fsync == "on" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(fatal(
        "the server did not take fsync = on after pg_reload_conf()",
    ))
}

// Counts the heap allocations of the measured windows, on the thread that drives the writes.
#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[tokio::main]
async fn main() -> ExitCode {
    exit_code("bench_postgres", run()).await
}

async fn run() -> Result<ExitCode, Fatal> {
    let Some(args) = parse_args(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let uri = std::env::var("POSTGRES_URI").map_err(|_| {
        fatal("POSTGRES_URI is not set: `eval \"$(scripts/pg-server start 18)\"` starts a server")
    })?;
    let wire = Arc::new(WireCounts::default());
    let client = connect(&uri, wire.clone(), args.link_mbit).await?;
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .get(0);
    if version < 150_000 {
        return Err(fatal(format!(
            "PostgreSQL {version} is too old: the dead-tuple and row counts need \
             pg_stat_force_next_flush() (PostgreSQL 15 and later)"
        )));
    }
    if args.durable {
        durable(&client, true).await?;
    }
    let schema = format!("idem_bench_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             SET search_path TO {schema}, public"
        ))
        .await?;
    let bench = Bench::new(client, wire, &args, schema.clone()).await;
    let outcome = match bench {
        Ok(bench) => bench.run_all(&args).await,
        Err(error) => Err(error),
    };
    // The schema goes whatever happened, and the server's settings come back; a failure of
    // either is only reported.
    if let Ok(cleanup) = connect(&uri, Arc::default(), None).await {
        let partitioned = args
            .partitions
            .iter()
            .map(|&n| partitioned_schema(&schema, n));
        for schema in partitioned.chain([schema.clone()]) {
            if let Err(error) = cleanup
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .await
            {
                eprintln!("bench_postgres: dropping schema {schema}: {error}");
            }
        }
        if args.durable {
            if let Err(Fatal(error)) = durable(&cleanup, false).await {
                eprintln!("bench_postgres: resetting the durability settings: {error}");
            }
        }
    }
    let report = outcome?;
    println!();
    report.print();
    if let Some(path) = &args.tsv {
        std::fs::write(path, report.tsv()).map_err(|e| fatal(format!("writing {path}: {e}")))?;
    }
    let missed = report
        .targets
        .iter()
        .filter(|t| t.kind == "exact" && !t.met)
        .count();
    if missed > 0 {
        eprintln!("bench_postgres: {missed} exact target(s) missed");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The schema of the table partitioned into `partitions` (`bench_posts` again: the store names
/// the table by the type).
fn partitioned_schema(schema: &str, partitions: u32) -> String {
    format!("{schema}_p{partitions}")
}

/// Turns autovacuum off for the table's heaps (it would reset n_dead_tup behind the benchmark's
/// back); a partitioned table takes no storage parameters of its own.
async fn autovacuum_off(client: &Client) -> Result<(), Fatal> {
    let sql = format!("SELECT oid::regclass::text FROM ({HEAPS}) heaps");
    for heap in client.query(&sql, &[&TABLE]).await? {
        let heap: String = heap.get(0);
        client
            .batch_execute(&format!(
                "ALTER TABLE {heap} SET (autovacuum_enabled = false, \
                 toast.autovacuum_enabled = false)"
            ))
            .await?;
    }
    Ok(())
}

/// One way of writing the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// One `INSERT … ON CONFLICT DO UPDATE` per row.
    RowByRow,
    /// One multi-row `INSERT … VALUES … ON CONFLICT DO UPDATE` per chunk.
    MultiRow,
    /// The same, named as the naive re-ingest it is in scenarios 2 and 3.
    Naive,
    /// Binary `COPY … FROM STDIN`.
    Copy,
    /// `store.upsert_many`.
    Idem,
    /// `store.upsert_many` on the same table partitioned by hash of its natural key into this
    /// many partitions (`Store::with_partitions`).
    Partitioned(u32),
}

impl Variant {
    fn name(self) -> String {
        match self {
            Variant::RowByRow => "row by row: INSERT … ON CONFLICT DO UPDATE per row".into(),
            Variant::MultiRow => {
                "multi-row INSERT … VALUES … ON CONFLICT DO UPDATE per chunk".into()
            }
            Variant::Naive => {
                "naive: multi-row INSERT … ON CONFLICT DO UPDATE SET … per chunk".into()
            }
            Variant::Copy => "COPY … FROM STDIN (FORMAT binary)".into(),
            Variant::Idem => "idem store.upsert_many".into(),
            Variant::Partitioned(n) => {
                format!("idem store.upsert_many, table partitioned by hash of the key into {n}")
            }
        }
    }

    /// Whether idem writes the rows (on the plain table or a partitioned one).
    fn is_idem(self) -> bool {
        matches!(self, Variant::Idem | Variant::Partitioned(_))
    }
}

/// The counters of the table, from `pg_stat_user_tables`.
#[derive(Clone, Copy, Debug, Default)]
struct TableStats {
    inserted: i64,
    updated: i64,
    dead: i64,
}

/// What a run reports of itself: the rows the client was told it wrote and, for the
/// hand-written variants, the statements it sent by its own count.
struct Done {
    written: u64,
    calls: Option<u64>,
}

/// The rows of one scenario: the posts idem is given and the same rows as the hand-written
/// variants bind.
struct Dataset {
    posts: Vec<Post>,
    rows: Vec<Row>,
}

/// The datasets of every scenario, over `count` posts.
struct Datasets {
    originals: Dataset,
    unchanged: Dataset,
    changed: Dataset,
}

struct Bench {
    client: Client,
    wire: Arc<WireCounts>,
    store: Store,
    rounds: usize,
    chunk: usize,
    schema: String,
    /// The single-row upsert, prepared before any timing.
    single: Statement,
    /// The multi-row upserts by row count, prepared before any timing.
    multi: HashMap<usize, Statement>,
    copy: Statement,
    /// The server's process for the connection.
    server_pid: i32,
    only_idem: bool,
    /// The stores of the partitioned tables, by partition count, each in its own schema.
    partitioned: Vec<(u32, Store)>,
}

impl Bench {
    async fn new(
        client: Client,
        wire: Arc<WireCounts>,
        args: &Args,
        schema: String,
    ) -> Result<Bench, Fatal> {
        let store = Store::new().with_batch_chunk(args.chunk);
        store.ensure_table::<Post, _>(&client).await?;
        autovacuum_off(&client).await?;
        // The partitioned tables, each made by a store of its own in a schema of its own, the
        // only one on the search path with the table (the plain table's schema behind it would
        // make the store find that table there, and check and write it instead).
        let mut partitioned = Vec::new();
        for &n in &args.partitions {
            let own = partitioned_schema(&schema, n);
            client
                .batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS {own} CASCADE; CREATE SCHEMA {own}; \
                     SET search_path TO {own}, public"
                ))
                .await?;
            let store = (Store::new().with_batch_chunk(args.chunk))
                .with_partitions(PartitionBy::Hash { partitions: n });
            store.ensure_table::<Post, _>(&client).await?;
            let made: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_partition_tree(to_regclass($1)) \
                     WHERE isleaf AND level = 1",
                    &[&TABLE],
                )
                .await?
                .get(0);
            if made != i64::from(n) {
                return Err(fatal(format!(
                    "{own}.{TABLE}: {made} partitions, not the {n} asked for"
                )));
            }
            autovacuum_off(&client).await?;
            partitioned.push((n, store));
        }
        client
            .batch_execute(&format!("SET search_path TO {schema}, public"))
            .await?;
        let single = client.prepare(&upsert_sql(1)).await?;
        let mut multi = HashMap::new();
        for rows in [args.rows, CHECK_ROWS] {
            for size in [args.chunk.min(rows), rows % args.chunk] {
                if size > 0 && !multi.contains_key(&size) {
                    multi.insert(size, client.prepare(&upsert_sql(size)).await?);
                }
            }
        }
        let copy = client.prepare(&copy_sql()).await?;
        let server_pid = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        Ok(Bench {
            client,
            wire,
            store,
            rounds: args.rounds,
            chunk: args.chunk,
            schema,
            single,
            multi,
            copy,
            server_pid,
            only_idem: args.only_idem,
            partitioned,
        })
    }

    async fn run_all(&self, args: &Args) -> Result<Report, Fatal> {
        let server: String = self
            .client
            .query_one(
                "SELECT 'PostgreSQL ' || current_setting('server_version')",
                &[],
            )
            .await?
            .get(0);
        let settings: Vec<String> = self
            .client
            .query(
                "SELECT name || ' ' || setting FROM pg_settings WHERE name IN \
                 ('fsync', 'synchronous_commit', 'full_page_writes') ORDER BY name",
                &[],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut settings = settings.join(", ");
        if let Some(mbit) = args.link_mbit {
            settings.push_str(&format!(", link {mbit} Mbit/s"));
        }
        let mut report = Report {
            server,
            settings,
            ..Report::default()
        };
        eprintln!(
            "bench_postgres: {} ({}); {} rounds of {} rows, chunks of {}",
            report.server, report.settings, self.rounds, args.rows, self.chunk
        );
        let started = Instant::now();
        if args.runs("check") {
            self.check(&mut report).await?;
        }
        if args.runs("1") || args.runs("2") || args.runs("3") {
            let data = self.datasets(args.rows).await?;
            let n = args.rows;
            let changed = n / 10;
            if args.runs("1") {
                self.scenario(
                    &mut report,
                    "1",
                    &format!("(P1) {n} new rows"),
                    &[
                        Variant::RowByRow,
                        Variant::MultiRow,
                        Variant::Copy,
                        Variant::Idem,
                    ],
                    None,
                    &data.originals,
                    &[(Outcome::Inserted, n)],
                )
                .await?;
            }
            if args.runs("2") {
                self.scenario(
                    &mut report,
                    "2",
                    &format!("(P2) re-ingest {n} unchanged"),
                    &[Variant::Naive, Variant::Idem],
                    Some(&data.originals.rows),
                    &data.unchanged,
                    &[(Outcome::Unchanged, n)],
                )
                .await?;
            }
            if args.runs("3") {
                self.scenario(
                    &mut report,
                    "3",
                    &format!("(P3) re-ingest {n}, {changed} changed"),
                    &[Variant::Naive, Variant::Idem],
                    Some(&data.originals.rows),
                    &data.changed,
                    &[
                        (Outcome::Updated, changed),
                        (Outcome::Unchanged, n - changed),
                    ],
                )
                .await?;
            }
        }
        eprintln!(
            "bench_postgres: done in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Ok(report)
    }

    // --------------------------------------------------------------------------------------------
    // Setup and measurement (never timed)

    /// Puts the table `variant` writes first on the search path: a partitioned one's schema, or
    /// the plain table's. Every later statement of the benchmark names that table.
    async fn use_table_of(&self, variant: Variant) -> Result<(), Fatal> {
        let sql = match variant {
            Variant::Partitioned(n) => format!(
                "SET search_path TO {}, public",
                partitioned_schema(&self.schema, n)
            ),
            _ => format!("SET search_path TO {}, public", self.schema),
        };
        self.client.batch_execute(&sql).await?;
        Ok(())
    }

    /// The store that writes `variant`'s table.
    fn store_of(&self, variant: Variant) -> Result<&Store, Fatal> {
        match variant {
            Variant::Partitioned(n) => (self.partitioned.iter())
                .find(|(partitions, _)| *partitions == n)
                .map(|(_, store)| store)
                .ok_or_else(|| fatal(format!("no table partitioned into {n}"))),
            _ => Ok(&self.store),
        }
    }

    /// The variants of idem on the partitioned tables.
    fn partitioned_variants(&self) -> impl Iterator<Item = Variant> + '_ {
        (self.partitioned.iter()).map(|&(n, _)| Variant::Partitioned(n))
    }

    /// The rows idem stores for `posts`: written by idem into the empty table, read back.
    async fn rows_of(&self, posts: &[Post]) -> Result<Vec<Row>, Fatal> {
        self.use_table_of(Variant::Idem).await?;
        self.reset(None).await?;
        let report = self.store.upsert_many(&self.client, posts).await?;
        expect_outcomes(
            &report,
            &[(Outcome::Inserted, posts.len())],
            "reading idem's rows",
        )?;
        let sql = format!(
            "SELECT {}, \"idemFrozen\" FROM {TABLE}",
            columns()[..9].join(", ")
        );
        let mut stored: HashMap<(String, String), Row> = HashMap::new();
        for row in self.client.query(&sql, &[]).await? {
            let values = Row {
                id: row.get(0),
                slug: row.get(1),
                lang: row.get(2),
                published_at: row.get(3),
                title: row.get(4),
                body: row.get(5),
                fetched_at: row.get(6),
                author_id: row.get(7),
                hash: row.get(8),
                frozen: row.get(9),
            };
            stored.insert((values.slug.clone(), values.lang.clone()), values);
        }
        posts
            .iter()
            .map(|post| {
                stored
                    .remove(&(post.slug.clone(), post.lang.clone()))
                    .ok_or_else(|| fatal(format!("idem stored no row for {}", post.slug)))
            })
            .collect()
    }

    async fn datasets(&self, count: usize) -> Result<Datasets, Fatal> {
        let originals = posts(count);
        let unchanged = refetched(&originals, false);
        let changed = refetched(&originals, true);
        Ok(Datasets {
            originals: Dataset {
                rows: self.rows_of(&originals).await?,
                posts: originals,
            },
            unchanged: Dataset {
                rows: self.rows_of(&unchanged).await?,
                posts: unchanged,
            },
            changed: Dataset {
                rows: self.rows_of(&changed).await?,
                posts: changed,
            },
        })
    }

    /// Empties the table, stores `seed` (with `COPY`) and vacuums it.
    async fn reset(&self, seed: Option<&[Row]>) -> Result<(), Fatal> {
        self.client
            .batch_execute(&format!("TRUNCATE {TABLE}"))
            .await?;
        if let Some(rows) = seed {
            self.copy_rows(rows).await?;
        }
        self.client
            .batch_execute(&format!("VACUUM {TABLE}"))
            .await?;
        Ok(())
    }

    /// Flushes this connection's pending statistics, then reads the table's counters.
    async fn table_stats(&self) -> Result<TableStats, Fatal> {
        // The flush happens when the statement ends, before the server answers it.
        self.client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .await?;
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT coalesce(sum(n_tup_ins), 0)::int8, \
                     coalesce(sum(n_tup_upd), 0)::int8, coalesce(sum(n_dead_tup), 0)::int8 \
                     FROM pg_stat_user_tables WHERE relid IN ({HEAPS})"
                ),
                &[&TABLE],
            )
            .await?;
        Ok(TableStats {
            inserted: row.get(0),
            updated: row.get(1),
            dead: row.get(2),
        })
    }

    /// The WAL insert position, in bytes.
    async fn wal_position(&self) -> Result<u64, Fatal> {
        let text: String = self
            .client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await?
            .get(0);
        parse_lsn(&text).ok_or_else(|| fatal(format!("an LSN the benchmark cannot read: {text}")))
    }

    /// Runs `run` once, timed, with its statements, rows written, dead tuples and WAL bytes.
    /// The CPU time the server's process for the connection has used, where the server runs on
    /// this machine.
    fn server_cpu(&self) -> Option<Duration> {
        schedstat_cpu(format!("/proc/{}/schedstat", self.server_pid))
    }

    async fn measure<F>(&self, what: &str, run: F) -> Result<(Sample, u64, u64), Fatal>
    where
        F: Future<Output = Result<Done, Fatal>>,
    {
        let before = self.table_stats().await?;
        let wal_start = self.wal_position().await?;
        let wire_start = self.wire.snapshot();
        let (server_start, client_start) = (self.server_cpu(), client_cpu());
        let counting = Counting::start();
        let started = Instant::now();
        let done = run.await;
        let wall = started.elapsed();
        let allocations = counting.stop();
        let done = done?;
        let used = |start: Option<Duration>, end: Option<Duration>| {
            start.zip(end).map(|(start, end)| end.saturating_sub(start))
        };
        let server_cpu = used(server_start, self.server_cpu());
        let client_cpu = used(client_start, client_cpu());
        let wire = self.wire.snapshot().since(wire_start);
        let wal_end = self.wal_position().await?;
        let after = self.table_stats().await?;
        let written = (after.inserted - before.inserted) + (after.updated - before.updated);
        if u64::try_from(written).ok() != Some(done.written) {
            return Err(fatal(format!(
                "{what}: the server counted {written} rows written, the client was told {}",
                done.written
            )));
        }
        if let Some(calls) = done.calls {
            if calls != wire.statements {
                return Err(fatal(format!(
                    "{what}: {calls} statements made, {} counted on the wire",
                    wire.statements
                )));
            }
        }
        let sample = Sample {
            wire,
            written,
            dead: after.dead - before.dead,
            wal: wal_end.saturating_sub(wal_start),
            wall,
            server_cpu,
            client_cpu,
            allocations,
        };
        Ok((sample, wal_start, wal_end))
    }

    // --------------------------------------------------------------------------------------------
    // The variants (timed)

    async fn write(
        &self,
        variant: Variant,
        data: &Dataset,
        expected: &[(Outcome, usize)],
    ) -> Result<Done, Fatal> {
        match variant {
            Variant::RowByRow => {
                let mut written = 0;
                let mut calls = 0;
                for row in &data.rows {
                    written += self.client.execute(&self.single, &row.params()).await?;
                    calls += 1;
                }
                Ok(Done {
                    written,
                    calls: Some(calls),
                })
            }
            Variant::MultiRow | Variant::Naive => {
                let mut written = 0;
                let mut calls = 0;
                for chunk in data.rows.chunks(self.chunk) {
                    let statement = self.multi.get(&chunk.len()).ok_or_else(|| {
                        fatal(format!("no statement prepared for {} rows", chunk.len()))
                    })?;
                    let params: Vec<&(dyn ToSql + Sync)> =
                        chunk.iter().flat_map(Row::params).collect();
                    written += self.client.execute(statement, &params).await?;
                    calls += 1;
                }
                Ok(Done {
                    written,
                    calls: Some(calls),
                })
            }
            Variant::Copy => Ok(Done {
                written: self.copy_rows(&data.rows).await?,
                calls: Some(1),
            }),
            Variant::Idem | Variant::Partitioned(_) => {
                let store = self.store_of(variant)?;
                let report = store.upsert_many(&self.client, &data.posts).await?;
                expect_outcomes(&report, expected, "upsert_many")?;
                let written = report.count(Outcome::Inserted) + report.count(Outcome::Updated);
                Ok(Done {
                    written: written as u64,
                    calls: None,
                })
            }
        }
    }

    /// Binary `COPY` of `rows`: one statement. Returns the rows copied.
    async fn copy_rows(&self, rows: &[Row]) -> Result<u64, Fatal> {
        let sink = self.client.copy_in(&self.copy).await?;
        let mut writer = pin!(BinaryCopyInWriter::new(sink, &TYPES));
        for row in rows {
            writer.as_mut().write(&row.params()).await?;
        }
        Ok(writer.finish().await?)
    }

    // --------------------------------------------------------------------------------------------
    // Scenarios

    #[allow(clippy::too_many_arguments)]
    async fn scenario(
        &self,
        report: &mut Report,
        label: &str,
        title: &str,
        variants: &[Variant],
        seed: Option<&[Row]>,
        data: &Dataset,
        expected: &[(Outcome, usize)],
    ) -> Result<(), Fatal> {
        // idem on each partitioned table, beside the plain one.
        let variants: Vec<Variant> = match self.only_idem {
            true => std::iter::once(Variant::Idem)
                .chain(self.partitioned_variants())
                .collect(),
            false => (variants.iter().copied())
                .chain(self.partitioned_variants())
                .collect(),
        };
        let variants = variants.as_slice();
        // Planner statistics for the stored rows, once: ANALYZE in every round would churn the
        // catalog (and its autovacuum would write WAL in the measured windows). Once for the
        // plain table, once for each partitioned one.
        let tables = variants
            .iter()
            .filter(|v| matches!(v, Variant::Partitioned(_)));
        for &variant in [Variant::Idem].iter().chain(tables) {
            self.use_table_of(variant).await?;
            self.reset(seed).await?;
            self.client
                .batch_execute(&format!("ANALYZE {TABLE}"))
                .await?;
        }
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..self.rounds {
            eprintln!(
                "bench_postgres: {title}: round {}/{}",
                round + 1,
                self.rounds
            );
            for index in order(variants.len(), round) {
                let variant = variants[index];
                self.use_table_of(variant).await?;
                self.reset(seed).await?;
                let what = format!("{title} / {}", variant.name());
                let (sample, _, _) = self
                    .measure(&what, self.write(variant, data, expected))
                    .await?;
                samples[index].push(sample);
            }
        }
        let rows = data.rows.len();
        report.add_scenario(title, variants, &samples, rows)?;
        if !self.only_idem {
            self.targets(report, label, variants, &samples, rows);
        }
        Ok(())
    }

    fn targets(
        &self,
        report: &mut Report,
        label: &str,
        variants: &[Variant],
        samples: &[Vec<Sample>],
        rows: usize,
    ) {
        let index_of = |wanted: Variant| variants.iter().position(|&v| v == wanted);
        let Some(idem_index) = index_of(Variant::Idem) else {
            return;
        };
        let idem = &samples[idem_index];
        let first = idem[0];
        let chunks = rows.div_ceil(self.chunk) as u64;
        let dead = median_u64(idem.iter().map(|s| s.dead as u64));
        let wal = median_u64(idem.iter().map(|s| s.wal));
        // The median over rounds of idem's wall time over another variant's, round by round.
        let ratio_to = |other: usize| {
            let per_round: Vec<f64> = idem
                .iter()
                .zip(&samples[other])
                .map(|(a, b)| a.wall.as_secs_f64() / b.wall.as_secs_f64())
                .collect();
            median(&per_round)
        };
        let tag = format!("(P{label})");
        // The partitioned tables: idem's counts there exactly as on the plain table, and its time
        // against the plain table's, round by round.
        for (index, &variant) in variants.iter().enumerate() {
            let Variant::Partitioned(n) = variant else {
                continue;
            };
            let theirs = &samples[index];
            let (their_dead, their_wal) = (
                median_u64(theirs.iter().map(|s| s.dead as u64)),
                median_u64(theirs.iter().map(|s| s.wal)),
            );
            report.target(
                true,
                theirs[0].wire.statements == first.wire.statements
                    && theirs[0].written == first.written,
                format!(
                    "{tag} table partitioned into {n}: idem's statements and rows written as on \
                     the plain table"
                ),
                format!(
                    "{}, {} rows written, {their_dead} dead tuples, {} WAL; plain: {}, {} rows \
                     written, {dead} dead tuples, {} WAL",
                    plural(theirs[0].wire.statements, "statement"),
                    theirs[0].written,
                    fmt_bytes(their_wal),
                    plural(first.wire.statements, "statement"),
                    first.written,
                    fmt_bytes(wal),
                ),
            );
            let per_round: Vec<f64> = (theirs.iter().zip(idem))
                .map(|(a, b)| a.wall.as_secs_f64() / b.wall.as_secs_f64())
                .collect();
            let ratio = median(&per_round);
            report.target(
                false,
                ratio <= 1.2,
                format!(
                    "{tag} table partitioned into {n}: idem within 1.2x of the plain table's time"
                ),
                format!(
                    "partitioned/plain {ratio:.2}x (rounds {})",
                    spread(&per_round)
                ),
            );
        }
        // idem looks a chunk up first from 64 rows on; below, the rows cost less than the trip.
        let looked_up = match (self.chunk >= 64, label) {
            (false, _) => 0,
            // The first chunk's lookup finds nothing stored; the later chunks go without.
            (true, "1") => 1,
            (true, _) => chunks,
        };
        let (expected, counted) = match label {
            "1" => (chunks + looked_up, "one write per chunk, and one lookup"),
            // Either the lookups alone, or (chunks under 64 rows) the writes that change nothing.
            "2" => (
                chunks,
                "one statement per chunk (its lookup; nothing to write)",
            ),
            _ => (
                chunks + looked_up,
                "one lookup and one write per chunk (each holds changed rows)",
            ),
        };
        report.target(
            true,
            first.wire.statements == expected,
            format!("{tag} idem: {counted}, chunks of {} rows", self.chunk),
            format!(
                "{} for {rows} rows ({})",
                plural(first.wire.statements, "statement"),
                plural(chunks, "chunk")
            ),
        );
        match label {
            "1" => {
                report.target(
                    true,
                    first.written == rows as i64 && dead == 0,
                    format!("{tag} idem writes every new row once"),
                    format!("{} rows written, {dead} dead tuples", first.written),
                );
                if let Some(by_row) = index_of(Variant::RowByRow) {
                    let by_row_wal = median_u64(samples[by_row].iter().map(|s| s.wal));
                    let share = wal as f64 / by_row_wal.max(1) as f64;
                    report.target(
                        true,
                        share <= 1.15,
                        format!("{tag} idem writes at most 1.15x the WAL of row-by-row inserts"),
                        format!(
                            "{} = {share:.2}x row by row's {}",
                            fmt_bytes(wal),
                            fmt_bytes(by_row_wal)
                        ),
                    );
                }
                if let Some(by_row) = index_of(Variant::RowByRow) {
                    let ratio = ratio_to(by_row);
                    report.target(
                        false,
                        ratio <= 1.0 / 3.0,
                        format!("{tag} idem at least 3x faster than row by row, {rows} rows"),
                        format!("{:.1}x faster (idem/row-by-row {ratio:.3}x)", 1.0 / ratio),
                    );
                }
                if let Some(copy) = index_of(Variant::Copy) {
                    let ratio = ratio_to(copy);
                    report.target(
                        false,
                        ratio <= 1.5,
                        format!("{tag} idem within 1.5x of binary COPY, {rows} rows"),
                        format!("idem/COPY {ratio:.2}x"),
                    );
                }
            }
            "2" => {
                let naive = index_of(Variant::Naive).map(|i| samples[i][0]);
                let naive_wal = index_of(Variant::Naive)
                    .map(|i| median_u64(samples[i].iter().map(|s| s.wal)))
                    .unwrap_or(0);
                let against = naive.map_or_else(String::new, |n| {
                    format!(
                        " (naive upsert: {} rows, {} dead tuples)",
                        n.written, n.dead
                    )
                });
                report.target(
                    true,
                    first.written == 0,
                    format!("{tag} unchanged re-ingest: idem writes 0 rows"),
                    format!("{} rows written{against}", first.written),
                );
                report.target(
                    true,
                    dead == 0,
                    format!("{tag} unchanged re-ingest: idem leaves 0 dead tuples"),
                    format!("{dead} dead tuples"),
                );
                let share = wal as f64 / naive_wal.max(1) as f64;
                report.target(
                    true,
                    share <= 0.01,
                    format!(
                        "{tag} unchanged re-ingest: near-zero WAL (at most 1% of the naive \
                         upsert's)"
                    ),
                    format!(
                        "{} ({wal} B, {:.1} B/row) = {:.2}% of the naive upsert's {}",
                        fmt_bytes(wal),
                        wal as f64 / rows.max(1) as f64,
                        share * 100.0,
                        fmt_bytes(naive_wal)
                    ),
                );
                if let Some(naive) = naive {
                    let share = first.wire.bytes as f64 / naive.wire.bytes.max(1) as f64;
                    report.target(
                        true,
                        share <= 0.10,
                        format!(
                            "{tag} unchanged re-ingest: idem sends at most 10% of the naive \
                             upsert's bytes"
                        ),
                        format!(
                            "{} = {:.1}% of {}",
                            fmt_bytes(first.wire.bytes),
                            share * 100.0,
                            fmt_bytes(naive.wire.bytes)
                        ),
                    );
                }
                if let Some(naive) = index_of(Variant::Naive) {
                    let ratio = ratio_to(naive);
                    report.target(
                        false,
                        ratio < 1.0,
                        format!("{tag} idem faster than the naive upsert"),
                        format!("idem/naive {ratio:.2}x"),
                    );
                    report.target(
                        false,
                        ratio <= 0.25,
                        format!("{tag} idem at most 0.25x the naive upsert's time"),
                        format!("idem/naive {ratio:.2}x"),
                    );
                }
            }
            _ => {
                let changed = rows / 10;
                report.target(
                    true,
                    first.written == changed as i64,
                    format!("{tag} idem writes exactly the {changed} changed rows"),
                    format!("{} rows written, {dead} dead tuples", first.written),
                );
                if let Some(naive) = index_of(Variant::Naive) {
                    let ratio = ratio_to(naive);
                    report.target(
                        false,
                        ratio < 1.0,
                        format!("{tag} idem faster than the naive upsert"),
                        format!("idem/naive {ratio:.2}x"),
                    );
                }
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // The check: every count on 10 rows, against what the statements must do

    /// Creates extension `name` in the benchmark's schema (dropped with it) unless it exists,
    /// and returns the schema of its functions (named with them: a partitioned table's search
    /// path leaves the benchmark's schema out).
    async fn extension(&self, name: &str) -> Option<String> {
        let sql = format!(
            "CREATE EXTENSION IF NOT EXISTS {name} WITH SCHEMA {}",
            self.schema
        );
        let found = match self.client.batch_execute(&sql).await {
            Ok(()) => self
                .client
                .query_one(
                    "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension \
                     WHERE extname = $1",
                    &[&name],
                )
                .await
                .map(|row| row.get(0)),
            Err(error) => Err(error),
        };
        match found {
            Ok(schema) => Some(schema),
            Err(error) => {
                eprintln!("bench_postgres: check: no {name} ({error}); skipped");
                None
            }
        }
    }

    async fn check(&self, report: &mut Report) -> Result<(), Fatal> {
        let n = CHECK_ROWS;
        eprintln!("bench_postgres: check on {n} rows");
        let data = self.datasets(n).await?;
        let walinspect = self.extension("pg_walinspect").await;
        let pgstattuple = self.extension("pgstattuple").await;
        let n64 = n as i64;
        let changed = (n / 10) as i64;
        let statements = n.div_ceil(self.chunk) as u64;
        // (scenario, variant, stored rows, dataset, expected outcomes, statements, written, dead)
        type Case<'a> = (
            &'static str,
            Variant,
            Option<&'a [Row]>,
            &'a Dataset,
            Vec<(Outcome, usize)>,
            u64,
            i64,
            i64,
        );
        let stored = Some(data.originals.rows.as_slice());
        let mut cases: Vec<Case> = vec![
            (
                "P1",
                Variant::RowByRow,
                None,
                &data.originals,
                vec![],
                n as u64,
                n64,
                0,
            ),
            (
                "P1",
                Variant::MultiRow,
                None,
                &data.originals,
                vec![],
                statements,
                n64,
                0,
            ),
            (
                "P1",
                Variant::Copy,
                None,
                &data.originals,
                vec![],
                1,
                n64,
                0,
            ),
            (
                "P1",
                Variant::Idem,
                None,
                &data.originals,
                vec![(Outcome::Inserted, n)],
                statements,
                n64,
                0,
            ),
            (
                "P2",
                Variant::Naive,
                stored,
                &data.unchanged,
                vec![],
                statements,
                n64,
                n64,
            ),
            (
                "P2",
                Variant::Idem,
                stored,
                &data.unchanged,
                vec![(Outcome::Unchanged, n)],
                statements,
                0,
                0,
            ),
            (
                "P3",
                Variant::Naive,
                stored,
                &data.changed,
                vec![],
                statements,
                n64,
                n64,
            ),
            (
                "P3",
                Variant::Idem,
                stored,
                &data.changed,
                vec![(Outcome::Updated, n / 10), (Outcome::Unchanged, n - n / 10)],
                statements,
                changed,
                changed,
            ),
        ];
        // idem on each partitioned table, with the plain table's counts.
        let partitioned: Vec<Case> = (cases.iter())
            .filter(|case| case.1 == Variant::Idem)
            .flat_map(|case| {
                (self.partitioned_variants()).map(move |variant| {
                    let mut case = case.clone();
                    case.1 = variant;
                    case
                })
            })
            .collect();
        cases.extend(partitioned);
        let mut lines = vec![format!(
            "check on {n} rows: each count against what the statements must do \
             (dead tuples also by pgstattuple, WAL records by pg_walinspect)"
        )];
        let mut wrong = Vec::new();
        for (
            scenario,
            variant,
            seed,
            dataset,
            outcomes,
            want_statements,
            want_written,
            want_dead,
        ) in &cases
        {
            self.use_table_of(*variant).await?;
            self.reset(*seed).await?;
            let what = format!("check {scenario} / {}", variant.name());
            let (sample, start, end) = self
                .measure(&what, self.write(*variant, dataset, outcomes))
                .await?;
            let mut line = format!(
                "  ({scenario}) {}: {}, {}, {}",
                variant.name(),
                plural(sample.wire.statements, "statement"),
                plural(sample.written as u64, "row") + " written",
                plural(sample.dead as u64, "dead tuple"),
            );
            let mut ok = sample.wire.statements == *want_statements
                && sample.written == *want_written
                && sample.dead == *want_dead;
            if let Some(pgstattuple) = &pgstattuple {
                let physical: i64 = self
                    .client
                    .query_one(
                        &format!(
                            "SELECT coalesce(sum(({pgstattuple}.pgstattuple(oid)).dead_tuple_count), \
                             0)::int8 FROM ({HEAPS}) heaps"
                        ),
                        &[&TABLE],
                    )
                    .await?
                    .get(0);
                line.push_str(&format!(" (pgstattuple: {physical})"));
                ok &= physical == *want_dead;
            }
            line.push_str(&format!(", WAL {} B", sample.wal));
            if let Some(walinspect) = &walinspect {
                // CHECKPOINT needs a superuser or pg_checkpoint: without it, no listing.
                match self.wal_records(walinspect, start, end).await {
                    Ok(records) => line.push_str(&records),
                    Err(Fatal(error)) => line.push_str(&format!(" (no WAL listing: {error})")),
                }
            }
            if !variant.is_idem() && *scenario == "P1" {
                // The hand-written rows are idem's own: idem finds every one unchanged.
                let again = self.store.upsert_many(&self.client, &dataset.posts).await?;
                let same = again.count(Outcome::Unchanged) == n;
                line.push_str(if same {
                    "; idem finds the rows unchanged"
                } else {
                    "; idem finds rows that differ"
                });
                ok &= same;
            }
            if !ok {
                line.push_str(&format!(
                    "  <- expected {want_statements} statements, {want_written} written, \
                     {want_dead} dead"
                ));
                wrong.push(format!("({scenario}) {}", variant.name()));
            }
            lines.push(line);
        }
        report.checks = lines;
        report.target(
            true,
            wrong.is_empty(),
            format!(
                "(check) on {n} rows, statements, rows written and dead tuples are exactly \
                 what the statements must do"
            ),
            if wrong.is_empty() {
                format!("{} variants, every count as expected", cases.len())
            } else {
                format!("differs for {}", wrong.join("; "))
            },
        );
        Ok(())
    }

    /// The WAL records between `start` and `end`, by kind: ` = N records: Heap/LOCK 10 (560 B),
    /// …`. The window must be flushed to be read: a `CHECKPOINT` flushes it.
    async fn wal_records(&self, walinspect: &str, start: u64, end: u64) -> Result<String, Fatal> {
        if end <= start {
            return Ok(String::new());
        }
        self.client.batch_execute("CHECKPOINT").await?;
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT resource_manager || '/' || record_type, count(*), \
                     sum(end_lsn - start_lsn)::bigint \
                     FROM {walinspect}.pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) \
                     GROUP BY 1 ORDER BY 3 DESC, 1"
                ),
                &[&format_lsn(start), &format_lsn(end)],
            )
            .await?;
        let mut total = 0;
        let kinds: Vec<String> = rows
            .iter()
            .map(|row| {
                let count: i64 = row.get(1);
                let bytes: i64 = row.get(2);
                total += count;
                format!("{} {count} ({bytes} B)", row.get::<_, String>(0))
            })
            .collect();
        Ok(format!(" = {total} records: {}", kinds.join(", ")))
    }
}

/// Checks that `report` holds exactly the expected outcomes.
fn expect_outcomes(
    report: &BatchReport,
    expected: &[(Outcome, usize)],
    what: &str,
) -> Result<(), Fatal> {
    let total: usize = expected.iter().map(|(_, n)| n).sum();
    let matches = report.outcomes().len() == total
        && expected
            .iter()
            .all(|&(outcome, n)| report.count(outcome) == n);
    if matches {
        Ok(())
    } else {
        Err(fatal(format!("{what}: {report}; expected {expected:?}")))
    }
}

/// `16/B374D848` as a byte position.
fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

fn format_lsn(position: u64) -> String {
    format!("{:X}/{:X}", position >> 32, position & 0xFFFF_FFFF)
}
