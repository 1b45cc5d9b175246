//! `idem`: audit a MongoDB collection, or a PostgreSQL, SQLite or MariaDB table, before idem
//! takes it over, and adopt it (move its documents to their derived ids), without writing Rust.
//! The model is given by flags, or by a model file written from the type (`--model FILE`, see
//! `idem_core::model_file`):
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
//! (an existing SQLite file), or `mysql://` or `mariadb://` (a MariaDB server; the path names
//! the database, `--database` overrides it).
//!
//! Both print a human summary, or with `--json` the report as JSON, on stdout, and draw a progress
//! bar on stderr when it is a terminal. `adopt` first audits the collection and prints that plan;
//! it moves documents only with `--yes`, and not when a model with one flag changed (a
//! `--timestamp` forgotten, another `--scheme`, keys too many, too few, swapped or another field)
//! fits the stored documents far better than the flags do: it names that flag instead. Exit
//! status: 0 when the collection needs nothing (or adoption completed), 1 when the audit found
//! problems (or adoption left some, or `--yes` was not given and there is something to move), 2
//! on an error (a wrong model, a missing collection, a server that cannot be reached).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand, ValueEnum};
use idem_core::model_file::{self, role_name, FileField, ModelFile};
use idem_core::mongo::DuplicateRule;
use idem_core::{AdoptReport, AuditProgress, AuditReport, IdScheme, Model, Role};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Why `adopt --yes` would refuse to move anything after the audit `plan` (as the store checks
/// before its first move), so that the plan does not invite a run that cannot go: a table idem
/// cannot write yet, or stored fields the model does not have.
fn refusal_of_yes(plan: &AuditReport, allow_unknown_fields: bool) -> Option<String> {
    if let Some(problem) = plan.table_problems.first() {
        return Some(format!("the table's problems come first ({problem})"));
    }
    if plan.unknown_fields.is_empty() || allow_unknown_fields {
        return None;
    }
    let shown: Vec<String> = plan
        .unknown_fields
        .iter()
        .map(ToString::to_string)
        .collect();
    Some(format!(
        "stored fields that are not fields of the model given ({}): name them among the \
         model's fields (`--fields`, `--volatile`, …), or leave them out of the hashes with \
         --allow-unknown-fields",
        shown.join("; ")
    ))
}

/// Audit and adopt MongoDB collections and PostgreSQL, SQLite and MariaDB tables for idem.
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
        /// Move rows even when they hold fields the model does not have (the table's own key,
        /// columns `--fields` or the model file do not list, fields the stored hashes show the
        /// type does not hash), leaving them out of the content hashes written: they are no
        /// fields of the type. Without it such a run is refused, since a model missing a field
        /// would store hashes the type does not compute.
        #[arg(long)]
        allow_unknown_fields: bool,
        /// Resolve natural-key duplicates: keep the document with the greatest (`greatest:FIELD`)
        /// or least (`least:FIELD`) value of a stored field, and move the others to the
        /// `<collection>_idem_duplicates` collection. Without it, duplicates are left and listed.
        /// MongoDB only: a SQL table adopt moves has a unique constraint on the natural key, so
        /// it holds no duplicates.
        #[arg(long, value_name = "greatest:FIELD|least:FIELD", value_parser = parse_keep)]
        keep_duplicate: Option<DuplicateRule>,
    },
}

/// The environment variables read for the connection string when `--uri` is not given, in
/// this order: `DATABASE_URL` (as sqlx and diesel read it) first, then each store's own.
const URI_VARIABLES: [&str; 4] = ["DATABASE_URL", "MONGODB_URI", "POSTGRES_URI", "MYSQL_URI"];

