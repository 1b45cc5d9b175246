//! `insert_new` on any driver: the members of a derived set not stored yet are inserted, in
//! rounds that never hold one id or natural key twice, each member answered alone.
//!
//! Copies collapse by id, never by natural key alone: a member with the natural key of an
//! earlier one under another id (its timestamp moved) goes in a later round, and is refused
//! there as `upsert` refuses it.

use serde::Serialize;

use super::batch::BatchDriver;
use super::plan::{BatchPlanner, Planned};
use super::{settle, WriteKind};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::idempotent::Idempotent;
use crate::insert::{copy_insertion, InsertReport, Insertion};
use crate::outcome::Outcome;

/// Inserts the members of `members` that are not stored, through `driver`, and reports each: a
/// member stored under its id is there already, whatever it holds; one whose natural key is
/// stored under another id is refused. A member that cannot be prepared fails the call before
/// anything is sent. The caller has checked the index or table; an insert needs no more. Each
/// round goes in chunks of [`BatchDriver::insert_chunk`] members.
pub(crate) async fn insert_new<D, T>(driver: &D, members: &[T]) -> Result<InsertReport<T>, Error>
where
    D: BatchDriver,
    T: Idempotent + Serialize + Sync + Clone,
{
    let prepared: Vec<D::Doc> = members
        .iter()
        .map(|member| driver.prepare(member))
        .collect::<Result<_, _>>()?;
    let mut planner = BatchPlanner::with_capacity(members.len());
    for (index, doc) in prepared.iter().enumerate() {
        let planned = Planned {
            id: doc.id,
            key: &doc.key,
            // Members compare by id alone: a copy is the same member, whatever it holds.
            hash: crate::short_text::ShortText::new(&[]),
        };
        planner.add(index, planned);
    }
    let plan = planner.plan;
    let collection = DocumentRef::collection(&T::MODEL);
    let mut results: Vec<Result<Insertion, Error>> = members
        .iter()
        .map(|_| Err(Error::new(collection.clone(), ErrorKind::Contention)))
        .collect();
    for round in &plan.rounds {
        for chunk in round.chunks(driver.insert_chunk().max(1)) {
            let sent: Vec<&D::Doc> = chunk.iter().map(|&index| &prepared[index]).collect();
            let settled = settle(driver, WriteKind::InsertNew, &sent).await?;
            for (&index, outcome) in chunk.iter().zip(settled) {
                results[index] = outcome.map(|outcome| match outcome {
                    Outcome::Inserted => Insertion::Inserted,
                    _ => Insertion::AlreadyStored,
                });
            }
        }
    }
    for (copy, first) in plan.copies {
        results[copy] = copy_insertion(&results[first]);
    }
    Ok(InsertReport::new(members, results))
}
