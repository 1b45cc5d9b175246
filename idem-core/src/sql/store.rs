//! The SQL store, written once over a [`SqlDialect`]: the tables it checked, the guarded writes
//! (upsert, batch, delete, delete by id, derived sets, events), the effects' retries and the
//! typed reads. Each store's module gives these their public signatures.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::dialect::{Dialect, SqlDialect, SqlDriver};
use super::effects::{Apply, Effect, EffectKind, Push};
use super::wire::{Param, Wire};
use crate::batch::BatchReport;
use crate::change::{self, Change};
use crate::document::{DocumentRef, NaturalKey};
use crate::engine::by_id::{answered_in_one, settle_by_id};
use crate::engine::{self, WriteKind};
use crate::error::{Error, ErrorKind};
use crate::id::{Id, KeyValue};
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::{Model, OpId};
use crate::outcome::{Applied, Deletion, Outcome, Pushed, Recorded};
use crate::push::{item_and_key_texts, pushed_list};
use crate::sql::json;
use crate::sql::row::PreparedRow;
use crate::trace::{Call, CallKind};

/// How many rows one batch statement carries at most by default, unless the database's limit
/// of bound parameters allows fewer.
pub const DEFAULT_BATCH_CHUNK: usize = 1000;

/// How many op ids `apply_once` keeps per row by default.
pub const DEFAULT_OP_WINDOW: usize = 1000;

/// Writes documents to a SQL database's tables, one per type; holds no connection. Clones
/// share what the store learned (the tables it checked).
pub struct Store<D: Dialect> {
    tables: Arc<Mutex<CheckedTables>>,
    pub(crate) batch_chunk: usize,
    pub(crate) shortcut_min_docs: usize,
    pub(crate) op_window: usize,
    /// Whether a batch's next chunk may go while the last awaits its answer, on a wire that
    /// pipelines ([`Wire::pipelines_chunks`]).
    pub(crate) pipelining: bool,
    /// How many hash partitions of its natural key `ensure_table` makes a table of, where the
    /// dialect partitions (PostgreSQL's `with_partitions`); `None`: a plain table.
    pub(crate) partitions: Option<u32>,
    /// Whether the rows a write inserted are told by a write marker column, where the dialect
    /// otherwise asks the server (PostgreSQL's `with_write_marker`).
    pub(crate) write_marker: bool,
    dialect: PhantomData<fn() -> D>,
}

/// The tables a store checked, by name: one per type stored there (a write model and a read
/// model on one table each have their own columns and statements), each the dialect's
/// `Table` behind `Any`, so that the store's type names no dialect's internals.
type CheckedTables = HashMap<&'static str, Vec<Arc<dyn std::any::Any + Send + Sync>>>;

