//! An offline-first journaling client syncing to a server endpoint, with exact side effects.
//!
//! A journal app keeps entries on the device and pushes them in batches whenever it is online:
//! after a relaunch it replays what it already sent, a second device pushes its older copies, and
//! the network loses acknowledgements. Every push runs effects on the server: 10 points per entry,
//! and awards ("first-entry", "five-entries", "ten-entries", "streak-3") celebrated when earned.
//! This example shows that with idem each of those converges to the same exact state however the
//! pushes are repeated:
//!
//! - `Entry` (keys `user_id` + `entry_id`, id timestamp `created_at`, version `revision`,
//!   tombstone `deleted_at`) is written with `Store::upsert_many`: a replay is `Unchanged`, an
//!   older revision is `Stale`, two revisions of one entry in a batch collapse to the newest, and
//!   a deleted entry is never resurrected (`Deleted`);
//! - points move only through `Store::apply_once` (`Change::add`) keyed by `entry.op_id("points")`, so a
//!   replayed entry never credits twice;
//! - awards are a derived set written with `Store::insert_new`, which returns exactly the awards
//!   this call inserted: only those are celebrated.
//!
//! The server "endpoint" is the function `sync`; the client is `push`, which retries a failed
//! sync call the way a real client would. In the step with lost acknowledgements the server's
//! `failCommand` fail point (scoped to this client's `appName`) applies the next two `update`
//! commands but fails their replies. At the end the expected state, computed from the scenario's
//! data in plain Rust (no idem, no database), is printed beside the state read back from the
//! database, raw. The documents written are counted from the driver's command monitoring. The
//! types, the award rule, the scenario and the expected state are in `src/offline_sync.rs`,
//! shared with the PostgreSQL version of this example, `offline_sync_postgres.rs`.
//!
//! Run it against any MongoDB-compatible server (`scripts/demo-sync` runs and checks it):
//!
//! ```text
//! eval "$(scripts/test-server start)"
//! cargo run -p idem-examples --example offline_sync -- [--database NAME]
//! cargo run -p idem-examples --example offline_sync -- --drop [--database NAME]
//! scripts/test-server stop
//! ```
//!
//! `MONGODB_URI` names the server (`retryWrites=false` is fine: idem does not need retryable
//! writes). `--database` defaults to `idem_offline_sync_demo`; it is dropped at the start of each
//! run, so every run starts fresh. `--drop` only drops it. Lost acknowledgements need a server
//! that accepts `configureFailPoint` (mongod or SecantusDB with test commands enabled); on any
//! other server that step runs without them and says so.
//!
//! Exit status: 0 when the state read back matches the expected state ("state matches: …"); 1
//! when it differs; 2 on a usage or connection problem, or a sync that failed for good.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::mongo::Store;
use idem_core::{Applied, Change, DocumentRef, Error, ErrorKind, Idempotent, Outcome};
use idem_examples::cli::{exit_code, Fatal, Flags};
use idem_examples::offline_sync::{
    badges_for, compare, describe_pushed, expected_state, report_step, scenario, Account, Award,
    Entry, State, SyncReply, MAX_ATTEMPTS, POINTS_PER_ENTRY, USER,
};
use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;

// ------------------------------------------------------------------------------------------------
// The server endpoint

