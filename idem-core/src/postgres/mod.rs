//! The PostgreSQL store: converging upserts guarded against orphaning writes, batch upserts,
//! deletions that stay deleted and derived sets, over the caller's client or transaction of
//! tokio-postgres (feature `postgres`) or sqlx (feature `sqlx-postgres`): the same statements,
//! the same table and the same answers through either.
//!
//! ```no_run
//! # use idem_core::Idempotent;
//! # #[derive(serde::Serialize, Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # async fn run(client: tokio_postgres::Client, post: Post) -> Result<(), idem_core::Error> {
//! let store = idem_core::postgres::Store::new();
//! store.ensure_table::<Post, _>(&client).await?;
//! let outcome = store.upsert(&client, &post).await?;
//! // Or inside the caller's transaction, with every other write of it:
//! // let tx = client.transaction().await?; store.upsert(&tx, &post).await?; tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! One column per stored field, under the name serde writes: `text`, `bigint`, `double
//! precision` and `boolean` for scalars, `jsonb` for nested structs, sequences and maps. Beside
//! them: `_id` (the derived id, primary key), the content hash, `idemFrozen` (digests of the
//! timestamp and frozen fields), `idemVersion` (the version's order key), `idemAppliedOps` and,
//! for a type with `#[serde(flatten)]` fields, `idemExtra` (their entries), with a unique
//! constraint on the natural key. [`Store::create_table_sql`] prints the DDL for a migration;
//! [`Store::ensure_table`] runs it. Before its first write to a table the store checks that
//! the table has every column with its type, a primary key on `_id` and a unique constraint on
//! the natural key, neither `DEFERRABLE`, and no nondeterministic collation on a key column, and
//! fails with [`ErrorKind::SchemaMismatch`] naming what is wrong otherwise. It checks the table each
//! client's search path leads to: every statement makes sure, in the same round trip, that its
//! table is one the store checked, so a client of another schema, or a table made again (or
//! rolled back with the transaction that made it), is checked before it is written or read. A
//! field stored under a name PostgreSQL would cut or keeps for a system column is refused
//! before a table is made.
//!
//! # How an upsert converges
//!
//! One statement: `INSERT … ON CONFLICT (natural key) DO UPDATE … WHERE <guard>`, whose guard
//! states the engine's verdict (not deleted; no frozen field changed; a strictly newer
//! version, or without versions another content hash). It returns each row it wrote, inserted or
//! updated as the server itself reports it (`old IS NULL` on PostgreSQL 18, `xmax = 0` before),
//! and, in the same statement, the stored state of each row the guard stopped, which is judged
//! for `Unchanged`, `Stale`, `Deleted` or a refusal. A row committed by a concurrent writer after
//! the statement's snapshot stops the write without showing its state; the statement then goes
//! again. A row stored by another tool (no digests) is compared here and replaced by a second
//! statement pinned to what was read.
//!
//! A batch is the same statement over many rows (`unnest` of one `text[]` per column), in
//! rounds that never hold one natural key twice, with the outcome each row would get if the
//! documents were upserted one by one. On a tokio-postgres `&Client`, outside a transaction, the
//! next chunk is sent while the last awaits its answer (each statement is its own transaction
//! there, so one that fails leaves the other as it would find it): its lookup goes at once, its
//! writes after the last chunk's, so rows are written in input order.
//!
//! # Transactions
//!
//! Every method takes a [`Connection`]: tokio-postgres's `&Client` (a pooled client dereferences
//! to one) or `&Transaction`, or sqlx's `&mut PgConnection`, `&mut PoolConnection<Postgres>` or
//! `&mut Transaction<Postgres>`, so idem's writes commit or roll back with the caller's. Inside a
//! transaction each write statement runs in a savepoint (in the statement's own round trip on
//! tokio-postgres, which pipelines; as two more round trips on sqlx, which does not), so a
//! statement the server refuses (a racing writer's row met on the primary key, another unique
//! constraint, a CHECK) is retried, or its batch split row by row, and the transaction stays
//! usable after every refusal idem reports: sixteen transactions racing one new row give one
//! `Inserted` and fifteen `Unchanged`, as outside a transaction. A transaction opened with a
//! plain `BEGIN` statement is not one idem can see; open it with the driver's transaction API.
//!
//! ```no_run
//! # #[cfg(feature = "sqlx-postgres")]
//! # async fn run(pool: idem_core::sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! # #[derive(serde::Serialize, idem_core::Idempotent)]
//! # struct Post { #[idem(key)] slug: String, title: String }
//! # let post = Post { slug: "hello".into(), title: "Hello".into() };
//! let store = idem_core::postgres::Store::new();
//! let mut tx = pool.begin().await?;
//! store.upsert(&mut tx, &post).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod adopt;
mod audit;
mod driver;
mod effects;
mod errors;
mod read;
mod schema;
mod session;
#[cfg(feature = "sqlx-postgres")]
mod sqlx_wire;
mod stored;
mod table;
#[cfg(feature = "postgres")]
mod tokio_wire;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