/// Where the collection is, and its model.
#[derive(Args)]
struct Target {
    /// The server's connection string: `mongodb://…` or `mongodb+srv://…`; `postgres://…`,
    /// `postgresql://…` or a key=value string (`host=… dbname=…`); `sqlite:PATH` (an existing
    /// SQLite file); `mysql://…` or `mariadb://…` (MariaDB). Without it, the first of
    /// `DATABASE_URL`, `MONGODB_URI`, `POSTGRES_URI` and `MYSQL_URI` set. A password in it is
    /// never printed.
    #[arg(long)]
    uri: Option<String>,
    /// The database (MongoDB: required; PostgreSQL, MariaDB: the URI's unless given).
    #[arg(long)]
    database: Option<String>,
    /// The collection, or the table (resolved through the search path). With `--model`, the
    /// file's collection unless given: given, it names where the file's type is stored under
    /// another name (a production table, a copy).
    #[arg(long, visible_alias = "table", required_unless_present = "model")]
    collection: Option<String>,
    /// The type's model, as `idem_core::model_file::write` writes it: every field in order with
    /// its role. The flags describing the model are then not needed; one given that disagrees
    /// with the file is an error, but for `--collection`, which overrides the file's name.
    #[arg(long, value_name = "FILE")]
    model: Option<std::path::PathBuf>,
    /// The key fields as stored, in declaration order, separated by commas.
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["model", "idempotency_key"])]
    key: Vec<String>,
    /// The timestamp field as stored (integer milliseconds or a BSON date), if the ids have one.
    #[arg(long)]
    timestamp: Option<String>,
    /// How key values become the id's hash part (default: v1).
    #[arg(long, value_enum)]
    scheme: Option<Scheme>,
    /// The stored field holding the content hash (default: sourceHash).
    #[arg(long)]
    hash_field: Option<String>,
    /// Stored fields left out of the content hash (`#[idem(volatile)]`), separated by commas.
    #[arg(long, value_delimiter = ',')]
    volatile: Vec<String>,
    /// Fields that may never change (`#[idem(frozen)]`), separated by commas.
    #[arg(long, value_delimiter = ',')]
    frozen: Vec<String>,
    /// Fields only `apply_once` changes (`#[idem(effect)]`): not hashed. Separated by commas.
    #[arg(long, value_delimiter = ',')]
    effect: Vec<String>,
    /// The deletion marker (`#[idem(tombstone)]`): not hashed.
    #[arg(long)]
    tombstone: Option<String>,
    /// Lists owned by their push route (`#[idem(push_by = "ITEM_KEY")]`), as `FIELD:ITEM_KEY`,
    /// separated by commas: not hashed.
    #[arg(long, value_delimiter = ',', value_name = "FIELD:ITEM_KEY", value_parser = parse_push_by)]
    push_by: Vec<(String, String)>,
    /// The version field (`#[idem(version)]`).
    #[arg(long)]
    version: Option<String>,
    /// The idempotency key of an event type (`#[idem(idempotency_key)]`), instead of `--key`.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Every stored field in the order the type declares it (the order serde writes), separated
    /// by commas: the content hash is computed in this order, and a stored field not listed is
    /// reported as no field of the model. Without it, every stored field is taken for one, in
    /// the order the server stores them, which a server may not keep.
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

impl Scheme {
    fn of(self) -> IdScheme {
        match self {
            Scheme::V1 => IdScheme::V1,
            Scheme::Joined => IdScheme::Joined,
        }
    }
}

/// The model to audit with and its field order, from the flags or the model file.
struct Described {
    model: &'static Model,
    field_order: Vec<String>,
}

