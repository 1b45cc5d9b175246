//! The primitives that keep side effects exact when acknowledgements are lost: derived sets,
//! unique pushes and operations applied once.

use std::collections::HashSet;

use mongodb::bson::{self, doc, Bson, Document};
use mongodb::Collection;
use serde::Serialize;

use super::batch::{refused_by_server, write_commands, write_errors};
use super::write::{nul_name_problem, PreparedWrite};
use super::{
    find_by_id, find_ids, mongo_error, unique_index_conflict, update_or_explain, Store,
    APPLIED_OPS_FIELD, DUPLICATE_KEY,
};
use crate::error::Error;
use crate::id::Id;
use crate::model::{
    item_key_is_a_list, item_without_key, pushed_list, DocumentRef, Idempotent, Model, OpId,
};
use crate::outcome::{Applied, Pushed};
use crate::trace::{Call, CallKind};

impl Store {
    /// Inserts the members of a derived set (the awards a rule says a user has earned) and
    /// returns exactly the members this call inserted, in input order.
    ///
    /// Call it with the full set every time: members already stored are skipped by the unique
    /// `_id`, in the same round trip. Callers racing with overlapping sets each get a disjoint
    /// share, so an effect run for each returned member (a notification) runs once. This holds
    /// when the rule is pure (the same inputs derive the same members, with the same ids) and
    /// monotonic (a member once earned stays earned).
    ///
    /// A member whose natural key is stored under another id (its timestamp moved) is refused
    /// with [`Error::FrozenFieldChanged`], as `upsert` refuses it; the members without conflict
    /// are stored by then, and a retry without the refused member finds them.
    ///
    /// If the acknowledgement is lost, the call fails; the retry finds the members stored and
    /// returns none of them. Effects that must survive that are [`apply_once`](Store::apply_once)
    /// operations keyed by the member's id.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<Vec<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        let call = Call::new(CallKind::InsertNew, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let model = &T::MODEL;
            let mut seen = HashSet::new();
            let mut candidates = Vec::new();
            for member in members {
                let write = PreparedWrite::new(member)?;
                if seen.insert(write.id) {
                    candidates.push((member, write));
                }
            }
            if candidates.is_empty() {
                return Ok(Vec::new());
            }
            self.verify_indexes(model, &DocumentRef::collection(model))
                .await?;
            let whole = DocumentRef::collection(model);
            let documents: Vec<(usize, Document)> = candidates
                .iter()
                .enumerate()
                .map(|(index, (_, write))| (index, write.inserted_document()))
                .collect();
            let limits = self.limits_for(model, &documents).await?;
            let mut existing = HashSet::new();
            let mut collided = Vec::new();
            for command in write_commands(documents, limits) {
                let (indexes, documents): (Vec<usize>, Vec<Document>) = command.into_iter().unzip();
                let command =
                    doc! { "insert": model.collection(), "documents": documents, "ordered": false };
                let reply = self.run_write_command(&whole, command).await?;
                for (position, error) in write_errors(&reply) {
                    let Some(&index) = indexes.get(position) else {
                        continue;
                    };
                    let write = &candidates[index].1;
                    if error.get_i32("code").ok() != Some(DUPLICATE_KEY) {
                        return Err(refused_by_server(&write.document, error, ""));
                    }
                    // The index the duplicate is in, as the server reports it (`keyPattern`): on
                    // `_id`, the member is stored already; on another, or unreported, the stored
                    // documents are read to tell.
                    let on_id = error
                        .get_document("keyPattern")
                        .is_ok_and(|pattern| pattern.keys().eq(["_id"]));
                    if on_id {
                        existing.insert(index);
                    } else {
                        let message = error.get_str("errmsg").unwrap_or_default().to_owned();
                        collided.push((index, message));
                    }
                }
            }
            let collection = self.raw_collection(model);
            existing.extend(
                self.already_stored(&collection, &candidates, &collided)
                    .await?,
            );
            Ok(candidates
                .into_iter()
                .enumerate()
                .filter(|(index, _)| !existing.contains(index))
                .map(|(_, (member, _))| member.clone())
                .collect())
        })
        .await
    }

    /// Of the members whose insert collided on another index than `_id` (`collided`, indexes
    /// into `candidates`, with the server's message), those stored under their own id: one read
    /// of their ids (a server may report the natural-key index for a document stored under the
    /// same id). A member whose natural key is stored under another id (a field feeding the id
    /// changed) is refused as `upsert` refuses it; one that collided on another unique index is
    /// refused naming it.
    async fn already_stored<T>(
        &self,
        collection: &Collection<Document>,
        candidates: &[(&T, PreparedWrite)],
        collided: &[(usize, String)],
    ) -> Result<HashSet<usize>, Error> {
        let Some(&(first, _)) = collided.first() else {
            return Ok(HashSet::new());
        };
        let ids: Vec<&str> = collided
            .iter()
            .map(|(index, _)| candidates[*index].1.id_text.as_str())
            .collect();
        let whole = DocumentRef::collection(candidates[first].1.model);
        let stored_ids: HashSet<String> = find_ids(collection, &whole, &ids)
            .await?
            .into_iter()
            .collect();
        let mut existing = HashSet::new();
        for (index, message) in collided {
            let write = &candidates[*index].1;
            if stored_ids.contains(&write.id_text) {
                existing.insert(*index);
                continue;
            }
            match self.read_conflict(collection, write).await? {
                // Stored under its id since the read: a racing writer inserted it.
                (Some(_), _) => {
                    existing.insert(*index);
                }
                (None, Some(stored)) => return Err(write.id_change(&stored)),
                (None, None) => return Err(unique_index_conflict(write, message)),
            }
        }
        Ok(existing)
    }

    /// Appends `item` to the list `field` (its Rust name; marked `#[idem(push_by = "…")]`) of
    /// the document stored under `id`, unless an item with the same key is there already. One
    /// round trip when it appends, guarded by `$not: {$elemMatch}` so a retried push never
    /// appends twice.
    pub async fn push<T, I>(&self, id: Id, field: &'static str, item: &I) -> Result<Pushed, Error>
    where
        T: Idempotent,
        I: Serialize + Sync,
    {
        let call = Call::new(CallKind::Push, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            let list = pushed_list(model, field, &document)?;
            let serialize_error = |message| Error::Serialize {
                document: Box::new(document.clone()),
                message,
            };
            let item = match bson::to_bson(item) {
                Ok(Bson::Document(item)) => item,
                Ok(_) => return Err(item_without_key(document, list, [])),
                Err(error) => return Err(serialize_error(error.to_string())),
            };
            if let Some(problem) = nul_name_problem(&item) {
                return Err(serialize_error(problem));
            }
            let Some(item_key) = item
                .get(list.item_key())
                .filter(|key| !matches!(key, Bson::Null))
                .cloned()
            else {
                let written = item
                    .iter()
                    .filter(|(_, value)| !matches!(value, Bson::Null))
                    .map(|(name, _)| name);
                return Err(item_without_key(document, list, written));
            };
            if matches!(item_key, Bson::Array(_)) {
                return Err(item_key_is_a_list(document, list));
            }
            let collection = self.raw_collection(model);
            let id_text = id.to_string();
            let filter = doc! {
                "_id": id_text.as_str(),
                list.stored_name(): { "$not": { "$elemMatch": { list.item_key(): { "$eq": item_key.clone() } } } },
            };
            let update = doc! { "$push": { list.stored_name(): item } };
            let present = doc! {
                "_id": id_text.as_str(),
                format!("{}.{}", list.stored_name(), list.item_key()): { "$eq": item_key },
            };
            let (collection, document, id_text, present) =
                (&collection, &document, id_text.as_str(), &present);
            let explain = move || async move {
                crate::trace::round_trip("find");
                let found = collection
                    .find_one(present.clone())
                    .await
                    .map_err(|source| mongo_error(document, source))?;
                if found.is_some() {
                    return Ok(Some(Pushed::AlreadyPresent));
                }
                match find_by_id(collection, document, id_text).await? {
                    None => Err(Error::NotFound {
                        document: Box::new(document.clone()),
                    }),
                    Some(_) => Ok(None),
                }
            };
            update_or_explain(
                collection,
                document,
                &filter,
                &update,
                Pushed::Appended,
                explain,
            )
            .await
        })
        .await
    }

    /// Applies `update` (any MongoDB update: `$inc`, `$set`, `$push`…) to the document stored
    /// under `id` only if `op` has not been applied to it, recording `op` in the same atomic
    /// update. Returns `Applied`, or `AlreadyApplied` (nothing written).
    ///
    /// The update may touch only `#[idem(effect)]` fields (by their stored names, or paths inside
    /// them): upserts never overwrite those, so a replayed upsert cannot undo an operation. Any
    /// other path, a field the type does not have included, is refused with
    /// [`Error::NotAnEffectField`] before anything is sent.
    ///
    /// An operation that spans documents (credit one account, debit another) uses the same op id
    /// on each step; after a failure between steps, retrying the whole operation applies each
    /// step exactly once. Derive op ids from the triggering document
    /// ([`Idempotent::op_id`]) so effects converge however often that
    /// document is replayed. A document remembers its latest [`with_op_window`](Store::with_op_window)
    /// op ids in the field [`APPLIED_OPS_FIELD`].
    pub async fn apply_once<T>(&self, id: Id, op: &OpId, update: Document) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let call = Call::new(CallKind::ApplyOnce, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            if let Some(path) = unowned_path(model, &update) {
                return Err(Error::NotAnEffectField {
                    document: Box::new(document),
                    path,
                });
            }
            let collection = self.raw_collection(model);
            let id_text = id.to_string();
            let filter =
                doc! { "_id": id_text.as_str(), APPLIED_OPS_FIELD: { "$ne": op.as_str() } };
            let update = with_recorded_op(update, op, self.op_window);
            let (collection, document, id_text) = (&collection, &document, id_text.as_str());
            let explain = move || async move {
                crate::trace::round_trip("find");
                let stored = collection
                    .find_one(doc! { "_id": id_text })
                    .projection(doc! { APPLIED_OPS_FIELD: 1 })
                    .await
                    .map_err(|source| mongo_error(document, source))?;
                let Some(stored) = stored else {
                    return Err(Error::NotFound {
                        document: Box::new(document.clone()),
                    });
                };
                let applied = stored.get_array(APPLIED_OPS_FIELD).is_ok_and(|ops| {
                    ops.iter()
                        .any(|recorded| recorded.as_str() == Some(op.as_str()))
                });
                // Not applied, yet the guarded update matched nothing: the document changed in
                // between; the update goes again.
                Ok(applied.then_some(Applied::AlreadyApplied))
            };
            update_or_explain(
                collection,
                document,
                &filter,
                &update,
                Applied::Applied,
                explain,
            )
            .await
        })
        .await
    }
}

