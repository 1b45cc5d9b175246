//! Typed reads: a document by id or by natural key, as its type.

use mongodb::bson::{self, Bson, Document};
use serde::de::DeserializeOwned;

use super::errors::Naming;
use super::text_keys::from_stored;
use super::Store;
use crate::document::{DocumentRef, NaturalKey};
use crate::error::{Error, ErrorKind};
use crate::id::{Id, KeyValue};
use crate::idempotent::Idempotent;
use crate::trace::{Call, CallKind};

impl Store {
    /// The document stored under `id`, as `T`; `None` if none is. A deleted document is
    /// returned with its tombstone set. A stored document that does not read as `T` (written by
    /// other code, or by an older version of the type) is [`ErrorKind::Deserialize`]. One `find`.
    pub async fn get<T>(&self, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let call = Call::new(CallKind::Get, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let document = DocumentRef::by_id(&T::MODEL, id);
            let filter = bson::doc! { crate::model::ID_FIELD: id };
            self.read_one::<T>(filter, document).await
        })
        .await
    }

    /// The document stored under the natural key `key`, as `T`; `None` if none is. The
    /// generated `find` builds the key from its values: `Post::find(&store, "hello", "en")`.
    /// One `find`, through the unique natural-key index.
    pub async fn find<T>(&self, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let call = Call::find(T::MODEL.collection(), key);
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::new(model, key.clone());
            if !key.fits(model, &T::stored_columns(), &document)? {
                return Ok(None);
            }
            let mut filter = Document::new();
            for (field, (_, value)) in model.natural_key_fields().zip(key.parts()) {
                let Some(value) = key_bson(value) else {
                    // No stored key holds this value (an integer beyond 64 bits).
                    return Ok(None);
                };
                filter.insert(field.stored_name(), value);
            }
            self.read_one::<T>(filter, document).await
        })
        .await
    }

    async fn read_one<T>(&self, filter: Document, document: DocumentRef) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
    {
        let model = &T::MODEL;
        crate::trace::round_trip("find");
        let stored = self
            .database
            .collection::<Document>(model.collection())
            .find_one(filter)
            .collation(super::schema::simple_collation())
            .await
            .naming(&document)?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        from_stored(model, stored)
            .map(Some)
            .map_err(|message| Error::new(document, ErrorKind::Deserialize { message }))
    }
}

/// A key value as the filter matches it: MongoDB compares numbers by value across their BSON
/// types, so an `Int64` finds a key serde stored as `Int32`.
fn key_bson(value: &KeyValue) -> Option<Bson> {
    match value {
        KeyValue::Text(text) => Some(Bson::String(text.clone())),
        KeyValue::Integer(number) => i64::try_from(*number).ok().map(Bson::Int64),
        KeyValue::Bool(flag) => Some(Bson::Boolean(*flag)),
        _ => None,
    }
}
