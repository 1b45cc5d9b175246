//! The write engine's driver ([`crate::engine`]) for a SQL database whose writes tell an insert
//! from an update by the write marker each statement sets (`idemWrite`: one value made for the
//! insert, another for the update, of this statement alone), where the database has no `xmax`:
//! one write per chunk, then one read of the rows it did not say it wrote, both in a
//! transaction of idem's own, so that what the read finds is what stopped the write.

use std::collections::{HashMap, HashSet};

use super::dialect::{MarkerDialect, SqlDriver, Statement};
use super::reads::stored_row;
use super::store::{in_transaction, Store};
use super::wire::{Cells, DbFailure, Param, Wire};
pub(crate) use super::words::compared_contents;
use crate::column::ColumnShape;
use crate::engine::batch::{BatchDriver, Fresh, Landing, Looked};
use crate::engine::by_id::ById;
use crate::engine::{Conflict, Driver, Reply, WriteKind};
use crate::error::Error;
use crate::model::Field;
use crate::outcome::Deletion;
use crate::sql::layout::{Content, Layout};
use crate::sql::row::{LightRow, PreparedRow, StoredRow};

/// Writes to one checked table through one wire.
pub(crate) struct MarkerDriver<'a, D: MarkerDialect, W> {
    pub store: &'a Store<D>,
    pub wire: &'a W,
    pub table: &'a D::Table,
}

/// `doc`'s values of the sent columns at `positions`, each bound as its column holds it.
fn row_params<'r>(
    table: &Layout,
    doc: &'r PreparedRow,
    positions: &[usize],
    params: &mut Vec<Param<'r>>,
) {
    for &position in positions {
        let column = &table.columns[table.sent[position]];
        let shape = match column.content {
            Content::Stored(_) => column.shape,
            _ => ColumnShape::Text,
        };
        params.push(Param::typed(shape, doc.sent_value(table, position)));
    }
}

/// `doc`'s natural-key values, each bound as its column holds it, so that a comparison with the
/// column meets the key's index.
fn key_params<'r>(table: &Layout, doc: &'r LightRow, params: &mut Vec<Param<'r>>) {
    for (field, text) in table.model.natural_key_fields().zip(&doc.key_texts) {
        let shape = table
            .column_of(field)
            .map_or(ColumnShape::Text, |index| table.columns[index].shape);
        params.push(Param::typed(shape, text.as_deref()));
    }
}

/// The stored state of the rows under `docs`' ids or holding their natural keys, each with its
/// write marker where the dialect's write does not return the rows it wrote.
async fn select_stored<D: MarkerDialect>(
    wire: &impl Wire,
    table: &D::Table,
    docs: &[&LightRow],
) -> Result<Vec<(Option<String>, StoredRow)>, DbFailure> {
    let sql = D::select_stored_sql(table, docs.len());
    let mut params = Vec::with_capacity(docs.len() * 3);
    params.extend(
        docs.iter()
            .map(|doc| Param::Text(Some(doc.id_text.as_str()))),
    );
    for doc in docs {
        key_params(table, doc, &mut params);
    }
    crate::trace::round_trip("SELECT");
    let rows = wire.fetch_all(&sql, &params).await?;
    // The write marker first, where the read tells the rows written.
    let at = usize::from(!D::WRITE_RETURNS);
    rows.iter()
        .map(|row| {
            let marker = match at {
                0 => None,
                _ => row.text(0)?,
            };
            Ok((marker, stored_row(row, at, table)?))
        })
        .collect()
}

