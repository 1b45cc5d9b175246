//! PostgreSQL's side of the write engine ([`crate::engine`]): one `INSERT … ON CONFLICT`
//! statement per write, whose rows say what it did, and the reading of the stored rows it
//! returns.

use std::collections::HashMap;

use super::dialect::Postgres;
use super::schema::{check_table, send_checked};
use super::table::{missed_guard, quote, sql_type, InsertedSignal, Table};
use super::wire::{self, Cells, Param, Wire};
use super::{postgres_error, Store};
use crate::document::DocumentRef;
use crate::engine::by_id::ById;
use crate::error::ErrorKind;
use crate::model::{Field, ID_FIELD};
use crate::outcome::{Deletion, Outcome};
use crate::sql::dialect::{SqlDialect, SqlDriver};
use crate::sql::reads::stored_row;
use crate::sql::store::restarting;

use crate::engine::batch::{BatchDriver, Fresh, Landing, Looked};
use crate::engine::{Driver, Reply, WriteKind};
use crate::error::Error;
use crate::sql::row::{LightRow, PreparedRow, StoredRow};

/// Writes to one checked table through one client's wire.
pub(crate) struct PgDriver<'a, C> {
    store: &'a Store,
    wire: &'a C,
    table: &'a Table,
}

impl<C: Wire> PgDriver<'_, C> {
    /// Sends one write statement for `rows` and reads what it did to each: written (inserted or
    /// updated), stopped by the guard with the stored row met (under its id, else holding its
    /// natural key), or unseen (stopped by a row the statement's snapshot does not show,
    /// committed meanwhile).
    async fn write_rows(
        &self,
        rows: &[&PreparedRow],
        statement: &str,
        document: &DocumentRef,
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let (wire, table) = (self.wire, self.table);
        let columns = column_arrays(table, rows, document)?;
        let parameters: Vec<Param> = columns.iter().map(|column| Param::Texts(column)).collect();
        let command = (statement, "INSERT … ON CONFLICT");
        let met = |replies: &[C::Row]| !missed_guard(replies);
        let replies = send_checked(wire, table, document, command, &parameters, met).await?;
        let to_error = |source| postgres_error(document, source);
        let mut states = HashMap::with_capacity(replies.len());
        for reply in &replies {
            let Some(incoming) = reply.str(0) else {
                continue;
            };
            let state = match reply.flag(1) {
                Some(inserted) => Reply::Written { inserted },
                None => Reply::Stopped(stored_row(reply, 2, table).map_err(to_error)?),
            };
            states.insert(incoming.to_owned(), state);
        }
        Ok(rows
            .iter()
            .map(|row| states.remove(row.id_text.as_str()).unwrap_or(Reply::Unseen))
            .collect())
    }

    /// The second step over a row another tool wrote: replaces it only while it is as read.
    /// `None`: it changed meanwhile, and the write goes again.
    async fn replace_foreign(
        &self,
        row: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Option<Outcome>, Error> {
        let (wire, table) = (self.wire, self.table);
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
        let replaced = wire
            .write(&table.pinned_replacement, &parameters)
            .await
            .map_err(|source| postgres_error(&row.document(), source))?;
        Ok((!replaced.is_empty()).then_some(Outcome::Updated))
    }

    /// One attempt of [`BatchDriver::insert_fresh`].
    async fn insert_fresh_once(
        &self,
        docs: &[&PreparedRow],
        landing: Landing,
    ) -> Result<Option<Fresh>, Error> {
        let document = &docs[0].document();
        let columns = column_arrays(self.table, docs, document)?;
        let checked = self.table.checked_oids();
        let mut parameters = wire::unnested(&columns, &checked);
        let marks = [landing.after, landing.leaves].map(|mark| mark.map(|mark| mark.to_string()));
        let statement = match landing == Landing::default() {
            true => self.table.fresh_sql(false),
            false => {
                parameters.extend(marks.iter().map(|mark| Param::Text(mark.as_deref())));
                self.table.fresh_sql(true)
            }
        };
        crate::trace::round_trip("INSERT");
        match self.wire.write(statement, &parameters).await {
            Ok(rows) => {
                let inserted = rows.first().and_then(|row| row.int8(0));
                Ok(Some(match inserted {
                    Some(inserted) if inserted == i64::try_from(docs.len()).unwrap_or(-1) => {
                        Fresh::Inserted
                    }
                    // The chunk ahead's insert had not landed: nothing written.
                    Some(-1) => Fresh::Early,
                    // None at all: the guard found the table unchecked, which the guarded
                    // write checks again.
                    _ => Fresh::Met,
                }))
            }
            Err(source) => Err(postgres_error(document, source)),
        }
    }
}

