//! `upsert_many`: the documents prepared one slice at a time, each slice's first-round
//! documents sent as a chunk while the next slice is prepared, then the later rounds, then the
//! copies.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use serde::Serialize;

use super::chunk::settle_chunk;
use super::in_flight::{
    answered, next_settled, record_settled, send_now, Foresight, Next, Settling,
};
use super::place::{Place, Places};
use super::{BatchDriver, Ready, ReadyOf};
use crate::batch::BatchReport;
use crate::document::DocumentRef;
use crate::engine::contention;
use crate::engine::plan::{copy_outcome, BatchPlanner, Placement, Planned};
use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::outcome::Outcome;

/// One slice of a batch as prepared: each document, or the refusal that kept it from being sent.
type PreparedSlice<D> = Vec<Result<ReadyOf<D>, Error>>;

/// How many documents of the next slice are prepared between two polls of the chunk in flight.
/// A chunk can take several statements (SQLite's savepoint, insert and release; a lookup, then
/// a write): each poll sends the next once the last is answered, so the database works on the
/// chunk while the slice after it is prepared, instead of waiting for the whole slice. Polling
/// an unanswered statement costs a check of its channel.
const POLL_EVERY: usize = 32;

/// Upserts `docs` through `driver`, each document with the outcome of a single upsert in input
/// order. A refused document does not stop the others.
pub(crate) async fn upsert_many<D, T>(driver: &D, docs: &[T]) -> Result<BatchReport, Error>
where
    D: BatchDriver,
    T: Idempotent + Serialize + Sync,
{
    let collection = DocumentRef::collection(&T::MODEL);
    let slice_len = driver.chunk().max(1);
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; docs.len()];
    let mut planner = BatchPlanner::with_capacity(docs.len());
    let mut ready = false;
    // How the next chunk is sent ([`record`] decides).
    let mut foresight = Foresight::FIRST;
    // The documents are prepared one slice at a time, and each slice's first-round documents
    // are sent while the next slice is prepared: the server writes one chunk while the client
    // hashes and encodes the next, and where the driver allows more than one chunk in flight
    // ([`BatchDriver::chunks_in_flight`]), the next chunk's lookup waits at the server behind
    // the last chunk instead of at the client for its answer (its writes still wait for the
    // last chunk's: [`Place`]). An input's round depends only on the inputs before it. A slice
    // is kept past its chunk only if a later round sends some of its documents; otherwise it is
    // dropped once its chunk settles, so a batch holds about one slice more than the chunks in
    // flight, and freeing them is not left to the end.
    let mut kept: Vec<Option<Arc<PreparedSlice<D>>>> = Vec::new();
    {
        let depth = driver.chunks_in_flight().max(1);
        // The chunks sent and not yet settled, oldest first.
        let mut in_flight: VecDeque<Settling<'_>> = VecDeque::new();
        // Whether `foresight` comes from a chunk's lookup or a settled chunk: until then, a chunk
        // waits for the one before, so that a first ingest pays its lookup once.
        let mut foreseen = false;
        // What the first chunk's lookup foretells, as soon as it is answered ([`Looked`]), so
        // that the next chunk can go while the first one's rows are written.
        let early: Arc<OnceLock<Foresight>> = Arc::default();
        // Where the next chunk's writes wait for those of the chunk sent last.
        let mut places = Places::new(depth > 1);
        for (number, slice) in docs.chunks(slice_len).enumerate() {
            // A chunk to be looked up needs its documents light only. Whether it is looked up
            // is known when the chunk before it settles, after this; the last one settled
            // foretells it.
            let light = foresight.look_up && slice.len() >= driver.shortcut_min_docs();
            // The chunks in flight that settled while this slice was prepared.
            let mut settled_early = Vec::new();
            let prepared: Arc<PreparedSlice<D>> = Arc::new(
                slice
                    .iter()
                    .enumerate()
                    .map(|(offset, doc)| {
                        if offset % POLL_EVERY == POLL_EVERY - 1 {
                            settled_early.extend(answered(&mut in_flight));
                        }
                        match light {
                            true => driver.prepare_light(doc),
                            false => driver.prepare(doc).map(Ready::Whole),
                        }
                    })
                    .collect(),
            );
            let mut first_round = Vec::new();
            let mut in_later_rounds = false;
            for (offset, doc) in prepared.iter().enumerate() {
                let index = number * slice_len + offset;
                match doc {
                    Err(refusal) => outcomes[index] = Some(Err(refusal.clone())),
                    Ok(doc) => {
                        let planned = Planned {
                            id: doc.id,
                            key: &doc.key,
                            hash: doc.hash,
                        };
                        match planner.add(index, planned) {
                            Placement::Round(0) => first_round.push(index),
                            Placement::Round(_) => in_later_rounds = true,
                            Placement::CopyOf(_) => {}
                        }
                    }
                }
            }
            kept.push(in_later_rounds.then(|| Arc::clone(&prepared)));
            for settled in settled_early {
                foresight = record_settled(settled, &mut in_flight, &mut outcomes).await?;
                foreseen = true;
            }
            if first_round.is_empty() {
                continue;
            }
            while !in_flight.is_empty() && (in_flight.len() >= depth || !foreseen) {
                // A free place in flight waits only for a foresight, which a lookup gives first.
                let early = (in_flight.len() < depth).then_some(&*early);
                foresight = match next_settled(&mut in_flight, early).await {
                    Next::Settled(settled) => {
                        record_settled(settled, &mut in_flight, &mut outcomes).await?
                    }
                    Next::Foreseen(early) => early,
                };
                foreseen = true;
            }
            if !ready {
                driver.ready().await?;
                ready = true;
            }
            let early = Arc::clone(&early);
            let place = places.next();
            let mut chunk: Settling<'_> = Box::pin(async move {
                let (indexes, sent): (Vec<usize>, Vec<(&ReadyOf<D>, &T)>) = first_round
                    .iter()
                    .filter_map(|&index| {
                        let doc = prepared[index % slice_len].as_ref().ok()?;
                        Some((index, (doc, &docs[index])))
                    })
                    .unzip();
                let settled = settle_chunk(driver, &sent, foresight, &early, &place).await?;
                // Stopped before its writes (the chunk ahead failed): it ends failed too.
                let Some(settled) = settled else {
                    return Ok(Vec::new());
                };
                place.done();
                Ok(indexes.into_iter().zip(settled).collect())
            });
            match send_now(chunk.as_mut()) {
                Poll::Ready(settled) => {
                    foresight = record_settled(settled, &mut in_flight, &mut outcomes).await?;
                    foreseen = true;
                }
                Poll::Pending => in_flight.push_back(chunk),
            }
        }
        while !in_flight.is_empty() {
            if let Next::Settled(settled) = next_settled(&mut in_flight, None).await {
                foresight = record_settled(settled, &mut in_flight, &mut outcomes).await?;
            }
        }
    }
    let plan = planner.plan;
    crate::trace::batch_split(docs.len(), plan.rounds.len(), slice_len);
    let prepared = |index: usize| {
        let slice = kept.get(index / slice_len)?.as_ref()?;
        slice[index % slice_len].as_ref().ok()
    };
    // The later rounds: an id's second distinct content in the batch, and so on.
    for round in plan.rounds.iter().skip(1) {
        for chunk in round.chunks(slice_len) {
            let sent: Vec<(&ReadyOf<D>, &T)> = chunk
                .iter()
                .filter_map(|&index| Some((prepared(index)?, &docs[index])))
                .collect();
            // A later round's documents share an id or key with an earlier one's, so the last
            // chunk foretells nothing of them; a lookup finding them all absent still may.
            let later = Foresight {
                fresh: false,
                ..foresight
            };
            let settled = settle_chunk(driver, &sent, later, &OnceLock::new(), &Place::alone())
                .await?
                .unwrap_or_default();
            for (&index, outcome) in chunk.iter().zip(settled) {
                outcomes[index] = Some(outcome);
            }
        }
    }
    for &(copy, original) in &plan.copies {
        let copied = match &outcomes[original] {
            Some(original) => copy_outcome(original),
            None => Err(contention(&collection)),
        };
        outcomes[copy] = Some(copied);
    }
    let outcomes = outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| Err(contention(&collection))))
        .collect();
    Ok(BatchReport::new(outcomes, plan.copies.len()))
}
