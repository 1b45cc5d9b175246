//! Racing writers under every isolation level a SQL store's caller may choose: each racer in a
//! transaction of its own at READ COMMITTED, REPEATABLE READ or SERIALIZABLE (and, where the
//! database has it, with that level as the session's default and no transaction), writing an
//! overlapping batch of versioned entries, one post every racer holds the same, an
//! `insert_new` of one member, and the effects: an `apply_once` credit under one op id, a
//! `push` of one comment and a `record` of one payment. A racer whose call or commit fails
//! with an error the store or the driver calls retryable rolls back and runs its transaction
//! again, as the guide tells a caller to. Whatever the level and the interleaving, the
//! committed answers must be the truth: each document inserted by exactly one committed
//! transaction, the newest revision stored, the member inserted once, the credit applied, the
//! comment appended and the payment recorded by exactly one (the balance 1, one comment, one
//! payment id), nothing refused. On PostgreSQL 15 and 18 (tokio-postgres and sqlx), MariaDB,
//! and SQLite (whose one level is serializable). Then, on MariaDB, a caller's transaction that
//! a deadlock ends, for every write.

use std::future::Future;
use std::sync::Arc;

use idem_core::sqlx::Connection as _;
use idem_core::{Backend, Outcome};
use idem_tests::backends::{fresh_schema, mysql_connection, postgres_servers, sqlx_connection};
use idem_tests::fixtures::{entry, post, Account, Entry, Payment, Post};
use tokio::sync::Barrier;

const RACERS: usize = 6;
const ENTRIES: usize = 8;
const ROUNDS: usize = 2;
/// Attempts of one racer's transaction before the test calls the store stuck.
const ATTEMPTS: usize = 200;

/// An isolation level, as each database writes it.
#[derive(Clone, Copy, Debug)]
enum Level {
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

const LEVELS: [Level; 3] = [
    Level::ReadCommitted,
    Level::RepeatableRead,
    Level::Serializable,
];

impl Level {
    fn sql(self) -> &'static str {
        match self {
            Level::ReadCommitted => "READ COMMITTED",
            Level::RepeatableRead => "REPEATABLE READ",
            Level::Serializable => "SERIALIZABLE",
        }
    }
}

/// Where a racer's writes run: in a transaction of its own at a level, or outside any with the
/// level as the session's default (each statement then commits alone).
#[derive(Clone, Copy, Debug)]
enum Mode {
    Transaction(Level),
    SessionDefault(Level),
}

/// The answers one racer's committed transaction gave.
#[derive(Debug)]
struct Committed {
    entries: Vec<Outcome>,
    post: Outcome,
    member_inserted: usize,
    /// `apply_once` of the round's credit answered `Applied`.
    credited: bool,
    /// `push` of the round's comment answered `Appended`.
    appended: bool,
    /// `record` of the round's payment answered `Inserted`.
    recorded: bool,
    /// The id `record` answered.
    receipt: String,
    /// How many attempts it took (1: no retry), shown when the test fails.
    attempts: usize,
}

/// Why an attempt did not commit.
enum Failed {
    /// A retryable error (a serialization failure, a deadlock, a busy database): run again.
    Retry,
    /// Anything else: the test fails with it.
    Fatal(String),
}

impl From<idem_core::Error> for Failed {
    fn from(error: idem_core::Error) -> Self {
        match error.is_retryable() {
            true => Failed::Retry,
            false => Failed::Fatal(format!("{error} ({error:?})")),
        }
    }
}

/// A driver's failure (of `BEGIN`, `SET` or `COMMIT`), retryable where its code is one a
/// caller retries a transaction on: serialization failure and deadlock (SQLSTATE 40001,
/// 40P01; MariaDB gives its deadlock 40001 too), a lock wait timeout (MariaDB 1205, HY000),
/// SQLite's busy and locked (5, 6, and their extended codes).
fn sqlx_failed(error: idem_core::sqlx::Error) -> Failed {
    let retryable = error.as_database_error().is_some_and(|database| {
        let code = database.code().unwrap_or_default();
        matches!(&*code, "40001" | "40P01")
            || database.message().contains("Lock wait timeout")
            || code
                .parse::<u32>()
                .is_ok_and(|code| matches!(code & 0xff, 5 | 6))
    });
    match retryable {
        true => Failed::Retry,
        false => Failed::Fatal(format!("{error} ({error:?})")),
    }
}

