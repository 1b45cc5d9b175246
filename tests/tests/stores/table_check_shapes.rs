//! The SQL table check against table shapes a migration may leave, on every PostgreSQL server
//! under test, SQLite and MariaDB: before its first write a store refuses a table that cannot
//! keep idem's promises (every call, `upsert`, `upsert_many`, `get`, `ensure_table`, fails with
//! the schema mismatch and nothing is written), naming each problem with its fix, every one at
//! once in an audit, so that running exactly the fixes named makes the same store write; and
//! it accepts every table that can keep them (`Inserted`, `Unchanged`, `Updated`). Each test
//! has a fresh schema, database file or database of its own.

use idem_core::sqlx::{MySqlConnection, SqliteConnection};
use idem_core::{
    AdoptReport, Applied, AuditReport, Change, Error, ErrorKind, Idempotent, OpId, Outcome,
};
use idem_tests::backends::{
    fresh_mysql, fresh_schema, fresh_sqlite, postgres_servers, sqlx_connection, Db,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A page: one text key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "pages")]
struct Page {
    #[idem(key)]
    slug: String,
    title: String,
    views: i64,
}

/// A translated page: two keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "pairs")]
struct Pair {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    title: String,
}

/// Mixed-case names: the table's and the columns' (serde's camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "CamelPages")]
#[serde(rename_all = "camelCase")]
struct CamelPage {
    #[idem(key)]
    page_slug: String,
    #[idem(key)]
    site_id: i64,
    page_title: String,
}

/// Names that need quoting everywhere, in PostgreSQL's arrays too: spaces, quotes, braces, a
/// backslash, case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "Odd \"pages\" {x}")]
struct Odd {
    #[idem(key)]
    #[serde(rename = "Slug \"quoted\" {1}\\")]
    slug: String,
    #[idem(key)]
    #[serde(rename = "Lang`s")]
    lang: String,
    #[serde(rename = "NULL")]
    title: String,
}

/// A wallet whose balance moves through `apply_once` alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "wallets")]
struct Wallet {
    #[idem(key)]
    owner: String,
    #[idem(effect)]
    balance: i64,
}

fn wallet(owner: &str) -> Wallet {
    Wallet {
        owner: owner.into(),
        balance: 0,
    }
}

/// A natural key whose column's name holds a comma.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "commas")]
struct Comma {
    #[idem(key)]
    #[serde(rename = "slug, or name")]
    slug: String,
    #[idem(key)]
    lang: String,
    title: String,
}

fn comma(slug: &str, title: &str) -> Comma {
    Comma {
        slug: slug.into(),
        lang: "en".into(),
        title: title.into(),
    }
}

fn odd(slug: &str, title: &str) -> Odd {
    Odd {
        slug: slug.into(),
        lang: "en".into(),
        title: title.into(),
    }
}

/// Which database a [`Sql`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Postgres,
    Sqlite,
    Mariadb,
}

/// One SQL store under test, with a fresh schema, file or database of its own.
enum Sql {
    Postgres {
        label: String,
        client: tokio_postgres::Client,
        store: idem_core::postgres::Store,
    },
    Sqlite {
        connection: SqliteConnection,
        store: idem_core::sqlite::Store,
    },
    Mariadb {
        connection: MySqlConnection,
        store: idem_core::mysql::Store,
    },
}

/// A fresh store on every SQL database under test, for `test`.
async fn backends(test: &str) -> Vec<Sql> {
    backends_of(test, &[Kind::Postgres, Kind::Sqlite, Kind::Mariadb]).await
}

/// [`backends`] of the databases `kinds` alone.
async fn backends_of(test: &str, kinds: &[Kind]) -> Vec<Sql> {
    let mut backends = Vec::new();
    let servers = match kinds.contains(&Kind::Postgres) {
        true => postgres_servers(),
        false => Vec::new(),
    };
    for (label, uri) in servers {
        let (_, client) = fresh_schema(&uri, "shapes", test).await;
        backends.push(Sql::Postgres {
            label,
            client,
            store: idem_core::postgres::Store::new(),
        });
    }
    if kinds.contains(&Kind::Sqlite) {
        if let Db::Sqlite { connection, .. } = fresh_sqlite(&format!("shapes_{test}")).await {
            backends.push(Sql::Sqlite {
                connection: connection.into_inner(),
                store: idem_core::sqlite::Store::new(),
            });
        }
    }
    if kinds.contains(&Kind::Mariadb) {
        if let Db::Mysql { connection, .. } = fresh_mysql(&format!("shapes_{test}")).await {
            backends.push(Sql::Mariadb {
                connection: connection.into_inner(),
                store: idem_core::mysql::Store::new(),
            });
        }
    }
    backends
}

/// The model-independent calls a test makes, on whichever store `$db` is, `$store` and `$c`
/// (its client or connection) bound for `$call`.
macro_rules! on {
    ($db:expr, |$store:ident, $c:ident| $call:expr) => {
        match $db {
            Sql::Postgres {
                store: $store,
                client,
                ..
            } => {
                let $c = &*client;
                $call
            }
            Sql::Sqlite {
                store: $store,
                connection,
            } => {
                let $c = &mut *connection;
                $call
            }
            Sql::Mariadb {
                store: $store,
                connection,
            } => {
                let $c = &mut *connection;
                $call
            }
        }
    };
}

impl std::fmt::Display for Sql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sql::Postgres { label, .. } => f.write_str(label),
            Sql::Sqlite { .. } => f.write_str("sqlite"),
            Sql::Mariadb { .. } => f.write_str("mariadb"),
        }
    }
}

impl Sql {
    fn kind(&self) -> Kind {
        match self {
            Sql::Postgres { .. } => Kind::Postgres,
            Sql::Sqlite { .. } => Kind::Sqlite,
            Sql::Mariadb { .. } => Kind::Mariadb,
        }
    }

    /// `name` quoted as an identifier.
    fn q(&self, name: &str) -> String {
        match self.kind() {
            Kind::Mariadb => format!("`{}`", name.replace('`', "``")),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// Runs `sql`, one statement or several separated by `;`, as a migration would.
    async fn run(&mut self, sql: &str) {
        let label = self.to_string();
        match self {
            Sql::Postgres { client, .. } => client
                .batch_execute(sql)
                .await
                .unwrap_or_else(|error| panic!("{label}: running {sql}: {error:?}")),
            Sql::Sqlite { connection, .. } => idem_tests::sqlite_rows::run(connection, sql).await,
            Sql::Mariadb { connection, .. } => idem_tests::mysql_rows::run(connection, sql).await,
        }
    }

    /// Runs `sql`, whose failure is returned.
    async fn try_run(&mut self, sql: &str) -> Result<(), String> {
        use idem_core::sqlx::{raw_sql, AssertSqlSafe};
        match self {
            Sql::Postgres { client, .. } => client
                .batch_execute(sql)
                .await
                .map_err(|error| format!("{error:?}")),
            Sql::Sqlite { connection, .. } => raw_sql(AssertSqlSafe(sql.to_owned()))
                .execute(&mut *connection)
                .await
                .map(drop)
                .map_err(|error| error.to_string()),
            Sql::Mariadb { connection, .. } => raw_sql(AssertSqlSafe(sql.to_owned()))
                .execute(&mut *connection)
                .await
                .map(drop)
                .map_err(|error| error.to_string()),
        }
    }

    /// The `CREATE TABLE` statement of `T`'s table, as the store prints it for a migration.
    fn create_sql<T: Idempotent>(&self) -> String {
        match self.kind() {
            Kind::Postgres => idem_core::postgres::Store::create_table_sql::<T>(),
            Kind::Sqlite => idem_core::sqlite::Store::create_table_sql::<T>(),
            Kind::Mariadb => idem_core::mysql::Store::create_table_sql::<T>(),
        }
    }

    /// A store that has checked no table yet, as a new process's.
    fn forget(&mut self) {
        match self {
            Sql::Postgres { store, .. } => *store = idem_core::postgres::Store::new(),
            Sql::Sqlite { store, .. } => *store = idem_core::sqlite::Store::new(),
            Sql::Mariadb { store, .. } => *store = idem_core::mysql::Store::new(),
        }
    }

    /// Creates `T`'s table if it does not exist, then checks it.
    async fn ensure_table<T: Idempotent>(&mut self) -> Result<(), Error> {
        match self {
            Sql::Postgres { store, client, .. } => store.ensure_table::<T, _>(&*client).await,
            Sql::Sqlite { store, connection } => store.ensure_table::<T>(connection).await,
            Sql::Mariadb { store, connection } => store.ensure_table::<T>(connection).await,
        }
    }

    async fn upsert<T>(&mut self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        on!(self, |store, c| store.upsert(c, doc).await)
    }

    /// A batch of `docs`, whose outcomes must all be `Ok`, or the call's error.
    async fn upsert_many<T>(&mut self, docs: &[T]) -> Result<Vec<Outcome>, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let report = on!(self, |store, c| store.upsert_many(c, docs).await)?;
        Ok(report
            .into_outcomes()
            .into_iter()
            .map(|outcome| outcome.expect("each document written"))
            .collect())
    }

    /// `apply_once` of `changes` under `op` to the row of `doc`.
    async fn apply_once<T>(
        &mut self,
        doc: &T,
        op: &str,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let (id, op) = (doc.id().expect("an id"), OpId::new(op));
        match self {
            Sql::Postgres { store, client, .. } => {
                store.apply_once::<T, _>(&*client, id, &op, changes).await
            }
            Sql::Sqlite { store, connection } => {
                store.apply_once::<T>(connection, id, &op, changes).await
            }
            Sql::Mariadb { store, connection } => {
                store.apply_once::<T>(connection, id, &op, changes).await
            }
        }
    }

    /// `doc` upserted as a batch of one: the call's error, or its outcome or error.
    async fn upsert_batch_of_one<T>(&mut self, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let docs = std::slice::from_ref(doc);
        let report = on!(self, |store, c| store.upsert_many(c, docs).await)?;
        report.into_outcomes().pop().expect("one outcome")
    }

    async fn get<T>(&mut self, doc: &T) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let id = doc.id().expect("an id");
        match self {
            Sql::Postgres { store, client, .. } => store.get::<T, _>(&*client, id).await,
            Sql::Sqlite { store, connection } => store.get::<T>(connection, id).await,
            Sql::Mariadb { store, connection } => store.get::<T>(connection, id).await,
        }
    }

