//! Adoption: moving documents written by other tools (legacy ids) or orphaned by other code to
//! the ids idem derives from their content, while idem writers keep running.
//!
//! The move, and why it is safe, is documented on [`Store::adopt`].

use std::collections::{HashMap, HashSet};
use std::fmt;

use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::audit::{
    judge, read_typed, same_natural_key, shown_key, sorted_by_natural_key, stored_natural_key,
    Reading, ADOPTION_FIELD,
};
use super::batch::{write_commands, write_errors};
use super::write::{field_digest, stored_id_text};
use super::{find_by_id, index_in_message, is_duplicate_key, mongo_error, Store};
use crate::audit::{kept_by_value, AdoptReport, AuditProgress, Ordered, SAMPLES_PER_KIND};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, FROZEN_DIGESTS_FIELD, ID_FIELD, VERSION_KEY_FIELD};
use crate::trace::{Call, CallKind};
use crate::MAX_ATTEMPTS;

/// How many documents an adoption moves together: each of the three steps of their moves is one
/// command for all of them (a reserve of each, then a release of each, then a claim of each), so a
/// move costs three round trips per batch, not per document.
const MOVES_PER_BATCH: usize = 100;

/// The suffix of the collection that duplicates set aside by a [`DuplicateRule::Keep`] rule are
/// moved to.
pub const ARCHIVE_SUFFIX: &str = "_idem_duplicates";

/// What [`Store::adopt`] does with documents that share a natural key.
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub enum DuplicateRule {
    /// Leave them all where they are and list them in the report.
    #[default]
    Report,
    /// Keep the document at the index the function returns (among the documents sharing a key,
    /// in the order the collection returns them) and move the others to the archive collection.
    /// An index out of range keeps them all and reports them.
    Keep(fn(&[Document]) -> usize),
    /// Keep the document with the greatest value of this stored field (the newest by an
    /// `updatedAt`, the highest revision) and archive the others. Numbers compare by value, dates
    /// by instant, text by its UTF-8 bytes; a key whose greatest value is held twice, or whose
    /// documents lack the field or hold values of different kinds, is left and reported.
    KeepGreatest(&'static str),
    /// The same, keeping the document with the least value of the field (the first written).
    KeepLeast(&'static str),
}

impl DuplicateRule {
    /// The index of the document to keep among `group`, or `None` to leave them all.
    fn choose(&self, group: &[Document]) -> Option<usize> {
        match *self {
            DuplicateRule::Report => None,
            DuplicateRule::Keep(choose) => Some(choose(group)).filter(|&at| at < group.len()),
            DuplicateRule::KeepGreatest(field) => {
                extreme(group, field, std::cmp::Ordering::Greater)
            }
            DuplicateRule::KeepLeast(field) => extreme(group, field, std::cmp::Ordering::Less),
        }
    }
}

/// `value` as the duplicate rules order it ([`Ordered`]); `None` for a kind not ordered.
fn ordered(value: Option<&Bson>) -> Option<Ordered<'_>> {
    match value? {
        Bson::Int32(n) => Some(Ordered::Number(f64::from(*n))),
        Bson::Int64(n) => Some(Ordered::Number(*n as f64)),
        Bson::Double(n) if !n.is_nan() => Some(Ordered::Number(*n)),
        Bson::DateTime(date) => Some(Ordered::Date(date.timestamp_millis())),
        Bson::String(text) => Some(Ordered::Text(text)),
        _ => None,
    }
}

/// The index of the document of `group` whose `field` is the most `direction`
/// ([`kept_by_value`]'s rule).
fn extreme(group: &[Document], field: &str, direction: std::cmp::Ordering) -> Option<usize> {
    let values: Vec<Option<Ordered<'_>>> = group
        .iter()
        .map(|document| ordered(document.get(field)))
        .collect();
    kept_by_value(&values, direction)
}

impl fmt::Debug for DuplicateRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DuplicateRule::Report => f.write_str("Report"),
            DuplicateRule::Keep(_) => f.write_str("Keep(…)"),
            DuplicateRule::KeepGreatest(field) => write!(f, "KeepGreatest({field:?})"),
            DuplicateRule::KeepLeast(field) => write!(f, "KeepLeast({field:?})"),
        }
    }
}

/// How [`Store::adopt`] runs.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct AdoptOptions {
    /// What to do with documents sharing a natural key.
    pub duplicates: DuplicateRule,
    /// Stop before the document after this many (moved, finished or archived), leaving the
    /// collection in a state the next run finishes: to bound the work of one call.
    pub max_documents: Option<u64>,
    /// Stop after this many writes (each move takes three, each archived duplicate two), even in
    /// the middle of a document's move: what an interruption at any point leaves, for tests of
    /// the resumption. [`AdoptOptions::max_documents`] is the limit to bound a run with.
    #[doc(hidden)]
    pub max_writes: Option<u64>,
    /// [`Store::adopt_model`] moves documents even when the stored ones were written with
    /// another model than the one given (see [`crate::model_check`]): for a deliberate change
    /// of keys, timestamp or scheme. Off by default, when such a run is refused.
    pub ignore_model_check: bool,
    /// [`Store::adopt_model`] moves documents even when they hold fields that are not fields
    /// of the model given (see
    /// [`AuditReport::unknown_fields`](crate::AuditReport::unknown_fields)), leaving them out
    /// of the content hashes stored: they are no fields of the type. Off by default, when such
    /// a run is refused: a model that misses a field of the type would store hashes the type
    /// does not compute, and the next upsert of every document would rewrite it.
    pub allow_unknown_fields: bool,
}

