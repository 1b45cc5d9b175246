//! The SQLite store, embedded: converging upserts guarded against orphaning writes, batch
//! upserts, deletions that stay deleted, derived sets and events recorded once, over the
//! caller's sqlx connection or transaction (`&mut SqliteConnection`; a `Transaction` and a
//! pooled connection dereference to one), so idem's writes commit or roll back with the
//! caller's.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # async fn run(post: Post) -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::sqlx::Connection;
//! let mut connection = idem_core::sqlx::SqliteConnection::connect("sqlite:posts.db?mode=rwc").await?;
//! let store = idem_core::sqlite::Store::new();
//! store.ensure_table::<Post>(&mut connection).await?;
//! let outcome = store.upsert(&mut connection, &post).await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! The columns of the PostgreSQL store's table ([`crate::postgres`]), with SQLite's types:
//! `TEXT`, `INTEGER`, `REAL`, and, named for what they hold, `BOOLEAN` (stored as `INTEGER` is)
//! and `JSON_TEXT` for nested values (stored as `TEXT` is); beside them `idemWrite`, the write
//! marker.
//!
//! # How a write tells an insert from an update
//!
//! SQLite has `RETURNING` but no system column saying whether a row was inserted or updated.
//! Every write statement sets `idemWrite` to a value made for it, one when it inserts and
//! another when it updates, and returns it: a row returned with the insert's value was
//! inserted by this statement. (It is the way for servers without `xmax`, such as CockroachDB
//! and YugabyteDB; the PostgreSQL store does not use it.)
//!
//! # Concurrency
//!
//! SQLite has one writer at a time. Each write is a savepoint (a transaction of its own outside
//! the caller's) whose first statement takes the write lock, so the rows it then reads are
//! those its guard saw, and racing writers on other connections to the same file converge as
//! on the servers. Waiting for the lock is the connection's busy timeout; a lock held past it is
//! an error whose [`is_retryable`](crate::Error::is_retryable) is true, never a wrong outcome.
//! Use WAL mode (`journal_mode=WAL`) so that readers do not block the writer.

mod audit;
mod collation;
mod driver;
mod effects;
mod errors;
mod read;
mod schema;
mod session;
mod table;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};

use serde::Serialize;
use sqlx::sqlite::{Sqlite, SqliteArguments};
use sqlx::SqliteConnection;
use tokio::sync::Mutex;

use crate::batch::BatchReport;
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::engine::by_id::{settle_by_id, ById};
use crate::engine::{self, WriteKind};
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::{Model, ID_FIELD, WRITE_MARKER_FIELD};
use crate::outcome::{Deletion, Outcome, Recorded};
use crate::sql::json;
use crate::sql::row::PreparedRow;
use crate::trace::{Call, CallKind};

pub use crate::sql::judge::AdoptOptions;
pub use errors::driver_error;
pub use session::Session;

use table::{quote, Table};

/// How many rows one batch statement carries at most, unless SQLite's limit of bound
/// parameters allows fewer.
pub const DEFAULT_BATCH_CHUNK: usize = 1000;

/// The tables a store checked, by name: one per type stored there.
type CheckedTables = HashMap<&'static str, Vec<Arc<Table>>>;

/// How many op ids `apply_once` keeps per row, unless set otherwise.
pub const DEFAULT_OP_WINDOW: usize = 1000;

/// Writes documents to SQLite tables, one per type; holds no connection. Clones share what
/// the store learned (the tables it checked).
#[derive(Clone, Debug)]
pub struct Store {
    tables: Arc<SyncMutex<CheckedTables>>,
    batch_chunk: usize,
    shortcut_min_docs: usize,
    op_window: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// A store with the default batch chunk.
    pub fn new() -> Self {
        Store {
            tables: Arc::default(),
            batch_chunk: DEFAULT_BATCH_CHUNK,
            shortcut_min_docs: crate::engine::batch::SHORTCUT_MIN_DOCS,
            op_window: DEFAULT_OP_WINDOW,
        }
    }

    /// This store writing through `connection`: what the derive's generated methods take
    /// (`post.upsert(&store.on(&mut connection))`), and the API every store shares
    /// ([`Session`]).
    pub fn on<'a>(&'a self, connection: &'a mut SqliteConnection) -> Session<'a> {
        Session::new(self, connection)
    }

    /// Keeps the latest `window` op ids per row (at least one): an operation retried after
    /// `window` others on the same row would be applied again.
    pub fn with_op_window(mut self, window: usize) -> Self {
        self.op_window = window.max(1);
        self
    }

