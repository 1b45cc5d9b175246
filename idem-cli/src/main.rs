//! `idem`: audit a MongoDB collection or a PostgreSQL table before idem takes it over, and adopt
//! it (move its documents to their derived ids), without writing Rust. The model is given by
//! flags:
//!
//! ```text
//! idem audit --uri mongodb://localhost:27017 --database blog --collection posts \
//!     --key slug,lang --timestamp publishedAt --scheme joined --hash-field sourceHash
//! idem audit --uri postgres://me@localhost/blog --table posts --key slug,lang
//! idem adopt   (the same flags)
//! ```
//!
//! The URI's scheme chooses the server: `mongodb://` or `mongodb+srv://`, `postgres://` or
//! `postgresql://` (whose path names the database; `--database` overrides it), or `sqlite:PATH`
//! (an existing SQLite file).
//!
//! Both print a human summary, or with `--json` the report as JSON, on stdout, and draw a progress
//! bar on stderr when it is a terminal. `adopt` first audits the collection and prints that plan;
//! it moves documents only with `--yes`, and not when a model with one flag changed (a
//! `--timestamp` forgotten, another `--scheme`, keys too many, too few, swapped or another field)
//! fits the stored documents far better than the flags do: it names that flag instead. Exit status: 0 when the collection
//! needs nothing (or adoption completed), 1 when the audit found problems (or adoption left some,
//! or `--yes` was not given), 2 on an error (a wrong model, a missing collection, a server that
//! cannot be reached).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand, ValueEnum};
use idem_core::mongo::DuplicateRule;
use idem_core::{AdoptReport, AuditProgress, AuditReport, Field, IdScheme, Model, Role};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Audit and adopt MongoDB collections and PostgreSQL tables for idem.
#[derive(Parser)]
#[command(name = "idem", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report natural-key duplicates, documents not under their derived id, missing or stale
    /// content hashes. Reads the collection once; writes nothing.
    Audit {
        #[command(flatten)]
        target: Target,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move documents to their derived ids (safe while idem writers run; run it again after an
    /// interruption to finish). Duplicates by natural key are reported and left in place.
    /// Without `--yes`, prints what it would do (the audit) and moves nothing.
    Adopt {
        #[command(flatten)]
        target: Target,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Move the documents; without it, only the plan is printed.
        #[arg(long)]
        yes: bool,
        /// Move documents even if the stored ones were written with another model than these
        /// flags describe (a deliberate change of keys, timestamp or scheme).
        #[arg(long)]
        ignore_model_check: bool,
        /// Stop after moving this many documents; running it again goes on.
        #[arg(long)]
        max_documents: Option<u64>,
        /// Resolve natural-key duplicates: keep the document with the greatest (`greatest:FIELD`)
        /// or least (`least:FIELD`) value of a stored field, and move the others to the
        /// `<collection>_idem_duplicates` collection. Without it, duplicates are left and listed.
        /// MongoDB only: a PostgreSQL table adopt moves has a unique constraint on the natural
        /// key, so it holds no duplicates.
        #[arg(long, value_name = "greatest:FIELD|least:FIELD", value_parser = parse_keep)]
        keep_duplicate: Option<DuplicateRule>,
    },
}

/// Where the collection is, and its model.
#[derive(Args)]
struct Target {
    /// The server's connection string: `mongodb://…` or `postgres://…`.
    #[arg(long, env = "MONGODB_URI")]
    uri: String,
    /// The database (MongoDB: required; PostgreSQL: the URI's unless given).
    #[arg(long)]
    database: Option<String>,
    /// The collection, or the table (resolved through the search path).
    #[arg(long, visible_alias = "table")]
    collection: String,
    /// The key fields as stored, in declaration order, separated by commas.
    #[arg(long, value_delimiter = ',', required = true)]
    key: Vec<String>,
    /// The timestamp field as stored (integer milliseconds or a BSON date), if the ids have one.
    #[arg(long)]
    timestamp: Option<String>,
    /// How key values become the id's hash part.
    #[arg(long, value_enum, default_value_t = Scheme::V1)]
    scheme: Scheme,
    /// The stored field holding the content hash.
    #[arg(long, default_value = "sourceHash")]
    hash_field: String,
    /// Stored fields left out of the content hash (`#[idem(volatile)]`), separated by commas.
    #[arg(long, value_delimiter = ',')]
    volatile: Vec<String>,
    /// Every stored field in the order the type declares it (the order serde writes), separated
    /// by commas: the content hash is computed in this order. Without it, in the order the
    /// server stores the fields, which a server may not keep.
    #[arg(long, value_delimiter = ',')]
    fields: Vec<String>,
}

/// The id schemes, as `#[idem(id_scheme = "…")]` names them.
#[derive(Clone, Copy, ValueEnum)]
enum Scheme {
    /// A typed, length-prefixed encoding of the keys (the default).
    V1,
    /// The keys' text joined by `:`.
    Joined,
}

impl Target {
    /// The model the flags describe. It lives as long as the process, and `Model` holds
    /// `'static` names (the derive writes them as literals), so it is built once and leaked.
    fn model(&self) -> &'static Model {
        fn leak(text: &str) -> &'static str {
            Box::leak(text.to_owned().into_boxed_str())
        }
        let roles = self
            .key
            .iter()
            .map(|name| (name, Role::Key))
            .chain(self.timestamp.iter().map(|name| (name, Role::Timestamp)))
            .chain(self.volatile.iter().map(|name| (name, Role::Volatile)));
        let fields: Vec<Field> = roles
            .map(|(name, role)| Field::new(leak(name), leak(name), role))
            .collect();
        let scheme = match self.scheme {
            Scheme::V1 => IdScheme::V1,
            Scheme::Joined => IdScheme::Joined,
        };
        Box::leak(Box::new(Model::new(
            leak(&self.collection),
            scheme,
            leak(&self.hash_field),
            Box::leak(fields.into_boxed_slice()),
        )))
    }

    /// The URI as messages show it: a password in it is not.
    fn shown_uri(&self) -> String {
        let Some((scheme, rest)) = self.uri.split_once("://") else {
            return self.uri.clone();
        };
        match rest.split_once('@') {
            Some((user, host)) if user.contains(':') => {
                let name = user.split(':').next().unwrap_or_default();
                format!("{scheme}://{name}:***@{host}")
            }
            _ => self.uri.clone(),
        }
    }

    /// Connects to the server the URI names.
    async fn connect(&self) -> Result<Server, String> {
        let scheme = self.uri.split_once("://").map(|(scheme, _)| scheme);
        match scheme {
            Some("postgres" | "postgresql") => {
                use idem_core::tokio_postgres;
                let mut config: tokio_postgres::Config = self
                    .uri
                    .parse()
                    .map_err(|error| format!("{}: {error}", self.shown_uri()))?;
                if let Some(database) = &self.database {
                    config.dbname(database);
                }
                // Without one the system's TCP timeout applies, minutes for an unreachable host.
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(std::time::Duration::from_secs(10));
                }
                let (client, connection) =
                    config
                        .connect(tokio_postgres::NoTls)
                        .await
                        .map_err(|error| {
                            format!(
                                "cannot connect to PostgreSQL at {}: {}",
                                self.shown_uri(),
                                with_causes(&error)
                            )
                        })?;
                let connection = tokio::spawn(connection);
                Ok(Server::Postgres { client, connection })
            }
            _ if self.uri.starts_with("sqlite:") => {
                use idem_core::sqlx::sqlite::SqliteConnectOptions;
                use idem_core::sqlx::ConnectOptions;
                if self.database.is_some() {
                    return Err(
                        "--database is for MongoDB and PostgreSQL: a SQLite file is \
                                one database"
                            .to_owned(),
                    );
                }
                // An existing file only: a typo must not create an empty database to audit.
                let options: SqliteConnectOptions = self
                    .uri
                    .parse()
                    .map_err(|error| format!("{}: {error}", self.shown_uri()))?;
                let connection = options
                    .create_if_missing(false)
                    .connect()
                    .await
                    .map_err(|error| format!("cannot open {}: {error}", self.shown_uri()))?;
                Ok(Server::Sqlite {
                    connection: tokio::sync::Mutex::new(connection),
                })
            }
            Some("mongodb" | "mongodb+srv") => {
                let database = self.database.as_deref().ok_or_else(|| {
                    "--database is required for MongoDB (the database of the collection)".to_owned()
                })?;
                let client = idem_core::mongodb::Client::with_uri_str(&self.uri)
                    .await
                    .map_err(|error| format!("cannot connect to {}: {error}", self.shown_uri()))?;
                let store = idem_core::mongo::Store::new(client.database(database));
                Ok(Server::Mongo { client, store })
            }
            _ => Err(format!(
                "{}: expected a mongodb://, postgres:// or sqlite: connection string",
                self.shown_uri()
            )),
        }
    }
}