impl AdoptOptions {
    /// Moves documents even when they hold fields that are not the model's, leaving them out
    /// of the hashes; see [`AdoptOptions::allow_unknown_fields`].
    pub fn allowing_unknown_fields(mut self) -> Self {
        self.allow_unknown_fields = true;
        self
    }

    /// Duplicates are handled by `rule`.
    pub fn with_duplicates(mut self, rule: DuplicateRule) -> Self {
        self.duplicates = rule;
        self
    }

    /// Moves documents even when the stored ones match another model than the one given; see
    /// [`AdoptOptions::ignore_model_check`].
    pub fn ignoring_model_check(mut self) -> Self {
        self.ignore_model_check = true;
        self
    }

    /// Stop after `documents` documents; see [`AdoptOptions::max_documents`].
    pub fn with_max_documents(mut self, documents: u64) -> Self {
        self.max_documents = Some(documents);
        self
    }

    /// Stop after `writes` writes, even inside a move; see [`AdoptOptions::max_writes`].
    #[doc(hidden)]
    pub fn with_max_writes(mut self, writes: u64) -> Self {
        self.max_writes = Some(writes);
        self
    }
}

/// A limit was reached: the run stops where it is, which the next run finishes.
struct Stopped;

/// One adoption run: its options, its report and the writes it made.
struct Adoption<'a> {
    store: &'a Store,
    model: &'a Model,
    reading: Reading<'a>,
    collection: Collection<Document>,
    options: AdoptOptions,
    report: AdoptReport,
    /// Writes made.
    steps: u64,
    /// Moves planned and not sent yet: they go together, [`MOVES_PER_BATCH`] at a time.
    pending: Vec<Plan>,
    /// Told after each document the scan reads.
    progress: &'a mut (dyn FnMut(&AuditProgress) + Send),
    /// Documents the scan read, and how many the server estimates the collection holds.
    scanned: u64,
    total: Option<u64>,
}