    /// Sends batches `rows` rows per statement (at least one).
    pub fn with_batch_chunk(mut self, rows: usize) -> Self {
        self.batch_chunk = rows.max(1);
        self
    }

    /// For tests: a store of the same configuration that has learned nothing of its tables yet,
    /// as a new one would be, for a table dropped and made again behind its back. Not part of
    /// the stable API.
    #[doc(hidden)]
    pub fn unlearned(&self) -> Self {
        Store {
            tables: Arc::default(),
            ..self.clone()
        }
    }

    /// For tests: takes a batch's shortcuts (the lookup before a chunk's write, the plain
    /// insert of fresh rows) on chunks of `docs` documents or more (64 by default, below which
    /// they cost more than they save), so that they are tested on chunks of any size. Not part
    /// of the stable API.
    #[doc(hidden)]
    pub fn with_shortcuts_from(mut self, docs: usize) -> Self {
        self.shortcut_min_docs = docs.max(1);
        self
    }

    /// The `CREATE TABLE` statement of `T`'s table, for a migration.
    pub fn create_table_sql<T: Idempotent>() -> String {
        Table::of::<T>().create_sql()
    }

    /// Creates `T`'s table if it does not exist, then checks it as before a first write.
    pub async fn ensure_table<T: Idempotent>(
        &self,
        connection: &mut SqliteConnection,
    ) -> Result<(), Error> {
        let document = DocumentRef::collection(&T::MODEL);
        let collection = T::MODEL.collection();
        // Whether the statement below makes the table: `IF NOT EXISTS` does not say.
        crate::trace::round_trip("SELECT");
        let existed = sqlx::query("SELECT 1 FROM pragma_table_info(?1) LIMIT 1")
            .bind(collection)
            .fetch_optional(&mut *connection)
            .await
            .map_err(|source| errors::sqlite_error(&document, source))?
            .is_some();
        let sql = Self::create_table_sql::<T>();
        crate::trace::round_trip("CREATE TABLE");
        sqlx::query(statement(&sql))
            .execute(&mut *connection)
            .await
            .map_err(|source| errors::sqlite_error(&document, source))?;
        if !existed {
            crate::trace::table_created(collection);
        }
        self.forget_table(&T::MODEL);
        self.table::<T>(connection, &document).await.map(drop)
    }