impl<D: Dialect> Clone for Store<D> {
    fn clone(&self) -> Self {
        Store {
            tables: Arc::clone(&self.tables),
            batch_chunk: self.batch_chunk,
            shortcut_min_docs: self.shortcut_min_docs,
            op_window: self.op_window,
            pipelining: self.pipelining,
            partitions: self.partitions,
            write_marker: self.write_marker,
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for Store<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("database", &D::NAME)
            .field("batch_chunk", &self.batch_chunk)
            .field("op_window", &self.op_window)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> Default for Store<D> {
    fn default() -> Self {
        Store::new()
    }
}

impl<D: Dialect> Store<D> {
    /// A store with the default batch chunk and op window.
    pub fn new() -> Self {
        Store {
            tables: Arc::default(),
            batch_chunk: DEFAULT_BATCH_CHUNK,
            shortcut_min_docs: crate::engine::batch::SHORTCUT_MIN_DOCS,
            op_window: DEFAULT_OP_WINDOW,
            pipelining: true,
            partitions: None,
            write_marker: false,
            dialect: PhantomData,
        }
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
}

/// A call of the store's, as its public signatures return it: boxed and `Send`, proven so here
/// over any wire, where the caller's generic connection would ask the compiler to prove it
/// through higher-ranked lifetimes it cannot yet see through (rust-lang/rust#100013).
pub(crate) type StoreCall<'a, R> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<R, Error>> + Send + 'a>>;

/// Runs `call` in its span, as the dialect's driver needs it ([`Call::run_detached`] for a
/// driver that sends its commands to a worker thread).
pub(crate) async fn run<D: SqlDialect, O: crate::trace::Shown>(
    call: Call,
    future: impl std::future::Future<Output = Result<O, Error>>,
) -> Result<O, Error> {
    match D::WORKER_THREAD {
        true => call.run_detached(future).await,
        false => call.run(future).await,
    }
}

// The methods are the crate's own: each store's module gives them their public signatures.
#[allow(private_bounds)]
impl<D: SqlDialect> Store<D> {
    /// The `CREATE TABLE` statement of `T`'s table (and what else makes it), as each store's
    /// `create_table_sql` prints it.
    pub(crate) fn create_sql_of<T: Idempotent>() -> String {
        D::create_sql(&D::table(&T::MODEL, &T::stored_columns()))
    }

    /// Creates `T`'s table if it does not exist, then checks it as before a first write.
    pub(crate) fn ensure_table_on<'a, T: Idempotent>(
        &'a self,
        wire: &'a (impl Wire + 'a),
    ) -> StoreCall<'a, ()> {
        Box::pin(async move {
            let document = DocumentRef::collection(&T::MODEL);
            let collection = T::MODEL.collection();
            let table = D::store_table(self, &T::MODEL, &T::stored_columns());
            // Refused before anything is created: a table the database would not keep as it is.
            if let Some(problem) = D::unstorable(&table) {
                return Err(Error::schema_mismatch(&T::MODEL, problem));
            }
            // Whether the table exists where the statements will find it: `CREATE TABLE IF NOT
            // EXISTS` does not say, and on PostgreSQL would make an empty one in the search
            // path's first schema while the statements' table is in a later one.
            crate::trace::round_trip("SELECT");
            let existed = wire
                .fetch_optional(D::TABLE_EXISTS, &[Param::Text(Some(collection))])
                .await
                .map_err(|source| D::error(&document, source))?
                .is_some();
            if existed {
                self.forget_table(&T::MODEL);
                return self.table::<T>(wire, &document).await.map(drop);
            }
            let sql = D::ensure_sql(self, &table);
            crate::trace::round_trip("CREATE TABLE");
            let created = wire.execute(&sql, &[]).await;
            self.forget_table(&T::MODEL);
            match created {
                Ok(_) => {
                    crate::trace::table_created(collection);
                    self.table::<T>(wire, &document).await.map(drop)
                }
                // Another session made the table at the same moment: the table it made is checked
                // as any other. Where the check fails (no such table after all, another table's
                // columns, the caller's transaction now aborted), the refusal to create it is the
                // error that says what happened.
                Err(source) if D::created_by_another_session(&source) => {
                    let refusal = D::error(&document, source);
                    match self.table::<T>(wire, &document).await {
                        Ok(_) => Ok(()),
                        Err(_) => Err(refusal),
                    }
                }
                Err(source) => Err(D::error(&document, source)),
            }
        })
    }

    /// An upsert, through `wire`.
    pub(crate) fn upsert_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        doc: &'a T,
    ) -> StoreCall<'a, Outcome>
    where
        T: Idempotent + Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::Upsert, T::MODEL.collection(), || doc.id().ok());
            run::<D, _>(call, async move {
                if T::MODEL.idempotency_key_field().is_some() {
                    return self
                        .record_on(wire, doc)
                        .await
                        .map(|recorded| recorded.outcome);
                }
                let table = self.table::<T>(wire, &doc.document_ref()).await?;
                let row = PreparedRow::new(doc, &table)?;
                let driver = self.driver(wire, &table);
                engine::settle_one(&driver, WriteKind::Upsert, &row).await
            })
            .await
        })
    }

    /// A batch upsert, through `wire`.
    pub(crate) fn upsert_many_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        docs: &'a [T],
    ) -> StoreCall<'a, BatchReport>
    where
        T: Idempotent + Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::UpsertMany, T::MODEL.collection(), || None::<Id>);
            run::<D, _>(call, async move {
                if T::MODEL.idempotency_key_field().is_some() {
                    let record = |doc| self.record_on(wire, doc);
                    return Ok(engine::record::record_each(docs, record).await);
                }
                let collection = DocumentRef::collection(&T::MODEL);
                let table = self.table::<T>(wire, &collection).await?;
                let driver = self.driver(wire, &table);
                engine::batch::upsert_many(&driver, docs).await
            })
            .await
        })
    }

    /// A deletion by the document, through `wire`.
    pub(crate) fn delete_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        doc: &'a T,
    ) -> StoreCall<'a, Deletion>
    where
        T: Idempotent + Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::Delete, T::MODEL.collection(), || doc.id().ok());
            run::<D, _>(call, async move {
                let document = doc.document_ref();
                let tombstone = crate::engine::tombstone_field(&T::MODEL, &document)?;
                let table = self.table::<T>(wire, &document).await?;
                let row = PreparedRow::new(doc, &table)?;
                let marked = table
                    .column_of(tombstone)
                    .and_then(|index| row.value_of(&table, index))
                    .is_some();
                engine::check_marked(tombstone, marked, || document)?;
                let driver = self.driver(wire, &table);
                engine::settle_one(&driver, WriteKind::Delete, &row)
                    .await
                    .map(Deletion::of)
            })
            .await
        })
    }

    /// A deletion by id, through `wire`.
    pub(crate) fn delete_by_id_on<'a, T, M>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        id: Id,
        marker: &'a M,
    ) -> StoreCall<'a, Deletion>
    where
        T: Idempotent,
        M: Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::DeleteById, T::MODEL.collection(), || Some(id));
            run::<D, _>(call, async move {
                let model = &T::MODEL;
                let document = DocumentRef::by_id(model, id);
                let encode = |marker: &M| json::to_json(marker).map_err(|error| error.message());
                let (tombstone, marker) =
                    engine::tombstone_for(model, &T::stored_columns(), marker, &document, encode)?;
                let table = self.table::<T>(wire, &document).await?;
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
                let id_text = id.to_string();
                let driver = self.driver(wire, &table);
                settle_by_id(&document, || {
                    driver.mark_deleted(&id_text, tombstone, marker_text.as_deref(), &document)
                })
                .await
            })
            .await
        })
    }

    /// The members of a derived set not stored, inserted, through `wire`.
    pub(crate) fn insert_new_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        members: &'a [T],
    ) -> StoreCall<'a, InsertReport<T>>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::InsertNew, T::MODEL.collection(), || None::<Id>);
            run::<D, _>(call, async move {
                let collection = DocumentRef::collection(&T::MODEL);
                let table = self.table::<T>(wire, &collection).await?;
                let driver = self.driver(wire, &table);
                engine::insert::insert_new(&driver, members).await
            })
            .await
        })
    }

    /// An event recorded once under its key, through `wire`.
    pub(crate) fn record_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        event: &'a T,
    ) -> StoreCall<'a, Recorded>
    where
        T: Idempotent + Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::Record, T::MODEL.collection(), || None::<Id>);
            run::<D, _>(call, async move {
                let (key_field, id) = engine::record::event_key(event)?;
                let table = self.table::<T>(wire, &event.document_ref()).await?;
                let row = PreparedRow::with_id(event, id, &table)?;
                let driver = self.driver(wire, &table);
                engine::record::record(&driver, &row, key_field).await
            })
            .await
        })
    }

    /// An operation applied once, through `wire`.
    pub(crate) fn apply_once_on<'a, T: Idempotent>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        id: Id,
        op: &'a OpId,
        changes: &'a [Change],
    ) -> StoreCall<'a, Applied> {
        Box::pin(async move {
            let call = Call::new(CallKind::ApplyOnce, T::MODEL.collection(), || Some(id));
            run::<D, _>(call, async move {
                let model = &T::MODEL;
                let document = DocumentRef::by_id(model, id);
                change::check_op(op, &document)?;
                let table = self.table::<T>(wire, &document).await?;
                change::check(model, &T::stored_columns(), changes, &document)?;
                settle_by_id(&document, || async {
                    let window = self.op_window;
                    let apply = EffectKind::Apply(Apply {
                        op,
                        changes,
                        window,
                    });
                    let answer =
                        D::effect(wire, &Effect::new(&table, id, &document, apply)).await?;
                    Ok(answered_in_one(
                        answer.written,
                        answer.exists,
                        Applied::Applied,
                        Applied::AlreadyApplied,
                    ))
                })
                .await
            })
            .await
        })
    }

    /// An item pushed once, through `wire`.
    pub(crate) fn push_on<'a, T, I>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        id: Id,
        field: &'static str,
        item: &'a I,
    ) -> StoreCall<'a, Pushed>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::Push, T::MODEL.collection(), || Some(id));
            run::<D, _>(call, async move {
                let model = &T::MODEL;
                let document = DocumentRef::by_id(model, id);
                let list = pushed_list(model, field, &document)?;
                let table = self.table::<T>(wire, &document).await?;
                let (item, item_key) = item_and_key_texts(&document, list, item)?;
                settle_by_id(&document, || async {
                    let (item, item_key) = (&item, &item_key);
                    let push = EffectKind::Push(Push {
                        list,
                        item,
                        item_key,
                    });
                    let answer = D::effect(wire, &Effect::new(&table, id, &document, push)).await?;
                    Ok(answered_in_one(
                        answer.written,
                        answer.exists,
                        Pushed::Appended,
                        Pushed::AlreadyPresent,
                    ))
                })
                .await
            })
            .await
        })
    }

    /// The row under `id`, as `T`, through `wire`.
    pub(crate) fn get_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        id: Id,
    ) -> StoreCall<'a, Option<T>>
    where
        T: Idempotent + DeserializeOwned,
    {
        Box::pin(async move {
            let call = Call::new(CallKind::Get, T::MODEL.collection(), || Some(id));
            run::<D, _>(call, async move {
                let document = DocumentRef::by_id(&T::MODEL, id);
                let table = self.table::<T>(wire, &document).await?;
                let id_text = id.to_string();
                let equal = [(0, Param::Text(Some(&id_text)))];
                D::read_one(wire, &table, &equal, document).await
            })
            .await
        })
    }

    /// The row holding the natural key `key`, as `T`, through `wire`.
    pub(crate) fn find_on<'a, T>(
        &'a self,
        wire: &'a (impl Wire + 'a),
        key: &'a NaturalKey,
    ) -> StoreCall<'a, Option<T>>
    where
        T: Idempotent + DeserializeOwned,
    {
        Box::pin(async move {
            let call = Call::find(T::MODEL.collection(), key);
            run::<D, _>(call, async move {
                let model = &T::MODEL;
                let document = DocumentRef::new(model, key.clone());
                if !key.fits(model, &T::stored_columns(), &document)? {
                    return Ok(None);
                }
                let table = self.table::<T>(wire, &document).await?;
                let mut texts = Vec::new();
                for (field, (_, value)) in model.natural_key_fields().zip(key.parts()) {
                    let Some(index) = table.column_of(field) else {
                        return Ok(None);
                    };
                    let text = match value {
                        // The SQL stores refuse to write U+0000, so no stored key holds it.
                        KeyValue::Text(text) if text.contains('\0') => return Ok(None),
                        // A column of JSON (a newtype key's) holds the text's JSON, as a write
                        // sends it.
                        KeyValue::Text(text)
                            if table.columns[index].shape
                                == crate::column::ColumnShape::Structured =>
                        {
                            serde_json::Value::from(text.as_str()).to_string()
                        }
                        KeyValue::Text(text) => text.clone(),
                        KeyValue::Integer(number) => number.to_string(),
                        KeyValue::Bool(flag) => flag.to_string(),
                        // No stored key holds it: keys are text, bool or integers up to 64 bits.
                        _ => return Ok(None),
                    };
                    texts.push((index, text));
                }
                let equal: Vec<(usize, Param)> = texts
                    .iter()
                    .map(|(index, text)| {
                        (
                            *index,
                            Param::typed(table.columns[*index].shape, Some(text)),
                        )
                    })
                    .collect();
                D::read_one(wire, &table, &equal, document).await
            })
            .await
        })
    }

    /// The engine's driver writing to `table` through `wire`.
    fn driver<'a, W: Wire>(&'a self, wire: &'a W, table: &'a D::Table) -> D::Driver<'a, W> {
        <D::Driver<'a, W> as SqlDriver<'a, D, W>>::new(self, wire, table)
    }

    /// The table of `T`, checked against the model before its first write.
    pub(crate) async fn table<T: Idempotent>(
        &self,
        wire: &impl Wire,
        document: &DocumentRef,
    ) -> Result<Arc<D::Table>, Error> {
        let model = &T::MODEL;
        let stored = T::stored_columns();
        let known = {
            let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
            tables.get(model.collection()).and_then(|tables| {
                tables
                    .iter()
                    .filter_map(|table| Arc::clone(table).downcast::<D::Table>().ok())
                    .find(|table| table.is_of(model, &stored))
            })
        };
        if let Some(table) = known {
            return Ok(table);
        }
        let table = Arc::new(D::store_table(self, model, &stored));
        D::check_table(wire, &table, document).await?;
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables
            .entry(model.collection())
            .or_default()
            .push(table.clone());
        Ok(table)
    }

    /// Forgets what the store learned of `model`'s table.
    pub(crate) fn forget_table(&self, model: &Model) {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables.remove(model.collection());
    }
}