impl<D: MarkerDialect, W: Wire> MarkerDriver<'_, D, W> {
    /// The reply of a write of one row that failed with `error`, as the dialect gives it
    /// ([`SqlDialect::reply_to_error`](crate::sql::dialect::SqlDialect::reply_to_error)), with
    /// another unique index than the id's and the natural key's named as the schema names it.
    async fn reply_to_error(&self, error: Error) -> Result<Reply<StoredRow>, Error> {
        match D::reply_to_error(error, self.table)? {
            Reply::Conflict(Conflict::Other { index: columns }) => {
                let index = D::index_on(self.wire, self.table, &columns)
                    .await
                    .unwrap_or(columns);
                Ok(Reply::Conflict(Conflict::Other { index }))
            }
            reply => Ok(reply),
        }
    }

    /// The unique index other than the id's and the natural key's that `doc` meets, as a reply
    /// ([`Conflict::Other`]), if it meets one: the plain insert of the row alone, in a
    /// transaction rolled back, names it. For a write that neither wrote `doc` nor found a row
    /// under its id or natural key after it, where writes meet a stored row through any unique
    /// index (the MySQL family's upsert), rather than take it for a row a trigger left out.
    async fn index_met(&self, doc: &PreparedRow) -> Option<Reply<StoredRow>> {
        if !D::MEETS_ANY_UNIQUE {
            return None;
        }
        let table = self.table;
        let marker = format!("i{}", ulid::Ulid::generate());
        let mut params = Vec::new();
        row_params(table, doc, &table.inserted(Statement::Upsert), &mut params);
        params.push(Param::Text(Some(&marker)));
        self.wire.begin().await.ok()?;
        crate::trace::round_trip("INSERT");
        let plain = self.wire.execute(&D::fresh_sql(table, 1), &params).await;
        // Nothing of it is kept, whatever it did.
        let _ = self.wire.rollback().await;
        let error = D::error(&doc.document(), plain.err()?);
        match self.reply_to_error(error).await {
            Ok(reply @ Reply::Conflict(Conflict::Other { .. })) => Some(reply),
            _ => None,
        }
    }

    /// One write of `docs` and the read of the rows it did not say it wrote, in one transaction
    /// of idem's own: the locks the write took are held through the read.
    async fn write_and_read(
        &self,
        statement: Statement,
        docs: &[&PreparedRow],
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let table = self.table;
        let document = &docs[0].document();
        let nonce = ulid::Ulid::generate().to_string();
        let insert_marker = format!("i{nonce}");
        let update_marker = format!("u{nonce}");
        let sql = D::write_sql(table, statement, docs.len());
        let columns = table.inserted(statement);
        let (written, stored) = in_transaction::<D, _>(self.wire, document, async {
            let mut params = Vec::with_capacity(docs.len() * (columns.len() + 1) + 1);
            for doc in docs {
                row_params(table, doc, &columns, &mut params);
                params.push(Param::Text(Some(&insert_marker)));
            }
            if statement != Statement::InsertNew {
                params.push(Param::Text(Some(&update_marker)));
            }
            crate::trace::round_trip("INSERT … ON CONFLICT");
            let mut written: HashMap<String, bool> = HashMap::new();
            if D::WRITE_RETURNS {
                for row in self.wire.fetch_all(&sql, &params).await? {
                    if let Some(id) = row.text(0)? {
                        let marker = row.text(1)?;
                        written.insert(id, marker.as_deref() == Some(insert_marker.as_str()));
                    }
                }
            } else {
                self.wire.execute(&sql, &params).await?;
            }
            let left: Vec<&LightRow> = docs
                .iter()
                .filter(|doc| !written.contains_key(doc.id_text.as_str()))
                .map(|doc| &doc.light)
                .collect();
            let stored = match left.is_empty() {
                true => Vec::new(),
                false => select_stored::<D>(self.wire, table, &left).await?,
            };
            Ok((written, stored))
        })
        .await?;
        // Without rows returned by the write, the read tells the rows it wrote by their markers.
        let (written, stored) = by_marker(written, stored, &insert_marker, &update_marker);
        let stopping = StoppingRows::new(&stored);
        // The read ran under the write's locks: a row it found that stops none of `docs` by id
        // or by natural key byte for byte is one the natural key's unique index took for another
        // spelling of a key (a collation that does not compare bytes, in a table changed since
        // its check). Such a key conflict never resolves: it is a refusal naming the index.
        let mut respelled = None;
        if !stored.is_empty() && !stored.iter().all(stops_any(docs)) {
            let columns = table
                .model
                .natural_key_fields()
                .map(|field| field.stored_name())
                .collect::<Vec<_>>()
                .join(", ");
            respelled = Some(
                D::index_on(self.wire, table, &columns)
                    .await
                    .unwrap_or(columns),
            );
        }
        Ok(docs
            .iter()
            .map(|doc| {
                if let Some(inserted) = written.get(doc.id_text.as_str()) {
                    return Reply::Written {
                        inserted: *inserted,
                    };
                }
                match (stopping.stopping(&doc.light), &respelled) {
                    (Some(stored), _) => Reply::Stopped(stored.clone()),
                    (None, Some(index)) => Reply::Conflict(Conflict::Other {
                        index: index.clone(),
                    }),
                    // Neither its id nor its natural key is stored, and nothing was written: a
                    // trigger left the row out.
                    (None, None) => Reply::Unseen,
                }
            })
            .collect())
    }

    /// One attempt of [`BatchDriver::insert_fresh`]: the plain insert of `docs` in a
    /// transaction of idem's own, rolled back unless it inserted every one.
    async fn insert_fresh_once(&self, docs: &[&PreparedRow]) -> Result<Option<Fresh>, Error> {
        let table = self.table;
        let document = &docs[0].document();
        let marker = format!("i{}", ulid::Ulid::generate());
        let sql = D::fresh_sql(table, docs.len());
        let columns = table.inserted(Statement::Upsert);
        let mut params = Vec::with_capacity(docs.len() * (columns.len() + 1));
        for doc in docs {
            row_params(table, doc, &columns, &mut params);
            params.push(Param::Text(Some(&marker)));
        }
        self.wire
            .begin()
            .await
            .map_err(|source| D::error(document, source))?;
        crate::trace::round_trip("INSERT");
        let met = match self.wire.execute(&sql, &params).await {
            Ok(rows) if rows == docs.len() as u64 => {
                return super::store::settle_transaction::<D, _>(self.wire, Ok(()), document)
                    .await
                    .map(|()| Some(Fresh::Inserted));
            }
            // Fewer rows without an error: a trigger dropped some.
            Ok(_) => None,
            Err(source) => Some(D::error(document, source)),
        };
        let _ = self.wire.rollback().await;
        match met {
            Some(error) => Err(error),
            None => Ok(Some(Fresh::Met)),
        }
    }
}