impl Target {
    /// The connection string: `--uri`, else the first variable of [`URI_VARIABLES`] set.
    fn uri(&self) -> Result<String, String> {
        if let Some(uri) = &self.uri {
            return Ok(uri.clone());
        }
        URI_VARIABLES
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|uri| !uri.is_empty()))
            .ok_or_else(|| {
                format!(
                    "no connection string: give --uri, or set {}",
                    URI_VARIABLES.join(", ")
                )
            })
    }

    /// The model: the file's (`--model`), checked against any flag given beside it, or the
    /// flags'.
    fn described(&self) -> Result<Described, String> {
        let Some(path) = &self.model else {
            return Ok(Described {
                model: self.flags_model(),
                field_order: self.fields.clone(),
            });
        };
        let mut file = ModelFile::read(path).map_err(|error| error.to_string())?;
        self.check_against(&file)
            .map_err(|problem| format!("model file {}: {problem}", path.display()))?;
        if let Some(collection) = &self.collection {
            file.collection.clone_from(collection);
        }
        Ok(Described {
            model: file.model(),
            field_order: file.field_order().into_iter().map(str::to_owned).collect(),
        })
    }

    /// `Err` names the first flag given beside a model file that says otherwise than the file
    /// (`--collection` names where the type is stored, which may differ).
    fn check_against(&self, file: &ModelFile) -> Result<(), String> {
        let with_role = |role: &str| -> Vec<String> {
            file.fields
                .iter()
                .filter(|field| field.role.as_deref() == Some(role))
                .map(|field| field.name.clone())
                .collect()
        };
        let sorted = |mut names: Vec<String>| {
            names.sort();
            names
        };
        let one = |role: &str| with_role(role).into_iter().next();
        let pushed: Vec<String> = file
            .fields
            .iter()
            .filter(|field| field.role.as_deref() == Some("push_by"))
            .map(|field| format!("{}:{}", field.name, field.item_key.as_deref().unwrap_or("")))
            .collect();
        let given_pushed: Vec<String> = self
            .push_by
            .iter()
            .map(|(field, item)| format!("{field}:{item}"))
            .collect();
        let checks: [(&str, bool, String, String); 12] = [
            (
                "--key",
                !self.key.is_empty(),
                self.key.join(","),
                with_role("key").join(","),
            ),
            (
                "--timestamp",
                self.timestamp.is_some(),
                self.timestamp.clone().unwrap_or_default(),
                one("timestamp").unwrap_or_default(),
            ),
            (
                "--scheme",
                self.scheme.is_some(),
                self.scheme
                    .map_or("", |scheme| scheme.of().name())
                    .to_owned(),
                file.id_scheme.clone(),
            ),
            (
                "--hash-field",
                self.hash_field.is_some(),
                self.hash_field.clone().unwrap_or_default(),
                file.hash_field.clone(),
            ),
            (
                "--volatile",
                !self.volatile.is_empty(),
                sorted(self.volatile.clone()).join(","),
                sorted(with_role("volatile")).join(","),
            ),
            (
                "--frozen",
                !self.frozen.is_empty(),
                sorted(self.frozen.clone()).join(","),
                sorted(with_role("frozen")).join(","),
            ),
            (
                "--effect",
                !self.effect.is_empty(),
                sorted(self.effect.clone()).join(","),
                sorted(with_role("effect")).join(","),
            ),
            (
                "--tombstone",
                self.tombstone.is_some(),
                self.tombstone.clone().unwrap_or_default(),
                one("tombstone").unwrap_or_default(),
            ),
            (
                "--push-by",
                !self.push_by.is_empty(),
                sorted(given_pushed).join(","),
                sorted(pushed).join(","),
            ),
            (
                "--version",
                self.version.is_some(),
                self.version.clone().unwrap_or_default(),
                one("version").unwrap_or_default(),
            ),
            (
                "--idempotency-key",
                self.idempotency_key.is_some(),
                self.idempotency_key.clone().unwrap_or_default(),
                one("idempotency_key").unwrap_or_default(),
            ),
            (
                "--fields",
                !self.fields.is_empty(),
                self.fields.join(","),
                file.field_order().join(","),
            ),
        ];
        for (flag, given, value, in_file) in checks {
            if given && value != in_file {
                return Err(format!(
                    "{flag} {value:?} disagrees with the file, which says {in_file:?}: leave \
                     the flag out (the file describes the type), or write the file again from \
                     the type"
                ));
            }
        }
        Ok(())
    }

    /// The model the flags describe, as a model file would: each field with the role its flag
    /// gives ([`ModelFile::model`]). Not checked as a file is: the audit names what is wrong.
    fn flags_model(&self) -> &'static Model {
        let field = |name: &String, role: Role| FileField {
            name: name.clone(),
            role: Some(role_name(role).to_owned()),
            item_key: None,
            // A tombstone is `None` until the document is deleted.
            optional: role == Role::Tombstone,
            flattened: false,
        };
        let named = |names: &[String], role: Role| -> Vec<FileField> {
            names.iter().map(|name| field(name, role)).collect()
        };
        let one = |name: &Option<String>, role: Role| named(name.as_slice(), role);
        let mut fields = named(&self.key, Role::Key);
        fields.extend(one(&self.idempotency_key, Role::IdempotencyKey));
        fields.extend(one(&self.timestamp, Role::Timestamp));
        fields.extend(named(&self.volatile, Role::Volatile));
        fields.extend(named(&self.frozen, Role::Frozen));
        fields.extend(named(&self.effect, Role::Effect));
        fields.extend(one(&self.tombstone, Role::Tombstone));
        fields.extend(one(&self.version, Role::Version));
        fields.extend(self.push_by.iter().map(|(name, item)| FileField {
            item_key: Some(item.clone()),
            ..field(name, Role::Pushed)
        }));
        ModelFile {
            format: model_file::FORMAT.to_owned(),
            collection: self.collection.clone().unwrap_or_default(),
            id_scheme: self.scheme.unwrap_or(Scheme::V1).of().name().to_owned(),
            hash_field: self
                .hash_field
                .clone()
                .unwrap_or_else(|| "sourceHash".to_owned()),
            hash_algorithm: "sha256".to_owned(),
            fields,
            flattened: false,
        }
        .model()
    }

    /// Connects to the server `uri` names.
    async fn connect(&self, uri: &str) -> Result<Server, String> {
        let shown = shown_uri(uri);
        let scheme = url_parts(uri).map(|(scheme, _)| scheme);
        match scheme {
            Some("postgres" | "postgresql") => self.connect_postgres(uri).await,
            None if is_key_value(uri) => self.connect_postgres(uri).await,
            _ if uri.starts_with("sqlite:") => {
                use idem_core::sqlx::sqlite::SqliteConnectOptions;
                use idem_core::sqlx::ConnectOptions;
                if self.database.is_some() {
                    return Err(
                        "--database is for MongoDB, PostgreSQL and MariaDB: a SQLite file \
                                is one database"
                            .to_owned(),
                    );
                }
                // An existing file only: a typo must not create an empty database to audit.
                let options: SqliteConnectOptions =
                    uri.parse().map_err(|error| format!("{shown}: {error}"))?;
                let connection = options
                    .create_if_missing(false)
                    .connect()
                    .await
                    .map_err(|error| format!("cannot open {shown}: {error}"))?;
                Ok(Server::Sqlite {
                    connection: tokio::sync::Mutex::new(connection),
                })
            }
            Some("mysql" | "mariadb") => {
                use idem_core::sqlx::mysql::MySqlConnectOptions;
                use idem_core::sqlx::ConnectOptions;
                let mut options: MySqlConnectOptions = uri
                    .parse()
                    .map_err(|error| format!("{shown}: {}", with_causes(&error)))?;
                if let Some(database) = &self.database {
                    options = options.database(database);
                }
                // The driver has no connect timeout: without one the system's TCP timeout
                // applies, minutes for an unreachable host.
                let connection =
                    tokio::time::timeout(std::time::Duration::from_secs(10), options.connect())
                        .await
                        .map_err(|_| format!("cannot connect to MariaDB at {shown}: timed out"))?
                        .map_err(|error| {
                            format!(
                                "cannot connect to MariaDB at {shown}: {}",
                                with_causes(&error)
                            )
                        })?;
                Ok(Server::Mysql {
                    connection: tokio::sync::Mutex::new(connection),
                })
            }
            Some("mongodb" | "mongodb+srv") => {
                let database = self.database.as_deref().ok_or_else(|| {
                    "--database is required for MongoDB (the database of the collection)".to_owned()
                })?;
                let client = idem_core::mongodb::Client::with_uri_str(uri)
                    .await
                    .map_err(|error| format!("cannot connect to {shown}: {error}"))?;
                let store = idem_core::mongo::Store::new(client.database(database));
                Ok(Server::Mongo { client, store })
            }
            // Echoed only where it cannot hold a password: one no driver reads may still
            // (`me:password@host`, its scheme left out).
            _ => {
                let shown = match uri.contains(['@', '=']) {
                    true => "the connection string".to_owned(),
                    false => shown,
                };
                Err(format!(
                    "{shown}: expected a mongodb://, postgres://, mysql:// or sqlite: connection \
                     string"
                ))
            }
        }
    }

    /// Connects to PostgreSQL: `uri` is a URL or a key=value string.
    async fn connect_postgres(&self, uri: &str) -> Result<Server, String> {
        use idem_core::tokio_postgres;
        let shown = shown_uri(uri);
        let mut config: tokio_postgres::Config = uri
            .parse()
            .map_err(|error| format!("{shown}: {}", with_causes(&error)))?;
        if let Some(database) = &self.database {
            config.dbname(database);
        }
        // What libpq (and sqlx) take from the environment where the string says nothing: the
        // password (`PGPASSWORD`), the host (`PGHOST`, else the local socket directory) and the
        // user (`PGUSER`, else the system user).
        let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        if config.get_password().is_none() {
            if let Some(password) = variable("PGPASSWORD") {
                config.password(password);
            }
        }
        if config.get_hosts().is_empty() {
            let socket = ["/var/run/postgresql", "/tmp"]
                .into_iter()
                .find(|directory| std::path::Path::new(directory).is_dir());
            if let Some(host) = variable("PGHOST").or(socket.map(str::to_owned)) {
                config.host(&host);
            }
        }
        if config.get_user().is_none() {
            if let Some(user) = variable("PGUSER").or_else(|| variable("USER")) {
                config.user(&user);
            }
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
                    let caused = with_causes(&error);
                    // Hosted servers that require TLS (`sslmode=require`) are out of reach.
                    let tls = match caused.contains("TLS") {
                        true => {
                            " (idem connects without TLS: reach the server where it allows \
                                 connections without it, `sslmode=disable` or `prefer`, or \
                                 through a local tunnel)"
                        }
                        false => "",
                    };
                    format!("cannot connect to PostgreSQL at {shown}: {caused}{tls}")
                })?;
        let connection = tokio::spawn(connection);
        Ok(Server::Postgres { client, connection })
    }
}

