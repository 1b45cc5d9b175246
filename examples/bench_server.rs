//! Server benchmark: idem's writes against the ways they are written by hand, on the same data in
//! the same run, with round trips and documents written counted exactly.
//!
//! Every command the client sends is recorded through the driver's command monitoring, and the
//! documents written are what the servers' replies say (`n` of `insert`, `nModified` plus
//! `upserted` of `update`), so those two columns are exact. Wall times are noisy on a shared
//! machine, so each scenario runs its variants interleaved (A, B, C, then C, B, A…) over several
//! rounds and reports the median wall time and the median of the per-round ratios to the
//! scenario's baseline, each ratio taken within its own round.
//!
//! The scenarios, each in its own fresh database:
//!
//! 1. single upserts of new ~2 KiB blog posts (the design's `Post`): `store.upsert` against a
//!    hand-written `update_one({_id}, {$set: doc}).upsert(true)` with ids computed beforehand;
//!    and the CPU idem adds per write (`post.id()`, `post.content_hash()`, against the
//!    `bson::to_document` both need), timed locally, with no server involved.
//!    (1b) the same single upserts of posts already stored and unchanged; (1c) of posts already
//!    stored, each edited. A single upsert's reply does not say whether it replaced a document,
//!    so these two count the documents written from the stored bytes before and after each run.
//! 2. re-ingest of unchanged posts: `store.upsert_many` against the hand-written approach
//!    (per post: `find_one` by natural key, compare the stored hash, write only if it differs) and
//!    against blind bulk upserts (one `update` command per chunk carrying an upsert
//!    `{q: {_id}, u: {$set: doc}}` for every post: the cheapest way to write them all).
//! 3. the same with 10% of the posts changed.
//! 4. `store.insert_new` of awards of which half are stored, against a hand-written
//!    `insert_many` (unordered, duplicate-key errors skipped) and a naive check-then-insert.
//!
//! Each re-ingest carries a new `fetched_at` (volatile: it never makes a post "changed"), as a real
//! re-fetch would. The exact targets (writes, round trips) are checked at the end; the process
//! exits with status 1 if one is missed. Timed targets are reported, never fatal.
//!
//! Run it (release build) against any MongoDB-compatible server; `scripts/bench` runs it with the
//! rest of the suite:
//!
//! ```text
//! eval "$(scripts/test-server start)"
//! cargo run --release -p idem-examples --example bench_server -- [--rounds 5] [--posts 2000]
//!     [--docs 10000] [--awards 1000] [--tsv FILE]
//! scripts/test-server stop
//! ```
//!
//! `--tsv FILE` also writes every row and target, tab-separated, for `scripts/bench`; `--only`
//! runs some scenarios (`--only 2,3`). The databases are named `idem_bench_<pid>_…` and dropped
//! when done.
//!
//! The defaults are the full target sizes. On SecantusDB (`scripts/test-server`) idem's guarded
//! filters and its batch read cost time that grows with the collection and the batch (see the
//! docs/PERFORMANCE.md), so a run with them takes far longer than the 15 minutes the
//! whole suite aims at; `scripts/bench` passes smaller sizes.
//!
//! Exit status: 0 when every exact target is met; 1 when one is missed; 2 on a usage or server
//! problem.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use idem_core::mongo::Store;
use idem_core::{Idempotent, Outcome};
use idem_tests::allocations::{allocations_in, CountingAllocator};
// The design's blog post; the posts built here are about 2 KiB as BSON.
use idem_examples::bench::{
    fmt_duration, median, median_duration, order, print_table, print_targets, spread, targets_tsv,
    Target,
};
use idem_examples::cli::{exit_code, fatal, Fatal, Flags};
use idem_tests::fixtures::Post;
use mongodb::bson::{self, doc, Bson, Document, RawDocumentBuf};
use mongodb::error::ErrorKind;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::{Client, Collection, Database};
use serde::{Deserialize, Serialize};

// ------------------------------------------------------------------------------------------------
// The documents

/// A badge a user earned: a member of a derived set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
#[serde(rename_all = "camelCase")]
struct Award {
    #[idem(key)]
    user_id: String,
    #[idem(key)]
    badge: String,
}

/// The BSON size of every post.
const POST_BYTES: usize = 2048;
/// 2024-01-01T00:00:00Z.
const EPOCH: i64 = 1_704_067_200_000;

/// `count` posts fetched at `fetched_at`, each exactly `POST_BYTES` as BSON, bodies all different.
fn posts(count: usize, fetched_at: i64) -> Vec<Post> {
    const FILLER: &str = "Idempotent writes converge under retries, replays and races; \
                          unchanged content is never written twice. ";
    (0..count)
        .map(|i| {
            let mut post = Post {
                slug: format!("post-{i:06}"),
                lang: ["en", "fr", "de"][i % 3].to_owned(),
                published_at: EPOCH + i as i64 * 60_000,
                title: format!("Notes on idempotency, part {i:06}"),
                body: String::new(),
                fetched_at,
                author_id: format!("author-{:02}", i % 17),
            };
            let overhead = bson_size(&post);
            post.body = FILLER
                .chars()
                .cycle()
                .skip(i % FILLER.len())
                .take(POST_BYTES - overhead)
                .collect();
            post
        })
        .collect()
}