impl<C: Wire> Driver for PgDriver<'_, C> {
    async fn write(
        &self,
        kind: WriteKind,
        docs: &[&PreparedRow],
    ) -> Result<Vec<Reply<StoredRow>>, Error> {
        let (signal, statement) = self.table.write_sql(kind.into());
        let document = &docs[0].document();
        let written = restarting!(
            Postgres,
            self.wire,
            self.write_rows(docs, statement, document)
        );
        let written = match written {
            // A statement saying `old` does not parse on a server before 18, which a store
            // writing to servers of both signals meets without a check (the table it checked
            // on another server, or one `ensure_table` checked there): the check learns this
            // server's signal, and the write goes again in its words. Nothing was written. So
            // does one saying `xmax` on a partitioned table before 18 (0A000: "cannot retrieve a
            // system column in this context"), met before the check of the schema it is in.
            Err(error)
                if (signal == InsertedSignal::OldRow
                    && matches!(error.kind(), ErrorKind::SchemaMismatch { .. }))
                    || (signal == InsertedSignal::Xmax
                        && error.as_backend().and_then(|error| error.code()) == Some("0A000")) =>
            {
                check_table(self.wire, self.table, document).await?;
                match self.table.write_sql(kind.into()) {
                    (again_signal, again) if again_signal != signal => {
                        self.write_rows(docs, again, document).await
                    }
                    _ => Err(error),
                }
            }
            written => written,
        };
        match written {
            // A racing writer inserted this id between the natural-key check and the insert,
            // another tool stored this id under another natural key, or another constraint.
            Err(error) if docs.len() == 1 => {
                Postgres::reply_to_error(error, self.table).map(|reply| vec![reply])
            }
            written => written,
        }
    }

    async fn write_pinned(
        &self,
        doc: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Reply<StoredRow>, Error> {
        match self.replace_foreign(doc, stored).await {
            Ok(Some(_)) => Ok(Reply::Written { inserted: false }),
            Ok(None) => Ok(Reply::Unseen),
            Err(error) => Postgres::reply_to_error(error, self.table),
        }
    }

    async fn read_conflict(&self, doc: &PreparedRow) -> Result<Option<StoredRow>, Error> {
        crate::trace::round_trip("SELECT");
        let to_error = |source| postgres_error(&doc.document(), source);
        let found = self
            .wire
            .fetch_all(
                &self.table.select_stored_by_id(),
                &[Param::Text(Some(&doc.id_text))],
            )
            .await
            .map_err(to_error)?;
        let found = found.first().map(|found| stored_row(found, 0, self.table));
        found.transpose().map_err(to_error)
    }

    crate::sql::reads_rows_as_sql!();
}