/// Whether `text` is a key=value connection string (`host=… dbname=…`), which tokio-postgres
/// reads as libpq does.
fn is_key_value(text: &str) -> bool {
    !text.starts_with("sqlite:") && text.contains('=') && url_parts(text).is_none()
}

/// A URL's scheme and what follows its `://`: only where the text before `://` is a scheme
/// (a letter, then letters, digits, `+`, `-` or `.`), so that a key=value string holding `://`
/// in a value (`application_name=http://…`, a password) is not taken for one.
fn url_parts(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut characters = scheme.chars();
    let starts_with_letter = characters.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_of_scheme = characters.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    (starts_with_letter && rest_of_scheme).then_some((scheme, rest))
}

/// Whether a connection-string parameter named `key` holds a secret: a password, a token, a
/// key's passphrase, MongoDB's `authMechanismProperties` (which may hold an AWS session token).
fn is_secret(key: &str) -> bool {
    // tokio-postgres decodes a parameter's name (`pass%77ord` is `password`).
    let key = percent_decoded(key).to_ascii_lowercase();
    [
        "password",
        "pass",
        "pwd",
        "secret",
        "token",
        "authmechanismproperties",
    ]
    .iter()
    .any(|word| key == *word || (word.len() > 4 && key.contains(word)))
}