/// The rows a read after the write found, parted by their write markers: those this write
/// inserted or updated (by id: whether inserted), beside those `written` already holds, and
/// those it left alone.
fn by_marker(
    mut written: HashMap<String, bool>,
    stored: Vec<(Option<String>, StoredRow)>,
    insert_marker: &str,
    update_marker: &str,
) -> (HashMap<String, bool>, Vec<StoredRow>) {
    let mut left = Vec::with_capacity(stored.len());
    for (marker, row) in stored {
        match marker.as_deref() {
            Some(marker) if marker == insert_marker => {
                written.insert(row.id.clone(), true);
            }
            Some(marker) if marker == update_marker => {
                written.insert(row.id.clone(), false);
            }
            _ => left.push(row),
        }
    }
    (written, left)
}

impl<D: MarkerDialect, W: Wire> Driver for MarkerDriver<'_, D, W> {
    async fn write(
        &self,
        kind: WriteKind,
        docs: &[&PreparedRow],
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let statement = Statement::from(kind);
        let written =
            crate::sql::store::restarting!(D, self.wire, self.write_and_read(statement, docs));
        match written {
            Ok(mut replies) => {
                for (reply, doc) in replies.iter_mut().zip(docs) {
                    if matches!(reply, Reply::Unseen) {
                        *reply = self.index_met(doc).await.unwrap_or(Reply::Unseen);
                    }
                }
                Ok(replies)
            }
            Err(error) if docs.len() == 1 => match self.reply_to_error(error).await? {
                // A write may refuse a row it met through another unique index (the MySQL
                // family's, which cannot tell which): the plain insert names the index.
                Reply::Refused(error) => Ok(vec![self
                    .index_met(docs[0])
                    .await
                    .unwrap_or(Reply::Refused(error))]),
                reply => Ok(vec![reply]),
            },
            Err(error) => Err(error),
        }
    }

    async fn write_pinned(
        &self,
        doc: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Reply<StoredRow>, Error> {
        let table = self.table;
        let sql = D::pinned_sql(table);
        let all: Vec<usize> = (0..table.sent.len()).collect();
        let update_marker = format!("u{}", ulid::Ulid::generate());
        let pinned = doc.pinned_parameters(table, stored);
        let mut params = Vec::new();
        row_params(table, doc, &all, &mut params);
        params.push(Param::Text(Some(&update_marker)));
        params.push(Param::Text(Some(doc.id_text.as_str())));
        for pinned in &pinned {
            // A float read back as its shortest exact text, bound as the float where the
            // database's own text of it would not compare equal; NaN and the infinities, stored
            // as their text (SQLite would bind NaN as NULL), as that text.
            let exact = (pinned.text.as_deref())
                .filter(|_| pinned.float && D::PINS_FLOATS)
                .map(str::parse::<f64>);
            params.push(match exact {
                Some(Ok(float)) if float.is_finite() => Param::Float(float),
                _ => Param::Text(pinned.text.as_deref()),
            });
        }
        crate::trace::round_trip("UPDATE");
        match self.wire.execute(&sql, &params).await {
            Ok(0) => Ok(Reply::Unseen),
            Ok(_) => Ok(Reply::Written { inserted: false }),
            Err(source) => self.reply_to_error(D::error(&doc.document(), source)).await,
        }
    }

    async fn read_conflict(&self, doc: &PreparedRow) -> Result<Option<StoredRow>, Error> {
        let stored = select_stored::<D>(self.wire, self.table, &[&doc.light])
            .await
            .map_err(|source| D::error(&doc.document(), source))?;
        let stored: Vec<StoredRow> = stored.into_iter().map(|(_, row)| row).collect();
        Ok(StoppingRows::new(&stored).stopping(&doc.light).cloned())
    }

    crate::sql::reads_rows_as_sql!();
}