fn tokio_failed(error: tokio_postgres::Error) -> Failed {
    use tokio_postgres::error::SqlState;
    match error.code() {
        Some(code)
            if [
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
            ]
            .contains(code) =>
        {
            Failed::Retry
        }
        _ => Failed::Fatal(format!("{error} ({error:?})")),
    }
}

/// The documents of round `round` as racer `racer` holds them: its own revision of every entry
/// (the newest is the last racer's), the post every racer holds the same, and the member.
fn documents(round: usize, racer: usize) -> (Vec<Entry>, Post, Post) {
    let revision = i64::try_from(racer).unwrap();
    let entries = (0..ENTRIES)
        .map(|n| entry(&format!("r{round}-e{n}"), revision, &format!("rev {racer}")))
        .collect();
    let shared = Post {
        slug: format!("r{round}-shared"),
        ..post()
    };
    let member = Post {
        slug: format!("r{round}-member"),
        ..post()
    };
    (entries, shared, member)
}

/// The account, the thread and the payment of round `round`, the same for every racer.
fn effect_documents(round: usize) -> (Account, Thread, Payment) {
    let thread = Thread {
        topic: format!("r{round}-thread"),
        comments: Vec::new(),
    };
    let payment = Payment {
        request_key: format!("r{round}-pay"),
        amount_cents: 5,
    };
    (
        idem_tests::fixtures::account(&format!("r{round}-acct")),
        thread,
        payment,
    )
}

/// Sends `$call` (an expression giving the call's future), and where `$alone` (each call
/// commits alone, outside a transaction) sends it again while it fails retryably: such a
/// failure wrote nothing, and what the calls before it wrote stays. `$attempts` counts them.
macro_rules! call {
    ($alone:expr, $attempts:ident, $call:expr) => {
        loop {
            match $call.await {
                Err(error) if $alone && error.is_retryable() && $attempts < ATTEMPTS => {
                    $attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis($attempts as u64 % 7)).await
                }
                other => break other,
            }
        }
    };
}

/// One racer's writes through `backend`, the same on every store: in a transaction (a
/// retryable failure then fails the attempt, which the caller runs again whole), or `alone`,
/// each call committing on its own.
async fn write(
    backend: &impl Backend,
    round: usize,
    racer: usize,
    alone: bool,
) -> Result<Committed, Failed> {
    let (entries, shared, member) = documents(round, racer);
    let mut attempts = 1;
    let report = call!(alone, attempts, backend.upsert_many(&entries))?;
    let mut outcomes = Vec::new();
    for (outcome, entry) in report.outcomes().iter().zip(&entries) {
        match outcome {
            Ok(outcome) => outcomes.push(*outcome),
            Err(error) if error.is_retryable() && alone => {
                outcomes.push(call!(alone, attempts, backend.upsert(entry))?)
            }
            Err(error) if error.is_retryable() => return Err(Failed::Retry),
            Err(error) => return Err(Failed::Fatal(format!("a batch row: {error}"))),
        }
    }
    let post = call!(alone, attempts, backend.upsert(&shared))?;
    let member = std::slice::from_ref(&member);
    let inserted = call!(alone, attempts, backend.insert_new(member))?;
    // The effects: every racer credits the round's account once under one op id, pushes one
    // comment and records one payment, each of which must land once.
    let (account, thread, payment) = effect_documents(round);
    call!(alone, attempts, backend.upsert(&account))?;
    let account_id = account.id().expect("an account's id");
    let changes = [idem_core::Change::add("balance", 1)];
    let op = idem_core::OpId::new(format!("r{round}-credit"));
    let credited = call!(
        alone,
        attempts,
        backend.apply_once::<Account>(account_id, &op, &changes)
    )?;
    call!(alone, attempts, backend.upsert(&thread))?;
    let thread_id = thread.id().expect("a thread's id");
    let comment = serde_json::json!({"id": format!("r{round}-c"), "text": "once"});
    let pushed = call!(
        alone,
        attempts,
        backend.push::<Thread, _>(thread_id, "comments", &comment)
    )?;
    let recorded = call!(alone, attempts, backend.record(&payment))?;
    Ok(Committed {
        entries: outcomes,
        post,
        member_inserted: inserted.inserted().len(),
        credited: credited == idem_core::Applied::Applied,
        appended: pushed == idem_core::Pushed::Appended,
        recorded: recorded.outcome == Outcome::Inserted,
        receipt: recorded.id.to_string(),
        attempts,
    })
}