impl Store {
    /// Moves the documents of `T`'s collection that are not under the id derived from their
    /// content (legacy ids, orphans) to their derived ids, with the content hash and digests
    /// idem stores; safe while idem writers run and resumable after a crash at any point.
    /// Documents sharing a natural key are handled by `options.duplicates`; documents that do
    /// not deserialize into `T`, or from which no id can be derived, are reported and left
    /// alone. Creates the unique natural-key index first when no duplicates block it, and at the
    /// end when a rule removed them.
    ///
    /// # The move
    ///
    /// MongoDB cannot change a document's `_id`, and two documents cannot hold one natural key once
    /// the unique natural-key index exists (it does, or no idem writer can write: they create it
    /// before their first write, and fail while duplicates block it). So a move copies the document
    /// under its derived id first, with its natural key set aside, and only then lets go of the
    /// original. Each document `L` (legacy id `old`, natural key `K`, derived id `D`) moves in three
    /// writes:
    ///
    /// 1. **reserve**: insert `R` under `D`: `L`'s fields, the content hash and frozen digests idem
    ///    would store, each natural-key field replaced by a placeholder unique to `old`, and
    ///    `idemAdopt: {from: old, key: K}`. `L` still holds `K`, so the index sees no duplicate.
    /// 2. **release**: delete `L`, only if it is still exactly as read (its whole document is the
    ///    filter). If another tool changed it meanwhile, `R` is refreshed from the new `L` and the
    ///    release tried again.
    /// 3. **claim**: in one update of `R` (found by `D` and `idemAdopt.from`), restore `K` and remove
    ///    `idemAdopt`.
    ///
    /// Documents move 100 at a time: each step is one command for all of them, sent after the
    /// previous step's command, so each document goes through the same states in the same order.
    ///
    /// # Under concurrent idem writers
    ///
    /// A writer upserting `K` with the same timestamp targets `D`. Before the reserve, `K` is held by
    /// `L` under another id; from the reserve to the claim, `D` is held by `R`, whose key differs:
    /// either way the writer is refused ([`ErrorKind::IdChanged`] while `L` holds the key,
    /// [`ErrorKind::FrozenFieldChanged`] while `R` holds the id), exactly as it was before
    /// adoption began, and nothing is written. After the claim it meets the adopted document and is
    /// judged as any write is: `Updated`, `Unchanged`, `Stale`, `Deleted` or refused. Its write is
    /// never lost to the move and never forks the document.
    ///
    /// A writer upserting `K` with *another* timestamp targets another id `D'`. While `L` or the
    /// adopted document holds `K` it is refused. Between the release and the claim (two consecutive
    /// commands of one client) no document holds `K`, and such a writer can store `D'`: the claim then
    /// collides on the natural-key index, `R` stays reserved with its key set aside, and the report
    /// lists the conflict with both ids. Nothing is lost or duplicated; a person decides.
    ///
    /// # After a crash
    ///
    /// Every step is safe to repeat, and a later run starts by finishing what an interrupted one left:
    /// a reserved `R` whose `L` still exists goes through the release and the claim (refreshed from
    /// `L` first), one whose `L` is gone is claimed. A crash before the reserve leaves `L` alone; a
    /// crash after the claim left a finished move. So re-running `adopt` after a crash at any point
    /// finishes the job, and no document is ever absent from both `old` and `D`: `R` is written
    /// before `L` is deleted.
    ///
    /// # Duplicates
    ///
    /// Documents sharing a natural key are never moved silently. By default they stay where they are
    /// and the report lists each key with its ids. A [`DuplicateRule::Keep`] rule picks the one to
    /// keep; each other one is copied whole to the archive collection (`<collection>_idem_duplicates`,
    /// under its own id) and then deleted if unchanged since read, so a crash between the two leaves
    /// a copy, never a loss. The kept one is then moved as any other.
    pub async fn adopt<T>(&self, options: AdoptOptions) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        self.adopt_collection(
            &T::MODEL,
            Reading::Typed(read_typed::<T>),
            options,
            &mut |_| {},
        )
        .await
    }

    /// [`adopt`](Store::adopt) for a model given at run time: ids are derived from the stored
    /// key values and content hashes computed from the stored fields (see
    /// [`audit_model`](Store::audit_model) for when that hash is the type's). A hash that is not
    /// the type's only makes the next upsert of the document write once more. `field_order` is
    /// as for [`audit_model`](Store::audit_model).
    ///
    /// Before anything moves, it checks that the model is the one the stored documents were
    /// written with ([`crate::model_check`]): if most documents under a ULID are under the id a
    /// model differing in one flag derives, and not under the one `model` derives, it refuses
    /// with [`ErrorKind::SchemaMismatch`] naming that flag, and nothing is moved (unless
    /// [`AdoptOptions::ignore_model_check`]). A collection that does not exist is refused the
    /// same way.
    pub async fn adopt_model(
        &self,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
    ) -> Result<AdoptReport, Error> {
        self.adopt_model_with_progress(model, field_order, options, |_| {})
            .await
    }

    /// [`adopt_model`](Store::adopt_model), calling `progress` after each document it reads,
    /// with the server's estimate of the collection's size: to draw a progress bar, as
    /// [`audit_with_progress`](Store::audit_with_progress) does.
    pub async fn adopt_model_with_progress(
        &self,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
        mut progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AdoptReport, Error> {
        self.require_collection(model).await?;
        let (mismatch, unknown) = self.model_mismatch(model, field_order).await?;
        crate::audit::check_adoption(
            model,
            mismatch,
            &unknown,
            options.ignore_model_check,
            options.allow_unknown_fields,
        )?;
        let reading = Reading::Stored {
            field_order,
            left_out: &unknown,
        };
        self.adopt_collection(model, reading, options, &mut progress)
            .await
    }

    async fn adopt_collection(
        &self,
        model: &Model,
        reading: Reading<'_>,
        options: AdoptOptions,
        progress: &mut (dyn FnMut(&AuditProgress) + Send),
    ) -> Result<AdoptReport, Error> {
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run(self.move_documents(model, reading, options, progress))
            .await
    }

    /// The adoption's moves, in the span of the call.
    async fn move_documents(
        &self,
        model: &Model,
        reading: Reading<'_>,
        options: AdoptOptions,
        progress: &mut (dyn FnMut(&AuditProgress) + Send),
    ) -> Result<AdoptReport, Error> {
        if model.idempotency_key_field().is_some() {
            return Err(Error::new(
                DocumentRef::collection(model),
                ErrorKind::NoDerivedId,
            ));
        }
        let mut adoption = Adoption {
            store: self,
            model,
            reading,
            collection: self.raw_collection(model),
            options,
            report: AdoptReport::new(model.collection()),
            steps: 0,
            pending: Vec::new(),
            progress,
            scanned: 0,
            total: None,
        };
        if adoption.run().await?.is_err() {
            adoption.report.stopped = true;
        }
        Ok(adoption.report)
    }
}