    /// Writes `doc` under its derived id, converging under retries, replays and races, with the
    /// outcomes and refusals of every other store.
    pub async fn upsert<T>(
        &self,
        connection: &mut SqliteConnection,
        doc: &T,
    ) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Upsert, T::MODEL.collection(), || doc.id().ok());
        call.run_detached(async move {
            if T::MODEL.idempotency_key_field().is_some() {
                return self
                    .record(connection, doc)
                    .await
                    .map(|recorded| recorded.outcome);
            }
            let table = self.table::<T>(connection, &doc.document_ref()).await?;
            let row = PreparedRow::new(doc, &table)?;
            let connection = Mutex::new(connection);
            let driver = self.driver(&connection, &table);
            engine::settle_one(&driver, WriteKind::Upsert, &row).await
        })
        .await
    }

    /// Upserts a batch: each document gets the outcome that upserting the documents one by one,
    /// in input order, would give it; one statement per chunk of rows. A chunk of 64 rows or
    /// more is first read (while the last one was mostly stored as it came), so the rows stored
    /// unchanged settle with no write statement and no write lock.
    pub async fn upsert_many<T>(
        &self,
        connection: &mut SqliteConnection,
        docs: &[T],
    ) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::UpsertMany, T::MODEL.collection(), || None::<Id>);
        call.run_detached(async move {
            if T::MODEL.idempotency_key_field().is_some() {
                let mut outcomes = Vec::with_capacity(docs.len());
                for doc in docs {
                    outcomes.push(
                        self.record(connection, doc)
                            .await
                            .map(|recorded| recorded.outcome),
                    );
                }
                return Ok(BatchReport::new(outcomes, 0));
            }
            let collection = DocumentRef::collection(&T::MODEL);
            let table = self.table::<T>(connection, &collection).await?;
            let connection = Mutex::new(connection);
            engine::batch::upsert_many(&self.driver(&connection, &table), docs).await
        })
        .await
    }

    /// Marks `doc` deleted by storing its tombstone field (which must be `Some`); stores it
    /// deleted if it is not stored. `Deleted`, or `AlreadyDeleted` (the first marker stays).
    pub async fn delete<T>(
        &self,
        connection: &mut SqliteConnection,
        doc: &T,
    ) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Delete, T::MODEL.collection(), || doc.id().ok());
        call.run_detached(async move {
            let document = doc.document_ref();
            let tombstone = crate::engine::tombstone_field(&T::MODEL, &document)?;
            let table = self.table::<T>(connection, &document).await?;
            let row = PreparedRow::new(doc, &table)?;
            let marked = table
                .column_of(tombstone)
                .and_then(|index| row.value_of(&table, index))
                .is_some();
            if !marked {
                return Err(Error::new(
                    document,
                    ErrorKind::TombstoneNotSet {
                        field: tombstone.name(),
                    },
                ));
            }
            let connection = Mutex::new(connection);
            let driver = self.driver(&connection, &table);
            engine::settle_one(&driver, WriteKind::Delete, &row)
                .await
                .map(Deletion::of)
        })
        .await
    }

    /// Marks the row stored under `id` deleted with `marker`. `Deleted`, or `AlreadyDeleted`;
    /// [`ErrorKind::NotFound`] if no row has that id.
    pub async fn delete_by_id<T, M>(
        &self,
        connection: &mut SqliteConnection,
        id: Id,
        marker: &M,
    ) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        let call = Call::new(CallKind::DeleteById, T::MODEL.collection(), || Some(id));
        call.run_detached(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            let tombstone =
                crate::engine::tombstone_for(model, &T::stored_columns(), marker, &document)?;
            let table = self.table::<T>(connection, &document).await?;
            let marker = json::to_json(marker).map_err(|error| {
                Error::new(
                    document.clone(),
                    ErrorKind::Serialize {
                        message: error.message(),
                    },
                )
            })?;
            let column = table
                .column_of(tombstone)
                .map(|index| &table.columns[index]);
            let marker_text = match (column, &marker) {
                (Some(column), value) => crate::sql::row::column_text(column, Some(value))
                    .map_err(|expected| {
                        Error::new(
                            document.clone(),
                            ErrorKind::Serialize {
                                message: format!(
                                    "the marker {value} is not {expected}, which its column holds"
                                ),
                            },
                        )
                    })?,
                (None, value) => Some(value.to_string()),
            };
            let tomb = quote(tombstone.stored_name());
            let mark = format!(
                "UPDATE {table} SET {tomb} = ?2, {marker} = ?3 WHERE {id} = ?1 AND {tomb} IS NULL \
                 RETURNING 1",
                table = table.name(),
                marker = quote(WRITE_MARKER_FIELD),
                id = quote(ID_FIELD),
            );
            let look = format!(
                "SELECT {tomb} IS NOT NULL FROM {} WHERE {} = ?1",
                table.name(),
                quote(ID_FIELD)
            );
            let id_text = id.to_string();
            let shape = column.map_or(ColumnShape::Structured, |column| column.shape);
            let connection = Mutex::new(connection);
            settle_by_id(&document, || async {
                let mut connection = connection.lock().await;
                let connection: &mut SqliteConnection = &mut connection;
                driver::savepoint(connection, &document).await?;
                let answer = async {
                    crate::trace::round_trip("UPDATE");
                    let marked = bind_text(
                        sqlx::query(statement(&mark)).bind(&id_text),
                        shape,
                        marker_text.as_deref(),
                    )
                    .bind(format!("u{}", ulid::Ulid::generate()))
                    .fetch_optional(&mut *connection)
                    .await?;
                    if marked.is_some() {
                        return Ok(ById::Answered(Deletion::Deleted));
                    }
                    crate::trace::round_trip("SELECT");
                    let deleted: Option<bool> = sqlx::query_scalar(statement(&look))
                        .bind(&id_text)
                        .fetch_optional(&mut *connection)
                        .await?;
                    Ok(match deleted {
                        Some(true) => ById::Answered(Deletion::AlreadyDeleted),
                        // Unmarked, yet not updated: cannot be, as the lock is held; go again.
                        Some(false) => ById::Changed,
                        None => ById::Missing,
                    })
                }
                .await;
                driver::finish(connection, answer, &document).await
            })
            .await
        })
        .await
    }

    /// Inserts the members of a derived set that are not stored, reporting each member.
    pub async fn insert_new<T>(
        &self,
        connection: &mut SqliteConnection,
        members: &[T],
    ) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        let call = Call::new(CallKind::InsertNew, T::MODEL.collection(), || None::<Id>);
        call.run_detached(async move {
            let collection = DocumentRef::collection(&T::MODEL);
            let table = self.table::<T>(connection, &collection).await?;
            let connection = Mutex::new(connection);
            engine::insert::insert_new(&self.driver(&connection, &table), members).await
        })
        .await
    }

    /// Records an event (a type with an `#[idem(idempotency_key)]`) once under its key.
    pub async fn record<T>(
        &self,
        connection: &mut SqliteConnection,
        event: &T,
    ) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Record, T::MODEL.collection(), || None::<Id>);
        call.run_detached(async move {
            let model = &T::MODEL;
            let key_field = model
                .idempotency_key_field()
                .ok_or_else(|| Error::new(event.document_ref(), ErrorKind::NoDerivedId))?;
            crate::idempotent::idempotency_key(event)?;
            let table = self.table::<T>(connection, &event.document_ref()).await?;
            let id = Id::from(ulid::Ulid::generate());
            let row = PreparedRow::with_id(event, id, &table)?;
            let connection = Mutex::new(connection);
            engine::record::record(&self.driver(&connection, &table), &row, key_field).await
        })
        .await
    }

    fn driver<'a, 'c>(
        &'a self,
        connection: &'a Mutex<&'c mut SqliteConnection>,
        table: &'a Table,
    ) -> driver::SqliteDriver<'a, 'c> {
        driver::SqliteDriver {
            store: self,
            connection,
            table,
        }
    }

    /// The table of `T`, checked against the model before its first write.
    async fn table<T: Idempotent>(
        &self,
        connection: &mut SqliteConnection,
        document: &DocumentRef,
    ) -> Result<Arc<Table>, Error> {
        let model = &T::MODEL;
        let stored = T::stored_columns();
        let known = {
            let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
            tables.get(model.collection()).and_then(|tables| {
                tables
                    .iter()
                    .find(|table| table.is_of(model, &stored))
                    .cloned()
            })
        };
        if let Some(table) = known {
            return Ok(table);
        }
        let table = Arc::new(Table::of::<T>());
        schema::check_table(connection, &table, document).await?;
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables
            .entry(model.collection())
            .or_default()
            .push(table.clone());
        Ok(table)
    }

    fn forget_table(&self, model: &Model) {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables.remove(model.collection());
    }
}