/// The connection string as messages show it: every secret it holds (a URL's `user:password@`,
/// a `password=` parameter in its query or in a key=value string) replaced by `***`. A SQLite
/// path holds none.
fn shown_uri(uri: &str) -> String {
    masked(uri).0
}

/// [`shown_uri`], and the secrets it masked.
fn masked(uri: &str) -> (String, Vec<String>) {
    let mut secrets = Vec::new();
    if uri.starts_with("sqlite:") {
        return (uri.to_owned(), secrets);
    }
    if let Some((scheme, rest)) = url_parts(uri) {
        // The user information ends where the driver ends it, whatever the password holds (a
        // `/`, `?` or `@` left unencoded): tokio-postgres at the first `@` of the whole URL (an
        // `@` in the database's name or the query comes after it), MongoDB's driver at the last
        // `@` before the query, a URL parser (sqlx's MySQL driver) at the last `@` before the
        // first `/`, `?` or `#`. The query is masked on its own.
        let before_query = &rest[..rest.find('?').unwrap_or(rest.len())];
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        let at = match scheme {
            "postgres" | "postgresql" => rest.find('@'),
            "mysql" | "mariadb" => authority.rfind('@'),
            _ => before_query.rfind('@'),
        };
        // Whichever rule a driver follows, each reading's password is scrubbed from any text
        // shown (a driver that splits otherwise may quote the rest, as MongoDB's does a host of
        // `me:ab` for `me:ab?secret@host`).
        for end in [
            rest.find('@'),
            before_query.rfind('@'),
            authority.rfind('@'),
        ]
        .into_iter()
        .flatten()
        {
            if let Some((_, password)) = rest[..end].split_once(':') {
                secrets.push(password.to_owned());
            }
        }
        let (userinfo, after) = match at {
            Some(at) => (Some(&rest[..at]), &rest[at..]),
            None => (None, rest),
        };
        let (after, query) = match after.split_once('?') {
            Some((before, query)) => (before, Some(query)),
            None => (after, None),
        };
        // Everything from the first `:` to that `@` is the password, as a driver may read it.
        let userinfo = userinfo.map(|info| match info.split_once(':') {
            Some((user, _)) => format!("{user}:***"),
            None => info.to_owned(),
        });
        let query = query.map_or_else(String::new, |query| {
            format!("?{}", masked_query(query, &mut secrets))
        });
        let shown = format!("{scheme}://{}{after}{query}", userinfo.unwrap_or_default());
        return (shown, secrets);
    }
    if is_key_value(uri) {
        let shown = masked_key_values(uri, &mut secrets);
        return (shown, secrets);
    }
    (uri.to_owned(), secrets)
}

