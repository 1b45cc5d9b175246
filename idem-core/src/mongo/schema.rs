//! The unique index that keeps a collection's natural key unique: checked once per collection
//! before a store's first write, and created if missing.
//!
//! Any unique index on exactly the natural-key fields gives that guarantee, whatever its name (a
//! migration's, or one made by hand before idem): the store uses it and remembers its name, since
//! a duplicate-key error in it means the natural key is taken. An index that would let one
//! natural key be stored under two ids (partial, sparse) or that compares keys otherwise than
//! idem (a collation) is refused before any write.

use mongodb::bson::{doc, Bson, Document};
use mongodb::options::{Collation, IndexOptions};
use mongodb::IndexModel;

use super::compare::number;
use super::errors::{server_code, Naming};
use super::{
    duplicate_key_message, is_duplicate_key, locked, mongo_error, Store, NATURAL_KEY_INDEX,
};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::Model;

/// MongoDB's error codes for an index that cannot be built because one on the same fields
/// exists with other options or another name (IndexOptionsConflict, IndexKeySpecsConflict).
const INDEX_CONFLICTS: [i32; 2] = [85, 86];

impl Store {
    /// Makes sure the natural-key index exists before a write; an error names `document`, the
    /// document whose write needed the check.
    pub(super) async fn verify_indexes(
        &self,
        model: &Model,
        document: &DocumentRef,
    ) -> Result<(), Error> {
        if self.is_indexed(model) {
            return Ok(());
        }
        self.create_natural_key_index(model, document).await
    }

    /// Makes sure a unique index keeps `model`'s natural key unique: idem's own
    /// ([`NATURAL_KEY_INDEX`]) if it is there, which must serve; else another that serves; else
    /// idem's, created. An error names `document`, the document whose write needed the check.
    pub(super) async fn create_natural_key_index(
        &self,
        model: &Model,
        document: &DocumentRef,
    ) -> Result<(), Error> {
        if !self.index_natural_keys {
            id_alone_guards(model, document)?;
            self.remember_indexed(model, NATURAL_KEY_INDEX.to_owned());
            return Ok(());
        }
        let indexes = self.list_indexes(model, document).await?;
        if let Some(serving) = serving_index(model, document, &indexes)? {
            self.remember_indexed(model, serving);
            return Ok(());
        }
        // The simple collation, named: an index without one would take the collection's default,
        // and a later check would refuse the index idem made.
        let options = IndexOptions::builder()
            .name(NATURAL_KEY_INDEX.to_owned())
            .unique(true)
            .collation(simple_collation())
            .build();
        let index = IndexModel::builder()
            .keys(natural_key_pattern(model))
            .options(options)
            .build();
        crate::trace::round_trip("createIndexes");
        match self.raw_collection(model).create_index(index).await {
            Ok(_) => {
                crate::trace::index_created(model.collection());
                self.remember_indexed(model, NATURAL_KEY_INDEX.to_owned());
                Ok(())
            }
            // Stored documents share a natural key: the collection's fault, not the document's
            // whose write needed the index.
            Err(error) if is_duplicate_key(&error) => Err(Error::new(
                DocumentRef::collection(model),
                ErrorKind::DuplicateNaturalKeys {
                    index: NATURAL_KEY_INDEX.to_owned(),
                    duplicate_key: self.duplicated_key(model, &error).await,
                },
            )),
            // An index on the same fields keeps the server from building idem's: one created
            // since the listing, which may serve, or one the server will not have a second index
            // beside, which cannot.
            Err(error) if is_index_conflict(&error) => {
                let indexes = self.list_indexes(model, document).await?;
                match serving_index(model, document, &indexes)? {
                    Some(serving) => {
                        self.remember_indexed(model, serving);
                        Ok(())
                    }
                    None => Err(index_refused(model, document, &indexes, &error)),
                }
            }
            Err(source) => Err(mongo_error(document, source)),
        }
    }

    /// The indexes of `model`'s collection. A collection that does not exist yet has none;
    /// listing them fails on some servers (NamespaceNotFound) and returns nothing on others. Any
    /// other failure is the call's: a server that cannot be reached is reported after one server
    /// selection, not after a second one for the index build.
    async fn list_indexes(
        &self,
        model: &Model,
        document: &DocumentRef,
    ) -> Result<Vec<IndexModel>, Error> {
        crate::trace::round_trip("listIndexes");
        let mut cursor = match self.raw_collection(model).list_indexes().await {
            Ok(cursor) => cursor,
            Err(source) if is_namespace_missing(&source) => return Ok(Vec::new()),
            Err(source) => return Err(mongo_error(document, source)),
        };
        let mut indexes = Vec::new();
        while cursor.advance().await.naming(document)? {
            // An index the driver cannot read (a kind it does not know) is not one idem uses.
            if let Ok(index) = cursor.deserialize_current() {
                indexes.push(index);
            }
        }
        Ok(indexes)
    }

