//! Adoption: moving documents written by other tools (legacy ids) or orphaned by other code to
//! the ids idem derives from their content, while idem writers keep running. The move, and why
//! it is safe, is documented on [`Store::adopt`]; what a run decides (where a document moves,
//! how far a run goes, which duplicate stays) is core's ([`crate::audit`]).
//!
//! This file is the run: it finishes the moves an interrupted run left, then scans the
//! collection by natural key, one key's documents at a time. [`moves`] are the steps of one
//! document's move, [`batched`] the same steps for many documents at once, and [`options`]
//! what the caller chooses.

mod batched;
mod moves;
mod options;

use mongodb::bson::{doc, Bson, Document};
use mongodb::options::CreateCollectionOptions;
use mongodb::results::CollectionType;
use mongodb::Collection;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::audit::{
    read_typed, sorted_by_natural_key, stored_natural_key, Reading, ADOPTION_FIELD,
};
use super::errors::{next_document, Naming};
use super::write::{id_text, stored_id_text};
use super::Store;
use crate::audit::{
    index_after_moves, kept_of_group, leave_duplicates, AdoptReport, AuditProgress, Halt, RunLimits,
};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD};
use crate::trace::{Call, CallKind};
use batched::MOVES_PER_BATCH;
use moves::{
    in_flight, is_releasing, reserved_from, same_bytes, without_mark, Plan, ARCHIVING_FIELD,
};
pub use options::{AdoptOptions, DuplicateRule, ARCHIVE_SUFFIX};

/// One adoption run: what it reads, its limits, its report, and the moves it has planned.
struct Adoption<'a> {
    store: &'a Store,
    model: &'a Model,
    reading: Reading<'a>,
    collection: Collection<Document>,
    duplicates: DuplicateRule,
    limits: RunLimits,
    report: AdoptReport,
    /// Moves planned and not sent yet: they go together, [`MOVES_PER_BATCH`] at a time.
    pending: Vec<Plan>,
    /// Told after each document the scan reads.
    progress: &'a mut (dyn FnMut(&AuditProgress) + Send),
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
    /// original. Each document `L` (legacy id `old`, natural key `K`, derived id `D`) moves in four
    /// writes:
    ///
    /// 1. **reserve**: insert `R` under `D`: `L`'s fields, the content hash and frozen digests idem
    ///    would store, each natural-key field replaced by a placeholder unique to `old`, and
    ///    `idemAdopt: {from: old, key: K}`. `L` still holds `K`, so the index sees no duplicate.
    /// 2. **mark**: set `idemAdopt.releasing` on `R`, which no later write removes while `R` stands.
    /// 3. **release**: delete `L`, only if it is still exactly as read (its whole document is the
    ///    filter). If another tool changed it meanwhile, `R` is refreshed from the new `L` (its
    ///    mark kept) and the release tried again.
    /// 4. **claim**: in one update of `R` (found by `D` and `idemAdopt.from`), restore `K` and remove
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
    /// `L` first); one whose `L` is gone is claimed if it is marked (a run released `L`), and
    /// given up if not (another tool deleted `L` before any run released it: the copy would bring
    /// a deleted document back). A crash before the reserve leaves `L` alone; a
    /// crash after the claim left a finished move. So re-running `adopt` after a crash at any point
    /// finishes the job, and no document is ever absent from both `old` and `D`: `R` is written
    /// before `L` is deleted.
    ///
    /// # Duplicates
    ///
    /// Documents sharing a natural key are never moved silently. By default they stay where they are
    /// and the report lists each key with its ids. A [`DuplicateRule::Keep`] rule picks the one to
    /// keep; each other one is copied whole to the archive collection (`<collection>_idem_duplicates`,
    /// under its own id, marked `idemArchiving` until its original is deleted) and then deleted if
    /// unchanged since read, so a crash between the two leaves a copy, never a loss. A document
    /// archived before under the same id is never replaced: the duplicate stays, reported. The
    /// kept one is then moved as any other.
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
        let (sample, unknown) = self.model_sample(model, field_order).await?;
        let (ignore, allow) = (options.ignore_model_check, options.allow_unknown_fields);
        let unknown = sample.checked(model, unknown, ignore, allow)?;
        let reading = Reading::Stored {
            field_order,
            left_out: &unknown,
        };
        self.adopt_collection(model, reading, options, &mut progress)
            .await
    }

    /// The adoption of `model`'s collection, read as `reading` says, in the span of the call.
    async fn adopt_collection(
        &self,
        model: &Model,
        reading: Reading<'_>,
        options: AdoptOptions,
        progress: &mut (dyn FnMut(&AuditProgress) + Send),
    ) -> Result<AdoptReport, Error> {
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run(async move {
            crate::audit::check_derived_ids(model)?;
            self.require_movable(model).await?;
            let mut adoption = Adoption {
                store: self,
                model,
                reading,
                collection: self.raw_collection(model),
                duplicates: options.duplicates,
                limits: RunLimits::new(options.max_documents, options.max_writes),
                report: AdoptReport::new(model.collection()),
                pending: Vec::new(),
                progress,
            };
            match adoption.run().await {
                Ok(()) => {}
                Err(Halt::Limit) => adoption.report.stopped = true,
                Err(Halt::Failed(error)) => return Err(error),
            }
            Ok(adoption.report)
        })
        .await
    }
}