impl<D: MarkerDialect, W: Wire> BatchDriver for MarkerDriver<'_, D, W> {
    fn chunk(&self) -> usize {
        self.store.batch_chunk.min(D::max_rows(self.table))
    }

    crate::sql::prepares_rows_as_sql!();

    /// One chunk in flight: `landing` is empty ([`BatchDriver::insert_fresh`]). Started over
    /// after a conflict with another writer where the transaction is idem's own, as a write is.
    async fn insert_fresh(
        &self,
        docs: &[&PreparedRow],
        _landing: Landing,
    ) -> Result<Option<Fresh>, Error> {
        crate::sql::store::restarting!(D, self.wire, self.insert_fresh_once(docs))
    }

    /// One read ([`crate::sql::marker_table::MarkerWords::look_up_sql`]): the rows stored with
    /// the same id, natural key, content hash and version key settle `Unchanged` with no write
    /// statement and no write lock; each other row with what it meets, which the engine judges
    /// before anything is written.
    async fn look_up(&self, docs: &[&LightRow]) -> Result<Option<Vec<Looked<StoredRow>>>, Error> {
        let table = self.table;
        let document = &docs[0].document();
        if D::READS_LAG_WRITES {
            let in_callers = self.wire.in_callers_transaction().await;
            if in_callers.map_err(|source| D::error(document, source))? {
                return Ok(None);
            }
        }
        let Some(sql) = D::look_up_sql(table, docs.len()) else {
            return Ok(None);
        };
        let contents = compared_contents(table);
        let mut params = Vec::new();
        for doc in docs {
            params.push(Param::Text(Some(doc.id_text.as_str())));
            for content in &contents {
                params.push(Param::Text(match content {
                    Content::Hash => Some(doc.hash.as_str()),
                    Content::VersionKey => doc.version_key.as_deref(),
                    // Not among the compared contents.
                    _ => None,
                }));
            }
            key_params(table, doc, &mut params);
        }
        crate::trace::round_trip("SELECT");
        let to_error = |source| D::error(document, source);
        let rows = self.wire.fetch_all(&sql, &params).await.map_err(to_error)?;
        let mut stopping: HashMap<String, StoredRow> = HashMap::with_capacity(rows.len());
        let mut meeting_none = String::new();
        let mut unchanged_count = 0_i64;
        for row in &rows {
            match row.text(0).map_err(to_error)? {
                Some(incoming) => {
                    stopping.insert(incoming, stored_row(row, 1, table).map_err(to_error)?);
                }
                None => {
                    meeting_none = row.text(1).map_err(to_error)?.unwrap_or_default();
                    unchanged_count = row.integer(2).map_err(to_error)?.unwrap_or(0);
                }
            }
        }
        let meeting_none: HashSet<&str> = meeting_none.split(',').collect();
        // A row met by a natural key that is not the incoming one byte for byte (a collation
        // that does not compare bytes, in a table changed since its check): the guarded write
        // answers for it, as it answers a single write.
        let respelled = docs.iter().any(|doc| {
            stopping.get(doc.id_text.as_str()).is_some_and(|stored| {
                stored.id.as_str() != doc.id_text.as_str()
                    && stored.natural_key.as_deref() != Some(doc.key_texts.as_slice())
            })
        });
        if respelled {
            return Ok(None);
        }
        let looked: Vec<Looked<StoredRow>> = docs
            .iter()
            .map(|doc| match stopping.remove(doc.id_text.as_str()) {
                Some(stored) => Looked::Stored(Some(stored)),
                None if meeting_none.contains(doc.id_text.as_str()) => Looked::Stored(None),
                None => Looked::Unchanged,
            })
            .collect();
        let unchanged = looked
            .iter()
            .filter(|looked| matches!(looked, Looked::Unchanged))
            .count();
        // A row the read did not account for is not taken as unchanged: the chunk is written
        // with the guard, as without a lookup.
        if i64::try_from(unchanged).ok() != Some(unchanged_count) {
            return Ok(None);
        }
        Ok(Some(looked))
    }
}