    /// Moves the rows not under their derived ids to them; how many it moved.
    async fn adopt<T>(&mut self) -> u64
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let report = self.adopt_report::<T>().await;
        assert_eq!(report.failed.count, 0, "{self}: {report:?}");
        report.moved.count
    }

    /// The report of an adoption of `T`'s table, which must not fail.
    async fn adopt_report<T>(&mut self) -> AdoptReport
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let label = self.to_string();
        let report = match self {
            Sql::Postgres { store, client, .. } => store.adopt::<T, _>(&*client).await,
            Sql::Sqlite { store, connection } => store.adopt::<T>(connection).await,
            Sql::Mariadb { store, connection } => store.adopt::<T>(connection).await,
        };
        report.unwrap_or_else(|error| panic!("{label}: adopting: {error}"))
    }

    /// What an audit finds the table lacks: every problem at once.
    async fn table_problems<T>(&mut self) -> Vec<String>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        self.audit::<T>().await.table_problems
    }

    /// The audit of `T`'s table, which must not fail.
    async fn audit<T>(&mut self) -> AuditReport
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let label = self.to_string();
        let report = match self {
            Sql::Postgres { store, client, .. } => store.audit::<T, _>(&*client).await,
            Sql::Sqlite { store, connection } => store.audit::<T>(connection).await,
            Sql::Mariadb { store, connection } => store.audit::<T>(connection).await,
        };
        report.unwrap_or_else(|error| panic!("{label}: auditing: {error}"))
    }

    /// What `T`'s table holds, every column of every row as text, sorted, with what changes on
    /// any write (PostgreSQL's row version, the write marker of the others).
    async fn rows<T: Idempotent>(&mut self) -> Vec<String> {
        use idem_core::sqlx::{query_scalar, AssertSqlSafe};
        let table = T::MODEL.collection();
        let t = self.q(table);
        let columns = self.columns_of(table).await;
        let quoted: Vec<String> = columns.iter().map(|column| self.q(column)).collect();
        match self {
            Sql::Postgres { client, .. } => {
                let sql = format!("SELECT t.xmin::text || ' ' || t::text FROM {t} t ORDER BY 1");
                (client.query(&sql, &[]).await)
                    .unwrap_or_else(|error| panic!("reading {table}: {error}"))
                    .iter()
                    .map(|row| row.get(0))
                    .collect()
            }
            Sql::Sqlite { connection, .. } => {
                let shown: Vec<String> = quoted.iter().map(|c| format!("quote({c})")).collect();
                let sql = format!("SELECT {} FROM {t} ORDER BY 1", shown.join(" || ',' || "));
                query_scalar(AssertSqlSafe(sql))
                    .fetch_all(&mut *connection)
                    .await
                    .unwrap_or_else(|error| panic!("reading {table}: {error}"))
            }
            Sql::Mariadb { connection, .. } => {
                let shown: Vec<String> = quoted
                    .iter()
                    .map(|c| format!("CONVERT(IFNULL(QUOTE({c}), 'NULL') USING utf8mb4)"))
                    .collect();
                let sql = format!(
                    "SELECT CAST(CONCAT_WS(',', {}) AS CHAR) FROM {t} ORDER BY 1",
                    shown.join(", ")
                );
                query_scalar(AssertSqlSafe(sql))
                    .fetch_all(&mut *connection)
                    .await
                    .unwrap_or_else(|error| panic!("reading {table}: {error}"))
            }
        }
    }
}

impl Sql {
    /// The columns of `table`, as the catalog names them.
    async fn columns_of(&mut self, table: &str) -> Vec<String> {
        use idem_core::sqlx::{query_scalar, AssertSqlSafe};
        match self {
            Sql::Postgres { client, .. } => client
                .query(
                    "SELECT column_name::text FROM information_schema.columns \
                     WHERE table_schema = current_schema() AND table_name = $1",
                    &[&table],
                )
                .await
                .expect("reading the columns")
                .iter()
                .map(|row| row.get(0))
                .collect(),
            Sql::Sqlite { connection, .. } => {
                query_scalar(AssertSqlSafe("SELECT name FROM pragma_table_info(?1)"))
                    .bind(table)
                    .fetch_all(&mut *connection)
                    .await
                    .expect("reading the columns")
            }
            Sql::Mariadb { connection, .. } => query_scalar(AssertSqlSafe(
                "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            ))
            .bind(table)
            .fetch_all(&mut *connection)
            .await
            .expect("reading the columns"),
        }
    }

    /// Makes the table `table` anew with `create` (a `CREATE TABLE` of it and any statements
    /// after), keeping the rows of the columns both have.
    async fn remake(&mut self, table: &str, create: &str) {
        let copy = format!("{table}_copy");
        let (t, c) = (self.q(table), self.q(&copy));
        self.run(&format!("CREATE TABLE {c} AS SELECT * FROM {t}"))
            .await;
        let old = self.columns_of(&copy).await;
        self.run(&format!("DROP TABLE {t}")).await;
        self.run(create).await;
        let new = self.columns_of(table).await;
        let kept: Vec<String> = (old.iter())
            .filter(|column| new.contains(column))
            .map(|column| self.q(column))
            .collect();
        let kept = kept.join(", ");
        self.run(&format!(
            "INSERT INTO {t} ({kept}) SELECT {kept} FROM {c}; DROP TABLE {c}"
        ))
        .await;
    }

    /// Applies the fix `problem` names, as the one running the migration would: the statement
    /// it ends with, or SQLite's table made anew.
    async fn apply_fix<T: Idempotent>(&mut self, problem: &str) {
        if problem.contains("make the table anew") {
            // Made anew under another name, the rows copied, this one dropped, the new one
            // renamed, as the problem says.
            let table = T::MODEL.collection();
            let new = format!("{table}_new");
            let create = self.create_sql::<T>().replacen(
                &format!("CREATE TABLE IF NOT EXISTS {} (", self.q(table)),
                &format!("CREATE TABLE {} (", self.q(&new)),
                1,
            );
            assert!(create.contains(&self.q(&new)), "{create}");
            self.run(&create).await;
            let old = self.columns_of(table).await;
            let columns = self.columns_of(&new).await;
            let kept: Vec<String> = (old.iter())
                .filter(|column| columns.contains(column))
                .map(|column| self.q(column))
                .collect();
            let kept = kept.join(", ");
            let (t, n) = (self.q(table), self.q(&new));
            self.run(&format!(
                "INSERT INTO {n} ({kept}) SELECT {kept} FROM {t}; DROP TABLE {t}; \
                 ALTER TABLE {n} RENAME TO {t}"
            ))
            .await;
            return;
        }
        let statement = fix_statement(problem)
            .unwrap_or_else(|| panic!("{self}: no fix in the problem: {problem}"));
        if let Err(error) = self.try_run(statement).await {
            panic!("{self}: the fix {statement:?} of the problem {problem:?} fails: {error}");
        }
    }
}

/// The statement a problem ends with, its fix.
fn fix_statement(problem: &str) -> Option<&str> {
    [
        "ALTER TABLE ",
        "CREATE UNIQUE INDEX ",
        "DROP INDEX ",
        "CREATE TABLE ",
        "SET SESSION ",
    ]
    .iter()
    .filter_map(|start| problem.find(start))
    .min()
    .map(|at| &problem[at..])
}

/// The name `create` (a `CREATE TABLE` of idem's) gives the unique constraint on the natural key.
fn natural_key_constraint(create: &str) -> String {
    let at = create
        .find("\n    CONSTRAINT ")
        .expect("a named constraint");
    let mut quoted = create[at + "\n    CONSTRAINT ".len()..].chars();
    let quote = quoted.next().expect("a quoted name");
    let mut name = String::new();
    while let Some(c) = quoted.next() {
        if c != quote {
            name.push(c);
        } else if quoted.next() == Some(quote) {
            // A quote written twice stands for itself.
            name.push(quote);
        } else {
            break;
        }
    }
    name
}

/// MariaDB: the `ALTER TABLE` clause that drops the unique index `create` makes on `_id` (`id`)
/// or on the natural key: the primary key on the natural key and a unique constraint on `_id`,
/// or, where a key column cannot be in a primary key, the other way round.
fn mariadb_drop(create: &str, id: bool) -> String {
    match create.contains("PRIMARY KEY (`_id`)") == id {
        true => "DROP PRIMARY KEY".to_owned(),
        false => format!("DROP INDEX `{}`", natural_key_constraint(create)),
    }
}

/// `create` without its unique constraint on the natural key (and a comma before it).
fn without_natural_key(create: &str) -> String {
    let at = create
        .find(",\n    CONSTRAINT ")
        .expect("a natural-key constraint");
    let end = at + create[at..].find(')').expect("its column list") + 1;
    format!("{}{}", &create[..at], &create[end..])
}

/// `create` as a `CREATE TABLE` (not `IF NOT EXISTS`), so that a test sees it made.
fn plain(create: &str) -> String {
    create.replacen("CREATE TABLE IF NOT EXISTS ", "CREATE TABLE ", 1)
}

fn page(slug: &str, views: i64) -> Page {
    Page {
        slug: slug.into(),
        title: format!("About {slug}"),
        views,
    }
}

fn pair(slug: &str, lang: &str) -> Pair {
    Pair {
        slug: slug.into(),
        lang: lang.into(),
        title: format!("{slug} in {lang}"),
    }
}

fn camel(slug: &str, site: i64) -> CamelPage {
    CamelPage {
        page_slug: slug.into(),
        site_id: site,
        page_title: format!("{slug} of {site}"),
    }
}

/// Whether `error` is the check's refusal, and its problem.
fn mismatch(error: &Error) -> Option<&str> {
    match error.kind() {
        ErrorKind::SchemaMismatch { problem, .. } => Some(problem),
        _ => None,
    }
}

/// Makes `T`'s table as `ensure_table` does, and stores `docs` in it.
async fn seeded<T>(db: &mut Sql, docs: &[T])
where
    T: Idempotent + Serialize + Sync,
{
    db.ensure_table::<T>()
        .await
        .unwrap_or_else(|error| panic!("{db}: making the table: {error}"));
    for doc in docs {
        assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Inserted, "{db}");
    }
}

/// The table of `T` as it is now is accepted by a store that has not checked it: `doc` is
/// `Inserted`, then `Unchanged`, then `changed` (the same natural key) is `Updated`, and both read
/// back as written.
async fn accepts<T>(db: &mut Sql, doc: &T, changed: &T)
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    accepted_writes(db, doc, changed).await;
    db.forget();
    db.ensure_table::<T>()
        .await
        .unwrap_or_else(|error| panic!("{db}: ensure_table refused: {error}"));
}

