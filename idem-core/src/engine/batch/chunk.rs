//! One chunk's upserts: those a lookup finds stored unchanged settled with nothing sent, the
//! others judged from what was read, and only those a write would change made whole and written.

use std::sync::OnceLock;

use serde::Serialize;

use super::fresh::{fresh_in_turn, insert_fresh, inserted, worth_inserting_fresh, InTurn};
use super::in_flight::Foresight;
use super::place::Place;
use super::{BatchDriver, Fresh, Looked, Ready, ReadyOf};
use crate::engine::{contention, judge, pinned_outcome, settle, Judged, Prepared, WriteKind};
use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::outcome::Outcome;

/// A document of a chunk made whole to be written: as prepared, or completed from its light
/// form and its original.
enum Whole<'r, D> {
    Prepared(&'r D),
    Completed(D),
}

impl<D> std::ops::Deref for Whole<'_, D> {
    type Target = D;

    fn deref(&self) -> &D {
        match self {
            Whole::Prepared(doc) => doc,
            Whole::Completed(doc) => doc,
        }
    }
}

/// `ready` whole, to be written: completed from `original` if it was prepared light.
fn whole<'r, D: BatchDriver, T: Idempotent + Serialize>(
    driver: &D,
    ready: &'r ReadyOf<D>,
    original: &T,
) -> Result<Whole<'r, D::Doc>, Error> {
    match ready {
        Ready::Whole(doc) => Ok(Whole::Prepared(doc)),
        Ready::Light(light) => driver.complete(light, original).map(Whole::Completed),
    }
}

/// Upserts of one chunk's documents, each with its original: those the driver's lookup finds
/// stored unchanged ([`BatchDriver::look_up`]) settle with nothing sent, the others are judged
/// from what it found, and only those a write would change are made whole and written.
/// Without a lookup, [`settle_read_first`]. What the lookup foretells of the next chunk goes
/// into `early` as soon as it is answered, if nothing did before. Nothing is written before
/// the chunk's turn comes at its `place`; `None` if it never will (nothing written).
pub(super) async fn settle_chunk<D: BatchDriver, T: Idempotent + Serialize>(
    driver: &D,
    docs: &[(&ReadyOf<D>, &T)],
    foresight: Foresight,
    early: &OnceLock<Foresight>,
    place: &Place,
) -> Result<Option<Vec<Result<Outcome, Error>>>, Error> {
    let looked = match foresight.look_up && docs.len() >= driver.shortcut_min_docs() {
        true => {
            let lights: Vec<&D::Light> =
                docs.iter().map(|(ready, _)| ready.light(driver)).collect();
            driver.look_up(&lights).await?
        }
        false => None,
    };
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; docs.len()];
    let (mut rest, mut stored) = (Vec::new(), Vec::new());
    match looked {
        Some(looked) => {
            // As `record` will say once the chunk settles, if its fresh rows insert whole.
            let unchanged = looked
                .iter()
                .filter(|looked| matches!(looked, Looked::Unchanged))
                .count();
            let _ = early.set(Foresight {
                look_up: unchanged * 2 >= looked.len(),
                fresh: looked
                    .iter()
                    .all(|looked| matches!(looked, Looked::Stored(None))),
            });
            for (index, looked) in looked.into_iter().enumerate().take(docs.len()) {
                match looked {
                    Looked::Unchanged => outcomes[index] = Some(Ok(Outcome::Unchanged)),
                    Looked::Stored(found) => {
                        rest.push(index);
                        stored.push(found);
                    }
                }
            }
            if !place.come().await {
                return Ok(None);
            }
            let lights: Vec<&D::Light> = rest
                .iter()
                .map(|&index| docs[index].0.light(driver))
                .collect();
            let settled = settle_judged(driver, &lights, stored, place, |at| {
                let (ready, original) = docs[rest[at]];
                whole(driver, ready, original)
            })
            .await?;
            for (&index, outcome) in rest.iter().zip(settled) {
                outcomes[index] = Some(outcome);
            }
        }
        None => {
            let mut wholes = Vec::new();
            for (index, &(ready, original)) in docs.iter().enumerate() {
                match whole(driver, ready, original) {
                    Ok(doc) => {
                        rest.push(index);
                        wholes.push(doc);
                    }
                    Err(refusal) => outcomes[index] = Some(Err(refusal)),
                }
            }
            let sent: Vec<&D::Doc> = wholes.iter().map(|doc| &**doc).collect();
            let settled = match fresh_in_turn(driver, &sent, foresight.fresh, place).await? {
                InTurn::Stopped => return Ok(None),
                InTurn::Inserted => inserted(&sent),
                InTurn::Guarded => settle_read_first(driver, &sent).await?,
            };
            for (&index, outcome) in rest.iter().zip(settled) {
                outcomes[index] = Some(outcome);
            }
        }
    }
    Ok(Some(settled_or_contention(
        outcomes,
        // Each document's common part, which names it if it found no outcome.
        docs.iter().map(|(ready, _)| -> &Prepared { ready }),
    )))
}

