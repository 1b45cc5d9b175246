//! Offline-first, end to end, with the same derive on the devices and on the server.
//!
//! Two devices of one user keep their journal in SQLite files of their own. Each records entries
//! offline: the entry's id is derived on the device (`entry.id()`) before it ever reaches the
//! server, and the entry waits in the device's outbox, written in the same device transaction.
//! Then the devices push their outboxes to the server, which in one transaction per push upserts
//! the entries (`upsert_many`), credits 10 points per entry once (`apply_once`, keyed by the
//! entry's `op_id`) and derives the user's awards (`insert_new`). Along the way:
//!
//! - the phone's first reply is lost after the server committed, and the app is relaunched with
//!   its outbox still full: it pushes the same entries again;
//! - the laptop pushes an overlapping copy of an entry the phone created;
//! - the phone deletes an entry, and the laptop re-pushes its live copy of it;
//! - each device plays each award's celebration once: the server answers every award the user
//!   holds, and the device remembers in its own file the ones it played, so a lost reply delays a
//!   celebration and never repeats one.
//!
//! The example checks itself: the devices and the server hold the same ids, the server one row
//! per entry, each award once, the points once per entry, and each device played each
//! celebration once. The server is an embedded SQLite file unless `POSTGRES_URI` names a
//! PostgreSQL server, reached through sqlx as an axum + sqlx service would (the same code over
//! `idem_core::Backend`; each push is a sqlx transaction there, in a schema
//! `idem_offline_devices` the example makes afresh):
//!
//! ```text
//! cargo run -p idem-examples --example offline_devices            # nothing to install
//! POSTGRES_URI=postgres://… cargo run -p idem-examples --example offline_devices
//! ```
//!
//! Exit status 0 when every check holds, 1 when one does not, 2 when something failed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use idem_core::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use idem_core::sqlx::{
    self, ConnectOptions, Connection, Executor, PgConnection, Row, SqliteConnection,
};
use idem_core::{Backend, Change, Idempotent};
use idem_examples::offline_sync::{badges_for, Account, Award, Entry, DAY_0, DAY_MS, USER};

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Points credited per entry.
const POINTS: i64 = 10;

/// One device: its SQLite file, with idem's `entries` table, the outbox and the celebrations it
/// played.
struct Device {
    name: &'static str,
    path: PathBuf,
    connection: SqliteConnection,
    store: idem_core::sqlite::Store,
}