    /// A natural key that more than one stored document holds, for the error of an index build
    /// they made fail: as the server's message shows it (`dup key: { … }`, shown, not
    /// interpreted), or else from one grouping read of the collection.
    async fn duplicated_key(&self, model: &Model, error: &mongodb::error::Error) -> String {
        if let Some((_, shown)) = duplicate_key_message(error).split_once("dup key: ") {
            return shown.trim().to_owned();
        }
        let group: Document = model
            .natural_key_fields()
            .map(|field| {
                let path = Bson::String(format!("${}", field.stored_name()));
                (field.stored_name().to_owned(), path)
            })
            .collect();
        let pipeline = [
            doc! { "$group": { "_id": group, "documents": { "$sum": 1 } } },
            doc! { "$match": { "documents": { "$gt": 1 } } },
            doc! { "$limit": 1 },
        ];
        let first = async {
            let collection = self.raw_collection(model);
            let aggregate =
                (collection.aggregate(pipeline).allow_disk_use(true)).collation(simple_collation());
            let mut cursor = aggregate.await.ok()?;
            cursor.advance().await.ok()?.then_some(())?;
            let first = cursor.deserialize_current().ok()?;
            first.get_document("_id").ok().map(ToString::to_string)
        };
        first
            .await
            .unwrap_or_else(|| "(not shown by the server)".to_owned())
    }

    /// The name of the unique index that keeps `model`'s natural key unique, as the check
    /// before the store's first write of the collection found it: a duplicate-key error in this
    /// index means the natural key is taken. [`NATURAL_KEY_INDEX`] before that check.
    pub(super) fn natural_key_index(&self, model: &Model) -> String {
        let indexes = locked(&self.natural_key_indexes);
        let index = indexes.get(model.collection()).map(String::as_str);
        index.unwrap_or(NATURAL_KEY_INDEX).to_owned()
    }

    fn is_indexed(&self, model: &Model) -> bool {
        locked(&self.natural_key_indexes).contains_key(model.collection())
    }

    fn remember_indexed(&self, model: &Model, index: String) {
        locked(&self.natural_key_indexes).insert(model.collection(), index);
    }
}

/// The name of the index in `indexes` that keeps `model`'s natural key unique: idem's own, which
/// must serve (an error says why it cannot), or else another that serves; `None` if none does.
fn serving_index(
    model: &Model,
    document: &DocumentRef,
    indexes: &[IndexModel],
) -> Result<Option<String>, Error> {
    if let Some(ours) = indexes
        .iter()
        .find(|index| index_name(index) == Some(NATURAL_KEY_INDEX))
    {
        let problems = unfitness(model, ours);
        if problems.is_empty() {
            return Ok(Some(NATURAL_KEY_INDEX.to_owned()));
        }
        return Err(schema_mismatch(
            model,
            document,
            format!(
                "{}; the natural key needs a unique index on exactly {}, neither partial nor \
                 sparse, under the simple collation: drop {NATURAL_KEY_INDEX} and idem creates \
                 the right one",
                unfit(ours, &problems),
                natural_key_pattern(model),
            ),
        ));
    }
    Ok(indexes
        .iter()
        .filter(|index| unfitness(model, index).is_empty())
        .find_map(index_name)
        .map(str::to_owned))
}

/// What keeps `index` from keeping `model`'s natural key unique as idem needs it: one phrase per
/// problem, each following "index NAME"; empty if it serves.
fn unfitness(model: &Model, index: &IndexModel) -> Vec<String> {
    let options = index.options.clone().unwrap_or_default();
    let mut problems = Vec::new();
    if !on_exactly_the_natural_key(model, &index.keys) {
        problems.push(format!("is on {}", index.keys));
    }
    if options.unique != Some(true) {
        problems.push("is not unique".to_owned());
    }
    if let Some(filter) = &options.partial_filter_expression {
        problems.push(format!(
            "is partial (partialFilterExpression {filter}): documents outside that filter could \
             hold one natural key under two ids"
        ));
    }
    if options.sparse == Some(true) {
        problems.push(
            "is sparse: documents without its fields are left out of it, and could hold one \
             natural key under two ids"
                .to_owned(),
        );
    }
    if let Some(collation) = options.collation.filter(|c| c.locale != "simple") {
        let shown = mongodb::bson::to_document(&collation)
            .map_or_else(|_| collation.locale.clone(), |shown| shown.to_string());
        problems.push(format!(
            "compares keys under the collation {shown}: natural keys idem tells apart (by case \
             or accents) would collide in it"
        ));
    }
    problems
}

