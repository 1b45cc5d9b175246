//! The server away, MongoDB only: a client whose server cannot be reached (the MongoDB driver's
//! server selection, which PostgreSQL's client has no counterpart of), and a server stopped and
//! started again, which needs a server of the test's own: these cases start their own
//! SecantusDB on a persistent temporary storage path, stop it and start it again on the same
//! port and path; a guard kills it when the test ends, passing or not. (Lost replies and killed
//! connections on PostgreSQL: `pg_chaos.rs`, and the lost acknowledgement in `races.rs`.)

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use idem_core::mongo::Store;
use idem_core::{ErrorKind, Outcome};
use idem_tests::fixtures::{entry, Entry};
use idem_tests::{fresh_database, raw_documents as raw, stored_documents};
use mongodb::bson::{doc, Bson};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;

use crate::support::{scored_post, text_key, ScoredPost};

/// A client of `uri` recording the commands it starts and the documents the replies say were
/// written; `hook` sees each succeeded command's name.
#[derive(Clone, Default)]
struct Recorder {
    names: Arc<Mutex<Vec<String>>>,
    written: Arc<Mutex<u64>>,
    hook: Arc<Mutex<Option<Hook>>>,
}

type Hook = Box<dyn FnMut(&str) + Send>;

impl Recorder {
    async fn client(&self, uri: &str) -> Client {
        let mut options = ClientOptions::parse(uri).await.expect("the URI parses");
        let recorder = self.clone();
        options.command_event_handler =
            Some(EventHandler::callback(move |event| recorder.observe(event)));
        options.retry_writes = Some(false);
        Client::with_options(options).expect("client options are valid")
    }

    fn observe(&self, event: CommandEvent) {
        match event {
            CommandEvent::Started(started) => lock(&self.names).push(started.command_name),
            CommandEvent::Succeeded(succeeded) => {
                let count = |field: &str| match succeeded.reply.get(field) {
                    Some(Bson::Int32(n)) => *n as u64,
                    Some(Bson::Int64(n)) => *n as u64,
                    _ => 0,
                };
                *lock(&self.written) += match succeeded.command_name.as_str() {
                    "insert" | "delete" => count("n"),
                    "update" => {
                        count("nModified")
                            + succeeded
                                .reply
                                .get_array("upserted")
                                .map_or(0, |u| u.len() as u64)
                    }
                    _ => 0,
                };
                if let Some(hook) = lock(&self.hook).as_mut() {
                    hook(&succeeded.command_name);
                }
            }
            _ => {}
        }
    }