/// Runs `$attempt` (an expression giving a fresh attempt's future each time) until it commits,
/// at most [`ATTEMPTS`] times; a fatal failure panics. A macro, as the attempt borrows the
/// racer's connection anew each time.
macro_rules! until_committed {
    ($what:expr, $attempt:expr) => {{
        let mut attempts = 0;
        loop {
            attempts += 1;
            match $attempt.await {
                Ok(committed) => {
                    break Committed {
                        attempts,
                        ..committed
                    }
                }
                Err(Failed::Retry) if attempts < ATTEMPTS => {
                    let backoff = std::time::Duration::from_millis(attempts as u64 % 7);
                    tokio::time::sleep(backoff).await
                }
                Err(Failed::Retry) => panic!("{}: no attempt of {ATTEMPTS} committed", $what),
                Err(Failed::Fatal(error)) => panic!("{}: attempt {attempts}: {error}", $what),
            }
        }
    }};
}

/// Races the connections `$connections`, each running `$attempt` (an expression of `$store`, a
/// clone of the store, `$connection` and `$racer`) until it commits; gives what they committed.
macro_rules! race_round {
    ($connections:expr, $what:expr, $store:ident, |$connection:ident, $racer:ident| $attempt:expr) => {
        race($connections, |mut $connection, $racer, start| {
            let ($store, what) = ($store.clone(), $what.clone());
            async move {
                start.wait().await;
                let done = until_committed!(what, $attempt);
                ($connection, done)
            }
        })
        .await
        .1
    };
}

/// The entries of round `$round` (key, revision, text), the number of its posts, and its
/// account's balance and thread's comments, read through the sqlx connection `$setup` (SQLite's
/// or MariaDB's: the same statements but the length of a JSON array, `$json_length`).
macro_rules! sqlx_stored {
    ($setup:expr, $round:expr, $json_length:expr) => {{
        let pattern = format!("r{}-%", $round);
        let entries: Vec<(String, i64, String)> = idem_core::sqlx::query_as(
            "SELECT entryId, revision, text FROM entries WHERE entryId LIKE ? ORDER BY entryId",
        )
        .bind(&pattern)
        .fetch_all(&mut $setup)
        .await
        .unwrap();
        let posts: i64 =
            idem_core::sqlx::query_scalar("SELECT COUNT(*) FROM posts WHERE slug LIKE ?")
                .bind(&pattern)
                .fetch_one(&mut $setup)
                .await
                .unwrap();
        let balance: i64 =
            idem_core::sqlx::query_scalar("SELECT balance FROM accounts WHERE owner = ?")
                .bind(format!("r{}-acct", $round))
                .fetch_one(&mut $setup)
                .await
                .unwrap();
        let comments = format!(
            "SELECT {}(comments) FROM threads WHERE topic = ?",
            $json_length
        );
        let comments: i64 = idem_core::sqlx::query_scalar(idem_core::sqlx::AssertSqlSafe(comments))
            .bind(format!("r{}-thread", $round))
            .fetch_one(&mut $setup)
            .await
            .unwrap();
        (
            entries,
            usize::try_from(posts).unwrap(),
            (balance, comments),
        )
    }};
}

/// What every store must show after a round: the truth of the committed answers, and the
/// stored rows (`stored`: each entry key's revision and text; the number of posts).
fn check_round(
    what: &str,
    committed: &[Committed],
    stored_entries: Vec<(String, i64, String)>,
    stored_posts: usize,
    (balance, comments): (i64, i64),
) {
    for (count, name) in [
        (
            committed.iter().filter(|racer| racer.credited).count(),
            "credit applied",
        ),
        (
            committed.iter().filter(|racer| racer.appended).count(),
            "comment appended",
        ),
        (
            committed.iter().filter(|racer| racer.recorded).count(),
            "payment recorded",
        ),
    ] {
        assert_eq!(
            count, 1,
            "{what}: {name} by {count} committed transactions: {committed:?}"
        );
    }
    assert_eq!(
        (balance, comments),
        (1, 1),
        "{what}: the balance and the comments stored"
    );
    assert!(
        committed
            .iter()
            .all(|racer| racer.receipt == committed[0].receipt),
        "{what}: one payment, one id: {committed:?}"
    );
    let attempts: Vec<usize> = committed.iter().map(|racer| racer.attempts).collect();
    println!("{what}: attempts per racer {attempts:?}");
    for n in 0..ENTRIES {
        let inserted = committed
            .iter()
            .filter(|racer| racer.entries[n] == Outcome::Inserted)
            .count();
        assert_eq!(
            inserted, 1,
            "{what}: entry {n} inserted by {inserted} committed transactions: {committed:?}"
        );
    }
    let inserted_posts = committed
        .iter()
        .filter(|racer| racer.post == Outcome::Inserted)
        .count();
    assert_eq!(inserted_posts, 1, "{what}: the shared post: {committed:?}");
    assert!(
        committed
            .iter()
            .all(|racer| matches!(racer.post, Outcome::Inserted | Outcome::Unchanged)),
        "{what}: the shared post is the same for every racer: {committed:?}"
    );
    let members: usize = committed.iter().map(|racer| racer.member_inserted).sum();
    assert_eq!(members, 1, "{what}: the member: {committed:?}");
    let newest = i64::try_from(RACERS - 1).unwrap();
    assert_eq!(stored_entries.len(), ENTRIES, "{what}: {stored_entries:?}");
    for (key, revision, text) in stored_entries {
        assert_eq!(
            (revision, text.as_str()),
            (newest, format!("rev {newest}").as_str()),
            "{what}: {key}"
        );
    }
    assert_eq!(stored_posts, 2, "{what}: the shared post and the member");
}