/// A URL's query with each secret parameter's value masked (and kept in `secrets`).
fn masked_query(query: &str, secrets: &mut Vec<String>) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if is_secret(key) => {
                secrets.push(value.to_owned());
                format!("{key}=***")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A key=value connection string with each secret's value masked (and kept in `secrets`),
/// quoted values included (`password='a b\\'c'`, backslash escapes).
fn masked_key_values(text: &str, secrets: &mut Vec<String>) -> String {
    let mut shown = String::new();
    let mut rest = text;
    while let Some(equals) = rest.find('=') {
        let key = rest[..equals].trim();
        shown.push_str(&rest[..=equals]);
        let value_start = rest[equals + 1..]
            .find(|c: char| !c.is_whitespace())
            .map_or(rest.len(), |at| equals + 1 + at);
        shown.push_str(&rest[equals + 1..value_start]);
        let value = &rest[value_start..];
        let length = value_length(value);
        if is_secret(key) {
            shown.push_str("***");
            let secret = &value[..length];
            secrets.push(secret.to_owned());
            let unquoted = secret.trim_matches('\'');
            secrets.push(unquoted.to_owned());
            secrets.push(unescaped(unquoted));
        } else {
            shown.push_str(&value[..length]);
        }
        rest = &value[length..];
    }
    shown.push_str(rest);
    shown
}

/// A key=value string's value as the driver reads it: each backslash stands for the character
/// after it.
fn unescaped(value: &str) -> String {
    let mut read = String::with_capacity(value.len());
    let mut characters = value.chars();
    while let Some(c) = characters.next() {
        match c {
            '\\' => read.extend(characters.next()),
            _ => read.push(c),
        }
    }
    read
}

/// The length of the value at the start of `text`: quoted, or up to the next whitespace; a
/// backslash escapes the character after it in both, as libpq and tokio-postgres read them
/// (`password=a\ b` is `a b`).
fn value_length(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut escaped = false;
    for (at, c) in text.char_indices().skip(usize::from(quoted)) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' if quoted => return at + 1,
            _ if !quoted && c.is_whitespace() => return at,
            _ => {}
        }
    }
    text.len()
}

