//! What idem's bookkeeping costs in storage on real-data-shaped rows: table and index bytes and
//! the WAL (redo) bytes of a first ingest, idem's table against a plain table of the same data
//! columns, and each of idem's columns alone in the form idem stores it and in a smaller one,
//! on PostgreSQL, SQLite and MariaDB in one run. A measurement: nothing here changes idem's
//! layout.
//!
//! The rows: the Debian `Packages` index of this machine (the largest
//! `/var/lib/apt/lists/*_main_binary-amd64_Packages.lz4`, or `--packages FILE`, decompressed with
//! `apt-helper cat-file`, else `lz4cat`), one row per stanza, 30 fields: `Package` and
//! `Architecture` the natural key, `Filename`, `Size`, `MD5sum` and `SHA256` frozen, the rest
//! plain (`Option` where Debian leaves the field out). A key seen twice keeps its first stanza.
//! Without the file (or with `--synthetic`) the rows are deterministic synthetic ones of the same
//! shape, and the output says so.
//!
//! The variants, each a fresh table filled in input order by one ingest:
//!
//! - idem: `upsert_many` (its default chunk, a commit per chunk), and inside one transaction of
//!   the caller's; then idem's own table (`create_table_sql`) filled with the very rows idem
//!   stored, read back, by multi-row `INSERT` in one transaction: the layout without idem's
//!   statements.
//! - plain: idem's `CREATE TABLE` with idem's own columns and primary key left out (the same data
//!   columns, types and collations, the natural key's unique constraint only), filled by
//!   multi-row `INSERT` in one transaction: the baseline of every ratio. Also with a commit per
//!   chunk, and on PostgreSQL by `COPY`.
//! - plain + one of idem's columns, in the form idem stores it and in a smaller one, filled with
//!   the values idem stored (read back from its table): `_id` as its 26-character text and as the
//!   ULID's 16 bytes (and `uuid` on PostgreSQL), without an index and as the primary key (the
//!   second unique index), and on MariaDB also as a UNIQUE index that leaves the rows clustered
//!   on the natural key; the content hash as stored (its 32 bytes) and as the 64 hex digits
//!   earlier releases stored; `idemFrozen` as stored (one 16-byte digest over all frozen
//!   fields), as the fields' own digests' bytes concatenated in field order (each the value's
//!   digest, as MongoDB stores one a field), and as one digest over all frozen fields together
//!   of 32 bytes and 16 (a stand-in of the same size: the field digests XORed); `idemAppliedOps`
//!   as stored (NULL) and with the `'[]'` default earlier releases gave it;
//!   on SQLite and MariaDB the write marker `idemWrite` as stored, NULL (as if cleared after the
//!   write, which would cost an update of every row) and 8 bytes.
//! - plain + all of idem's columns together in the smallest forms (`_id` binary and indexed,
//!   the hash's bytes, the digests' bytes, NULL ops, an 8-byte marker), and the same without
//!   digests (`idemFrozen` NULL: a frozen field in a scalar column can be compared as stored);
//!   the latter also with a commit per chunk, as `upsert_many` commits.
//! - plain + all of idem's columns together with one frozen digest of 32 bytes: `_id` as stored
//!   (its text, the primary key: the layout that changes the fewest things users see) and
//!   binary (`uuid` on PostgreSQL), the hash's bytes, NULL ops, and on SQLite and MariaDB the
//!   marker as stored and as 8 bytes; `_id` as stored also with a frozen digest of 16 bytes;
//!   on MariaDB each with `_id` the primary key and with it a UNIQUE index (rows clustered on
//!   the natural key); under the best index (the primary key, on MariaDB the natural key's
//!   clustering) also with a commit per chunk, as `upsert_many` commits.
//!
//! The goal each run reports (never a failure): idem's table and WAL, and those of the smallest
//! forms, within 1.25x of the plain table's; a variant that commits each chunk has its WAL held
//! to the plain table's with a commit per chunk.
//!
//! How each number is exact:
//!
//! - PostgreSQL: `pg_table_size` (heap, TOAST, free-space and visibility maps) and
//!   `pg_indexes_size` after the ingest. WAL: the bytes of the WAL records between the insert
//!   positions (`pg_current_wal_insert_lsn()`) before and after the ingest that touch the table,
//!   its indexes or its TOAST relations (`pg_walinspect`, their relfilenodes): no other session's
//!   WAL counts, and commit records, a few dozen bytes each, are left out. A `CHECKPOINT` before
//!   each ingest keeps its WAL on disk until it is read; autovacuum is off on every table, so
//!   that no vacuum of the rows a chunk committed writes in the window. Where `pg_walinspect` cannot be used the
//!   insert positions' difference is reported instead, and the output says so.
//! - SQLite: each variant is a database file of its own in WAL mode with automatic checkpoints
//!   off, its WAL emptied before the ingest: the WAL file's size after it is every frame the
//!   ingest wrote. Table and index bytes are the pages of the table's and its indexes' B-trees
//!   (`dbstat`), counted after a checkpoint; the file's size is shown beside them.
//! - MariaDB: table bytes are the leaf pages of the clustered index (the rows, kept in
//!   primary-key order; a table without a primary key is clustered on its first unique index of
//!   `NOT NULL` columns: the plain table on its natural key), index bytes the leaf pages of the
//!   secondary indexes, each index's `n_leaf_pages` counted by `ANALYZE TABLE`
//!   (`mysql.innodb_index_stats`), times the page size. The non-leaf pages (well under 1% here)
//!   are left out, and so are the free pages of the extents a segment reserves (what
//!   `DATA_LENGTH` and `INDEX_LENGTH` count, in steps of 1 MiB and more, too coarse for a column
//!   of 16 bytes); the `.ibd` file's size is shown beside them. Redo: `Innodb_lsn_current` before
//!   and after, which counts every session's redo: on a server nothing else uses, the ingest's
//!   own.
//!
//! Ratios are to the plain table's multi-row `INSERT` (size: table + indexes); bytes a row are
//! the difference to it divided by the rows.
//!
//! ```text
//! cargo run --release -p idem-examples --example bench_storage -- [--rows N]
//!     [--stores postgres,sqlite,mysql] [--packages FILE] [--synthetic] [--tsv FILE]
//! ```
//!
//! The servers: `IDEM_POSTGRES_URIS` (`label=uri` pairs separated by spaces), else
//! `POSTGRES_URI`; `MYSQL_URI`; a store without one is skipped, saying so. The benchmark works in
//! a schema (PostgreSQL) or database (MariaDB) of its own, dropped at the end, and in a temporary
//! directory for SQLite. `scripts/bench` runs it as its `storage` step. Exit status 0, 2 when it
//! could not run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use idem_core::sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use idem_core::sqlx::postgres::PgConnectOptions;
use idem_core::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use idem_core::sqlx::{
    self, ConnectOptions, Connection, Database, Decode, Encode, Executor, IntoArguments,
    MySqlConnection, PgConnection, Row, SqliteConnection, Type,
};
use idem_core::tokio_postgres::{self, NoTls};
use idem_core::{BatchReport, ColumnShape, Idempotent};
use idem_examples::bench::{print_table, print_targets, targets_tsv, Target};
use idem_examples::cli::{exit_code, fatal, Fatal, Flags};
use serde::{Deserialize, Serialize};

// ------------------------------------------------------------------------------------------------
// The rows

/// One stanza of a Debian `Packages` index.
#[derive(Clone, Debug, Serialize, Deserialize, Idempotent)]
#[idem(collection = "debian_packages")]
#[serde(rename_all = "camelCase")]
struct Package {
    #[idem(key)]
    package: String,
    #[idem(key)]
    architecture: String,
    version: String,
    installed_size: Option<i64>,
    maintainer: String,
    source: Option<String>,
    depends: Option<String>,
    pre_depends: Option<String>,
    recommends: Option<String>,
    suggests: Option<String>,
    enhances: Option<String>,
    breaks: Option<String>,
    conflicts: Option<String>,
    replaces: Option<String>,
    provides: Option<String>,
    built_using: Option<String>,
    description: String,
    description_md5: Option<String>,
    homepage: Option<String>,
    tag: Option<String>,
    section: Option<String>,
    priority: Option<String>,
    multi_arch: Option<String>,
    essential: Option<String>,
    ruby_versions: Option<String>,
    lua_versions: Option<String>,
    #[idem(frozen)]
    filename: String,
    #[idem(frozen)]
    size: i64,
    #[idem(frozen)]
    md5sum: String,
    #[idem(frozen)]
    sha256: String,
}

/// A stanza's fields by name; a continuation line is kept with its newline and leading space.
struct Stanza<'a>(HashMap<&'a str, String>);

impl<'a> Stanza<'a> {
    fn parse(text: &'a str) -> Stanza<'a> {
        let mut fields: HashMap<&str, String> = HashMap::new();
        let mut last = None;
        for line in text.lines() {
            if line.starts_with([' ', '\t']) {
                if let Some(value) = last.and_then(|name| fields.get_mut(name)) {
                    value.push('\n');
                    value.push_str(line);
                }
            } else if let Some((name, value)) = line.split_once(':') {
                fields.insert(name, value.trim_start().to_owned());
                last = Some(name);
            }
        }
        Stanza(fields)
    }

    fn text(&mut self, name: &str) -> Option<String> {
        self.0.remove(name)
    }

    fn required(&mut self, name: &str) -> Result<String, String> {
        self.text(name)
            .ok_or_else(|| format!("a stanza without {name}"))
    }

    fn number(&mut self, name: &str) -> Result<Option<i64>, String> {
        self.text(name)
            .map(|text| text.parse().map_err(|_| format!("{name}: {text:?}")))
            .transpose()
    }

    fn package(mut self) -> Result<Package, String> {
        Ok(Package {
            package: self.required("Package")?,
            architecture: self.required("Architecture")?,
            version: self.required("Version")?,
            installed_size: self.number("Installed-Size")?,
            maintainer: self.required("Maintainer")?,
            source: self.text("Source"),
            depends: self.text("Depends"),
            pre_depends: self.text("Pre-Depends"),
            recommends: self.text("Recommends"),
            suggests: self.text("Suggests"),
            enhances: self.text("Enhances"),
            breaks: self.text("Breaks"),
            conflicts: self.text("Conflicts"),
            replaces: self.text("Replaces"),
            provides: self.text("Provides"),
            built_using: self.text("Built-Using"),
            description: self.required("Description")?,
            description_md5: self.text("Description-md5"),
            homepage: self.text("Homepage"),
            tag: self.text("Tag"),
            section: self.text("Section"),
            priority: self.text("Priority"),
            multi_arch: self.text("Multi-Arch"),
            essential: self.text("Essential"),
            ruby_versions: self.text("Ruby-Versions"),
            lua_versions: self.text("Lua-Versions"),
            filename: self.required("Filename")?,
            size: self.number("Size")?.ok_or("a stanza without Size")?,
            md5sum: self.required("MD5sum")?,
            sha256: self.required("SHA256")?,
        })
    }
}

/// Where the rows came from, as the output says it.
struct Source {
    rows: Vec<Package>,
    said: String,
}

/// The largest `*_main_binary-amd64_Packages.lz4` under `/var/lib/apt/lists`.
fn packages_file() -> Option<PathBuf> {
    std::fs::read_dir("/var/lib/apt/lists")
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .ends_with("_main_binary-amd64_Packages.lz4")
        })
        .max_by_key(|entry| entry.metadata().map_or(0, |meta| meta.len()))
        .map(|entry| entry.path())
}

