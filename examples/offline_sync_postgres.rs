//! The offline-sync example on PostgreSQL: a journaling client pushing batches to a sync endpoint
//! that runs each push in one transaction, with exact side effects.
//!
//! The scenario is the one of `offline_sync.rs` (the MongoDB version), shared through
//! `src/offline_sync.rs`: a journal app pushes its entries in batches, replays them after a
//! relaunch, a second device pushes older copies, and replies get lost. Every push earns 10 points
//! per entry and the awards ("first-entry", "five-entries", "ten-entries", "streak-3") the stored
//! entries earn, celebrated once. Here the sync endpoint takes a connection from a
//! `deadpool-postgres` pool and runs the whole push in ONE transaction, as a real sync endpoint
//! does:
//!
//! - `Entry` rows are written with `Store::upsert_many` (a replay is `Unchanged`, an older
//!   revision `Stale`, two revisions of one entry in a batch collapse to the newest, a deleted
//!   entry stays deleted) and deletions with `Store::delete`;
//! - points move only through `Store::apply_once` (`Change::add("points", 10)`) keyed by
//!   `entry.op_id("points")`, so a replayed entry never credits twice;
//! - awards are a derived set written with `Store::insert_new`, which returns exactly the awards
//!   this transaction inserted: the endpoint celebrates those (a notification to the user) and
//!   tells the client in its reply.
//!
//! Every idem call gets the endpoint's `Transaction`, so the entry rows, the credits and the
//! awards of one push commit together or not at all.
//!
//! Lost replies, simulated: PostgreSQL has no fail point like MongoDB's `failCommand`, so in the
//! step with lost acknowledgements the endpoint itself drops its reply: it commits the
//! transaction, then the client is told the call failed (its reply never arrives). The client
//! cannot tell that from a call that failed before the commit, and pushes the same batch again;
//! the state must still come out exact. The output says which replies were dropped and what the
//! endpoint had committed before dropping them.
//!
//! Rows written per step are counted exactly from the rows' `xmin`: before and after each step
//! the example reads `_id` and `xmin` of every row of the three tables. Any insert or update
//! (idem's deletions are updates that set the tombstone) makes a new row version whose `xmin` is
//! the writing transaction's id, while a row that a statement only locks (`ON CONFLICT … DO
//! UPDATE … WHERE` a guard that stops the write) keeps its version and `xmin`. So the rows written
//! by a step are those that are new, gone, or carry another `xmin` afterwards: a row written
//! several times in one step counts once. The expected state is computed from the scenario's data
//! in plain Rust (no idem, no database) and printed beside the state read back, raw.
//!
//! Run it against PostgreSQL 15 or later (`scripts/demo-sync-pg` runs and checks it):
//!
//! ```text
//! eval "$(scripts/pg-server start 18)"
//! cargo run -p idem-examples --example offline_sync_postgres -- [--schema NAME]
//! cargo run -p idem-examples --example offline_sync_postgres -- --drop [--schema NAME]
//! scripts/pg-server stop
//! ```
//!
//! `POSTGRES_URI` names the server (`postgres://user@host:port/database`). `--schema` defaults to
//! `idem_offline_sync_demo`; it is dropped and created again at the start of each run, so every
//! run starts fresh, and every pooled connection works in it (its `search_path`). `--drop` only
//! drops it.
//!
//! Exit status: 0 when the state read back matches the expected state ("state matches: …"); 1
//! when it differs; 2 on a usage or connection problem, or a sync that failed for good.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, NoTls, Transaction};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use idem_core::postgres::{driver_error, Change, Store};
use idem_core::{Applied, BackendError, Error, Idempotent, Outcome};
use idem_examples::cli::{exit_code, Fatal, Flags};
use idem_examples::offline_sync::{
    badges_for, compare, describe_pushed, expected_state, report_step, scenario, Account, Award,
    Entry, State, SyncReply, MAX_ATTEMPTS, POINTS_PER_ENTRY, USER,
};

// ------------------------------------------------------------------------------------------------
// The server endpoint

/// The sync endpoint: a connection pool, the idem store, and the fault of the lost-reply step.
struct Endpoint {
    pool: Pool,
    store: Store,
    /// How many of the next replies to drop after their transaction committed.
    replies_to_lose: AtomicU32,
}