impl Device {
    /// Opens (or, after a relaunch, reopens) the device's file.
    async fn open(name: &'static str, path: &Path) -> Result<Device, Failure> {
        let mut connection = sqlite(path).await?;
        let store = idem_core::sqlite::Store::new();
        store.ensure_table::<Entry>(&mut connection).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS outbox (entry_id TEXT PRIMARY KEY); \
             CREATE TABLE IF NOT EXISTS celebrated (badge TEXT PRIMARY KEY)",
        )
        .execute(&mut connection)
        .await?;
        Ok(Device {
            name,
            path: path.to_owned(),
            connection,
            store,
        })
    }

    /// Records `entry` offline: stored on the device under the id it derives, and queued.
    async fn record(&mut self, entry: &Entry) -> Result<(), Failure> {
        let mut transaction = self.connection.begin().await?;
        match entry.deleted_at {
            Some(_) => self.store.delete(&mut transaction, entry).await.map(drop)?,
            None => self.store.upsert(&mut transaction, entry).await.map(drop)?,
        }
        sqlx::query("INSERT OR IGNORE INTO outbox (entry_id) VALUES (?1)")
            .bind(entry.id()?.to_string())
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    /// The queued entries, as the device stores them.
    async fn outbox(&mut self) -> Result<Vec<Entry>, Failure> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT entry_id FROM outbox ORDER BY entry_id")
            .fetch_all(&mut self.connection)
            .await?;
        let mut entries = Vec::new();
        for id in ids {
            let entry = self
                .store
                .get::<Entry>(&mut self.connection, id.parse()?)
                .await?;
            entries.extend(entry);
        }
        Ok(entries)
    }

    /// [`Device::push`] with its reply kept, each celebration it played noted under the
    /// device's name.
    async fn push_and_play(
        &mut self,
        server: &Server,
        played: &mut Vec<(&'static str, String)>,
    ) -> Result<(), Failure> {
        let name = self.name;
        let celebrated = self.push(server, false).await?;
        played.extend(celebrated.into_iter().map(|badge| (name, badge)));
        Ok(())
    }

    /// Pushes the outbox; on a reply, empties what was sent and plays each award not played on
    /// this device yet. Returns the awards it played now.
    async fn push(&mut self, server: &Server, lose_reply: bool) -> Result<Vec<String>, Failure> {
        let batch = self.outbox().await?;
        let reply = server.push(&batch, lose_reply).await;
        let awards = match reply {
            Ok(awards) => awards,
            Err(lost) => {
                println!(
                    "  {}: pushed {} entries, no reply ({lost})",
                    self.name,
                    batch.len()
                );
                return Ok(Vec::new());
            }
        };
        let mut transaction = self.connection.begin().await?;
        for entry in &batch {
            sqlx::query("DELETE FROM outbox WHERE entry_id = ?1")
                .bind(entry.id()?.to_string())
                .execute(&mut *transaction)
                .await?;
        }
        let mut played = Vec::new();
        for badge in awards {
            // The device's own record of what it played: inserted once, played once.
            let new = sqlx::query("INSERT OR IGNORE INTO celebrated (badge) VALUES (?1)")
                .bind(&badge)
                .execute(&mut *transaction)
                .await?
                .rows_affected();
            if new == 1 {
                played.push(badge);
            }
        }
        transaction.commit().await?;
        println!(
            "  {}: pushed {}; celebrates {}",
            self.name,
            entries(batch.len()),
            if played.is_empty() {
                "nothing new".to_owned()
            } else {
                played.join(", ")
            }
        );
        Ok(played)
    }

    /// Closes the app; [`Device::open`] relaunches it on the same file.
    async fn quit(self) -> Result<PathBuf, Failure> {
        self.connection.close().await?;
        Ok(self.path)
    }
}

/// The server's store: an embedded SQLite file, or PostgreSQL.
enum Server {
    Sqlite {
        connection: tokio::sync::Mutex<SqliteConnection>,
        store: idem_core::sqlite::Store,
    },
    Postgres {
        connection: tokio::sync::Mutex<PgConnection>,
        store: idem_core::postgres::Store,
    },
}

impl Server {
    async fn start(directory: &Path) -> Result<Server, Failure> {
        let server = match std::env::var("POSTGRES_URI") {
            Ok(uri) => {
                let mut connection = PgConnection::connect(&uri).await?;
                // A schema of its own, made afresh: nothing else of the database is touched.
                connection
                    .execute(sqlx::raw_sql(
                        "SET client_min_messages = warning; \
                         DROP SCHEMA IF EXISTS idem_offline_devices CASCADE; \
                         CREATE SCHEMA idem_offline_devices; \
                         SET search_path = idem_offline_devices",
                    ))
                    .await?;
                let store = idem_core::postgres::Store::new();
                println!("server: PostgreSQL (POSTGRES_URI), through sqlx");
                Server::Postgres {
                    connection: tokio::sync::Mutex::new(connection),
                    store,
                }
            }
            Err(_) => {
                let path = directory.join("server.db");
                println!("server: embedded SQLite, {}", path.display());
                Server::Sqlite {
                    connection: tokio::sync::Mutex::new(sqlite(&path).await?),
                    store: idem_core::sqlite::Store::new(),
                }
            }
        };
        match &server {
            Server::Sqlite { connection, store } => {
                let mut connection = connection.lock().await;
                let idem = store.on(&mut connection);
                prepare(&idem).await?;
            }
            Server::Postgres { connection, store } => {
                prepare(&store.on(&mut *connection.lock().await)).await?
            }
        }
        Ok(server)
    }