/// Runs every racer of a round at once, lined up at a barrier, and gives back their
/// connections with what they committed.
async fn race<C, F, Fut>(connections: Vec<C>, run: F) -> (Vec<C>, Vec<Committed>)
where
    C: Send + 'static,
    F: Fn(C, usize, Arc<Barrier>) -> Fut,
    Fut: Future<Output = (C, Committed)> + Send + 'static,
{
    let start = Arc::new(Barrier::new(connections.len()));
    let racers: Vec<_> = (connections.into_iter().enumerate())
        .map(|(racer, connection)| tokio::spawn(run(connection, racer, start.clone())))
        .collect();
    let (mut connections, mut committed) = (Vec::new(), Vec::new());
    for racer in racers {
        let (connection, done) = racer.await.expect("a racer panicked");
        connections.push(connection);
        committed.push(done);
    }
    (connections, committed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transactions_tell_the_truth_at_every_isolation_level_on_postgres() {
    for (label, uri) in postgres_servers() {
        for mode in modes() {
            for driver in ["tokio-postgres", "sqlx"] {
                let what = format!("{label} {driver} {mode:?}");
                let test = format!("iso_{driver}_{mode:?}")
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect::<String>();
                let (schema, setup) = fresh_schema(&uri, "i", &test).await;
                let store = Arc::new(idem_core::postgres::Store::new());
                store.ensure_table::<Entry, _>(&setup).await.unwrap();
                store.ensure_table::<Post, _>(&setup).await.unwrap();
                (store.ensure_table::<Account, _>(&setup).await).unwrap();
                store.ensure_table::<Thread, _>(&setup).await.unwrap();
                (store.ensure_table::<Payment, _>(&setup).await).unwrap();
                let default = match mode {
                    Mode::SessionDefault(level) => format!(
                        "SET default_transaction_isolation = '{}'",
                        level.sql().to_lowercase()
                    ),
                    Mode::Transaction(_) => "SELECT 1".to_owned(),
                };
                for round in 0..ROUNDS {
                    let committed = match driver {
                        "tokio-postgres" => {
                            let mut clients = Vec::new();
                            for _ in 0..RACERS {
                                let client =
                                    idem_tests::backends::postgres_client(&uri, &schema).await;
                                client.batch_execute(&default).await.unwrap();
                                clients.push(client);
                            }
                            race_round!(clients, what, store, |client, racer| tokio_attempt(
                                &store,
                                &mut client,
                                mode,
                                round,
                                racer
                            ))
                        }
                        _ => {
                            let mut connections = Vec::new();
                            for _ in 0..RACERS {
                                let mut connection = sqlx_connection(&uri, &schema).await;
                                idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(
                                    default.clone(),
                                ))
                                .execute(&mut connection)
                                .await
                                .unwrap();
                                connections.push(connection);
                            }
                            race_round!(connections, what, store, |connection, racer| {
                                pg_sqlx_attempt(&store, &mut connection, mode, round, racer)
                            })
                        }
                    };
                    let entries = setup
                        .query(
                            "SELECT \"entryId\", revision, text FROM entries \
                             WHERE \"entryId\" LIKE $1 ORDER BY \"entryId\"",
                            &[&format!("r{round}-%")],
                        )
                        .await
                        .unwrap()
                        .iter()
                        .map(|row| (row.get(0), row.get(1), row.get(2)))
                        .collect();
                    let posts = setup
                        .query(
                            "SELECT 1 FROM posts WHERE slug LIKE $1",
                            &[&format!("r{round}-%")],
                        )
                        .await
                        .unwrap()
                        .len();
                    let effects = setup
                        .query_one(
                            "SELECT (SELECT balance FROM accounts WHERE owner = $1), \
                             (SELECT jsonb_array_length(comments)::int8 FROM threads \
                              WHERE topic = $2)",
                            &[&format!("r{round}-acct"), &format!("r{round}-thread")],
                        )
                        .await
                        .unwrap();
                    let effects = (effects.get(0), effects.get(1));
                    check_round(
                        &format!("{what} round {round}"),
                        &committed,
                        entries,
                        posts,
                        effects,
                    );
                }
            }
        }
    }
}

/// The modes every database with levels runs: each level in a transaction, and as the
/// session's default.
fn modes() -> impl Iterator<Item = Mode> {
    LEVELS
        .into_iter()
        .map(Mode::Transaction)
        .chain(LEVELS.into_iter().map(Mode::SessionDefault))
}

async fn tokio_attempt(
    store: &idem_core::postgres::Store,
    client: &mut tokio_postgres::Client,
    mode: Mode,
    round: usize,
    racer: usize,
) -> Result<Committed, Failed> {
    let level = match mode {
        Mode::SessionDefault(_) => return write(&store.on(&*client), round, racer, true).await,
        Mode::Transaction(level) => level,
    };
    let tx = client
        .build_transaction()
        .isolation_level(match level {
            Level::ReadCommitted => tokio_postgres::IsolationLevel::ReadCommitted,
            Level::RepeatableRead => tokio_postgres::IsolationLevel::RepeatableRead,
            Level::Serializable => tokio_postgres::IsolationLevel::Serializable,
        })
        .start()
        .await
        .map_err(tokio_failed)?;
    let done = write(&store.on(&tx), round, racer, false).await?;
    tx.commit().await.map_err(tokio_failed)?;
    Ok(done)
}

/// `$name`: one attempt of a racer through a sqlx connection of `$store`: its calls in a
/// transaction at the mode's level (set by `SET TRANSACTION` after `BEGIN` on PostgreSQL, before
/// it on MariaDB, where it sets the next transaction's), or alone under the session's default.
macro_rules! sqlx_attempt {
    ($name:ident, $store:ty, $connection:ty, set_before_begin: $before:expr) => {
        async fn $name(
            store: &$store,
            connection: &mut $connection,
            mode: Mode,
            round: usize,
            racer: usize,
        ) -> Result<Committed, Failed> {
            let level = match mode {
                Mode::SessionDefault(_) => {
                    return write(&store.on(connection), round, racer, true).await
                }
                Mode::Transaction(level) => level,
            };
            let set = format!("SET TRANSACTION ISOLATION LEVEL {}", level.sql());
            let set = idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(set));
            let mut tx = if $before {
                set.execute(&mut *connection).await.map_err(sqlx_failed)?;
                connection.begin().await.map_err(sqlx_failed)?
            } else {
                let mut tx = connection.begin().await.map_err(sqlx_failed)?;
                set.execute(&mut *tx).await.map_err(sqlx_failed)?;
                tx
            };
            let done = write(&store.on(&mut tx), round, racer, false).await?;
            tx.commit().await.map_err(sqlx_failed)?;
            Ok(done)
        }
    };
}

