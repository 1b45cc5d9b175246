//! One document's move, step by step: the plan (the copy to reserve under the derived id), the
//! reserve, the release of the original, the claim of the natural key, and the archive of a
//! duplicate set aside. [`Store::adopt`](crate::mongo::Store::adopt) says why each step is safe to repeat.

use mongodb::bson::{doc, Bson, Document};
use mongodb::Collection;

use super::{Adoption, ARCHIVE_SUFFIX};
use crate::audit::{Halt, MoveEnd};
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::model::ID_FIELD;
use crate::mongo::audit::{judge, stored_natural_key, ADOPTION_FIELD};
use crate::mongo::errors::Naming;
use crate::mongo::write::{equal_to, field_digest, stamp, stored_id_text};
use crate::mongo::{
    duplicate_key_message, find_by_id, index_in_message, is_duplicate_key, mongo_error,
    validator_refusal,
};
use crate::MAX_ATTEMPTS;

/// Why a move stops where its reservation is not as this run left it.
const RESERVATION_CHANGED: &str =
    "its reservation changed under another run of adopt; run adopt again";

/// Whether two documents hold the same bytes: a NaN is itself, where `==` on values says not.
pub(super) fn same_bytes(a: &Document, b: &Document) -> bool {
    matches!((mongodb::bson::to_vec(a), mongodb::bson::to_vec(b)), (Ok(x), Ok(y)) if x == y)
}

/// The mark of a copy in the archive collection whose original is not deleted yet.
pub(super) const ARCHIVING_FIELD: &str = "idemArchiving";

/// The filter of the archived copy of the document under `id` while it is in flight (marked
/// [`ARCHIVING_FIELD`]).
pub(super) fn in_flight(id: Bson) -> Document {
    doc! { ID_FIELD: id, ARCHIVING_FIELD: true }
}

/// The fields of `idemAdopt`: the original `_id`, the natural key set aside, and the mark a
/// run sets just before it deletes the original (never removed while the reservation stands).
const FROM: &str = "from";
const KEY: &str = "key";
const RELEASING: &str = "releasing";

/// One document's move.
pub(super) struct Plan {
    /// The original `_id`.
    pub from: Bson,
    pub derived: Id,
    /// The original as read: its release is pinned to it.
    pub original: Document,
    /// The copy reserved under the derived id, its key set aside.
    pub reserved: Document,
}

/// How a release went.
enum Released {
    Done,
    /// The original changed since it was read: here it is now.
    Changed(Document),
}

/// The filter matching `document` only while it is exactly as read: its `_id` and its whole
/// content.
pub(super) fn unchanged(document: &Document) -> Document {
    let id = document.get(ID_FIELD).cloned().unwrap_or(Bson::Null);
    doc! {
        ID_FIELD: id,
        "$expr": { "$eq": ["$$ROOT", { "$literal": document.clone() }] },
    }
}

/// The filter of a reservation: under the derived id, from this original.
pub(super) fn reservation(derived: &str, from: &Bson) -> Document {
    doc! { ID_FIELD: derived, format!("{ADOPTION_FIELD}.{FROM}"): from.clone() }
}

/// The mark of a reservation whose original is about to be deleted: a reservation whose
/// original is gone was released by a run if it holds the mark, else the original was deleted
/// by another tool before any run released it (and the copy is given up, not brought back).
pub(super) fn releasing_mark() -> Document {
    doc! { "$set": { format!("{ADOPTION_FIELD}.{RELEASING}"): true } }
}

/// Whether a reservation holds [`releasing_mark`].
pub(super) fn is_releasing(reserved: &Document) -> bool {
    (reserved.get_document(ADOPTION_FIELD)).is_ok_and(|adoption| adoption.contains_key(RELEASING))
}

/// A reservation as its plan makes it: without [`releasing_mark`].
pub(super) fn without_mark(reserved: &Document) -> Document {
    let mut planned = reserved.clone();
    if let Ok(adoption) = planned.get_document_mut(ADOPTION_FIELD) {
        adoption.remove(RELEASING);
    }
    planned
}

/// The claim of a reservation: its natural key restored, `idemAdopt` removed.
pub(super) fn claim_update(key: &Document) -> Document {
    doc! { "$set": key.clone(), "$unset": { ADOPTION_FIELD: "" } }
}

/// The original `_id` a reservation was copied from (null where it names none); `None` for a
/// document that is no reservation.
pub(super) fn reserved_from(reserved: &Document) -> Option<Bson> {
    let adoption = reserved.get_document(ADOPTION_FIELD).ok()?;
    Some(adoption.get(FROM).cloned().unwrap_or(Bson::Null))
}