/// Sends a write (`$write`, an expression giving its future, `Result<_, Error>`) through the
/// wire `$wire` of dialect `$dialect`, and again while it ends in a conflict the dialect says
/// may start over ([`SqlDialect::restarts`]: a deadlock, a serialization failure) outside the
/// caller's transaction, which took nothing with it; inside the caller's, the conflict rolled
/// back the caller's earlier statements too, and is the caller's to retry. A macro, as each
/// attempt borrows the driver anew.
macro_rules! restarting {
    ($dialect:ty, $wire:expr, $write:expr) => {{
        let mut attempts = 1;
        loop {
            let written = $write.await;
            match &written {
                Err(error)
                    if <$dialect as $crate::sql::dialect::SqlDialect>::restarts(error)
                        && attempts < $crate::MAX_ATTEMPTS =>
                {
                    if $wire.in_callers_transaction().await.unwrap_or(true) {
                        break written;
                    }
                    $crate::sql::store::restart_pause(attempts).await;
                    attempts += 1;
                }
                _ => break written,
            }
        }
    }};
}
pub(crate) use restarting;

/// The pause before a write starts over after `attempts` ended in a conflict: up to
/// 2^`attempts` ms, at a point of that range the clock picks. Writers whose overlapping rows
/// deadlocked each other would otherwise start over at once, in the same order, and could
/// deadlock again every time (eight racing `insert_new` callers on MariaDB used all their
/// attempts so).
pub(crate) async fn restart_pause(attempts: usize) {
    let range = 1u32 << attempts.min(7);
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let pause = std::time::Duration::from_micros(u64::from(jitter % (range * 1000)));
    tokio::time::sleep(pause).await;
}