pub use crate::sql::judge::AdoptOptions;
use serde::Serialize;
pub use session::Session;
pub use wire::Connection;
use wire::{Param, PgCells, PgWire, Wire};

use crate::batch::BatchReport;
use crate::document::DocumentRef;
use crate::engine::by_id::{settle_by_id, ById};
use crate::engine::{self, WriteKind};
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD};
use crate::outcome::{Deletion, Outcome};
use crate::sql::json;
use crate::sql::row::{PreparedRow, StoredRow};
use crate::trace::{Call, CallKind};
use table::{sql_type, InsertedSignal, Table};

use errors::postgres_error;
use schema::{check_again, check_table, survey_table};
#[cfg(feature = "postgres")]
pub use tokio_wire::driver_error;

pub use crate::change::Change;
pub use crate::model::APPLIED_OPS_FIELD;

/// How many rows [`Store::upsert_many`] sends per statement by default; see
/// [`Store::with_batch_chunk`].
pub const DEFAULT_BATCH_CHUNK: usize = 1000;

/// How many op ids a row remembers by default; see [`Store::with_op_window`].
pub const DEFAULT_OP_WINDOW: usize = 1000;

/// SQLSTATE of a unique violation.
const UNIQUE_VIOLATION: &str = "23505";
/// SQLSTATE `duplicate_table`.
const DUPLICATE_TABLE: &str = "42P07";
/// SQLSTATE `duplicate_object`.
const DUPLICATE_OBJECT: &str = "42710";

/// A PostgreSQL database that idem writes to, through the client each call is given. Cheap to
/// clone; clones share what they learned of the server and its tables. Use one store per
/// server.
#[derive(Clone, Debug)]
pub struct Store {
    batch_chunk: usize,
    shortcut_min_docs: usize,
    pipelining: bool,
    op_window: usize,
    known: Arc<Mutex<Known>>,
}

/// What a store learned once: the server's inserted-row signal and each checked table.
#[derive(Debug, Default)]
struct Known {
    signal: Option<InsertedSignal>,
    /// By table name, one entry for each type stored there: two types on one table (a write
    /// model and a read model) each have their own columns and statements.
    tables: HashMap<&'static str, Vec<Arc<Table>>>,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

/// What one statement did to one row.
#[derive(Clone, Debug)]
enum RowState {
    /// Written: inserted, or updated.
    Written { inserted: bool },
    /// Stopped by the guard; the stored row met: under its id, else holding its natural key.
    Stopped(Box<StoredRow>),
    /// Stopped by a row the statement's snapshot does not show (committed meanwhile).
    Unseen,
}

impl Store {
    /// A store.
    pub fn new() -> Self {
        Store {
            batch_chunk: DEFAULT_BATCH_CHUNK,
            shortcut_min_docs: crate::engine::batch::SHORTCUT_MIN_DOCS,
            pipelining: true,
            op_window: DEFAULT_OP_WINDOW,
            known: Arc::default(),
        }
    }

    /// Sets how many rows [`upsert_many`](Store::upsert_many) sends per statement (at least
    /// one). Each statement carries one `text[]` parameter per column, so the number of bind
    /// parameters does not grow with the chunk.
    pub fn with_batch_chunk(mut self, rows: usize) -> Self {
        self.batch_chunk = rows.max(1);
        self
    }