/// Why a sync call failed, as the client sees it.
enum SyncError {
    /// idem refused or failed.
    Idem(Error),
    /// The database failed outside idem's calls: beginning or committing the transaction, the
    /// read of the stored entries, a connection from the pool.
    Database(BackendError),
    /// The pool failed otherwise (closed, misconfigured).
    Pool(String),
    /// Simulated: the endpoint committed, and its reply (kept here only to show what the call
    /// had done) never reached the client.
    ReplyLost(Box<SyncReply>),
}

impl SyncError {
    /// Whether the same call may succeed if made again.
    fn is_retryable(&self) -> bool {
        match self {
            SyncError::Idem(error) => error.is_retryable(),
            SyncError::Database(error) => error.is_retryable(),
            SyncError::Pool(_) => false,
            SyncError::ReplyLost(_) => true,
        }
    }

    fn database(error: tokio_postgres::Error) -> Self {
        SyncError::Database(driver_error(error))
    }
}

impl From<Error> for SyncError {
    fn from(error: Error) -> Self {
        SyncError::Idem(error)
    }
}

impl From<PoolError> for SyncError {
    fn from(error: PoolError) -> Self {
        match error {
            PoolError::Backend(error) => SyncError::database(error),
            other => SyncError::Pool(other.to_string()),
        }
    }
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncError::Idem(error) => write!(f, "{error}"),
            SyncError::Database(error) => write!(f, "{error}"),
            SyncError::Pool(message) => write!(f, "connection pool: {message}"),
            SyncError::ReplyLost(_) => write!(f, "the reply was lost (simulated)"),
        }
    }
}

impl Endpoint {
    /// One sync call: stores a pushed batch and runs its effects in one transaction. Safe to
    /// call again with the same batch, whatever the previous call did before it failed: a
    /// failure before the commit rolls everything back, and a call whose commit went through
    /// is replayed as a no-op.
    async fn sync(&self, batch: &[Entry]) -> Result<SyncReply, SyncError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await.map_err(SyncError::database)?;
        // An error on the way drops `tx`, which rolls the transaction back.
        let reply = apply_batch(&self.store, &tx, batch).await?;
        tx.commit().await.map_err(SyncError::database)?;
        // Celebrating is the endpoint's own effect, for the awards its committed transaction
        // inserted; the reply only tells the client. So a lost reply loses no celebration, and
        // the retry, which inserts no award, celebrates nothing again.
        let lose = self
            .replies_to_lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lose {
            return Err(SyncError::ReplyLost(Box::new(reply)));
        }
        Ok(reply)
    }
}

/// The writes of one sync call, all in the caller's transaction `tx`.
///
/// An entry with `deleted_at` set is a deletion; the others are live copies. Each user in the
/// batch gets 10 points per entry the server holds (a deleted entry keeps the points it earned
/// while it was live; an entry deleted before it ever reached the server earns none), and every
/// award the rule derives from the user's stored live entries.
async fn apply_batch(
    store: &Store,
    tx: &Transaction<'_>,
    batch: &[Entry],
) -> Result<SyncReply, SyncError> {
    let (deletions, copies): (Vec<&Entry>, Vec<&Entry>) =
        batch.iter().partition(|entry| entry.deleted_at.is_some());

    // Deletions first: a deletion wins over any copy of the same entry in the batch. Deleting an
    // entry the server never saw stores it deleted, so its creation, replayed later, stays dead.
    let mut deleted = Vec::with_capacity(deletions.len());
    for entry in deletions {
        deleted.push(store.delete(tx, entry).await?);
    }

    // One statement for the whole batch. Per-entry refusals (an entry whose `created_at`
    // changed, say) are in the report and earn nothing; they do not fail the call, and leave the
    // transaction usable.
    let copies: Vec<Entry> = copies.into_iter().cloned().collect();
    let report = store.upsert_many(tx, &copies).await?;

    // Open an account for every user in the batch, if it is not open yet.
    let users: BTreeSet<&str> = batch.iter().map(|entry| entry.user_id.as_str()).collect();
    let accounts: Vec<Account> = users
        .iter()
        .map(|user| Account {
            user_id: (*user).to_owned(),
            points: 0,
        })
        .collect();
    store.insert_new(tx, &accounts).await?;

    // Points. Credit every entry the server holds as pushed — `Inserted`, `Updated` *or*
    // `Unchanged` — not only the `Inserted` ones. Here an entry and its credit commit together,
    // so an `Unchanged` entry was credited by the call that stored it; but an entry stored by
    // another path (an import, an endpoint without the transaction, as in the MongoDB version
    // of this example) would otherwise never earn its points. Crediting on every replay is safe
    // because the op id is derived from the entry (its id: user, entry id, creation time; not
    // its revision or text), so `apply_once` applies it once per entry however often, and by
    // however many devices, the entry is pushed. `Stale` (a newer revision is stored, and its
    // push credited the entry) and `Deleted` (settled while the entry was live, or never live)
    // earn nothing here.
    let mut credited = 0;
    let mut already_credited = 0;
    for (entry, outcome) in copies.iter().zip(report.outcomes()) {
        if !matches!(
            outcome,
            Ok(Outcome::Inserted | Outcome::Updated | Outcome::Unchanged)
        ) {
            continue;
        }
        let account = Account::derive_id(&entry.user_id)?;
        let op = entry.op_id("points")?;
        let credit = [Change::add("points", POINTS_PER_ENTRY)];
        if store
            .apply_once::<Account, _>(tx, account, &op, &credit)
            .await?
            == Applied::Applied
        {
            credited += 1;
        } else {
            already_credited += 1;
        }
    }

    // Awards: the full set the rule derives from what is stored (this transaction's writes
    // included), every time. `insert_new` reports which members this call inserted, so a
    // replay celebrates nothing again. (A member it refused would be in the report beside them;
    // an award has no field that could move.)
    let mut celebrated = Vec::new();
    for user in users {
        let live = live_created_at(tx, user).await?;
        let earned: Vec<Award> = badges_for(live)
            .into_iter()
            .map(|badge| Award {
                user_id: user.to_owned(),
                badge: badge.to_owned(),
            })
            .collect();
        celebrated.extend(store.insert_new(tx, &earned).await?.into_inserted());
    }

    Ok(SyncReply {
        entries: report,
        deletions: deleted,
        credited,
        already_credited,
        celebrated,
    })
}

