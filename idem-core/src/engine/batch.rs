//! `upsert_many` on any driver: the outcomes that upserting the documents one by one, in input
//! order, would give ([`crate::batch`]), sent in rounds keyed by id and in chunks.
//!
//! Copies collapse by id and content, never by natural key alone: two documents with one natural
//! key and different ids (a timestamp stored at second precision) are two writes, the second of
//! which is refused as a single upsert would refuse it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use serde::Serialize;

use super::plan::{copy_outcome, BatchPlanner, Placement, Planned};
use super::{contention, judge, settle, Driver, Judged, WriteKind};
use crate::batch::BatchReport;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::outcome::Outcome;

/// A driver that can prepare documents of any type and send them in chunks.
pub(crate) trait BatchDriver: Driver {
    /// Documents per write statement.
    fn chunk(&self) -> usize;

    /// Members of an `insert_new` per write: [`BatchDriver::chunk`] unless the driver splits its
    /// inserts itself. No read precedes an insert, so nothing bounds it but the write.
    fn insert_chunk(&self) -> usize {
        self.chunk()
    }

    /// What must hold before the first write (an index checked, the server's limits known):
    /// called once, and only if some document is sent.
    fn ready(&self) -> impl Future<Output = Result<(), Error>> + Send;

    /// `doc` ready to send.
    fn prepare<T: Idempotent + Serialize>(&self, doc: &T) -> Result<Self::Doc, Error>;

    /// The stored state of `docs` in one read, for a driver whose batch write cannot return the
    /// documents its guard stopped (MongoDB's `update` command). `None`: the write returns them
    /// itself, and nothing is read first.
    fn read_many(
        &self,
        docs: &[&Self::Doc],
    ) -> impl Future<Output = Result<Option<Vec<Option<Self::Stored>>>, Error>> + Send;

    /// What is stored for each of `docs`, from one light read that sends each document's id,
    /// key and hashes but none of its content: [`Looked::Unchanged`] for a document stored
    /// exactly as it would be written (the same id, natural key, content hash, digests and
    /// version key, not deleted), which settles with nothing written; otherwise the stored
    /// document it meets, if any, judged before anything is sent, so that only the documents a
    /// write would change are sent whole, and a refused one is never locked. The engine asks
    /// for chunks of 64 documents or more while the last chunk was mostly unchanged. `None`:
    /// the driver has no lookup (or reads whole documents with
    /// [`read_many`](BatchDriver::read_many)). Only a cost: what the read misses is written with
    /// the guard, as without it.
    fn look_up(
        &self,
        _docs: &[&Self::Doc],
    ) -> impl Future<Output = Result<Option<Vec<Looked<Self::Stored>>>, Error>> + Send {
        std::future::ready(Ok(None))
    }
}

/// What [`BatchDriver::look_up`] found for one document.
// Only the PostgreSQL store looks up; the engine reads it on every build.
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
#[derive(Debug)]
pub(crate) enum Looked<S> {
    /// Stored exactly as it would be written: `Unchanged`.
    Unchanged,
    /// Stored otherwise: the document under its id, else the one holding its natural key;
    /// `None` if neither is stored.
    Stored(Option<S>),
}