fn bson_size<T: Serialize>(value: &T) -> usize {
    bson::to_vec(value).map_or(0, |bytes| bytes.len())
}

/// Whether post `index` is one of the 10% a re-ingest changes.
fn is_changed(index: usize) -> bool {
    index.is_multiple_of(10)
}

/// The posts as re-fetched at `fetched_at`, with every tenth one edited if `with_changes`.
fn refetched(originals: &[Post], fetched_at: i64, with_changes: bool) -> Vec<Post> {
    originals
        .iter()
        .enumerate()
        .map(|(index, post)| {
            let mut post = post.clone();
            post.fetched_at = fetched_at;
            if with_changes && is_changed(index) {
                post.title.push_str(" (revised)");
            }
            post
        })
        .collect()
}

fn awards(count: usize) -> Vec<Award> {
    (0..count)
        .map(|i| Award {
            user_id: format!("user-{:03}", i % 50),
            badge: format!("badge-{i:05}"),
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Command monitoring

/// The commands a client sent and the documents the replies say were written.
#[derive(Clone, Default)]
struct Monitor(Arc<Mutex<Counts>>);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// Commands started, by name: one round trip each.
    commands: BTreeMap<String, u64>,
    /// Documents inserted, upserted or modified, from the replies.
    written: u64,
}

impl Counts {
    fn round_trips(&self) -> u64 {
        self.commands.values().sum()
    }

    fn count(&self, command: &str) -> u64 {
        self.commands.get(command).copied().unwrap_or(0)
    }

    /// `11000 (10000 find, 1000 update)`.
    fn describe(&self) -> String {
        let each: Vec<String> = self
            .commands
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect();
        format!("{} ({})", self.round_trips(), each.join(", "))
    }
}

impl Monitor {
    fn observe(&self, event: CommandEvent) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            CommandEvent::Started(started) => {
                *counts.commands.entry(started.command_name).or_default() += 1;
            }
            CommandEvent::Succeeded(succeeded) => {
                let reply = &succeeded.reply;
                let number = |field: &str| match reply.get(field) {
                    Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
                    Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
                    _ => 0,
                };
                counts.written += match succeeded.command_name.as_str() {
                    "insert" => number("n"),
                    "update" => {
                        number("nModified")
                            + reply.get_array("upserted").map_or(0, |u| u.len() as u64)
                    }
                    // Its reply tells an insert, not whether a conditional replacement changed
                    // the document it found: scenarios of stored posts count from stored bytes.
                    "findAndModify" => reply
                        .get_document("lastErrorObject")
                        .map_or(0, |status| u64::from(status.contains_key("upserted"))),
                    _ => 0,
                };
            }
            _ => {}
        }
    }

    /// Everything recorded so far; starts over.
    fn take(&self) -> Counts {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

// ------------------------------------------------------------------------------------------------
// Counting allocations of the local CPU measurements

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

// ------------------------------------------------------------------------------------------------
// Results

/// One timed run of one variant.
#[derive(Clone, Debug)]
struct Sample {
    counts: Counts,
    wall: Duration,
    /// Members `insert_new` (or its hand-written equivalents) returned as new.
    returned: Option<usize>,
}

/// A row of the table: a variant's samples over the rounds, and its ratios to the baseline.
struct Row {
    scenario: String,
    variant: String,
    round_trips: String,
    written: String,
    returned: String,
    /// Median wall time over the rounds.
    wall: Duration,
    /// The unit of `wall` per item, for the rows measured per write.
    per: Option<(Duration, &'static str)>,
    /// Median over rounds of (this / baseline) wall time, and each round's ratio.
    ratio: Option<(f64, Vec<f64>)>,
    is_baseline: bool,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    targets: Vec<Target>,
}

impl Report {
    fn target(&mut self, exact: bool, met: bool, what: impl Into<String>, measured: String) {
        self.targets.push(Target::new(exact, met, what, measured));
    }

    /// Adds the rows of a scenario whose variant 0 is the baseline. Returns each variant's
    /// median wall time.
    fn add_scenario(
        &mut self,
        scenario: &str,
        variants: &[&'static str],
        samples: &[Vec<Sample>],
        items: usize,
    ) -> Result<Vec<Duration>, Fatal> {
        let mut medians = Vec::new();
        for (index, (variant, runs)) in variants.iter().zip(samples).enumerate() {
            // Counts are exact: every round must agree, or the measurement is not what it says.
            let first = &runs[0];
            if let Some(other) = runs.iter().find(|run| run.counts != first.counts) {
                return Err(fatal(format!(
                    "{scenario} / {variant}: the counts differ between rounds ({} vs {})",
                    first.counts.describe(),
                    other.counts.describe()
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
            medians.push(wall);
            self.rows.push(Row {
                scenario: if index == 0 {
                    scenario.to_owned()
                } else {
                    String::new()
                },
                variant: (*variant).to_owned(),
                round_trips: first.counts.describe(),
                written: first.counts.written.to_string(),
                returned: first.returned.map_or_else(String::new, |n| n.to_string()),
                wall,
                per: (items > 0).then(|| (wall / u32::try_from(items).unwrap_or(1), "write")),
                ratio,
                is_baseline: index == 0,
            });
        }
        Ok(medians)
    }

    fn print(&self) {
        let header = [
            "scenario",
            "variant",
            "round trips",
            "written",
            "returned",
            "wall (median)",
            "ratio",
            "ratio per round",
        ];
        let mut lines: Vec<Vec<String>> = vec![header.map(str::to_owned).to_vec()];
        for row in &self.rows {
            let wall = match row.per {
                Some((per, unit)) => {
                    format!("{} ({}/{unit})", fmt_duration(row.wall), fmt_duration(per))
                }
                None => fmt_duration(row.wall),
            };
            let (ratio, rounds) = match &row.ratio {
                Some((ratio, rounds)) => (format!("{ratio:.2}x"), spread(rounds)),
                None if row.is_baseline => ("1.00x".to_owned(), "baseline".to_owned()),
                None => (String::new(), String::new()),
            };
            lines.push(vec![
                row.scenario.clone(),
                row.variant.clone(),
                row.round_trips.clone(),
                row.written.clone(),
                row.returned.clone(),
                wall,
                ratio,
                rounds,
            ]);
        }
        print_table(&lines);
        println!();
        print_targets(&self.targets);
    }

    /// Every row and target, tab-separated, for `scripts/bench`.
    fn tsv(&self) -> String {
        let mut out = String::new();
        let mut scenario = String::new();
        for row in &self.rows {
            if !row.scenario.is_empty() {
                scenario.clone_from(&row.scenario);
            }
            let ratio = row
                .ratio
                .as_ref()
                .map_or_else(String::new, |(ratio, _)| format!("{ratio:.3}"));
            let per = row.per.map_or_else(String::new, |(per, unit)| {
                format!("{} ({}/{unit})", fmt_duration(row.wall), fmt_duration(per))
            });
            let wall = if per.is_empty() {
                fmt_duration(row.wall)
            } else {
                per
            };
            out.push_str(&format!(
                "row\t{scenario}\t{}\t{}\t{}\t{}\t{wall}\t{}\t{ratio}\n",
                row.variant,
                row.round_trips,
                row.written,
                row.returned,
                u8::from(row.is_baseline)
            ));
        }
        out.push_str(&targets_tsv(&self.targets));
        out
    }
}

// ------------------------------------------------------------------------------------------------
// The benchmark

struct Args {
    rounds: usize,
    posts: usize,
    docs: usize,
    awards: usize,
    tsv: Option<String>,
    /// The scenarios to run (`1`, `1b`, `1c`, `2`, `3`, `4`); all when empty.
    only: Vec<String>,
}

impl Args {
    fn runs(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }
}

const USAGE: &str = "\
usage: bench_server [--rounds N] [--posts N] [--docs N] [--awards N] [--only LIST] [--tsv FILE]

Benchmarks idem's writes against hand-written ones on the server named by MONGODB_URI.
  --rounds N   interleaved rounds per scenario (default 5)
  --posts N    posts of the single-upsert scenarios (default 2000)
  --docs N     posts of the re-ingest scenarios (default 10000; a multiple of 10)
  --awards N   awards of the insert_new scenario (default 1000; even)
  --only LIST  only these scenarios, comma-separated: 1,1b,1c,2,3,4 (default: all)
  --tsv FILE   also write the rows and targets, tab-separated, to FILE";

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, Fatal> {
    let mut parsed = Args {
        rounds: 5,
        posts: 2000,
        docs: 10_000,
        awards: 1000,
        tsv: None,
        only: Vec::new(),
    };
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--rounds" => parsed.rounds = flags.number("--rounds")?,
            "--posts" => parsed.posts = flags.number("--posts")?,
            "--docs" => parsed.docs = flags.number("--docs")?,
            "--awards" => parsed.awards = flags.number("--awards")?,
            "--tsv" => parsed.tsv = Some(flags.value("--tsv")?),
            "--only" => parsed.only = flags.list("--only", &["1", "1b", "1c", "2", "3", "4"])?,
            other => return Err(flags.unexpected(other)),
        }
    }
    if !parsed.docs.is_multiple_of(10) || !parsed.awards.is_multiple_of(2) {
        return Err(fatal("--docs must be a multiple of 10 and --awards even"));
    }
    Ok(Some(parsed))
}

#[tokio::main]
async fn main() -> ExitCode {
    exit_code("bench_server", run()).await
}

async fn run() -> Result<ExitCode, Fatal> {
    let Some(args) = parse_args(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let uri = std::env::var("MONGODB_URI").map_err(|_| {
        fatal("MONGODB_URI is not set: `eval \"$(scripts/test-server start)\"` starts a server")
    })?;
    let mut options = ClientOptions::parse(&uri).await?;
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    let monitor = Monitor::default();
    let recorder = monitor.clone();
    options.command_event_handler =
        Some(EventHandler::callback(move |event| recorder.observe(event)));
    let client = Client::with_options(options)?;
    let hello = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await?;
    let limit = |field: &str, default: usize| match hello.get(field) {
        Some(Bson::Int32(n)) => usize::try_from(*n).unwrap_or(default),
        Some(Bson::Int64(n)) => usize::try_from(*n).unwrap_or(default),
        _ => default,
    };
    let bench = Bench {
        client,
        monitor,
        prefix: format!("idem_bench_{}", std::process::id()),
        max_batch: limit("maxWriteBatchSize", 100_000).max(1),
        max_bytes: limit("maxBsonObjectSize", 16 * 1024 * 1024),
        rounds: args.rounds,
    };
    eprintln!(
        "bench_server: {} rounds; server maxWriteBatchSize {}, maxBsonObjectSize {}",
        bench.rounds, bench.max_batch, bench.max_bytes
    );

    let mut report = Report::default();
    let started = Instant::now();
    if args.runs("1") {
        bench.single_upserts(&mut report, args.posts).await?;
    }
    if args.runs("1b") {
        bench
            .single_existing(&mut report, args.posts, false)
            .await?;
    }
    if args.runs("1c") {
        bench.single_existing(&mut report, args.posts, true).await?;
    }
    if args.runs("2") {
        bench.reingest(&mut report, args.docs, false).await?;
    }
    if args.runs("3") {
        bench.reingest(&mut report, args.docs, true).await?;
    }
    if args.runs("4") {
        bench.derived_set(&mut report, args.awards).await?;
    }
    eprintln!(
        "bench_server: done in {:.0} s",
        started.elapsed().as_secs_f64()
    );

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
        eprintln!("bench_server: {missed} exact target(s) missed");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

struct Bench {
    client: Client,
    monitor: Monitor,
    prefix: String,
    max_batch: usize,
    max_bytes: usize,
    rounds: usize,
}

impl Bench {
    /// A fresh, empty database.
    async fn fresh(&self, name: &str) -> Result<Database, Fatal> {
        let database = self.client.database(&format!("{}_{name}", self.prefix));
        database.drop().await?;
        Ok(database)
    }

    /// Times `run`, with the commands it sent.
    async fn timed<F, R>(&self, run: F) -> Result<(R, Counts, Duration), Fatal>
    where
        F: std::future::Future<Output = Result<R, Fatal>>,
    {
        let _ = self.monitor.take();
        let started = Instant::now();
        let result = run.await?;
        let wall = started.elapsed();
        Ok((result, self.monitor.take(), wall))
    }

    fn progress(&self, scenario: &str, round: usize) {
        eprintln!(
            "bench_server: {scenario}: round {}/{}",
            round + 1,
            self.rounds
        );
    }

    // --------------------------------------------------------------------------------------------
    // (1) single upserts

    async fn single_upserts(&self, report: &mut Report, count: usize) -> Result<(), Fatal> {
        let scenario = format!("(1) {count} single upserts, new posts");
        let variants = ["hand-written update_one upsert", "idem store.upsert"];
        let posts = posts(count, EPOCH);
        let ids = ids(&posts)?;
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..self.rounds {
            self.progress(&scenario, round);
            for variant in order(variants.len(), round) {
                let database = self.fresh(&format!("single_{round}_{variant}")).await?;
                let store = Store::new(database.clone());
                // The same unique natural-key index for both, built before timing.
                store.ensure_indexes::<Post>().await?;
                let collection = database.collection::<Document>(Post::MODEL.collection());
                let (counts, wall) = self
                    .time_single_upserts(
                        variant,
                        &collection,
                        &store,
                        &posts,
                        &ids,
                        Outcome::Inserted,
                    )
                    .await?;
                samples[variant].push(Sample {
                    counts,
                    wall,
                    returned: None,
                });
                database.drop().await?;
            }
        }
        let medians = report.add_scenario(&scenario, &variants, &samples, count)?;
        let (hand, idem) = (&samples[0][0].counts, &samples[1][0].counts);
        let n = count as u64;
        report.target(
            true,
            idem.round_trips() == n && hand.round_trips() == n,
            "(1) single upsert: one round trip per write, as the hand-written upsert",
            format!(
                "idem {} round trips, hand-written {} for {count} writes",
                idem.round_trips(),
                hand.round_trips()
            ),
        );
        report.target(
            true,
            idem.written == n,
            "(1) single upsert: every new post written once",
            format!("{} written", idem.written),
        );

        // The CPU each write needs before any round trip, timed locally.
        let per_write_wall = medians[0] / u32::try_from(count).unwrap_or(1);
        self.prepare_cost(report, &posts, per_write_wall);
        Ok(())
    }

    /// Times one variant of the single-upsert scenarios over `posts`: the hand-written upsert
    /// (variant 0), or idem's, which must answer `expected` for every post.
    async fn time_single_upserts(
        &self,
        variant: usize,
        collection: &Collection<Document>,
        store: &Store,
        posts: &[Post],
        ids: &[String],
        expected: Outcome,
    ) -> Result<(Counts, Duration), Fatal> {
        let ((), counts, wall) = match variant {
            0 => {
                self.timed(async {
                    for (post, id) in posts.iter().zip(ids) {
                        hand_written_upsert(collection, post, id, None).await?;
                    }
                    Ok(())
                })
                .await?
            }
            _ => {
                self.timed(async {
                    for post in posts {
                        let outcome = store.upsert(post).await?;
                        if outcome != expected {
                            return Err(fatal(format!("a post expected {expected} was {outcome}")));
                        }
                    }
                    Ok(())
                })
                .await?
            }
        };
        Ok((counts, wall))
    }

    /// Times `post.id()`, `post.content_hash()` and `bson::to_document(post)` over the posts,
    /// interleaved over rounds, and counts their allocations.
    fn prepare_cost(&self, report: &mut Report, posts: &[Post], per_write_wall: Duration) {
        const ROUNDS: usize = 15;
        let n = u32::try_from(posts.len()).unwrap_or(1);
        type Op<'a> = (&'static str, Box<dyn Fn(usize) + 'a>);
        let ops: [Op; 4] = [
            (
                "bson::to_document (both)",
                Box::new(|i| {
                    black_box(bson::to_document(black_box(&posts[i])).ok());
                }),
            ),
            (
                "post.id()",
                Box::new(|i| {
                    black_box(black_box(&posts[i]).id().ok());
                }),
            ),
            (
                "post.content_hash()",
                Box::new(|i| {
                    black_box(black_box(&posts[i]).content_hash().ok());
                }),
            ),
            (
                "idem: id + hash + to_document",
                Box::new(|i| {
                    let post = black_box(&posts[i]);
                    black_box((
                        post.id().ok(),
                        post.content_hash().ok(),
                        bson::to_document(post).ok(),
                    ));
                }),
            ),
        ];
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
        for round in 0..ROUNDS {
            for index in order(ops.len(), round) {
                let op = &ops[index].1;
                let started = Instant::now();
                for i in 0..posts.len() {
                    op(i);
                }
                times[index].push((started.elapsed() / n).as_secs_f64());
            }
        }
        let allocations: Vec<usize> = ops
            .iter()
            .map(|(_, op)| allocations_in(|| op(0)).1)
            .collect();
        let medians: Vec<Duration> = times
            .iter()
            .map(|t| Duration::from_secs_f64(median(t)))
            .collect();
        let baseline: Vec<f64> = times[0].clone();
        let scenario = "(1) CPU per write, local (no server)".to_owned();
        for (index, (name, _)) in ops.iter().enumerate() {
            let per_round: Vec<f64> = times[index]
                .iter()
                .zip(&baseline)
                .map(|(t, base)| t / base)
                .collect();
            self.push_cpu_row(
                report,
                if index == 0 {
                    scenario.clone()
                } else {
                    String::new()
                },
                name,
                medians[index],
                allocations[index],
                (index > 0).then(|| (median(&per_round), per_round)),
            );
        }
        let overhead = medians[1] + medians[2];
        report.target(
            true,
            allocations[1] == 0 && allocations[2] == 0,
            "(1) heap allocations of post.id() and post.content_hash()",
            format!("{} and {}", allocations[1], allocations[2]),
        );
        report.targets.push(Target {
            kind: "info",
            met: true,
            what: "(1) CPU idem adds per write (id + hash), against the hand-written upsert's wall time".to_owned(),
            measured: format!(
                "{} per write = {:.2}% of {}",
                fmt_duration(overhead),
                100.0 * overhead.as_secs_f64() / per_write_wall.as_secs_f64(),
                fmt_duration(per_write_wall)
            ),
        });
    }

    fn push_cpu_row(
        &self,
        report: &mut Report,
        scenario: String,
        name: &'static str,
        per_write: Duration,
        allocations: usize,
        ratio: Option<(f64, Vec<f64>)>,
    ) {
        report.rows.push(Row {
            is_baseline: ratio.is_none(),
            scenario,
            variant: format!("{name}: {allocations} allocations"),
            round_trips: "0".to_owned(),
            written: "0".to_owned(),
            returned: String::new(),
            wall: per_write,
            per: None,
            ratio,
        });
    }

    // --------------------------------------------------------------------------------------------
    // (1b) and (1c) single upserts of stored posts, unchanged or edited

    /// Single upserts of posts already stored: unchanged (`Unchanged`, nothing to write) or each
    /// edited in every round (`Updated`). A single upsert's reply does not say whether it
    /// replaced a document, so the documents written are counted from the stored bytes before
    /// and after each timed run, outside its timing: exact, whatever the commands.
    async fn single_existing(
        &self,
        report: &mut Report,
        count: usize,
        edited: bool,
    ) -> Result<(), Fatal> {
        let (label, what, expected) = if edited {
            ("(1c)", "edited", Outcome::Updated)
        } else {
            ("(1b)", "unchanged", Outcome::Unchanged)
        };
        let scenario = format!("{label} {count} single upserts, {what}");
        let variants = ["hand-written update_one upsert", "idem store.upsert"];
        let originals = posts(count, EPOCH);
        let ids = ids(&originals)?;
        let database = self.fresh(&format!("single_{what}")).await?;
        let store = Store::new(database.clone());
        seed(&store, &originals).await?;
        let collection = database.collection::<Document>(Post::MODEL.collection());
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..self.rounds {
            self.progress(&scenario, round);
            for variant in order(variants.len(), round) {
                let mut posts = refetched(&originals, fetch_time(round, variant), false);
                if edited {
                    for post in &mut posts {
                        post.title = format!("{} (edit {round}.{variant})", post.title);
                    }
                }
                let before = stored_bytes(&collection).await?;
                let (mut counts, wall) = self
                    .time_single_upserts(variant, &collection, &store, &posts, &ids, expected)
                    .await?;
                counts.written = changed_documents(&before, &stored_bytes(&collection).await?);
                samples[variant].push(Sample {
                    counts,
                    wall,
                    returned: None,
                });
            }
        }
        database.drop().await?;
        report.add_scenario(&scenario, &variants, &samples, count)?;
        let idem = &samples[1][0].counts;
        let n = count as u64;
        report.target(
            true,
            idem.round_trips() == n,
            format!("{label} single upsert of {what} posts: one round trip per write"),
            idem.describe(),
        );
        let (wanted, description) = if edited {
            (n, "every edited post written once")
        } else {
            (0, "unchanged posts write nothing")
        };
        report.target(
            true,
            idem.written == wanted,
            format!("{label} single upsert: {description}"),
            format!("{} written", idem.written),
        );
        Ok(())
    }

    // --------------------------------------------------------------------------------------------
    // (2) and (3) re-ingest

    async fn reingest(
        &self,
        report: &mut Report,
        count: usize,
        with_changes: bool,
    ) -> Result<(), Fatal> {
        let changed = if with_changes { count / 10 } else { 0 };
        let scenario = if with_changes {
            format!("(3) re-ingest {count}, {changed} changed")
        } else {
            format!("(2) re-ingest {count} unchanged")
        };
        let label = if with_changes { "(3)" } else { "(2)" };
        let variants = [
            "reference: find_one by key, compare hash, write",
            "blind bulk upsert (update per chunk)",
            "idem store.upsert_many",
        ];
        let originals = posts(count, EPOCH);
        let ids = ids(&originals)?;
        let database = self
            .fresh(if with_changes {
                "reingest_changed"
            } else {
                "reingest"
            })
            .await?;
        let store = Store::new(database.clone());
        seed(&store, &originals).await?;
        let collection = database.collection::<Document>(Post::MODEL.collection());
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..self.rounds {
            self.progress(&scenario, round);
            for variant in order(variants.len(), round) {
                let posts = refetched(&originals, fetch_time(round, variant), with_changes);
                let (written, counts, wall) = match variant {
                    0 => self.timed(reference_ingest(&collection, &posts)).await?,
                    1 => self.timed(self.blind_bulk(&database, &posts, &ids)).await?,
                    _ => {
                        self.timed(async {
                            let batch = store.upsert_many(&posts).await?;
                            let expected = [
                                (Outcome::Updated, changed),
                                (Outcome::Unchanged, count - changed),
                            ];
                            for (outcome, n) in expected {
                                if batch.count(outcome) != n {
                                    return Err(fatal(format!(
                                        "upsert_many: {batch}; expected {n} {outcome}"
                                    )));
                                }
                            }
                            Ok(changed)
                        })
                        .await?
                    }
                };
                if written != changed && variant != 1 {
                    return Err(fatal(format!(
                        "{scenario} / {}: wrote {written}, expected {changed}",
                        variants[variant]
                    )));
                }
                samples[variant].push(Sample {
                    counts,
                    wall,
                    returned: None,
                });
                if with_changes {
                    self.restore(&database, &originals, &ids).await?;
                }
            }
        }
        database.drop().await?;
        let medians = report.add_scenario(&scenario, &variants, &samples, 0)?;

        let (reference, idem) = (&samples[0][0].counts, &samples[2][0].counts);
        let chunk = self.max_batch.min(idem_core::mongo::DEFAULT_BATCH_CHUNK);
        let chunks = count.div_ceil(chunk) as u64;
        report.target(
            true,
            idem.written == changed as u64,
            format!("{label} idem writes exactly the changed posts ({changed})"),
            format!(
                "{} written (reference {}, blind {})",
                idem.written, reference.written, samples[1][0].counts.written
            ),
        );
        report.target(
            true,
            idem.count("find") == chunks,
            format!("{label} idem reads once per chunk of {chunk} documents ({chunks} chunk(s))"),
            format!("{} find", idem.count("find")),
        );
        if !with_changes {
            report.target(
                true,
                idem.count("update") == 0,
                format!("{label} idem sends no write"),
                format!("{} update", idem.count("update")),
            );
        }
        report.target(
            true,
            idem.round_trips() * 10 <= reference.round_trips(),
            format!("{label} idem: at least 10x fewer round trips than the reference approach"),
            format!(
                "{} vs {} ({:.0}x fewer)",
                idem.round_trips(),
                reference.round_trips(),
                reference.round_trips() as f64 / idem.round_trips().max(1) as f64
            ),
        );
        let blind_ratio = samples[2]
            .iter()
            .zip(&samples[1])
            .map(|(idem, blind)| idem.wall.as_secs_f64() / blind.wall.as_secs_f64())
            .collect::<Vec<_>>();
        report.target(
            false,
            medians[2] < medians[1],
            format!("{label} idem faster than blind bulk upserts"),
            format!(
                "{} vs {} (median ratio {:.2}x)",
                fmt_duration(medians[2]),
                fmt_duration(medians[1]),
                median(&blind_ratio)
            ),
        );
        Ok(())
    }

    /// Blind bulk upserts: one `update` command per chunk (by count and by size), every post an
    /// upsert statement setting all its fields. Returns the documents written.
    async fn blind_bulk(
        &self,
        database: &Database,
        posts: &[Post],
        ids: &[String],
    ) -> Result<usize, Fatal> {
        let budget = self.max_bytes.saturating_sub(64 * 1024);
        let mut written = 0;
        let mut statements = Vec::new();
        let mut bytes = 0;
        for (post, id) in posts.iter().zip(ids) {
            let statement = doc! {
                "q": { "_id": id.as_str() },
                "u": { "$set": bson::to_document(post)? },
                "upsert": true,
                "multi": false,
            };
            let size = statement_size(&statement);
            if !statements.is_empty()
                && (statements.len() >= self.max_batch || bytes + size > budget)
            {
                written += send_updates(database, std::mem::take(&mut statements)).await?;
                bytes = 0;
            }
            statements.push(statement);
            bytes += size;
        }
        if !statements.is_empty() {
            written += send_updates(database, statements).await?;
        }
        Ok(written)
    }

    /// Puts the posts a changed re-ingest edited back as they were seeded, hash included.
    async fn restore(
        &self,
        database: &Database,
        originals: &[Post],
        ids: &[String],
    ) -> Result<(), Fatal> {
        let mut statements = Vec::new();
        for (index, (post, id)) in originals.iter().zip(ids).enumerate() {
            if !is_changed(index) {
                continue;
            }
            let mut body = bson::to_document(post)?;
            body.insert(Post::MODEL.hash_field(), post.content_hash()?.to_hex());
            statements
                .push(doc! { "q": { "_id": id.as_str() }, "u": { "$set": body }, "upsert": false });
        }
        for chunk in statements.chunks(self.max_batch.min(1000)) {
            send_updates(database, chunk.to_vec()).await?;
        }
        Ok(())
    }

    // --------------------------------------------------------------------------------------------
    // (4) derived sets

    async fn derived_set(&self, report: &mut Report, count: usize) -> Result<(), Fatal> {
        let scenario = format!("(4) insert_new {count} awards, half stored");
        let variants = [
            "hand-written insert_many, unordered",
            "naive: find_one, insert_one if missing",
            "idem store.insert_new",
        ];
        let members = awards(count);
        let stored: Vec<Award> = members.iter().step_by(2).cloned().collect();
        let ids: Vec<String> = members
            .iter()
            .map(|award| award.id().map(|id| id.to_string()))
            .collect::<Result<_, _>>()?;
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..self.rounds {
            self.progress(&scenario, round);
            for variant in order(variants.len(), round) {
                let database = self.fresh(&format!("awards_{round}_{variant}")).await?;
                let store = Store::new(database.clone());
                // The same stored half for every variant, through the same path.
                store.insert_new(&stored).await?;
                let collection = database.collection::<Document>(Award::MODEL.collection());
                let (returned, counts, wall) = match variant {
                    0 => {
                        self.timed(insert_unordered(&collection, &members, &ids))
                            .await?
                    }
                    1 => {
                        self.timed(check_then_insert(&collection, &members, &ids))
                            .await?
                    }
                    _ => {
                        self.timed(async { Ok(store.insert_new(&members).await?.inserted().len()) })
                            .await?
                    }
                };
                samples[variant].push(Sample {
                    counts,
                    wall,
                    returned: Some(returned),
                });
                database.drop().await?;
            }
        }
        report.add_scenario(&scenario, &variants, &samples, 0)?;
        let idem = &samples[2][0];
        let half = count / 2;
        report.target(
            true,
            idem.counts.written == half as u64 && idem.returned == Some(half),
            format!("(4) insert_new writes and returns exactly the {half} new awards"),
            format!(
                "{} written, {} returned",
                idem.counts.written,
                idem.returned.unwrap_or(0)
            ),
        );
        // One `update` of `$setOnInsert` statements keyed by id and natural key: a member stored
        // already is matched and left alone, with no read; only a member whose natural key is
        // stored under another id (a refusal) costs a read, and this set has none.
        report.target(
            true,
            idem.counts.round_trips() <= samples[0][0].counts.round_trips() + 1
                && idem.counts.count("getMore") == 0,
            "(4) insert_new: at most one read more than the hand-written insert_many",
            format!(
                "{} vs {}",
                idem.counts.describe(),
                samples[0][0].counts.describe()
            ),
        );
        Ok(())
    }
}

/// A `fetched_at` no other run used, so a blind write always has something to write.
fn fetch_time(round: usize, variant: usize) -> i64 {
    EPOCH + 1_000_000_000 + (round * 10 + variant) as i64 * 1000
}

fn ids(posts: &[Post]) -> Result<Vec<String>, Fatal> {
    posts
        .iter()
        .map(|post| Ok(post.id()?.to_string()))
        .collect()
}

/// Stores `posts` through idem (`store.upsert_many`, untimed), so every scenario starts from
/// documents idem wrote, with their hashes and digests; it also asks the server's limits
/// (`hello`) once, outside any timing.
async fn seed(store: &Store, posts: &[Post]) -> Result<(), Fatal> {
    store.ensure_indexes::<Post>().await?;
    let report = store.upsert_many(posts).await?;
    if report.count(Outcome::Inserted) != posts.len() {
        return Err(fatal(format!(
            "seeding: not every post was inserted: {report}"
        )));
    }
    Ok(())
}

/// `update_one({_id}, {$set: doc}).upsert(true)`, the document with `hash` if given.
/// Every stored document's bytes, by `_id`.
async fn stored_bytes(
    collection: &Collection<Document>,
) -> Result<HashMap<String, RawDocumentBuf>, Fatal> {
    let raw = collection.clone_with_type::<RawDocumentBuf>();
    let mut cursor = raw.find(doc! {}).await?;
    let mut stored = HashMap::new();
    while cursor.advance().await? {
        let document = cursor.current().to_raw_document_buf();
        let id = document
            .get_str("_id")
            .map_err(|e| fatal(format!("a stored _id: {e}")))?
            .to_owned();
        stored.insert(id, document);
    }
    Ok(stored)
}

/// How many documents of `after` are new or differ from `before`.
fn changed_documents(
    before: &HashMap<String, RawDocumentBuf>,
    after: &HashMap<String, RawDocumentBuf>,
) -> u64 {
    after
        .iter()
        .filter(|(id, document)| before.get(*id) != Some(*document))
        .count() as u64
}

async fn hand_written_upsert(
    collection: &Collection<Document>,
    post: &Post,
    id: &str,
    hash: Option<String>,
) -> Result<(), Fatal> {
    let mut body = bson::to_document(post)?;
    if let Some(hash) = hash {
        body.insert(Post::MODEL.hash_field(), hash);
    }
    collection
        .update_one(doc! { "_id": id }, doc! { "$set": body })
        .upsert(true)
        .await?;
    Ok(())
}

/// The hand-written re-ingest: per post, read the stored hash by natural key and write
/// the post only if its hash differs. Returns the posts written.
async fn reference_ingest(
    collection: &Collection<Document>,
    posts: &[Post],
) -> Result<usize, Fatal> {
    let hash_field = Post::MODEL.hash_field();
    let mut written = 0;
    for post in posts {
        let stored = collection
            .find_one(doc! { "slug": post.slug.as_str(), "lang": post.lang.as_str() })
            // As the natural-key index is built, so the server can use it.
            .collation(
                mongodb::options::Collation::builder()
                    .locale("simple")
                    .build(),
            )
            .projection(doc! { hash_field: 1 })
            .await?;
        let hash = post.content_hash()?.to_hex();
        let unchanged = stored
            .as_ref()
            .and_then(|stored| stored.get_str(hash_field).ok())
            == Some(hash.as_str());
        if !unchanged {
            let id = post.id()?.to_string();
            hand_written_upsert(collection, post, &id, Some(hash)).await?;
            written += 1;
        }
    }
    Ok(written)
}

/// The size of one statement in an `update` command, with its array index.
fn statement_size(statement: &Document) -> usize {
    bson_size(statement) + 16
}

/// Sends one unordered `update` command; returns the documents it wrote.
async fn send_updates(database: &Database, statements: Vec<Document>) -> Result<usize, Fatal> {
    let collection = Post::MODEL.collection();
    let reply = database
        .run_command(doc! { "update": collection, "updates": statements, "ordered": false })
        .await?;
    if let Ok(errors) = reply.get_array("writeErrors") {
        return Err(fatal(format!("bulk update: write errors {errors:?}")));
    }
    let modified = match reply.get("nModified") {
        Some(Bson::Int32(n)) => usize::try_from(*n).unwrap_or(0),
        Some(Bson::Int64(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    Ok(modified + reply.get_array("upserted").map_or(0, Vec::len))
}

/// What a hand-written derived-set insert would store for `award`.
fn award_document(award: &Award, id: &str) -> Result<Document, Fatal> {
    let mut document = doc! { "_id": id };
    document.extend(bson::to_document(award)?);
    Ok(document)
}

/// `insert_many` unordered, duplicate-key errors skipped: returns the members inserted.
async fn insert_unordered(
    collection: &Collection<Document>,
    members: &[Award],
    ids: &[String],
) -> Result<usize, Fatal> {
    let documents = members
        .iter()
        .zip(ids)
        .map(|(award, id)| award_document(award, id))
        .collect::<Result<Vec<_>, _>>()?;
    match collection.insert_many(documents).ordered(false).await {
        Ok(result) => Ok(result.inserted_ids.len()),
        Err(error) => match error.kind.as_ref() {
            ErrorKind::InsertMany(failure) if failure.write_concern_error.is_none() => {
                let errors = failure.write_errors.as_deref().unwrap_or_default();
                if errors.iter().any(|e| e.code != 11000) {
                    return Err(error.into());
                }
                let existing: HashSet<usize> = errors.iter().map(|e| e.index).collect();
                Ok((0..members.len()).filter(|i| !existing.contains(i)).count())
            }
            _ => Err(error.into()),
        },
    }
}

/// Per member: `find_one` by id, `insert_one` if missing. Racy; for scale only.
async fn check_then_insert(
    collection: &Collection<Document>,
    members: &[Award],
    ids: &[String],
) -> Result<usize, Fatal> {
    let mut inserted = 0;
    for (award, id) in members.iter().zip(ids) {
        if collection
            .find_one(doc! { "_id": id.as_str() })
            .await?
            .is_none()
        {
            collection.insert_one(award_document(award, id)?).await?;
            inserted += 1;
        }
    }
    Ok(inserted)
}
