//! Events: documents with no natural key, made idempotent by an idempotency key the client
//! sends with each request.

use mongodb::bson::doc;
use mongodb::options::ReturnDocument;
use serde::Serialize;

use super::write::{stored_id, stored_id_text, PreparedWrite};
use super::{
    duplicate_key_message, index_in_message, is_duplicate_key, mongo_error, unique_index_conflict,
    Store, MAX_ATTEMPTS,
};
use crate::error::Error;
use crate::id::Id;
use crate::model::{idempotency_key, Idempotent};
use crate::outcome::{Outcome, Recorded};
use crate::trace::{Call, CallKind};

impl Store {
    /// Records an event (a type with an `#[idem(idempotency_key)]` field): the first write of a
    /// key stores it under a fresh random ULID; a retry with the same key and the same payload
    /// returns that first id with `Unchanged`; the same key with another payload is
    /// [`Error::IdempotencyKeyReused`]. Nothing is written but the first time. One round trip.
    ///
    /// An empty key is refused ([`Error::EmptyKey`]): requests that lost their key would all
    /// fold into the first one. A key already stored by another tool, under an `_id` idem did
    /// not assign, is [`Error::ForeignId`]. An event colliding in another unique index is
    /// [`Error::UniqueIndexConflict`], naming it, after one read.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Record, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let model = &T::MODEL;
            let key_field = model
                .idempotency_key_field()
                .ok_or_else(|| Error::NoDerivedId {
                    document: Box::new(event.document_ref()),
                })?;
            idempotency_key(event)?;
            // Prepared first: a refused event sends nothing, not even the index check.
            let write = PreparedWrite::with_id(event, Id::from(ulid::Ulid::generate()))?;
            self.verify_indexes(model, &event.document_ref()).await?;
            let collection = self.raw_collection(model);
            let on_insert = doc! { "$setOnInsert": write.inserted_document() };
            for attempt in 0..MAX_ATTEMPTS {
                if attempt > 0 {
                    crate::trace::retry("a concurrent writer changed the document");
                }
                // The after-image says who stored the key: this call if it carries this call's id.
                // A before-image would not: a server that retries a racing upsert internally as an
                // update returns none, as if this call had inserted.
                crate::trace::round_trip("findAndModify");
                let after = collection
                    .find_one_and_update(write.natural_key_filter(), on_insert.clone())
                    .upsert(true)
                    .return_document(ReturnDocument::After)
                    .await;
                let stored = match after {
                    Ok(Some(stored)) => stored,
                    // A racing first write of the same key won; the next attempt finds it.
                    Ok(None) => continue,
                    // A racing first write of the same key, which the read finds, or another
                    // unique index, which refuses this event every time: never a retry loop.
                    Err(error) if is_duplicate_key(&error) => {
                        crate::trace::round_trip("find");
                        let by_key = collection
                            .find_one(write.natural_key_filter())
                            .await
                            .map_err(|source| mongo_error(&write.document, source))?;
                        let message = duplicate_key_message(&error);
                        match by_key {
                            Some(stored) => stored,
                            // The key's holder is gone since the write: it goes again.
                            None if index_in_message(message) == self.natural_key_index(model) => {
                                continue
                            }
                            None => return Err(unique_index_conflict(&write, message)),
                        }
                    }
                    Err(source) => return Err(mongo_error(&write.document, source)),
                };
                let Some(first_id) = stored_id(&stored) else {
                    return Err(Error::ForeignId {
                        document: Box::new(write.document),
                        stored_id: stored_id_text(&stored).unwrap_or_default(),
                    });
                };
                if first_id == write.id {
                    return Ok(Recorded::new(write.id, Outcome::Inserted));
                }
                if stored.get_str(model.hash_field()).ok() == Some(write.hash.as_str()) {
                    return Ok(Recorded::new(first_id, Outcome::Unchanged));
                }
                return Err(Error::IdempotencyKeyReused {
                    document: Box::new(write.document),
                    field: key_field.name(),
                    stored_id: first_id,
                });
            }
            Err(Error::Contention {
                document: Box::new(event.document_ref()),
            })
        })
        .await
    }
}