/// The creation times of the stored entries of `user` that are not deleted, as `tx` sees them.
async fn live_created_at(tx: &Transaction<'_>, user: &str) -> Result<Vec<i64>, SyncError> {
    // The stored (camelCase) column names; a live entry has no `deletedAt`.
    let rows = tx
        .query(
            r#"SELECT "createdAt" FROM entries WHERE "userId" = $1 AND "deletedAt" IS NULL"#,
            &[&user],
        )
        .await
        .map_err(SyncError::database)?;
    rows.iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(SyncError::database)
}

// ------------------------------------------------------------------------------------------------
// The client

/// Pushes `batch` as a client does: on a failure that may pass (no reply, a lost connection) it
/// sends the very same batch again. Returns the reply and how many attempts failed.
async fn push(endpoint: &Endpoint, batch: &[Entry]) -> Result<(SyncReply, u32), SyncError> {
    let mut failed = 0;
    loop {
        match endpoint.sync(batch).await {
            Ok(reply) => return Ok((reply, failed)),
            Err(error) if error.is_retryable() && failed + 1 < MAX_ATTEMPTS => {
                failed += 1;
                println!("   attempt {failed} failed: {error}");
                if let SyncError::ReplyLost(lost) = &error {
                    println!(
                        "              (the endpoint had committed: {})",
                        summary(lost)
                    );
                }
                println!(
                    "   -> the client cannot know what was stored: it pushes the same batch again"
                );
                tokio::time::sleep(Duration::from_millis(50 * u64::from(failed))).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// A reply on one line.
fn summary(reply: &SyncReply) -> String {
    let mut parts = Vec::new();
    if !reply.entries.outcomes().is_empty() {
        let count = |outcome| reply.entries.count(outcome);
        parts.push(format!(
            "entries {} inserted, {} updated, {} unchanged",
            count(Outcome::Inserted),
            count(Outcome::Updated),
            count(Outcome::Unchanged)
        ));
    }
    parts.push(format!(
        "{} credited now, {} before",
        reply.credited, reply.already_credited
    ));
    let celebrated: Vec<&str> = reply.celebrated.iter().map(|a| a.badge.as_str()).collect();
    parts.push(if celebrated.is_empty() {
        "celebrated nothing new".to_owned()
    } else {
        format!("celebrated {}", celebrated.join(", "))
    });
    parts.join("; ")
}

// ------------------------------------------------------------------------------------------------
// The state, expected and actual; rows written

/// The tables of the example, as idem names them.
fn tables() -> [&'static str; 3] {
    [
        Entry::MODEL.collection(),
        Award::MODEL.collection(),
        Account::MODEL.collection(),
    ]
}

/// The state as stored, from the raw rows (not through the idem types).
async fn actual_state(pool: &Pool) -> Result<State, Fatal> {
    let client = pool.get().await?;
    let mut state = State::default();
    let entries = client
        .query(
            r#"SELECT "entryId", revision, text, "deletedAt" IS NOT NULL FROM entries"#,
            &[],
        )
        .await?;
    for row in entries {
        let entry_id: Option<String> = row.try_get(0)?;
        let entry_id = entry_id.unwrap_or_else(|| "(no entryId)".to_owned());
        if row.try_get::<_, bool>(3)? {
            state.deleted.insert(entry_id);
        } else {
            let revision: Option<i64> = row.try_get(1)?;
            let text: Option<String> = row.try_get(2)?;
            state.live.insert(
                entry_id,
                (
                    revision.unwrap_or(-1),
                    text.unwrap_or_else(|| "(no text)".to_owned()),
                ),
            );
        }
        state.stored.0 += 1;
    }
    for row in client.query("SELECT badge FROM awards", &[]).await? {
        let badge: Option<String> = row.try_get(0)?;
        state
            .awards
            .insert(badge.unwrap_or_else(|| "(no badge)".to_owned()));
        state.stored.1 += 1;
    }
    for row in client
        .query(r#"SELECT "userId", points FROM accounts"#, &[])
        .await?
    {
        let user: Option<String> = row.try_get(0)?;
        if user.as_deref() == Some(USER) {
            state.points = row.try_get::<_, Option<i64>>(1)?.unwrap_or(0);
        }
        state.stored.2 += 1;
    }
    Ok(state)
}

/// The balance of `USER`, as stored.
async fn balance(pool: &Pool) -> Result<i64, Fatal> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            r#"SELECT points FROM accounts WHERE "userId" = $1"#,
            &[&USER],
        )
        .await?;
    Ok(match row {
        Some(row) => row.try_get::<_, Option<i64>>(0)?.unwrap_or(0),
        None => 0,
    })
}

/// The row versions stored now: (table, `_id`) -> `xmin`, the id of the transaction that wrote
/// the row's current version.
async fn row_versions(pool: &Pool) -> Result<BTreeMap<(&'static str, String), String>, Fatal> {
    let client = pool.get().await?;
    let mut versions = BTreeMap::new();
    for table in tables() {
        let sql = format!(r#"SELECT "_id", xmin::text FROM "{table}""#);
        for row in client.query(&sql, &[]).await? {
            versions.insert((table, row.try_get(0)?), row.try_get(1)?);
        }
    }
    Ok(versions)
}

/// The rows written between two readings of `row_versions`: inserted (new), updated (another
/// `xmin`) or deleted (gone), each once.
fn rows_written(
    before: &BTreeMap<(&'static str, String), String>,
    after: &BTreeMap<(&'static str, String), String>,
) -> u64 {
    let changed = after
        .iter()
        .filter(|(row, xmin)| before.get(*row) != Some(*xmin))
        .count();
    let gone = before
        .keys()
        .filter(|row| !after.contains_key(*row))
        .count();
    (changed + gone) as u64
}

// ------------------------------------------------------------------------------------------------
// Running it

const DEFAULT_SCHEMA: &str = "idem_offline_sync_demo";
/// At most this many connections at once: the endpoint's, and the readings between steps.
const POOL_SIZE: usize = 4;
const USAGE: &str = "\
usage: offline_sync_postgres [--schema NAME]
       offline_sync_postgres --drop [--schema NAME]

Drops schema NAME (default: idem_offline_sync_demo; lowercase letters, digits and _) in the
database named by POSTGRES_URI, creates it again, plays the offline-sync scenario in it with every
push in one transaction, and compares the final state with the expected one. --drop only drops
the schema.";

#[tokio::main]
async fn main() -> ExitCode {
    exit_code("offline_sync_postgres", run()).await
}

/// An error and its sources, on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// Whether `name` is a schema name that needs no quoting anywhere (SQL, connection options).
fn plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

/// A pool of connections to `uri` that work in `schema`.
fn pool(uri: &str, schema: &str) -> Result<Pool, Fatal> {
    let mut config: tokio_postgres::Config = uri
        .parse()
        .map_err(|error| Fatal(format!("POSTGRES_URI: {error}")))?;
    // Fail fast when no server answers, unless the URI says otherwise.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_application_name().is_none() {
        config.application_name("idem-offline-sync");
    }
    // Every connection resolves the tables in the schema, from its first statement on.
    let search_path = format!("-c search_path={schema}");
    let options = match config.get_options() {
        Some(given) if !given.trim().is_empty() => format!("{given} {search_path}"),
        _ => search_path,
    };
    config.options(&options);
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .map_err(|error| Fatal(format!("connection pool: {error}")))
}

async fn run() -> Result<ExitCode, Fatal> {
    let mut schema = DEFAULT_SCHEMA.to_owned();
    let mut drop_only = false;
    let mut flags = Flags::new(std::env::args().skip(1), USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "--drop" => drop_only = true,
            "--schema" => schema = flags.value("--schema")?,
            other => return Err(flags.unexpected(other)),
        }
    }
    if !plain_identifier(&schema) {
        return Err(flags.error(&format!(
            "--schema {schema:?}: use lowercase letters, digits and _ (at most 63)"
        )));
    }
    let uri = std::env::var("POSTGRES_URI").map_err(|_| {
        Fatal(
            "POSTGRES_URI is not set: point it at a PostgreSQL server, for example \
             `eval \"$(scripts/pg-server start 18)\"`"
                .to_owned(),
        )
    })?;
    let pool = pool(&uri, &schema)?;
    let store = Store::new();
    let server = {
        let client = pool
            .get()
            .await
            .map_err(|error| Fatal(format!("cannot connect to POSTGRES_URI: {}", chain(&error))))?;
        client
            .batch_execute(&format!(r#"DROP SCHEMA IF EXISTS "{schema}" CASCADE"#))
            .await?;
        if drop_only {
            println!("dropped schema {schema}");
            return Ok(ExitCode::SUCCESS);
        }
        client
            .batch_execute(&format!(r#"CREATE SCHEMA "{schema}""#))
            .await?;
        store.ensure_table::<Entry, _>(&**client).await?;
        store.ensure_table::<Award, _>(&**client).await?;
        store.ensure_table::<Account, _>(&**client).await?;
        let version: String = client
            .query_one("SELECT current_setting('server_version')", &[])
            .await?
            .try_get(0)?;
        version
    };
    println!(
        "schema {schema} (fresh) on PostgreSQL {server}; user {USER:?}; {POINTS_PER_ENTRY} \
         points per entry"
    );
    println!(
        "endpoint: a deadpool-postgres pool of up to {POOL_SIZE} connections; each push runs in \
         one transaction"
    );
    let endpoint = Endpoint {
        pool,
        store,
        replies_to_lose: AtomicU32::new(0),
    };

    let steps = scenario();
    let mut lost_replies = (0, 0); // (dropped on purpose, failed attempts retried)
    for step in &steps {
        println!();
        println!("-- step {}: {}", step.label, step.title);
        let pushed: Vec<String> = step.batch.iter().map(describe_pushed).collect();
        println!("   push       {}", pushed.join(", "));
        let before = balance(&endpoint.pool).await?;
        let versions = row_versions(&endpoint.pool).await?;
        let lose = u32::try_from(step.lost_acks).unwrap_or(0);
        if lose > 0 {
            println!(
                "   fault      simulated: the endpoint commits its next {lose} transactions, then \
                 drops their replies (the client is told the call failed)"
            );
            endpoint.replies_to_lose.store(lose, Ordering::SeqCst);
            lost_replies.0 += lose;
        }
        let result = push(&endpoint, &step.batch).await;
        endpoint.replies_to_lose.store(0, Ordering::SeqCst);
        let (reply, failed) =
            result.map_err(|error| Fatal(format!("step {}: {error}", step.label)))?;
        lost_replies.1 += failed;
        let written = rows_written(&versions, &row_versions(&endpoint.pool).await?);
        let after = balance(&endpoint.pool).await?;
        report_step(&reply, failed, (before, after), written, "rows");
    }

    println!();
    println!("-- the final state");
    println!(
        "lost replies (simulated: committed, then the reply dropped): {} dropped, {} sync call(s) \
         failed and were retried",
        lost_replies.0, lost_replies.1
    );
    let expected = expected_state(&steps);
    let actual = actual_state(&endpoint.pool).await?;
    println!();
    let matches = compare(&expected, &actual, "rows");
    println!();
    if matches {
        println!(
            "state matches: {} live entries, {} deleted, {} awards, {} points",
            expected.live.len(),
            expected.deleted.len(),
            expected.awards.len(),
            expected.points
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("STATE DIFFERS: the rows marked X do not match the expected state");
        Ok(ExitCode::FAILURE)
    }
}