/// [`accepts`] but for `ensure_table`.
async fn accepted_writes<T>(db: &mut Sql, doc: &T, changed: &T)
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    db.forget();
    let outcome = db.upsert(doc).await;
    let outcome = outcome.unwrap_or_else(|error| panic!("{db}: refused: {error}"));
    assert_eq!(outcome, Outcome::Inserted, "{db}");
    assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Unchanged, "{db}");
    assert_eq!(db.get(doc).await.unwrap().as_ref(), Some(doc), "{db}");
    assert_eq!(db.upsert(changed).await.unwrap(), Outcome::Updated, "{db}");
    assert_eq!(db.get(doc).await.unwrap().as_ref(), Some(changed), "{db}");
    assert_eq!(
        db.upsert_many(std::slice::from_ref(changed)).await.unwrap(),
        [Outcome::Unchanged],
        "{db}"
    );
    assert_eq!(db.table_problems::<T>().await, Vec::<String>::new(), "{db}");
}

/// The table of `T` as it is now is refused by a store that has not checked it, before any
/// write: each of `upsert`, `upsert_many`, `ensure_table` and `get` of `doc` fails with the
/// schema mismatch, whose problem holds each of `named`, and the rows stay as they were. The
/// audit lists every problem, the first the one the calls named; applying each one's fix makes
/// the table pass: the same store then writes `doc` (`Inserted`, or `Updated` if its row is
/// stored with other values) and `Unchanged` after.
async fn refuses_then_fixed<T>(db: &mut Sql, doc: &T, named: &[&str])
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    refused_then_fixed(db, doc, named, true).await
}

/// The refusal part of [`refuses_then_fixed`], with `ensure_table` among the calls refused if
/// `ensure`: the audit's problems.
async fn refused<T>(db: &mut Sql, doc: &T, named: &[&str], ensure: bool) -> Vec<String>
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    db.forget();
    let before = db.rows::<T>().await;
    let error = db.upsert(doc).await.expect_err(&format!("{db}: accepted"));
    let problem = mismatch(&error)
        .unwrap_or_else(|| panic!("{db}: not a schema mismatch: {error:?}"))
        .to_owned();
    for name in named {
        assert!(
            problem.contains(name),
            "{db}: {name:?} is not in: {problem}"
        );
    }
    let error = db
        .upsert_many(std::slice::from_ref(doc))
        .await
        .expect_err(&format!("{db}: accepted"));
    assert_eq!(mismatch(&error), Some(problem.as_str()), "{db}");
    if ensure {
        let error = db
            .ensure_table::<T>()
            .await
            .expect_err(&format!("{db}: accepted"));
        assert_eq!(mismatch(&error), Some(problem.as_str()), "{db}");
    }
    let error = db.get(doc).await.expect_err(&format!("{db}: read"));
    assert_eq!(mismatch(&error), Some(problem.as_str()), "{db}");
    assert_eq!(db.rows::<T>().await, before, "{db}: the refusal wrote");
    let problems = db.table_problems::<T>().await;
    assert_eq!(
        problems.first(),
        Some(&problem),
        "{db}: the audit's problems: {problems:#?}"
    );
    problems
}

/// Applies the fix of each of `problems` (an audit's of `T`'s table); then the store, which
/// refused the table, writes `doc`: `Inserted`, or `Updated` if its row is stored with other
/// values, then `Unchanged`.
async fn fixed<T>(db: &mut Sql, doc: &T, problems: &[String])
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    let mut made_anew = false;
    for problem in problems {
        // One table made anew serves every problem whose fix it is.
        let anew = problem.contains("make the table anew");
        if !(anew && made_anew) {
            db.apply_fix::<T>(problem).await;
        }
        made_anew |= anew;
    }
    // The same store, which refused the table.
    let outcome = db
        .upsert(doc)
        .await
        .unwrap_or_else(|error| panic!("{db}: refused after the fixes of {problems:#?}: {error}"));
    assert!(
        matches!(outcome, Outcome::Inserted | Outcome::Updated),
        "{db}: {outcome:?}"
    );
    assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Unchanged, "{db}");
    assert_eq!(db.get(doc).await.unwrap().as_ref(), Some(doc), "{db}");
    assert_eq!(db.table_problems::<T>().await, Vec::<String>::new(), "{db}");
}

/// [`refuses_then_fixed`], with `ensure_table` among the calls refused if `ensure`.
async fn refused_then_fixed<T>(db: &mut Sql, doc: &T, named: &[&str], ensure: bool)
where
    T: Idempotent + Serialize + DeserializeOwned + Sync + Clone + PartialEq + std::fmt::Debug,
{
    let problems = refused(db, doc, named, ensure).await;
    fixed(db, doc, &problems).await;
}

/// Drops the unique constraint `ensure_table` made on `T`'s natural key (SQLite: makes the table
/// anew without it), then runs `then`.
async fn replace_natural_key<T: Idempotent>(db: &mut Sql, then: &str) {
    let create = db.create_sql::<T>();
    let table = T::MODEL.collection();
    let (t, key) = (db.q(table), db.q(&natural_key_constraint(&create)));
    match db.kind() {
        Kind::Postgres => {
            db.run(&format!("ALTER TABLE {t} DROP CONSTRAINT {key}"))
                .await
        }
        Kind::Mariadb => {
            let drop = mariadb_drop(&create, false);
            db.run(&format!("ALTER TABLE {t} {drop}")).await
        }
        Kind::Sqlite => {
            db.remake(table, &plain(&without_natural_key(&create)))
                .await
        }
    }
    if !then.is_empty() {
        db.run(then).await;
    }
}

/// The definition `create` gives `column` (after its quoted name, without the comma).
fn definition_of(db: &Sql, create: &str, column: &str) -> String {
    let quoted = format!("    {} ", db.q(column));
    (create.lines())
        .find_map(|line| line.strip_prefix(&quoted))
        .unwrap_or_else(|| panic!("no column {column} in {create}"))
        .trim_end_matches(',')
        .to_owned()
}

/// `create` with `column`'s definition replaced by `definition`.
fn redefined(db: &Sql, create: &str, column: &str, definition: &str) -> String {
    let old = format!("    {} {}", db.q(column), definition_of(db, create, column));
    let new = format!("    {} {definition}", db.q(column));
    plain(&create.replacen(&old, &new, 1))
}

const NO_NATURAL_KEY: &str = "no unique constraint on exactly the natural key";

// ---------------------------------------------------------------------------------------------
// Accepted shapes

/// The tables `ensure_table` makes, of one key, two keys and mixed-case names, are accepted.
#[tokio::test]
async fn the_tables_ensure_table_makes_are_accepted() {
    for mut db in backends("own").await {
        db.ensure_table::<Page>().await.unwrap();
        accepts(&mut db, &page("a", 1), &page("a", 2)).await;
        db.ensure_table::<Pair>().await.unwrap();
        accepts(
            &mut db,
            &pair("a", "en"),
            &Pair {
                title: "new".into(),
                ..pair("a", "en")
            },
        )
        .await;
        db.ensure_table::<CamelPage>().await.unwrap();
        accepts(
            &mut db,
            &camel("a", 1),
            &CamelPage {
                page_title: "new".into(),
                ..camel("a", 1)
            },
        )
        .await;
    }
}

/// A migration's table: the columns in another order, a nullable column of the user's, a
/// non-unique index, constraint names of the user's.
#[tokio::test]
async fn a_migrations_table_with_its_own_order_columns_indexes_and_names_is_accepted() {
    for mut db in backends("migration").await {
        let create = plain(&db.create_sql::<Pair>());
        let key = natural_key_constraint(&create);
        let create = create.replace(&db.q(&key), &db.q("my_own_key"));
        let mut lines: Vec<&str> = create.lines().collect();
        let close = lines
            .iter()
            .rposition(|line| line.starts_with(')'))
            .unwrap();
        let (head, tail) = (lines[0].to_owned(), lines[close..].join("\n"));
        let body: Vec<String> = lines
            .drain(1..close)
            .map(|l| l.trim_end_matches(',').to_owned())
            .collect();
        let quote = if db.kind() == Kind::Mariadb {
            "    `"
        } else {
            "    \""
        };
        let (mut columns, constraints): (Vec<String>, Vec<String>) =
            body.into_iter().partition(|line| line.starts_with(quote));
        columns.reverse();
        columns.insert(1, format!("    {} TEXT", db.q("note")));
        if db.kind() != Kind::Mariadb {
            for column in &mut columns {
                *column = column.replace(" PRIMARY KEY", " CONSTRAINT my_own_pk PRIMARY KEY");
            }
        }
        let create = format!(
            "{head}\n{},\n{}\n{tail}",
            columns.join(",\n"),
            constraints.join(",\n")
        );
        db.run(&create).await;
        let (t, title) = (db.q("pairs"), db.q("title"));
        db.run(&format!("CREATE INDEX pairs_by_title ON {t} ({title})"))
            .await;
        accepts(
            &mut db,
            &pair("a", "en"),
            &Pair {
                title: "new".into(),
                ..pair("a", "en")
            },
        )
        .await;
    }
}

/// A unique index on the natural key's columns in another order than the model's is the
/// natural key's.
#[tokio::test]
async fn a_unique_index_on_the_natural_key_in_another_order_is_accepted() {
    for mut db in backends("reversed").await {
        seeded(&mut db, &[pair("a", "en")]).await;
        let (t, slug, lang) = (db.q("pairs"), db.q("slug"), db.q("lang"));
        replace_natural_key::<Pair>(
            &mut db,
            &format!("CREATE UNIQUE INDEX pairs_reversed ON {t} ({lang}, {slug})"),
        )
        .await;
        accepts(
            &mut db,
            &pair("b", "en"),
            &Pair {
                title: "new".into(),
                ..pair("b", "en")
            },
        )
        .await;
    }
}

/// Two unique indexes on exactly the natural key, and another on exactly `_id`.
#[tokio::test]
async fn duplicate_unique_indexes_on_the_keys_are_accepted() {
    for mut db in backends("duplicates").await {
        seeded(&mut db, &[page("a", 1)]).await;
        let (t, slug, id) = (db.q("pages"), db.q("slug"), db.q("_id"));
        db.run(&format!(
            "CREATE UNIQUE INDEX pages_slug_again ON {t} ({slug}); \
             CREATE UNIQUE INDEX pages_id_again ON {t} ({id})"
        ))
        .await;
        accepts(&mut db, &page("b", 1), &page("b", 2)).await;
    }
}