/// One chunk's write under way: each input index with its outcome, once settled.
type Settling<'f> =
    Pin<Box<dyn Future<Output = Result<Vec<(usize, Result<Outcome, Error>)>, Error>> + Send + 'f>>;

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
    let mut planner = BatchPlanner::default();
    let mut ready = false;
    // Whether the next chunk is looked up before its write ([`record`] decides).
    let mut look_up = true;
    // The documents are prepared one slice at a time, and each slice's first-round documents
    // are sent while the next slice is prepared: the server writes one chunk while the client
    // hashes and encodes the next. An input's round depends only on the inputs before it.
    let mut slices: Vec<Vec<Result<D::Doc, Error>>> =
        docs.chunks(slice_len).map(|_| Vec::new()).collect();
    {
        let mut in_flight: Option<Settling<'_>> = None;
        let mut rest: &mut [Vec<Result<D::Doc, Error>>] = &mut slices;
        for (number, slice) in docs.chunks(slice_len).enumerate() {
            let Some((prepared, tail)) = std::mem::take(&mut rest).split_first_mut() else {
                break;
            };
            rest = tail;
            *prepared = slice.iter().map(|doc| driver.prepare(doc)).collect();
            let prepared: &Vec<Result<D::Doc, Error>> = prepared;
            let mut first_round = Vec::new();
            for (offset, doc) in prepared.iter().enumerate() {
                let index = number * slice_len + offset;
                match doc {
                    Err(refusal) => outcomes[index] = Some(Err(refusal.clone())),
                    Ok(doc) => {
                        let planned = Planned {
                            id: doc.id_text.as_str(),
                            natural_key: &doc.document.natural_key,
                            hash: doc.hash.as_str(),
                        };
                        if planner.add(index, planned) == Placement::Round(0) {
                            first_round.push((index, doc));
                        }
                    }
                }
            }
            if let Some(previous) = in_flight.take() {
                look_up = record(previous.await?, &mut outcomes);
            }
            if first_round.is_empty() {
                continue;
            }
            if !ready {
                driver.ready().await?;
                ready = true;
            }
            let mut chunk: Settling<'_> = Box::pin(async move {
                let sent: Vec<&D::Doc> = first_round.iter().map(|&(_, doc)| doc).collect();
                let settled = settle_read_first(driver, &sent, look_up).await?;
                Ok(first_round
                    .iter()
                    .map(|&(index, _)| index)
                    .zip(settled)
                    .collect())
            });
            match send_now(chunk.as_mut()) {
                Poll::Ready(settled) => look_up = record(settled?, &mut outcomes),
                Poll::Pending => in_flight = Some(chunk),
            }
        }
        if let Some(previous) = in_flight.take() {
            look_up = record(previous.await?, &mut outcomes);
        }
    }
    let plan = planner.plan;
    crate::trace::batch_split(docs.len(), plan.rounds.len(), slice_len);
    let prepared = |index: usize| slices[index / slice_len][index % slice_len].as_ref().ok();
    // The later rounds: an id's second distinct content in the batch, and so on.
    for round in plan.rounds.iter().skip(1) {
        for chunk in round.chunks(slice_len) {
            let sent: Vec<&D::Doc> = chunk.iter().filter_map(|&index| prepared(index)).collect();
            let settled = settle_read_first(driver, &sent, look_up).await?;
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

/// Upserts of `docs` (one chunk, or a single document where the driver's writes carry no
/// guard): those the driver's lookup finds stored unchanged ([`BatchDriver::look_up`]) settle
/// with nothing sent, and the others are judged from what it found; without a lookup, judged
/// from one read first where the driver reads first; then the documents that need it written.
pub(crate) async fn settle_read_first<D: BatchDriver>(
    driver: &D,
    docs: &[&D::Doc],
    look_up: bool,
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    let looked = match look_up && docs.len() >= LOOK_UP_MIN_DOCS {
        true => driver.look_up(docs).await?,
        false => None,
    };
    let Some(looked) = looked else {
        return match driver.read_many(docs).await? {
            Some(stored) => settle_judged(driver, docs, stored).await,
            None => settle(driver, WriteKind::Upsert, docs).await,
        };
    };
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; docs.len()];
    let (mut rest, mut stored) = (Vec::new(), Vec::new());
    for (index, looked) in looked.into_iter().enumerate().take(docs.len()) {
        match looked {
            Looked::Unchanged => outcomes[index] = Some(Ok(Outcome::Unchanged)),
            Looked::Stored(found) => {
                rest.push(index);
                stored.push(found);
            }
        }
    }
    let sent: Vec<&D::Doc> = rest.iter().map(|&index| docs[index]).collect();
    let settled = settle_judged(driver, &sent, stored).await?;
    for (index, outcome) in rest.into_iter().zip(settled) {
        outcomes[index] = Some(outcome);
    }
    Ok(settled_or_contention(outcomes, docs))
}

/// Upserts of `docs` judged from `stored`, what was read for each: settled with nothing
/// written, refused, replaced in a second step pinned to what was read (a document the server
/// guard cannot compare), or written.
async fn settle_judged<D: BatchDriver>(
    driver: &D,
    docs: &[&D::Doc],
    stored: Vec<Option<D::Stored>>,
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    if docs.is_empty() {
        return Ok(Vec::new());
    }
    let mut outcomes: Vec<Option<Result<Outcome, Error>>> = vec![None; docs.len()];
    let mut to_write = Vec::new();
    for (index, (doc, stored)) in docs.iter().zip(&stored).enumerate() {
        let Some(stored) = stored else {
            to_write.push(index);
            continue;
        };
        match judge(driver, WriteKind::Upsert, doc, stored) {
            Judged::Settled(outcome) => outcomes[index] = Some(Ok(outcome)),
            Judged::Refused(refusal) => outcomes[index] = Some(Err(refusal)),
            Judged::Replace { foreign }
                if foreign || !driver.guards_on_server(WriteKind::Upsert) =>
            {
                match super::pinned_outcome(doc, driver.write_pinned(doc, stored).await?) {
                    Some(outcome) => outcomes[index] = Some(outcome),
                    // Changed since the read: written again.
                    None => to_write.push(index),
                }
            }
            Judged::Replace { .. } => to_write.push(index),
        }
    }
    let sent: Vec<&D::Doc> = to_write.iter().map(|&index| docs[index]).collect();
    let written = settle(driver, WriteKind::Upsert, &sent).await?;
    for (index, outcome) in to_write.into_iter().zip(written) {
        outcomes[index] = Some(outcome);
    }
    Ok(settled_or_contention(outcomes, docs))
}

/// Each document's outcome, or contention for one that none settled (which the loops that
/// fill `outcomes` leave to a write that kept meeting changes).
fn settled_or_contention<Doc: std::ops::Deref<Target = super::Prepared>>(
    outcomes: Vec<Option<Result<Outcome, Error>>>,
    docs: &[&Doc],
) -> Vec<Result<Outcome, Error>> {
    outcomes
        .into_iter()
        .zip(docs)
        .map(|(outcome, doc)| outcome.unwrap_or_else(|| Err(contention(&doc.document))))
        .collect()
}

/// Polls `chunk` once, which sends its first write to the connection, so that the server works
/// on it while the caller goes on; the caller awaits it afterwards, which polls it again with
/// the caller's own waker (the no-op waker of this poll is then replaced).
fn send_now<F: Future + ?Sized>(chunk: Pin<&mut F>) -> Poll<F::Output> {
    chunk.poll(&mut Context::from_waker(Waker::noop()))
}

/// Stores the outcome of each settled input, and says whether the next chunk is worth a
/// lookup before its write ([`BatchDriver::look_up`]): so while at least half of this one was
/// stored unchanged, which the first chunk of a first ingest (or of a re-ingest that changes
/// every document) shows is not so; its later chunks then go without the extra round trip.
fn record(
    settled: Vec<(usize, Result<Outcome, Error>)>,
    outcomes: &mut [Option<Result<Outcome, Error>>],
) -> bool {
    let unchanged = settled
        .iter()
        .filter(|(_, outcome)| matches!(outcome, Ok(Outcome::Unchanged)))
        .count();
    let worth_a_look = unchanged * 2 >= settled.len();
    for (index, outcome) in settled {
        outcomes[index] = Some(outcome);
    }
    worth_a_look
}

/// The fewest documents of a chunk worth a lookup before its write: below, sending them costs
/// less than the lookup's round trip.
const LOOK_UP_MIN_DOCS: usize = 64;