/// A query with `text` bound as the value of a column of `shape`: an integer, a float, a
/// boolean or text, so that the column's affinity stores what serde wrote.
pub(super) fn bind_text<'q>(
    query: sqlx::query::Query<'q, Sqlite, SqliteArguments>,
    shape: ColumnShape,
    text: Option<&'q str>,
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    let Some(text) = text else {
        return query.bind(None::<&str>);
    };
    match shape {
        ColumnShape::Integer => match text.parse::<i64>() {
            Ok(number) => query.bind(number),
            Err(_) => query.bind(shared_text(text)),
        },
        ColumnShape::Float => match text.parse::<f64>() {
            Ok(number) if number.is_finite() => query.bind(number),
            // NaN and the infinities as their text, which REAL keeps as it is.
            _ => query.bind(shared_text(text)),
        },
        ColumnShape::Boolean => query.bind(text == "true"),
        _ => query.bind(shared_text(text)),
    }
}

/// `text` as sqlx's SQLite arguments hold it: sqlx binds a `&str` as a copy in a `String` in an
/// `Arc` (two allocations a value), an `Arc<str>` as it is (one, copied once).
pub(super) fn shared_text(text: &str) -> std::sync::Arc<str> {
    std::sync::Arc::from(text)
}

/// A query with `doc`'s values of the sent columns at `positions` bound in order.
pub(super) fn bind_row<'q>(
    mut query: sqlx::query::Query<'q, Sqlite, SqliteArguments>,
    table: &Table,
    doc: &'q PreparedRow,
    positions: &[usize],
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    for &position in positions {
        let column = &table.columns[table.sent[position]];
        let shape = match column.content {
            crate::sql::layout::Content::Stored(_) => column.shape,
            _ => ColumnShape::Text,
        };
        query = bind_text(query, shape, doc.sent_value(table, position));
    }
    query
}

/// A statement idem built: identifiers quoted, every value a bound parameter.
pub(super) fn statement(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    sqlx::AssertSqlSafe(sql)
}
