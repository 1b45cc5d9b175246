//! Ingesting a folder of blog posts into MongoDB, idempotently.
//!
//! Shows the whole idem workflow on the README's `Post`: a struct deriving
//! `Idempotent` (keys `slug` + `lang`, id timestamp `published_at`, volatile `fetched_at`, frozen
//! `author_id`), `Store::ensure_indexes`, and one `Store::upsert` per post. Run it as often as you
//! like: the first run inserts every post, a re-run writes nothing (`Unchanged`), an edited post
//! is `Updated`, and an edit that would change a frozen field — the author, or the publication
//! time, which feeds the id — is refused with `FrozenFieldChanged` and leaves the stored post
//! intact. The documents actually written are counted from the driver's command monitoring, so
//! "nothing written" is the server's word, not idem's.
//!
//! Each post is a JSON file in the data folder (`*.json`, read in file-name order):
//!
//! ```json
//! { "slug": "hello-world", "lang": "en", "publishedAt": 1704704400000,
//!   "title": "Hello", "authorId": "author-ada", "body": "First post." }
//! ```
//!
//! `publishedAt` is in milliseconds since the Unix epoch. The bundled sample data is in
//! `examples/data/posts/`.
//!
//! Without `MONGODB_URI` (or with `--sqlite PATH`) it runs on an embedded SQLite file instead,
//! nothing to install: `cargo run -p idem-examples --example blog_ingest` twice shows every post
//! `Inserted`, then `Unchanged` with 0 rows written. The file defaults to `idem_blog_demo.db` in
//! the system's temporary directory; `--drop` deletes it.
//!
//! Run it against any MongoDB-compatible server (`scripts/demo-blog` runs the full story):
//!
//! ```text
//! eval "$(scripts/test-server start)"
//! cargo run -p idem-examples --example blog_ingest -- [--data DIR] [--database NAME]
//! cargo run -p idem-examples --example blog_ingest -- --show SLUG LANG [--database NAME]
//! cargo run -p idem-examples --example blog_ingest -- --drop [--database NAME]
//! scripts/test-server stop
//! ```
//!
//! `MONGODB_URI` names the server (use `retryWrites=false` where the server has no retryable
//! writes; idem does not need them). `--database` defaults to `idem_blog_demo`. `--show` prints
//! the stored document of one post, raw, as relaxed extended JSON; `--drop` drops the database.
//!
//! With `RUST_LOG` set (`RUST_LOG=idem=info`, or `idem=debug` for contention retries and batch
//! splits too), idem's `tracing` spans and events go to stderr, one line per call as it closes
//! (collection, id, outcome, round trips, retries), beside the table on stdout:
//!
//! ```text
//! RUST_LOG=idem=info cargo run -p idem-examples --example blog_ingest
//! ```
//!
//! Exit status: 0 when every post was written or unchanged; 1 when a post was refused or a write
//! failed (each refusal is printed in full); 2 on a usage, data or connection problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_core::mongo::Store;
use idem_core::{Error, ErrorKind, Id, Idempotent, Outcome};
use idem_examples::cli::{exit_code, Fatal, Flags};
use mongodb::bson::{doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use serde::{Deserialize, Serialize};

/// A blog post as stored: the README's quick-start type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
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

/// A post as it is written in a data file: everything but `fetched_at`, which ingestion sets.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PostFile {
    slug: String,
    lang: String,
    published_at: i64,
    title: String,
    author_id: String,
    body: String,
}

impl PostFile {
    fn into_post(self, fetched_at: i64) -> Post {
        Post {
            slug: self.slug,
            lang: self.lang,
            published_at: self.published_at,
            title: self.title,
            body: self.body,
            fetched_at,
            author_id: self.author_id,
        }
    }
}

const DEFAULT_DATABASE: &str = "idem_blog_demo";
const USAGE: &str = "\
usage: blog_ingest [--data DIR] [--database NAME | --sqlite PATH]
       blog_ingest --show SLUG LANG [--database NAME | --sqlite PATH]
       blog_ingest --drop [--database NAME | --sqlite PATH]