/// Runs `work` in a transaction of idem's own ([`Wire::begin`]: a savepoint inside the
/// caller's), committed if it succeeds and rolled back if it fails, so that a failed statement
/// leaves neither a half-written change nor an open transaction.
#[cfg(feature = "_marker_store")]
pub(crate) async fn in_transaction<D: SqlDialect, R>(
    wire: &impl Wire,
    document: &DocumentRef,
    work: impl std::future::Future<Output = Result<R, super::wire::DbFailure>>,
) -> Result<R, Error> {
    in_transaction_with::<D, R>(wire, document, async {
        work.await.map_err(|source| D::error(document, source))
    })
    .await
}

/// [`in_transaction`] for work whose errors are idem's already: any of them rolls it back.
pub(crate) async fn in_transaction_with<D: SqlDialect, R>(
    wire: &impl Wire,
    document: &DocumentRef,
    work: impl std::future::Future<Output = Result<R, Error>>,
) -> Result<R, Error> {
    wire.begin()
        .await
        .map_err(|source| D::error(document, source))?;
    let outcome = work.await;
    settle_transaction::<D, R>(wire, outcome, document).await
}

/// Commits what [`Wire::begin`] opened after `outcome`, or rolls it back on an error. A commit
/// that fails (a busy lock) is rolled back too, so that no write of it is left open.
pub(crate) async fn settle_transaction<D: SqlDialect, R>(
    wire: &impl Wire,
    outcome: Result<R, Error>,
    document: &DocumentRef,
) -> Result<R, Error> {
    match outcome {
        Ok(value) => match wire.commit().await {
            Ok(()) => Ok(value),
            Err(source) => {
                // The rollback's own failure would hide the commit's, which is the one to say.
                let _ = wire.rollback().await;
                Err(D::error(document, source))
            }
        },
        Err(error) => {
            let _ = wire.rollback().await;
            Err(error)
        }
    }
}
