//! The SQLite store beside the hand-written ways, measured in one run: new rows, an unchanged
//! re-ingest and changed rows, each against a plain multi-row `INSERT` in one transaction (the
//! floor for new rows) and a row-by-row `INSERT … ON CONFLICT DO UPDATE` loop in one transaction
//! (what an application writes by hand). New rows are also written as the very rows idem stores
//! (its hash, digests and marker columns too) with the same plain `INSERT`: the floor for rows
//! of that size, which tells what the rows cost from what idem's work on them costs. Each
//! scenario also runs idem inside one transaction of the caller's, as the hand-written ways
//! run (one commit); the targets are read on idem's own call, a commit per chunk. Rows written are counted exactly (`total_changes()`);
//! times are medians over rounds whose variants alternate order, each on a fresh database file.
//!
//! ```text
//! cargo run --release -p idem-examples --example bench_sqlite -- [--rounds N] [--rows N] [--tsv PATH]
//! ```
//!
//! `--only-idem` runs idem's writes alone (no baselines, no ratios): what to run under a
//! profiler. `--only LIST` runs only the scenarios named, comma-separated: `new`, `unchanged`,
//! `changed`.
//!
//! Exit status 0 when every exact target (rows written) was met, 1 when one was missed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use idem_core::sqlite::Store;
use idem_core::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use idem_core::sqlx::{self, ConnectOptions, Connection, SqliteConnection};
use idem_examples::bench::{
    fmt_duration, median_duration, order, post, print_table, print_targets, targets_tsv, Post,
    Target,
};

/// The hand-written table: the same columns, the natural key unique.
const HAND_TABLE: &str = "CREATE TABLE posts (\"_id\" TEXT PRIMARY KEY NOT NULL, slug TEXT NOT \
     NULL, lang TEXT NOT NULL, \"publishedAt\" INTEGER, title TEXT, body TEXT, score REAL, \
     UNIQUE (slug, lang))";

/// The ways of writing a set of rows.
#[derive(Clone, Copy)]
enum Way {
    /// Multi-row `INSERT`, 500 rows per statement, one transaction: new rows only.
    PlainInsert,
    /// One `INSERT … ON CONFLICT DO UPDATE` per row, one transaction.
    UpsertLoop,
    /// Multi-row `INSERT`, 500 rows per statement, one transaction, of the very rows idem
    /// stores (its table, every column, the values read back from a table idem wrote).
    PlainInsertOfIdemRows,
    /// `upsert_many` inside the caller's transaction: one commit, as the plain insert's.
    IdemInTransaction,
    /// `upsert_many`.
    Idem,
}

/// A stored value, as SQLite typed it.
#[derive(Clone)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
}

/// The rows idem stores for the new rows: the column names, then each row's values. Read once,
/// before any timing, from a table idem wrote ([`read_idem_rows`]); what
/// [`Way::PlainInsertOfIdemRows`] writes.
static IDEM_ROWS: std::sync::OnceLock<(Vec<String>, Vec<Vec<Cell>>)> = std::sync::OnceLock::new();

/// The rows idem stores for `rows`, read back from a fresh table it wrote them to.
async fn read_idem_rows(
    directory: &Path,
    rows: &[Post],
) -> Result<(Vec<String>, Vec<Vec<Cell>>), Box<dyn std::error::Error>> {
    use sqlx::{Column, Row, TypeInfo, ValueRef};
    let (mut connection, path) = fresh(directory, Way::Idem, Some(rows)).await?;
    let read = sqlx::query("SELECT * FROM posts ORDER BY rowid")
        .fetch_all(&mut connection)
        .await?;
    let names: Vec<String> = read[0]
        .columns()
        .iter()
        .map(|column| column.name().to_owned())
        .collect();
    let mut cells = Vec::with_capacity(read.len());
    for row in &read {
        let mut values = Vec::with_capacity(names.len());
        for index in 0..names.len() {
            let kind = row.try_get_raw(index)?.type_info().name().to_owned();
            values.push(match kind.as_str() {
                "NULL" => Cell::Null,
                "INTEGER" => Cell::Integer(row.try_get(index)?),
                "REAL" => Cell::Real(row.try_get(index)?),
                _ => Cell::Text(row.try_get(index)?),
            });
        }
        cells.push(values);
    }
    connection.close().await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok((names, cells))
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::PlainInsert => "plain multi-row INSERT, one transaction",
            Way::UpsertLoop => "INSERT … ON CONFLICT per row, one transaction",
            Way::PlainInsertOfIdemRows => "plain multi-row INSERT of idem's rows, one transaction",
            Way::IdemInTransaction => "idem upsert_many inside one transaction",
            Way::Idem => "idem upsert_many",
        }
    }
}