impl Adoption<'_> {
    fn collection_ref(&self) -> DocumentRef {
        DocumentRef::collection(self.model)
    }

    /// Counts one write; `Err(Stopped)` once the write limit is reached, before the write.
    fn step(&mut self) -> Result<(), Stopped> {
        if self
            .options
            .max_writes
            .is_some_and(|limit| self.steps >= limit)
        {
            return Err(Stopped);
        }
        self.steps += 1;
        Ok(())
    }

    /// `Err(Stopped)` once the document limit is reached, before the next document's first
    /// write: documents moved, finished or archived count, not those that could not be moved
    /// (else a run whose first documents always fail would never get past them).
    fn begin_document(&mut self) -> Result<(), Stopped> {
        let report = &self.report;
        let done = report.moved.count
            + report.finished.count
            + report.archived.count
            + self.pending.len() as u64;
        match self.options.max_documents {
            Some(limit) if done >= limit => Err(Stopped),
            _ => Ok(()),
        }
    }

    /// Finishes interrupted moves, makes sure of the index, then moves every misplaced
    /// document. The outer `Result` is a failure of the server; the inner one says whether the
    /// run stopped at its step limit.
    async fn run(&mut self) -> Result<Result<(), Stopped>, Error> {
        if let Err(stopped) = self.finish_interrupted().await? {
            return Ok(Err(stopped));
        }
        let indexed = match self
            .store
            .create_natural_key_index(self.model, &self.collection_ref())
            .await
        {
            Ok(()) => true,
            // Idem writers cannot write either while duplicates block the index, so moves are
            // safe without it; a rule may remove the duplicates below.
            Err(error) if matches!(error.kind(), ErrorKind::DuplicateNaturalKeys { .. }) => false,
            Err(other) => return Err(other),
        };
        if let Err(stopped) = self.move_misplaced().await? {
            return Ok(Err(stopped));
        }
        if !indexed && self.report.duplicates.keys == 0 {
            self.store
                .create_natural_key_index(self.model, &self.collection_ref())
                .await?;
        }
        Ok(Ok(()))
    }

    /// Finishes the moves an interrupted run left reserved.
    async fn finish_interrupted(&mut self) -> Result<Result<(), Stopped>, Error> {
        let collection_ref = self.collection_ref();
        let mut cursor = self
            .collection
            .find(doc! { ADOPTION_FIELD: { "$exists": true } })
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        while cursor
            .advance()
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?
        {
            let reserved: Document = cursor
                .deserialize_current()
                .map_err(|source| mongo_error(&collection_ref, source))?;
            let Ok(adoption) = reserved.get_document(ADOPTION_FIELD) else {
                continue;
            };
            let from = adoption.get(FROM).cloned().unwrap_or(Bson::Null);
            let derived = stored_id_text(&reserved).unwrap_or_default();
            let original = self
                .collection
                .find_one(doc! { ID_FIELD: from.clone() })
                .await
                .map_err(|source| mongo_error(&collection_ref, source))?;
            let moved = match original {
                // Not released yet: the move goes on from the document as it is now.
                Some(original) => match self.prepare(&original) {
                    Ok(plan) => {
                        // A reservation still as the original reads needs no new reserve, so
                        // runs stopped after one step each still make progress.
                        let reserved_already =
                            plan.as_ref().is_some_and(|plan| plan.reserved == reserved);
                        self.move_document(plan, reserved_already).await?
                    }
                    Err(why) => {
                        let id = stored_id_text(&original).unwrap_or_default();
                        self.report.failed.record(id, Some(why));
                        continue;
                    }
                },
                None => {
                    if let Err(stopped) = self.begin_document() {
                        return Ok(Err(stopped));
                    }
                    match self.claim(&derived, &from, None).await? {
                        Ok(claimed) => Ok(claimed),
                        Err(stopped) => return Ok(Err(stopped)),
                    }
                }
            };
            match moved {
                Ok(Claimed::Done) => {
                    let from = id_text(&from);
                    self.report.finished.record_misplaced(from, derived);
                }
                Ok(Claimed::Conflict(why)) => {
                    let from = id_text(&from);
                    self.report.failed.record(from, Some(why));
                }
                Err(stopped) => return Ok(Err(stopped)),
            }
        }
        Ok(Ok(()))
    }

    /// Streams the collection sorted by natural key, one key's documents at a time.
    async fn move_misplaced(&mut self) -> Result<Result<(), Stopped>, Error> {
        let scanned = self.scan_misplaced().await;
        // What was planned goes, whether the scan ended, stopped at a limit or failed.
        self.send_pending().await?;
        scanned
    }

    /// The scan of [`Adoption::move_misplaced`]: each group of one natural key adopted, moves
    /// batched in `pending`.
    async fn scan_misplaced(&mut self) -> Result<Result<(), Stopped>, Error> {
        let collection_ref = self.collection_ref();
        // An estimate from the collection's metadata: cheap, and only used to draw progress.
        self.total = self.collection.estimated_document_count().await.ok();
        let mut cursor = sorted_by_natural_key(&self.collection, self.model).await?;
        let mut group: Vec<Document> = Vec::new();
        while cursor
            .advance()
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?
        {
            let stored: Document = cursor
                .deserialize_current()
                .map_err(|source| mongo_error(&collection_ref, source))?;
            self.scanned += 1;
            (self.progress)(&AuditProgress::new(self.scanned, self.total));
            // Reserved by this run, whose claim has not been made, or by a racing run.
            if stored.contains_key(ADOPTION_FIELD) {
                continue;
            }
            let same_key = group.first().is_some_and(|first| {
                same_natural_key(
                    &stored_natural_key(self.model, first),
                    &stored_natural_key(self.model, &stored),
                )
            });
            if !same_key {
                // The cursor has left the group's key: moving its documents now cannot make the
                // cursor meet them again under that key.
                let closed = std::mem::take(&mut group);
                if let Err(stopped) = self.adopt_group(closed).await? {
                    return Ok(Err(stopped));
                }
            }
            group.push(stored);
        }
        self.adopt_group(group).await
    }

    /// Adopts the documents of one natural key: moves a lone one, or applies the duplicate
    /// rule.
    async fn adopt_group(
        &mut self,
        mut group: Vec<Document>,
    ) -> Result<Result<(), Stopped>, Error> {
        let chosen = match group.len() {
            0 => return Ok(Ok(())),
            1 => Some(0),
            _ => self.options.duplicates.choose(&group),
        };
        let keep = match chosen {
            Some(keep) => keep,
            None => {
                let key = shown_key(&stored_natural_key(self.model, &group[0]));
                let ids = group
                    .iter()
                    .take(SAMPLES_PER_KIND)
                    .filter_map(stored_id_text)
                    .collect();
                self.report.duplicates.record(key, group.len() as u64, ids);
                return Ok(Ok(()));
            }
        };
        let kept = group.swap_remove(keep);
        for duplicate in group {
            if let Err(stopped) = self.archive(&duplicate).await? {
                return Ok(Err(stopped));
            }
        }
        let plan = match self.prepare(&kept) {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(Ok(())),
            Err(why) => {
                let id = stored_id_text(&kept).unwrap_or_default();
                self.report.failed.record(id, Some(why));
                return Ok(Ok(()));
            }
        };
        // A write limit stops a run between any two writes: such a run moves one document at
        // a time, as the limit counts them.
        if self.options.max_writes.is_none() {
            if let Err(stopped) = self.begin_document() {
                return Ok(Err(stopped));
            }
            self.pending.push(plan);
            if self.pending.len() >= MOVES_PER_BATCH {
                self.send_pending().await?;
            }
            return Ok(Ok(()));
        }
        self.move_one(plan).await
    }

    /// Moves one document, step by step, and reports it.
    async fn move_one(&mut self, plan: Plan) -> Result<Result<(), Stopped>, Error> {
        let (from, to) = (id_text(&plan.from), plan.derived.to_string());
        match self.move_document(Some(plan), false).await? {
            Ok(Claimed::Done) => self.report.moved.record_misplaced(from, to),
            Ok(Claimed::Conflict(why)) => self.report.failed.record(from, Some(why)),
            Err(stopped) => return Ok(Err(stopped)),
        }
        Ok(Ok(()))
    }

    /// Moves the pending documents together: one insert of every reservation, one delete of every
    /// original still as read, one update claiming every reservation whose original is gone. Each
    /// step is the one a single move makes, for many documents at once, and in the same order, so
    /// what a crash leaves is what it leaves of single moves. A document any step of which does
    /// not go as planned (its derived id held, its original changed, its key taken meanwhile)
    /// goes on alone from where it is, as a single move would.
    async fn send_pending(&mut self) -> Result<(), Error> {
        let plans = std::mem::take(&mut self.pending);
        if plans.is_empty() {
            return Ok(());
        }
        let whole = self.collection_ref();
        let limits = self.store.server_limits(self.model).await?;
        let collection = self.model.collection();
        // 1. Reserve.
        let statements: Vec<(usize, Document)> = plans
            .iter()
            .enumerate()
            .map(|(index, plan)| (index, plan.reserved.clone()))
            .collect();
        let mut not_reserved = HashSet::new();
        for command in write_commands(statements, limits) {
            let (indexes, documents): (Vec<usize>, Vec<Document>) = command.into_iter().unzip();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "insert": collection, "documents": documents, "ordered": false },
                )
                .await?;
            not_reserved.extend(write_errors(&reply).keys().map(|&at| indexes[at]));
        }
        // 2. Release.
        let reserved: Vec<usize> = (0..plans.len())
            .filter(|index| !not_reserved.contains(index))
            .collect();
        let statements: Vec<(usize, Document)> = reserved
            .iter()
            .map(|&index| {
                (
                    index,
                    doc! { "q": unchanged(&plans[index].original), "limit": 1 },
                )
            })
            .collect();
        let mut deleted = 0;
        for command in write_commands(statements, limits) {
            let deletes: Vec<Document> = command.into_iter().map(|(_, delete)| delete).collect();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "delete": collection, "deletes": deletes, "ordered": false },
                )
                .await?;
            deleted += reply
                .get_i32("n")
                .map(i64::from)
                .or_else(|_| reply.get_i64("n"))
                .unwrap_or(0);
        }
        let mut still_there = HashSet::new();
        if usize::try_from(deleted).unwrap_or(0) < reserved.len() {
            // Which originals another writer changed since the read: those stay.
            let ids: Vec<Bson> = reserved
                .iter()
                .map(|&index| plans[index].from.clone())
                .collect();
            crate::trace::round_trip("find");
            let mut cursor = self
                .collection
                .find(doc! { ID_FIELD: { "$in": ids } })
                .projection(doc! { ID_FIELD: 1 })
                .await
                .map_err(|source| mongo_error(&whole, source))?;
            let position: HashMap<String, usize> = reserved
                .iter()
                .map(|&index| (id_text(&plans[index].from), index))
                .collect();
            while cursor
                .advance()
                .await
                .map_err(|source| mongo_error(&whole, source))?
            {
                let found: Document = cursor
                    .deserialize_current()
                    .map_err(|source| mongo_error(&whole, source))?;
                let id = found.get(ID_FIELD).map(id_text).unwrap_or_default();
                if let Some(&index) = position.get(&id) {
                    still_there.insert(index);
                }
            }
        }
        // 3. Claim.
        let released: Vec<usize> = reserved
            .iter()
            .copied()
            .filter(|index| !still_there.contains(index))
            .collect();
        let mut statements = Vec::new();
        for &index in &released {
            let plan = &plans[index];
            let Ok(key) = plan
                .reserved
                .get_document(ADOPTION_FIELD)
                .and_then(|adoption| adoption.get_document(KEY))
            else {
                continue;
            };
            let claim = doc! {
                "q": {
                    ID_FIELD: plan.derived.to_string(),
                    format!("{ADOPTION_FIELD}.{FROM}"): plan.from.clone(),
                },
                "u": { "$set": key.clone(), "$unset": { ADOPTION_FIELD: "" } },
            };
            statements.push((index, claim));
        }
        let mut not_claimed = HashSet::new();
        for command in write_commands(statements, limits) {
            let (indexes, updates): (Vec<usize>, Vec<Document>) = command.into_iter().unzip();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "update": collection, "updates": updates, "ordered": false },
                )
                .await?;
            not_claimed.extend(write_errors(&reply).keys().map(|&at| indexes[at]));
        }
        // The documents below were counted against the document limit when they were planned.
        let limit = self.options.max_documents.take();
        for (index, plan) in plans.into_iter().enumerate() {
            let (from, to) = (id_text(&plan.from), plan.derived.to_string());
            let outcome = if not_reserved.contains(&index) {
                // Its derived id or another unique value is held: the single move says which.
                self.move_document(Some(plan), false).await?
            } else if still_there.contains(&index) {
                // Reserved, and its original changed: the single move refreshes and goes on.
                self.move_document(Some(plan), true).await?
            } else if not_claimed.contains(&index) {
                let derived = plan.derived.to_string();
                self.claim(&derived, &plan.from, Some(&plan.reserved))
                    .await?
            } else {
                Ok(Claimed::Done)
            };
            match outcome {
                Ok(Claimed::Done) => self.report.moved.record_misplaced(from, to),
                Ok(Claimed::Conflict(why)) => self.report.failed.record(from, Some(why)),
                // No write limit in a batched run, and the document limit is lifted.
                Err(Stopped) => {}
            }
        }
        self.options.max_documents = limit;
        Ok(())
    }

    /// What moving `stored` takes: `Ok(None)` if it is under its derived id already, `Err` with
    /// the reason if it cannot be moved.
    fn prepare(&self, stored: &Document) -> Result<Option<Plan>, String> {
        let judged = judge(self.model, self.reading, stored);
        let Some((derived, hash)) = judged.move_target()? else {
            return Ok(None);
        };
        let from = stored.get(ID_FIELD).cloned().unwrap_or(Bson::Null);
        let mut adopted = doc! { ID_FIELD: derived.to_string() };
        for (name, value) in stored {
            if name != ID_FIELD {
                adopted.insert(name.clone(), value.clone());
            }
        }
        adopted.insert(self.model.hash_field(), hash);
        let digests: Document = self
            .model
            .digested_fields()
            .filter_map(|field| {
                let digest = field_digest(stored, field).ok()??;
                Some((
                    field.stored_name().to_owned(),
                    Bson::String(digest.to_string()),
                ))
            })
            .collect();
        if self.model.digested_fields().next().is_some() {
            adopted.insert(FROZEN_DIGESTS_FIELD, digests);
        }
        if let Some(key) = judged.version_key {
            adopted.insert(VERSION_KEY_FIELD, key);
        }
        let key: Document = stored_natural_key(self.model, stored)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        let mut reserved = adopted.clone();
        for name in key.keys() {
            // Unique to the document moved, so reservations never collide in the index.
            reserved.insert(name.clone(), doc! { "idemAdoptingFrom": from.clone() });
        }
        reserved.insert(ADOPTION_FIELD, doc! { FROM: from.clone(), KEY: key });
        Ok(Some(Plan {
            from,
            derived,
            original: stored.clone(),
            reserved,
        }))
    }

    /// Reserves (unless `reserved_already`), releases and claims one document. `plan` is `None`
    /// when the original is under its id already: there is nothing to move.
    async fn move_document(
        &mut self,
        plan: Option<Plan>,
        mut reserved_already: bool,
    ) -> Result<Result<Claimed, Stopped>, Error> {
        let Some(mut plan) = plan else {
            return Ok(Ok(Claimed::Done));
        };
        if let Err(stopped) = self.begin_document() {
            return Ok(Err(stopped));
        }
        let derived = plan.derived.to_string();
        for _ in 0..MAX_ATTEMPTS {
            if !reserved_already {
                if let Err(stopped) = self.step() {
                    return Ok(Err(stopped));
                }
                if let Err(why) = self.reserve(&plan).await? {
                    return Ok(Ok(Claimed::Conflict(why)));
                }
            }
            reserved_already = false;
            if let Err(stopped) = self.step() {
                return Ok(Err(stopped));
            }
            match self.release(&plan).await? {
                Released::Done => {
                    return self.claim(&derived, &plan.from, Some(&plan.reserved)).await
                }
                Released::Changed(now) => match self.prepare(&now) {
                    Ok(Some(fresh)) if fresh.derived == plan.derived => plan = fresh,
                    // Changed into a document with another key or id: the reservation is
                    // given up and the document is seen again by the next run.
                    Ok(_) | Err(_) => {
                        self.cancel(&plan).await?;
                        return Ok(Ok(Claimed::Conflict(
                            "changed by another writer during the move; run adopt again".into(),
                        )));
                    }
                },
            }
        }
        Ok(Ok(Claimed::Conflict(
            "changed by another writer at every attempt; run adopt again".into(),
        )))
    }

    /// Inserts the reserved copy under the derived id, or refreshes the one an earlier attempt
    /// left. `Ok(Err(why))`: the derived id is held by another document.
    async fn reserve(&mut self, plan: &Plan) -> Result<Result<(), String>, Error> {
        let collection_ref = self.collection_ref();
        let derived = plan.derived.to_string();
        match self.collection.insert_one(plan.reserved.clone()).await {
            Ok(_) => return Ok(Ok(())),
            Err(error) if is_duplicate_key(&error) => {
                let holder = find_by_id(&self.collection, &collection_ref, &derived).await?;
                let ours = holder.as_ref().and_then(|holder| {
                    let from = holder.get_document(ADOPTION_FIELD).ok()?.get(FROM)?;
                    Some(from == &plan.from)
                });
                match (holder, ours) {
                    (Some(_), Some(true)) => {}
                    (Some(holder), _) => {
                        let holder = stored_id_text(&holder).unwrap_or_default();
                        return Ok(Err(format!(
                            "its derived id {holder} is held by another document"
                        )));
                    }
                    (None, _) => {
                        let index = super::duplicate_key_message(&error);
                        return Ok(Err(format!(
                            "unique index `{}` holds one of its values, so it cannot be copied \
                             before the original is deleted",
                            index_in_message(index)
                        )));
                    }
                }
            }
            Err(source) => return Err(mongo_error(&collection_ref, source)),
        }
        self.collection
            .replace_one(
                doc! { ID_FIELD: &derived, format!("{ADOPTION_FIELD}.{FROM}"): plan.from.clone() },
                plan.reserved.clone(),
            )
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        Ok(Ok(()))
    }

    /// Deletes the original if it is as read.
    async fn release(&mut self, plan: &Plan) -> Result<Released, Error> {
        let collection_ref = self.collection_ref();
        let deleted = self
            .collection
            .delete_one(unchanged(&plan.original))
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        if deleted.deleted_count > 0 {
            return Ok(Released::Done);
        }
        let now = self
            .collection
            .find_one(doc! { ID_FIELD: plan.from.clone() })
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        Ok(match now {
            // Released by a racing run of adopt.
            None => Released::Done,
            Some(now) => Released::Changed(now),
        })
    }

    /// Restores the natural key of the reserved copy: the move is done.
    async fn claim(
        &mut self,
        derived: &str,
        from: &Bson,
        reserved: Option<&Document>,
    ) -> Result<Result<Claimed, Stopped>, Error> {
        let collection_ref = self.collection_ref();
        // The reservation this run wrote needs no read: the update below is pinned to it by its
        // id and `idemAdopt.from`, and matches nothing if a racing run claimed it first.
        let read;
        let reserved = match reserved {
            Some(reserved) => reserved,
            None => match find_by_id(&self.collection, &collection_ref, derived).await? {
                Some(found) => {
                    read = found;
                    &read
                }
                None => return Ok(Ok(Claimed::Done)),
            },
        };
        let Ok(key) = reserved
            .get_document(ADOPTION_FIELD)
            .and_then(|adoption| adoption.get_document(KEY))
        else {
            // Claimed by a racing run of adopt.
            return Ok(Ok(Claimed::Done));
        };
        if let Err(stopped) = self.step() {
            return Ok(Err(stopped));
        }
        let update = doc! { "$set": key.clone(), "$unset": { ADOPTION_FIELD: "" } };
        let filter = doc! { ID_FIELD: derived, format!("{ADOPTION_FIELD}.{FROM}"): from.clone() };
        match self.collection.update_one(filter, update).await {
            Ok(_) => Ok(Ok(Claimed::Done)),
            Err(error) if is_duplicate_key(&error) => {
                let mut holder_filter = Document::new();
                for (name, value) in key {
                    holder_filter.insert(name.clone(), doc! { "$eq": value.clone() });
                }
                let holder = self
                    .collection
                    .find_one(holder_filter)
                    .await
                    .map_err(|source| mongo_error(&collection_ref, source))?;
                let holder = holder
                    .as_ref()
                    .and_then(stored_id_text)
                    .unwrap_or_else(|| "another document".to_owned());
                Ok(Ok(Claimed::Conflict(format!(
                    "its natural key {key} was stored under {holder} while it moved; its content \
                     waits under {derived} with the key set aside: keep one, delete the other, \
                     and run adopt again"
                ))))
            }
            Err(source) => Err(mongo_error(&collection_ref, source)),
        }
    }

    /// Gives up a reservation whose original changed beyond a refresh.
    async fn cancel(&mut self, plan: &Plan) -> Result<(), Error> {
        let collection_ref = self.collection_ref();
        self.collection
            .delete_one(doc! {
                ID_FIELD: plan.derived.to_string(),
                format!("{ADOPTION_FIELD}.{FROM}"): plan.from.clone(),
            })
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        Ok(())
    }

    /// Moves a duplicate set aside by the rule to the archive collection: copied first, then
    /// deleted if unchanged, so a crash in between leaves a copy and the next run deletes it.
    async fn archive(&mut self, duplicate: &Document) -> Result<Result<(), Stopped>, Error> {
        let collection_ref = self.collection_ref();
        let id = stored_id_text(duplicate).unwrap_or_default();
        let archive: Collection<Document> = self
            .store
            .database
            .collection(&format!("{}{ARCHIVE_SUFFIX}", self.model.collection()));
        if let Err(stopped) = self.begin_document() {
            return Ok(Err(stopped));
        }
        if let Err(stopped) = self.step() {
            return Ok(Err(stopped));
        }
        match archive.insert_one(duplicate.clone()).await {
            Ok(_) => {}
            // Copied by an interrupted run: the copy under this id is this document.
            Err(error) if is_duplicate_key(&error) => {}
            Err(source) => return Err(mongo_error(&collection_ref, source)),
        }
        if let Err(stopped) = self.step() {
            return Ok(Err(stopped));
        }
        let deleted = self
            .collection
            .delete_one(unchanged(duplicate))
            .await
            .map_err(|source| mongo_error(&collection_ref, source))?;
        if deleted.deleted_count > 0 {
            let archive_name = format!("{}{ARCHIVE_SUFFIX}", self.model.collection());
            self.report
                .archived
                .record(id, Some(format!("to {archive_name}")));
        } else {
            self.report.failed.record(
                id,
                Some("changed while being set aside; its copy is archived, run adopt again".into()),
            );
        }
        Ok(Ok(()))
    }
}