/// The decompressed text of `path`: `apt-helper cat-file`, else `lz4cat`; plain text as is.
fn decompressed(path: &Path) -> Result<String, String> {
    if path.extension().is_none_or(|extension| extension != "lz4") {
        return std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
    }
    let mut tried = Vec::new();
    for (program, args) in [
        ("/usr/lib/apt/apt-helper", &["cat-file"][..]),
        ("lz4cat", &[][..]),
    ] {
        match std::process::Command::new(program)
            .args(args)
            .arg(path)
            .output()
        {
            Ok(output) if output.status.success() => {
                return String::from_utf8(output.stdout)
                    .map_err(|_| format!("{}: not UTF-8", path.display()))
            }
            Ok(output) => tried.push(format!("{program}: {}", output.status)),
            Err(error) => tried.push(format!("{program}: {error}")),
        }
    }
    Err(format!(
        "cannot decompress {}: {}",
        path.display(),
        tried.join("; ")
    ))
}

/// The packages of `path`, the first stanza of each natural key, at most `limit`.
fn read_packages(path: &Path, limit: Option<usize>) -> Result<Source, String> {
    let text = decompressed(path)?;
    let mut seen = std::collections::HashSet::new();
    let (mut rows, mut stanzas) = (Vec::new(), 0);
    for stanza in text
        .split("\n\n")
        .filter(|stanza| !stanza.trim().is_empty())
    {
        stanzas += 1;
        let package = Stanza::parse(stanza).package()?;
        if seen.insert((package.package.clone(), package.architecture.clone())) {
            rows.push(package);
        }
    }
    let duplicates = stanzas - rows.len();
    rows.truncate(limit.unwrap_or(usize::MAX));
    let said = format!(
        "{} Debian packages from {} ({stanzas} stanzas, {duplicates} of a key seen before left out)",
        rows.len(),
        path.display()
    );
    Ok(Source { rows, said })
}

/// A deterministic stream of pseudo-random numbers (SplitMix64).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn hex(&mut self, digits: usize) -> String {
        (0..digits.div_ceil(16))
            .map(|_| format!("{:016x}", self.next()))
            .collect::<String>()[..digits]
            .to_owned()
    }

    /// Whether an event of `percent` happens.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// `count` synthetic packages shaped like Debian's: the same fields, about as often present and
/// as long.
fn synthetic(count: usize) -> Source {
    let mut mix = Mix(0x1de3);
    let rows = (0..count)
        .map(|n| {
            let name = format!("libsynthetic-{n:05}");
            let architecture = if mix.chance(30) { "all" } else { "amd64" };
            let version = format!("{}.{}.{}-{}", n % 7, n % 31, n % 97, n % 5 + 1);
            let deps = |mix: &mut Mix, percent, what: &str| {
                mix.chance(percent).then(|| {
                    (0..1 + mix.next() % 6)
                        .map(|i| format!("{what}{} (>= {}.{i})", mix.next() % 9000, n % 13))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
            };
            Package {
                depends: deps(&mut mix, 88, "libdep"),
                pre_depends: deps(&mut mix, 1, "dpkg"),
                recommends: deps(&mut mix, 16, "librecommended"),
                suggests: deps(&mut mix, 18, "libsuggested"),
                enhances: deps(&mut mix, 2, "enhanced"),
                breaks: deps(&mut mix, 8, "broken"),
                conflicts: deps(&mut mix, 5, "conflicting"),
                replaces: deps(&mut mix, 9, "replaced"),
                provides: deps(&mut mix, 15, "virtual"),
                built_using: deps(&mut mix, 4, "rustc"),
                installed_size: Some((mix.next() % 20_000) as i64),
                maintainer: format!(
                    "Synthetic Team {} <team-{}@lists.example.org>",
                    n % 300,
                    n % 300
                ),
                source: mix.chance(72).then(|| format!("synthetic-{}", n / 3)),
                description: format!("synthetic library number {n} for storage measurements"),
                description_md5: Some(mix.hex(32)),
                homepage: mix
                    .chance(93)
                    .then(|| format!("https://example.org/projects/{name}")),
                tag: mix.chance(48).then(|| {
                    "devel::library, implemented-in::c,\n role::devel-lib, role::shared-lib"
                        .to_owned()
                }),
                section: Some(["libs", "devel", "utils", "python"][n % 4].to_owned()),
                priority: Some("optional".to_owned()),
                multi_arch: mix.chance(36).then(|| "same".to_owned()),
                essential: None,
                ruby_versions: None,
                lua_versions: None,
                filename: format!(
                    "pool/main/s/synthetic-{}/{name}_{version}_{architecture}.deb",
                    n / 3
                ),
                size: (mix.next() % 5_000_000) as i64,
                md5sum: mix.hex(32),
                sha256: mix.hex(64),
                package: name,
                architecture: architecture.to_owned(),
                version,
            }
        })
        .collect();
    Source {
        rows,
        said: format!("{count} synthetic packages of Debian's shape (no Packages index used)"),
    }
}

// ------------------------------------------------------------------------------------------------
// Cells and columns

/// One bound value, typed as its column holds it (so a NULL is bound with its column's type).
#[derive(Clone, Debug)]
enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    Bytes(Option<Vec<u8>>),
}

/// A package's data columns, in the order of `Package::stored_columns()`.
fn data_cells(package: &Package) -> Result<Vec<Cell>, String> {
    let value = serde_json::to_value(package).map_err(|e| e.to_string())?;
    Package::stored_columns()
        .iter()
        .map(|column| {
            let value = &value[column.stored_name()];
            match column.shape() {
                ColumnShape::Integer => Ok(Cell::Int(value.as_i64())),
                ColumnShape::Text => Ok(Cell::Text(value.as_str().map(str::to_owned))),
                other => Err(format!("{}: no cell for {other:?}", column.stored_name())),
            }
        })
        .collect()
}

/// One column of a table this benchmark makes: its line in `CREATE TABLE` and how a value is
/// bound to it (`{}` stands for the parameter: `{}::jsonb` on PostgreSQL).
#[derive(Clone, Debug)]
struct ColumnDef {
    name: String,
    definition: String,
    placeholder: &'static str,
}

/// idem's `CREATE TABLE` of `Package` on one store, in parts: what the plain tables and the
/// stored forms of idem's columns are made of.
struct IdemDdl {
    sql: String,
    quote: char,
    /// `CREATE TABLE IF NOT EXISTS "debian_packages" (`
    head: String,
    /// The natural key's columns, quoted and comma-separated.
    key: String,
    /// `)` and the table options.
    tail: String,
    /// Each column's line, by name.
    lines: HashMap<String, String>,
}

impl IdemDdl {
    /// Splits `sql` (one column or constraint a line, as `create_table_sql` writes it).
    fn parse(sql: String, quote: char) -> Result<IdemDdl, String> {
        let lines: Vec<&str> = sql.lines().collect();
        let shape =
            || format!("create_table_sql wrote a shape this benchmark does not read:\n{sql}");
        let (head, body, tail) = match lines.as_slice() {
            [head, body @ .., tail] if head.ends_with('(') && tail.starts_with(')') => {
                (head.to_string(), body, tail.to_string())
            }
            _ => return Err(shape()),
        };
        let mut key = None;
        let mut columns = HashMap::new();
        for line in body {
            let line = line.trim().trim_end_matches(',');
            // The natural key's unique constraint, or the primary key on it (MariaDB, whose rows
            // are clustered on the primary key), not the one on `_id`.
            let columns_of = |line: &str| {
                let columns = line.split_once('(')?.1.strip_suffix(')')?;
                (columns != format!("{quote}_id{quote}")).then(|| columns.to_owned())
            };
            if line.starts_with("CONSTRAINT") && line.contains("UNIQUE")
                || line.starts_with("PRIMARY KEY (")
            {
                key = key.or(columns_of(line));
            } else if let Some(rest) = line.strip_prefix(quote) {
                let name = rest.split(quote).next().ok_or_else(shape)?;
                columns.insert(name.to_owned(), line.to_owned());
            }
        }
        for column in Package::stored_columns() {
            if !columns.contains_key(column.stored_name()) {
                return Err(shape());
            }
        }
        Ok(IdemDdl {
            key: key.ok_or_else(shape)?,
            head,
            tail,
            lines: columns,
            quote,
            sql,
        })
    }

    fn quoted(&self, name: &str) -> String {
        format!("{q}{name}{q}", q = self.quote)
    }

    /// The data columns, as idem declares them.
    fn data_columns(&self) -> Vec<ColumnDef> {
        Package::stored_columns()
            .iter()
            .map(|column| ColumnDef {
                name: column.stored_name().to_owned(),
                definition: self.lines[column.stored_name()].clone(),
                placeholder: "{}",
            })
            .collect()
    }

    /// idem's line for its column `name`, without an inline primary key.
    fn stored_line(&self, name: &str) -> Option<String> {
        self.lines
            .get(name)
            .map(|line| line.replace(" PRIMARY KEY", ""))
    }

    /// `CREATE TABLE` of `table` with `columns` and the natural key's unique constraint.
    fn table_sql(&self, table: &str, columns: &[ColumnDef]) -> String {
        let head = self.head.replace(
            &self.quoted(Package::MODEL.collection()),
            &self.quoted(table),
        );
        let constraint = self.quoted(&format!("{table}_natural_key"));
        let key = format!("CONSTRAINT {constraint} UNIQUE ({})", self.key);
        let mut body: Vec<String> = columns
            .iter()
            .map(|column| format!("    {}", column.definition))
            .collect();
        body.push(format!("    {key}"));
        format!("{head}\n{}\n{}", body.join(",\n"), self.tail)
    }
}

// ------------------------------------------------------------------------------------------------
// idem's columns and their forms

/// idem's own columns of one row, as stored (read back from its table).
#[derive(Clone, Debug)]
struct Stored {
    id: String,
    hash: String,
    /// `idemFrozen` as its hex.
    frozen: Option<String>,
    /// The frozen fields' value digests, each as its bytes, concatenated in the model's field
    /// order: what a digest a field would store, computed from the row's package.
    field_digests: Vec<u8>,
    /// NULL until `apply_once` records an op: none in an ingest.
    applied_ops: Option<String>,
    marker: Option<String>,
}

/// A form of one of idem's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    IdText,
    IdBinary,
    /// PostgreSQL's 16-byte `uuid`, which an index holds without a length byte.
    IdUuid,
    HashText,
    HashBytes,
    FrozenStored,
    FrozenBytes,
    /// No digests: a frozen field held in a scalar column (text, integer) can be compared with
    /// the incoming value as stored.
    FrozenNull,
    /// One digest over all the guarded fields together, 32 bytes, in place of one a field.
    FrozenOne32,
    /// The same, 16 bytes.
    FrozenOne16,
    OpsDefault,
    OpsNull,
    MarkerStored,
    MarkerNull,
    MarkerBinary,
}