/// The server connected to, with its store.
enum Server {
    Mongo {
        client: idem_core::mongodb::Client,
        store: idem_core::mongo::Store,
    },
    Postgres {
        client: idem_core::tokio_postgres::Client,
        connection: tokio::task::JoinHandle<Result<(), idem_core::tokio_postgres::Error>>,
    },
    Sqlite {
        connection: tokio::sync::Mutex<idem_core::sqlx::SqliteConnection>,
    },
}

/// What `adopt` is asked to do besides moving.
#[derive(Clone, Copy, Default)]
struct AdoptFlags {
    max_documents: Option<u64>,
    keep_duplicate: Option<DuplicateRule>,
    ignore_model_check: bool,
}

impl AdoptFlags {
    /// The options of a SQL store's adoption (which has no duplicates to resolve).
    fn sql(self) -> idem_core::postgres::AdoptOptions {
        let mut options = idem_core::postgres::AdoptOptions::default();
        if let Some(documents) = self.max_documents {
            options = options.with_max_documents(documents);
        }
        if self.ignore_model_check {
            options = options.ignoring_model_check();
        }
        options
    }
}

impl Server {
    async fn audit(
        &self,
        model: &Model,
        field_order: &[&str],
        progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AuditReport, idem_core::Error> {
        match self {
            Server::Mongo { store, .. } => store.audit_model(model, field_order, progress).await,
            Server::Postgres { client, .. } => {
                idem_core::postgres::Store::new()
                    .audit_model(client, model, field_order, progress)
                    .await
            }
            Server::Sqlite { connection } => {
                idem_core::sqlite::Store::new()
                    .audit_model(&mut *connection.lock().await, model, field_order, progress)
                    .await
            }
        }
    }

    async fn adopt(
        &self,
        model: &Model,
        field_order: &[&str],
        flags: AdoptFlags,
        progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AdoptReport, String> {
        let adopted = match self {
            Server::Mongo { store, .. } => {
                let mut options = idem_core::mongo::AdoptOptions::default();
                if let Some(documents) = flags.max_documents {
                    options = options.with_max_documents(documents);
                }
                if let Some(rule) = flags.keep_duplicate {
                    options = options.with_duplicates(rule);
                }
                if flags.ignore_model_check {
                    options = options.ignoring_model_check();
                }
                store
                    .adopt_model_with_progress(model, field_order, options, progress)
                    .await
            }
            Server::Postgres { client, .. } => {
                idem_core::postgres::Store::new()
                    .adopt_model_with_progress(client, model, field_order, flags.sql(), progress)
                    .await
            }
            Server::Sqlite { connection } => {
                idem_core::sqlite::Store::new()
                    .adopt_model_with_progress(
                        &mut *connection.lock().await,
                        model,
                        field_order,
                        flags.sql(),
                        progress,
                    )
                    .await
            }
        };
        adopted.map_err(|error| error.to_string())
    }

    /// Whether `--keep-duplicate` means anything here.
    fn resolves_duplicates(&self) -> bool {
        matches!(self, Server::Mongo { .. })
    }

    async fn close(self) {
        match self {
            // Closed before the runtime stops: a client dropped while it stops cannot end its
            // sessions.
            Server::Mongo { client, .. } => client.shutdown().await,
            Server::Postgres { client, connection } => {
                drop(client);
                let _ = connection.await;
            }
            Server::Sqlite { connection } => {
                use idem_core::sqlx::Connection;
                let _ = connection.into_inner().close().await;
            }
        }
    }
}

/// A progress bar on stderr when it is a terminal, hidden otherwise (a pipe, a log file).
struct Progress {
    bar: ProgressBar,
    /// Whether the bar shows the time left yet.
    estimating: AtomicBool,
}

impl Progress {
    fn new() -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        set_template(&bar, WITHOUT_ETA);
        Progress {
            bar,
            estimating: AtomicBool::new(false),
        }
    }

    fn show(&self, progress: &AuditProgress) {
        if let Some(total) = progress.total {
            // An estimate: the scan may find more documents than it said.
            self.bar.set_length(total.max(progress.scanned));
        }
        let wanted = template(progress.total, progress.scanned, self.bar.elapsed());
        // Restyled once: restyling on every document would cost more than the scan.
        if wanted == WITH_ETA && !self.estimating.swap(true, Ordering::Relaxed) {
            set_template(&self.bar, wanted);
        }
        self.bar.set_position(progress.scanned);
    }

    fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// The bar before an estimate of the time left means anything.
const WITHOUT_ETA: &str = "{spinner} {pos} documents scanned ({per_sec})";
/// The bar once it does.
const WITH_ETA: &str = "{spinner} {pos}/{len} documents scanned ({per_sec}, about {eta} left)";

fn set_template(bar: &ProgressBar, template: &'static str) {
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
}

/// Which template the bar shows: the time left only once the server estimated the total and a
/// second has passed with documents scanned, so that the first estimate is one of a rate, not
/// of the connection's start-up.
fn template(total: Option<u64>, scanned: u64, elapsed: std::time::Duration) -> &'static str {
    match total {
        Some(_) if scanned > 0 && elapsed >= std::time::Duration::from_secs(1) => WITH_ETA,
        _ => WITHOUT_ETA,
    }
}

fn print<R: std::fmt::Display + serde::Serialize>(report: &R, json: bool) -> Result<(), String> {
    let text = if json {
        let mut text = serde_json::to_string_pretty(report).map_err(|error| error.to_string())?;
        text.push('\n');
        text
    } else {
        report.to_string()
    };
    // A closed pipe (`idem audit | head`) is no reason to fail the audit.
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(())
}

/// Runs the command; `Ok(true)` when the collection needs nothing more.
async fn run(command: Command) -> Result<bool, String> {
    let (target, json) = match &command {
        Command::Audit { target, json } | Command::Adopt { target, json, .. } => (target, *json),
    };
    let server = target.connect().await?;
    let model = target.model();
    let field_order: Vec<&str> = target.fields.iter().map(String::as_str).collect();
    let done = match &command {
        Command::Audit { .. } => audit(&server, model, &field_order).await.map(|report| {
            if let Some(mismatch) = &report.model_mismatch {
                eprintln!("idem: {mismatch}");
            }
            (print(&report, json), report.is_clean())
        }),
        Command::Adopt {
            max_documents,
            keep_duplicate,
            yes,
            ignore_model_check,
            ..
        } => {
            let flags = AdoptFlags {
                max_documents: *max_documents,
                keep_duplicate: *keep_duplicate,
                ignore_model_check: *ignore_model_check,
            };
            adopt(&server, model, &field_order, flags, *yes, json).await
        }
    };
    server.close().await;
    let (printed, done) = done?;
    printed?;
    Ok(done)
}

/// The audit, with a progress bar.
async fn audit(
    server: &Server,
    model: &Model,
    field_order: &[&str],
) -> Result<AuditReport, String> {
    let bar = Progress::new();
    let audited = server
        .audit(model, field_order, |progress| bar.show(progress))
        .await;
    bar.finish();
    audited.map_err(|error| error.to_string())
}

/// `adopt`: the plan first (the audit); the moves only with `yes`, and never over a model
/// mismatch unless `flags` ignore it.
async fn adopt(
    server: &Server,
    model: &Model,
    field_order: &[&str],
    flags: AdoptFlags,
    yes: bool,
    json: bool,
) -> Result<(Result<(), String>, bool), String> {
    if flags.keep_duplicate.is_some() && !server.resolves_duplicates() {
        return Err(
            "--keep-duplicate is for MongoDB: a PostgreSQL table adopt moves has a unique \
                    constraint on the natural key, so no duplicates to choose between (the audit \
                    lists those that block the constraint: remove them by hand)"
                .to_owned(),
        );
    }
    let plan = audit(server, model, field_order).await?;
    if let (Some(mismatch), false) = (&plan.model_mismatch, flags.ignore_model_check) {
        return Err(format!(
            "{mismatch}; nothing was moved (if the model changed on purpose, pass \
             --ignore-model-check)"
        ));
    }
    let to_move = plan.legacy_ids.count + plan.orphans.count;
    if !yes {
        let printed = print(&plan, json);
        eprintln!(
            "idem: nothing was moved; this was the plan: {} to move to {} derived id{}. Run \
             again with --yes to move {}.",
            count(to_move, "document"),
            if to_move == 1 { "its" } else { "their" },
            if to_move == 1 { "" } else { "s" },
            if to_move == 1 { "it" } else { "them" },
        );
        return Ok((printed, to_move == 0 && plan.is_clean()));
    }
    // The plan was checked against the stored documents just above: no second check.
    let flags = AdoptFlags {
        ignore_model_check: true,
        ..flags
    };
    let bar = Progress::new();
    let adopted = server
        .adopt(model, field_order, flags, |progress| bar.show(progress))
        .await;
    bar.finish();
    let adopted = adopted?;
    Ok((print(&adopted, json), adopted.is_complete()))
}

/// `--keep-duplicate`'s rule: `greatest:FIELD` or `least:FIELD`.
fn parse_keep(text: &str) -> Result<DuplicateRule, String> {
    let leak = |field: &str| -> &'static str { Box::leak(field.to_owned().into_boxed_str()) };
    match text.split_once(':') {
        Some(("greatest", field)) if !field.is_empty() => {
            Ok(DuplicateRule::KeepGreatest(leak(field)))
        }
        Some(("least", field)) if !field.is_empty() => Ok(DuplicateRule::KeepLeast(leak(field))),
        _ => Err(format!(
            "{text:?}: expected greatest:FIELD or least:FIELD (a stored field, such as updatedAt)"
        )),
    }
}

/// `error` and each of its causes, on one line: tokio-postgres says "db error" and keeps what
/// the server said in the cause.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let shown = inner.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        cause = inner.source();
    }
    text
}

/// `n` and the noun, singular for one.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("idem: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_time_left_shows_once_it_can_be_estimated() {
        let second = Duration::from_secs(1);
        assert_eq!(
            template(None, 500, 10 * second),
            WITHOUT_ETA,
            "no total known"
        );
        assert_eq!(
            template(Some(1_000), 0, 10 * second),
            WITHOUT_ETA,
            "nothing scanned"
        );
        assert_eq!(
            template(Some(1_000), 20, Duration::from_millis(300)),
            WITHOUT_ETA,
            "the first documents of a scan that just started"
        );
        assert_eq!(template(Some(1_000), 20, second), WITH_ETA);
    }
}