/// The natural key a reservation set aside.
pub(super) fn key_set_aside(reserved: &Document) -> Option<&Document> {
    reserved
        .get_document(ADOPTION_FIELD)
        .and_then(|adoption| adoption.get_document(KEY))
        .ok()
}

/// Whether `error` is a duplicate key in the `_id` index (not in an index of the archive's own).
fn is_id_clash(error: &mongodb::error::Error) -> bool {
    is_duplicate_key(error) && index_in_message(duplicate_key_message(error)) == "_id_"
}

/// A failed reserve as the move's end where the collection's validator refused the copy (a
/// document of the collection may break a validator added after it, and a copy is checked as
/// any insert; the natural key set aside may break a rule on the key's type): the document is
/// reported and stays where it is. Any other failure is the run's.
fn refused_by_validator(
    collection: &DocumentRef,
    derived: &str,
    source: mongodb::error::Error,
) -> Result<Result<(), String>, Error> {
    match validator_refusal(&source) {
        Some(message) => Ok(Err(format!(
            "the collection's validator refuses its copy under its derived id {derived}, with \
             its natural key set aside while it moves ({message}); it stays where it is: relax \
             the validator (validationLevel \"off\") while adopt runs"
        ))),
        None => Err(mongo_error(collection, source)),
    }
}