impl Form {
    /// idem's column of this form.
    fn column(self) -> &'static str {
        match self {
            Form::IdText | Form::IdBinary | Form::IdUuid => "_id",
            Form::HashText | Form::HashBytes => Package::MODEL.hash_field(),
            Form::FrozenStored
            | Form::FrozenBytes
            | Form::FrozenNull
            | Form::FrozenOne32
            | Form::FrozenOne16 => "idemFrozen",
            Form::OpsDefault | Form::OpsNull => "idemAppliedOps",
            Form::MarkerStored | Form::MarkerNull | Form::MarkerBinary => "idemWrite",
        }
    }

    fn describe(self, index: Index) -> String {
        let form = match self {
            Form::IdText => "_id as stored (26-character ULID text)",
            Form::IdBinary => "_id as the ULID's 16 bytes",
            Form::IdUuid => "_id as uuid (the ULID's 16 bytes)",
            Form::HashText => "content hash as 64 hex digits (as earlier releases stored it)",
            Form::HashBytes => "content hash as stored (its 32 bytes)",
            Form::FrozenStored => "idemFrozen as stored",
            Form::FrozenBytes => "idemFrozen as the digests' bytes, concatenated",
            Form::FrozenNull => "idemFrozen NULL",
            Form::FrozenOne32 => {
                "idemFrozen as one digest over all frozen fields, 32 bytes (a stand-in: the \
                 field digests XORed)"
            }
            Form::FrozenOne16 => {
                "idemFrozen as one digest over all frozen fields, 16 bytes (a stand-in: the \
                 field digests XORed, the first 16)"
            }
            Form::OpsDefault => "idemAppliedOps '[]' (as earlier releases stored it)",
            Form::OpsNull => "idemAppliedOps as stored (NULL)",
            Form::MarkerStored => "idemWrite as stored",
            Form::MarkerNull => "idemWrite NULL",
            Form::MarkerBinary => "idemWrite as 8 bytes (its text's last 8, a stand-in)",
        };
        match index {
            Index::PrimaryKey => format!("+ {form}, PRIMARY KEY"),
            Index::Unique => format!("+ {form}, UNIQUE, rows clustered on the natural key"),
            Index::None => format!("+ {form}"),
        }
    }

    /// Whether the form is the one idem stores, declared by idem's own line.
    fn is_stored(self) -> bool {
        matches!(
            self,
            Form::IdText
                | Form::HashBytes
                | Form::FrozenStored
                | Form::FrozenNull
                | Form::OpsNull
                | Form::MarkerStored
                | Form::MarkerNull
        )
    }

    /// The value of `stored` in this form.
    fn cell(self, stored: &Stored) -> Result<Cell, String> {
        Ok(match self {
            Form::IdText => Cell::Text(Some(stored.id.clone())),
            Form::IdBinary => Cell::Bytes(Some(ulid_bytes(&stored.id)?.to_vec())),
            Form::IdUuid => Cell::Text(Some(hex(&ulid_bytes(&stored.id)?))),
            Form::HashText => Cell::Text(Some(stored.hash.clone())),
            Form::HashBytes => Cell::Bytes(Some(digest_bytes(&stored.hash)?)),
            Form::FrozenStored => Cell::Bytes(match &stored.frozen {
                Some(hex) => Some(digest_bytes(hex)?),
                None => None,
            }),
            Form::FrozenBytes => Cell::Bytes(Some(stored.field_digests.clone())),
            Form::FrozenOne32 | Form::FrozenOne16 => {
                let mut digest = one_digest(&stored.field_digests);
                digest.truncate(match self {
                    Form::FrozenOne16 => 16,
                    _ => 32,
                });
                Cell::Bytes(Some(digest))
            }
            Form::OpsDefault => Cell::Text(Some(
                stored
                    .applied_ops
                    .clone()
                    .unwrap_or_else(|| "[]".to_owned()),
            )),
            Form::FrozenNull => Cell::Bytes(None),
            Form::OpsNull | Form::MarkerNull => Cell::Text(None),
            Form::MarkerStored => Cell::Text(stored.marker.clone()),
            Form::MarkerBinary => Cell::Bytes(Some(match &stored.marker {
                Some(marker) => marker.bytes().rev().take(8).collect(),
                None => vec![0; 8],
            })),
        })
    }
}