/// `_id` with a unique index, not the primary key.
#[tokio::test]
async fn an_id_unique_but_not_the_primary_key_is_accepted() {
    for mut db in backends("id_unique").await {
        seeded(&mut db, &[page("a", 1)]).await;
        let (t, id) = (db.q("pages"), db.q("_id"));
        match db.kind() {
            Kind::Postgres => {
                db.run(&format!("ALTER TABLE {t} DROP CONSTRAINT pages_pkey, ADD CONSTRAINT pages_id_unique UNIQUE ({id})"))
                    .await
            }
            Kind::Mariadb => {
                let drop = mariadb_drop(&db.create_sql::<Page>(), true);
                db.run(&format!("ALTER TABLE {t} {drop}, ADD UNIQUE INDEX pages_id_unique ({id})"))
                    .await
            }
            Kind::Sqlite => {
                let create = db.create_sql::<Page>();
                let definition = definition_of(&db, &create, "_id").replace(" PRIMARY KEY", " UNIQUE");
                let create = redefined(&db, &create, "_id", &definition);
                db.remake("pages", &create).await
            }
        }
        accepts(&mut db, &page("b", 1), &page("b", 2)).await;
    }
}

/// Unique indexes PostgreSQL keys exactly as a constraint: with columns it only includes, in
/// descending order, with another operator class, nulls not distinct; a key column in the
/// deterministic collation "C".
#[tokio::test]
async fn postgres_unique_indexes_of_other_kinds_on_the_natural_key_are_accepted() {
    for mut db in backends_of("pg_kinds", &[Kind::Postgres]).await {
        seeded(&mut db, &[page("a", 1)]).await;
        let version: i32 = match &db {
            Sql::Postgres { client, .. } => client
                .query_one("SELECT current_setting('server_version_num')::int", &[])
                .await
                .unwrap()
                .get(0),
            _ => unreachable!(),
        };
        let mut shapes = vec![
            "CREATE UNIQUE INDEX pages_k ON pages (slug) INCLUDE (title, views)",
            "CREATE UNIQUE INDEX pages_k ON pages (slug DESC)",
            "CREATE UNIQUE INDEX pages_k ON pages (slug text_pattern_ops)",
            "ALTER TABLE pages ALTER COLUMN slug TYPE text COLLATE \"C\"; \
             CREATE UNIQUE INDEX pages_k ON pages (slug)",
        ];
        if version >= 150000 {
            shapes.push("CREATE UNIQUE INDEX pages_k ON pages (slug) NULLS NOT DISTINCT");
        }
        for (n, shape) in shapes.into_iter().enumerate() {
            replace_natural_key::<Page>(&mut db, shape).await;
            let slug = format!("b{n}");
            accepts(&mut db, &page(&slug, 1), &page(&slug, 2)).await;
            db.run("DROP INDEX pages_k; ALTER TABLE pages ADD CONSTRAINT pages_idem_natural_key UNIQUE (slug)").await;
        }
    }
}