async fn connect(path: &Path) -> Result<SqliteConnection, sqlx::Error> {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .connect()
        .await
}

/// A fresh database file with the table of `way`, holding `stored` if given.
async fn fresh(
    directory: &Path,
    way: Way,
    stored: Option<&[Post]>,
) -> Result<(SqliteConnection, PathBuf), Box<dyn std::error::Error>> {
    let path = directory.join(format!("bench-{}.db", ulid::Ulid::generate()));
    let mut connection = connect(&path).await?;
    match way {
        Way::Idem | Way::IdemInTransaction | Way::PlainInsertOfIdemRows => {
            Store::new().ensure_table::<Post>(&mut connection).await?
        }
        _ => sqlx::raw_sql(HAND_TABLE)
            .execute(&mut connection)
            .await
            .map(drop)?,
    }
    if let Some(rows) = stored {
        write(&mut connection, way, rows).await?;
    }
    Ok((connection, path))
}

/// Writes `rows` the way `way` does.
async fn write(
    connection: &mut SqliteConnection,
    way: Way,
    rows: &[Post],
) -> Result<(), Box<dyn std::error::Error>> {
    match way {
        Way::Idem => all_written(Store::new().upsert_many(connection, rows).await?)?,
        Way::IdemInTransaction => {
            let mut transaction = connection.begin().await?;
            all_written(Store::new().upsert_many(&mut transaction, rows).await?)?;
            transaction.commit().await?;
        }
        Way::PlainInsert => {
            let mut transaction = connection.begin().await?;
            for chunk in rows.chunks(500) {
                // Anonymous parameters: SQLite looks numbered ones up by name, one by one.
                let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; chunk.len()];
                let sql = format!(
                    "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, body, score) \
                     VALUES {}",
                    values.join(", ")
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for post in chunk {
                    query = query
                        .bind(post.id()?.to_string())
                        .bind(&post.slug)
                        .bind(&post.lang)
                        .bind(post.published_at)
                        .bind(&post.title)
                        .bind(&post.body)
                        .bind(post.score);
                }
                query.execute(&mut *transaction).await?;
            }
            transaction.commit().await?;
        }
        Way::PlainInsertOfIdemRows => {
            let (names, cells) = IDEM_ROWS.get().ok_or("idem's rows were not read")?;
            let quoted: Vec<String> = names.iter().map(|name| format!("\"{name}\"")).collect();
            let tuple = format!("({})", vec!["?"; names.len()].join(", "));
            let mut transaction = connection.begin().await?;
            for chunk in cells.chunks(500) {
                let sql = format!(
                    "INSERT INTO posts ({}) VALUES {}",
                    quoted.join(", "),
                    vec![tuple.as_str(); chunk.len()].join(", ")
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for row in chunk {
                    for cell in row {
                        query = match cell {
                            Cell::Null => query.bind(None::<&str>),
                            Cell::Integer(value) => query.bind(*value),
                            Cell::Real(value) => query.bind(*value),
                            Cell::Text(value) => query.bind(value.as_str()),
                        };
                    }
                }
                query.execute(&mut *transaction).await?;
            }
            transaction.commit().await?;
        }
        Way::UpsertLoop => {
            let mut transaction = connection.begin().await?;
            for post in rows {
                sqlx::query(
                    "INSERT INTO posts (\"_id\", slug, lang, \"publishedAt\", title, body, score) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (slug, lang) DO UPDATE SET \
                     title = excluded.title, body = excluded.body, score = excluded.score",
                )
                .bind(post.id()?.to_string())
                .bind(&post.slug)
                .bind(&post.lang)
                .bind(post.published_at)
                .bind(&post.title)
                .bind(&post.body)
                .bind(post.score)
                .execute(&mut *transaction)
                .await?;
            }
            transaction.commit().await?;
        }
    }
    Ok(())
}

/// An error if idem refused any row of `report`: every way must write every row.
fn all_written(report: idem_core::BatchReport) -> Result<(), Box<dyn std::error::Error>> {
    match report.refused() {
        0 => Ok(()),
        _ => Err(format!("idem refused rows: {report}").into()),
    }
}

/// One timed write: its duration and the rows it wrote.
async fn measure(
    directory: &Path,
    way: Way,
    stored: Option<&[Post]>,
    rows: &[Post],
) -> Result<(Duration, i64), Box<dyn std::error::Error>> {
    let (mut connection, path) = fresh(directory, way, stored).await?;
    let before: i64 = sqlx::query_scalar("SELECT total_changes()")
        .fetch_one(&mut connection)
        .await?;
    let started = Instant::now();
    write(&mut connection, way, rows).await?;
    let took = started.elapsed();
    let after: i64 = sqlx::query_scalar("SELECT total_changes()")
        .fetch_one(&mut connection)
        .await?;
    connection.close().await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok((took, after - before))
}

struct Scenario {
    /// What `--only` calls it.
    key: &'static str,
    name: &'static str,
    ways: Vec<Way>,
    stored: Option<Vec<Post>>,
    rows: Vec<Post>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("bench_sqlite: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let mut rounds = 5;
    let mut count = 10_000;
    let mut tsv: Option<PathBuf> = None;
    let mut only_idem = false;
    let mut only: Option<Vec<String>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--rounds" => rounds = value()?.parse()?,
            "--rows" => count = value()?.parse()?,
            "--tsv" => tsv = Some(value()?.into()),
            "--only-idem" => only_idem = true,
            "--only" => only = Some(value()?.split(',').map(str::to_owned).collect()),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let directory = std::env::temp_dir().join(format!("idem-bench-sqlite-{}", std::process::id()));
    std::fs::create_dir_all(&directory)?;
    let first: Vec<Post> = (0..count).map(|n| post(n, "Title")).collect();
    let changed: Vec<Post> = (0..count).map(|n| post(n, "Edited")).collect();
    let wants_new = only
        .as_ref()
        .is_none_or(|only| only.iter().any(|name| name == "new"));
    if wants_new && !only_idem {
        let _ = IDEM_ROWS.set(read_idem_rows(&directory, &first).await?);
    }
    let scenarios = [
        Scenario {
            key: "new",
            name: "new rows",
            ways: vec![
                Way::PlainInsert,
                Way::PlainInsertOfIdemRows,
                Way::UpsertLoop,
                Way::IdemInTransaction,
                Way::Idem,
            ],
            stored: None,
            rows: first.clone(),
        },
        Scenario {
            key: "unchanged",
            name: "unchanged re-ingest",
            ways: vec![Way::UpsertLoop, Way::IdemInTransaction, Way::Idem],
            stored: Some(first.clone()),
            rows: first.clone(),
        },
        Scenario {
            key: "changed",
            name: "changed rows",
            ways: vec![Way::UpsertLoop, Way::IdemInTransaction, Way::Idem],
            stored: Some(first.clone()),
            rows: changed,
        },
    ];
    if let Some(unknown) = only.iter().flatten().find(|name| {
        !scenarios
            .iter()
            .any(|scenario| scenario.key == name.as_str())
    }) {
        return Err(format!("--only: no scenario {unknown:?} (new, unchanged, changed)").into());
    }
    let scenarios: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|scenario| {
            only.as_ref()
                .is_none_or(|only| only.iter().any(|name| name == scenario.key))
        })
        .collect();
    if only_idem {
        for scenario in &scenarios {
            for _ in 0..rounds {
                let (took, _) = measure(
                    &directory,
                    Way::Idem,
                    scenario.stored.as_deref(),
                    &scenario.rows,
                )
                .await?;
                println!("{}: {}", scenario.name, fmt_duration(took));
            }
        }
        let _ = std::fs::remove_dir_all(&directory);
        return Ok(true);
    }
    let mut table = vec![vec![
        "scenario".to_owned(),
        "way".to_owned(),
        "rows written".to_owned(),
        "median time".to_owned(),
        "rows/s".to_owned(),
        "ratio to the first".to_owned(),
    ]];
    let mut lines = String::new();
    let mut targets = Vec::new();
    for scenario in &scenarios {
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); scenario.ways.len()];
        let mut written: Vec<i64> = vec![0; scenario.ways.len()];
        for round in 0..rounds {
            for index in order(scenario.ways.len(), round) {
                let (took, rows) = measure(
                    &directory,
                    scenario.ways[index],
                    scenario.stored.as_deref(),
                    &scenario.rows,
                )
                .await?;
                times[index].push(took);
                written[index] = rows;
            }
        }
        let medians: Vec<Duration> = times
            .iter()
            .map(|each| median_duration(each.iter().copied()))
            .collect();
        for (index, way) in scenario.ways.iter().enumerate() {
            let ratio = medians[index].as_secs_f64() / medians[0].as_secs_f64();
            let per_second = count as f64 / medians[index].as_secs_f64();
            table.push(vec![
                scenario.name.to_owned(),
                way.name().to_owned(),
                written[index].to_string(),
                fmt_duration(medians[index]),
                format!("{per_second:.0}"),
                format!("{ratio:.2}x"),
            ]);
            lines.push_str(&format!(
                "row\t{}\t{}\t{}\t{}\t{}\t{}\t{ratio:.4}\n",
                scenario.name,
                way.name(),
                written[index],
                fmt_duration(medians[index]),
                per_second as u64,
                u8::from(index == 0),
            ));
        }
        let idem = scenario.ways.len() - 1;
        let ratio = medians[idem].as_secs_f64() / medians[0].as_secs_f64();
        match scenario.name {
            "new rows" => targets.push(Target::new(
                false,
                ratio <= 1.5,
                format!(
                    "new rows: upsert_many within 1.5x of a plain multi-row INSERT ({count} rows)"
                ),
                format!("{ratio:.2}x"),
            )),
            "unchanged re-ingest" => {
                targets.push(Target::new(
                    true,
                    written[idem] == 0,
                    "unchanged re-ingest: 0 rows written",
                    format!("{} rows written", written[idem]),
                ));
                targets.push(Target::new(
                    false,
                    ratio < 1.0,
                    "unchanged re-ingest: faster than the ON CONFLICT loop",
                    format!("{ratio:.2}x"),
                ));
            }
            _ => targets.push(Target::new(
                true,
                written[idem] == count as i64,
                "changed rows: each written once",
                format!("{} rows written of {count}", written[idem]),
            )),
        }
    }
    let _ = std::fs::remove_dir_all(&directory);
    let version: String = {
        let mut connection = SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await?;
        sqlx::query_scalar("SELECT sqlite_version()")
            .fetch_one(&mut connection)
            .await?
    };
    println!("SQLite {version}, WAL, synchronous=NORMAL; {count} rows, {rounds} rounds");
    print_table(&table);
    print_targets(&targets);
    if let Some(path) = tsv {
        let mut out = format!("server\tSQLite {version} (WAL, synchronous=NORMAL)\n");
        out.push_str(&lines);
        out.push_str(&targets_tsv(&targets));
        std::fs::write(path, out)?;
    }
    Ok(targets
        .iter()
        .all(|target| target.met || target.kind != "exact"))
}
