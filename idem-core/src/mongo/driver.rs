//! MongoDB's side of the write engine ([`crate::engine`]): a single write is one
//! `findAndModify` whose returned document says what it did (its write marker); a batch is one
//! `update` command per chunk (more if it exceeds the server's command size), after one read of
//! the chunk's stored state, since an `update` reply does not return the documents its guard
//! left alone.
//!
//! Both state the guard in an update pipeline. On a server without update pipelines (told by
//! the store's option, or learned from its refusal of the first one) an upsert reads first, and
//! writes with operators only: an `insert` of the documents not stored, and for each document
//! the verdict replaces, a replacement pinned to what was read.

use std::collections::HashMap;

use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;
use mongodb::Collection;
use serde::Serialize;
use serde_json::Value;

use super::batch::{
    refused_by_server, reply_count, upsert_statement, upserted, write_commands, write_errors,
};
use super::compare::{bson_equal, show};
use super::errors::Naming;
use super::errors::{refused_update_pipelines, refuses_update_pipelines, server_code};
use super::write::{is_tombstoned, stored_id_text, PreparedWrite};
use super::{
    collect, duplicate_key_message, find_by_id, index_in_message, is_duplicate_key, mongo_error,
    Store, DUPLICATE_KEY,
};
use crate::document::DocumentRef;
use crate::engine::batch::BatchDriver;
use crate::engine::{self, Conflict, Driver, Reply, StoredDigest, WriteKind};
use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model, ID_FIELD, VERSION_KEY_FIELD};
use crate::verdict::StoredVersion;

/// Writes one type's documents to its collection.
pub(super) struct MongoDriver<'a> {
    pub store: &'a Store,
    pub model: &'static Model,
    pub collection: Collection<Document>,
    /// Upserts go as `update` commands (a batch, whose reply counts what it wrote) rather than
    /// one `findAndModify` each.
    pub batched: bool,
}