fn ulid_bytes(id: &str) -> Result<[u8; 16], String> {
    ulid::Ulid::from_string(id)
        .map(|ulid| ulid.to_bytes())
        .map_err(|e| format!("_id {id:?}: {e}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The bytes of a digest's text: hex digits after an optional `algorithm:` prefix.
fn digest_bytes(text: &str) -> Result<Vec<u8>, String> {
    let digits = text.rsplit(':').next().unwrap_or(text);
    if !digits.len().is_multiple_of(2) {
        return Err(format!("not a hex digest: {text:?}"));
    }
    (0..digits.len())
        .step_by(2)
        .map(|at| {
            u8::from_str_radix(&digits[at..at + 2], 16)
                .map_err(|_| format!("not a hex digest: {text:?}"))
        })
        .collect()
}

/// The value digests of `package`'s frozen fields, each as its bytes, concatenated in the
/// model's field order: what a digest a field stores (MongoDB's `idemFrozen`) holds.
fn field_digests(package: &Package) -> Result<Vec<u8>, String> {
    let hashes = [
        idem_core::hash::hash_value(&package.filename),
        idem_core::hash::hash_value(&package.size),
        idem_core::hash::hash_value(&package.md5sum),
        idem_core::hash::hash_value(&package.sha256),
    ];
    let mut bytes = Vec::new();
    for hash in hashes {
        bytes.extend(digest_bytes(&hash?.to_string())?);
    }
    Ok(bytes)
}

/// One 32-byte digest standing in for a digest over all of `idemFrozen`'s fields together: the
/// field digests XORed (as random as a digest, and of its size, which is all a measurement of
/// storage needs).
fn one_digest(field_digests: &[u8]) -> Vec<u8> {
    let mut digest = vec![0; 32];
    for (at, byte) in field_digests.iter().enumerate() {
        digest[at % 32] ^= byte;
    }
    digest
}

/// The index on an extra column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Index {
    None,
    PrimaryKey,
    /// MariaDB: a unique index on the column, left nullable so that InnoDB keeps clustering the
    /// rows on the natural key (its first unique index of `NOT NULL` columns), as the plain
    /// table's are, rather than on `_id`.
    Unique,
}

/// One extra column of a variant: a form, and its index.
#[derive(Clone, Copy, Debug)]
struct Extra {
    form: Form,
    index: Index,
}

impl Extra {
    fn new(form: Form, index: Index) -> Extra {
        Extra { form, index }
    }
}

/// How a variant fills its table.
#[derive(Clone, Debug)]
enum Way {
    /// idem's `upsert_many` into its own table.
    Idem { one_transaction: bool },
    /// idem's table, the rows idem stored by multi-row `INSERT`.
    IdemRowsByInsert,
    /// The plain table plus `extras`, by multi-row `INSERT`.
    Insert {
        extras: Vec<Extra>,
        commit_each_chunk: bool,
    },
    /// The plain table by `COPY` (PostgreSQL).
    Copy,
}

struct Variant {
    name: String,
    way: Way,
    /// For a variant held to the goal (table and WAL within 1.25x of the plain table's): the
    /// plain variant of the same commits whose WAL it is held against.
    goal: Option<&'static str>,
}

/// The variants on a store of `kind`, in the order they run (idem's first: the others use the
/// values it stored).
fn variants(kind: Kind) -> Vec<Variant> {
    let marker = kind != Kind::Postgres;
    let insert = |extras: Vec<Extra>| Way::Insert {
        extras,
        commit_each_chunk: false,
    };
    let single = |form: Form, index: Index| Variant {
        name: form.describe(index),
        way: insert(vec![Extra::new(form, index)]),
        goal: None,
    };
    let mut list = vec![
        Variant {
            name: "idem upsert_many (a commit per chunk)".into(),
            way: Way::Idem {
                one_transaction: false,
            },
            goal: Some(PLAIN_PER_CHUNK),
        },
        Variant {
            name: "idem upsert_many inside one transaction".into(),
            way: Way::Idem {
                one_transaction: true,
            },
            goal: None,
        },
        Variant {
            name: "idem's table, idem's rows by multi-row INSERT".into(),
            way: Way::IdemRowsByInsert,
            goal: None,
        },
        Variant {
            name: PLAIN.into(),
            way: insert(Vec::new()),
            goal: None,
        },
        Variant {
            name: PLAIN_PER_CHUNK.into(),
            way: Way::Insert {
                extras: Vec::new(),
                commit_each_chunk: true,
            },
            goal: None,
        },
    ];
    if kind == Kind::Postgres {
        list.push(Variant {
            name: "plain: COPY".into(),
            way: Way::Copy,
            goal: None,
        });
    }
    let ids: &[Form] = match kind {
        Kind::Postgres => &[Form::IdText, Form::IdBinary, Form::IdUuid],
        _ => &[Form::IdText, Form::IdBinary],
    };
    // A UNIQUE index is stored as the primary key's is, except on MariaDB, whose rows are
    // clustered on the primary key.
    let indexes: &[Index] = match kind {
        Kind::Mysql => &[Index::None, Index::PrimaryKey, Index::Unique],
        _ => &[Index::None, Index::PrimaryKey],
    };
    for &index in indexes {
        list.extend(ids.iter().map(|&form| single(form, index)));
    }
    let mut others = vec![
        Form::HashText,
        Form::HashBytes,
        Form::FrozenStored,
        Form::FrozenBytes,
        Form::FrozenOne32,
        Form::FrozenOne16,
        Form::OpsDefault,
        Form::OpsNull,
    ];
    if marker {
        others.extend([Form::MarkerStored, Form::MarkerNull, Form::MarkerBinary]);
    }
    list.extend(others.into_iter().map(|form| single(form, Index::None)));
    // idem's columns together in the smallest forms, with the digests' bytes and without
    // digests; the one without digests under the best index also with a commit per chunk, as
    // upsert_many commits outside a transaction.
    let binary_id = match kind {
        Kind::Postgres => Form::IdUuid,
        _ => Form::IdBinary,
    };
    let best = match kind {
        Kind::Mysql => Index::Unique,
        _ => Index::PrimaryKey,
    };
    let smallest_marker = marker.then_some(Form::MarkerBinary);
    for &index in &indexes[1..] {
        for frozen in [Form::FrozenBytes, Form::FrozenNull] {
            let goal = (index == best).then_some(PLAIN);
            list.push(together(
                binary_id,
                index,
                frozen,
                smallest_marker,
                false,
                goal,
            ));
        }
    }
    list.push(together(
        binary_id,
        best,
        Form::FrozenNull,
        smallest_marker,
        true,
        Some(PLAIN_PER_CHUNK),
    ));
    // idem's columns with one digest over all frozen fields: `_id` as stored (the fewest
    // changes users see) and binary, under each index, with the marker as stored and as 8
    // bytes; `_id` as stored also with a digest of 16 bytes; under the best index also with a
    // commit per chunk.
    let markers: &[Option<Form>] = match marker {
        true => &[Some(Form::MarkerStored), Some(Form::MarkerBinary)],
        false => &[None],
    };
    for &index in &indexes[1..] {
        for (id, one) in [
            (Form::IdText, Form::FrozenOne32),
            (Form::IdText, Form::FrozenOne16),
            (binary_id, Form::FrozenOne32),
        ] {
            for &marker in markers {
                list.push(together(id, index, one, marker, false, Some(PLAIN)));
            }
        }
    }
    for id in [Form::IdText, binary_id] {
        let marker = markers[0];
        let goal = Some(PLAIN_PER_CHUNK);
        list.push(together(id, best, Form::FrozenOne32, marker, true, goal));
    }
    list
}

/// A variant of all of idem's columns together: `_id` in form `id` under `index`, the hash's 32
/// bytes, `idemFrozen` in form `frozen`, ops NULL, and the marker in form `marker` where the
/// store has one; `goal` the plain variant its WAL is held against.
fn together(
    id: Form,
    index: Index,
    frozen: Form,
    marker: Option<Form>,
    commit_each_chunk: bool,
    goal: Option<&'static str>,
) -> Variant {
    let mut extras = vec![
        Extra::new(id, index),
        Extra::new(Form::HashBytes, Index::None),
        Extra::new(frozen, Index::None),
        Extra::new(Form::OpsNull, Index::None),
    ];
    extras.extend(marker.map(|form| Extra::new(form, Index::None)));
    let name = format!(
        "idem's columns, {}: {} {}, hash 32 bytes, {}, ops NULL{}{}",
        match frozen {
            Form::FrozenNull => "smallest, no digests",
            Form::FrozenOne32 | Form::FrozenOne16 => "one frozen digest",
            _ => "smallest",
        },
        match id {
            Form::IdText => "_id as stored (text)",
            Form::IdUuid => "_id uuid",
            _ => "_id 16 bytes",
        },
        match index {
            Index::Unique => "UNIQUE (rows clustered on the natural key)",
            _ => "PRIMARY KEY",
        },
        match frozen {
            Form::FrozenNull => "idemFrozen NULL",
            Form::FrozenOne32 => "one frozen digest of 32 bytes",
            Form::FrozenOne16 => "one frozen digest of 16 bytes",
            _ => "digests' bytes",
        },
        match marker {
            Some(Form::MarkerStored) => ", marker as stored",
            Some(_) => ", marker 8 bytes",
            None => "",
        },
        match commit_each_chunk {
            true => "; a commit per chunk",
            false => "",
        },
    );
    Variant {
        name,
        way: Way::Insert {
            extras,
            commit_each_chunk,
        },
        goal,
    }
}

/// The baseline of every ratio.
const PLAIN: &str = "plain: multi-row INSERT, one transaction";
/// The baseline of the WAL of the variants that commit each chunk.
const PLAIN_PER_CHUNK: &str = "plain: multi-row INSERT, a commit per chunk";

// ------------------------------------------------------------------------------------------------
// Writing through sqlx, the same on every store

/// Binds `cell` to `query`.
fn bind<'q, DB>(
    query: sqlx::query::Query<'q, DB, DB::Arguments>,
    cell: &Cell,
) -> sqlx::query::Query<'q, DB, DB::Arguments>
where
    DB: Database,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t [u8]>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
{
    match cell {
        Cell::Int(value) => query.bind(*value),
        Cell::Text(value) => query.bind(value.as_deref()),
        Cell::Bytes(value) => query.bind(value.as_deref()),
    }
}

/// Inserts `rows` into `table`'s `columns` by multi-row `INSERT`, as many rows a statement as
/// `chunk` and the store's bound-parameter limit allow, in one transaction or a commit per
/// chunk.
#[allow(clippy::too_many_arguments)]
async fn insert_rows<DB>(
    connection: &mut DB::Connection,
    kind: Kind,
    table: &str,
    columns: &[ColumnDef],
    rows: &[Vec<Cell>],
    chunk: usize,
    commit_each_chunk: bool,
) -> Result<(), Fatal>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t [u8]>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
{
    let per_statement = chunk.min(kind.max_params() / columns.len()).max(1);
    let names: Vec<String> = columns
        .iter()
        .map(|column| kind.quoted(&column.name))
        .collect();
    let per_transaction = match commit_each_chunk {
        true => per_statement,
        false => rows.len().max(1),
    };
    for batch in rows.chunks(per_transaction) {
        let mut transaction = connection.begin().await?;
        for rows in batch.chunks(per_statement) {
            let mut parameter = 0;
            let tuples: Vec<String> = rows
                .iter()
                .map(|_| {
                    let cells: Vec<String> = columns
                        .iter()
                        .map(|column| {
                            parameter += 1;
                            column.placeholder.replace("{}", &kind.parameter(parameter))
                        })
                        .collect();
                    format!("({})", cells.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO {} ({}) VALUES {}",
                kind.quoted(table),
                names.join(", "),
                tuples.join(", ")
            );
            let mut query = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
            for row in rows {
                for cell in row {
                    query = bind(query, cell);
                }
            }
            query.execute(&mut *transaction).await?;
        }
        transaction.commit().await?;
    }
    Ok(())
}

/// idem's own columns of every row of its table, by natural key, read with `sql` (which selects
/// the key's two columns, then `_id`, the hash, `idemFrozen`, `idemAppliedOps` and the marker,
/// each as text).
async fn read_stored<DB>(
    connection: &mut DB::Connection,
    sql: String,
) -> Result<HashMap<(String, String), Stored>, Fatal>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'r> Option<String>: Decode<'r, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let rows = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut *connection)
        .await?;
    let mut stored = HashMap::with_capacity(rows.len());
    for row in rows {
        stored.insert(
            (row.try_get(0)?, row.try_get(1)?),
            Stored {
                id: row.try_get(2)?,
                hash: row.try_get(3)?,
                frozen: row.try_get(4)?,
                field_digests: Vec::new(),
                applied_ops: row.try_get(5)?,
                marker: row.try_get(6)?,
            },
        );
    }
    Ok(stored)
}

/// The statement [`read_stored`] runs on a store of `kind`.
fn stored_sql(kind: Kind) -> String {
    let q = |name: &str| kind.quoted(name);
    let (json, marker) = match kind {
        Kind::Postgres => ("::text", "NULL::text".to_owned()),
        _ => ("", q("idemWrite")),
    };
    // The hash's and `idemFrozen`'s bytes as the hex text idem reads them as.
    let hex = |column: &str| match kind {
        Kind::Postgres => format!("encode({column}, 'hex')"),
        Kind::Sqlite => format!("nullif(lower(hex({column})), '')"),
        Kind::Mysql => format!("LOWER(HEX({column}))"),
    };
    let hash = hex(&q(Package::MODEL.hash_field()));
    let frozen = hex(&q("idemFrozen"));
    format!(
        "SELECT {}, {}, {}, {hash}, {frozen}, {}{json}, {marker} FROM {}",
        q("package"),
        q("architecture"),
        q("_id"),
        q("idemAppliedOps"),
        q(Package::MODEL.collection())
    )
}

/// Whether idem wrote every row of `report`.
fn all_written(report: BatchReport) -> Result<(), Fatal> {
    match report.refused() {
        0 => Ok(()),
        _ => Err(fatal(format!("idem refused rows: {report}"))),
    }
}

// ------------------------------------------------------------------------------------------------
// The stores

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Postgres,
    Sqlite,
    Mysql,
}

impl Kind {
    fn quoted(self, name: &str) -> String {
        match self {
            Kind::Mysql => format!("`{name}`"),
            _ => format!("\"{name}\""),
        }
    }