    /// Sets whether [`upsert_many`](Store::upsert_many) on a tokio-postgres client outside a
    /// transaction sends a chunk's statement while the last chunk's awaits its answer (on by
    /// default), so that the server goes from one chunk to the next without waiting for the
    /// client; rows are written in input order either way. Turn it off behind a pooler in
    /// transaction mode that does not keep requests sent back to back on one server session:
    /// PgBouncer 1.18 was seen to split them, a message's first part going to one server
    /// session and the rest to another, which each refuse and close, and the call fails with
    /// a retryable error (its known issue with pipelining in transaction mode; any client
    /// shared by tasks pipelines too). Through sqlx and inside a transaction, each chunk waits
    /// for the last one regardless.
    pub fn with_pipelining(mut self, enabled: bool) -> Self {
        self.pipelining = enabled;
        self
    }

    /// For tests: a store of the same configuration that has learned nothing of its tables yet,
    /// as a new one would be, for a table dropped and made again behind its back. Not part of
    /// the stable API.
    #[doc(hidden)]
    pub fn unlearned(&self) -> Self {
        Store {
            known: Arc::default(),
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

    /// Sets how many op ids [`apply_once`](Store::apply_once) remembers per row (at least one).
    /// An operation retried after `window` newer operations were applied to the same row is no
    /// longer recognised and would apply again: choose a window larger than the operations a row
    /// receives while a client may still retry.
    pub fn with_op_window(mut self, window: usize) -> Self {
        self.op_window = window.max(1);
        self
    }

    /// The `CREATE TABLE` statement for `T`, for a migration file: the columns, their types and
    /// the unique constraint on the natural key.
    pub fn create_table_sql<T: Idempotent>() -> String {
        Table::of::<T>(InsertedSignal::Xmax).create_sql()
    }

    /// Creates `T`'s table if it does not exist, then checks it as every first write does.
    /// Idempotent.
    pub async fn ensure_table<T, C>(&self, client: C) -> Result<(), Error>
    where
        T: Idempotent,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let document = DocumentRef::collection(&T::MODEL);
        // Refused before anything is created: a table with a cut name would never match, and
        // one with a system column's name cannot be made.
        if let Some(problem) = Table::of::<T>(InsertedSignal::Xmax).unstorable_name() {
            return Err(Error::new(
                document,
                ErrorKind::SchemaMismatch {
                    collection: T::MODEL.collection().to_owned(),
                    problem,
                },
            ));
        }
        // Whether the statement below makes the table: `IF NOT EXISTS` does not say.
        crate::trace::round_trip("SELECT");
        let existed = !client
            .fetch_all(
                "SELECT 1 WHERE to_regclass(quote_ident($1)) IS NOT NULL",
                &[Param::Text(Some(T::MODEL.collection()))],
            )
            .await
            .map_err(|source| postgres_error(&document, source))?
            .is_empty();
        crate::trace::round_trip("CREATE TABLE");
        let created = client
            .execute(&Store::create_table_sql::<T>(), &[])
            .await
            .map(drop);
        self.forget_table(&T::MODEL);
        match created {
            Ok(()) => {
                if !existed {
                    crate::trace::table_created(T::MODEL.collection());
                }
                self.table::<T, _>(client, &document).await.map(drop)
            }
            // Another session created the table at the same moment: `IF NOT EXISTS` only sees
            // a table committed before the statement began, so the catalog refused this one.
            // The table the other made is checked as any other. Where the check fails (no such
            // table after all, another table's columns, the caller's transaction now aborted),
            // the refusal to create it is the error that says what happened.
            Err(source) if created_by_another_session(&source) => {
                let refusal = postgres_error(&document, source);
                match self.table::<T, _>(client, &document).await {
                    Ok(_) => Ok(()),
                    Err(_) => Err(refusal),
                }
            }
            Err(source) => Err(postgres_error(&document, source)),
        }
    }

    /// Writes `doc` under its derived id, converging under retries, replays and races: one
    /// statement for every outcome, and a second for a row another tool wrote. Refuses with
    /// [`ErrorKind::FrozenFieldChanged`] a write that would change a frozen field or a field feeding
    /// the id, and with [`ErrorKind::IdChanged`] one whose natural key is stored under another id
    /// for no reason a stored field shows; nothing is written then.
    pub async fn upsert<T, C>(&self, client: C, doc: &T) -> Result<Outcome, Error>
    where
        T: Idempotent + Serialize + Sync,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Upsert, T::MODEL.collection(), || doc.id().ok());
        call.run(async move {
            if T::MODEL.idempotency_key_field().is_some() {
                return self
                    .record(wire::Lent(client), doc)
                    .await
                    .map(|recorded| recorded.outcome);
            }
            let table = self.table::<T, _>(client, &doc.document_ref()).await?;
            let row = PreparedRow::new(doc, &table)?;
            let driver = self.driver(client, &table);
            engine::settle_one(&driver, WriteKind::Upsert, &row).await
        })
        .await
    }

