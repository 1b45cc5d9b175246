//! SQLite's side of the write engine ([`crate::engine`]): one `INSERT … ON CONFLICT … RETURNING`
//! per chunk, telling the rows it inserted from those it updated by the write marker each
//! statement sets (SQLite has no `xmax`), then one `SELECT` of the rows it left alone, both in
//! one savepoint: the write lock taken by the first is held through the second, so what the
//! second reads is what stopped the first.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{Row, SqliteConnection};
use tokio::sync::Mutex;

use super::errors::{sqlite_error, unique_conflict};
use super::table::{Statement, Table};
use super::{bind_row, Store};
use crate::engine::batch::{BatchDriver, Fresh, Landing, Looked};
use crate::engine::{Conflict, Driver, Reply, WriteKind};
use crate::error::Error;
use crate::sql::layout::Content;
use crate::sql::row::{LightRow, PreparedRow, StoredRow};

/// Writes to one checked table through one connection.
pub(super) struct SqliteDriver<'a, 'c> {
    pub store: &'a Store,
    pub connection: &'a Mutex<&'c mut SqliteConnection>,
    pub table: &'a Table,
}

impl SqliteDriver<'_, '_> {
    /// The reply of a write of one row that failed with `error`: a unique index it met (named
    /// as the schema names it: SQLite's message names only its columns), or a value of the row
    /// SQLite refuses; any other error concerns the call.
    async fn reply_to_error(&self, error: Error) -> Result<Reply<StoredRow>, Error> {
        match unique_conflict(&error, self.table) {
            Some(Conflict::Other { index: columns }) => {
                let mut connection = self.connection.lock().await;
                let index = index_on(&mut connection, self.table, &columns)
                    .await
                    .unwrap_or(columns);
                Ok(Reply::Conflict(Conflict::Other { index }))
            }
            Some(conflict) => Ok(Reply::Conflict(conflict)),
            None if crate::engine::refuses_a_document(&error) => Ok(Reply::Refused(error)),
            None => Err(error),
        }
    }