/// The sync endpoint: stores a pushed batch and runs its effects. Safe to call again with the
/// same batch, whatever the previous call did before it failed.
///
/// An entry with `deleted_at` set is a deletion; the others are live copies. Each user in the
/// batch gets 10 points per entry the server holds (a deleted entry keeps the points it earned
/// while it was live; an entry deleted before it ever reached the server earns none), and every
/// award the rule derives from the user's stored live entries.
async fn sync(store: &Store, batch: &[Entry]) -> Result<SyncReply, Error> {
    let (deletions, copies): (Vec<&Entry>, Vec<&Entry>) =
        batch.iter().partition(|entry| entry.deleted_at.is_some());

    // Deletions first: a deletion wins over any copy of the same entry in the batch. Deleting an
    // entry the server never saw stores it deleted, so its creation, replayed later, stays dead.
    let mut deleted = Vec::with_capacity(deletions.len());
    for entry in deletions {
        deleted.push(store.delete(entry).await?);
    }

    // One read and at most one write for the whole batch. Per-entry refusals (an entry whose
    // `created_at` changed, say) are in the report and earn nothing; they do not fail the call.
    let copies: Vec<Entry> = copies.into_iter().cloned().collect();
    let report = store.upsert_many(&copies).await?;

    // Open an account for every user in the batch, if it is not open yet.
    let users: BTreeSet<&str> = batch.iter().map(|entry| entry.user_id.as_str()).collect();
    let accounts: Vec<Account> = users
        .iter()
        .map(|user| Account {
            user_id: (*user).to_owned(),
            points: 0,
        })
        .collect();
    store.insert_new(&accounts).await?;

    // Points. Credit every entry the server holds as pushed — `Inserted`, `Updated` *or*
    // `Unchanged` — not only the `Inserted` ones: when the acknowledgement of the write that
    // inserted an entry is lost, this call fails before crediting, and its retry finds the entry
    // stored and reports `Unchanged`. Crediting only on `Inserted` would lose those points for
    // good. Crediting on every replay is safe because the op id is derived from the entry (its
    // id: user, entry id, creation time; not its revision or text), so `apply_once` applies it
    // once per entry however often, and by however many devices, the entry is pushed.
    // `Stale` (a newer revision is stored, and its push credited the entry) and `Deleted`
    // (settled while the entry was live, or never live) earn nothing here.
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
        if store.apply_once::<Account>(account, &op, &credit).await? == Applied::Applied {
            credited += 1;
        } else {
            already_credited += 1;
        }
    }

    // Awards: the full set the rule derives from what is stored, every time. `insert_new`
    // reports which members this call inserted, so a replay celebrates nothing again. (A member
    // it refused would be in the report beside them; an award has no field that could move.)
    let mut celebrated = Vec::new();
    for user in users {
        let live = live_entries(store, user).await?;
        let earned: Vec<Award> = badges_for(live.iter().map(|entry| entry.created_at))
            .into_iter()
            .map(|badge| Award {
                user_id: user.to_owned(),
                badge: badge.to_owned(),
            })
            .collect();
        celebrated.extend(store.insert_new(&earned).await?.into_inserted());
    }

    Ok(SyncReply {
        entries: report,
        deletions: deleted,
        credited,
        already_credited,
        celebrated,
    })
}

/// The stored entries of `user` that are not deleted.
async fn live_entries(store: &Store, user: &str) -> Result<Vec<Entry>, Error> {
    // The stored (camelCase) names; a live entry has no `deletedAt`, which `null` matches.
    let filter = doc! { "userId": user, "deletedAt": null };
    let read = async {
        let mut cursor = store.collection::<Entry>().find(filter).await?;
        let mut entries = Vec::new();
        while cursor.advance().await? {
            entries.push(cursor.deserialize_current()?);
        }
        Ok(entries)
    };
    // As an idem error, so that the client decides on retries the same way for every failure.
    read.await.map_err(|source| {
        Error::new(
            DocumentRef::collection(&Entry::MODEL),
            ErrorKind::Backend {
                source: idem_core::mongo::driver_error(source),
            },
        )
    })
}

// ------------------------------------------------------------------------------------------------
// The client