    /// The `n`th bound parameter's placeholder.
    fn parameter(self, n: usize) -> String {
        match self {
            Kind::Postgres => format!("${n}"),
            _ => "?".to_owned(),
        }
    }

    /// The most bound parameters a statement takes.
    fn max_params(self) -> usize {
        match self {
            Kind::Sqlite => 32_766,
            _ => 65_535,
        }
    }

    /// The column of `extra` (idem's own line for a form idem stores) with its index; `None`
    /// where the store has no such column.
    fn column(self, ddl: &IdemDdl, extra: Extra) -> Option<ColumnDef> {
        let name = extra.form.column();
        let quoted = self.quoted(name);
        let mut definition = match (extra.form, self) {
            (Form::IdUuid, Kind::Postgres) => format!("{quoted} uuid"),
            (Form::IdUuid, _) => return None,
            // As earlier releases declared them.
            (Form::HashText, Kind::Postgres) => format!("{quoted} text"),
            (Form::HashText, Kind::Sqlite) => format!("{quoted} TEXT"),
            (Form::HashText, Kind::Mysql) => {
                format!("{quoted} VARCHAR(71) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin")
            }
            (Form::OpsDefault, Kind::Postgres) => format!("{quoted} jsonb NOT NULL DEFAULT '[]'"),
            (Form::OpsDefault, Kind::Sqlite) => format!("{quoted} TEXT NOT NULL DEFAULT '[]'"),
            (Form::OpsDefault, Kind::Mysql) => format!("{quoted} JSON NOT NULL DEFAULT '[]'"),
            (form, _) if form.is_stored() => ddl.stored_line(name)?,
            (Form::IdBinary, Kind::Mysql) => format!("{quoted} BINARY(16)"),
            (Form::HashBytes, Kind::Mysql) => format!("{quoted} BINARY(32)"),
            (Form::FrozenBytes, Kind::Mysql) => format!("{quoted} VARBINARY(255)"),
            (Form::FrozenOne32, Kind::Mysql) => format!("{quoted} BINARY(32)"),
            (Form::FrozenOne16, Kind::Mysql) => format!("{quoted} BINARY(16)"),
            (Form::MarkerBinary, Kind::Mysql) => format!("{quoted} BINARY(8)"),
            (_, Kind::Mysql) => return None,
            (_, Kind::Postgres) => format!("{quoted} bytea"),
            (_, Kind::Sqlite) => format!("{quoted} BLOB"),
        };
        match extra.index {
            Index::None => {}
            Index::PrimaryKey => definition.push_str(match self {
                Kind::Sqlite if !definition.contains("NOT NULL") => " NOT NULL PRIMARY KEY",
                _ => " PRIMARY KEY",
            }),
            Index::Unique => definition = definition.replace(" NOT NULL", "") + " UNIQUE",
        }
        let placeholder = match (self, extra.form) {
            (Kind::Postgres, Form::IdUuid) => "{}::uuid",
            (Kind::Postgres, Form::OpsDefault | Form::OpsNull) => "{}::jsonb",
            _ => "{}",
        };
        Some(ColumnDef {
            name: name.to_owned(),
            definition,
            placeholder,
        })
    }
}

/// What one ingest measured.
#[derive(Clone, Copy, Debug)]
struct Figures {
    table: u64,
    index: u64,
    /// The WAL (redo) bytes of the ingest.
    wal: u64,
    /// The file the table lives in, where it has one of its own.
    file: Option<u64>,
}

/// A store under measurement.
trait StoreUnderTest {
    fn kind(&self) -> Kind;
    /// What the output calls it.
    fn label(&self) -> &str;
    /// Its version and the settings that decide its figures.
    fn detail(&self) -> &str;
    /// What its figures depend on beyond the method, to say with them.
    fn notes(&self) -> Vec<String>;
    /// Makes a fresh, empty `table` with `sql`.
    async fn create(&mut self, table: &str, sql: &str) -> Result<(), Fatal>;
    /// Makes idem's table afresh (`ensure_table`).
    async fn create_idem(&mut self) -> Result<(), Fatal>;
    /// Starts a measured window on `table`.
    async fn start(&mut self, table: &str) -> Result<(), Fatal>;
    /// Ends the window: the table's sizes and the window's WAL.
    async fn finish(&mut self, table: &str) -> Result<Figures, Fatal>;
    /// Writes `rows` into `columns` of `table` ([`insert_rows`]).
    async fn insert(
        &mut self,
        table: &str,
        columns: &[ColumnDef],
        rows: &[Vec<Cell>],
        commit_each_chunk: bool,
    ) -> Result<(), Fatal>;
    /// `COPY` of the data columns (PostgreSQL's alone: the others have no such variant).
    async fn copy(&mut self, table: &str, rows: &[Vec<Cell>]) -> Result<(), Fatal>;
    /// idem's `upsert_many` of `packages` into its table, inside one transaction if asked.
    async fn idem(&mut self, packages: &[Package], one_transaction: bool) -> Result<(), Fatal>;
    /// idem's own columns of every row of its table ([`read_stored`]).
    async fn read_stored(&mut self) -> Result<HashMap<(String, String), Stored>, Fatal>;
    /// Drops `table` (SQLite: closes and deletes its file).
    async fn drop_table(&mut self, table: &str) -> Result<(), Fatal>;
    /// Removes what the benchmark made.
    async fn clean_up(&mut self) -> Result<(), Fatal>;
}

// PostgreSQL --------------------------------------------------------------------------------------

struct Postgres {
    label: String,
    detail: String,
    /// idem's writes go through tokio-postgres, its first PostgreSQL wire.
    client: tokio_postgres::Client,
    /// The hand-written ones, and every measurement, through sqlx.
    connection: PgConnection,
    schema: String,
    /// The schema `pg_walinspect`'s functions are in, where it can be used.
    walinspect: Option<String>,
    /// The window's start: its WAL insert position and the relfilenodes it watches.
    window: (u64, Vec<u32>),
    /// The WAL of every window not attributed to its table (other sessions', commit records).
    unattributed: u64,
}

impl Postgres {
    async fn connect(label: &str, uri: &str) -> Result<Postgres, Fatal> {
        let schema = format!("idem_storage_{}", std::process::id());
        let options = PgConnectOptions::from_str(uri)
            .map_err(|e| fatal(format!("{label}: {e}")))?
            .options([("search_path", schema.as_str())]);
        let mut connection = options.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.storage_flush (n int)"
        )))
        .execute(&mut connection)
        .await?;
        let (client, driver) = tokio_postgres::connect(uri, NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = driver.await {
                eprintln!("bench_storage: connection: {error}");
            }
        });
        client
            .batch_execute(&format!("SET search_path TO {schema}"))
            .await?;
        let walinspect = Self::walinspect(&mut connection, &schema).await;
        let (version, full_page_writes): (String, String) = sqlx::query_as(
            "SELECT current_setting('server_version'), current_setting('full_page_writes')",
        )
        .fetch_one(&mut connection)
        .await?;
        let version = version.split_whitespace().next().unwrap_or("").to_owned();
        Ok(Postgres {
            label: format!("PostgreSQL {}", version.split('.').next().unwrap_or("")),
            detail: format!(
                "PostgreSQL {version} ({label}; full_page_writes {full_page_writes}; WAL {})",
                match walinspect {
                    Some(_) => "of the table's relations, by pg_walinspect",
                    None => "insert positions' difference: pg_walinspect unavailable",
                }
            ),
            client,
            connection,
            schema,
            walinspect,
            window: (0, Vec::new()),
            unattributed: 0,
        })
    }

    /// The schema of `pg_walinspect`, created in `schema` if it is not installed; `None` where
    /// it cannot be.
    async fn walinspect(connection: &mut PgConnection, schema: &str) -> Option<String> {
        let installed: Option<String> = sqlx::query_scalar(
            "SELECT extnamespace::regnamespace::text FROM pg_extension \
             WHERE extname = 'pg_walinspect'",
        )
        .fetch_optional(&mut *connection)
        .await
        .ok()?;
        if installed.is_some() {
            return installed;
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE EXTENSION pg_walinspect WITH SCHEMA {schema}"
        )))
        .execute(&mut *connection)
        .await
        .ok()
        .map(|_| schema.to_owned())
    }

    /// Turns autovacuum off for `table`: a vacuum of rows a chunk committed would write WAL on
    /// the table (and its maps) within the window.
    async fn without_autovacuum(&mut self, table: &str) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)",
            Kind::Postgres.quoted(table)
        )))
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }

    async fn lsn(&mut self) -> Result<u64, Fatal> {
        let text: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(&mut self.connection)
            .await?;
        let (high, low) = text
            .split_once('/')
            .ok_or_else(|| fatal(format!("an LSN this benchmark cannot read: {text}")))?;
        let part = |digits| u64::from_str_radix(digits, 16).map_err(|e| fatal(e.to_string()));
        Ok((part(high)? << 32) | part(low)?)
    }
}

impl StoreUnderTest for Postgres {
    fn kind(&self) -> Kind {
        Kind::Postgres
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn detail(&self) -> &str {
        &self.detail
    }

    fn notes(&self) -> Vec<String> {
        match self.unattributed {
            0 => Vec::new(),
            bytes => vec![format!(
                "{}: {} of WAL in the windows touched no measured table (commit records, other \
                 sessions)",
                self.label,
                fmt_bytes(bytes)
            )],
        }
    }

    async fn create(&mut self, table: &str, sql: &str) -> Result<(), Fatal> {
        self.drop_table(table).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut self.connection)
            .await?;
        self.without_autovacuum(table).await
    }

    async fn create_idem(&mut self) -> Result<(), Fatal> {
        self.drop_table(Package::MODEL.collection()).await?;
        idem_core::postgres::Store::new()
            .ensure_table::<Package, _>(&self.client)
            .await?;
        self.without_autovacuum(Package::MODEL.collection()).await
    }

    async fn start(&mut self, table: &str) -> Result<(), Fatal> {
        sqlx::raw_sql("CHECKPOINT")
            .execute(&mut self.connection)
            .await?;
        let nodes: Vec<i64> = sqlx::query_scalar(
            "SELECT pg_relation_filenode(c.oid)::bigint FROM pg_class c \
             WHERE c.oid = $1::regclass \
                OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass) \
                OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass \
                   OR indrelid = (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass))",
        )
        .bind(self.kind().quoted(table))
        .fetch_all(&mut self.connection)
        .await?;
        let start = self.lsn().await?;
        self.window = (start, nodes.into_iter().map(|node| node as u32).collect());
        Ok(())
    }