impl<C: Wire> BatchDriver for PgDriver<'_, C> {
    fn chunk(&self) -> usize {
        self.store.batch_chunk
    }

    crate::sql::prepares_rows_as_sql!();

    /// Started over after a conflict with another writer outside the caller's transaction, as
    /// a write is.
    async fn insert_fresh(
        &self,
        docs: &[&PreparedRow],
        landing: Landing,
    ) -> Result<Option<Fresh>, Error> {
        restarting!(Postgres, self.wire, self.insert_fresh_once(docs, landing))
    }

    async fn look_up(&self, docs: &[&LightRow]) -> Result<Option<Vec<Looked<StoredRow>>>, Error> {
        let Some(sql) = &self.table.unchanged_probe else {
            return Ok(None);
        };
        let document = &docs[0].document();
        // In the statement's order: the ids, the hashes, the version keys (where the table has
        // them), each natural-key column.
        let ids: Vec<Option<&str>> = docs.iter().map(|doc| Some(doc.id_text.as_str())).collect();
        let hashes: Vec<Option<&[u8]>> = docs
            .iter()
            .map(|doc| Some(&doc.content_hash.as_bytes()[..]))
            .collect();
        let version_keys: Vec<Option<&str>> =
            docs.iter().map(|doc| doc.version_key.as_deref()).collect();
        let keys: Vec<Vec<Option<&str>>> = (0..self.table.model.natural_key_fields().count())
            .map(|key| {
                docs.iter()
                    .map(|doc| doc.key_texts.get(key).and_then(|text| text.as_deref()))
                    .collect()
            })
            .collect();
        let mut parameters = vec![Param::Texts(&ids), Param::Byteas(&hashes)];
        if self.table.sends_version_keys() {
            parameters.push(Param::Texts(&version_keys));
        }
        parameters.extend(keys.iter().map(|column| Param::Texts(column)));
        let met = |replies: &[C::Row]| !missed_guard(replies);
        let (wire, table) = (self.wire, self.table);
        let replies = send_checked(wire, table, document, (sql, "SELECT"), &parameters, met);
        let replies = replies.await?;
        let to_error = |source| postgres_error(document, source);
        let mut found: HashMap<&str, Option<StoredRow>> = HashMap::with_capacity(replies.len());
        for reply in &replies {
            let Some(incoming) = reply.str(0) else {
                continue;
            };
            let stored = reply.str(1).map(|_| stored_row(reply, 1, table));
            found.insert(incoming, stored.transpose().map_err(to_error)?);
        }
        Ok(Some(
            docs.iter()
                .map(|doc| match found.remove(doc.id_text.as_str()) {
                    Some(stored) => Looked::Stored(stored),
                    None => Looked::Unchanged,
                })
                .collect(),
        ))
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

impl<'a, C: Wire + 'a> SqlDriver<'a, Postgres, C> for PgDriver<'a, C> {
    fn new(store: &'a Store, wire: &'a C, table: &'a Table) -> Self {
        PgDriver { store, wire, table }
    }

    /// One statement: the update where the row is not deleted, and whether the row is stored
    /// and deleted, read in the same snapshot.
    fn mark_deleted<'s>(
        &'s self,
        id: &'s str,
        tombstone: &'static Field,
        marker: Option<&'s str>,
        document: &'s crate::document::DocumentRef,
    ) -> crate::sql::store::StoreCall<'s, ById<Deletion>> {
        Box::pin(async move {
            let table = self.table;
            let column = table
                .column_of(tombstone)
                .map(|index| &table.columns[index]);
            // Bound as text and cast to the column's type, as every value of a PostgreSQL write.
            let sql_type = column.map_or("jsonb", sql_type);
            let sql = format!(
                "WITH marked AS (UPDATE {name} SET {tomb} = $2::text::{sql_type} \
                 WHERE {id} = $1 AND {tomb} IS NULL RETURNING 1) \
                 SELECT (SELECT count(*) FROM marked) AS marked, \
                 (SELECT {tomb} IS NOT NULL FROM {name} WHERE {id} = $1) AS deleted",
                name = table.name(),
                tomb = quote(tombstone.stored_name()),
                id = quote(ID_FIELD),
            );
            let parameters = [Param::Text(Some(id)), Param::Text(marker)];
            crate::trace::round_trip("UPDATE");
            let row = self
                .wire
                .write(&sql, &parameters)
                .await
                .and_then(|rows| wire::one(rows, "UPDATE"))
                .map_err(|source| postgres_error(document, source))?;
            let marked = row.int8(0).unwrap_or(0);
            Ok(match (marked, row.flag(1)) {
                (1.., _) => ById::Answered(Deletion::Deleted),
                (_, Some(true)) => ById::Answered(Deletion::AlreadyDeleted),
                // Unmarked in the statement's snapshot, yet not updated: a racing delete marked it
                // after the snapshot (the update re-checks the newest version of the row, the read
                // sees the snapshot). Going again sees the marker.
                (_, Some(false)) => ById::Changed,
                (_, None) => ById::Missing,
            })
        })
    }
}