/// A table found through the search path in another schema than the first.
#[tokio::test]
async fn a_postgres_table_in_another_schema_of_the_search_path_is_checked_there() {
    for mut db in backends_of("search_path", &[Kind::Postgres]).await {
        let Sql::Postgres { client, .. } = &db else {
            continue;
        };
        let own: String = client
            .query_one("SELECT current_schema()::text", &[])
            .await
            .unwrap()
            .get(0);
        let other = format!("{own}_other");
        db.run(&format!(
            "DROP SCHEMA IF EXISTS {other} CASCADE; CREATE SCHEMA {other}; \
             SET search_path = {own}, {other}; SET search_path = {other}"
        ))
        .await;
        seeded(&mut db, &[page("a", 1)]).await;
        db.run(&format!("SET search_path = {own}, {other}")).await;
        // Not ensure_table, which makes the table in the first schema of the search path.
        accepted_writes(&mut db, &page("b", 1), &page("b", 2)).await;
        db.run("ALTER TABLE pages DROP CONSTRAINT pages_idem_natural_key")
            .await;
        refused_then_fixed(&mut db, &page("c", 1), &[NO_NATURAL_KEY], false).await;
        let Sql::Postgres { client, .. } = &db else {
            unreachable!()
        };
        let found: i64 = client
            .query_one(&format!("SELECT count(*) FROM {other}.pages"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(found, 3, "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// Refused shapes, and their fixes

/// A unique index that holds the natural key and more, or only part of it, or none.
#[tokio::test]
async fn a_unique_index_on_more_or_less_than_the_natural_key_is_refused_until_fixed() {
    for mut db in backends("more_or_less").await {
        seeded(&mut db, &[page("a", 1)]).await;
        let (t, slug, title) = (db.q("pages"), db.q("slug"), db.q("title"));
        replace_natural_key::<Page>(
            &mut db,
            &format!("CREATE UNIQUE INDEX pages_more ON {t} ({slug}, {title})"),
        )
        .await;
        refuses_then_fixed(&mut db, &page("a", 2), &[NO_NATURAL_KEY, "(slug)"]).await;

        seeded(&mut db, &[pair("a", "en")]).await;
        let (t, slug) = (db.q("pairs"), db.q("slug"));
        replace_natural_key::<Pair>(
            &mut db,
            &format!("CREATE UNIQUE INDEX pairs_less ON {t} ({slug})"),
        )
        .await;
        refuses_then_fixed(
            &mut db,
            &Pair {
                title: "new".into(),
                ..pair("a", "en")
            },
            &[NO_NATURAL_KEY, "lang"],
        )
        .await;

        seeded(&mut db, &[camel("a", 1)]).await;
        replace_natural_key::<CamelPage>(&mut db, "").await;
        refuses_then_fixed(
            &mut db,
            &camel("b", 1),
            &[NO_NATURAL_KEY, "pageSlug", "siteId"],
        )
        .await;
    }
}

/// A unique index with a predicate, or on an expression, or on a prefix, does not hold every
/// row's whole key.
#[tokio::test]
async fn a_partial_expression_or_prefix_unique_index_is_refused_until_fixed() {
    for mut db in backends("partial").await {
        seeded(&mut db, &[page("a", 1)]).await;
        let (t, slug, views) = (db.q("pages"), db.q("slug"), db.q("views"));
        let shapes = match db.kind() {
            Kind::Mariadb => vec![format!(
                "CREATE UNIQUE INDEX pages_prefix ON {t} ({slug}(10))"
            )],
            _ => vec![
                format!("CREATE UNIQUE INDEX pages_partial ON {t} ({slug}) WHERE {views} > 0"),
                format!("CREATE UNIQUE INDEX pages_lower ON {t} (lower({slug}))"),
            ],
        };
        for (n, shape) in shapes.iter().enumerate() {
            replace_natural_key::<Page>(&mut db, shape).await;
            let doc = page("a", 10 + n as i64);
            refuses_then_fixed(&mut db, &doc, &[NO_NATURAL_KEY]).await;
        }
    }
}

/// [`a_partial_expression_or_prefix_unique_index_is_refused_until_fixed`] and an index on the key
/// and more, each under the name idem gives the natural key's constraint (a migration that made
/// it anew under the same name): the fix must not collide with it.
#[tokio::test]
async fn a_non_counting_index_under_idems_own_name_is_refused_until_fixed() {
    // A table of its own for each shape: the first one's fix adds the key's constraint under
    // another name, which the second shape's start would not find to drop.
    for n in 0..2 {
        for mut db in backends(&format!("own_name_{n}")).await {
            seeded(&mut db, &[page("a", 1)]).await;
            let (t, slug, title, views) =
                (db.q("pages"), db.q("slug"), db.q("title"), db.q("views"));
            let name = db.q("pages_idem_natural_key");
            let shapes = match db.kind() {
                Kind::Mariadb => [
                    format!("CREATE UNIQUE INDEX {name} ON {t} ({slug}(10))"),
                    format!("CREATE UNIQUE INDEX {name} ON {t} ({slug}, {title}(10))"),
                ],
                _ => [
                    format!("CREATE UNIQUE INDEX {name} ON {t} ({slug}) WHERE {views} > 0"),
                    format!("CREATE UNIQUE INDEX {name} ON {t} ({slug}, {title})"),
                ],
            };
            replace_natural_key::<Page>(&mut db, &shapes[n]).await;
            refuses_then_fixed(&mut db, &page("a", 10 + n as i64), &[NO_NATURAL_KEY]).await;
        }
    }
}

/// PostgreSQL: in place of the natural key's unique constraint, an exclusion constraint on it,
/// which `ON CONFLICT DO UPDATE` cannot use.
#[tokio::test]
async fn a_postgres_exclusion_constraint_on_the_natural_key_is_refused_until_fixed() {
    for mut db in backends_of("pg_exclusion", &[Kind::Postgres]).await {
        seeded(&mut db, &[page("a", 1)]).await;
        let excluded =
            "ALTER TABLE pages ADD CONSTRAINT pages_excluded EXCLUDE USING btree (slug WITH =)";
        replace_natural_key::<Page>(&mut db, excluded).await;
        refuses_then_fixed(&mut db, &page("a", 2), &[NO_NATURAL_KEY]).await;
    }
}

/// PostgreSQL: in place of the natural key's unique constraint, the invalid unique index a
/// failed `CREATE UNIQUE INDEX CONCURRENTLY` leaves, which enforces nothing and `ON CONFLICT`
/// ignores.
#[tokio::test]
async fn a_postgres_invalid_unique_index_on_the_natural_key_is_refused_until_fixed() {
    for mut db in backends_of("pg_invalid", &[Kind::Postgres]).await {
        seeded(&mut db, &[page("a", 1)]).await;
        replace_natural_key::<Page>(&mut db, "INSERT INTO pages (_id, slug) VALUES ('dup', 'a')")
            .await;
        let failed = db
            .try_run("CREATE UNIQUE INDEX CONCURRENTLY pages_k ON pages (slug)")
            .await;
        assert!(failed.is_err(), "{db}: {failed:?}");
        db.run("DELETE FROM pages WHERE _id = 'dup'").await;
        let Sql::Postgres { client, .. } = &db else {
            unreachable!()
        };
        let valid: bool = client
            .query_one(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = 'pages_k'::regclass",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!valid, "{db}");
        refuses_then_fixed(&mut db, &page("a", 3), &[NO_NATURAL_KEY]).await;
    }
}

/// PostgreSQL: a key constraint whose uniqueness waits for the commit.
#[tokio::test]
async fn a_deferrable_key_constraint_is_refused_until_fixed() {
    for mut db in backends_of("deferrable", &[Kind::Postgres]).await {
        seeded(&mut db, &[page("a", 1)]).await;
        replace_natural_key::<Page>(&mut db, "ALTER TABLE pages ADD CONSTRAINT pages_later UNIQUE (slug) DEFERRABLE INITIALLY DEFERRED").await;
        refuses_then_fixed(&mut db, &page("a", 2), &["DEFERRABLE", "pages_later"]).await;
        db.run("ALTER TABLE pages DROP CONSTRAINT pages_pkey, ADD CONSTRAINT pages_pkey PRIMARY KEY (_id) DEFERRABLE INITIALLY IMMEDIATE").await;
        refuses_then_fixed(&mut db, &page("a", 3), &["DEFERRABLE", "pages_pkey"]).await;
    }
}

/// `_id` without a primary key or a unique index.
#[tokio::test]
async fn an_id_without_a_unique_index_is_refused_until_fixed() {
    for mut db in backends("id_bare").await {
        seeded(&mut db, &[page("a", 1), page("b", 1)]).await;
        let t = db.q("pages");
        match db.kind() {
            Kind::Postgres => db.run("ALTER TABLE pages DROP CONSTRAINT pages_pkey").await,
            Kind::Mariadb => {
                let drop = mariadb_drop(&db.create_sql::<Page>(), true);
                db.run(&format!("ALTER TABLE {t} {drop}")).await
            }
            Kind::Sqlite => {
                let create = db.create_sql::<Page>();
                let definition = definition_of(&db, &create, "_id").replace(" PRIMARY KEY", "");
                let create = redefined(&db, &create, "_id", &definition);
                db.remake("pages", &create).await
            }
        }
        refuses_then_fixed(
            &mut db,
            &page("a", 2),
            &["no primary key or unique index on \"_id\""],
        )
        .await;
    }
}

/// A column of the model missing: a field's, the content hash's, idem's applied operations', `_id`.
#[tokio::test]
async fn a_missing_column_is_refused_until_fixed() {
    for column in ["views", "sourceHash", "idemAppliedOps", "_id"] {
        for mut db in backends(&format!("missing_{}", column.to_lowercase())).await {
            seeded(&mut db, &[page("a", 1), page("b", 1)]).await;
            let (t, c) = (db.q("pages"), db.q(column));
            match (db.kind(), column) {
                (Kind::Sqlite, "_id") => {
                    let create = db.create_sql::<Page>();
                    let line = format!(
                        "    {} {},\n",
                        db.q("_id"),
                        definition_of(&db, &create, "_id")
                    );
                    db.remake("pages", &plain(&create.replacen(&line, "", 1)))
                        .await
                }
                _ => db.run(&format!("ALTER TABLE {t} DROP COLUMN {c}")).await,
            }
            let named = format!("column {column:?} is missing");
            if column == "_id" {
                // The rows stored have no id until adopt gives them theirs.
                refuses_then_fixed(&mut db, &page("c", 1), &[&named]).await;
                adopted_ids(&mut db, &["a", "b"]).await;
            } else {
                refuses_then_fixed(&mut db, &page("a", 2), &[&named]).await;
            }
            // The other rows, stored before, are written again too.
            for doc in [page("a", 3), page("b", 3)] {
                let outcome = db
                    .upsert(&doc)
                    .await
                    .unwrap_or_else(|error| panic!("{db}: {error}"));
                assert_eq!(outcome, Outcome::Updated, "{db}: {column}");
                assert_eq!(db.get(&doc).await.unwrap(), Some(doc), "{db}");
            }
            assert_eq!(
                db.upsert(&page("d", 2)).await.unwrap(),
                Outcome::Inserted,
                "{db}: {column}"
            );
        }
    }
}

/// The rows of `pages` under the keys `without` have no `_id`: the audit names each where it
/// is, without an SQL error; `adopt` gives them theirs, after which the audit is clean.
async fn adopted_ids(db: &mut Sql, without: &[&str]) {
    let report = db.audit::<Page>().await;
    let mut shown: Vec<String> = (report.legacy_ids.samples.iter())
        .map(|sample| sample.id.clone())
        .collect();
    shown.sort();
    let expected: Vec<String> = (without.iter())
        .map(|slug| match db.kind() {
            Kind::Postgres => "(no _id, at ctid (".to_owned(),
            _ => format!("(no _id, at natural key [\"{slug}\"])"),
        })
        .collect();
    assert_eq!(shown.len(), expected.len(), "{db}: {report}");
    for (shown, expected) in shown.iter().zip(&expected) {
        assert!(
            shown.starts_with(expected),
            "{db}: {shown} is not {expected}: {report}"
        );
    }
    assert_eq!(
        report.legacy_ids.count,
        without.len() as u64,
        "{db}: {report}"
    );
    assert_eq!(db.adopt::<Page>().await, without.len() as u64, "{db}");
    let report = db.audit::<Page>().await;
    assert!(report.is_clean(), "{db}: {report}");
}

/// The column of the op ids `apply_once` records, missing: once its fix added it, an op is
/// applied once, to a row stored before (whose column the fix left empty) as to a new one.
#[tokio::test]
async fn a_missing_applied_ops_column_is_refused_until_fixed_and_ops_apply_once() {
    for mut db in backends("applied_ops").await {
        seeded(&mut db, &[wallet("a")]).await;
        let (t, c) = (db.q("wallets"), db.q("idemAppliedOps"));
        db.run(&format!("ALTER TABLE {t} DROP COLUMN {c}")).await;
        refuses_then_fixed(
            &mut db,
            &wallet("b"),
            &["column \"idemAppliedOps\" is missing"],
        )
        .await;
        for owner in ["a", "b"] {
            let doc = wallet(owner);
            for expected in [Applied::Applied, Applied::AlreadyApplied] {
                let applied = db
                    .apply_once(&doc, "credit-1", &[Change::add("balance", 5)])
                    .await;
                let applied = applied.unwrap_or_else(|error| panic!("{db}: {owner}: {error}"));
                assert_eq!(applied, expected, "{db}: {owner}");
            }
            let stored = db.get(&doc).await.unwrap().expect("stored");
            assert_eq!(stored.balance, 5, "{db}: {owner}");
        }
    }
}

/// The table missing: its fix is the `CREATE TABLE` statement.
#[tokio::test]
async fn a_missing_table_is_refused_until_made() {
    for mut db in backends("missing_table").await {
        let doc = camel("a", 1);
        db.forget();
        let error = db.upsert(&doc).await.unwrap_err();
        let problem = mismatch(&error)
            .unwrap_or_else(|| panic!("{db}: {error:?}"))
            .to_owned();
        assert!(problem.contains("does not exist"), "{db}: {problem}");
        db.apply_fix::<CamelPage>(&problem).await;
        assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Inserted, "{db}");
    }
}

/// A key column (or a key's index) comparing text in a collation under which different keys
/// are equal: SQLite's `NOCASE` and `RTRIM`; MariaDB's `utf8mb4_general_ci`, and `utf8mb4_bin`,
/// which ignores trailing spaces.
#[tokio::test]
async fn a_key_column_in_a_loose_collation_is_refused_until_fixed() {
    for mut db in backends("loose").await {
        seeded(&mut db, &[page("a", 1)]).await;
        let create = db.create_sql::<Page>();
        let t = db.q("pages");
        let mut views = 1;
        let loose: &[(&str, &str)] = match db.kind() {
            Kind::Sqlite => &[("slug", "NOCASE"), ("_id", "NOCASE"), ("slug", "RTRIM")],
            Kind::Mariadb => &[
                ("slug", "utf8mb4_general_ci"),
                ("slug", "utf8mb4_bin"),
                ("_id", "utf8mb4_bin"),
            ],
            Kind::Postgres => &[],
        };
        for (column, collation) in loose {
            let definition = definition_of(&db, &create, column);
            match db.kind() {
                Kind::Sqlite => {
                    let create = redefined(
                        &db,
                        &create,
                        column,
                        &format!("{definition} COLLATE {collation}"),
                    );
                    db.remake("pages", &create).await;
                }
                _ => {
                    let definition = definition.replace("utf8mb4_nopad_bin", collation);
                    assert!(definition.contains(collation), "{definition}");
                    db.run(&format!(
                        "ALTER TABLE {t} MODIFY {} {definition}",
                        db.q(column)
                    ))
                    .await;
                }
            }
            views += 1;
            refuses_then_fixed(
                &mut db,
                &page("a", views),
                &[&format!("{column:?}"), collation],
            )
            .await;
        }
        if db.kind() == Kind::Sqlite {
            replace_natural_key::<Page>(
                &mut db,
                "CREATE UNIQUE INDEX pages_nocase ON pages (slug COLLATE NOCASE)",
            )
            .await;
            refuses_then_fixed(
                &mut db,
                &page("a", 10),
                &["pages_nocase", "NOCASE", "DROP INDEX"],
            )
            .await;
        }
    }
}

/// The collation PostgreSQL 12+ makes with ICU that is not deterministic, where the server has
/// ICU: `None` where it has not.
async fn case_insensitive_collation(db: &mut Sql) -> Option<&'static str> {
    let made = db
        .try_run(
            "CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2', \
             deterministic = false)",
        )
        .await;
    match made {
        Ok(()) => Some("case_insensitive"),
        Err(error) => {
            eprintln!("{db}: no ICU collation, not tested: {error}");
            None
        }
    }
}

/// PostgreSQL: a key column in a nondeterministic collation.
#[tokio::test]
async fn a_postgres_key_column_in_a_nondeterministic_collation_is_refused_until_fixed() {
    for mut db in backends_of("pg_icu", &[Kind::Postgres]).await {
        let Some(collation) = case_insensitive_collation(&mut db).await else {
            continue;
        };
        seeded(&mut db, &[page("a", 1)]).await;
        for (n, column) in ["slug", "_id"].into_iter().enumerate() {
            db.run(&format!(
                "ALTER TABLE pages ALTER COLUMN \"{column}\" TYPE text COLLATE {collation}"
            ))
            .await;
            refuses_then_fixed(
                &mut db,
                &page("a", 2 + n as i64),
                &[&format!("{column:?}"), "nondeterministic", collation],
            )
            .await;
        }
    }
}

/// PostgreSQL: the natural key's only unique index compares the key in a nondeterministic
/// collation of its own, not the column's.
#[tokio::test]
async fn a_postgres_natural_key_index_in_a_nondeterministic_collation_is_refused_until_fixed() {
    for mut db in backends_of("pg_icu_index", &[Kind::Postgres]).await {
        let Some(collation) = case_insensitive_collation(&mut db).await else {
            continue;
        };
        seeded(&mut db, &[page("a", 1)]).await;
        replace_natural_key::<Page>(
            &mut db,
            &format!("CREATE UNIQUE INDEX pages_ci ON pages (slug COLLATE {collation})"),
        )
        .await;
        refuses_then_fixed(&mut db, &page("a", 2), &["nondeterministic", collation]).await;
    }
}

/// Alters `column` of `T`'s table to the type `sql_type` (PostgreSQL's `USING` where it needs
/// one; SQLite: the table made anew).
async fn retyped<T: Idempotent>(db: &mut Sql, column: &str, sql_type: &str, using: &str) {
    let table = T::MODEL.collection();
    let (t, c) = (db.q(table), db.q(column));
    match db.kind() {
        Kind::Postgres => {
            db.run(&format!(
                "ALTER TABLE {t} ALTER COLUMN {c} TYPE {sql_type} USING {using}"
            ))
            .await
        }
        Kind::Mariadb => {
            db.run(&format!("ALTER TABLE {t} MODIFY {c} {sql_type}"))
                .await
        }
        Kind::Sqlite => {
            let create = redefined(db, &db.create_sql::<T>(), column, sql_type);
            db.remake(table, &create).await
        }
    }
}

/// The column types of [`a_column_of_another_type_is_refused`], per database: an integer's
/// column as text, a text's as an integer.
fn other_types(kind: Kind) -> [(&'static str, &'static str, &'static str); 2] {
    match kind {
        Kind::Postgres => [
            ("views", "text", "views::text"),
            ("title", "bigint", "length(title)"),
        ],
        Kind::Sqlite => [("views", "TEXT", ""), ("title", "INTEGER", "")],
        Kind::Mariadb => [("views", "LONGTEXT", ""), ("title", "BIGINT", "")],
    }
}

/// A column of another type than the model's: refused, naming it, the type found and the type
/// expected.
#[tokio::test]
async fn a_column_of_another_type_is_refused() {
    for mut db in backends("retyped").await {
        for (n, (column, sql_type, using)) in other_types(db.kind()).into_iter().enumerate() {
            db.run("DROP TABLE IF EXISTS pages").await;
            // No rows: a text column's values may not be integers.
            db.ensure_table::<Page>().await.unwrap();
            retyped::<Page>(&mut db, column, sql_type, using).await;
            let found = format!("column {column:?} is {}", sql_type.to_lowercase());
            let named = format!("column {column:?} is ");
            let problems =
                refused(&mut db, &page("a", n as i64), &[&named, "expected"], true).await;
            assert!(
                problems[0].to_lowercase().starts_with(&found),
                "{db}: {problems:?}"
            );
            if db.kind() == Kind::Mariadb {
                fixed(&mut db, &page("a", n as i64), &problems).await;
            }
        }
    }
}

/// [`a_column_of_another_type_is_refused`], then fixed by the statements the problems name.
#[tokio::test]
async fn a_column_of_another_type_is_refused_until_fixed() {
    for mut db in backends("retyped_fixed").await {
        for (n, (column, sql_type, using)) in other_types(db.kind()).into_iter().enumerate() {
            db.run("DROP TABLE IF EXISTS pages").await;
            db.ensure_table::<Page>().await.unwrap();
            retyped::<Page>(&mut db, column, sql_type, using).await;
            refuses_then_fixed(&mut db, &page("a", n as i64), &[column]).await;
        }
    }
}

/// Names that need quoting in statements and in the arrays PostgreSQL's catalog reads return:
/// idem's own table is accepted, and refused without its natural key until fixed; through
/// tokio-postgres and sqlx alike.
#[tokio::test]
async fn odd_names_are_read_and_fixed_quoted() {
    for mut db in backends("odd").await {
        let changed = odd("a", "new");
        seeded(&mut db, &[odd("a", "old")]).await;
        accepts(&mut db, &odd("b", "old"), &odd("b", "new")).await;
        if let Sql::Postgres { client, label, .. } = &db {
            let schema: String = client
                .query_one("SELECT current_schema()::text", &[])
                .await
                .unwrap()
                .get(0);
            let uri = (postgres_servers().into_iter())
                .find(|(server, _)| server == label)
                .expect("the server")
                .1;
            let mut connection = sqlx_connection(&uri, &schema).await;
            let store = idem_core::postgres::Store::new();
            assert_eq!(
                store
                    .upsert(&mut connection, &odd("c", "old"))
                    .await
                    .unwrap(),
                Outcome::Inserted,
                "{db} through sqlx"
            );
            assert_eq!(
                store
                    .upsert(&mut connection, &odd("c", "new"))
                    .await
                    .unwrap(),
                Outcome::Updated,
                "{db} through sqlx"
            );
        }
        replace_natural_key::<Odd>(&mut db, "").await;
        refuses_then_fixed(&mut db, &changed, &[NO_NATURAL_KEY]).await;
    }
}

/// A natural key of a column whose name holds a comma: idem's own table is accepted, and refused
/// without its natural key until fixed. MariaDB: [`mariadb_a_key_column_named_with_a_comma_is_accepted`].
#[tokio::test]
async fn a_key_column_named_with_a_comma_is_accepted() {
    for mut db in backends_of("comma", &[Kind::Postgres, Kind::Sqlite]).await {
        seeded(&mut db, &[comma("a", "old")]).await;
        accepts(&mut db, &comma("b", "old"), &comma("b", "new")).await;
        replace_natural_key::<Comma>(&mut db, "").await;
        refuses_then_fixed(&mut db, &comma("a", "new"), &[NO_NATURAL_KEY]).await;
    }
}

/// [`a_key_column_named_with_a_comma_is_accepted`] on MariaDB.
#[tokio::test]
async fn mariadb_a_key_column_named_with_a_comma_is_accepted() {
    for mut db in backends_of("comma_maria", &[Kind::Mariadb]).await {
        seeded(&mut db, &[comma("a", "old")]).await;
        accepts(&mut db, &comma("b", "old"), &comma("b", "new")).await;
        replace_natural_key::<Comma>(&mut db, "").await;
        refuses_then_fixed(&mut db, &comma("a", "new"), &[NO_NATURAL_KEY]).await;
    }
}

/// Mixed-case names: a missing column's and a missing key's fixes quote them; MariaDB, which
/// compares column names without case, accepts them in lower case.
#[tokio::test]
async fn mixed_case_names_are_refused_and_fixed_quoted() {
    for mut db in backends("camel").await {
        seeded(&mut db, &[camel("a", 1)]).await;
        let (t, c) = (db.q("CamelPages"), db.q("pageTitle"));
        db.run(&format!("ALTER TABLE {t} DROP COLUMN {c}")).await;
        let changed = CamelPage {
            page_title: "new".into(),
            ..camel("a", 1)
        };
        refuses_then_fixed(&mut db, &changed, &["\"pageTitle\" is missing"]).await;
        if db.kind() == Kind::Mariadb {
            db.run("ALTER TABLE `CamelPages` RENAME COLUMN `pageSlug` TO `pageslug`, RENAME COLUMN `siteId` TO `SITEID`").await;
            accepts(
                &mut db,
                &camel("b", 1),
                &CamelPage {
                    page_title: "new".into(),
                    ..camel("b", 1)
                },
            )
            .await;
        }
    }
}

/// PostgreSQL: `ensure_table` with the table in a later schema of the search path than the
/// first finds it there, as every statement does, instead of making an empty one in the first.
#[tokio::test]
async fn postgres_ensure_table_uses_the_table_the_search_path_finds() {
    for mut db in backends_of("search_path_ensure", &[Kind::Postgres]).await {
        let Sql::Postgres { client, .. } = &db else {
            continue;
        };
        let own: String = client
            .query_one("SELECT current_schema()::text", &[])
            .await
            .unwrap()
            .get(0);
        let other = format!("{own}_other");
        db.run(&format!("DROP SCHEMA IF EXISTS {other} CASCADE; CREATE SCHEMA {other}; SET search_path = {other}")).await;
        seeded(&mut db, &[page("a", 1)]).await;
        db.run(&format!("SET search_path = {own}, {other}")).await;
        db.forget();
        db.ensure_table::<Page>().await.unwrap();
        assert_eq!(
            db.upsert(&page("a", 1)).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

/// Keys that differ only by trailing spaces are different documents on idem's own table.
#[tokio::test]
async fn keys_differing_by_trailing_spaces_stay_apart() {
    for mut db in backends("trailing").await {
        db.ensure_table::<Page>().await.unwrap();
        for slug in ["x", "x "] {
            assert_eq!(
                db.upsert(&page(slug, 1)).await.unwrap(),
                Outcome::Inserted,
                "{db}"
            );
        }
        reads_apart(&mut db).await;
    }
}

/// Pages `x` and `x ` each read back as written.
async fn reads_apart(db: &mut Sql) {
    for slug in ["x", "x "] {
        assert_eq!(
            db.get(&page(slug, 1)).await.unwrap(),
            Some(page(slug, 1)),
            "{db}"
        );
    }
}

/// MariaDB: a `CHAR` key column drops a key's trailing spaces on reading: the check refuses it,
/// or (were it accepted) `x` and `x ` must still be two documents.
#[tokio::test]
async fn a_mariadb_char_key_column_keeps_keys_apart_or_is_refused() {
    for mut db in backends_of("char_key", &[Kind::Mariadb]).await {
        db.ensure_table::<Page>().await.unwrap();
        db.run("ALTER TABLE pages MODIFY slug CHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL").await;
        db.forget();
        match db.upsert(&page("x", 1)).await {
            Err(error) => assert!(mismatch(&error).is_some(), "{db}: {error}"),
            Ok(outcome) => {
                assert_eq!(outcome, Outcome::Inserted, "{db}");
                assert_eq!(
                    db.upsert(&page("x ", 1)).await.unwrap(),
                    Outcome::Inserted,
                    "{db}"
                );
                reads_apart(&mut db).await;
            }
        }
    }
}

/// SQLite: `Page`'s table with a conflict `clause` on `_id`'s primary key (`on_id`), or on the
/// natural key's constraint.
fn with_conflict_clause(db: &Sql, clause: &str, on_id: bool) -> String {
    let create = db.create_sql::<Page>();
    match on_id {
        true => redefined(
            db,
            &create,
            "_id",
            &format!("TEXT PRIMARY KEY{clause} NOT NULL"),
        ),
        false => plain(&create).replace("UNIQUE (\"slug\")", &format!("UNIQUE (\"slug\"){clause}")),
    }
}

/// SQLite: a key's constraint with a conflict clause (`ON CONFLICT REPLACE` or `IGNORE`), which
/// an insert that meets it but not the upsert's target obeys: a row another tool stored under
/// the document's id, or the document's natural key under another id, stays as it is, and the
/// write is refused as on idem's own table (or the check refuses the table).
#[tokio::test]
async fn sqlite_rows_in_the_way_stay_whatever_the_keys_conflict_clause() {
    for mut db in backends_of("conflict_clause", &[Kind::Sqlite]).await {
        let doc = page("c", 1);
        let id = doc.id().unwrap();
        // Another document under `doc`'s id; `doc`'s natural key under another id.
        let in_the_way = [
            format!("INSERT INTO pages (_id, slug, title, views) VALUES ('{id}', 'someone-else', 't', 1)"),
            "INSERT INTO pages (_id, slug, title, views) VALUES ('legacy', 'c', 't', 1)".to_owned(),
        ];
        for clause in ["", " ON CONFLICT REPLACE", " ON CONFLICT IGNORE"] {
            for on_id in [true, false] {
                for row in &in_the_way {
                    db.run("DROP TABLE IF EXISTS pages").await;
                    db.run(&with_conflict_clause(&db, clause, on_id)).await;
                    db.run(row).await;
                    db.forget();
                    let before = db.rows::<Page>().await;
                    let shape = format!(
                        "{db}: {clause:?} on the {}, {row}",
                        if on_id { "id" } else { "key" }
                    );
                    let result = db.upsert(&doc).await;
                    assert!(result.is_err(), "{shape}: {result:?}");
                    let result = db.upsert_batch_of_one(&doc).await;
                    assert!(result.is_err(), "{shape}: {result:?}");
                    assert_eq!(db.rows::<Page>().await, before, "{shape}");
                }
            }
        }
    }
}

/// SQLite: `_id`'s or the key's constraint with a conflict clause (`ON CONFLICT REPLACE` or
/// `IGNORE`), which an `UPDATE` obeys: the adoption of a row whose derived id another row holds
/// leaves both rows as they are and reports it (a REPLACE would delete the other row, an
/// IGNORE would leave the row unmoved, and either was reported moved).
#[tokio::test]
async fn sqlite_an_adoption_meeting_a_conflict_clause_loses_no_row() {
    for mut db in backends_of("adopt_conflict_clause", &[Kind::Sqlite]).await {
        let id = page("c", 1).id().unwrap();
        for clause in ["", " ON CONFLICT REPLACE", " ON CONFLICT IGNORE"] {
            for on_id in [true, false] {
                db.run("DROP TABLE IF EXISTS pages").await;
                db.run(&with_conflict_clause(&db, clause, on_id)).await;
                // `c` under a legacy id, and under the id `c` derives a row that cannot move
                // (its title is NULL, which no `Page` holds).
                db.run(
                    "INSERT INTO pages (_id, slug, title, views) VALUES ('legacy', 'c', 't', 1)",
                )
                .await;
                db.run(&format!(
                    "INSERT INTO pages (_id, slug, title, views) VALUES ('{id}', 'other', NULL, 2)"
                ))
                .await;
                db.forget();
                let before = db.rows::<Page>().await;
                let shape = format!(
                    "{db}: {clause:?} on the {}",
                    if on_id { "id" } else { "key" }
                );
                let report = db.adopt_report::<Page>().await;
                assert_eq!(report.moved.count, 0, "{shape}: {report:?}");
                assert_eq!(report.failed.count, 2, "{shape}: {report:?}");
                assert_eq!(db.rows::<Page>().await, before, "{shape}");
            }
        }
    }
}

/// The primary key on another set of columns than exactly `_id`: the natural key, or `_id`
/// with the natural key; `_id` then has a unique index (accepted) or none (refused, and the fix
/// must work beside the primary key there is).
#[tokio::test]
async fn a_primary_key_on_other_columns_than_the_id() {
    for mut db in backends("other_primary").await {
        let (t, id, slug) = (db.q("pages"), db.q("_id"), db.q("slug"));
        for (n, primary, id_unique) in [(0, "slug", true), (1, "_id, slug", true)] {
            let primary = primary.replace("_id", &id).replace("slug", &slug);
            db.run("DROP TABLE IF EXISTS pages").await;
            seeded(&mut db, &[page("a", 1)]).await;
            with_primary_key(&mut db, &primary).await;
            if id_unique {
                db.run(&format!("CREATE UNIQUE INDEX pages_id ON {t} ({id})"))
                    .await;
            }
            let slug = format!("b{n}");
            accepts(&mut db, &page(&slug, 1), &page(&slug, 2)).await;
        }
    }
}

/// Makes `primary` (quoted column names) the primary key of `pages` in place of `_id`.
async fn with_primary_key(db: &mut Sql, primary: &str) {
    let t = db.q("pages");
    match db.kind() {
        Kind::Postgres => {
            db.run(&format!(
                "ALTER TABLE {t} DROP CONSTRAINT pages_pkey, ADD PRIMARY KEY ({primary})"
            ))
            .await
        }
        Kind::Mariadb => {
            let create = db.create_sql::<Page>();
            let (id, key) = (mariadb_drop(&create, true), mariadb_drop(&create, false));
            db.run(&format!(
                "ALTER TABLE {t} {id}, {key}, ADD PRIMARY KEY ({primary}), \
                 ADD CONSTRAINT pages_idem_natural_key UNIQUE (slug)"
            ))
            .await
        }
        Kind::Sqlite => {
            let create = db.create_sql::<Page>();
            let definition = definition_of(db, &create, "_id").replace(" PRIMARY KEY", "");
            let create = redefined(db, &create, "_id", &definition).replacen(
                "\n    CONSTRAINT",
                &format!("\n    PRIMARY KEY ({primary}),\n    CONSTRAINT"),
                1,
            );
            db.remake("pages", &create).await
        }
    }
}

/// [`a_primary_key_on_other_columns_than_the_id`], `_id` without a unique index: its fix must
/// work beside the primary key the table has (a second `ADD PRIMARY KEY` would fail).
#[tokio::test]
async fn an_id_without_a_unique_index_beside_another_primary_key_is_refused_until_fixed() {
    for mut db in backends("other_primary_bare").await {
        let (id, slug) = (db.q("_id"), db.q("slug"));
        for (n, primary) in [(0, slug.clone()), (1, format!("{id}, {slug}"))] {
            db.run("DROP TABLE IF EXISTS pages").await;
            seeded(&mut db, &[page("a", 1)]).await;
            with_primary_key(&mut db, &primary).await;
            refuses_then_fixed(
                &mut db,
                &page("a", 2 + n),
                &["no primary key or unique index on \"_id\""],
            )
            .await;
        }
    }
}

/// Key columns of `varchar`, which compares and stores keys as `text` does (PostgreSQL without a
/// length; SQLite, which gives `VARCHAR(n)` text affinity and no limit).
#[tokio::test]
async fn a_varchar_key_column_is_accepted() {
    for mut db in backends_of("varchar", &[Kind::Postgres, Kind::Sqlite]).await {
        let sql_type = match db.kind() {
            Kind::Postgres => "varchar",
            Kind::Sqlite => "VARCHAR(100) NOT NULL",
            Kind::Mariadb => unreachable!(),
        };
        seeded(&mut db, &[page("a", 1)]).await;
        retyped::<Page>(&mut db, "slug", sql_type, "slug").await;
        accepts(&mut db, &page("b", 1), &page("b", 2)).await;
    }
}

/// A table lacking several things at once: the audit names every one, the write path the first,
/// and the fixes, applied together, make it pass.
#[tokio::test]
async fn several_problems_are_named_at_once_and_fixed_together() {
    for mut db in backends("several").await {
        seeded(&mut db, &[page("a", 1), page("b", 1)]).await;
        let (t, views) = (db.q("pages"), db.q("views"));
        match db.kind() {
            Kind::Postgres => {
                db.run("ALTER TABLE pages DROP CONSTRAINT pages_pkey, DROP CONSTRAINT pages_idem_natural_key")
                    .await
            }
            Kind::Mariadb => {
                let create = db.create_sql::<Page>();
                let (id, key) = (mariadb_drop(&create, true), mariadb_drop(&create, false));
                db.run(&format!("ALTER TABLE {t} {id}, {key}")).await
            }
            Kind::Sqlite => {
                let create = without_natural_key(&db.create_sql::<Page>());
                let definition = definition_of(&db, &create, "_id").replace(" PRIMARY KEY", "");
                let create = redefined(&db, &create, "_id", &definition);
                db.remake("pages", &create).await
            }
        }
        db.run(&format!("ALTER TABLE {t} DROP COLUMN {views}"))
            .await;
        let problems = refused(
            &mut db,
            &page("a", 2),
            &["column \"views\" is missing"],
            true,
        )
        .await;
        assert_eq!(problems.len(), 3, "{db}: {problems:#?}");
        assert!(
            problems[1].contains("no primary key or unique index on \"_id\""),
            "{db}: {problems:#?}"
        );
        assert!(problems[2].contains(NO_NATURAL_KEY), "{db}: {problems:#?}");
        fixed(&mut db, &page("a", 2), &problems).await;
        assert_eq!(
            db.upsert(&page("b", 2)).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
    }
}

/// What concerns only other columns than the keys, or not their comparison: a loose collation
/// on another column, an explicit byte-for-byte one on a key, a nullable key column.
#[tokio::test]
async fn what_concerns_only_other_columns_is_accepted() {
    for mut db in backends("other_columns").await {
        let create = db.create_sql::<Page>();
        let (t, title, slug) = (db.q("pages"), db.q("title"), db.q("slug"));
        match db.kind() {
            Kind::Sqlite => {
                let create = redefined(&db, &create, "title", "TEXT COLLATE NOCASE")
                    .replace("UNIQUE (\"slug\")", "UNIQUE (\"slug\" COLLATE BINARY)");
                db.run(&create).await;
            }
            Kind::Postgres => {
                db.run(&plain(&create)).await;
                db.run("ALTER TABLE pages ALTER COLUMN slug DROP NOT NULL, ALTER COLUMN title TYPE text COLLATE \"C\"").await;
            }
            Kind::Mariadb => {
                db.run(&plain(&create)).await;
                let key = definition_of(&db, &create, "slug").replace(" NOT NULL", "");
                db.run(&format!(
                    "ALTER TABLE {t} MODIFY {title} TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, \
                     MODIFY {slug} {key}"
                ))
                .await;
            }
        }
        accepts(&mut db, &page("a", 1), &page("a", 2)).await;
    }
}

/// SQLite: idem's table `WITHOUT ROWID` (its primary key `_id`, the table's order): accepted,
/// audited and adopted as the table `ensure_table` makes.
#[tokio::test]
async fn a_sqlite_table_without_rowid_is_accepted() {
    for mut db in backends_of("without_rowid", &[Kind::Sqlite]).await {
        let create = plain(&db.create_sql::<Page>());
        db.run(&format!("{create} WITHOUT ROWID")).await;
        accepts(&mut db, &page("a", 1), &page("a", 2)).await;
        assert_eq!(db.adopt::<Page>().await, 0, "{db}");
        assert!(db.audit::<Page>().await.is_clean(), "{db}");
    }
}

/// Makes `_id` of `T`'s table nullable and not the primary key, with a unique index on it if
/// `unique` (SQLite: the table made anew, `WITHOUT ROWID` with the natural key its primary key
/// if `without_rowid`; MariaDB: the natural key its primary key, as `ensure_table` makes it, if
/// `without_rowid`, else a unique constraint, as another tool's table has it).
async fn with_nullable_id<T: Idempotent>(db: &mut Sql, unique: bool, without_rowid: bool) {
    let create = db.create_sql::<T>();
    let table = T::MODEL.collection();
    let (t, id) = (db.q(table), db.q("_id"));
    match db.kind() {
        Kind::Postgres => {
            let pkey = db.q(&format!("{table}_pkey"));
            db.run(&format!(
                "ALTER TABLE {t} DROP CONSTRAINT {pkey}, ALTER COLUMN {id} DROP NOT NULL"
            ))
            .await
        }
        Kind::Mariadb => {
            let definition = definition_of(db, &create, "_id").replace(" NOT NULL", "");
            let keys: Vec<String> = (T::MODEL.natural_key_fields())
                .map(|field| db.q(field.stored_name()))
                .collect();
            let constraint = db.q(&format!("{table}_idem_natural_key"));
            let unique = match without_rowid || create.contains("PRIMARY KEY (`_id`)") {
                true => String::new(),
                false => format!(
                    ", DROP PRIMARY KEY, ADD CONSTRAINT {constraint} UNIQUE ({})",
                    keys.join(", ")
                ),
            };
            db.run(&format!(
                "ALTER TABLE {t} {}{unique}, MODIFY {id} {definition}",
                mariadb_drop(&create, true)
            ))
            .await
        }
        Kind::Sqlite => {
            let definition = definition_of(db, &create, "_id").replace(" PRIMARY KEY NOT NULL", "");
            let mut create = redefined(db, &create, "_id", &definition);
            if without_rowid {
                let key: Vec<String> = (T::MODEL.natural_key_fields())
                    .map(|field| db.q(field.stored_name()))
                    .collect();
                create = create.replacen(
                    "\n    CONSTRAINT",
                    &format!("\n    PRIMARY KEY ({}),\n    CONSTRAINT", key.join(", ")),
                    1,
                );
                create = format!("{} WITHOUT ROWID", create.trim_end().trim_end_matches(';'));
            }
            db.remake(table, &create).await;
            if without_rowid {
                assert!(db.try_run(&format!("SELECT rowid FROM {t}")).await.is_err());
            }
        }
    }
    if unique {
        let index = db.q(&format!("{table}_id"));
        db.run(&format!("CREATE UNIQUE INDEX {index} ON {t} ({id})"))
            .await;
    }
}

/// `_id` without a primary key, nullable, with a unique index, and rows stored without one
/// (SQLite and MariaDB: also in a table whose primary key is the natural key): accepted;
/// the audit names the rows where they are, `adopt` gives them their ids, and each is then
/// written as any other.
#[tokio::test]
async fn rows_without_an_id_in_a_nullable_unique_id_column_are_adopted() {
    for without_rowid in [false, true] {
        let kinds: &[Kind] = match without_rowid {
            false => &[Kind::Postgres, Kind::Sqlite, Kind::Mariadb],
            true => &[Kind::Sqlite, Kind::Mariadb],
        };
        for mut db in backends_of(&format!("nullable_id_{without_rowid}"), kinds).await {
            seeded(&mut db, &[page("a", 1), page("b", 1)]).await;
            with_nullable_id::<Page>(&mut db, true, without_rowid).await;
            let (t, id) = (db.q("pages"), db.q("_id"));
            db.run(&format!("UPDATE {t} SET {id} = NULL")).await;
            db.forget();
            assert_eq!(
                db.table_problems::<Page>().await,
                Vec::<String>::new(),
                "{db}"
            );
            adopted_ids(&mut db, &["a", "b"]).await;
            for doc in [page("a", 2), page("b", 2)] {
                assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Updated, "{db}");
                assert_eq!(db.get(&doc).await.unwrap(), Some(doc), "{db}");
            }
            accepts(&mut db, &page("c", 1), &page("c", 2)).await;
        }
    }
}

/// More rows without an `_id` than one page of `adopt` reads, under a natural key of two
/// columns (and one whose key has a NULL part, which no id can be derived for): `adopt` moves
/// every other, page after page in the key's order, and reports that one.
#[tokio::test]
async fn rows_without_an_id_under_a_two_column_key_are_adopted_page_after_page() {
    const ROWS: usize = 1_100;
    for without_rowid in [false, true] {
        let kinds: &[Kind] = match without_rowid {
            false => &[Kind::Postgres, Kind::Sqlite, Kind::Mariadb],
            true => &[Kind::Sqlite, Kind::Mariadb],
        };
        for mut db in backends_of(&format!("pages_of_pairs_{without_rowid}"), kinds).await {
            db.ensure_table::<Pair>().await.unwrap();
            let docs: Vec<Pair> = (0..ROWS)
                .map(|n| pair(&format!("s{}", n % 7), &format!("l{n}")))
                .collect();
            db.upsert_many(&docs).await.unwrap();
            with_nullable_id::<Pair>(&mut db, true, without_rowid).await;
            let (t, id) = (db.q("pairs"), db.q("_id"));
            db.run(&format!("UPDATE {t} SET {id} = NULL")).await;
            // A key with a NULL part (SQLite cannot drop a NOT NULL in place).
            let lang = db.q("lang");
            let nullable = match db.kind() {
                Kind::Postgres => Some(format!("ALTER COLUMN {lang} DROP NOT NULL")),
                Kind::Mariadb if !without_rowid => {
                    let create = db.create_sql::<Pair>();
                    let definition = definition_of(&db, &create, "lang").replace(" NOT NULL", "");
                    Some(format!("MODIFY {lang} {definition}"))
                }
                Kind::Sqlite | Kind::Mariadb => None,
            };
            if let Some(nullable) = &nullable {
                db.run(&format!(
                    "ALTER TABLE {t} {nullable}; INSERT INTO {t} (slug, title) VALUES ('s0', 'x')"
                ))
                .await;
            }
            let failed = u64::from(nullable.is_some());
            db.forget();
            let report = db.audit::<Pair>().await;
            assert_eq!(report.legacy_ids.count, ROWS as u64, "{db}: {report}");
            let report = db.adopt_report::<Pair>().await;
            assert_eq!(report.moved.count, ROWS as u64, "{db}: {report:?}");
            assert_eq!(report.failed.count, failed, "{db}: {report:?}");
            let report = db.audit::<Pair>().await;
            assert_eq!(report.clean, ROWS as u64, "{db}: {report}");
            for doc in &docs[..3] {
                assert_eq!(db.get(doc).await.unwrap().as_ref(), Some(doc), "{db}");
            }
        }
    }
}

/// `_id` nullable without a unique index, and rows stored without one: the fix of the index
/// works on those rows (a primary key would refuse their NULLs), and `adopt` then gives them
/// their ids.
#[tokio::test]
async fn rows_without_an_id_in_a_nullable_id_column_without_an_index_are_fixed_and_adopted() {
    for mut db in backends("nullable_id_bare").await {
        seeded(&mut db, &[page("a", 1), page("b", 1)]).await;
        with_nullable_id::<Page>(&mut db, false, false).await;
        let (t, id) = (db.q("pages"), db.q("_id"));
        db.run(&format!("UPDATE {t} SET {id} = NULL")).await;
        refuses_then_fixed(
            &mut db,
            &page("c", 1),
            &["no primary key or unique index on \"_id\""],
        )
        .await;
        adopted_ids(&mut db, &["a", "b"]).await;
        for doc in [page("a", 2), page("b", 2)] {
            assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Updated, "{db}");
        }
    }
}

/// A nullable `_id` beside another unique index: a write that meets another document's row
/// through that index is refused, and that row keeps its `_id`.
#[tokio::test]
async fn a_nullable_id_beside_another_unique_index_keeps_the_row_met() {
    for mut db in backends("nullable_id_other").await {
        seeded(&mut db, &[page("a", 1)]).await;
        with_nullable_id::<Page>(&mut db, true, false).await;
        let (t, title) = (db.q("pages"), db.q("title"));
        let title = match db.kind() {
            Kind::Mariadb => format!("{title}(100)"),
            _ => title,
        };
        db.run(&format!("CREATE UNIQUE INDEX pages_title ON {t} ({title})"))
            .await;
        db.forget();
        let before = db.rows::<Page>().await;
        let mut other = page("b", 1);
        other.title = page("a", 1).title;
        let outcome = db.upsert(&other).await;
        assert!(outcome.is_err(), "{db}: {outcome:?}");
        assert_eq!(db.rows::<Page>().await, before, "{db}");
        assert_eq!(
            db.get(&page("a", 1)).await.unwrap(),
            Some(page("a", 1)),
            "{db}"
        );
    }
}

/// A reading keyed by an integer, a boolean and a character: key parts that are no text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: i64,
    #[idem(key)]
    calibrated: bool,
    #[idem(key)]
    grade: char,
    value: f64,
}

fn reading(sensor: i64, calibrated: bool, value: f64) -> Reading {
    let grades = ['a', 'Z', 'é', '\''];
    Reading {
        sensor,
        calibrated,
        grade: grades[sensor.rem_euclid(4) as usize],
        value,
    }
}

/// Rows without an `_id` under a natural key of an integer, a boolean and a character (where
/// the rows are moved by their key, found by its values as the table stores them): the audit
/// counts them, `adopt` gives each its id, and each is then read and written as any other.
#[tokio::test]
async fn rows_without_an_id_under_a_key_of_numbers_booleans_and_characters_are_adopted() {
    const ROWS: i64 = 40;
    for mut db in backends("typed_key_rows").await {
        let docs: Vec<Reading> = (0..ROWS)
            .map(|n| reading(n - 20, n % 3 == 0, n as f64 / 4.0))
            .collect();
        seeded(&mut db, &docs).await;
        with_nullable_id::<Reading>(&mut db, true, false).await;
        let (t, id) = (db.q("readings"), db.q("_id"));
        db.run(&format!("UPDATE {t} SET {id} = NULL")).await;
        db.forget();
        let report = db.audit::<Reading>().await;
        assert_eq!(report.legacy_ids.count, ROWS as u64, "{db}: {report}");
        let report = db.adopt_report::<Reading>().await;
        assert_eq!(report.moved.count, ROWS as u64, "{db}: {report:?}");
        assert_eq!(report.failed.count, 0, "{db}: {report:?}");
        let report = db.audit::<Reading>().await;
        assert_eq!(report.clean, ROWS as u64, "{db}: {report}");
        for doc in [&docs[0], &docs[20], &docs[39]] {
            assert_eq!(db.get(doc).await.unwrap().as_ref(), Some(doc), "{db}");
            let changed = Reading {
                value: doc.value + 1.0,
                ..doc.clone()
            };
            assert_eq!(db.upsert(&changed).await.unwrap(), Outcome::Updated, "{db}");
            assert_eq!(db.get(doc).await.unwrap(), Some(changed), "{db}");
        }
    }
}