/// The secrets `uri` holds, as they may appear in a driver's message: each as written and
/// percent-decoded. Short ones are left out, which would mask unrelated text.
fn secrets(uri: &str) -> Vec<String> {
    let mut found = Vec::new();
    for secret in masked(uri).1 {
        found.push(percent_decoded(&secret));
        found.push(secret);
    }
    found.retain(|secret| secret.len() >= 3);
    // The longest first, so that a secret holding another is replaced whole.
    found.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    found
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                at += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// `text` with every secret of `uri` replaced by `***`: a driver's message may quote the
/// connection string, or a part of it.
fn redacted(text: &str, uri: &str) -> String {
    let mut text = text.to_owned();
    for secret in secrets(uri) {
        text = text.replace(&secret, "***");
    }
    text
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
    Mysql {
        connection: tokio::sync::Mutex<idem_core::sqlx::MySqlConnection>,
    },
}

/// What `adopt` is asked to do besides moving.
#[derive(Clone, Copy, Default)]
struct AdoptFlags {
    max_documents: Option<u64>,
    keep_duplicate: Option<DuplicateRule>,
    ignore_model_check: bool,
    allow_unknown_fields: bool,
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
        if self.allow_unknown_fields {
            options = options.allowing_unknown_fields();
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
            Server::Mysql { connection } => {
                idem_core::mysql::Store::new()
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
                if flags.allow_unknown_fields {
                    options = options.allowing_unknown_fields();
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
            Server::Mysql { connection } => {
                idem_core::mysql::Store::new()
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
            Server::Mysql { connection } => {
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
    let described = target.described()?;
    let model = described.model;
    let field_order: Vec<&str> = described.field_order.iter().map(String::as_str).collect();
    let uri = target.uri()?;
    let server = target.connect(&uri).await?;
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
            allow_unknown_fields,
            ..
        } => {
            let flags = AdoptFlags {
                max_documents: *max_documents,
                keep_duplicate: *keep_duplicate,
                ignore_model_check: *ignore_model_check,
                allow_unknown_fields: *allow_unknown_fields,
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
            "--keep-duplicate is for MongoDB: a SQL table adopt moves has a unique \
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
        if let Some(why) = refusal_of_yes(&plan, flags.allow_unknown_fields) {
            eprintln!("idem: nothing was moved; with --yes, adopt would refuse to move: {why}.");
            return Ok((printed, false));
        }
        if to_move == 0 {
            eprintln!("idem: no document to move; nothing was written.");
            return Ok((printed, plan.is_clean()));
        }
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

/// `--push-by`'s `FIELD:ITEM_KEY`.
fn parse_push_by(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((field, item)) if !field.is_empty() && !item.is_empty() => {
            Ok((field.to_owned(), item.to_owned()))
        }
        _ => Err(format!(
            "{text:?}: expected FIELD:ITEM_KEY (the list, and the stored name of the item field \
             that tells items apart, as in `#[idem(push_by = \"ITEM_KEY\")]`)"
        )),
    }
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
    let uri = match &cli.command {
        Command::Audit { target, .. } | Command::Adopt { target, .. } => target.uri().ok(),
    };
    match run(cli.command).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            let message = match &uri {
                Some(uri) => redacted(&message, uri),
                None => message,
            };
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