/// Upserts of `docs` (one chunk, or a single document where the driver's writes carry no
/// guard): judged from one read first where the driver reads first, then the documents that
/// need it written.
pub(crate) async fn settle_read_first<D: BatchDriver>(
    driver: &D,
    docs: &[&D::Doc],
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    match driver.read_many(docs).await? {
        Some(stored) => {
            let lights: Vec<&D::Light> = docs.iter().map(|doc| driver.light_of(doc)).collect();
            let alone = Place::alone();
            settle_judged(driver, &lights, stored, &alone, |at| {
                Ok(Whole::Prepared(docs[at]))
            })
            .await
        }
        None => settle(driver, WriteKind::Upsert, docs).await,
    }
}

/// Upserts of the documents read as `lights`, judged from `stored`, what was read for each:
/// settled with nothing written, refused, replaced in a second step pinned to what was read (a
/// document the server guard cannot compare), or written. Only the documents written are made
/// whole (`whole(at)` for the one at `at`), so a refused or stale one is never encoded. Its
/// turn has come at `place`.
async fn settle_judged<'r, D: BatchDriver>(
    driver: &D,
    lights: &[&D::Light],
    stored: Vec<Option<D::Stored>>,
    place: &Place,
    whole: impl Fn(usize) -> Result<Whole<'r, D::Doc>, Error>,
) -> Result<Vec<Result<Outcome, Error>>, Error>
where
    D::Doc: 'r,
{
    if lights.is_empty() {
        return Ok(Vec::new());
    }
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; lights.len()];
    let (mut to_write, mut wholes) = (Vec::new(), Vec::new());
    for (index, (light, stored)) in lights.iter().zip(&stored).enumerate() {
        let pinned = match stored {
            None => None,
            Some(stored) => match judge(driver, WriteKind::Upsert, light, stored) {
                Judged::Settled(outcome) => {
                    outcomes[index] = Some(Ok(outcome));
                    continue;
                }
                Judged::Refused(refusal) => {
                    outcomes[index] = Some(Err(refusal));
                    continue;
                }
                Judged::Replace { foreign }
                    if foreign || !driver.guards_on_server(WriteKind::Upsert) =>
                {
                    Some(stored)
                }
                Judged::Replace { .. } => None,
            },
        };
        let doc = match whole(index) {
            Ok(doc) => doc,
            Err(refusal) => {
                outcomes[index] = Some(Err(refusal));
                continue;
            }
        };
        if let Some(stored) = pinned {
            if let Some(outcome) = pinned_outcome(&doc, driver.write_pinned(&doc, stored).await?) {
                outcomes[index] = Some(outcome);
                continue;
            }
            // Changed since the read: written again.
        }
        to_write.push(index);
        wholes.push(doc);
    }
    let sent: Vec<&D::Doc> = wholes.iter().map(|doc| &**doc).collect();
    // Read as stored nowhere, all of them: likely fresh.
    let absent = to_write.iter().all(|&index| stored[index].is_none());
    let written = match absent && worth_inserting_fresh(driver, &sent) {
        true if insert_fresh(driver, &sent, place, None).await? == Some(Fresh::Inserted) => {
            inserted(&sent)
        }
        _ => settle(driver, WriteKind::Upsert, &sent).await?,
    };
    for (index, outcome) in to_write.into_iter().zip(written) {
        outcomes[index] = Some(outcome);
    }
    Ok(settled_or_contention(
        outcomes,
        // Each document's common part, which names it if it found no outcome.
        lights.iter().map(|light| -> &Prepared { light }),
    ))
}

/// Each document's outcome, or contention for one that none settled (which the loops that
/// fill `outcomes` leave to a write that kept meeting changes).
fn settled_or_contention<'d>(
    outcomes: Vec<Option<Result<Outcome, Error>>>,
    documents: impl Iterator<Item = &'d Prepared>,
) -> Vec<Result<Outcome, Error>> {
    outcomes
        .into_iter()
        .zip(documents)
        .map(|(outcome, doc)| outcome.unwrap_or_else(|| Err(contention(&doc.document()))))
        .collect()
}
