//! Batch upserts: one read and, unless the writes exceed a command, at most one write per
//! chunk; outcomes per document.

use std::collections::HashMap;

use mongodb::bson::{doc, Bson, Document};
use serde::Serialize;

use super::compare::whole;
use super::errors::Naming;
use super::write::bson_size;
use super::{locked, Store};
use crate::batch::BatchReport;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::idempotent::Idempotent;
use crate::model::Model;
use crate::trace::{Call, CallKind};

/// The server's limits on one write command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerLimits {
    max_write_batch: usize,
    max_command_bytes: usize,
}

/// Limits every server accepts (MongoDB since 2.6: 1,000 statements, 16 MiB documents): a
/// command within them needs no `hello` to be sent.
const EVERY_SERVER: ServerLimits = ServerLimits {
    max_write_batch: 1000,
    max_command_bytes: super::write::MAX_DOCUMENT_BYTES,
};

/// Room left in a command for its own fields (`update`, `ordered`, the session and cluster
/// time the driver adds).
const COMMAND_OVERHEAD: usize = 64 * 1024;
/// What a statement costs in the `updates` array beyond its own size: a type byte and its index
/// as a C string.
const ARRAY_ELEMENT_OVERHEAD: usize = 8;

impl Store {
    /// Upserts a batch, converging like [`upsert`](Store::upsert) for each document.
    ///
    /// Each document gets the outcome that upserting the documents one by one, in input order,
    /// would give it: a document with the same id and content as the previous
    /// one with that id is not sent, and the other documents sharing an id go in later rounds.
    /// Each round goes in chunks of
    /// [`with_batch_chunk`](Store::with_batch_chunk) documents (250 by default); per chunk, one
    /// read of the stored hashes, versions and markers, and one write command carrying only the
    /// documents that need it (two or more if they exceed the server's command size).
    /// Re-ingesting unchanged documents writes nothing. A refused
    /// document does not stop the others. Races with concurrent writers are classified per
    /// document, with the same guarded write as a single upsert.
    ///
    /// Errors that concern one document are in the report; the call itself fails only when the
    /// server cannot be reached or does not confirm a write, and retrying it is then safe.
    pub async fn upsert_many<T>(&self, docs: &[T]) -> Result<BatchReport, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::UpsertMany, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let model = &T::MODEL;
            if model.idempotency_key_field().is_some() {
                return Ok(crate::engine::record::record_each(docs, |doc| self.record(doc)).await);
            }
            crate::engine::batch::upsert_many(&self.driver(model, true), docs).await
        })
        .await
    }

    /// Inserts `documents` (each with its caller's index), unordered, in as few `insert`
    /// commands as the server's limits allow, and returns the server's write error for each
    /// document it refused, by that index.
    pub(super) async fn insert_documents(
        &self,
        model: &Model,
        documents: Vec<(usize, Document)>,
    ) -> Result<HashMap<usize, Document>, Error> {
        let limits = self.limits_for(model, &documents).await?;
        let replies = self
            .send_statements(model, ("insert", "documents"), documents, limits)
            .await?;
        Ok(refused_statements(&replies))
    }

    /// Sends `statements` (each with its caller's index) to `model`'s collection as `command`
    /// commands holding them in `array`, unordered, in as few commands as `limits` allow: each
    /// reply, with its statements' indexes.
    pub(super) async fn send_statements(
        &self,
        model: &Model,
        (command, array): (&str, &str),
        statements: Vec<(usize, Document)>,
        limits: ServerLimits,
    ) -> Result<Vec<(Vec<usize>, Document)>, Error> {
        let mut replies = Vec::new();
        for statements in write_commands(statements, limits) {
            let (indexes, reply) = self.send_command(model, (command, array), statements).await;
            replies.push((indexes, reply?));
        }
        Ok(replies)
    }

    /// One `command` command holding `statements` (each with its caller's index) in `array`,
    /// unordered: their indexes, and the reply ([`Store::run_write_command`]).
    pub(super) async fn send_command(
        &self,
        model: &Model,
        (command, array): (&str, &str),
        statements: Vec<(usize, Document)>,
    ) -> (Vec<usize>, Result<Document, Error>) {
        let (indexes, statements): (Vec<usize>, Vec<Document>) = statements.into_iter().unzip();
        let sent = doc! { command: model.collection(), array: statements, "ordered": false };
        let whole = DocumentRef::collection(model);
        (indexes, self.run_write_command(&whole, sent).await)
    }

    /// Sends a write command; a write concern the server did not confirm is
    /// [`ErrorKind::NotConfirmed`], and retrying the call is then safe.
    pub(super) async fn run_write_command(
        &self,
        whole: &DocumentRef,
        command: Document,
    ) -> Result<Document, Error> {
        // `update` or `insert`: the command's name is its first key.
        crate::trace::round_trip(command.keys().next().map_or("write", String::as_str));
        let reply = self.database.run_command(command).await.naming(whole)?;
        if let Ok(concern) = reply.get_document("writeConcernError") {
            return Err(Error::new(
                whole.clone(),
                ErrorKind::NotConfirmed {
                    code: concern.get_i32("code").unwrap_or(0),
                    message: concern.get_str("errmsg").unwrap_or("no message").to_owned(),
                },
            ));
        }
        Ok(reply)
    }

    /// The limits to split `statements` by: the server's, asked once per store, unless they fit
    /// one command on every server, when asking would cost a round trip for nothing.
    pub(super) async fn limits_for(
        &self,
        model: &Model,
        statements: &[(usize, Document)],
    ) -> Result<ServerLimits, Error> {
        if fits_one_command(statements, EVERY_SERVER) {
            Ok(EVERY_SERVER)
        } else {
            self.server_limits(model).await
        }
    }

    /// The server's batch and size limits, asked once per store.
    pub(super) async fn server_limits(&self, model: &Model) -> Result<ServerLimits, Error> {
        if let Some(limits) = *locked(&self.limits) {
            return Ok(limits);
        }
        crate::trace::round_trip("hello");
        let hello = self
            .database
            .run_command(doc! { "hello": 1 })
            .await
            .naming(&DocumentRef::collection(model))?;
        let number = |field: &str, default: usize| match hello.get(field) {
            Some(Bson::Double(n)) => *n as usize,
            other => other.and_then(whole).unwrap_or(default),
        };
        let limits = ServerLimits {
            max_write_batch: number("maxWriteBatchSize", 100_000).max(1),
            max_command_bytes: number("maxBsonObjectSize", super::write::MAX_DOCUMENT_BYTES),
        };
        *locked(&self.limits) = Some(limits);
        Ok(limits)
    }
}