sqlx_attempt!(pg_sqlx_attempt, idem_core::postgres::Store, idem_core::sqlx::PgConnection, set_before_begin: false);
sqlx_attempt!(mysql_attempt, idem_core::mysql::Store, idem_core::sqlx::MySqlConnection, set_before_begin: true);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transactions_tell_the_truth_at_every_isolation_level_on_mariadb() {
    for mode in modes() {
        let what = format!("mariadb {mode:?}");
        let idem_tests::backends::Db::Mysql { uri, database, .. } =
            idem_tests::backends::fresh_mysql(&format!("iso_{mode:?}")).await
        else {
            unreachable!("fresh_mysql makes a MariaDB store")
        };
        let store = Arc::new(idem_core::mysql::Store::new());
        let mut setup = mysql_connection(&uri, &database).await;
        store.ensure_table::<Entry>(&mut setup).await.unwrap();
        store.ensure_table::<Post>(&mut setup).await.unwrap();
        store.ensure_table::<Account>(&mut setup).await.unwrap();
        store.ensure_table::<Thread>(&mut setup).await.unwrap();
        store.ensure_table::<Payment>(&mut setup).await.unwrap();
        for round in 0..ROUNDS {
            let mut connections = Vec::new();
            for _ in 0..RACERS {
                let mut connection = mysql_connection(&uri, &database).await;
                if let Mode::SessionDefault(level) = mode {
                    let set = format!("SET SESSION TRANSACTION ISOLATION LEVEL {}", level.sql());
                    idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(set))
                        .execute(&mut connection)
                        .await
                        .unwrap();
                }
                connections.push(connection);
            }
            let committed =
                race_round!(connections, what, store, |connection, racer| mysql_attempt(
                    &store,
                    &mut connection,
                    mode,
                    round,
                    racer
                ));
            let (entries, posts, effects) = sqlx_stored!(setup, round, "JSON_LENGTH");
            let what = format!("{what} round {round}");
            check_round(&what, &committed, entries, posts, effects);
        }
    }
}

