//! The primitives that keep side effects exact when acknowledgements are lost: derived sets,
//! unique pushes and operations applied once.

use mongodb::bson::{doc, Bson, Document};
use serde::Serialize;

use super::errors::Naming;
use super::text_keys::to_bson;
use super::write::nul_name_problem;
use super::{find_by_id, update_or_explain, Store, APPLIED_OPS_FIELD};
use crate::change::{self, Amount, Change, ChangeKind};
use crate::document::DocumentRef;
use crate::engine::by_id::ById;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::insert::InsertReport;
use crate::model::{Model, OpId};
use crate::outcome::{Applied, Pushed};
use crate::push::{pushed_list, stored_not_a_list};
use crate::trace::{Call, CallKind};

impl Store {
    /// Inserts the members of a derived set (the awards a rule says a user has earned) and
    /// reports, per member in input order, whether this call inserted it, found it stored
    /// already, or refused it; [`InsertReport::inserted`] gives exactly the members this call
    /// inserted, in input order.
    ///
    /// Call it with the full set every time: members already stored (under their id, with their
    /// natural key) are matched and left alone, in the same round trip: one `update` command of
    /// `$setOnInsert` statements per chunk, no pipeline. Callers racing with overlapping sets each get a disjoint
    /// share, so an effect run for each inserted member (a notification) runs once. This holds
    /// when the rule is pure (the same inputs derive the same members, with the same ids) and
    /// monotonic (a member once earned stays earned).
    ///
    /// A refusal concerns its member alone, and the others are stored and reported beside it: a
    /// member whose natural key is stored under another id (its timestamp moved) is
    /// [`ErrorKind::FrozenFieldChanged`], as `upsert` refuses it; one colliding in another unique
    /// index is [`ErrorKind::UniqueIndexConflict`], naming it; one the server refuses (a collection
    /// validator) is [`ErrorKind::WriteRefused`]. A member that cannot be prepared (its id cannot be
    /// derived) fails the call before anything is sent.
    ///
    /// If the acknowledgement is lost, the call fails; the retry finds the members stored and
    /// reports them stored already. Effects that must survive that are
    /// [`apply_once`](Store::apply_once) operations keyed by the member's id.
    pub async fn insert_new<T>(&self, members: &[T]) -> Result<InsertReport<T>, Error>
    where
        T: Idempotent + Serialize + Sync + Clone,
    {
        let call = Call::new(CallKind::InsertNew, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            if !members.is_empty() {
                self.verify_indexes(&T::MODEL, &DocumentRef::collection(&T::MODEL))
                    .await?;
            }
            crate::engine::insert::insert_new(&self.driver(&T::MODEL, true), members).await
        })
        .await
    }

    /// Appends `item` to the list `field` (its Rust name; marked `#[idem(push_by = "…")]`) of
    /// the document stored under `id`, unless an item with the same key is there already. One
    /// round trip when it appends, guarded by `$not: {$elemMatch}` so a retried push never
    /// appends twice. A missing list is started by the push; a list another tool set to null is
    /// an empty one, started with this item after two reads (once: afterwards it is a list). A
    /// field stored as anything else is [`ErrorKind::Deserialize`].
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
            let serialize_error = |message| Error::new(document.clone(), ErrorKind::Serialize {
                message,
            });
            let item = to_bson(item).map_err(|error| serialize_error(error.to_string()))?;
            if let Some(problem) = item.as_document().and_then(nul_name_problem) {
                return Err(serialize_error(problem));
            }
            crate::push::item_key(&document, list, &item.clone().into_relaxed_extjson())?;
            let item_key = item.as_document().and_then(|item| item.get(list.item_key()));
            let item_key = item_key.cloned().unwrap_or(Bson::Null);
            let collection = self.raw_collection(model);
            let id_text = id.to_string();
            let name = list.stored_name();
            // A list or no field: `$push` appends to it or starts it. A null (another tool's)
            // would fail the push; the explanation below starts the list instead.
            let filter = doc! {
                "_id": id_text.as_str(),
                "$or": [{ name: { "$type": "array" } }, { name: { "$exists": false } }],
                name: { "$not": { "$elemMatch": { list.item_key(): { "$eq": item_key.clone() } } } },
            };
            let update = doc! { "$push": { name: item.clone() } };
            let present = doc! {
                "_id": id_text.as_str(),
                format!("{name}.{}", list.item_key()): { "$eq": item_key },
            };
            // Null or missing, not a list holding a null.
            let unstarted = doc! {
                "_id": id_text.as_str(),
                name: { "$eq": Bson::Null, "$not": { "$type": "array" } },
            };
            let start = doc! { "$set": { name: [item] } };
            let (collection, document, id_text) = (&collection, &document, id_text.as_str());
            let (present, unstarted, start) = (&present, &unstarted, &start);
            let explain = move || async move {
                crate::trace::round_trip("find");
                let found = collection
                    .find_one(present.clone())
                    .await
                    .naming(document)?;
                if found.is_some() {
                    return Ok(ById::Answered(Pushed::AlreadyPresent));
                }
                let Some(stored) = find_by_id(collection, document, id_text).await? else {
                    return Ok(ById::Missing);
                };
                match stored.get(name) {
                    Some(Bson::Null) => {
                        crate::trace::round_trip("update");
                        let started = collection
                            .update_one(unstarted.clone(), start.clone())
                            .await
                            .naming(document)?;
                        // Unmatched: another push started it meanwhile; the push goes again.
                        Ok(match started.matched_count {
                            0 => ById::Changed,
                            _ => ById::Answered(Pushed::Appended),
                        })
                    }
                    // Changed between the push and the reads: the push goes again.
                    Some(Bson::Array(_)) | None => Ok(ById::Changed),
                    Some(other) => Err(stored_not_a_list(
                        document,
                        list,
                        &format!("{:?}", other.element_type()),
                    )),
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

    /// Applies `changes` to the `#[idem(effect)]` fields of the document stored under `id` only
    /// if `op` has not been applied to it, recording `op` in the same atomic update. Returns
    /// `Applied`, or `AlreadyApplied` (nothing written); [`ErrorKind::NotFound`] if no document has
    /// that id. The same call on every store; [`apply_update_once`](Store::apply_update_once)
    /// takes any MongoDB update instead.
    ///
    /// A change of a field that is not an effect field of the type is refused with
    /// [`ErrorKind::NotAnEffectField`], a field changed twice or a value that does not
    /// serialize with [`ErrorKind::Serialize`], and an op id holding U+0000 (which the SQL
    /// stores cannot keep) with [`ErrorKind::OpIdHoldsNul`], before anything is sent.
    pub async fn apply_once<T>(
        &self,
        id: Id,
        op: &OpId,
        changes: &[Change],
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let document = DocumentRef::by_id(&T::MODEL, id);
        change::check_op(op, &document)?;
        change::check(&T::MODEL, &T::stored_columns(), changes, &document)?;
        // `$inc` before `$set`, each only if a change uses it.
        let mut update = doc! { "$inc": {}, "$set": {} };
        for change in changes {
            let (operator, value) = match &change.kind {
                ChangeKind::Add(Amount::Integer(amount)) => ("$inc", Bson::Int64(*amount)),
                ChangeKind::Add(Amount::Float(amount)) => ("$inc", Bson::Double(*amount)),
                ChangeKind::Set(value) => match &value.bson {
                    Ok(value) => ("$set", value.clone()),
                    Err(problem) => return Err(change::invalid(&document, change.field, problem)),
                },
                ChangeKind::Invalid(problem) => {
                    return Err(change::invalid(&document, change.field, problem))
                }
            };
            if let Ok(fields) = update.get_document_mut(operator) {
                fields.insert(change.field, value);
            }
        }
        let update: Document = (update.into_iter())
            .filter(|(_, fields)| {
                fields
                    .as_document()
                    .is_some_and(|fields| !fields.is_empty())
            })
            .collect();
        // `$inc` refuses a field holding null, which the SQL stores add to as 0: such a field
        // (an `Option` stored as `None`) is set to 0 first, once, and the operation goes again.
        let mut started: Vec<&str> = Vec::new();
        loop {
            let error = match self.apply_update_once::<T>(id, op, update.clone()).await {
                Ok(applied) => return Ok(applied),
                Err(error) => error,
            };
            let null_added = match inc_refused(&error, changes) {
                Some(IncRefused::NotANumber { field, stored }) if stored == "null" => changes
                    .iter()
                    .find(|change| change.field == field && !started.contains(&change.field)),
                _ => None,
            };
            let Some(change) = null_added else {
                return Err(addition_refused(error, changes));
            };
            let zero = match change.kind {
                ChangeKind::Add(Amount::Float(_)) => Bson::Double(0.0),
                _ => Bson::Int64(0),
            };
            crate::trace::round_trip("update");
            self.raw_collection(&T::MODEL)
                .update_one(
                    doc! { "_id": id.to_string(), change.field: { "$type": "null" } },
                    doc! { "$set": { change.field: zero } },
                )
                .await
                .naming(&document)?;
            started.push(change.field);
        }
    }

    /// Applies `update` (any MongoDB update: `$inc`, `$set`, `$push`…) to the document stored
    /// under `id` only if `op` has not been applied to it, recording `op` in the same atomic
    /// update: [`apply_once`](Store::apply_once) for what its [`Change`]s cannot say. Returns
    /// `Applied`, or `AlreadyApplied` (nothing written).
    ///
    /// The update may touch only `#[idem(effect)]` fields (by their stored names, or paths inside
    /// them): upserts never overwrite those, so a replayed upsert cannot undo an operation. Any
    /// other path, a field the type does not have included, is refused with
    /// [`ErrorKind::NotAnEffectField`] before anything is sent.
    ///
    /// An operation that spans documents (credit one account, debit another) uses the same op id
    /// on each step; after a failure between steps, retrying the whole operation applies each
    /// step exactly once. Derive op ids from the triggering document
    /// ([`Idempotent::op_id`]) so effects converge however often that
    /// document is replayed. A document remembers its latest [`with_op_window`](Store::with_op_window)
    /// op ids in the field [`APPLIED_OPS_FIELD`].
    pub async fn apply_update_once<T>(
        &self,
        id: Id,
        op: &OpId,
        update: Document,
    ) -> Result<Applied, Error>
    where
        T: Idempotent,
    {
        let call = Call::new(CallKind::ApplyOnce, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::by_id(model, id);
            change::check_op(op, &document)?;
            if let Some(path) = unowned_path(model, &update) {
                return Err(Error::new(document, ErrorKind::NotAnEffectField { path }));
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
                    .naming(document)?;
                let Some(stored) = stored else {
                    return Ok(ById::Missing);
                };
                let applied = stored.get_array(APPLIED_OPS_FIELD).is_ok_and(|ops| {
                    ops.iter()
                        .any(|recorded| recorded.as_str() == Some(op.as_str()))
                });
                // Not applied, yet the guarded update matched nothing: the document changed in
                // between; the update goes again.
                Ok(match applied {
                    true => ById::Answered(Applied::AlreadyApplied),
                    false => ById::Changed,
                })
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

/// Why the server refused an operation's `$inc`, as its error says.
enum IncRefused {
    /// Past an int64's range (a bad value, code 2).
    OutOfRange,
    /// On a field holding no number (a type mismatch, code 14: "… has the field 'balance' of
    /// non-numeric type string"): the field, else the first one added to, and what it holds.
    NotANumber { field: String, stored: String },
}

fn inc_refused(error: &Error, changes: &[Change]) -> Option<IncRefused> {
    let backend = error.as_backend()?;
    let said = backend.driver_error().to_string();
    match backend.code()? {
        "2" if said.contains("Failed to apply $inc") => Some(IncRefused::OutOfRange),
        "14" if said.contains("Cannot apply $inc") => {
            let named = said
                .split_once("has the field '")
                .and_then(|(_, rest)| rest.split_once("' of non-numeric type "));
            let (field, stored) = match named {
                Some((field, rest)) => (
                    field.to_owned(),
                    rest.split(|c: char| !c.is_alphanumeric())
                        .next()
                        .unwrap_or("a value"),
                ),
                None => (
                    changes
                        .iter()
                        .find(|change| matches!(change.kind, ChangeKind::Add(_)))
                        .map_or("", Change::field)
                        .to_owned(),
                    "a value",
                ),
            };
            Some(IncRefused::NotANumber {
                field,
                stored: stored.to_owned(),
            })
        }
        _ => None,
    }
}

/// `error`, or the refusal every store makes of the `$inc` it says the server refused:
/// [`ErrorKind::AddOutOfRange`], or the one naming a field that holds no number.
fn addition_refused(error: Error, changes: &[Change]) -> Error {
    match inc_refused(&error, changes) {
        Some(IncRefused::OutOfRange) => change::out_of_range_or(error, changes, |_| true),
        Some(IncRefused::NotANumber { field, stored }) => {
            change::stored_not_a_number(error.document(), &field, &stored)
        }
        None => error,
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