impl Store {
    /// [`ErrorKind::SchemaMismatch`] where `model`'s collection is one whose documents cannot
    /// move by copy and delete: a view (no writes), a time-series collection (no `_id` of one's
    /// own choosing, no unique index), a capped collection (each copy inserted may push out the
    /// oldest document, one not moved yet). Checked before any write.
    async fn require_movable(&self, model: &Model) -> Result<(), Error> {
        crate::trace::round_trip("listCollections");
        let whole = DocumentRef::collection(model);
        let mut listed = (self.database.list_collections())
            .filter(doc! { "name": model.collection() })
            .authorized_collections(true)
            .await
            .naming(&whole)?;
        if !listed.advance().await.naming(&whole)? {
            return Ok(());
        }
        let found = listed.deserialize_current().naming(&whole)?;
        let why = match (&found.collection_type, &found.options) {
            (CollectionType::View, options) => {
                let source = options.view_on.as_deref().unwrap_or("its source");
                format!("it is a view, which takes no writes: adopt the collection it reads, `{source}`")
            }
            (CollectionType::Timeseries, _)
            | (
                _,
                CreateCollectionOptions {
                    timeseries: Some(_),
                    ..
                },
            ) => "it is a time-series collection, whose documents cannot be given an _id of their \
                 own nor a unique index: idem cannot keep them"
                .to_owned(),
            (
                _,
                CreateCollectionOptions {
                    capped: Some(true), ..
                },
            ) => "it is a capped collection: each copy adopt inserts may push out its oldest \
                 document, one not moved yet; copy the documents into a collection that is not \
                 capped (an aggregation with $out) and adopt that"
                .to_owned(),
            _ => return Ok(()),
        };
        Err(Error::schema_mismatch(
            model,
            format!("adopt moves nothing: {why}"),
        ))
    }
}