    /// Upserts a batch: each document gets the outcome that upserting the documents one by one,
    /// in input order, would give it. Rows are sent [`with_batch_chunk`](Store::with_batch_chunk)
    /// at a time, one statement per chunk; a re-ingest of unchanged documents writes no row.
    /// A chunk of 64 rows or more is first looked up by its rows' ids, keys, hashes and
    /// version keys (while the last lookup found most rows unchanged), and only the rows not
    /// stored as they come are sent whole: an unchanged re-ingest sends none of its content.
    /// A refused document does not stop the others.
    pub async fn upsert_many<T, C>(&self, client: C, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::UpsertMany, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let collection = DocumentRef::collection(&T::MODEL);
            if T::MODEL.idempotency_key_field().is_some() {
                let mut outcomes = Vec::with_capacity(docs.len());
                for doc in docs {
                    outcomes.push(
                        self.record(wire::Lent(client), doc)
                            .await
                            .map(|recorded| recorded.outcome),
                    );
                }
                return Ok(BatchReport::new(outcomes, 0));
            }
            let table = self.table::<T, _>(client, &collection).await?;
            engine::batch::upsert_many(&self.driver(client, &table), docs).await
        })
        .await
    }

    /// Marks `doc` deleted by storing its tombstone field (which must be `Some`). Deleting twice
    /// keeps the first marker. A document not stored yet is stored deleted, so a later replay of
    /// its creation does not bring it back. Returns `Deleted`, or `AlreadyDeleted` if it already
    /// was.
    pub async fn delete<T, C>(&self, client: C, doc: &T) -> Result<Deletion, Error>
    where
        T: Idempotent + Serialize + Sync,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Delete, T::MODEL.collection(), || doc.id().ok());
        call.run(async move {
            let document = doc.document_ref();
            let tombstone = crate::engine::tombstone_field(&T::MODEL, &document)?;
            let table = self.table::<T, _>(client, &document).await?;
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
            let driver = self.driver(client, &table);
            engine::settle_one(&driver, WriteKind::Delete, &row)
                .await
                .map(Deletion::of)
        })
        .await
    }

    /// Marks the row stored under `id` deleted with `marker` (the value of its tombstone
    /// field). Returns `Deleted`, or `AlreadyDeleted` if it already was (the first marker
    /// stays); [`ErrorKind::NotFound`] if no row has that id. One statement.
    pub async fn delete_by_id<T, M, C>(
        &self,
        client: C,
        id: Id,
        marker: &M,
    ) -> Result<Deletion, Error>
    where
        T: Idempotent,
        M: Serialize + Sync,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::DeleteById, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            let tombstone =
                crate::engine::tombstone_for(model, &T::stored_columns(), marker, &document)?;
            let table = self.table::<T, _>(client, &document).await?;
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
            let (marker_text, sql_type) = match (column, &marker) {
                (Some(column), serde_json::Value::String(text)) if sql_type(column) == "text" => {
                    (text.clone(), "text")
                }
                (Some(column), other) => (other.to_string(), sql_type(column)),
                (None, other) => (other.to_string(), "jsonb"),
            };
            let sql = format!(
                "WITH marked AS (UPDATE {table} SET {tomb} = $2::text::{sql_type} \
                 WHERE {id} = $1 AND {tomb} IS NULL RETURNING 1) \
                 SELECT (SELECT count(*) FROM marked) AS marked, \
                 (SELECT {tomb} IS NOT NULL FROM {table} WHERE {id} = $1) AS deleted",
                table = table.name(),
                tomb = table::quote(tombstone.stored_name()),
                id = table::quote(ID_FIELD),
            );
            let id_text = id.to_string();
            let parameters = [Param::Text(Some(&id_text)), Param::Text(Some(&marker_text))];
            settle_by_id(&document, || async {
                crate::trace::round_trip("UPDATE");
                let row = client
                    .write(&sql, &parameters)
                    .await
                    .and_then(|rows| wire::one(rows, "UPDATE"))
                    .map_err(|source| postgres_error(&document, source))?;
                let marked = row.int8(0).unwrap_or(0);
                let deleted = row.flag(1);
                Ok(match (marked, deleted) {
                    (1.., _) => ById::Answered(Deletion::Deleted),
                    (_, Some(true)) => ById::Answered(Deletion::AlreadyDeleted),
                    // Unmarked in the statement's snapshot, yet not updated: a racing delete
                    // marked it after the snapshot (the update re-checks the newest version of
                    // the row, the read sees the snapshot). Going again sees the marker.
                    (_, Some(false)) => ById::Changed,
                    (_, None) => ById::Missing,
                })
            })
            .await
        })
        .await
    }

    /// This store writing through `client`: what the derive's generated methods take
    /// (`post.upsert(&store.on(&client))`, `Post::ensure_schema(&store.on(&tx))`), and the API
    /// every store shares ([`Session`]).
    pub fn on<C: Connection>(&self, client: C) -> Session<'_, C> {
        Session::new(self, client.wire())
    }

    /// Sends one write statement for `rows` and reads what it did to each.
    async fn write_rows<C>(
        &self,
        client: &C,
        table: &Table,
        rows: &[&PreparedRow],
        statement: &str,
        document: &DocumentRef,
    ) -> Result<Vec<RowState>, Error>
    where
        C: PgWire,
    {
        let columns = column_arrays(table, rows, document)?;
        let mut checked_again = false;
        let replies = loop {
            let checked = table.checked_oids();
            let parameters = wire::unnested(&columns, &checked);
            crate::trace::round_trip("INSERT … ON CONFLICT");
            let replies = client
                .write(statement, &parameters)
                .await
                .map_err(|source| postgres_error(document, source))?;
            if !table::missed_guard(&replies) {
                break replies;
            }
            check_again(client, table, document, &mut checked_again).await?;
        };
        let mut states: HashMap<String, RowState> = HashMap::with_capacity(replies.len());
        for reply in &replies {
            let Some(incoming) = reply.str(0) else {
                continue;
            };
            let state = match reply.flag(1) {
                Some(inserted) => RowState::Written { inserted },
                None => RowState::Stopped(Box::new(driver::read_stored_with_key(
                    reply,
                    2,
                    table.model,
                ))),
            };
            states.insert(incoming.to_owned(), state);
        }
        Ok(rows
            .iter()
            .map(|row| {
                states
                    .remove(row.id_text.as_str())
                    .unwrap_or(RowState::Unseen)
            })
            .collect())
    }

    /// The second step over a row another tool wrote: replaces it only while it is as read.
    /// `None`: it changed meanwhile, and the write goes again.
    async fn replace_foreign<C>(
        &self,
        client: &C,
        table: &Table,
        row: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Option<Outcome>, Error>
    where
        C: PgWire,
    {
        let columns = column_arrays(table, &[row], &row.document())?;
        // PostgreSQL writes a float's text with the digits that give it back.
        let pinned: Vec<Option<String>> = row
            .pinned_parameters(table, stored)
            .into_iter()
            .map(|pinned| pinned.text)
            .collect();
        let mut parameters: Vec<Param> =
            columns.iter().map(|column| Param::Texts(column)).collect();
        parameters.extend(wire::texts(&pinned));
        crate::trace::round_trip("UPDATE");
        let replaced = client
            .write(&table.pinned_replacement, &parameters)
            .await
            .map_err(|source| postgres_error(&row.document(), source))?;
        Ok((!replaced.is_empty()).then_some(Outcome::Updated))
    }

    /// The engine's driver writing to `table` through `client`.
    fn driver<'a, C>(&'a self, client: &'a C, table: &'a Table) -> driver::PgDriver<'a, C> {
        driver::PgDriver {
            store: self,
            client,
            table,
        }
    }

    /// The table of `T`, checked against the model before its first write.
    async fn table<T, C>(&self, client: &C, document: &DocumentRef) -> Result<Arc<Table>, Error>
    where
        T: Idempotent,
        C: PgWire,
    {
        let model = &T::MODEL;
        let stored = T::stored_columns();
        let (signal, known) = {
            let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            let same_type = known.tables.get(model.collection()).and_then(|tables| {
                tables
                    .iter()
                    .find(|table| table.is_of(model, &stored))
                    .cloned()
            });
            (known.signal, same_type)
        };
        if let Some(table) = known {
            return Ok(table);
        }
        let signal = match signal {
            Some(signal) => signal,
            None => {
                crate::trace::round_trip("SELECT");
                let version = client
                    .fetch_all("SELECT current_setting('server_version_num')::int8", &[])
                    .await
                    .and_then(|rows| wire::one(rows, "SELECT"))
                    .map_err(|source| postgres_error(document, source))?;
                InsertedSignal::for_server(version.int8(0).unwrap_or(0))
            }
        };
        let table = Arc::new(Table::of::<T>(signal));
        check_table(client, &table, document).await?;
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.signal = Some(signal);
        known
            .tables
            .entry(model.collection())
            .or_default()
            .push(table.clone());
        Ok(table)
    }

    fn forget_table(&self, model: &Model) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.tables.remove(model.collection());
    }
}

