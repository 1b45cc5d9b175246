//! Shared helpers of the integration tests: the server they run against, a database per test,
//! and exact counts of the commands a test sends, from the driver's command monitoring.

pub mod allocations;
mod backend_effects;
mod backend_races;
pub mod backends;
pub mod chaos;
pub mod chaos_workload;
pub mod fault_proxy;
pub mod fixtures;
pub mod mysql_chaos;
pub mod mysql_proxy;
pub mod mysql_rows;
pub mod pg_chaos;
pub mod pg_proxy;
pub mod proxy;
pub mod sql_rows;
pub mod sqlite_rows;

use std::sync::{Arc, Mutex, PoisonError};

use mongodb::bson::{doc, Document, RawDocumentBuf};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

/// The server under test: `MONGODB_URI`, which `scripts/test` sets after starting one.
///
/// A missing server fails the test instead of skipping it: a skipped server test proves nothing.
pub fn server_uri() -> String {
    std::env::var("MONGODB_URI").unwrap_or_else(|_| {
        panic!(
            "MONGODB_URI is not set: run `scripts/test`, which starts a test server, \
             or point MONGODB_URI at a MongoDB-compatible server (with retryWrites=false)"
        )
    })
}

/// What a client sent: each command's name, and how many documents the server said each write
/// command inserted or modified.
#[derive(Clone, Default)]
pub struct CommandLog(Arc<Mutex<Commands>>);

/// The commands recorded since the last [`CommandLog::take`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Commands {
    /// Command names in the order they were sent: one per round trip.
    pub names: Vec<String>,
    /// Documents inserted, upserted, modified or deleted, from the servers' replies.
    pub documents_written: u64,
    /// Updates sent as an aggregation pipeline (an `update` statement's or a `findAndModify`'s
    /// update that is an array), which some MongoDB-protocol engines refuse.
    pub update_pipelines: u64,
}

impl Commands {
    /// How many round trips (commands) were made.
    pub fn round_trips(&self) -> usize {
        self.names.len()
    }
}

impl CommandLog {
    fn with<R>(&self, f: impl FnOnce(&mut Commands) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn observe(&self, event: CommandEvent) {
        match event {
            CommandEvent::Started(started) => self.with(|log| {
                log.update_pipelines += update_pipelines(&started.command_name, &started.command);
                log.names.push(started.command_name);
            }),
            CommandEvent::Succeeded(succeeded) => {
                let written = documents_written(&succeeded.command_name, &succeeded.reply);
                self.with(|log| log.documents_written += written);
            }
            _ => {}
        }
    }

    /// Everything recorded since the last `take`, and forget it.
    pub fn take(&self) -> Commands {
        self.with(std::mem::take)
    }
}

/// How many of a command's updates are pipelines.
fn update_pipelines(command: &str, body: &Document) -> u64 {
    let is_pipeline = |update: Option<&mongodb::bson::Bson>| {
        matches!(update, Some(mongodb::bson::Bson::Array(_)))
    };
    match command {
        "findAndModify" => u64::from(is_pipeline(body.get("update"))),
        "update" => body.get_array("updates").map_or(0, |statements| {
            statements
                .iter()
                .filter_map(mongodb::bson::Bson::as_document)
                .filter(|statement| is_pipeline(statement.get("u")))
                .count() as u64
        }),
        _ => 0,
    }
}

/// The documents a write command's reply says it wrote. A `findAndModify` reply tells an insert
/// (`lastErrorObject.upserted`) but not whether a conditional replacement changed the document
/// it matched, so only its inserts are counted: tests of a single upsert that writes nothing
/// compare the stored bytes before and after as well.
fn documents_written(command: &str, reply: &Document) -> u64 {
    let count = |field: &str| match reply.get(field) {
        Some(mongodb::bson::Bson::Int32(n)) => *n as u64,
        Some(mongodb::bson::Bson::Int64(n)) => *n as u64,
        _ => 0,
    };
    match command {
        "insert" | "delete" => count("n"),
        "findAndModify" => reply
            .get_document("lastErrorObject")
            .map_or(0, |status| u64::from(status.contains_key("upserted"))),
        "update" => {
            count("nModified")
                + reply
                    .get_array("upserted")
                    .map_or(0, |upserted| upserted.len() as u64)
        }
        _ => 0,
    }
}

/// A client of the server under test, recording every command it starts.
pub async fn monitored_client() -> (Client, CommandLog) {
    monitored_client_named(None).await
}

/// A monitored client announcing `app_name`, so fail points can target it alone.
async fn monitored_client_named(app_name: Option<String>) -> (Client, CommandLog) {
    let mut options = ClientOptions::parse(server_uri())
        .await
        .expect("MONGODB_URI parses");
    options.app_name = app_name;
    let log = CommandLog::default();
    let recorder = log.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event: CommandEvent| {
        recorder.observe(event)
    }));
    options.retry_writes = Some(false);
    (
        Client::with_options(options).expect("client options are valid"),
        log,
    )
}