    /// One push, in one transaction: the entries, their points, the awards. The reply is every
    /// award the user holds; with `lose_reply`, the transaction commits and the reply is lost.
    async fn push(&self, batch: &[Entry], lose_reply: bool) -> Result<Vec<String>, Failure> {
        let awards = match self {
            Server::Sqlite { connection, store } => {
                let mut connection = connection.lock().await;
                let mut transaction = connection.begin().await?;
                let live = live_created_at_sqlite(&mut transaction, batch).await?;
                let awards = handle(&store.on(&mut transaction), batch, live).await?;
                transaction.commit().await?;
                awards
            }
            Server::Postgres { connection, store } => {
                let mut connection = connection.lock().await;
                let mut transaction = connection.begin().await?;
                let live = live_created_at_postgres(&mut transaction, batch).await?;
                let awards = handle(&store.on(&mut transaction), batch, live).await?;
                transaction.commit().await?;
                awards
            }
        };
        match lose_reply {
            true => Err("the reply was lost after the server committed".into()),
            false => Ok(awards),
        }
    }

    /// Every stored row of `collection`, as (id, JSON of the row).
    async fn ids(&self, collection: &str) -> Result<Vec<String>, Failure> {
        let sql = format!("SELECT \"_id\" FROM \"{collection}\" ORDER BY \"_id\"");
        Ok(match self {
            Server::Sqlite { connection, .. } => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&mut *connection.lock().await)
                    .await?
            }
            Server::Postgres { connection, .. } => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&mut *connection.lock().await)
                    .await?
            }
        })
    }

    async fn points(&self) -> Result<i64, Failure> {
        let id = Account {
            user_id: USER.into(),
            points: 0,
        }
        .id()?;
        let account = match self {
            Server::Sqlite { connection, store } => {
                store
                    .get::<Account>(&mut *connection.lock().await, id)
                    .await?
            }
            Server::Postgres { connection, store } => {
                store
                    .get::<Account, _>(&mut *connection.lock().await, id)
                    .await?
            }
        };
        Ok(account.map_or(0, |account| account.points))
    }
}

/// The server's tables, and the user's account (its points move only through `apply_once`).
async fn prepare<B: Backend>(server: &B) -> Result<(), Failure> {
    server.ensure_schema::<Entry>().await?;
    server.ensure_schema::<Award>().await?;
    server.ensure_schema::<Account>().await?;
    let account = Account {
        user_id: USER.into(),
        points: 0,
    };
    server.upsert(&account).await?;
    Ok(())
}

/// The push's work, written once for every backend.
async fn handle<B: Backend>(
    server: &B,
    batch: &[Entry],
    live: Vec<i64>,
) -> Result<Vec<String>, Failure> {
    let (deleted, written): (Vec<&Entry>, Vec<&Entry>) =
        batch.iter().partition(|entry| entry.deleted_at.is_some());
    let written: Vec<Entry> = written.into_iter().cloned().collect();
    let report = server.upsert_many(&written).await?;
    for (entry, outcome) in written.iter().zip(report.outcomes()) {
        let outcome = outcome.as_ref().map_err(|error| error.to_string())?;
        println!("    server: {} {}", entry.entry_id, outcome.name());
    }
    for entry in deleted {
        let deletion = server.delete(entry).await?;
        println!("    server: {} {}", entry.entry_id, deletion.name());
    }
    let account = Account {
        user_id: USER.into(),
        points: 0,
    }
    .id()?;
    for entry in batch {
        let op = entry.op_id("points")?;
        server
            .apply_once::<Account>(account, &op, &[Change::add("points", POINTS)])
            .await?;
    }
    let awards: Vec<Award> = badges_for(live)
        .into_iter()
        .map(|badge| Award {
            user_id: USER.into(),
            badge: badge.into(),
        })
        .collect();
    server.insert_new(&awards).await?;
    // Every award the user holds, earned by this push or an earlier one (a deletion never takes
    // one back): what a device missed under a lost reply, it plays on the next.
    let mut held = Vec::new();
    for badge in ["first-entry", "five-entries", "ten-entries", "streak-3"] {
        let award = Award {
            user_id: USER.into(),
            badge: badge.into(),
        };
        if server.get::<Award>(award.id()?).await?.is_some() {
            held.push(award.badge);
        }
    }
    Ok(held)
}