/// The fields of `idemAdopt`: the original `_id`, and the natural key set aside.
const FROM: &str = "from";
const KEY: &str = "key";

/// One document's move.
struct Plan {
    /// The original `_id`.
    from: Bson,
    derived: Id,
    /// The original as read: its release is pinned to it.
    original: Document,
    /// The copy reserved under the derived id, its key set aside.
    reserved: Document,
}

/// How a release went.
enum Released {
    Done,
    /// The original changed since it was read: here it is now.
    Changed(Document),
}

/// How a move ended.
enum Claimed {
    Done,
    /// It could not finish, for this reason; nothing was lost.
    Conflict(String),
}

/// The filter matching `document` only while it is exactly as read: its `_id` and its whole
/// content.
fn unchanged(document: &Document) -> Document {
    let id = document.get(ID_FIELD).cloned().unwrap_or(Bson::Null);
    doc! {
        ID_FIELD: id,
        "$expr": { "$eq": ["$$ROOT", { "$literal": document.clone() }] },
    }
}

/// A stored `_id` as reports show it: an ObjectId as its hex digits, text as itself.
fn id_text(id: &Bson) -> String {
    stored_id_text(&doc! { ID_FIELD: id.clone() }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::DateTime;

    fn group(values: &[Bson]) -> Vec<Document> {
        values
            .iter()
            .map(|value| doc! { "at": value.clone() })
            .collect()
    }

    #[test]
    fn the_greatest_or_least_value_is_kept_and_a_tie_is_left() {
        let numbers = group(&[Bson::Int32(3), Bson::Double(5.5), Bson::Int64(1)]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&numbers), Some(1));
        assert_eq!(DuplicateRule::KeepLeast("at").choose(&numbers), Some(2));
        let dates = group(&[
            Bson::DateTime(DateTime::from_millis(20)),
            Bson::DateTime(DateTime::from_millis(10)),
        ]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&dates), Some(0));
        let tied = group(&[Bson::Int32(5), Bson::Int32(3), Bson::Int64(5)]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&tied), None);
        assert_eq!(DuplicateRule::KeepLeast("at").choose(&tied), Some(1));
        let mixed = group(&[Bson::Int32(5), Bson::String("6".into())]);
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&mixed), None);
        let missing = vec![doc! { "at": 1 }, doc! {}];
        assert_eq!(DuplicateRule::KeepGreatest("at").choose(&missing), None);
        assert_eq!(DuplicateRule::Report.choose(&numbers), None);
    }
}
