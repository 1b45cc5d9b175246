//! Events: documents with no natural key, made idempotent by an idempotency key the client
//! sends with each request.

use mongodb::bson::doc;
use mongodb::options::ReturnDocument;
use serde::Serialize;

use super::write::{stored_id, PreparedWrite};
use super::{is_duplicate_key, mongo_error, Store, MAX_ATTEMPTS};
use crate::error::Error;
use crate::id::Id;
use crate::model::Idempotent;
use crate::outcome::Outcome;

/// What recording an event did, and the id it is stored under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The event's id: random, fixed by its first write.
    pub id: Id,
    /// `Inserted` for the first write of this key, `Unchanged` for a retry.
    pub outcome: Outcome,
}

impl Store {
    /// Records an event (a type with an `#[idem(idempotency_key)]` field): the first write of a
    /// key stores it under a fresh random ULID; a retry with the same key and the same payload
    /// returns that first id with `Unchanged`; the same key with another payload is
    /// [`Error::IdempotencyKeyReused`]. Nothing is written but the first time. One round trip.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let model = &T::MODEL;
        let key_field = model
            .idempotency_key_field()
            .ok_or_else(|| Error::NoDerivedId {
                document: Box::new(event.document_ref()),
            })?;
        self.verify_indexes(model, &event.document_ref()).await?;
        let collection = self.raw_collection(model);
        for _ in 0..MAX_ATTEMPTS {
            let write = PreparedWrite::with_id(event, Id::from(ulid::Ulid::generate()))?;
            let mut on_insert = doc! { "_id": write.id_text.as_str() };
            on_insert.extend(
                write
                    .update()
                    .remove("$setOnInsert")
                    .and_then(|lists| lists.as_document().cloned())
                    .unwrap_or_default(),
            );
            on_insert.extend(write.body.clone());
            let before = collection
                .find_one_and_update(
                    write.natural_key_filter(),
                    doc! { "$setOnInsert": on_insert },
                )
                .upsert(true)
                .return_document(ReturnDocument::Before)
                .await;
            match before {
                Ok(None) => {
                    return Ok(Recorded {
                        id: write.id,
                        outcome: Outcome::Inserted,
                    })
                }
                Ok(Some(stored)) => {
                    let first_id = stored_id(&stored).unwrap_or(write.id);
                    if stored.get_str(model.hash_field()).ok() == Some(write.hash.as_str()) {
                        return Ok(Recorded {
                            id: first_id,
                            outcome: Outcome::Unchanged,
                        });
                    }
                    return Err(Error::IdempotencyKeyReused {
                        document: Box::new(write.document),
                        field: key_field.name(),
                        stored_id: first_id,
                    });
                }
                // A racing first write of the same key won; the next attempt finds it.
                Err(error) if is_duplicate_key(&error) => continue,
                Err(source) => return Err(mongo_error(&write.document, source)),
            }
        }
        Err(Error::Contention {
            document: Box::new(event.document_ref()),
        })
    }
}