/// One statement of an `update` command: `update` applied to the document `query` matches, or
/// inserted from it.
pub(super) fn upsert_statement(query: Document, update: impl Into<Bson>) -> Document {
    doc! { "q": query, "u": update.into(), "upsert": true, "multi": false }
}

/// Splits the statements into commands the server accepts: within its batch limit and its
/// command size, each statement measured as it will be sent.
pub(super) fn write_commands(
    statements: Vec<(usize, Document)>,
    limits: ServerLimits,
) -> Vec<Vec<(usize, Document)>> {
    let budget = command_budget(limits);
    let mut commands = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for (index, statement) in statements {
        let size = statement_size(&statement);
        if !current.is_empty() && (current.len() >= limits.max_write_batch || bytes + size > budget)
        {
            commands.push(std::mem::take(&mut current));
            bytes = 0;
        }
        current.push((index, statement));
        bytes += size;
    }
    if !current.is_empty() {
        commands.push(current);
    }
    commands
}

/// Whether `statements` go in one command within `limits`.
fn fits_one_command(statements: &[(usize, Document)], limits: ServerLimits) -> bool {
    let bytes: usize = statements
        .iter()
        .map(|(_, statement)| statement_size(statement))
        .sum();
    statements.len() <= limits.max_write_batch && bytes <= command_budget(limits)
}

/// The bytes a command has for its statements.
fn command_budget(limits: ServerLimits) -> usize {
    limits
        .max_command_bytes
        .saturating_sub(COMMAND_OVERHEAD)
        .max(1)
}

/// What a statement costs in a command: its size as sent, and its place in the array.
fn statement_size(statement: &Document) -> usize {
    bson_size(statement) + ARRAY_ELEMENT_OVERHEAD
}

/// The entries of a write command's reply under `field` (`writeErrors`, `upserted`), each with
/// the index of the statement (or document) it is about.
fn by_statement<'r>(
    reply: &'r Document,
    field: &str,
) -> impl Iterator<Item = (usize, &'r Document)> {
    let entries = reply.get_array(field).map(|entries| entries.iter());
    (entries.into_iter().flatten())
        .filter_map(Bson::as_document)
        .filter_map(|entry| Some((entry.get("index").and_then(whole)?, entry)))
}

/// A write command's errors, by the index of the statement (or document) they are about.
pub(super) fn write_errors(reply: &Document) -> HashMap<usize, &Document> {
    by_statement(reply, "writeErrors").collect()
}

/// The server's write errors in `replies` ([`Store::send_statements`]), by their statements'
/// indexes.
pub(super) fn refused_statements(replies: &[(Vec<usize>, Document)]) -> HashMap<usize, Document> {
    let mut refused = HashMap::new();
    for (indexes, reply) in replies {
        for (position, error) in write_errors(reply) {
            if let Some(&index) = indexes.get(position) {
                refused.insert(index, error.clone());
            }
        }
    }
    refused
}

/// The count a write command's reply gives under `field` (`n`, `nModified`), 0 if none.
pub(super) fn reply_count(reply: &Document, field: &str) -> usize {
    reply.get(field).and_then(whole).unwrap_or(0)
}

/// The statements of an `update` command that inserted their document, by their index.
pub(super) fn upserted(reply: &Document) -> Vec<usize> {
    by_statement(reply, "upserted")
        .map(|(index, _)| index)
        .collect()
}

pub(super) fn refused_by_server(document: &DocumentRef, error: &Document, note: &str) -> Error {
    let message = error.get_str("errmsg").unwrap_or("no message");
    let code = error.get_i32("code").unwrap_or(0);
    Error::new(
        document.clone(),
        ErrorKind::WriteRefused {
            code,
            retryable: super::is_transient_code(code),
            message: if note.is_empty() {
                message.to_owned()
            } else {
                format!("{message}; {note}")
            },
        },
    )
}
