//! `record` on any driver: an event (a type with an idempotency key) is stored once under the
//! fresh id of its first write; a retry with the same key finds it.

use std::future::Future;

use super::{unique_index_conflict, Conflict, Driver, Reply, WriteKind};
use crate::batch::BatchReport;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::{idempotency_key, Idempotent};
use crate::model::Field;
use crate::outcome::{Outcome, Recorded};
use crate::MAX_ATTEMPTS;

/// What `record` checks of `event` before anything is sent, on every store: its type's
/// idempotency key field ([`ErrorKind::NoDerivedId`] for a type without one) and a key that is
/// not empty ([`ErrorKind::EmptyKey`]); with the fresh id its first write stores it under.
pub(crate) fn event_key<T: Idempotent>(event: &T) -> Result<(&'static Field, Id), Error> {
    let key_field = T::MODEL
        .idempotency_key_field()
        .ok_or_else(|| Error::new(event.document_ref(), ErrorKind::NoDerivedId))?;
    idempotency_key(event)?;
    Ok((key_field, Id::from(ulid::Ulid::generate())))
}

/// `upsert_many` of an event type, on every store: each event recorded by `record`, in order,
/// as `upsert` records one, each outcome its own.
pub(crate) async fn record_each<'d, T, Recording>(
    events: &'d [T],
    mut record: impl FnMut(&'d T) -> Recording,
) -> BatchReport
where
    Recording: Future<Output = Result<Recorded, Error>>,
{
    let mut outcomes = Vec::with_capacity(events.len());
    for event in events {
        outcomes.push(record(event).await.map(|recorded| recorded.outcome));
    }
    BatchReport::new(outcomes, 0)
}

/// Records `event`, prepared under a fresh id: `Inserted` if this call stored its key,
/// `Unchanged` with the first id if a call with the same payload did,
/// [`ErrorKind::IdempotencyKeyReused`] for another payload under the same key, and
/// [`ErrorKind::ForeignId`] for a key another tool stored under an id idem did not assign.
pub(crate) async fn record<D: Driver>(
    driver: &D,
    event: &D::Doc,
    key_field: &'static Field,
) -> Result<Recorded, Error> {
    let id = event.id;
    for attempt in 0..MAX_ATTEMPTS {
        if attempt > 0 {
            crate::trace::retry("a concurrent writer changed the document");
        }
        let reply = driver.write(WriteKind::Record, &[event]).await?.pop();
        let stored = match reply {
            Some(Reply::Written { .. }) => return Ok(Recorded::new(id, Outcome::Inserted)),
            Some(Reply::Stopped(stored)) => stored,
            // A racing first write of the same key, committed after this write looked: the
            // next attempt finds it.
            Some(Reply::Unseen) | None => continue,
            Some(Reply::Refused(refusal)) => return Err(refusal),
            Some(Reply::Conflict(Conflict::Other { index })) => {
                return Err(unique_index_conflict(&event.document(), index))
            }
            Some(Reply::Conflict(conflict)) => match driver.read_conflict(event).await? {
                Some(stored) => stored,
                // The key's holder is gone since the write: it goes again.
                None if conflict == Conflict::Key => continue,
                None => {
                    let (Conflict::Unclear { index } | Conflict::Other { index }) = conflict else {
                        continue;
                    };
                    return Err(unique_index_conflict(&event.document(), index));
                }
            },
        };
        let stored_id = driver.stored_id(&stored).unwrap_or_default();
        let Ok(first_id) = stored_id.parse::<Id>() else {
            return Err(Error::new(
                event.document(),
                ErrorKind::ForeignId { stored_id },
            ));
        };
        if first_id == id {
            return Ok(Recorded::new(id, Outcome::Inserted));
        }
        if driver.stored_hash(&stored) == Some(event.hash.as_str()) {
            return Ok(Recorded::new(first_id, Outcome::Unchanged));
        }
        return Err(Error::new(
            event.document(),
            ErrorKind::IdempotencyKeyReused {
                field: key_field.name(),
                stored_id: first_id,
            },
        ));
    }
    Err(super::contention(&event.document()))
}