    /// One write of `docs` and the read of the rows it left alone, in one savepoint.
    async fn write_and_read(
        &self,
        statement: Statement,
        docs: &[&PreparedRow],
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let document = &docs[0].document();
        let nonce = ulid::Ulid::generate().to_string();
        let insert_marker = super::shared_text(&format!("i{nonce}"));
        let update_marker = format!("u{nonce}");
        let sql = self.table.write_sql(statement, docs.len());
        let inserted = self.table.inserted(statement);
        let mut connection = self.connection.lock().await;
        let connection: &mut SqliteConnection = &mut connection;
        savepoint(connection, document).await?;
        let written = async {
            let mut query = sqlx::query(super::statement(&sql));
            for doc in docs {
                query =
                    bind_row(query, self.table, doc, &inserted).bind(Arc::clone(&insert_marker));
            }
            if statement != Statement::InsertNew {
                query = query.bind(&update_marker);
            }
            crate::trace::round_trip("INSERT … ON CONFLICT");
            let rows = query.fetch_all(&mut *connection).await?;
            let written: HashMap<String, bool> = rows
                .iter()
                .map(|row| {
                    let marker: Option<String> = row.get(1);
                    (row.get(0), marker.as_deref() == Some(&*insert_marker))
                })
                .collect();
            let left: Vec<&&PreparedRow> = docs
                .iter()
                .filter(|doc| !written.contains_key(doc.id_text.as_str()))
                .collect();
            let stored = match left.is_empty() {
                true => Vec::new(),
                false => {
                    let left: Vec<&LightRow> = left.into_iter().map(|doc| &doc.light).collect();
                    select_stored(connection, self.table, &left).await?
                }
            };
            Ok::<_, sqlx::Error>((written, stored))
        }
        .await;
        let (written, stored) = finish(connection, written, document).await?;
        let stopping = StoppingRows::new(&stored);
        // The read ran under the write's lock: a row it found that stops none of `docs` by id or
        // by natural key byte for byte is one the natural key's unique index took for another
        // spelling of a key (a collation that is not `BINARY`, in a table changed since its
        // check). Such a key conflict never resolves: it is a refusal naming the index.
        let mut respelled = None;
        if !stored.is_empty() && !stored.iter().all(stops_any(docs)) {
            let columns = self.table.natural_key_names().join(", ");
            respelled = Some(
                index_on(connection, self.table, &columns)
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
}

impl Driver for SqliteDriver<'_, '_> {
    type Doc = PreparedRow;
    type Light = LightRow;
    type Stored = StoredRow;

    fn light_of<'d>(&self, doc: &'d PreparedRow) -> &'d LightRow {
        &doc.light
    }

    async fn write(
        &self,
        kind: WriteKind,
        docs: &[&PreparedRow],
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let statement = match kind {
            WriteKind::Upsert => Statement::Upsert,
            WriteKind::Delete => Statement::Delete,
            WriteKind::Record | WriteKind::InsertNew => Statement::InsertNew,
        };
        match self.write_and_read(statement, docs).await {
            Ok(replies) => Ok(replies),
            Err(error) if docs.len() == 1 => {
                self.reply_to_error(error).await.map(|reply| vec![reply])
            }
            Err(error) => Err(error),
        }
    }

    async fn write_pinned(
        &self,
        doc: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Reply<StoredRow>, Error> {
        let sql = self.table.pinned_sql();
        let all: Vec<usize> = (0..self.table.sent.len()).collect();
        let mut query = bind_row(sqlx::query(super::statement(&sql)), self.table, doc, &all);
        query = query
            .bind(format!("u{}", ulid::Ulid::generate()))
            .bind(doc.id_text.as_str());
        for pinned in doc.pinned_parameters(self.table, stored) {
            // A float read back as its shortest exact text ([`super::table::cell_text`]), bound
            // as the float: SQLite's text of it has 15 significant digits.
            let exact = (pinned.text.as_deref())
                .filter(|_| pinned.float)
                .map(str::parse::<f64>);
            query = match exact {
                Some(Ok(float)) => query.bind(float),
                _ => query.bind(pinned.text),
            };
        }
        let mut connection = self.connection.lock().await;
        crate::trace::round_trip("UPDATE");
        match query.fetch_optional(&mut **connection).await {
            Ok(Some(_)) => Ok(Reply::Written { inserted: false }),
            Ok(None) => Ok(Reply::Unseen),
            Err(source) => {
                self.reply_to_error(sqlite_error(&doc.document(), source))
                    .await
            }
        }
    }

    async fn read_conflict(&self, doc: &PreparedRow) -> Result<Option<StoredRow>, Error> {
        let mut connection = self.connection.lock().await;
        let stored = select_stored(&mut connection, self.table, &[&doc.light])
            .await
            .map_err(|source| sqlite_error(&doc.document(), source))?;
        Ok(StoppingRows::new(&stored).stopping(&doc.light).cloned())
    }

    crate::sql::reads_rows_as_sql!();
}

impl BatchDriver for SqliteDriver<'_, '_> {
    fn chunk(&self) -> usize {
        self.store.batch_chunk.min(self.table.max_rows())
    }

    fn shortcut_min_docs(&self) -> usize {
        self.store.shortcut_min_docs
    }

    async fn ready(&self) -> Result<(), Error> {
        Ok(())
    }

    crate::sql::prepares_rows_as_sql!();

    async fn read_many(
        &self,
        _docs: &[&PreparedRow],
    ) -> Result<Option<Vec<Option<StoredRow>>>, Error> {
        // The write reads the rows it left alone: nothing to read first.
        Ok(None)
    }

    /// One chunk in flight: `landing` is empty ([`BatchDriver::insert_fresh`]).
    async fn insert_fresh(
        &self,
        docs: &[&PreparedRow],
        _landing: Landing,
    ) -> Result<Option<Fresh>, Error> {
        let document = &docs[0].document();
        // One text shared by every row's argument.
        let marker = super::shared_text(&format!("i{}", ulid::Ulid::generate()));
        let sql = self.table.fresh_sql(docs.len());
        let inserted = self.table.inserted(Statement::Upsert);
        let mut connection = self.connection.lock().await;
        let connection: &mut SqliteConnection = &mut connection;
        savepoint(connection, document).await?;
        let mut query = sqlx::query(super::statement(&sql));
        for doc in docs {
            query = bind_row(query, self.table, doc, &inserted).bind(Arc::clone(&marker));
        }
        crate::trace::round_trip("INSERT");
        let met = match query.execute(&mut *connection).await {
            Ok(done) if done.rows_affected() == docs.len() as u64 => {
                finish_with(connection, Ok(()), document).await?;
                return Ok(Some(Fresh::Inserted));
            }
            // Fewer rows without an error: a trigger dropped some.
            Ok(_) => None,
            Err(source) => Some(sqlite_error(document, source)),
        };
        roll_back(connection).await;
        match met {
            Some(error) => Err(error),
            None => Ok(Some(Fresh::Met)),
        }
    }

    /// One read ([`Table::look_up_sql`]): the rows stored with the same id, natural key,
    /// content hash and version key settle `Unchanged` with no write statement and no write lock; each other row with what
    /// it meets, which the engine judges before anything is written.
    async fn look_up(&self, docs: &[&LightRow]) -> Result<Option<Vec<Looked<StoredRow>>>, Error> {
        let document = &docs[0].document();
        let contents = self.table.compared_contents();
        let sql = self.table.look_up_sql(docs.len());
        let mut query = sqlx::query(super::statement(&sql));
        for doc in docs {
            query = query.bind(super::shared_text(&doc.id_text));
            for content in &contents {
                let text = match content {
                    Content::Hash => Some(doc.hash.as_str()),
                    Content::VersionKey => doc.version_key.as_deref(),
                    // Not among the compared contents.
                    _ => None,
                };
                query = query.bind(text.map(super::shared_text));
            }
            query = bind_keys(query, self.table, doc);
        }
        crate::trace::round_trip("SELECT");
        let rows = {
            let mut connection = self.connection.lock().await;
            query.fetch_all(&mut **connection).await
        };
        let to_error = |source| sqlite_error(document, source);
        let rows = rows.map_err(to_error)?;
        let mut stopping: HashMap<String, StoredRow> = HashMap::with_capacity(rows.len());
        let mut meeting_none = String::new();
        let mut unchanged_count = 0_i64;
        for row in &rows {
            match row.try_get::<Option<String>, _>(0).map_err(to_error)? {
                Some(incoming) => {
                    stopping.insert(incoming, stored_row(row, 1, self.table).map_err(to_error)?);
                }
                None => {
                    meeting_none = row
                        .try_get::<Option<String>, _>(1)
                        .map_err(to_error)?
                        .unwrap_or_default();
                    unchanged_count = row
                        .try_get::<Option<i64>, _>(2)
                        .map_err(to_error)?
                        .unwrap_or(0);
                }
            }
        }
        let meeting_none: HashSet<&str> = meeting_none.split(',').collect();
        // A row met by a natural key that is not the incoming one byte for byte (a collation
        // that is not `BINARY`, in a table changed since its check): the guarded write answers
        // for it, as it answers a single write.
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

/// Opens idem's savepoint: a transaction of its own outside the caller's, a nested one inside.
pub(super) async fn savepoint(
    connection: &mut SqliteConnection,
    document: &crate::document::DocumentRef,
) -> Result<(), Error> {
    sqlx::query("SAVEPOINT idem")
        .execute(&mut *connection)
        .await
        .map(drop)
        .map_err(|source| sqlite_error(document, source))
}

/// Releases idem's savepoint after `outcome`, or rolls back to it on an error, so that a failed
/// statement leaves neither a half-written batch nor an open transaction.
pub(super) async fn finish<R>(
    connection: &mut SqliteConnection,
    outcome: Result<R, sqlx::Error>,
    document: &crate::document::DocumentRef,
) -> Result<R, Error> {
    let outcome = outcome.map_err(|source| sqlite_error(document, source));
    finish_with(connection, outcome, document).await
}

/// [`finish`] for an outcome whose error is idem's already.
pub(super) async fn finish_with<R>(
    connection: &mut SqliteConnection,
    outcome: Result<R, Error>,
    document: &crate::document::DocumentRef,
) -> Result<R, Error> {
    match outcome {
        Ok(value) => {
            let released = sqlx::query("RELEASE idem").execute(&mut *connection).await;
            if let Err(source) = released {
                // Not released (a busy commit): undone, so that no write of it is left open.
                roll_back(connection).await;
                return Err(sqlite_error(document, source));
            }
            Ok(value)
        }
        Err(error) => {
            roll_back(connection).await;
            Err(error)
        }
    }
}

/// Undoes what was written since idem's savepoint, and closes it. Only after a failure, which
/// is the error to report: the rollback's own failure would hide it.
async fn roll_back(connection: &mut SqliteConnection) {
    let _ = sqlx::query("ROLLBACK TO idem; RELEASE idem")
        .execute(&mut *connection)
        .await;
}

/// The stored state of the rows under `docs`' ids or holding their natural keys.
pub(super) async fn select_stored(
    connection: &mut SqliteConnection,
    table: &Table,
    docs: &[&LightRow],
) -> Result<Vec<StoredRow>, sqlx::Error> {
    let sql = table.select_stored_sql(docs.len());
    let mut query = sqlx::query(super::statement(&sql));
    for doc in docs {
        query = query.bind(super::shared_text(&doc.id_text));
    }
    for doc in docs {
        query = bind_keys(query, table, doc);
    }
    crate::trace::round_trip("SELECT");
    let rows = query.fetch_all(&mut *connection).await?;
    rows.iter().map(|row| stored_row(row, 0, table)).collect()
}

/// `query` with `doc`'s natural-key values bound, each as its column holds it, so that a
/// comparison with the column meets the key's index.
fn bind_keys<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    table: &Table,
    doc: &'q LightRow,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    for (field, text) in table.model.natural_key_fields().zip(&doc.key_texts) {
        let shape = table
            .column_of(field)
            .map_or(crate::column::ColumnShape::Text, |index| {
                table.columns[index].shape
            });
        query = super::bind_text(query, shape, text.as_deref());
    }
    query
}

/// The stored row in `row`'s columns from `at` to the last: its stored state (the id first),
/// then its natural-key columns as text.
fn stored_row(
    row: &sqlx::sqlite::SqliteRow,
    at: usize,
    table: &Table,
) -> Result<StoredRow, sqlx::Error> {
    let keys = table.model.natural_key_fields().count();
    let texts: Vec<Option<String>> = (at..row.len())
        .map(|index| match index - at {
            1 => None,
            _ => super::table::cell_text(row, index).ok().flatten(),
        })
        .collect();
    let tombstoned: bool = row.try_get::<Option<bool>, _>(at + 1)?.unwrap_or(false);
    let mut stored = StoredRow::from_texts(table.model, &texts[..texts.len() - keys], tombstoned);
    stored.natural_key = Some(texts[texts.len() - keys..].to_vec());
    Ok(stored)
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

/// The name of the unique index of `table` on exactly `columns` (as a violation lists them,
/// comma-separated), if there is one.
async fn index_on(
    connection: &mut SqliteConnection,
    table: &Table,
    columns: &str,
) -> Option<String> {
    let mut wanted: Vec<&str> = columns.split(", ").collect();
    wanted.sort_unstable();
    let sql = "SELECT l.name FROM pragma_index_list(?1) l WHERE l.\"unique\" AND \
               (SELECT group_concat(name, ',') FROM (SELECT i.name FROM pragma_index_info(l.name) \
               i ORDER BY i.name)) = ?2";
    crate::trace::round_trip("SELECT");
    sqlx::query_scalar(sql)
        .bind(table.model.collection())
        .bind(wanted.join(","))
        .fetch_optional(&mut *connection)
        .await
        .ok()
        .flatten()
}