impl Adoption<'_> {
    fn collection_ref(&self) -> DocumentRef {
        DocumentRef::collection(self.model)
    }

    /// [`Halt::Limit`] once the document limit is reached, the moves planned counted
    /// ([`RunLimits::begin`]).
    fn begin_document(&self) -> Result<(), Halt> {
        self.limits.begin(&self.report, self.pending.len())
    }

    /// Finishes interrupted moves, makes sure of the index, then moves every misplaced
    /// document.
    async fn run(&mut self) -> Result<(), Halt> {
        self.finish_interrupted().await?;
        let indexed = match self
            .store
            .create_natural_key_index(self.model, &self.collection_ref())
            .await
        {
            Ok(()) => true,
            // A rule may remove the duplicates that block it ([`index_after_moves`]).
            Err(error) if matches!(error.kind(), ErrorKind::DuplicateNaturalKeys { .. }) => false,
            Err(other) => return Err(other.into()),
        };
        self.move_misplaced().await?;
        if index_after_moves(indexed, &self.report) {
            let built = (self.store)
                .create_natural_key_index(self.model, &self.collection_ref())
                .await;
            match built {
                Ok(()) => {}
                // Told in the report, which the moves made are in.
                Err(error) if matches!(error.kind(), ErrorKind::DuplicateNaturalKeys { .. }) => {
                    self.report.index_blocked = Some(error.to_string());
                }
                Err(other) => return Err(other.into()),
            }
        }
        Ok(())
    }

    /// Finishes the archiving an interrupted run left: a marked copy whose original is gone
    /// is archived (its mark removed), unless the original's content was moved to its derived
    /// id meanwhile (a later run kept it, the rule or its group having changed), where the copy
    /// is deleted; one whose original is still there is replaced when the scan archives it
    /// again.
    async fn finish_archiving(&mut self) -> Result<(), Halt> {
        let collection_ref = self.collection_ref();
        let archive_name = self.archive_name();
        let archive: Collection<Document> = self.store.database.collection(&archive_name);
        let find = archive.find(doc! { ARCHIVING_FIELD: true });
        let mut cursor = find.await.naming(&collection_ref)?;
        while let Some(mut copy) = next_document(&mut cursor, &collection_ref).await? {
            let id = copy.get(ID_FIELD).cloned().unwrap_or(Bson::Null);
            if self.original(&id).await?.is_some() {
                continue;
            }
            copy.remove(ARCHIVING_FIELD);
            self.limits.write()?;
            if self.moved_meanwhile(&copy).await? {
                let moved = archive.delete_one(in_flight(id));
                moved.await.naming(&collection_ref)?;
                continue;
            }
            self.archived(&archive, in_flight(id.clone())).await?;
            (self.report.archived).record(id_text(&id), Some(format!("to {archive_name}")));
        }
        Ok(())
    }

    /// Whether the content of `original` (gone from the collection) is stored under its
    /// derived id, with the hash it derives.
    async fn moved_meanwhile(&mut self, original: &Document) -> Result<bool, Error> {
        let Ok(Some(plan)) = self.prepare(original) else {
            return Ok(false);
        };
        let derived = plan.derived.to_string();
        let hash_field = self.model.hash_field();
        let held = super::find_by_id(&self.collection, &self.collection_ref(), &derived).await?;
        Ok(held.is_some_and(|held| held.get(hash_field) == plan.reserved.get(hash_field)))
    }

    /// Finishes the moves an interrupted run left reserved.
    async fn finish_interrupted(&mut self) -> Result<(), Halt> {
        self.finish_archiving().await?;
        let collection_ref = self.collection_ref();
        let mut cursor = self
            .collection
            .find(doc! { ADOPTION_FIELD: { "$exists": true } })
            .await
            .naming(&collection_ref)?;
        while let Some(reserved) = next_document(&mut cursor, &collection_ref).await? {
            let Some(from) = reserved_from(&reserved) else {
                continue;
            };
            let derived = stored_id_text(&reserved).unwrap_or_default();
            let moved = match self.original(&from).await? {
                // Not released yet: the move goes on from the document as it is now, where it
                // still goes under this reservation's id; else the reservation, a copy of what
                // the original was, is given up (its placeholder key would stop a new one), and
                // the scan meets the original as any other document.
                Some(original) => match self.prepare(&original) {
                    Ok(Some(plan)) if plan.derived.to_string() == derived => {
                        self.begin_document()?;
                        // A reservation still as the original reads needs no new reserve, so
                        // runs stopped after one step each still make progress.
                        let reserved_already = same_bytes(&plan.reserved, &without_mark(&reserved));
                        // A refresh keeps the mark.
                        let marked_already = is_releasing(&reserved);
                        (self.move_document(plan, (reserved_already, marked_already))).await?
                    }
                    _ => {
                        self.give_up(&derived, &from).await?;
                        continue;
                    }
                },
                // Released by a run (which marked it first): the move is finished. Not marked:
                // another tool deleted the original before any run released it, and the copy
                // would bring it back; it is given up.
                None if is_releasing(&reserved) => {
                    self.begin_document()?;
                    self.claim(&derived, &from, None).await?
                }
                None => {
                    self.give_up_unreleased(&derived, &from).await?;
                    continue;
                }
            };
            self.report
                .record_move(id_text(&from), derived, true, moved);
        }
        Ok(())
    }

    /// Streams the collection sorted by natural key, one key's documents at a time.
    async fn move_misplaced(&mut self) -> Result<(), Halt> {
        let scanned = self.scan_misplaced().await;
        // What was planned goes, whether the scan ended, stopped at a limit or failed.
        self.send_pending().await?;
        scanned
    }

    /// The scan of [`Adoption::move_misplaced`]: each group of one natural key adopted, moves
    /// batched in `pending`.
    async fn scan_misplaced(&mut self) -> Result<(), Halt> {
        let collection_ref = self.collection_ref();
        let mut scanned = 0;
        let (mut cursor, total) = sorted_by_natural_key(&self.collection, self.model).await?;
        let mut group: Vec<Document> = Vec::new();
        while let Some(stored) = next_document(&mut cursor, &collection_ref).await? {
            scanned += 1;
            (self.progress)(&AuditProgress::new(scanned, total));
            // Reserved by this run, whose claim has not been made, or by a racing run.
            if stored.contains_key(ADOPTION_FIELD) {
                continue;
            }
            let key = stored_natural_key(self.model, &stored);
            let same_key = (group.first())
                .is_some_and(|first| stored_natural_key(self.model, first).collides_with(&key));
            if !same_key {
                // The cursor has left the group's key: moving its documents now cannot make the
                // cursor meet them again under that key.
                let closed = std::mem::take(&mut group);
                self.adopt_group(closed).await?;
            }
            group.push(stored);
        }
        self.adopt_group(group).await
    }

    /// Adopts the documents of one natural key: moves the one kept ([`kept_of_group`]) after
    /// archiving the others, or reports them all.
    async fn adopt_group(&mut self, mut group: Vec<Document>) -> Result<(), Halt> {
        if group.is_empty() {
            return Ok(());
        }
        let Some(keep) = kept_of_group(group.len(), || self.duplicates.choose(&group)) else {
            let key = stored_natural_key(self.model, &group[0]).shown();
            let ids = group.iter().filter_map(stored_id_text);
            leave_duplicates(&mut self.report, key, group.len(), ids);
            return Ok(());
        };
        // The one kept must move (or be in place) before the others are set aside: a key left
        // with only a document that cannot move would have lost its readable ones to the archive.
        let plan = match self.prepare(&group[keep]) {
            Ok(plan) => plan,
            Err(why) => {
                let id = stored_id_text(&group[keep]).unwrap_or_default();
                if group.len() == 1 {
                    self.report.failed.record(id, Some(why));
                    return Ok(());
                }
                self.report.failed.record(
                    id,
                    Some(format!(
                        "kept by the rule, but {why}: its duplicates are left as they are"
                    )),
                );
                let key = stored_natural_key(self.model, &group[0]).shown();
                let ids = group.iter().filter_map(stored_id_text);
                leave_duplicates(&mut self.report, key, group.len(), ids);
                return Ok(());
            }
        };
        group.swap_remove(keep);
        for duplicate in group {
            self.archive(&duplicate).await?;
        }
        let Some(plan) = plan else {
            return Ok(());
        };
        self.begin_document()?;
        if self.limits.counts_writes() {
            return self.move_one(plan).await;
        }
        self.pending.push(plan);
        if self.pending.len() >= MOVES_PER_BATCH {
            self.send_pending().await?;
        }
        Ok(())
    }

    /// Moves one document, step by step, and reports it.
    async fn move_one(&mut self, plan: Plan) -> Result<(), Halt> {
        let (from, to) = (id_text(&plan.from), plan.derived.to_string());
        let ended = self.move_document(plan, (false, false)).await?;
        self.report.record_move(from, to, false, ended);
        Ok(())
    }
}