/// `index` and what keeps it from serving (`problems`, [`unfitness`]), as a refusal names them.
fn unfit(index: &IndexModel, problems: &[String]) -> String {
    let name = index_name(index).unwrap_or("(unnamed)");
    format!("index {name} {}", problems.join("; and it "))
}

/// Whether an index on `keys` indexes exactly `model`'s natural-key fields, each ascending or
/// descending, in any order: the same fields are unique together whatever the order, and a
/// shell writes `1` as a double.
fn on_exactly_the_natural_key(model: &Model, keys: &Document) -> bool {
    let direction = |value: &Bson| number(value).is_some_and(|n| n.abs() == 1.0);
    keys.len() == model.natural_key_fields().count()
        && model
            .natural_key_fields()
            .all(|field| keys.get(field.stored_name()).is_some_and(direction))
}

/// The refusal after the server would not build idem's index beside the indexes on the
/// natural-key fields, none of which serves.
fn index_refused(
    model: &Model,
    document: &DocumentRef,
    indexes: &[IndexModel],
    error: &mongodb::error::Error,
) -> Error {
    let blocking: Vec<String> = indexes
        .iter()
        .filter(|index| on_exactly_the_natural_key(model, &index.keys))
        .map(|index| unfit(index, &unfitness(model, index)))
        .collect();
    let server = match error.kind.as_ref() {
        mongodb::error::ErrorKind::Command(command) => command.message.clone(),
        _ => error.to_string(),
    };
    schema_mismatch(
        model,
        document,
        format!(
            "the server would not create idem's unique index {NATURAL_KEY_INDEX} on {} ({server}){}{}; \
             drop the index that cannot serve, and idem creates its own",
            natural_key_pattern(model),
            if blocking.is_empty() { "" } else { ": " },
            blocking.join("; "),
        ),
    )
}

/// Refuses a type whose id `_id` cannot stand in for the natural-key index: one with a time
/// part, or a random one.
fn id_alone_guards(model: &Model, document: &DocumentRef) -> Result<(), Error> {
    let why = match (model.timestamp_field(), model.idempotency_key_field()) {
        (Some(field), _) => format!(
            "its id has a time part (the timestamp field `{}`, stored as `{}`): two writes of \
             one natural key with different timestamps would store two documents",
            field.name(),
            field.stored_name()
        ),
        (None, Some(field)) => format!(
            "its id is random, fixed by the first write of its idempotency key `{}`: two racing \
             writes of one key would store two documents",
            field.name()
        ),
        (None, None) => return Ok(()),
    };
    Err(schema_mismatch(
        model,
        document,
        format!(
            "without a natural-key index (Store::with_natural_key_index(false)) `_id` is the only \
             guard against two documents for one natural key, and {why}; keep the natural-key \
             index for this collection"
        ),
    ))
}

fn schema_mismatch(model: &Model, document: &DocumentRef, problem: String) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::SchemaMismatch {
            collection: model.collection().to_owned(),
            problem,
        },
    )
}

fn index_name(index: &IndexModel) -> Option<&str> {
    index.options.as_ref()?.name.as_deref()
}

fn is_index_conflict(error: &mongodb::error::Error) -> bool {
    server_code(error).is_some_and(|code| INDEX_CONFLICTS.contains(&code))
}

/// Whether `error` says the collection does not exist (code 26, NamespaceNotFound).
fn is_namespace_missing(error: &mongodb::error::Error) -> bool {
    server_code(error) == Some(26)
}

/// The key pattern of idem's natural-key index: each natural-key field, ascending, in order.
pub(super) fn natural_key_pattern(model: &Model) -> Document {
    model
        .natural_key_fields()
        .map(|field| (field.stored_name().to_owned(), Bson::Int32(1)))
        .collect()
}

/// The simple collation, which idem's natural-key index is built under. A read by natural key,
/// or sorted or grouped by it, names it: keys compare byte for byte whatever the collection's
/// default (which MongoDB applies to a command naming none), and the server can use that index
/// (one that matches an index's collation to the query's, as SecantusDB does, otherwise scans
/// the collection). A read by `_id` names none: the `_id` index is under the default.
pub(super) fn simple_collation() -> Collation {
    Collation::builder().locale("simple").build()
}