impl Adoption<'_> {
    /// What moving `stored` takes: `Ok(None)` if it is under its derived id already, `Err` with
    /// the reason if it cannot be moved.
    pub(super) fn prepare(&self, stored: &Document) -> Result<Option<Plan>, String> {
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
        let digests: Vec<_> = (self.model.digested_fields())
            .map(|field| (field, field_digest(stored, field).ok().flatten()))
            .collect();
        let version_key = judged.version_key.as_deref();
        stamp(&mut adopted, self.model, &hash, &digests, version_key);
        let key: Document = stored_natural_key(self.model, stored)
            .0
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        let mut reserved = adopted;
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

    /// Reserves (unless `reserved_already`), marks (unless `marked_already`), releases and claims
    /// one document; the caller has counted it against the document limit.
    pub(super) async fn move_document(
        &mut self,
        mut plan: Plan,
        (mut reserved_already, mut marked_already): (bool, bool),
    ) -> Result<MoveEnd, Halt> {
        let derived = plan.derived.to_string();
        for _ in 0..MAX_ATTEMPTS {
            if !reserved_already {
                self.limits.write()?;
                if let Err(why) = self.reserve(&plan).await? {
                    return Ok(Err(why));
                }
            }
            // The mark and the deletion go together: a run stopped between them would leave
            // the reservation marked with its original in place, and a deletion of the original
            // by another tool would then be taken for a release.
            match marked_already {
                true => self.limits.write()?,
                false => {
                    let both_counted = self.limits.writes_together(2)?;
                    if !self.mark_releasing(&derived, &plan.from).await? {
                        return Ok(Err(RESERVATION_CHANGED.to_owned()));
                    }
                    if !both_counted {
                        self.limits.write()?;
                    }
                }
            }
            (reserved_already, marked_already) = (false, false);
            match self.release(&plan).await? {
                Released::Done => {
                    return self.claim(&derived, &plan.from, Some(&plan.reserved)).await
                }
                Released::Changed(now) => match self.prepare(&now) {
                    Ok(Some(fresh)) if fresh.derived == plan.derived => plan = fresh,
                    // Changed into a document with another key or id: the reservation is
                    // given up and the document is seen again by the next run.
                    Ok(_) | Err(_) => {
                        self.give_up(&plan.derived.to_string(), &plan.from).await?;
                        return Ok(Err(
                            "changed by another writer during the move; run adopt again".into(),
                        ));
                    }
                },
            }
        }
        Ok(Err(
            "changed by another writer at every attempt; run adopt again".into(),
        ))
    }

    /// Inserts the reserved copy under the derived id, or refreshes the one an earlier attempt
    /// left. `Ok(Err(why))`: the derived id is held by another document.
    async fn reserve(&mut self, plan: &Plan) -> Result<Result<(), String>, Error> {
        let collection_ref = self.collection_ref();
        let derived = plan.derived.to_string();
        let marked = match self.collection.insert_one(plan.reserved.clone()).await {
            Ok(_) => return Ok(Ok(())),
            Err(error) if is_duplicate_key(&error) => {
                let holder = find_by_id(&self.collection, &collection_ref, &derived).await?;
                // Ours if it names this original (a reservation naming none is not).
                let adoption = holder
                    .as_ref()
                    .and_then(|holder| holder.get_document(ADOPTION_FIELD).ok());
                let ours = adoption.and_then(|adoption| adoption.get(FROM)) == Some(&plan.from);
                match (holder, ours) {
                    (Some(holder), true) => is_releasing(&holder),
                    (Some(holder), false) => {
                        let holder = stored_id_text(&holder).unwrap_or_default();
                        return Ok(Err(format!(
                            "its derived id {holder} is held by another document"
                        )));
                    }
                    (None, _) => {
                        let index = duplicate_key_message(&error);
                        return Ok(Err(format!(
                            "unique index `{}` holds one of its values, so it cannot be copied \
                             before the original is deleted",
                            index_in_message(index)
                        )));
                    }
                }
            }
            Err(source) => return refused_by_validator(&collection_ref, &derived, source),
        };
        // The refresh keeps the mark as read, and replaces only a reservation still so marked:
        // a mark is never lost while its reservation stands.
        let (mut filter, mut refreshed) =
            (reservation(&derived, &plan.from), plan.reserved.clone());
        let mark = format!("{ADOPTION_FIELD}.{RELEASING}");
        match marked {
            true => {
                filter.insert(mark, true);
                if let Ok(adoption) = refreshed.get_document_mut(ADOPTION_FIELD) {
                    adoption.insert(RELEASING, true);
                }
            }
            false => drop(filter.insert(mark, doc! { "$exists": false })),
        }
        match self.collection.replace_one(filter, refreshed).await {
            Ok(replaced) if replaced.matched_count == 1 => Ok(Ok(())),
            Ok(_) => Ok(Err(RESERVATION_CHANGED.to_owned())),
            Err(source) => refused_by_validator(&collection_ref, &derived, source),
        }
    }

    /// Marks the reservation under `derived` copied from `from` as releasing its original
    /// ([`releasing_mark`]), before the original is deleted: whether it is still there to mark
    /// (a racing run may have claimed or given it up, and the original must then stay).
    async fn mark_releasing(&mut self, derived: &str, from: &Bson) -> Result<bool, Error> {
        let mark = self
            .collection
            .update_one(reservation(derived, from), releasing_mark());
        Ok(mark.await.naming(&self.collection_ref())?.matched_count == 1)
    }

    /// The original stored under `from`, as it is now. (`&mut self`, as every step here: an
    /// adoption is `Send` but not `Sync`, since it holds the caller's progress callback.)
    pub(super) async fn original(&mut self, from: &Bson) -> Result<Option<Document>, Error> {
        let find = self.collection.find_one(doc! { ID_FIELD: from.clone() });
        find.await.naming(&self.collection_ref())
    }

    /// Deletes `document` if it is exactly as read ([`unchanged`]): whether it did.
    async fn delete_unchanged(&mut self, document: &Document) -> Result<bool, Error> {
        let delete = self.collection.delete_one(unchanged(document));
        Ok(delete.await.naming(&self.collection_ref())?.deleted_count > 0)
    }

    /// Deletes the original if it is as read.
    async fn release(&mut self, plan: &Plan) -> Result<Released, Error> {
        if self.delete_unchanged(&plan.original).await? {
            return Ok(Released::Done);
        }
        Ok(match self.original(&plan.from).await? {
            // Released by a racing run of adopt.
            None => Released::Done,
            Some(now) => Released::Changed(now),
        })
    }

    /// Restores the natural key of the reserved copy (`reserved`, or read under `derived`): the
    /// move is done.
    pub(super) async fn claim(
        &mut self,
        derived: &str,
        from: &Bson,
        reserved: Option<&Document>,
    ) -> Result<MoveEnd, Halt> {
        let collection_ref = self.collection_ref();
        // The reservation this run wrote needs no read: the update below is pinned to it by its
        // id and `idemAdopt.from`, and matches nothing if a racing run claimed it first.
        let read = match reserved {
            Some(_) => None,
            None => find_by_id(&self.collection, &collection_ref, derived).await?,
        };
        // No reservation under the derived id, or its key restored by a racing run of adopt.
        let Some(key) = reserved.or(read.as_ref()).and_then(key_set_aside) else {
            return Ok(Ok(()));
        };
        self.limits.write()?;
        let claimed = self
            .collection
            .update_one(reservation(derived, from), claim_update(key))
            .await;
        match claimed {
            Ok(_) => Ok(Ok(())),
            Err(error) if is_duplicate_key(&error) => {
                let holder_filter =
                    equal_to(key.iter().map(|(name, value)| (name.as_str(), value)));
                let holder = self
                    .collection
                    .find_one(holder_filter)
                    .collation(crate::mongo::schema::simple_collation())
                    .await
                    .naming(&collection_ref)?;
                let holder = holder
                    .as_ref()
                    .and_then(stored_id_text)
                    .unwrap_or_else(|| "another document".to_owned());
                Ok(Err(format!(
                    "its natural key {key} was stored under {holder} while it moved; its content \
                     waits under {derived} with the key set aside: keep one, delete the other, \
                     and run adopt again"
                )))
            }
            Err(source) => match validator_refusal(&source) {
                Some(message) => Ok(Err(format!(
                    "the collection's validator refuses its natural key {key} restored \
                     ({message}); its content waits under {derived} with the key set aside: \
                     relax the validator and run adopt again"
                ))),
                None => Err(mongo_error(&collection_ref, source).into()),
            },
        }
    }

    /// Deletes the reservation under `derived` copied from `from` (whose original is still
    /// there, so nothing is lost): one whose original changed beyond a refresh, or that an
    /// interrupted run left of what the original was.
    pub(super) async fn give_up(&mut self, derived: &str, from: &Bson) -> Result<(), Error> {
        let cancel = self.collection.delete_one(reservation(derived, from));
        cancel.await.naming(&self.collection_ref()).map(drop)
    }

    /// [`Adoption::give_up`] of a reservation no run marked releasing: one whose original
    /// another tool deleted. A run that marks it meanwhile keeps it.
    pub(super) async fn give_up_unreleased(
        &mut self,
        derived: &str,
        from: &Bson,
    ) -> Result<(), Error> {
        let mut unreleased = reservation(derived, from);
        unreleased.insert(
            format!("{ADOPTION_FIELD}.{RELEASING}"),
            doc! { "$exists": false },
        );
        let cancel = self.collection.delete_one(unreleased);
        cancel.await.naming(&self.collection_ref()).map(drop)
    }

    /// Moves a duplicate set aside by the rule to the archive collection: copied first (marked
    /// [`ARCHIVING_FIELD`]), then deleted if unchanged, then the copy's mark removed; a crash in
    /// between leaves a marked copy, never a loss. A marked copy is one in flight, which the next
    /// copy of the same document replaces (the document may have been edited meanwhile); an
    /// unmarked one is a document archived before, which is never replaced: a document with its
    /// `_id` (a reused legacy id) stays where it is, reported.
    pub(super) async fn archive(&mut self, duplicate: &Document) -> Result<(), Halt> {
        let id = stored_id_text(duplicate).unwrap_or_default();
        let archive_name = self.archive_name();
        let archive: Collection<Document> = self.store.database.collection(&archive_name);
        self.begin_document()?;
        let in_flight = in_flight(duplicate.get(ID_FIELD).cloned().unwrap_or(Bson::Null));
        let mut copy = duplicate.clone();
        copy.insert(ARCHIVING_FIELD, true);
        // A run limited in writes does not copy again what an earlier one copied, so that a
        // run of one write still makes progress.
        let copied = match self.limits.counts_writes() {
            true => (archive.find_one(in_flight.clone()).await)
                .naming(&self.collection_ref())?
                .is_some_and(|held| same_bytes(&held, &copy)),
            false => false,
        };
        if !copied {
            self.limits.write()?;
            let copy = archive.replace_one(in_flight.clone(), copy).upsert(true);
            match copy.await {
                Ok(_) => {}
                Err(error) if is_id_clash(&error) => {
                    let why = format!(
                        "{archive_name} holds another document under its id, archived before: \
                         it stays where it is (move that one away, and run adopt again)"
                    );
                    self.report.failed.record(id, Some(why));
                    return Ok(());
                }
                Err(source) => return Err(mongo_error(&self.collection_ref(), source).into()),
            }
        }
        self.limits.write()?;
        if !self.delete_unchanged(duplicate).await? {
            self.report.failed.record(
                id,
                Some("changed while being set aside; its copy is archived, run adopt again".into()),
            );
            return Ok(());
        }
        self.limits.write()?;
        self.archived(&archive, in_flight).await?;
        self.report
            .archived
            .record(id, Some(format!("to {archive_name}")));
        Ok(())
    }

    /// The archive collection of the adopted one.
    pub(super) fn archive_name(&self) -> String {
        format!("{}{ARCHIVE_SUFFIX}", self.model.collection())
    }

    /// Removes the mark of the archived copy `in_flight` finds: its original is deleted.
    pub(super) async fn archived(
        &mut self,
        archive: &Collection<Document>,
        in_flight: Document,
    ) -> Result<(), Error> {
        let unmark = doc! { "$unset": { ARCHIVING_FIELD: "" } };
        let done = archive.update_one(in_flight, unmark);
        done.await.naming(&self.collection_ref()).map(drop)
    }
}