/// A fresh, empty database for one test, named after it, on a monitored client whose app name
/// is the database's name (see [`lose_next_acknowledgements`]).
pub async fn fresh_database(test: &str) -> (Database, CommandLog) {
    let name = format!("idem_{}_{}", test, std::process::id());
    let (client, log) = monitored_client_named(Some(name.clone())).await;
    let database = client.database(&name);
    database.drop().await.expect("dropping the test database");
    let _ = log.take();
    (database, log)
}

/// The documents of `collection` exactly as the server holds them, sorted by `_id`: compared byte
/// for byte, so a refusal that changed anything (a NaN, a -0.0, the order of fields) shows.
pub async fn raw_documents(database: &Database, collection: &str) -> Vec<RawDocumentBuf> {
    let mut cursor = database
        .collection::<RawDocumentBuf>(collection)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .expect("reading back");
    let mut documents = Vec::new();
    while cursor.advance().await.expect("reading back") {
        documents.push(cursor.current().to_raw_document_buf());
    }
    documents
}

/// Every document of `collection`, parsed, sorted by `_id`.
pub async fn stored_documents(database: &Database, collection: &str) -> Vec<Document> {
    let mut cursor = database
        .collection::<Document>(collection)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .expect("reading back");
    let mut documents = Vec::new();
    while cursor.advance().await.expect("reading back") {
        documents.push(cursor.deserialize_current().expect("a document"));
    }
    documents
}

/// Arms the server's `failCommand` fail point for the client of `database` (from
/// [`fresh_database`]) alone, so tests running beside it are untouched: its next `times`
/// commands named in `commands` are applied, then answered with a write-concern error, as if
/// the acknowledgement were lost.
pub async fn lose_next_acknowledgements(database: &Database, commands: &[&str], times: i32) {
    // WriteConcernFailed, as when a real write concern times out: unlike a shutdown code, it
    // leaves the server selectable, so the retry goes at once.
    let lost = doc! {
        "writeConcernError": {
            "code": 64,
            "codeName": "WriteConcernFailed",
            "errmsg": "acknowledgement lost (injected)",
        },
    };
    arm_fail_point(database, commands, times, lost).await;
}

/// Arms the `failCommand` fail point for the client of `database` alone: its next command named
/// `command` waits `millis` before the server runs it, so a test can change the data in between.
pub async fn delay_next(database: &Database, command: &str, millis: i32) {
    let delay = doc! { "blockConnection": true, "blockTimeMS": millis };
    arm_fail_point(database, &[command], 1, delay).await;
}

/// Held by a test while it arms and uses the `failCommand` fail point: the server keeps one
/// configuration of it, so two tests of one binary arming it at once would each undo the
/// other's.
pub fn fail_point_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    &LOCK
}

/// Arms the `failCommand` fail point for the client of `database` alone: its next command named
/// `command` fails with the server error `code`, as a server that refuses it would answer.
pub async fn refuse_next(database: &Database, command: &str, code: i32) {
    arm_fail_point(database, &[command], 1, doc! { "errorCode": code }).await;
}

/// `failCommand` for the next `times` of `commands` sent by the client of `database`, with
/// `effect` (what the fail point does to them). The caller holds [`fail_point_lock`]: the
/// suites share one process, and a test that armed the fail point without it had another's
/// configuration replace its own (two tests failed so under four test threads).
async fn arm_fail_point(database: &Database, commands: &[&str], times: i32, effect: Document) {
    assert!(
        fail_point_lock().try_lock().is_err(),
        "hold fail_point_lock() while the fail point is armed and used"
    );
    let mut data = doc! { "failCommands": commands, "appName": database.name() };
    data.extend(effect);
    database
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": data,
        })
        .await
        .expect(
            "the server accepts the failCommand fail point (start it with --enable-test-commands)",
        );
}

/// Disarms the `failCommand` fail point; the caller holds [`fail_point_lock`], as for arming it.
pub async fn clear_fail_point(client: &Client) {
    assert!(
        fail_point_lock().try_lock().is_err(),
        "hold fail_point_lock() while the fail point is armed and used"
    );
    client
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .expect("turning the fail point off");
}
