//! Events: documents with no natural key, made idempotent by an idempotency key the client
//! sends with each request.

use serde::Serialize;

use super::write::PreparedWrite;
use super::Store;
use crate::engine;
use crate::error::Error;
#[cfg(doc)]
use crate::error::ErrorKind;
use crate::idempotent::Idempotent;
use crate::outcome::Recorded;
use crate::trace::{Call, CallKind};

impl Store {
    /// Records an event (a type with an `#[idem(idempotency_key)]` field): the first write of a
    /// key stores it under a fresh random ULID; a retry with the same key and the same payload
    /// returns that first id with `Unchanged`; the same key with another payload is
    /// [`ErrorKind::IdempotencyKeyReused`]. Nothing is written but the first time. One round trip.
    ///
    /// An empty key is refused ([`ErrorKind::EmptyKey`]): requests that lost their key would all
    /// fold into the first one. A key already stored by another tool, under an `_id` idem did
    /// not assign, is [`ErrorKind::ForeignId`]. An event colliding in another unique index is
    /// [`ErrorKind::UniqueIndexConflict`], naming it, in the same round trip.
    pub async fn record<T>(&self, event: &T) -> Result<Recorded, Error>
    where
        T: Idempotent + Serialize + Sync,
    {
        let call = Call::new(CallKind::Record, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let model = &T::MODEL;
            let (key_field, id) = engine::record::event_key(event)?;
            // Prepared first: a refused event sends nothing, not even the index check.
            let write = PreparedWrite::with_id(event, id)?;
            self.verify_indexes(model, &event.document_ref()).await?;
            engine::record::record(&self.driver(model, false), &write, key_field).await
        })
        .await
    }
}