/// The creation times of the user's live entries once this push is stored: those stored and not
/// deleted, with the batch's applied over them (the rule needs all of them).
async fn live_created_at_sqlite(
    connection: &mut SqliteConnection,
    batch: &[Entry],
) -> Result<Vec<i64>, Failure> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'entries'",
    )
    .fetch_one(&mut *connection)
    .await?;
    let stored: Vec<(String, i64, bool)> = match exists {
        0 => Vec::new(),
        _ => sqlx::query(
            "SELECT \"entryId\", \"createdAt\", \"deletedAt\" IS NOT NULL FROM entries \
             WHERE \"userId\" = ?1",
        )
        .bind(USER)
        .fetch_all(&mut *connection)
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect(),
    };
    Ok(live_after(stored, batch))
}

async fn live_created_at_postgres(
    connection: &mut PgConnection,
    batch: &[Entry],
) -> Result<Vec<i64>, Failure> {
    let stored = sqlx::query(
        "SELECT \"entryId\", \"createdAt\", \"deletedAt\" IS NOT NULL FROM entries \
         WHERE \"userId\" = $1",
    )
    .bind(USER)
    .fetch_all(connection)
    .await?
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    Ok(live_after(stored, batch))
}

/// `stored` (entry id, created at, deleted) with `batch` applied: a deletion sticks.
fn live_after(stored: Vec<(String, i64, bool)>, batch: &[Entry]) -> Vec<i64> {
    let mut entries: std::collections::BTreeMap<String, (i64, bool)> = stored
        .into_iter()
        .map(|(id, created_at, deleted)| (id, (created_at, deleted)))
        .collect();
    for entry in batch {
        let slot = entries
            .entry(entry.entry_id.clone())
            .or_insert((entry.created_at, false));
        slot.1 |= entry.deleted_at.is_some();
    }
    entries
        .values()
        .filter(|(_, deleted)| !deleted)
        .map(|(at, _)| *at)
        .collect()
}

/// `n` entries, in words.
fn entries(n: usize) -> String {
    match n {
        0 => "nothing".to_owned(),
        1 => "1 entry".to_owned(),
        n => format!("{n} entries"),
    }
}

async fn sqlite(path: &Path) -> Result<SqliteConnection, Failure> {
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10))
        .connect()
        .await?)
}

fn entry(entry_id: &str, day: i64, text: &str) -> Entry {
    Entry {
        user_id: USER.to_owned(),
        entry_id: entry_id.to_owned(),
        created_at: DAY_0 + day * DAY_MS + 8 * 3_600_000,
        revision: 1,
        text: text.to_owned(),
        deleted_at: None,
    }
}

