//! PostgreSQL's side of the write engine ([`crate::engine`]): one `INSERT … ON CONFLICT`
//! statement per write, whose rows say what it did, and the reading of the stored rows it
//! returns.

use std::collections::HashMap;

use super::schema::check_again;
use super::table::{missed_guard, Table};
use super::wire::{self, Param, PgCells, PgWire};
use super::{column_arrays, postgres_error, unique_conflict, RowState, Store};
use crate::engine::batch::{BatchDriver, Fresh, Landing, Looked};
use crate::engine::{Driver, Reply, WriteKind};
use crate::error::Error;
use crate::model::Model;
use crate::sql::row::{LightRow, PreparedRow, StoredRow};

/// Writes to one checked table through one client.
pub(super) struct PgDriver<'a, C> {
    pub store: &'a Store,
    pub client: &'a C,
    pub table: &'a Table,
}

impl<C: PgWire> PgDriver<'_, C> {
    /// The reply of a write of one row that failed with `error`: a unique constraint it met, or
    /// a value of the row the server refuses; any other error concerns the call.
    fn reply_to_error(&self, error: Error) -> Result<Reply<StoredRow>, Error> {
        match unique_conflict(&error, self.table) {
            Some(conflict) => Ok(Reply::Conflict(conflict)),
            None if crate::engine::refuses_a_document(&error) => Ok(Reply::Refused(error)),
            None => Err(error),
        }
    }
}

impl<C: PgWire> Driver for PgDriver<'_, C> {
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
            WriteKind::Upsert => &self.table.upsert,
            WriteKind::Delete => &self.table.delete,
            WriteKind::Record | WriteKind::InsertNew => &self.table.insert_new,
        };
        let document = &docs[0].document();
        match self
            .store
            .write_rows(self.client, self.table, docs, statement, document)
            .await
        {
            Ok(states) => Ok(states.into_iter().map(reply).collect()),
            // A racing writer inserted this id between the natural-key check and the insert,
            // another tool stored this id under another natural key, or another constraint.
            Err(error) if docs.len() == 1 => self.reply_to_error(error).map(|reply| vec![reply]),
            Err(error) => Err(error),
        }
    }

    async fn write_pinned(
        &self,
        doc: &PreparedRow,
        stored: &StoredRow,
    ) -> Result<Reply<StoredRow>, Error> {
        match self
            .store
            .replace_foreign(self.client, self.table, doc, stored)
            .await
        {
            Ok(Some(_)) => Ok(Reply::Written { inserted: false }),
            Ok(None) => Ok(Reply::Unseen),
            Err(error) => self.reply_to_error(error),
        }
    }

    async fn read_conflict(&self, doc: &PreparedRow) -> Result<Option<StoredRow>, Error> {
        crate::trace::round_trip("SELECT");
        let found = self
            .client
            .fetch_all(
                &self.table.select_stored_by_id(),
                &[Param::Text(Some(&doc.id_text))],
            )
            .await
            .map_err(|source| postgres_error(&doc.document(), source))?;
        Ok(found
            .first()
            .map(|found| read_stored_with_key(found, 0, self.table.model)))
    }

    crate::sql::reads_rows_as_sql!();
}

impl<C: PgWire> BatchDriver for PgDriver<'_, C> {
    fn chunk(&self) -> usize {
        self.store.batch_chunk
    }

    fn shortcut_min_docs(&self) -> usize {
        self.store.shortcut_min_docs
    }

    fn chunks_in_flight(&self) -> usize {
        match self.store.pipelining && self.client.pipelines_chunks() {
            true => 2,
            false => 1,
        }
    }

    async fn ready(&self) -> Result<(), Error> {
        // The table was checked before the documents were prepared for it.
        Ok(())
    }

    crate::sql::prepares_rows_as_sql!();

    async fn read_many(
        &self,
        _docs: &[&PreparedRow],
    ) -> Result<Option<Vec<Option<StoredRow>>>, Error> {
        // The statement returns the rows its guard stopped: nothing to read first.
        Ok(None)
    }

    async fn insert_fresh(
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
            true => &self.table.insert_fresh,
            false => {
                parameters.extend(marks.iter().map(|mark| Param::Text(mark.as_deref())));
                &self.table.insert_fresh_marked
            }
        };
        crate::trace::round_trip("INSERT");
        match self.client.write(statement, &parameters).await {
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
        let mut checked_again = false;
        let replies = loop {
            let checked = self.table.checked_oids();
            let mut parameters = vec![Param::Texts(&ids), Param::Byteas(&hashes)];
            if self.table.sends_version_keys() {
                parameters.push(Param::Texts(&version_keys));
            }
            parameters.extend(keys.iter().map(|column| Param::Texts(column)));
            parameters.push(Param::Oids(&checked));
            crate::trace::round_trip("SELECT");
            let replies = self
                .client
                .fetch_all(sql, &parameters)
                .await
                .map_err(|source| postgres_error(document, source))?;
            if !missed_guard(&replies) {
                break replies;
            }
            check_again(self.client, self.table, document, &mut checked_again).await?;
        };
        let mut found: HashMap<&str, Option<StoredRow>> = HashMap::with_capacity(replies.len());
        for reply in &replies {
            let Some(incoming) = reply.str(0) else {
                continue;
            };
            let stored = reply
                .str(1)
                .is_some()
                .then(|| read_stored_with_key(reply, 1, self.table.model));
            found.insert(incoming, stored);
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

/// A statement's answer for one row, as the engine reads it.
fn reply(state: RowState) -> Reply<StoredRow> {
    match state {
        RowState::Written { inserted } => Reply::Written { inserted },
        RowState::Stopped(stored) => Reply::Stopped(*stored),
        RowState::Unseen => Reply::Unseen,
    }
}

/// [`read_stored`], followed by the row's natural key as text in the columns after it, up to
/// the last: what a read by id returns.
pub(super) fn read_stored_with_key<R: PgCells>(row: &R, at: usize, model: &Model) -> StoredRow {
    let (mut stored, keys) = read_stored(row, at, model);
    stored.natural_key = Some(
        (keys..row.len())
            .map(|at| row.str(at).map(str::to_owned))
            .collect(),
    );
    stored
}

/// The stored state in `row`'s columns from `at` on: id, deleted, hash, digests, version key,
/// each guarded field's text, then the version field's for a type with versions
/// ([`Table`]'s stored state). Returns the row and the column after it.
pub(super) fn read_stored<R: PgCells>(row: &R, at: usize, model: &Model) -> (StoredRow, usize) {
    let guarded = model.digested_fields().count();
    let next = at + 5 + guarded + usize::from(model.version_field().is_some());
    let texts: Vec<Option<String>> = (at..next)
        .map(|index| match index == at + 1 {
            true => None,
            false => row.str(index).map(str::to_owned),
        })
        .collect();
    let tombstoned = row.flag(at + 1).unwrap_or(false);
    (StoredRow::from_texts(model, &texts, tombstoned), next)
}