    async fn finish(&mut self, table: &str) -> Result<Figures, Fatal> {
        let end = self.lsn().await?;
        let (start, nodes) = std::mem::take(&mut self.window);
        let quoted = self.kind().quoted(table);
        let (table_bytes, index_bytes): (i64, i64) =
            sqlx::query_as("SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)")
                .bind(&quoted)
                .fetch_one(&mut self.connection)
                .await?;
        let mut wal = end - start;
        if let Some(schema) = &self.walinspect {
            // pg_walinspect reads WAL up to the flush position only: a commit that wrote WAL and
            // waits for its flush brings it past `end`.
            sqlx::raw_sql(
                "BEGIN; SET LOCAL synchronous_commit = on; INSERT INTO storage_flush VALUES (1); \
                 COMMIT",
            )
            .execute(&mut self.connection)
            .await?;
            let nodes: Vec<String> = nodes.iter().map(u32::to_string).collect();
            let pattern = format!("rel [0-9]+/[0-9]+/({})\\M", nodes.join("|"));
            let attributed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(sum(record_length), 0)::bigint \
                 FROM {schema}.pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) \
                 WHERE block_ref ~ $3"
            )))
            .bind(format_lsn(start))
            .bind(format_lsn(end))
            .bind(pattern)
            .fetch_one(&mut self.connection)
            .await?;
            self.unattributed += wal.saturating_sub(attributed as u64);
            wal = attributed as u64;
        }
        Ok(Figures {
            table: table_bytes as u64,
            index: index_bytes as u64,
            wal,
            file: None,
        })
    }

    async fn insert(
        &mut self,
        table: &str,
        columns: &[ColumnDef],
        rows: &[Vec<Cell>],
        commit_each_chunk: bool,
    ) -> Result<(), Fatal> {
        insert_rows::<sqlx::Postgres>(
            &mut self.connection,
            Kind::Postgres,
            table,
            columns,
            rows,
            CHUNK,
            commit_each_chunk,
        )
        .await
    }

    async fn copy(&mut self, table: &str, rows: &[Vec<Cell>]) -> Result<(), Fatal> {
        let names: Vec<String> = Package::stored_columns()
            .iter()
            .map(|column| self.kind().quoted(column.stored_name()))
            .collect();
        let mut text = String::new();
        for row in rows {
            let fields: Vec<String> = row.iter().map(copy_text).collect();
            text.push_str(&fields.join("\t"));
            text.push('\n');
        }
        let mut copy = self
            .connection
            .copy_in_raw(&format!(
                "COPY {} ({}) FROM STDIN",
                self.kind().quoted(table),
                names.join(", ")
            ))
            .await?;
        copy.send(text.as_bytes()).await?;
        copy.finish().await?;
        Ok(())
    }

    async fn idem(&mut self, packages: &[Package], one_transaction: bool) -> Result<(), Fatal> {
        let store = idem_core::postgres::Store::new();
        match one_transaction {
            true => {
                let transaction = self.client.transaction().await?;
                all_written(store.upsert_many(&transaction, packages).await?)?;
                transaction.commit().await?;
            }
            false => all_written(store.upsert_many(&self.client, packages).await?)?,
        }
        Ok(())
    }

    async fn read_stored(&mut self) -> Result<HashMap<(String, String), Stored>, Fatal> {
        read_stored::<sqlx::Postgres>(&mut self.connection, stored_sql(Kind::Postgres)).await
    }

    async fn drop_table(&mut self, table: &str) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {}",
            self.kind().quoted(table)
        )))
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }

    async fn clean_up(&mut self) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }
}

/// `cell` in `COPY`'s text format.
fn copy_text(cell: &Cell) -> String {
    match cell {
        Cell::Int(Some(value)) => value.to_string(),
        Cell::Text(Some(text)) => text
            .replace('\\', "\\\\")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
            .replace('\t', "\\t"),
        Cell::Bytes(Some(bytes)) => format!("\\\\x{}", hex(bytes)),
        Cell::Int(None) | Cell::Text(None) | Cell::Bytes(None) => "\\N".to_owned(),
    }
}

fn format_lsn(position: u64) -> String {
    format!("{:X}/{:X}", position >> 32, position & 0xFFFF_FFFF)
}

// SQLite ------------------------------------------------------------------------------------------

struct Sqlite {
    detail: String,
    directory: PathBuf,
    /// The open file: its table's connection and path.
    open: Option<(SqliteConnection, PathBuf)>,
}

impl Sqlite {
    async fn new() -> Result<Sqlite, Fatal> {
        let directory =
            std::env::temp_dir().join(format!("idem-bench-storage-{}", std::process::id()));
        std::fs::create_dir_all(&directory)?;
        let mut memory = SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await?;
        let (version, page_size): (String, i64) =
            sqlx::query_as("SELECT sqlite_version(), (SELECT page_size FROM pragma_page_size)")
                .fetch_one(&mut memory)
                .await?;
        Ok(Sqlite {
            detail: format!(
                "SQLite {version} (WAL, synchronous=NORMAL, page size {page_size}, a file per \
                 variant)"
            ),
            directory,
            open: None,
        })
    }

    /// Opens a fresh database file for `table`, closing (and deleting) the last one.
    async fn open(&mut self, table: &str) -> Result<&mut SqliteConnection, Fatal> {
        self.close().await?;
        let path = self.directory.join(format!("{table}.db"));
        let connection = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .pragma("wal_autocheckpoint", "0")
            .connect()
            .await?;
        Ok(&mut self.open.insert((connection, path)).0)
    }

    async fn close(&mut self) -> Result<(), Fatal> {
        if let Some((connection, path)) = self.open.take() {
            connection.close().await?;
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
        Ok(())
    }

    fn connection(&mut self) -> Result<&mut SqliteConnection, Fatal> {
        self.open
            .as_mut()
            .map(|(connection, _)| connection)
            .ok_or_else(|| fatal("no SQLite file is open"))
    }

    fn wal_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |(_, path)| {
            std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |meta| meta.len())
        })
    }

    async fn checkpoint(&mut self) -> Result<(), Fatal> {
        sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(self.connection()?)
            .await?;
        Ok(())
    }
}

impl StoreUnderTest for Sqlite {
    fn kind(&self) -> Kind {
        Kind::Sqlite
    }

    fn label(&self) -> &str {
        "SQLite"
    }

    fn detail(&self) -> &str {
        &self.detail
    }

    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    async fn create(&mut self, table: &str, sql: &str) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(self.open(table).await?)
            .await?;
        Ok(())
    }

    async fn create_idem(&mut self) -> Result<(), Fatal> {
        let connection = self.open(Package::MODEL.collection()).await?;
        idem_core::sqlite::Store::new()
            .ensure_table::<Package>(connection)
            .await?;
        Ok(())
    }

    async fn start(&mut self, _table: &str) -> Result<(), Fatal> {
        self.checkpoint().await
    }

    async fn finish(&mut self, table: &str) -> Result<Figures, Fatal> {
        let wal = self.wal_bytes();
        self.checkpoint().await?;
        let (table_bytes, index_bytes): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(sum(CASE WHEN s.type = 'table' THEN d.pgsize END), 0), \
                    coalesce(sum(CASE WHEN s.type = 'index' THEN d.pgsize END), 0) \
             FROM dbstat d JOIN sqlite_schema s ON s.name = d.name WHERE s.tbl_name = ?",
        )
        .bind(table)
        .fetch_one(self.connection()?)
        .await?;
        let file = self
            .open
            .as_ref()
            .and_then(|(_, path)| std::fs::metadata(path).ok())
            .map(|meta| meta.len());
        Ok(Figures {
            table: table_bytes as u64,
            index: index_bytes as u64,
            wal,
            file,
        })
    }

    async fn insert(
        &mut self,
        table: &str,
        columns: &[ColumnDef],
        rows: &[Vec<Cell>],
        commit_each_chunk: bool,
    ) -> Result<(), Fatal> {
        insert_rows::<sqlx::Sqlite>(
            self.connection()?,
            Kind::Sqlite,
            table,
            columns,
            rows,
            CHUNK,
            commit_each_chunk,
        )
        .await
    }

    async fn copy(&mut self, _table: &str, _rows: &[Vec<Cell>]) -> Result<(), Fatal> {
        Err(fatal("no COPY here"))
    }

    async fn idem(&mut self, packages: &[Package], one_transaction: bool) -> Result<(), Fatal> {
        let store = idem_core::sqlite::Store::new();
        let connection = self.connection()?;
        match one_transaction {
            true => {
                let mut transaction = connection.begin().await?;
                all_written(store.upsert_many(&mut transaction, packages).await?)?;
                transaction.commit().await?;
            }
            false => all_written(store.upsert_many(connection, packages).await?)?,
        }
        Ok(())
    }

    async fn read_stored(&mut self) -> Result<HashMap<(String, String), Stored>, Fatal> {
        read_stored::<sqlx::Sqlite>(self.connection()?, stored_sql(Kind::Sqlite)).await
    }

    async fn drop_table(&mut self, _table: &str) -> Result<(), Fatal> {
        self.close().await
    }

    async fn clean_up(&mut self) -> Result<(), Fatal> {
        self.close().await?;
        let _ = std::fs::remove_dir_all(&self.directory);
        Ok(())
    }
}

// MariaDB -----------------------------------------------------------------------------------------

struct Mysql {
    detail: String,
    connection: MySqlConnection,
    database: String,
    /// `Innodb_lsn_current` at the window's start.
    start: u64,
    page_size: u64,
}