async fn sqlite_attempt(
    store: &idem_core::sqlite::Store,
    connection: &mut idem_core::sqlx::SqliteConnection,
    in_transaction: bool,
    round: usize,
    racer: usize,
) -> Result<Committed, Failed> {
    if !in_transaction {
        return write(&store.on(connection), round, racer, true).await;
    }
    let mut tx = connection.begin().await.map_err(sqlx_failed)?;
    let done = write(&store.on(&mut tx), round, racer, false).await?;
    tx.commit().await.map_err(sqlx_failed)?;
    Ok(done)
}

/// SQLite has one level, serializable: a deferred transaction that read before it writes meets
/// a busy database when another committed since its read, which waiting cannot cure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transactions_tell_the_truth_on_sqlite() {
    for in_transaction in [true, false] {
        let what = format!("sqlite, in a transaction: {in_transaction}");
        let idem_tests::backends::Db::Sqlite { path, .. } =
            idem_tests::backends::fresh_sqlite(&format!("iso_{in_transaction}")).await
        else {
            unreachable!("fresh_sqlite makes a SQLite store")
        };
        let store = Arc::new(idem_core::sqlite::Store::new());
        let mut setup = idem_tests::backends::sqlite_connection(&path).await;
        store.ensure_table::<Entry>(&mut setup).await.unwrap();
        store.ensure_table::<Post>(&mut setup).await.unwrap();
        store.ensure_table::<Account>(&mut setup).await.unwrap();
        store.ensure_table::<Thread>(&mut setup).await.unwrap();
        store.ensure_table::<Payment>(&mut setup).await.unwrap();
        for round in 0..ROUNDS {
            let mut connections = Vec::new();
            for _ in 0..RACERS {
                connections.push(idem_tests::backends::sqlite_connection(&path).await);
            }
            let committed =
                race_round!(
                    connections,
                    what,
                    store,
                    |connection, racer| sqlite_attempt(
                        &store,
                        &mut connection,
                        in_transaction,
                        round,
                        racer
                    )
                );
            let (entries, posts, effects) = sqlx_stored!(setup, round, "json_array_length");
            let what = format!("{what} round {round}");
            check_round(&what, &committed, entries, posts, effects);
        }
    }
}

/// A MariaDB connection in a transaction that wrote 200 rows of `ballast` (a table the test
/// made): heavier than a caller's, so that InnoDB picks the caller's to roll back when the two
/// deadlock.
async fn heavy_transaction(uri: &str, database: &str) -> idem_core::sqlx::MySqlConnection {
    use idem_tests::mysql_rows::run;
    let mut connection = mysql_connection(uri, database).await;
    run(&mut connection, "BEGIN").await;
    let ballast: Vec<String> = (0..200).map(|n| format!("({n})")).collect();
    let insert = format!("INSERT INTO ballast VALUES {}", ballast.join(","));
    run(&mut connection, &insert).await;
    connection
}

/// The number of rows of `table`.
async fn rows_in(connection: &mut idem_core::sqlx::MySqlConnection, table: &str) -> i64 {
    let count = format!("SELECT COUNT(*) FROM {table}");
    idem_core::sqlx::query_scalar(idem_core::sqlx::AssertSqlSafe(count))
        .fetch_one(connection)
        .await
        .unwrap()
}

/// A thread of comments, for `push`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, idem_core::Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    topic: String,
    #[idem(push_by = "id")]
    comments: Vec<serde_json::Value>,
}