/// One `text[]` per sent column, holding that column's value for each row. Every array has one
/// entry per row: `unnest` would pad a shorter one with NULLs without a word.
pub(super) fn column_arrays<'r>(
    table: &Table,
    rows: &[&'r PreparedRow],
    document: &DocumentRef,
) -> Result<Vec<Vec<Option<&'r str>>>, Error> {
    let mut columns: Vec<Vec<Option<&str>>> =
        vec![Vec::with_capacity(rows.len()); table.sent.len()];
    for row in rows {
        if row.sent_len() != columns.len() {
            return Err(Error::new(
                document.clone(),
                ErrorKind::Serialize {
                    message: format!(
                        "a row of {} values for {} columns",
                        row.sent_len(),
                        columns.len()
                    ),
                },
            ));
        }
        for (position, column) in columns.iter_mut().enumerate() {
            column.push(row.sent_value(table, position));
        }
    }
    Ok(columns)
}

/// Whether `failure`, of a `CREATE TABLE IF NOT EXISTS`, may say that another session created
/// the same table at the same moment: the catalog's unique index refused this one (a unique
/// violation), the table or its row type appeared between the check for it and the creation (a
/// duplicate table or object). A duplicate object is also what an enum type of the table's name
/// gives (the table's row type would take its name), which the check then finds no table for.
fn created_by_another_session(failure: &wire::DbFailure) -> bool {
    matches!(
        failure.code(),
        Some(UNIQUE_VIOLATION | DUPLICATE_TABLE | DUPLICATE_OBJECT)
    )
}

/// Which unique constraint a unique violation raised by a single write names: the primary key
/// or the natural key's (this id is stored with another natural key, or a racing writer stored
/// the document after the statement's snapshot), another one (a refusal naming it), or none.
fn unique_conflict(error: &Error, table: &Table) -> Option<engine::Conflict> {
    let violation = error.as_backend()?;
    if violation.code() != Some(UNIQUE_VIOLATION) {
        return None;
    }
    let Some(name) = violation.constraint() else {
        return Some(engine::Conflict::Unclear {
            index: "(unnamed)".to_owned(),
        });
    };
    // By the names the check read in the violated table's schema: a migration may have named
    // the primary key, and PostgreSQL shortens the name it makes for a long table name.
    let ours = violation
        .constraint_schema()
        .and_then(|schema| table.checked_in(schema))
        .is_some_and(|checked| {
            checked
                .id_constraints
                .iter()
                .chain(&checked.natural_key_constraints)
                .any(|constraint| constraint == name)
        });
    Some(match ours {
        true => engine::Conflict::Key,
        false => engine::Conflict::Other {
            index: name.to_owned(),
        },
    })
}