impl Mysql {
    async fn connect(uri: &str) -> Result<Mysql, Fatal> {
        let options = MySqlConnectOptions::from_str(uri)
            .map_err(|e| fatal(format!("MYSQL_URI: {e}")))?
            .ssl_mode(MySqlSslMode::Disabled)
            .disable_statement_logging();
        let database = format!("idem_storage_{}", std::process::id());
        let mut connection = options.connect().await?;
        for statement in [
            format!("DROP DATABASE IF EXISTS `{database}`"),
            format!("CREATE DATABASE `{database}`"),
            format!("USE `{database}`"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(&mut connection)
                .await?;
        }
        let (version, row_format, page_size): (String, String, i64) = sqlx::query_as(
            "SELECT VERSION(), @@innodb_default_row_format, CAST(@@innodb_page_size AS SIGNED)",
        )
        .fetch_one(&mut connection)
        .await?;
        Ok(Mysql {
            detail: format!(
                "MariaDB {version} (MYSQL_URI; InnoDB, {} KiB pages, row format {row_format}; \
                 sizes: leaf pages in use, by ANALYZE TABLE)",
                page_size / 1024
            ),
            connection,
            database,
            start: 0,
            page_size: page_size as u64,
        })
    }

    async fn lsn(&mut self) -> Result<u64, Fatal> {
        let (_, value): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_lsn_current'")
                .fetch_one(&mut self.connection)
                .await?;
        value
            .parse()
            .map_err(|_| fatal(format!("Innodb_lsn_current: {value:?}")))
    }
}

impl StoreUnderTest for Mysql {
    fn kind(&self) -> Kind {
        Kind::Mysql
    }

    fn label(&self) -> &str {
        "MariaDB"
    }

    fn detail(&self) -> &str {
        &self.detail
    }

    fn notes(&self) -> Vec<String> {
        vec![
            "MariaDB: redo is Innodb_lsn_current's difference, every session's: on a server \
              others use, their redo counts too"
                .to_owned(),
        ]
    }

    async fn create(&mut self, table: &str, sql: &str) -> Result<(), Fatal> {
        self.drop_table(table).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut self.connection)
            .await?;
        Ok(())
    }

    async fn create_idem(&mut self) -> Result<(), Fatal> {
        self.drop_table(Package::MODEL.collection()).await?;
        idem_core::mysql::Store::new()
            .ensure_table::<Package>(&mut self.connection)
            .await?;
        Ok(())
    }

    async fn start(&mut self, _table: &str) -> Result<(), Fatal> {
        self.start = self.lsn().await?;
        Ok(())
    }

    async fn finish(&mut self, table: &str) -> Result<Figures, Fatal> {
        let wal = self.lsn().await? - self.start;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ANALYZE TABLE `{table}`")))
            .execute(&mut self.connection)
            .await?;
        // Each index's leaf pages in use (the pages of its rows or entries, off-page values
        // included), which ANALYZE TABLE counts; the clustered index holds the rows.
        let leaves: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT CAST(s.stat_value AS SIGNED), CAST(i.TYPE & 1 AS SIGNED) \
             FROM mysql.innodb_index_stats s \
             JOIN information_schema.INNODB_SYS_TABLES t \
               ON t.NAME = concat(s.database_name, '/', s.table_name) \
             JOIN information_schema.INNODB_SYS_INDEXES i \
               ON i.TABLE_ID = t.TABLE_ID AND i.NAME = s.index_name \
             WHERE s.database_name = ? AND s.table_name = ? AND s.stat_name = 'n_leaf_pages'",
        )
        .bind(&self.database)
        .bind(table)
        .fetch_all(&mut self.connection)
        .await?;
        let bytes = |clustered: i64| {
            leaves
                .iter()
                .filter(|(_, kind)| *kind == clustered)
                .map(|(pages, _)| *pages as u64 * self.page_size)
                .sum::<u64>()
        };
        let (data, index) = (bytes(1), bytes(0));
        if leaves.iter().all(|(_, kind)| *kind != 1) {
            return Err(fatal(format!(
                "{table}: no clustered index in innodb_index_stats"
            )));
        }
        let file: Option<u64> = sqlx::query_scalar(
            "SELECT FILE_SIZE FROM information_schema.INNODB_SYS_TABLESPACES WHERE NAME = ?",
        )
        .bind(format!("{}/{table}", self.database))
        .fetch_optional(&mut self.connection)
        .await?;
        Ok(Figures {
            table: data,
            index,
            wal,
            file,
        })
    }

    async fn insert(
        &mut self,
        table: &str,
        columns: &[ColumnDef],
        rows: &[Vec<Cell>],
        commit_each_chunk: bool,
    ) -> Result<(), Fatal> {
        insert_rows::<sqlx::MySql>(
            &mut self.connection,
            Kind::Mysql,
            table,
            columns,
            rows,
            CHUNK,
            commit_each_chunk,
        )
        .await
    }

    async fn copy(&mut self, _table: &str, _rows: &[Vec<Cell>]) -> Result<(), Fatal> {
        Err(fatal("no COPY here"))
    }

    async fn idem(&mut self, packages: &[Package], one_transaction: bool) -> Result<(), Fatal> {
        let store = idem_core::mysql::Store::new();
        match one_transaction {
            true => {
                let mut transaction = self.connection.begin().await?;
                all_written(store.upsert_many(&mut transaction, packages).await?)?;
                transaction.commit().await?;
            }
            false => all_written(store.upsert_many(&mut self.connection, packages).await?)?,
        }
        Ok(())
    }

    async fn read_stored(&mut self) -> Result<HashMap<(String, String), Stored>, Fatal> {
        read_stored::<sqlx::MySql>(&mut self.connection, stored_sql(Kind::Mysql)).await
    }

    async fn drop_table(&mut self, table: &str) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS `{table}`"
        )))
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }

    async fn clean_up(&mut self) -> Result<(), Fatal> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS `{}`",
            self.database
        )))
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// The run

/// Rows a multi-row statement holds at most (idem's default chunk), fewer where the store's
/// bound-parameter limit says so.
const CHUNK: usize = 1000;

/// One measured variant.
struct Measured {
    store: String,
    variant: String,
    figures: Figures,
    goal: Option<&'static str>,
}

/// Runs every variant on `store`.
async fn measure_store<S: StoreUnderTest>(
    store: &mut S,
    packages: &[Package],
    data: &[Vec<Cell>],
) -> Result<Vec<Measured>, Fatal> {
    let kind = store.kind();
    let ddl = IdemDdl::parse(
        match kind {
            Kind::Postgres => idem_core::postgres::Store::create_table_sql::<Package>(),
            Kind::Sqlite => idem_core::sqlite::Store::create_table_sql::<Package>(),
            Kind::Mysql => idem_core::mysql::Store::create_table_sql::<Package>(),
        },
        match kind {
            Kind::Mysql => '`',
            _ => '"',
        },
    )?;
    let idem_table = Package::MODEL.collection();
    let mut stored: Option<Vec<Stored>> = None;
    let mut results = Vec::new();
    for variant in variants(kind) {
        eprintln!("bench_storage: {}: {}", store.label(), variant.name);
        let (table, columns, rows) = match &variant.way {
            Way::Idem { .. } => {
                store.create_idem().await?;
                (idem_table.to_owned(), Vec::new(), Vec::new())
            }
            Way::IdemRowsByInsert => {
                let stored = stored.as_ref().ok_or("idem's rows were not read")?;
                let mut columns = ddl.data_columns();
                let forms = [
                    Form::IdText,
                    Form::HashBytes,
                    Form::FrozenStored,
                    Form::OpsNull,
                    Form::MarkerStored,
                ];
                let forms: Vec<Form> = forms
                    .into_iter()
                    .filter(|form| ddl.lines.contains_key(form.column()))
                    .collect();
                // Only the names and placeholders count here: the table is idem's own.
                for &form in &forms {
                    columns.push(column_of(kind, &ddl, Extra::new(form, Index::None))?);
                }
                let rows = with_extras(data, stored, &forms)?;
                store.create(idem_table, &ddl.sql).await?;
                (idem_table.to_owned(), columns, rows)
            }
            Way::Insert { extras, .. } => {
                let table = format!("storage_{}", results.len());
                let mut columns = ddl.data_columns();
                let mut forms = Vec::new();
                for &extra in extras {
                    columns.push(column_of(kind, &ddl, extra)?);
                    forms.push(extra.form);
                }
                let rows = match forms.is_empty() {
                    true => data.to_vec(),
                    false => {
                        let stored = stored.as_ref().ok_or("idem's rows were not read")?;
                        with_extras(data, stored, &forms)?
                    }
                };
                store
                    .create(&table, &ddl.table_sql(&table, &columns))
                    .await?;
                (table, columns, rows)
            }
            Way::Copy => {
                let table = format!("storage_{}", results.len());
                let columns = ddl.data_columns();
                store
                    .create(&table, &ddl.table_sql(&table, &columns))
                    .await?;
                (table, columns, Vec::new())
            }
        };
        store.start(&table).await?;
        match &variant.way {
            Way::Idem { one_transaction } => store.idem(packages, *one_transaction).await?,
            Way::IdemRowsByInsert => store.insert(&table, &columns, &rows, false).await?,
            Way::Insert {
                commit_each_chunk, ..
            } => {
                store
                    .insert(&table, &columns, &rows, *commit_each_chunk)
                    .await?
            }
            Way::Copy => store.copy(&table, data).await?,
        }
        let figures = store.finish(&table).await?;
        if stored.is_none() && matches!(variant.way, Way::Idem { .. }) {
            let by_key = store.read_stored().await?;
            stored = Some(
                packages
                    .iter()
                    .map(|package| {
                        let mut stored = by_key
                            .get(&(package.package.clone(), package.architecture.clone()))
                            .cloned()
                            .ok_or_else(|| fatal(format!("{} not stored", package.package)))?;
                        stored.field_digests = field_digests(package).map_err(fatal)?;
                        Ok::<_, Fatal>(stored)
                    })
                    .collect::<Result<_, _>>()?,
            );
        }
        store.drop_table(&table).await?;
        results.push(Measured {
            store: store.label().to_owned(),
            variant: variant.name,
            goal: variant.goal,
            figures,
        });
    }
    if let Some(first) = stored.as_ref().and_then(|stored| stored.first()) {
        eprintln!(
            "bench_storage: {}: idem's columns of the first row: _id {:?}, hash {:?}, \
             idemFrozen {:?}, idemAppliedOps {:?}, idemWrite {:?}",
            store.label(),
            first.id,
            first.hash,
            first.frozen,
            first.applied_ops,
            first.marker
        );
    }
    Ok(results)
}

/// The column of `extra` on a store of `kind`.
fn column_of(kind: Kind, ddl: &IdemDdl, extra: Extra) -> Result<ColumnDef, Fatal> {
    kind.column(ddl, extra)
        .ok_or_else(|| fatal(format!("no column for {extra:?} on {kind:?}")))
}