impl MongoDriver<'_> {
    /// Whether upserts state their guard in an update pipeline.
    fn pipelines(&self) -> bool {
        self.store.uses_update_pipelines()
    }

    /// Which index a duplicate-key error names: the id's or the natural key's (what is stored
    /// there decides), another (a permanent refusal), or none the message shows.
    fn conflict(&self, message: &str) -> Conflict {
        match index_in_message(message) {
            index if index == "_id_" || index == self.store.natural_key_index(self.model) => {
                Conflict::Key
            }
            index if index == "(unnamed)" => Conflict::Unclear { index },
            index => Conflict::Other { index },
        }
    }

    /// The reply of a write the server refused with `error`: a conflict on a unique index, else
    /// the call's error.
    fn failed(
        &self,
        write: &PreparedWrite,
        error: mongodb::error::Error,
    ) -> Result<Reply<Document>, Error> {
        match is_duplicate_key(&error) {
            true => Ok(Reply::Conflict(
                self.conflict(duplicate_key_message(&error)),
            )),
            false => Err(mongo_error(&write.document(), error)),
        }
    }

    /// The reply of a statement the server refused with `error` (a write error of a command's
    /// reply): a conflict on a unique index, else a refusal of `write` alone.
    fn statement_refused(&self, write: &PreparedWrite, error: &Document) -> Reply<Document> {
        match error.get_i32("code").ok() {
            Some(DUPLICATE_KEY) => {
                Reply::Conflict(self.conflict(error.get_str("errmsg").unwrap_or_default()))
            }
            _ => Reply::Refused(refused_by_server(&write.document(), error, "")),
        }
    }

    /// The single upsert: the conditional replacement in one `findAndModify`, which returns the
    /// document as it left it.
    async fn upsert_one(&self, write: &PreparedWrite) -> Result<Reply<Document>, Error> {
        crate::trace::round_trip("findAndModify");
        let after = self
            .collection
            .find_one_and_update(write.upsert_query(), write.conditional_replacement())
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(write.judged_fields())
            .await;
        match after {
            Ok(Some(stored)) => Ok(written_or_stopped(write, stored)),
            // A server that retried a racing insert as an update may return no document. The
            // command took effect; sent again, it reads its own marker back, or what another
            // writer left.
            Ok(None) => Ok(Reply::Unseen),
            Err(error) if server_code(&error).is_some_and(refuses_update_pipelines) => {
                self.store.stop_using_update_pipelines();
                Ok(self.insert_all(&[write]).await?.remove(0))
            }
            Err(error) => self.failed(write, error),
        }
    }

    /// Upserts without an update pipeline: one insert of `writes`, whose documents already
    /// stored collide on their id (or natural key), and are judged from a read and replaced
    /// pinned to it ([`Driver::guards_on_server`]).
    async fn insert_all(&self, writes: &[&PreparedWrite]) -> Result<Vec<Reply<Document>>, Error> {
        let documents = writes.iter().map(|write| write.inserted_document());
        let documents = documents.enumerate().collect();
        let mut refused = self.store.insert_documents(self.model, documents).await?;
        Ok(writes
            .iter()
            .enumerate()
            .map(|(index, write)| match refused.remove(&index) {
                None => Reply::Written { inserted: true },
                Some(error) => self.statement_refused(write, &error),
            })
            .collect())
    }

    /// `insert_new`: one `update` command whose statements insert each member unless its id
    /// and natural key are stored (`$setOnInsert`, operators only). A member stored so is
    /// matched and left alone; a duplicate key means its id or natural key holds another
    /// document, which the engine reads.
    async fn insert_missing(
        &self,
        writes: &[&PreparedWrite],
    ) -> Result<Vec<Reply<Document>>, Error> {
        let statements: Vec<(usize, Document)> = (writes.iter())
            .map(|write| {
                let insert = doc! { "$setOnInsert": write.inserted_document() };
                upsert_statement(write.query(), insert)
            })
            .enumerate()
            .collect();
        let limits = self.store.limits_for(self.model, &statements).await?;
        let sent = self
            .store
            .send_statements(self.model, ("update", "updates"), statements, limits)
            .await?;
        // Every statement is in one of the commands sent.
        let mut replies: Vec<Reply<Document>> = writes.iter().map(|_| Reply::Unseen).collect();
        for (indexes, reply) in &sent {
            for (index, answered) in self.update_replies(writes, indexes, reply) {
                replies[index] = answered;
            }
        }
        Ok(replies)
    }

    /// The reply of each statement of an `update` command (`indexes`: their writes' indexes in
    /// `writes`) from the command's `reply`: refused, or written, inserted or not.
    fn update_replies<'r>(
        &'r self,
        writes: &'r [&PreparedWrite],
        indexes: &'r [usize],
        reply: &'r Document,
    ) -> impl Iterator<Item = (usize, Reply<Document>)> + 'r {
        let (errors, upserted) = (write_errors(reply), upserted(reply));
        (indexes.iter().enumerate()).map(move |(statement, &index)| {
            let answered = match errors.get(&statement) {
                Some(error) => self.statement_refused(writes[index], error),
                None => Reply::Written {
                    inserted: upserted.contains(&statement),
                },
            };
            (index, answered)
        })
    }

    /// `record`: inserts the event unless its idempotency key is stored, in one
    /// `findAndModify` whose after-image says who stored the key: this write if it carries this
    /// write's id. A before-image would not: a server that retries a racing upsert internally
    /// as an update returns none, as if this write had inserted.
    async fn record_one(&self, write: &PreparedWrite) -> Result<Reply<Document>, Error> {
        crate::trace::round_trip("findAndModify");
        let after = self
            .collection
            .find_one_and_update(
                write.natural_key_filter(),
                doc! { "$setOnInsert": write.inserted_document() },
            )
            .upsert(true)
            .collation(super::schema::simple_collation())
            .return_document(ReturnDocument::After)
            .await;
        match after {
            Ok(Some(stored)) if stored_id_text(&stored).as_deref() == Some(&write.id_text) => {
                Ok(Reply::Written { inserted: true })
            }
            Ok(Some(stored)) => Ok(Reply::Stopped(stored)),
            Ok(None) => Ok(Reply::Unseen),
            Err(error) => self.failed(write, error),
        }
    }

    /// `delete`: sets the tombstone where it is not set, or inserts the document deleted.
    async fn delete_one(&self, write: &PreparedWrite) -> Result<Reply<Document>, Error> {
        // As `delete` refused before preparing the write.
        let tombstone = engine::tombstone_field(self.model, &write.document())?;
        engine::check_marked(tombstone, write.tombstone.is_some(), || write.document())?;
        let mut filter = write.query();
        filter.insert(tombstone.stored_name(), doc! { "$eq": Bson::Null });
        let update = doc! {
            "$set": { tombstone.stored_name(): write.tombstone.clone() },
            "$setOnInsert": write.inserted_document(),
        };
        crate::trace::round_trip("update");
        match self
            .collection
            .update_one(filter, update)
            .upsert(true)
            .await
        {
            Ok(result) if result.upserted_id.is_some() => Ok(Reply::Written { inserted: true }),
            Ok(result) if result.matched_count > 0 => Ok(Reply::Written { inserted: false }),
            Ok(_) => Ok(Reply::Unseen),
            Err(error) => self.failed(write, error),
        }
    }

    /// A batch of upserts as `update` commands within the server's limits, each statement the
    /// single upsert's guarded replacement.
    async fn upsert_all(&self, writes: &[&PreparedWrite]) -> Result<Vec<Reply<Document>>, Error> {
        // The guard stays in the update, not the query: some servers answer a query holding
        // `$expr` by scanning the collection.
        let statements = (writes.iter())
            .map(|write| upsert_statement(write.upsert_query(), write.conditional_replacement()));
        let statements: Vec<(usize, Document)> = statements.enumerate().collect();
        // Asked once per store, before the first batch's write.
        let limits = self.store.server_limits(self.model).await?;
        let mut replies: Vec<Option<Reply<Document>>> = writes.iter().map(|_| None).collect();
        for command in write_commands(statements, limits) {
            self.send_updates(writes, command, &mut replies).await?;
        }
        Ok(replies
            .into_iter()
            .map(|reply| reply.unwrap_or(Reply::Unseen))
            .collect())
    }

    /// One `update` command carrying `statements`, and the reply for each.
    async fn send_updates(
        &self,
        writes: &[&PreparedWrite],
        statements: Vec<(usize, Document)>,
        replies: &mut [Option<Reply<Document>>],
    ) -> Result<(), Error> {
        let command = ("update", "updates");
        let (indexes, reply) = self
            .store
            .send_command(self.model, command, statements)
            .await;
        let reply = match reply {
            Err(error) if refused_update_pipelines(&error) => None,
            reply => Some(reply?),
        };
        let errors = reply.as_ref().map(write_errors).unwrap_or_default();
        // Every statement refused with such a code: the shape, not a document (a generic code
        // on some statements only is each one's own refusal, and the others were written).
        let refused_pipelines = errors.len() == indexes.len()
            && errors
                .values()
                .all(|error| error.get_i32("code").is_ok_and(refuses_update_pipelines));
        let (Some(reply), false) = (&reply, refused_pipelines) else {
            // Nothing was written: every statement is the same pipeline.
            self.store.stop_using_update_pipelines();
            let sent: Vec<&PreparedWrite> = indexes.iter().map(|&index| writes[index]).collect();
            for (index, reply) in indexes.into_iter().zip(self.insert_all(&sent).await?) {
                replies[index] = Some(reply);
            }
            return Ok(());
        };
        let mut matched = Vec::new();
        for (index, answered) in self.update_replies(writes, &indexes, reply) {
            if matches!(answered, Reply::Written { inserted: false }) {
                matched.push(index);
            }
            replies[index] = Some(answered);
        }
        // Each statement that matched replaced its document only if the guard let it, and a
        // replacement always changes the document (its write marker is new): when fewer were
        // modified than matched, a writer changed some document since the read, and the markers
        // say which.
        if reply_count(reply, "nModified") != matched.len() {
            let read: Vec<&PreparedWrite> = matched.iter().map(|&index| writes[index]).collect();
            let stored = self.read_stored(&read).await?;
            for (index, stored) in matched.into_iter().zip(stored) {
                let write = writes[index];
                replies[index] = Some(match stored {
                    Some(stored) => written_or_stopped(write, stored),
                    None => Reply::Unseen,
                });
            }
        }
        Ok(())
    }

    /// The stored state of `writes` in one read, in their order.
    async fn read_stored(&self, writes: &[&PreparedWrite]) -> Result<Vec<Option<Document>>, Error> {
        let Some(first) = writes.first() else {
            return Ok(Vec::new());
        };
        let ids: Vec<&str> = writes.iter().map(|write| write.id_text.as_str()).collect();
        crate::trace::round_trip("find");
        // Without update pipelines, a replacement copies the fields other routes own from
        // this read ([`PreparedWrite::pinned_replacement`]).
        let projection = match self.pipelines() {
            true => first.judged_fields(),
            false => first.judged_and_owned_fields(),
        };
        // One document's read carries its natural key, so a collection sharded on it is read on
        // one shard. A chunk's does not: a `{$in}` of each key field beside the ids made the test
        // server's reads of 250 documents 1.8 times slower; it reaches every shard once a chunk.
        // A document under the id with another key is left out: the write meets it on `_id`.
        let mut filter = doc! { ID_FIELD: { "$in": ids } };
        if let [write] = writes {
            filter.extend(write.natural_key_filter());
        }
        let find = self
            .collection
            .find(filter)
            .projection(projection)
            // One more than can match, with the matches as the limit, so the server answers in
            // one batch and closes the cursor instead of leaving a `getMore` to find the end.
            .limit(i64::try_from(writes.len()).unwrap_or(i64::MAX))
            .batch_size(u32::try_from(writes.len() + 1).unwrap_or(u32::MAX));
        let mut stored: HashMap<String, Document> =
            collect(find, &DocumentRef::collection(self.model))
                .await?
                .into_iter()
                .filter_map(|stored| Some((stored.get_str(ID_FIELD).ok()?.to_owned(), stored)))
                .collect();
        Ok(writes
            .iter()
            .map(|write| stored.remove(write.id_text.as_str()))
            .collect())
    }
}