Upserts every post (*.json) of DIR (default: the bundled examples/data/posts) into the `posts`
collection of database NAME (default: idem_blog_demo) on the server named by MONGODB_URI, or,
without MONGODB_URI or with --sqlite, into the `posts` table of the SQLite file PATH (default:
idem_blog_demo.db in the temporary directory), and prints one row per post with its outcome.
--show prints one stored post; --drop drops the database (deletes the file).";

/// What the command line asks for.
enum Mode {
    Ingest { data: PathBuf },
    Show { slug: String, lang: String },
    Drop,
}

struct Args {
    mode: Mode,
    database: String,
    /// The SQLite file, when the posts go to one.
    sqlite: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        trace_to_stderr();
    }
    exit_code("blog_ingest", run()).await
}

/// Prints idem's spans as each call closes, and its events, to stderr, filtered by `RUST_LOG`.
fn trace_to_stderr() {
    use tracing_subscriber::fmt::format::FmtSpan;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .init();
}

async fn run() -> Result<ExitCode, Fatal> {
    let args = match parse_args(std::env::args().skip(1))? {
        Some(args) => args,
        None => {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let uri = match (std::env::var("MONGODB_URI"), &args.sqlite) {
        (Ok(uri), None) => uri,
        (_, sqlite) => {
            let path = sqlite
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join(format!("{DEFAULT_DATABASE}.db")));
            return run_sqlite(args.mode, &path).await;
        }
    };
    let (client, monitor) = monitored_client(&uri).await?;
    let store = Store::new(client.database(&args.database));
    match args.mode {
        Mode::Ingest { data } => {
            let target = Target::Mongo { store, monitor };
            ingest(&target, &data).await
        }
        Mode::Show { slug, lang } => show(&store, &slug, &lang).await,
        Mode::Drop => {
            store.database().drop().await?;
            println!("dropped database {}", args.database);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The same modes on the SQLite file `path`.
async fn run_sqlite(mode: Mode, path: &Path) -> Result<ExitCode, Fatal> {
    use idem_core::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    use idem_core::sqlx::ConnectOptions;
    if let Mode::Drop = mode {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        println!("deleted {}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let connection = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .connect()
        .await
        .map_err(|error| Fatal(format!("opening {}: {error}", path.display())))?;
    println!("SQLite file {}", path.display());
    let target = Target::Sqlite {
        store: idem_core::sqlite::Store::new(),
        connection: tokio::sync::Mutex::new(connection),
    };
    match mode {
        Mode::Ingest { data } => ingest(&target, &data).await,
        Mode::Show { slug, lang } => {
            let Target::Sqlite { store, connection } = &target else {
                unreachable!("a SQLite target")
            };
            let key = Post {
                slug: slug.clone(),
                lang: lang.clone(),
                published_at: 0,
                title: String::new(),
                body: String::new(),
                fetched_at: 0,
                author_id: String::new(),
            }
            .natural_key();
            let mut connection = connection.lock().await;
            match store.find::<Post>(&mut connection, &key).await? {
                Some(post) => {
                    println!("{}", serde_json::to_string_pretty(&post)?);
                    println!("_id: {}", post.id()?);
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    println!("no stored post with slug {slug:?} and lang {lang:?}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Mode::Drop => unreachable!("handled above"),
    }
}

/// Where the posts go.
enum Target {
    Mongo {
        store: Store,
        monitor: Monitor,
    },
    Sqlite {
        store: idem_core::sqlite::Store,
        connection: tokio::sync::Mutex<idem_core::sqlx::SqliteConnection>,
    },
}

impl Target {
    async fn ensure(&self) -> Result<(), Error> {
        match self {
            Target::Mongo { store, .. } => store.ensure_indexes::<Post>().await,
            Target::Sqlite { store, connection } => {
                store
                    .ensure_table::<Post>(&mut *connection.lock().await)
                    .await
            }
        }
    }

    async fn upsert(&self, post: &Post) -> Result<Outcome, Error> {
        match self {
            Target::Mongo { store, .. } => store.upsert(post).await,
            Target::Sqlite { store, connection } => {
                store.upsert(&mut *connection.lock().await, post).await
            }
        }
    }

    /// Each stored post's write marker, by id. Every write stamps what it stores with a fresh
    /// marker (`idemWrite`), so the posts whose marker is new or changed after a run are exactly
    /// the posts the run wrote: a count no `findAndModify` reply gives, since it does not say
    /// whether its conditional replacement changed the document.
    async fn write_markers(&self) -> Result<BTreeMap<String, String>, Fatal> {
        match self {
            Target::Mongo { store, .. } => mongo_write_markers(store).await,
            Target::Sqlite { connection, .. } => {
                use idem_core::sqlx::Row;
                let rows = idem_core::sqlx::query("SELECT \"_id\", \"idemWrite\" FROM posts")
                    .fetch_all(&mut *connection.lock().await)
                    .await
                    .map_err(|error| Fatal(format!("reading the write markers: {error}")))?;
                Ok(rows
                    .iter()
                    .map(|row| {
                        (
                            row.get(0),
                            row.get::<Option<String>, _>(1).unwrap_or_default(),
                        )
                    })
                    .collect())
            }
        }
    }

    /// The commands sent since the last call, where the driver counts them.
    fn sent(&self) -> Option<String> {
        match self {
            Target::Mongo { monitor, .. } => Some(monitor.take().describe()),
            Target::Sqlite { .. } => None,
        }
    }

    /// How many posts are stored, and where.
    async fn stored(&self) -> Result<String, Fatal> {
        match self {
            Target::Mongo { store, .. } => {
                let stored = store
                    .collection::<Post>()
                    .count_documents(doc! {})
                    .await
                    .map_err(|error| Fatal(format!("counting the stored posts: {error}")))?;
                Ok(format!(
                    "collection `{}` holds {stored} documents",
                    Post::MODEL.collection()
                ))
            }
            Target::Sqlite { connection, .. } => {
                let stored: i64 = idem_core::sqlx::query_scalar("SELECT count(*) FROM posts")
                    .fetch_one(&mut *connection.lock().await)
                    .await
                    .map_err(|error| Fatal(format!("counting the stored posts: {error}")))?;
                Ok(format!(
                    "table `{}` holds {stored} rows",
                    Post::MODEL.collection()
                ))
            }
        }
    }
}

/// `None` for `--help`.
fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, Fatal> {
    let mut data = None;
    let mut show = None;
    let mut drop = false;
    let mut database = None;
    let mut sqlite = None;
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--drop" => drop = true,
            "--data" => data = Some(PathBuf::from(flags.value("--data")?)),
            "--database" => database = Some(flags.value("--database")?),
            "--sqlite" => sqlite = Some(PathBuf::from(flags.value("--sqlite")?)),
            "--show" => {
                let slug = flags.value("--show")?;
                let lang = flags.value("--show")?;
                show = Some((slug, lang));
            }
            other => return Err(flags.unexpected(other)),
        }
    }
    let mode = match (show, drop, data) {
        (Some(_), true, _) | (Some(_), _, Some(_)) | (_, true, Some(_)) => {
            return Err(flags.error("--data, --show and --drop exclude each other"))
        }
        (Some((slug, lang)), false, None) => Mode::Show { slug, lang },
        (None, true, None) => Mode::Drop,
        (None, false, data) => Mode::Ingest {
            data: data.unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("data")
                    .join("posts")
            }),
        },
    };
    if database.is_some() && sqlite.is_some() {
        return Err(flags.error("--database and --sqlite exclude each other"));
    }
    Ok(Some(Args {
        mode,
        database: database.unwrap_or_else(|| DEFAULT_DATABASE.to_owned()),
        sqlite,
    }))
}

/// Upserts every post of `data` and prints the report. Exit status 1 if any post was not stored.
async fn ingest(target: &Target, data: &Path) -> Result<ExitCode, Fatal> {
    // One clock reading per run: `fetched_at` is volatile, so it never makes a post "changed".
    let fetched_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let fetched_at = i64::try_from(fetched_at)?;
    let posts: Vec<Post> = read_posts(data)?
        .into_iter()
        .map(|file| file.into_post(fetched_at))
        .collect();
    println!("{} posts from {}", posts.len(), data.display());

    target
        .ensure()
        .await
        .map_err(|error| Fatal(format!("creating the index or table: {error}")))?;

    let markers_before = target.write_markers().await?;
    let _ = target.sent();
    let mut rows = Vec::with_capacity(posts.len());
    for post in &posts {
        let id = post
            .id()
            .map_or_else(|_| "-".to_owned(), |id| id.to_string());
        let result = target.upsert(post).await;
        rows.push((post, id, result));
    }
    let commands = target.sent();
    let markers_after = target.write_markers().await?;
    let documents_written = markers_after
        .iter()
        .filter(|(id, marker)| markers_before.get(*id) != Some(*marker))
        .count();

    // The table.
    let slug_width = rows
        .iter()
        .map(|(post, ..)| post.slug.len())
        .chain(["slug".len()])
        .max()
        .unwrap_or(0);
    println!();
    println!("{:<slug_width$}  lang  {:<26}  outcome", "slug", "id");
    println!("{:-<slug_width$}  ----  {:-<26}  ---------", "", "");
    let mut totals = Totals::default();
    let mut problems = Vec::new();
    for (post, id, result) in &rows {
        let shown = match result {
            Ok(outcome) => {
                totals.count(*outcome);
                outcome.to_string()
            }
            Err(error) => {
                let failed = is_failure(error);
                if failed {
                    totals.failed += 1;
                } else {
                    totals.refused += 1;
                }
                problems.push((failed, error));
                summary(error)
            }
        };
        println!(
            "{:<slug_width$}  {:<4}  {:<26}  {shown}",
            post.slug, post.lang, id
        );
    }

    println!();
    for (failed, error) in &problems {
        let what = if *failed { "failed" } else { "refused" };
        println!("{what}: {error}");
    }
    if !problems.is_empty() {
        println!();
    }
    println!(
        "totals: {} ({} posts); documents written: {}",
        totals.describe(),
        posts.len(),
        documents_written,
    );
    if let Some(commands) = commands {
        println!("commands sent: {commands}");
    }
    println!("{}", target.stored().await?);

    if problems.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "blog_ingest: {} post(s) refused, {} failed; see above",
            totals.refused, totals.failed
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Each stored document's write marker, by id, on MongoDB ([`Target::write_markers`]).
async fn mongo_write_markers(store: &Store) -> Result<BTreeMap<String, String>, Fatal> {
    let collection = store
        .database()
        .collection::<Document>(Post::MODEL.collection());
    let mut cursor = collection
        .find(doc! {})
        .projection(doc! { idem_core::model::WRITE_MARKER_FIELD: 1 })
        .await?;
    let mut markers = BTreeMap::new();
    while cursor.advance().await? {
        let stored = cursor.deserialize_current()?;
        let id = stored.get("_id").map(Bson::to_string).unwrap_or_default();
        let marker = stored
            .get(idem_core::model::WRITE_MARKER_FIELD)
            .map(Bson::to_string)
            .unwrap_or_default();
        markers.insert(id, marker);
    }
    Ok(markers)
}

/// Prints the stored document of one post, raw, as relaxed extended JSON.
async fn show(store: &Store, slug: &str, lang: &str) -> Result<ExitCode, Fatal> {
    // The natural key, under the names serde stores (the same filter the unique index covers).
    let filter = doc! { "slug": slug, "lang": lang };
    let collection = store
        .database()
        .collection::<Document>(Post::MODEL.collection());
    let Some(stored) = collection.find_one(filter).await? else {
        println!("no stored post with slug {slug:?} and lang {lang:?}");
        return Ok(ExitCode::FAILURE);
    };
    let json = Bson::Document(stored.clone()).into_relaxed_extjson();
    println!("{}", serde_json::to_string_pretty(&json)?);
    // The id's time part is the publication time: recompute it from what is stored.
    if let Some(id) = stored
        .get_str("_id")
        .ok()
        .and_then(|id| id.parse::<Id>().ok())
    {
        println!("_id time part: {} ms", id.timestamp_ms());
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads every `*.json` file of `dir`, in file-name order.
fn read_posts(dir: &Path) -> Result<Vec<PostFile>, Fatal> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| Fatal(format!("reading {}: {error}", dir.display())))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    if paths.is_empty() {
        return Err(Fatal(format!("no *.json posts in {}", dir.display())));
    }
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|error| Fatal(format!("reading {}: {error}", path.display())))?;
            serde_json::from_str(&text)
                .map_err(|error| Fatal(format!("{} is not a post: {error}", path.display())))
        })
        .collect()
}

/// A driver or server failure rather than a refusal by idem: the write may be retried.
fn is_failure(error: &Error) -> bool {
    error.as_backend().is_some() || matches!(error.kind(), ErrorKind::Contention)
}

/// The table cell for an error; the full text is printed below the table.
fn summary(error: &Error) -> String {
    match error.kind() {
        ErrorKind::FrozenFieldChanged { field, .. } => format!("REFUSED: `{field}` may not change"),
        ErrorKind::Backend { .. } | ErrorKind::Contention => "FAILED (see below)".to_owned(),
        _ => "REFUSED (see below)".to_owned(),
    }
}

#[derive(Default)]
struct Totals {
    inserted: usize,
    updated: usize,
    unchanged: usize,
    /// Outcomes a `Post` upsert does not produce (`Outcome` is non-exhaustive), by name.
    other: BTreeMap<&'static str, usize>,
    refused: usize,
    failed: usize,
}

impl Totals {
    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Inserted => self.inserted += 1,
            Outcome::Updated => self.updated += 1,
            Outcome::Unchanged => self.unchanged += 1,
            other => *self.other.entry(other.name()).or_default() += 1,
        }
    }

    /// `24 Inserted, 0 Updated, 0 Unchanged, 0 refused, 0 failed`, with any other outcome
    /// after `Unchanged`.
    fn describe(&self) -> String {
        let mut parts = vec![
            format!("{} Inserted", self.inserted),
            format!("{} Updated", self.updated),
            format!("{} Unchanged", self.unchanged),
        ];
        parts.extend(self.other.iter().map(|(name, n)| format!("{n} {name}")));
        parts.push(format!("{} refused", self.refused));
        parts.push(format!("{} failed", self.failed));
        parts.join(", ")
    }
}

/// The commands the client sent, from command monitoring.
#[derive(Clone, Default)]
struct Monitor(Arc<Mutex<Commands>>);

#[derive(Default)]
struct Commands {
    /// Commands started, by name.
    sent: BTreeMap<String, u64>,
}

impl Commands {
    fn describe(&self) -> String {
        if self.sent.is_empty() {
            return "none".to_owned();
        }
        let total: u64 = self.sent.values().sum();
        let each: Vec<String> = self
            .sent
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect();
        format!("{total} ({})", each.join(", "))
    }
}

impl Monitor {
    fn observe(&self, event: CommandEvent) {
        if let CommandEvent::Started(started) = event {
            let mut commands = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            *commands.sent.entry(started.command_name).or_default() += 1;
        }
    }

    /// Everything recorded so far; starts over.
    fn take(&self) -> Commands {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A client of `uri` whose commands `Monitor` records.
async fn monitored_client(uri: &str) -> Result<(Client, Monitor), Fatal> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|error| Fatal(format!("MONGODB_URI: {error}")))?;
    // Fail fast when no server answers, unless the URI says otherwise.
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    let monitor = Monitor::default();
    let recorder = monitor.clone();
    options.command_event_handler =
        Some(EventHandler::callback(move |event| recorder.observe(event)));
    Ok((Client::with_options(options)?, monitor))
}