async fn run() -> Result<Vec<String>, Failure> {
    let directory =
        std::env::temp_dir().join(format!("idem-offline-devices-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory)?;
    let server = Server::start(&directory).await?;

    let e1 = entry("e1", 0, "Started a journal.");
    let e2 = entry("e2", 1, "Rain; read two chapters.");
    let e3 = entry("e3", 2, "Long run by the river.");
    let mut played: Vec<(&'static str, String)> = Vec::new();

    println!("1. offline: the phone records e1 and e2, the laptop e3 and a copy of e1");
    let mut phone = Device::open("phone", &directory.join("phone.db")).await?;
    let mut laptop = Device::open("laptop", &directory.join("laptop.db")).await?;
    for entry in [&e1, &e2] {
        phone.record(entry).await?;
    }
    for entry in [&e3, &e1] {
        laptop.record(entry).await?;
    }

    println!("2. the phone pushes; the server commits and the reply is lost");
    phone.push(&server, true).await?;
    println!("3. the phone app is relaunched, its outbox still full, and pushes again");
    let path = phone.quit().await?;
    let mut phone = Device::open("phone", &path).await?;
    phone.push_and_play(&server, &mut played).await?;

    println!("4. the laptop pushes e3 and its overlapping copy of e1");
    laptop.push_and_play(&server, &mut played).await?;

    println!("5. the phone deletes e2; the laptop, which had a copy, re-pushes it live");
    let e2_deleted = Entry {
        deleted_at: Some(DAY_0 + 3 * DAY_MS),
        ..e2.clone()
    };
    phone.record(&e2_deleted).await?;
    phone.push_and_play(&server, &mut played).await?;
    laptop.record(&e2).await?;
    laptop.push_and_play(&server, &mut played).await?;

    println!("6. both push again with nothing queued");
    phone.push_and_play(&server, &mut played).await?;
    laptop.push_and_play(&server, &mut played).await?;

    // The checks.
    let mut problems = Vec::new();
    let derived: BTreeSet<String> = [&e1, &e2, &e3]
        .iter()
        .map(|entry| entry.id().map(|id| id.to_string()))
        .collect::<Result<_, _>>()?;
    let on_server: BTreeSet<String> = server.ids("entries").await?.into_iter().collect();
    if server.ids("entries").await?.len() != 3 || on_server != derived {
        problems.push(format!(
            "server entries {on_server:?}, devices derived {derived:?}"
        ));
    }
    for device in [&mut phone, &mut laptop] {
        let rows: Vec<String> = sqlx::query_scalar("SELECT \"_id\" FROM entries")
            .fetch_all(&mut device.connection)
            .await?;
        if rows.iter().any(|id| !derived.contains(id)) {
            problems.push(format!(
                "{} holds ids the server does not: {rows:?}",
                device.name
            ));
        }
    }
    let deleted = server_entry(&server, &e2).await?;
    if deleted.and_then(|entry| entry.deleted_at).is_none() {
        problems.push("e2 came back to life after its deletion".into());
    }
    let awards = server.ids("awards").await?.len();
    if awards != 2 {
        problems.push(format!(
            "{awards} awards stored, expected first-entry and streak-3"
        ));
    }
    let points = server.points().await?;
    if points != 3 * POINTS {
        problems.push(format!(
            "{points} points, expected {} (once per entry)",
            3 * POINTS
        ));
    }
    let mut expected_played = vec![
        ("laptop", "first-entry".to_owned()),
        ("laptop", "streak-3".to_owned()),
        ("phone", "first-entry".to_owned()),
        ("phone", "streak-3".to_owned()),
    ];
    expected_played.sort();
    played.sort();
    if played != expected_played {
        problems.push(format!(
            "celebrations played {played:?}, expected {expected_played:?}"
        ));
    }
    println!(
        "server: {} entries (ids as derived on the devices), {awards} awards, {points} points",
        on_server.len()
    );
    println!("celebrations played: {played:?}");
    let _ = std::fs::remove_dir_all(&directory);
    Ok(problems)
}

async fn server_entry(server: &Server, entry: &Entry) -> Result<Option<Entry>, Failure> {
    let id = entry.id()?;
    Ok(match server {
        Server::Sqlite { connection, store } => {
            store
                .get::<Entry>(&mut *connection.lock().await, id)
                .await?
        }
        Server::Postgres { connection, store } => {
            store
                .get::<Entry, _>(&mut *connection.lock().await, id)
                .await?
        }
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(problems) if problems.is_empty() => {
            println!("every check holds: one row per entry, the same ids everywhere, points and awards once, each celebration played once per device");
            ExitCode::SUCCESS
        }
        Ok(problems) => {
            for problem in problems {
                eprintln!("offline_devices: {problem}");
            }
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("offline_devices: {error}");
            ExitCode::from(2)
        }
    }
}