/// The reply of `write` that left `stored` as it is: written, if it holds this write's marker
/// ([`PreparedWrite::written_here`]), else stopped by what is stored.
fn written_or_stopped(write: &PreparedWrite, stored: Document) -> Reply<Document> {
    match write.written_here(&stored) {
        Some(outcome) => Reply::Written {
            inserted: outcome == crate::Outcome::Inserted,
        },
        None => Reply::Stopped(stored),
    }
}

impl Driver for MongoDriver<'_> {
    type Doc = PreparedWrite;
    /// A document is prepared whole: no lookup reads less of it.
    type Light = PreparedWrite;
    type Stored = Document;

    fn light_of<'d>(&self, doc: &'d PreparedWrite) -> &'d PreparedWrite {
        doc
    }

    async fn write(
        &self,
        kind: WriteKind,
        docs: &[&PreparedWrite],
    ) -> Result<Vec<Reply<Document>>, Error> {
        match (kind, docs) {
            (WriteKind::Upsert, writes) if !self.pipelines() => self.insert_all(writes).await,
            (WriteKind::InsertNew, writes) => self.insert_missing(writes).await,
            (WriteKind::Upsert, [write]) if !self.batched => {
                Ok(vec![self.upsert_one(write).await?])
            }
            (WriteKind::Upsert, writes) => self.upsert_all(writes).await,
            (WriteKind::Record | WriteKind::Delete, writes) => {
                let mut replies = Vec::with_capacity(writes.len());
                for write in writes {
                    replies.push(match kind {
                        WriteKind::Record => self.record_one(write).await?,
                        _ => self.delete_one(write).await?,
                    });
                }
                Ok(replies)
            }
        }
    }

    async fn write_pinned(
        &self,
        write: &PreparedWrite,
        stored: &Document,
    ) -> Result<Reply<Document>, Error> {
        crate::trace::round_trip("update");
        let replaced = match self.pipelines() {
            true => {
                self.collection
                    .update_one(write.pinned_query(stored), write.replacement_pipeline())
                    .await
            }
            false => {
                let (query, replacement) = write.pinned_replacement(stored);
                self.collection.replace_one(query, replacement).await
            }
        };
        match replaced {
            Ok(replaced) if replaced.matched_count > 0 => Ok(Reply::Written { inserted: false }),
            Ok(_) => Ok(Reply::Unseen),
            // The first pipeline this store sent (a batch over another tool's documents): it
            // does without from now on, and the write goes again, read with the fields a
            // replacement without a pipeline copies.
            Err(error) if server_code(&error).is_some_and(refuses_update_pipelines) => {
                self.store.stop_using_update_pipelines();
                Ok(Reply::Unseen)
            }
            Err(error) => self.failed(write, error),
        }
    }

    fn guards_on_server(&self, kind: WriteKind) -> bool {
        kind != WriteKind::Upsert || self.pipelines()
    }

    /// One read of the ids (a server may report the natural-key index for a document stored
    /// under the same id), then, for each not found, the reads by id and natural key.
    async fn read_conflicts(
        &self,
        writes: &[&PreparedWrite],
    ) -> Result<Vec<Option<Document>>, Error> {
        if let [write] = writes {
            return Ok(vec![self.read_conflict(write).await?]);
        }
        let mut stored = self.read_stored(writes).await?;
        for (write, found) in writes.iter().zip(&mut stored) {
            if found.is_none() {
                *found = self.read_conflict(write).await?;
            }
        }
        Ok(stored)
    }

    /// The stored document that can block `write`: the one under its id, or else one holding
    /// its natural key (under another id, or under this one if a writer stored it between the
    /// reads). Two reads by index rather than one `$or`: the document under the id is what
    /// almost every conflict is about, and some servers answer an `$or` by scanning the
    /// collection. The second read is only for an id that changed.
    async fn read_conflict(&self, write: &PreparedWrite) -> Result<Option<Document>, Error> {
        let by_id = find_by_id(&self.collection, &write.document(), &write.id_text).await?;
        if by_id.is_some() {
            return Ok(by_id);
        }
        crate::trace::round_trip("find");
        (self.collection.find_one(write.natural_key_filter()))
            .collation(super::schema::simple_collation())
            .await
            .naming(&write.document())
    }

    fn incoming_value(&self, write: &PreparedWrite, field: &Field) -> Value {
        write.value(field).clone().into_relaxed_extjson()
    }

    fn incoming_shown(&self, write: &PreparedWrite, field: &Field) -> String {
        show(write.value(field))
    }

    fn stored_id(&self, stored: &Document) -> Option<String> {
        stored_id_text(stored)
    }

    fn is_tombstoned(&self, stored: &Document) -> bool {
        is_tombstoned(self.model, stored)
    }

    fn stored_hash<'s>(&self, stored: &'s Document) -> Option<&'s str> {
        stored.get_str(self.model.hash_field()).ok()
    }

    fn stored_digest<'s>(&self, stored: &'s Document, field: &Field) -> StoredDigest<'s> {
        super::write::stored_digest(stored, field)
    }

    fn stored_version<'s>(&self, stored: &'s Document) -> StoredVersion<'s> {
        match stored.get(VERSION_KEY_FIELD) {
            None | Some(Bson::Null) => StoredVersion::Absent,
            Some(Bson::String(key)) => StoredVersion::Key(key),
            // The server orders other types by BSON type: numbers and symbols before text.
            Some(
                Bson::Int32(_)
                | Bson::Int64(_)
                | Bson::Double(_)
                | Bson::Decimal128(_)
                | Bson::MinKey
                | Bson::Undefined,
            ) => StoredVersion::BeforeKeys,
            Some(_) => StoredVersion::AfterKeys,
        }
    }

    fn stored_value(&self, stored: &Document, field: &Field) -> Option<Value> {
        Some(
            stored
                .get(field.stored_name())?
                .clone()
                .into_relaxed_extjson(),
        )
    }

    fn stored_shown(&self, stored: &Document, field: &Field) -> Option<String> {
        stored.get(field.stored_name()).map(show)
    }

    fn key_differs(&self, write: &PreparedWrite, stored: &Document) -> Option<&'static Field> {
        self.model.natural_key_fields().find(|field| {
            !stored
                .get(field.stored_name())
                .is_some_and(|value| bson_equal(value, write.value(field)))
        })
    }
}

impl BatchDriver for MongoDriver<'_> {
    /// The store's chunk; a command beyond the server's batch limit is split when sent.
    fn chunk(&self) -> usize {
        self.store.batch_chunk
    }

    /// Every member in one `update` command, which `insert_missing` splits by the server's
    /// limits (`maxWriteBatchSize`, the message size): no read precedes it, so the store's
    /// chunk (the size of a read) does not bound it.
    fn insert_chunk(&self) -> usize {
        usize::MAX
    }

    async fn ready(&self) -> Result<(), Error> {
        let whole = DocumentRef::collection(self.model);
        self.store.verify_indexes(self.model, &whole).await?;
        self.store.server_limits(self.model).await.map(drop)
    }

    fn prepare<T: Idempotent + Serialize>(&self, doc: &T) -> Result<PreparedWrite, Error> {
        PreparedWrite::new(doc)
    }

    async fn read_many(
        &self,
        docs: &[&PreparedWrite],
    ) -> Result<Option<Vec<Option<Document>>>, Error> {
        self.read_stored(docs).await.map(Some)
    }
}