/// The data rows, each followed by `forms` of its stored row.
fn with_extras(
    data: &[Vec<Cell>],
    stored: &[Stored],
    forms: &[Form],
) -> Result<Vec<Vec<Cell>>, Fatal> {
    data.iter()
        .zip(stored)
        .map(|(row, stored)| {
            let mut row = row.clone();
            for form in forms {
                row.push(form.cell(stored)?);
            }
            Ok(row)
        })
        .collect()
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

struct Args {
    rows: Option<usize>,
    stores: Vec<String>,
    packages: Option<PathBuf>,
    synthetic: bool,
    tsv: Option<String>,
}

const USAGE: &str = "\
usage: bench_storage [--rows N] [--stores LIST] [--packages FILE] [--synthetic] [--tsv FILE]

Measures the table, index and WAL bytes of idem's table against a plain table of the same data,
and of each of idem's columns in the form idem stores it and in a smaller one, on PostgreSQL
(IDEM_POSTGRES_URIS, else POSTGRES_URI), SQLite and MariaDB (MYSQL_URI).
  --rows N         only the first N packages (default: all)
  --stores LIST    comma-separated: postgres,sqlite,mysql (default: all three)
  --packages FILE  the Packages index to read (default: the largest
                   /var/lib/apt/lists/*_main_binary-amd64_Packages.lz4)
  --synthetic      deterministic synthetic rows of the same shape (63,437 unless --rows)
  --tsv FILE       also write the rows, tab-separated, to FILE";

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, Fatal> {
    let mut parsed = Args {
        rows: None,
        stores: vec!["postgres".into(), "sqlite".into(), "mysql".into()],
        packages: None,
        synthetic: false,
        tsv: None,
    };
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--rows" => parsed.rows = Some(flags.number("--rows")?),
            "--stores" => {
                parsed.stores = flags.list("--stores", &["postgres", "sqlite", "mysql"])?
            }
            "--packages" => parsed.packages = Some(flags.value("--packages")?.into()),
            "--synthetic" => parsed.synthetic = true,
            "--tsv" => parsed.tsv = Some(flags.value("--tsv")?),
            other => return Err(flags.unexpected(other)),
        }
    }
    Ok(Some(parsed))
}

#[tokio::main]
async fn main() -> ExitCode {
    exit_code("bench_storage", run()).await
}

/// Measures `store` and removes what it made, whatever happened.
async fn measure_and_clean<S: StoreUnderTest>(
    mut store: S,
    packages: &[Package],
    data: &[Vec<Cell>],
    details: &mut Vec<(String, String)>,
    notes: &mut Vec<String>,
) -> Result<Vec<Measured>, Fatal> {
    let measured = measure_store(&mut store, packages, data).await;
    let cleaned = store.clean_up().await;
    details.push((store.label().to_owned(), store.detail().to_owned()));
    notes.extend(store.notes());
    let measured = measured?;
    cleaned?;
    Ok(measured)
}

async fn run() -> Result<ExitCode, Fatal> {
    let Some(args) = parse_args(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let source = match (args.synthetic, args.packages.clone().or_else(packages_file)) {
        (false, Some(path)) => read_packages(&path, args.rows)?,
        (asked, _) => {
            if !asked {
                eprintln!(
                    "bench_storage: no /var/lib/apt/lists/*_main_binary-amd64_Packages.lz4: \
                     synthetic rows"
                );
            }
            synthetic(args.rows.unwrap_or(63_437))
        }
    };
    let packages = source.rows;
    let data: Vec<Vec<Cell>> = packages.iter().map(data_cells).collect::<Result<_, _>>()?;
    let wants = |store: &str| args.stores.iter().any(|name| name == store);
    let mut results = Vec::new();
    let mut details = Vec::new();
    let mut notes = Vec::new();
    if wants("postgres") {
        let servers: Vec<(String, String)> = match std::env::var("IDEM_POSTGRES_URIS") {
            Ok(list) if !list.trim().is_empty() => list
                .split_whitespace()
                .map(|pair| match pair.split_once('=') {
                    Some((label, uri)) => (label.to_owned(), uri.to_owned()),
                    None => ("postgres".to_owned(), pair.to_owned()),
                })
                .collect(),
            _ => std::env::var("POSTGRES_URI")
                .map(|uri| vec![("POSTGRES_URI".to_owned(), uri)])
                .unwrap_or_default(),
        };
        if servers.is_empty() {
            eprintln!(
                "bench_storage: skipping PostgreSQL: neither IDEM_POSTGRES_URIS nor \
                 POSTGRES_URI is set"
            );
        }
        for (label, uri) in servers {
            let store = Postgres::connect(&label, &uri).await?;
            results.extend(
                measure_and_clean(store, &packages, &data, &mut details, &mut notes).await?,
            );
        }
    }
    if wants("sqlite") {
        let store = Sqlite::new().await?;
        results.extend(measure_and_clean(store, &packages, &data, &mut details, &mut notes).await?);
    }
    if wants("mysql") {
        match std::env::var("MYSQL_URI") {
            Ok(uri) => {
                let store = Mysql::connect(&uri).await?;
                results.extend(
                    measure_and_clean(store, &packages, &data, &mut details, &mut notes).await?,
                );
            }
            Err(_) => eprintln!("bench_storage: skipping MariaDB: MYSQL_URI is not set"),
        }
    }
    report(
        &results,
        packages.len(),
        &source.said,
        &details,
        &notes,
        args.tsv.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the table (and writes the TSV): each variant against its store's plain table, then
/// each of idem's columns alone in bytes a row, then the goals.
fn report(
    results: &[Measured],
    rows: usize,
    said: &str,
    details: &[(String, String)],
    notes: &[String],
    tsv: Option<&str>,
) -> Result<(), Fatal> {
    let find = |store: &str, variant: &str| {
        results
            .iter()
            .find(|other| other.store == store && other.variant == variant)
            .map(|other| other.figures)
    };
    let size = |figures: Figures| figures.table + figures.index;
    let per_row = |mine: u64, theirs: u64| (mine as f64 - theirs as f64) / rows as f64;
    let mut lines = vec![[
        "store",
        "variant",
        "table",
        "indexes",
        "size/plain",
        "size B/row",
        "WAL",
        "WAL/plain",
        "WAL B/row",
        "file",
    ]
    .map(str::to_owned)
    .to_vec()];
    let mut out = String::new();
    for (label, detail) in details {
        out.push_str(&format!("server\t{label}\t{detail}\n"));
    }
    out.push_str(&format!("rows\t{rows}\t{said}\n"));
    let mut targets = Vec::new();
    // Each of idem's columns alone: bytes a row over the plain table, by store.
    let mut stores: Vec<&str> = Vec::new();
    let mut columns: Vec<(&str, HashMap<&str, String>)> = Vec::new();
    for result in results {
        let Some(plain) = find(&result.store, PLAIN) else {
            continue;
        };
        let f = result.figures;
        let size_ratio = size(f) as f64 / size(plain) as f64;
        let wal_ratio = f.wal as f64 / plain.wal as f64;
        let size_per_row = per_row(size(f), size(plain));
        let wal_per_row = per_row(f.wal, plain.wal);
        lines.push(vec![
            result.store.clone(),
            result.variant.clone(),
            fmt_bytes(f.table),
            fmt_bytes(f.index),
            format!("{size_ratio:.3}x"),
            format!("{size_per_row:+.1}"),
            fmt_bytes(f.wal),
            format!("{wal_ratio:.3}x"),
            format!("{wal_per_row:+.1}"),
            f.file.map(fmt_bytes).unwrap_or_default(),
        ]);
        out.push_str(&format!(
            "row\t{}\t{}\t{}\t{}\t{}\t{}\t{size_ratio:.4}\t{size_per_row:.1}\t{wal_ratio:.4}\t\
             {wal_per_row:.1}\t{}\n",
            result.store,
            result.variant,
            f.table,
            f.index,
            f.wal,
            f.file.map(|bytes| bytes.to_string()).unwrap_or_default(),
            u8::from(result.variant == PLAIN),
        ));
        if !stores.contains(&result.store.as_str()) {
            stores.push(&result.store);
        }
        if result.variant.starts_with("+ ") {
            let cell = format!("{size_per_row:+.1} / {wal_per_row:+.1}");
            match columns.iter_mut().find(|(name, _)| *name == result.variant) {
                Some((_, cells)) => drop(cells.insert(&result.store, cell)),
                None => columns.push((&result.variant, HashMap::from([(&*result.store, cell)]))),
            }
        }
        if let Some(wal_plain) = result.goal.and_then(|name| find(&result.store, name)) {
            let wal_ratio = f.wal as f64 / wal_plain.wal as f64;
            targets.push(Target {
                kind: "goal",
                met: size_ratio <= 1.25 && wal_ratio <= 1.25,
                what: format!(
                    "{}: table and WAL within 1.25x of the plain table's: {}",
                    result.store, result.variant
                ),
                measured: format!(
                    "size {size_ratio:.2}x ({} against {}), WAL {wal_ratio:.2}x ({} against {})",
                    fmt_bytes(size(f)),
                    fmt_bytes(size(plain)),
                    fmt_bytes(f.wal),
                    fmt_bytes(wal_plain.wal)
                ),
            });
        }
    }
    println!("{said}");
    for (_, detail) in details {
        println!("{detail}");
    }
    println!();
    print_table(&lines);
    println!();
    println!("each of idem's columns alone, bytes a row over the plain table (size / WAL):");
    let mut pivot = vec![std::iter::once("column".to_owned())
        .chain(stores.iter().map(|store| store.to_string()))
        .collect::<Vec<_>>()];
    for (name, cells) in &columns {
        pivot.push(
            std::iter::once(name.to_string())
                .chain(
                    stores
                        .iter()
                        .map(|store| cells.get(store).cloned().unwrap_or_default()),
                )
                .collect(),
        );
    }
    print_table(&pivot);
    println!();
    for note in notes {
        println!("note: {note}");
        out.push_str(&format!("note\t{note}\n"));
    }
    print_targets(&targets);
    out.push_str(&targets_tsv(&targets));
    if let Some(path) = tsv {
        std::fs::write(path, out).map_err(|e| fatal(format!("writing {path}: {e}")))?;
    }
    Ok(())
}