/// Each write of the store, as [`every_write_a_deadlock_ended_answers_it_and_leaves_all_as_it_was`]
/// makes it in the caller's transaction.
#[derive(Clone, Copy, Debug)]
enum WriteCall {
    Upsert,
    UpsertMany,
    /// A batch in chunks of two, whose second chunk goes by the plain insert of fresh rows
    /// (the first, all inserted, makes it likely fresh).
    FreshBatch,
    Delete,
    DeleteById,
    InsertNew,
    Record,
    ApplyOnce,
    Push,
}

impl WriteCall {
    const ALL: [WriteCall; 9] = [
        WriteCall::Upsert,
        WriteCall::UpsertMany,
        WriteCall::FreshBatch,
        WriteCall::Delete,
        WriteCall::DeleteById,
        WriteCall::InsertNew,
        WriteCall::Record,
        WriteCall::ApplyOnce,
        WriteCall::Push,
    ];

    /// The table it writes.
    fn table(self) -> &'static str {
        match self {
            WriteCall::Upsert
            | WriteCall::UpsertMany
            | WriteCall::FreshBatch
            | WriteCall::Delete
            | WriteCall::DeleteById
            | WriteCall::InsertNew => "entries",
            WriteCall::Record => "payments",
            WriteCall::ApplyOnce => "accounts",
            WriteCall::Push => "threads",
        }
    }

    /// What the other transaction holds: every row and gap of the call's table; for the fresh
    /// batch, e1's row and the gap before it only, so that its first chunk (f0, f1) is written
    /// and its plain insert of the second (e0, e1) waits.
    fn lock(self) -> String {
        match self {
            WriteCall::FreshBatch => {
                "DELETE FROM entries WHERE `userId` = 'u1' AND `entryId` = 'e1'".to_owned()
            }
            _ => format!("SELECT * FROM {} FOR UPDATE", self.table()),
        }
    }

    /// The store it goes through: the fresh batch's takes the shortcuts on chunks of two.
    fn store(self) -> idem_core::mysql::Store {
        match self {
            WriteCall::FreshBatch => idem_core::mysql::Store::new()
                .with_batch_chunk(2)
                .with_shortcuts_from(2),
            _ => idem_core::mysql::Store::new(),
        }
    }

    /// Makes the call through `connection`; what it answered, each error with whether it is
    /// retryable.
    async fn make(
        self,
        store: &idem_core::mysql::Store,
        connection: &mut idem_core::sqlx::MySqlConnection,
    ) -> Vec<String> {
        use idem_core::{Change, Error, OpId};
        fn error(error: &Error) -> String {
            format!("{error} (retryable: {})", error.is_retryable())
        }
        fn one<T: std::fmt::Debug>(answer: Result<T, Error>) -> Vec<String> {
            vec![answer.map_or_else(|e| error(&e), |answer| format!("{answer:?}"))]
        }
        let stored = entry("e1", 1, "stored before");
        match self {
            WriteCall::Upsert => one(store.upsert(connection, &entry("e1", 2, "new")).await),
            WriteCall::UpsertMany | WriteCall::FreshBatch => {
                let batch = match self {
                    WriteCall::FreshBatch => ["f0", "f1", "e0", "e1"]
                        .map(|id| entry(id, 2, "new"))
                        .to_vec(),
                    _ => vec![entry("e0", 1, "new"), entry("e1", 2, "new")],
                };
                match store.upsert_many(connection, &batch).await {
                    Err(e) => vec![error(&e)],
                    Ok(report) => (report.outcomes().iter())
                        .map(|outcome| outcome.as_ref().map_or_else(error, |o| format!("{o:?}")))
                        .collect(),
                }
            }
            WriteCall::Delete => {
                let deleted = Entry {
                    deleted_at: Some(1),
                    ..stored
                };
                one(store.delete(connection, &deleted).await)
            }
            WriteCall::DeleteById => {
                let id = stored.id().unwrap();
                one(store.delete_by_id::<Entry, _>(connection, id, &1_i64).await)
            }
            WriteCall::InsertNew => {
                let members = [entry("e5", 1, "new")];
                match store.insert_new(connection, &members).await {
                    Err(e) => vec![error(&e)],
                    Ok(report) => {
                        let mut answered: Vec<String> =
                            report.errors().map(|(_, e)| error(e)).collect();
                        let inserted = report.into_inserted();
                        answered.extend(inserted.iter().map(|m| format!("inserted {m:?}")));
                        answered
                    }
                }
            }
            WriteCall::Record => {
                let payment = Payment {
                    request_key: "k1".into(),
                    amount_cents: 5,
                };
                one(store.record(connection, &payment).await)
            }
            WriteCall::ApplyOnce => {
                let id = idem_tests::fixtures::account("a").id().unwrap();
                let changes = [Change::add("balance", 5)];
                one(
                    (store.apply_once::<Account>(connection, id, &OpId::new("op1"), &changes))
                        .await,
                )
            }
            WriteCall::Push => {
                let id = thread().id().unwrap();
                let comment = serde_json::json!({"id": "c1", "text": "hi"});
                one(store
                    .push::<Thread, _>(connection, id, "comments", &comment)
                    .await)
            }
        }
    }
}