/// Pushes `batch` as a client does: on a failure that may pass (no answer, an unconfirmed write)
/// it sends the very same batch again. Returns the reply and how many attempts failed.
async fn push(store: &Store, batch: &[Entry]) -> Result<(SyncReply, u32), Error> {
    let mut failed = 0;
    loop {
        match sync(store, batch).await {
            Ok(reply) => return Ok((reply, failed)),
            Err(error) if error.is_retryable() && failed + 1 < MAX_ATTEMPTS => {
                failed += 1;
                println!("   attempt {failed} failed: {}", brief(&error));
                println!(
                    "   -> the client cannot know what was stored: it pushes the same batch again"
                );
                tokio::time::sleep(Duration::from_millis(50 * u64::from(failed))).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The error as one line.
fn brief(error: &Error) -> String {
    match error.as_mongo() {
        Some(source) => format!("{}: {}", error.document(), driver_brief(source)),
        None => error.to_string(),
    }
}

/// A driver error as one line: its own text ends with the server's raw reply, in hex.
fn driver_brief(error: &mongodb::error::Error) -> String {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(failure) => format!("{} (code {})", failure.message, failure.code),
        ErrorKind::Write(WriteFailure::WriteError(failure)) => {
            format!("{} (code {})", failure.message, failure.code)
        }
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => format!(
            "the write was not confirmed: {} (code {})",
            concern.message, concern.code
        ),
        _ => error.to_string(),
    }
}

// ------------------------------------------------------------------------------------------------
// The state, expected and actual

/// The state as stored, from the raw documents (not through the idem types).
async fn actual_state(store: &Store) -> Result<State, Fatal> {
    let database = store.database();
    let mut state = State::default();
    for stored in raw_documents(database, "entries").await? {
        let entry_id = stored
            .get_str("entryId")
            .unwrap_or("(no entryId)")
            .to_owned();
        if stored
            .get("deletedAt")
            .is_some_and(|marker| marker != &Bson::Null)
        {
            state.deleted.insert(entry_id);
        } else {
            let revision = stored.get("revision").and_then(integer).unwrap_or(-1);
            let text = stored.get_str("text").unwrap_or("(no text)").to_owned();
            state.live.insert(entry_id, (revision, text));
        }
        state.stored.0 += 1;
    }
    for stored in raw_documents(database, "awards").await? {
        let badge = stored.get_str("badge").unwrap_or("(no badge)").to_owned();
        state.awards.insert(badge);
        state.stored.1 += 1;
    }
    for stored in raw_documents(database, "accounts").await? {
        if stored.get_str("userId") == Ok(USER) {
            state.points = stored.get("points").and_then(integer).unwrap_or(0);
        }
        state.stored.2 += 1;
    }
    Ok(state)
}

/// The balance of `USER`, as stored.
async fn balance(store: &Store) -> Result<i64, Fatal> {
    let account = store
        .database()
        .collection::<Document>("accounts")
        .find_one(doc! { "userId": USER })
        .await?;
    Ok(account
        .and_then(|account| account.get("points").and_then(integer))
        .unwrap_or(0))
}

async fn raw_documents(database: &mongodb::Database, name: &str) -> Result<Vec<Document>, Fatal> {
    let mut cursor = database.collection::<Document>(name).find(doc! {}).await?;
    let mut documents = Vec::new();
    while cursor.advance().await? {
        documents.push(cursor.deserialize_current()?);
    }
    Ok(documents)
}

fn integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

// ------------------------------------------------------------------------------------------------
// Running it

const DEFAULT_DATABASE: &str = "idem_offline_sync_demo";
const USAGE: &str = "\
usage: offline_sync [--database NAME]
       offline_sync --drop [--database NAME]

Drops database NAME (default: idem_offline_sync_demo) on the server named by MONGODB_URI, plays
the offline-sync scenario against it, and compares the final state with the expected one.
--drop only drops the database.";

#[tokio::main]
async fn main() -> ExitCode {
    exit_code("offline_sync", run()).await
}

async fn run() -> Result<ExitCode, Fatal> {
    let mut database = DEFAULT_DATABASE.to_owned();
    let mut drop_only = false;
    let mut flags = Flags::new(std::env::args().skip(1), USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "--drop" => drop_only = true,
            "--database" => database = flags.value("--database")?,
            other => return Err(flags.unexpected(other)),
        }
    }
    let uri = std::env::var("MONGODB_URI").map_err(|_| {
        Fatal(
            "MONGODB_URI is not set: point it at a MongoDB-compatible server, for example \
             `eval \"$(scripts/test-server start)\"`"
                .to_owned(),
        )
    })?;
    // The fail point only hits commands of this client, even on a shared server.
    let app_name = format!("idem-offline-sync-{}", std::process::id());
    let (client, monitor) = monitored_client(&uri, &app_name).await?;
    let store = Store::new(client.database(&database));
    store.database().drop().await?;
    if drop_only {
        println!("dropped database {database}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("database {database} (fresh); user {USER:?}; {POINTS_PER_ENTRY} points per entry");
    store.ensure_indexes::<Entry>().await?;
    store.ensure_indexes::<Award>().await?;
    store.ensure_indexes::<Account>().await?;

    let steps = scenario();
    let mut lost_acks = (0, 0); // (injected, failed attempts retried)
    let mut injection_unavailable = false;
    for step in &steps {
        println!();
        println!("-- step {}: {}", step.label, step.title);
        let pushed: Vec<String> = step.batch.iter().map(describe_pushed).collect();
        println!("   push       {}", pushed.join(", "));
        let before = balance(&store).await?;
        let _ = monitor.take();
        let armed = if step.lost_acks > 0 {
            match lose_acknowledgements(&client, &app_name, step.lost_acks).await {
                Ok(()) => {
                    println!(
                        "   fault      the next {} updates are applied and their replies lost",
                        step.lost_acks
                    );
                    lost_acks.0 += step.lost_acks;
                    true
                }
                Err(error) => {
                    println!(
                        "   fault      fault injection unavailable (configureFailPoint: {}); \
                         no acknowledgement is lost",
                        driver_brief(&error)
                    );
                    injection_unavailable = true;
                    false
                }
            }
        } else {
            false
        };
        let result = push(&store, &step.batch).await;
        if armed {
            clear_fail_point(&client).await?;
        }
        let (reply, failed) =
            result.map_err(|error| Fatal(format!("step {}: {error}", step.label)))?;
        lost_acks.1 += failed;
        let written = monitor.take().documents_written;
        let after = balance(&store).await?;
        report_step(&reply, failed, (before, after), written, "documents");
    }

    println!();
    println!("-- the final state");
    if injection_unavailable {
        println!("lost acknowledgements: fault injection unavailable on this server");
    } else {
        println!(
            "lost acknowledgements: {} armed, {} sync call(s) failed and were retried",
            lost_acks.0, lost_acks.1
        );
    }
    let expected = expected_state(&steps);
    let actual = actual_state(&store).await?;
    println!();
    let matches = compare(&expected, &actual, "documents");
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

/// Arms the `failCommand` fail point: the next `times` `update` commands of client `app_name`
/// are applied, then answered with a write-concern error (a lost acknowledgement).
async fn lose_acknowledgements(
    client: &Client,
    app_name: &str,
    times: i32,
) -> mongodb::error::Result<()> {
    client
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": {
                "failCommands": ["update"],
                "appName": app_name,
                // WriteConcernFailed, as when a real write concern times out: unlike a
                // shutdown code, it leaves the server selectable, so the retry goes at once.
                "writeConcernError": {
                    "code": 64,
                    "codeName": "WriteConcernFailed",
                    "errmsg": "acknowledgement lost (injected)",
                },
            },
        })
        .await
        .map(drop)
}

async fn clear_fail_point(client: &Client) -> mongodb::error::Result<()> {
    client
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .map(drop)
}

// ------------------------------------------------------------------------------------------------
// Command monitoring

/// What the server said it wrote, from command monitoring.
#[derive(Clone, Default)]
struct Monitor(Arc<Mutex<Commands>>);

#[derive(Default)]
struct Commands {
    /// Documents inserted, upserted or modified, as the write commands' replies report (also
    /// when the reply carries a write-concern error: the write was applied).
    documents_written: u64,
}

impl Monitor {
    fn observe(&self, event: CommandEvent) {
        let CommandEvent::Succeeded(succeeded) = event else {
            return;
        };
        let reply = &succeeded.reply;
        let count = |field: &str| reply.get(field).and_then(integer).unwrap_or(0).max(0) as u64;
        let written = match succeeded.command_name.as_str() {
            "update" => count("nModified") + reply.get_array("upserted").map_or(0, Vec::len) as u64,
            "insert" => count("n"),
            _ => 0,
        };
        let mut commands = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        commands.documents_written += written;
    }

    /// Everything recorded so far; starts over.
    fn take(&self) -> Commands {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A client of `uri`, named `app_name`, whose commands `Monitor` records.
async fn monitored_client(uri: &str, app_name: &str) -> Result<(Client, Monitor), Fatal> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|error| Fatal(format!("MONGODB_URI: {error}")))?;
    // Fail fast when no server answers, unless the URI says otherwise.
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    options.app_name = Some(app_name.to_owned());
    let monitor = Monitor::default();
    let recorder = monitor.clone();
    options.command_event_handler =
        Some(EventHandler::callback(move |event| recorder.observe(event)));
    Ok((Client::with_options(options)?, monitor))
}