/// The first path in `update` that is not inside an effect field of `model`: every key of an
/// update operator names a path whose first segment must be an effect field, and so does every
/// destination of `$rename`. A key that is not an operator (a replacement document) is itself
/// such a path.
fn unowned_path(model: &Model, update: &Document) -> Option<String> {
    let owns = |path: &str| {
        let field = path.split('.').next().unwrap_or(path);
        model
            .effect_fields()
            .any(|effect| effect.stored_name() == field)
    };
    for (operator, paths) in update {
        if !operator.starts_with('$') {
            return Some(operator.clone());
        }
        let Bson::Document(paths) = paths else {
            return Some(operator.clone());
        };
        if let Some(path) = paths.keys().find(|path| !owns(path)) {
            return Some(path.clone());
        }
        if operator == "$rename" {
            let destination = paths.values().find(|to| !to.as_str().is_some_and(&owns));
            if let Some(destination) = destination {
                return Some(destination.as_str().unwrap_or("$rename").to_owned());
            }
        }
    }
    None
}

/// Adds to `update` the push of `op` onto the applied-ops list, keeping the latest `window`.
fn with_recorded_op(mut update: Document, op: &OpId, window: usize) -> Document {
    let record =
        doc! { "$each": [op.as_str()], "$slice": -(i64::try_from(window).unwrap_or(i64::MAX)) };
    match update.get_mut("$push") {
        Some(Bson::Document(pushes)) => {
            pushes.insert(APPLIED_OPS_FIELD, record);
        }
        _ => {
            update.insert("$push", doc! { APPLIED_OPS_FIELD: record });
        }
    }
    update
}