/// The rows a write left alone, read with their natural keys, found by natural key or id.
struct StoppingRows<'s> {
    by_key: HashMap<&'s [Option<String>], &'s StoredRow>,
    by_id: HashMap<&'s str, &'s StoredRow>,
}

impl<'s> StoppingRows<'s> {
    fn new(stored: &'s [StoredRow]) -> Self {
        StoppingRows {
            by_key: stored
                .iter()
                .filter_map(|row| Some((row.natural_key.as_deref()?, row)))
                .collect(),
            by_id: stored.iter().map(|row| (row.id.as_str(), row)).collect(),
        }
    }

    /// The row a write of `doc` met: the one under its id, else the one holding its natural
    /// key (the engine's rule, [`crate::engine::Reply::Stopped`]).
    fn stopping(&self, doc: &LightRow) -> Option<&'s StoredRow> {
        self.by_id
            .get(doc.id_text.as_str())
            .or_else(|| self.by_key.get(doc.key_texts.as_slice()))
            .copied()
    }
}

/// Whether each stored row is the one under the id of one of `docs`, or holds one's natural key
/// byte for byte: one pass over each through sets, not every row against every document.
fn stops_any<'d>(docs: &'d [&PreparedRow]) -> impl Fn(&StoredRow) -> bool + 'd {
    let ids: HashSet<&str> = docs.iter().map(|doc| doc.id_text.as_str()).collect();
    let keys: HashSet<&[Option<String>]> = docs
        .iter()
        .map(|doc| doc.light.key_texts.as_slice())
        .collect();
    move |row| {
        ids.contains(row.id.as_str())
            || row
                .natural_key
                .as_deref()
                .is_some_and(|key| keys.contains(key))
    }
}

impl<'a, D: MarkerDialect, W: Wire + 'a> SqlDriver<'a, D, W> for MarkerDriver<'a, D, W> {
    fn new(store: &'a Store<D>, wire: &'a W, table: &'a D::Table) -> Self {
        MarkerDriver { store, wire, table }
    }

    /// The update of the tombstone, then (where it wrote nothing) the read of whether the row
    /// is deleted, in one transaction of idem's own, so that the update's lock holds through
    /// the read.
    fn mark_deleted<'s>(
        &'s self,
        id: &'s str,
        tombstone: &'static Field,
        marker: Option<&'s str>,
        document: &'s crate::document::DocumentRef,
    ) -> crate::sql::store::StoreCall<'s, ById<Deletion>> {
        Box::pin(async move {
            let wire = self.wire;
            let column = self.table.column_of(tombstone);
            let shape = column.map_or(ColumnShape::Structured, |index| {
                self.table.columns[index].shape
            });
            let mark = D::mark_deleted_sql(self.table, tombstone);
            let look = D::deleted_sql(self.table, tombstone);
            let update_marker = format!("u{}", ulid::Ulid::generate());
            let marking = [
                Param::Text(Some(id)),
                Param::typed(shape, marker),
                Param::Text(Some(&update_marker)),
            ];
            let by_id = [Param::Text(Some(id))];
            in_transaction::<D, _>(wire, document, async {
                crate::trace::round_trip("UPDATE");
                if wire.execute(&mark, &marking).await? > 0 {
                    return Ok(ById::Answered(Deletion::Deleted));
                }
                crate::trace::round_trip("SELECT");
                let deleted = wire.fetch_optional(&look, &by_id).await?;
                Ok(match deleted.map(|row| row.boolean(0)).transpose()? {
                    Some(Some(true)) => ById::Answered(Deletion::AlreadyDeleted),
                    // Unmarked, yet not updated: cannot be, as the write's lock is held; go again.
                    Some(_) => ById::Changed,
                    None => ById::Missing,
                })
            })
            .await
        })
    }
}