    fn take(&self) -> (Vec<String>, u64) {
        (
            std::mem::take(&mut *lock(&self.names)),
            std::mem::take(&mut *lock(&self.written)),
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// How long the unreachable store's driver looks for a server before it gives up.
const SERVER_SELECTION: Duration = Duration::from_millis(1_500);

/// A store on a client of a closed loopback port, with a short server selection timeout.
async fn unreachable_store(database: &str) -> (Store, Recorder) {
    let closed = free_port();
    let recorder = Recorder::default();
    let dead = recorder
        .client(&format!(
            "mongodb://127.0.0.1:{closed}/?retryWrites=false&directConnection=true\
             &serverSelectionTimeoutMS={}",
            SERVER_SELECTION.as_millis()
        ))
        .await;
    (Store::new(dead.database(database)), recorder)
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_retryable_error_and_the_same_call_then_succeeds() {
    let (live_database, log) = fresh_database("unreachable").await;
    let (unreachable, recorder) = unreachable_store(live_database.name()).await;

    let doc = scored_post("hello");
    let started = Instant::now();
    let error = unreachable.upsert(&doc).await.unwrap_err();
    // One server selection per call: the first call (which checks the natural-key index before
    // it writes) gives up after one, where two would take at least twice as long.
    let waited = started.elapsed();
    assert!(
        waited >= SERVER_SELECTION && waited < SERVER_SELECTION * 2,
        "{waited:?} for a server selection of {SERVER_SELECTION:?}"
    );
    match error.kind() {
        ErrorKind::Backend { source } => {
            assert_eq!(error.document().collection, "posts");
            assert_eq!(source.backend(), "MongoDB");
            let source = error.as_mongo().expect("the driver's error, kept whole");
            assert!(
                matches!(
                    source.kind.as_ref(),
                    mongodb::error::ErrorKind::ServerSelection { .. }
                ),
                "{source:?}"
            );
        }
        _ => panic!("expected ErrorKind::Backend, got {error:?}"),
    }
    assert!(error.is_retryable(), "{error}");
    assert!(!error.is_refusal());
    let message = error.to_string();
    assert!(message.contains("`posts`"), "{message}");
    assert!(message.contains("MongoDB: "), "{message}");
    // The batch call fails the same way, as a whole.
    let batch = unreachable.upsert_many(std::slice::from_ref(&doc)).await;
    assert!(matches!(
        &batch,
        Err(e) if matches!(e.kind(), ErrorKind::Backend { .. }) && e.is_retryable()
    ));
    let (names, written) = recorder.take();
    assert!(names.is_empty(), "no server, no command: {names:?}");
    assert_eq!(written, 0);
    assert!(raw(&live_database, "posts").await.is_empty());

    // The same call against the live server succeeds, once.
    let live = Store::new(live_database.clone());
    assert_eq!(live.upsert(&doc).await.unwrap(), Outcome::Inserted);
    assert_eq!(live.upsert(&doc).await.unwrap(), Outcome::Unchanged);
    let _ = log.take();
    assert_eq!(raw(&live_database, "posts").await.len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_error_names_the_document_being_written() {
    let (unreachable, _recorder) = unreachable_store("idem_unreachable_names").await;
    let error = unreachable.upsert(&scored_post("hello")).await.unwrap_err();
    // `ErrorKind::Backend`'s document is "the document being written, or the collection alone for
    // collection-wide calls"; an upsert of one document is not collection-wide.
    assert_eq!(
        error.document().natural_key.parts(),
        [text_key("slug", "hello"), text_key("lang", "en")],
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("`posts` {slug: \"hello\", lang: \"en\"}: MongoDB: "),
        "{error}"
    );
}

/// A SecantusDB of this test's own on a persistent storage path, stopped (SIGTERM, then SIGKILL
/// after 15 s) and its files removed when dropped, so a failing test leaves nothing running.
struct OwnServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl OwnServer {
    fn binary() -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let binary = root.join(".venv/bin/secantusd-py");
        if !binary.exists() {
            let status = Command::new(root.join("scripts/test-server"))
                .arg("install")
                .status()
                .expect("running scripts/test-server install");
            assert!(status.success(), "scripts/test-server install failed");
        }
        binary
    }

    /// Starts a server on a free port with a fresh storage directory, and waits for it.
    async fn start(test: &str) -> OwnServer {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("contract-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).expect("creating the server's directory");
        // An empty config disables the auto-discovery of ./secantusd.toml and ~/.secantus/.
        std::fs::write(dir.join("secantusd.toml"), "").expect("writing an empty config");
        let mut server = OwnServer {
            child: None,
            port: free_port(),
            dir,
        };
        server.spawn();
        server.wait_ready().await;
        server
    }

    fn uri(&self) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?retryWrites=false&directConnection=true\
             &serverMonitoringMode=poll&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=3000",
            self.port
        )
    }

    /// Starts the server process on this port and storage path (after a stop).
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "the server is running already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("opening the server log");
        let child = Command::new(Self::binary())
            .arg("--config")
            .arg(self.dir.join("secantusd.toml"))
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--storage-path")
            .arg(self.dir.join("data"))
            .arg("--enable-test-commands")
            .current_dir(&self.dir)
            .env("TMPDIR", self.dir.join("tmp"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("starting secantusd-py");
        self.child = Some(child);
    }

    /// Waits until the server answers `ping`.
    async fn wait_ready(&mut self) {
        let (port, dir) = (self.port, self.dir.clone());
        let child = &mut self.child;
        wait_for_ping(port, &dir, || {
            child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .map(|status| status.to_string())
        })
        .await;
    }

    /// Stops the server: SIGTERM (a clean shutdown), SIGKILL after 15 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Waits until the server on `port` answers `ping` (30 s at most); `exited` tells whether its
/// process is gone.
async fn wait_for_ping(port: u16, dir: &Path, mut exited: impl FnMut() -> Option<String>) {
    let uri =
        format!("mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=500");
    let client = Client::with_uri_str(&uri).await.expect("the URI parses");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = exited() {
            panic!(
                "secantusd-py exited during startup ({status}); log: {}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
        }
        if client
            .database("admin")
            .run_command(doc! { "ping": 1 })
            .await
            .is_ok()
        {
            return;
        }
        assert!(Instant::now() < deadline, "the server did not answer ping");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn the_same_call_succeeds_after_the_server_returns() {
    let mut server = OwnServer::start("server_returns").await;
    let recorder = Recorder::default();
    let client = recorder.client(&server.uri()).await;
    let store = Store::new(client.database("idem_server_returns"));
    let original = scored_post("hello");
    assert_eq!(store.upsert(&original).await.unwrap(), Outcome::Inserted);
    let edited = ScoredPost {
        body: "Edited while the server was away.".into(),
        ..original.clone()
    };

    server.stop();
    let _ = recorder.take();
    let error = store.upsert(&edited).await.unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Backend { .. }),
        "{error:?}"
    );
    assert!(error.is_retryable(), "{error}");
    assert_eq!(recorder.take().1, 0, "nothing written while it was away");

    server.spawn();
    server.wait_ready().await;
    // The stored document survived the restart, untouched.
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get_str("body").unwrap(), "First post.");

    // The same call now succeeds, and converges.
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Unchanged);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].get_str("_id").unwrap(),
        original.id().unwrap().to_string()
    );
    assert_eq!(stored[0].get_str("body").unwrap(), edited.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_in_the_middle_of_a_batch_converges_on_retry() {
    let server = Arc::new(Mutex::new(OwnServer::start("restart_mid_batch").await));
    let uri = lock(&server).uri();
    let recorder = Recorder::default();
    let client = recorder.client(&uri).await;
    let store = Store::new(client.database("idem_restart_mid_batch"));

    // Half the keys are stored at revision 1.
    let keys: Vec<String> = (0..40).map(|n| format!("e{n:02}")).collect();
    let old: Vec<Entry> = keys[..20].iter().map(|k| entry(k, 1, "old")).collect();
    store.upsert_many(&old).await.unwrap();

    // The batch: every key at revision 2, with bodies large enough (512 KiB) that the server's
    // 16 MiB command limit splits it into two chunks, plus stale copies of some keys.
    let big = "y".repeat(512 * 1024);
    let mut batch: Vec<Entry> = keys.iter().map(|k| entry(k, 2, &big)).collect();
    batch.extend(keys[..5].iter().map(|k| entry(k, 1, "stale copy")));

    // Stop the server right after the first chunk's write command is answered.
    let weak: Weak<Mutex<OwnServer>> = Arc::downgrade(&server);
    *lock(&recorder.hook) = Some(Box::new(move |command| {
        if command == "update" {
            if let Some(server) = weak.upgrade() {
                lock(&server).stop();
            }
        }
    }));
    let _ = recorder.take();
    let interrupted = store.upsert_many(&batch).await;
    *lock(&recorder.hook) = None;
    let (names, _) = recorder.take();
    assert_eq!(
        names.iter().filter(|n| *n == "update").count(),
        1,
        "the batch was cut after its first chunk: {names:?}"
    );
    let error = interrupted.expect_err("the second chunk cannot reach a stopped server");
    assert!(error.is_retryable(), "{error}");

    let (port, dir) = {
        let mut server = lock(&server);
        server.spawn();
        (server.port, server.dir.clone())
    };
    wait_for_ping(port, &dir, || {
        let mut server = lock(&server);
        let child = server.child.as_mut()?;
        child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.to_string())
    })
    .await;

    // The retry converges: one document per key, every one at its newest revision.
    let report = store.upsert_many(&batch).await.unwrap();
    eprintln!("interrupted by: {error}\nthe retry after the restart: {report}");
    assert_eq!(report.refused(), 0, "{report}");
    let outcomes = report.outcomes();
    for (doc, outcome) in batch.iter().zip(outcomes) {
        let outcome = *outcome.as_ref().unwrap();
        if doc.revision == 1 {
            assert_eq!(outcome, Outcome::Stale, "{}", doc.entry_id);
        } else {
            assert!(
                matches!(
                    outcome,
                    Outcome::Inserted | Outcome::Updated | Outcome::Unchanged
                ),
                "{}: {outcome}",
                doc.entry_id
            );
        }
    }
    let mut stored = stored_documents(store.database(), "entries").await;
    stored.sort_by(|a, b| a.get_str("entryId").ok().cmp(&b.get_str("entryId").ok()));
    assert_eq!(stored.len(), keys.len());
    for (document, key) in stored.iter().zip(&keys) {
        assert_eq!(document.get_str("entryId").unwrap(), key);
        assert_eq!(document.get_i64("revision").unwrap(), 2, "{key}");
        assert_eq!(document.get_str("text").unwrap().len(), big.len(), "{key}");
        assert_eq!(
            document.get_str("_id").unwrap(),
            entry(key, 2, "").id().unwrap().to_string()
        );
    }
    // And a third run writes nothing.
    let _ = recorder.take();
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Unchanged), keys.len(), "{report}");
    assert_eq!(recorder.take().1, 0);
}