fn thread() -> Thread {
    Thread {
        topic: "t".into(),
        comments: Vec::new(),
    }
}

/// Every write of the MariaDB store, made in the caller's transaction that a deadlock ends
/// (InnoDB rolls the whole transaction back, picking the lighter one: the other is made heavier
/// by 200 rows written first): the call answers the deadlock, retryable, and nothing it meant
/// to write is stored, as nothing of the caller's transaction is. The other transaction holds
/// what the call needs ([`WriteCall::lock`]), then waits for the caller's own row. For a
/// batch's plain insert of fresh rows, before the fix the refused insert went the guarded way,
/// which wrote e0 with no transaction around it and then answered "SAVEPOINT idem does not
/// exist" (1305), not retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_write_a_deadlock_ended_answers_it_and_leaves_all_as_it_was_on_mariadb() {
    use idem_tests::mysql_rows::{raw, run};
    for call in WriteCall::ALL {
        let idem_tests::backends::Db::Mysql { uri, database, .. } =
            idem_tests::backends::fresh_mysql(&format!("deadlock_{call:?}")).await
        else {
            unreachable!("fresh_mysql makes a MariaDB store")
        };
        let store = call.store();
        let mut setup = mysql_connection(&uri, &database).await;
        store.ensure_table::<Entry>(&mut setup).await.unwrap();
        (store.ensure_table::<Payment>(&mut setup).await).unwrap();
        (store.ensure_table::<Account>(&mut setup).await).unwrap();
        store.ensure_table::<Thread>(&mut setup).await.unwrap();
        store
            .upsert(&mut setup, &entry("e1", 1, "stored before"))
            .await
            .unwrap();
        (store
            .upsert(&mut setup, &idem_tests::fixtures::account("a"))
            .await)
            .unwrap();
        store.upsert(&mut setup, &thread()).await.unwrap();
        run(&mut setup, "CREATE TABLE side (x INT)").await;
        run(&mut setup, "CREATE TABLE ballast (x INT)").await;
        let before = (
            raw::<Entry>(&mut setup).await,
            raw::<Payment>(&mut setup).await,
            raw::<Account>(&mut setup).await,
            raw::<Thread>(&mut setup).await,
        );

        let mut other = heavy_transaction(&uri, &database).await;
        run(&mut other, &call.lock()).await;

        let caller = tokio::spawn({
            let (uri, database, store) = (uri.clone(), database.clone(), store.clone());
            async move {
                let mut connection = mysql_connection(&uri, &database).await;
                let mut tx = connection.begin().await.unwrap();
                run(&mut tx, "INSERT INTO side VALUES (1)").await;
                let answered = call.make(&store, &mut tx).await;
                let committed = tx.commit().await;
                (answered, committed)
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        run(&mut other, "SELECT * FROM side FOR UPDATE").await;
        run(&mut other, "ROLLBACK").await;
        let (answered, committed) = caller.await.unwrap();

        let side = rows_in(&mut setup, "side").await;
        let after = (
            raw::<Entry>(&mut setup).await,
            raw::<Payment>(&mut setup).await,
            raw::<Account>(&mut setup).await,
            raw::<Thread>(&mut setup).await,
        );
        assert_eq!(
            side, 0,
            "{call:?}: the deadlock rolled back the caller's transaction"
        );
        assert!(
            answered.iter().any(|answer| answer.contains("1213"))
                && answered
                    .iter()
                    .all(|answer| answer.ends_with("(retryable: true)")),
            "{call:?}: the call answers the deadlock that ended the caller's transaction, \
             retryable; it answered {answered:?} (commit: {committed:?})"
        );
        assert_eq!(
            after, before,
            "{call:?}: nothing the call meant to write is stored"
        );
    }
}
