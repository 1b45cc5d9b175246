//! `upsert_many` on any driver: the outcomes that upserting the documents one by one, in input
//! order, would give ([`crate::batch`]), sent in rounds keyed by id and in chunks.
//!
//! Copies collapse by id and content, never by natural key alone: two documents with one natural
//! key and different ids (a timestamp stored at second precision) are two writes, the second of
//! which is refused as a single upsert would refuse it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
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

    /// The fewest documents of a chunk worth a shortcut ([`SHORTCUT_MIN_DOCS`] unless the
    /// store was told otherwise, as the tests do to take the shortcuts on chunks of any size).
    fn shortcut_min_docs(&self) -> usize {
        SHORTCUT_MIN_DOCS
    }

    /// How many chunks of a batch may be in flight at once: more than one where the driver's
    /// statements pipeline on one session and one chunk's failure cannot touch another's (each
    /// statement its own transaction), so the database starts on the next chunk's lookup as
    /// soon as it answers the last chunk, without waiting for the client. Only first-round
    /// chunks go together, which share no id or natural key; a chunk reads at once (a lookup
    /// the chunk before has not yet written through is only stale, which its guarded write
    /// answers as any concurrent writer's) but writes only once the chunk before has ended its
    /// writes ([`Place`]), so rows are written in input order, as single upserts would write
    /// them; or, where the chunk before ends with a plain insert of fresh rows, at once behind
    /// it, to write only if that insert landed ([`Landing`]).
    fn chunks_in_flight(&self) -> usize {
        1
    }

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

    /// `doc` ready for a lookup ([`BatchDriver::look_up`]): light where the driver can vouch
    /// that preparing it whole would succeed, so that a document the lookup finds unchanged
    /// costs no encoding of its content; else whole, or the refusal [`BatchDriver::prepare`]
    /// gives. A light document is completed ([`BatchDriver::complete`]) before anything of it is
    /// written.
    fn prepare_light<T: Idempotent + Serialize>(
        &self,
        doc: &T,
    ) -> Result<Ready<Self::Light, Self::Doc>, Error> {
        self.prepare(doc).map(Ready::Whole)
    }

    /// `doc` ready to send, from its light form `light` ([`BatchDriver::prepare_light`]): what
    /// the light form holds (its id, content hash and digests) taken from it, where the driver
    /// can, instead of computed again.
    fn complete<T: Idempotent + Serialize>(
        &self,
        light: &Self::Light,
        doc: &T,
    ) -> Result<Self::Doc, Error> {
        let _ = light;
        self.prepare(doc)
    }

    /// The stored state of `docs` in one read, for a driver whose batch write cannot return the
    /// documents its guard stopped (MongoDB's `update` command). `None`: the write returns them
    /// itself, and nothing is read first.
    fn read_many(
        &self,
        docs: &[&Self::Doc],
    ) -> impl Future<Output = Result<Option<Vec<Option<Self::Stored>>>, Error>> + Send;

    /// What is stored for each of `docs`, from one light read that sends each document's id,
    /// key and hashes but none of its content: [`Looked::Unchanged`] for a document stored as
    /// it would be written (the same id, natural key, content hash and version key, not
    /// deleted: its guarded values are then the incoming ones, [`crate::verdict::Stored::judge`]),
    /// which settles with nothing written; otherwise the stored
    /// document it meets, if any, judged before anything is sent, so that only the documents a
    /// write would change are sent whole, and a refused one is never locked. The engine asks
    /// for chunks of 64 documents or more while the last chunk was mostly unchanged. `None`:
    /// the driver has no lookup (or reads whole documents with
    /// [`read_many`](BatchDriver::read_many)). Only a cost: what the read misses is written with
    /// the guard, as without it.
    fn look_up(
        &self,
        _docs: &[&Self::Light],
    ) -> impl Future<Output = Result<Option<Vec<Looked<Self::Stored>>>, Error>> + Send {
        std::future::ready(Ok(None))
    }

    /// Inserts `docs` (distinct ids and natural keys) with one plain insert, which a stored
    /// row's id or natural key makes fail whole: what a first ingest's chunks are sent as once
    /// the last chunk was inserted whole, since an insert is cheaper than a guarded upsert. The
    /// engine asks for chunks of 64 documents or more. [`Fresh::Met`] when it wrote nothing
    /// and the server did not refuse it (a trigger dropped rows, the table was not the checked
    /// one); an error the database answered with writes nothing either. Either way the
    /// documents go the guarded way, as without it. `None`: the driver has no such insert.
    ///
    /// A driver with more than one chunk in flight ([`BatchDriver::chunks_in_flight`]) honours
    /// `landing`: where the insert lands it leaves [`Landing::leaves`] in the session, and
    /// given [`Landing::after`] it writes nothing ([`Fresh::Early`]) unless the session holds
    /// that mark, left by the chunk ahead's insert. Elsewhere `landing` is always empty.
    fn insert_fresh(
        &self,
        _docs: &[&Self::Doc],
        _landing: Landing,
    ) -> impl Future<Output = Result<Option<Fresh>, Error>> + Send {
        std::future::ready(Ok(None))
    }
}

/// What the last chunk settled foretells of the next ([`record`]).
#[derive(Clone, Copy, Debug)]
struct Foresight {
    /// Look it up before its write ([`BatchDriver::look_up`]).
    look_up: bool,
    /// Insert it as fresh rows ([`BatchDriver::insert_fresh`]).
    fresh: bool,
}

impl Foresight {
    /// Before any chunk settled: a lookup, which a re-ingest gains by and a first ingest pays
    /// once.
    const FIRST: Foresight = Foresight {
        look_up: true,
        fresh: false,
    };
}

/// What [`BatchDriver::insert_fresh`] did.
// Only the SQL stores insert fresh rows.
#[cfg_attr(not(any(feature = "_postgres", feature = "sqlite")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fresh {
    /// Every document was inserted.
    Inserted,
    /// Nothing was written: the insert met a stored row (or a value the table refuses), and
    /// the documents go the guarded way.
    Met,
    /// Nothing was written: the session did not hold [`Landing::after`], since the chunk
    /// ahead's insert did not land (or has not run yet). The chunk waits for its turn.
    // Only PostgreSQL has more than one chunk in flight.
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    Early,
}

/// Where a chunk's plain insert of fresh rows stands among the chunks in flight
/// ([`BatchDriver::insert_fresh`]). A chunk whose writes wait for the chunk ahead's ([`Place`])
/// need not wait at the client when the chunk ahead's last write is its own insert of fresh
/// rows: sent behind it on the same session, it writes only if that insert landed, which the
/// mark that insert left in the session proves. The database then goes from one chunk's insert
/// to the next, and the rows are still written in input order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Landing {
    /// The mark the insert must find in the session to write anything.
    pub after: Option<Mark>,
    /// The mark the insert leaves in the session where it lands.
    pub leaves: Option<Mark>,
}

/// A mark a chunk's insert of fresh rows leaves in the session ([`Landing`]): the batch's own
/// random id and the chunk's number, so that no other batch, on this session or another one
/// a pooler lent it, leaves the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    batch: ulid::Ulid,
    chunk: u32,
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.batch, self.chunk)
    }
}

/// What [`BatchDriver::look_up`] found for one document.
// Only the PostgreSQL store looks up; the engine reads it on every build.
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
#[derive(Debug)]
pub(crate) enum Looked<S> {
    /// Stored with the same id, natural key, content hash and version key, not deleted:
    /// `Unchanged`.
    Unchanged,
    /// Stored otherwise: the document under its id, else the one holding its natural key;
    /// `None` if neither is stored.
    Stored(Option<S>),
}

/// A document prepared for its chunk: light, for a chunk looked up before its write
/// ([`BatchDriver::prepare_light`]), or whole.
pub(crate) enum Ready<L, D> {
    // Only the SQL stores prepare light.
    #[cfg_attr(not(any(feature = "_postgres", feature = "sqlite")), allow(dead_code))]
    Light(L),
    Whole(D),
}

/// A document of `D` prepared for its chunk.
type ReadyOf<D> = Ready<<D as super::Driver>::Light, <D as super::Driver>::Doc>;

/// One slice of a batch as prepared: each document, or the refusal that kept it from being sent.
type PreparedSlice<D> = Vec<Result<ReadyOf<D>, Error>>;

impl<L, D> std::ops::Deref for Ready<L, D>
where
    L: std::ops::Deref<Target = super::Prepared>,
    D: std::ops::Deref<Target = super::Prepared>,
{
    type Target = super::Prepared;

    fn deref(&self) -> &super::Prepared {
        match self {
            Ready::Light(light) => light,
            Ready::Whole(doc) => doc,
        }
    }
}

impl<L, D> Ready<L, D> {
    /// What a lookup reads of the document.
    fn light<'r, B: BatchDriver<Light = L, Doc = D>>(&'r self, driver: &B) -> &'r L {
        match self {
            Ready::Light(light) => light,
            Ready::Whole(doc) => driver.light_of(doc),
        }
    }
}

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

/// How many documents of the next slice are prepared between two polls of the chunk in flight.
/// A chunk can take several statements (SQLite's savepoint, insert and release; a lookup, then
/// a write): each poll sends the next once the last is answered, so the database works on the
/// chunk while the slice after it is prepared, instead of waiting for the whole slice. Polling
/// an unanswered statement costs a check of its channel.
const POLL_EVERY: usize = 32;

/// One chunk's write under way: each input index with its outcome, once settled.
type Settling<'f> = Pin<Box<dyn Future<Output = ChunkSettled> + Send + 'f>>;

/// A chunk's end: each input index with its outcome, or the error that ended the batch.
type ChunkSettled = Result<Vec<(usize, Result<Outcome, Error>)>, Error>;

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

/// Upserts of one chunk's documents, each with its original: those the driver's lookup finds
/// stored unchanged ([`BatchDriver::look_up`]) settle with nothing sent, the others are judged
/// from what it found, and only those a write would change are made whole and written.
/// Without a lookup, [`settle_read_first`]. What the lookup foretells of the next chunk goes
/// into `early` as soon as it is answered, if nothing did before. Nothing is written before
/// the chunk's turn comes at its `place`; `None` if it never will (nothing written).
async fn settle_chunk<D: BatchDriver, T: Idempotent + Serialize>(
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
        docs.iter().map(|(ready, _)| -> &super::Prepared { ready }),
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
            if let Some(outcome) =
                super::pinned_outcome(&doc, driver.write_pinned(&doc, stored).await?)
            {
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
        lights.iter().map(|light| -> &super::Prepared { light }),
    ))
}

/// Whether `docs` are enough for a plain insert of fresh rows to be worth its risk
/// ([`BatchDriver::insert_fresh`]).
fn worth_inserting_fresh<D: BatchDriver>(driver: &D, docs: &[&D::Doc]) -> bool {
    !docs.is_empty() && docs.len() >= driver.shortcut_min_docs()
}

/// Each of `docs` `Inserted`.
fn inserted<Doc>(docs: &[Doc]) -> Vec<Result<Outcome, Error>> {
    docs.iter().map(|_| Ok(Outcome::Inserted)).collect()
}

/// `docs` inserted as fresh rows ([`BatchDriver::insert_fresh`]) by the chunk at `place`, to
/// write only if the session holds the mark `after` where it is given. `Some(Fresh::Inserted)`
/// where every one was; otherwise nothing was written, and they go the guarded way (`None`
/// where the driver has no such insert; [`Fresh::Met`] also where the database refused the
/// statement). While the insert is in flight the chunk after this one may be sent behind it
/// ([`Place::inserting`]).
async fn insert_fresh<D: BatchDriver>(
    driver: &D,
    docs: &[&D::Doc],
    place: &Place,
    after: Option<Mark>,
) -> Result<Option<Fresh>, Error> {
    place.inserting();
    let fresh = match driver.insert_fresh(docs, place.landing(after)).await {
        Ok(fresh) => fresh,
        // The database refused the statement, which wrote nothing: a stored row's id or key, a
        // CHECK, a trigger that dropped rows. The guarded write decides, and reports what it
        // meets, as it does any refusal.
        Err(error) if answered_by_the_database(&error) => Some(Fresh::Met),
        Err(error) => return Err(error),
    };
    if fresh != Some(Fresh::Inserted) {
        place.running();
    }
    Ok(fresh)
}

/// What became of a chunk's documents sent to be inserted as fresh rows ([`fresh_in_turn`]).
enum InTurn {
    /// The chunk ahead failed: nothing was written, and the batch ends.
    Stopped,
    /// Every document was inserted.
    Inserted,
    /// Nothing was written, and the chunk's turn has come: the documents go the guarded way.
    Guarded,
}

/// `docs`, a chunk written without a lookup, inserted as fresh rows where that is `likely` and
/// they are enough to be worth it, in the chunk's turn at `place`. Where the chunk ahead's last
/// write is its own insert of fresh rows, already sent, this chunk's insert goes at once behind
/// it on the session, to write only if that one landed ([`Landing`]); if it did not, this one
/// waits for its turn and tries again.
async fn fresh_in_turn<D: BatchDriver>(
    driver: &D,
    docs: &[&D::Doc],
    likely: bool,
    place: &Place,
) -> Result<InTurn, Error> {
    let worth = likely && worth_inserting_fresh(driver, docs);
    if worth {
        match place.come_or_inserting().await {
            Ahead::Ended(false) => return Ok(InTurn::Stopped),
            Ahead::Ended(true) => {}
            Ahead::Inserting(after) => {
                match insert_fresh(driver, docs, place, Some(after)).await? {
                    Some(Fresh::Inserted) => return Ok(InTurn::Inserted),
                    Some(Fresh::Early) => {}
                    Some(Fresh::Met) | None => {
                        return Ok(match place.come().await {
                            true => InTurn::Guarded,
                            false => InTurn::Stopped,
                        })
                    }
                }
            }
        }
    }
    if !place.come().await {
        return Ok(InTurn::Stopped);
    }
    Ok(
        match worth && insert_fresh(driver, docs, place, None).await? == Some(Fresh::Inserted) {
            true => InTurn::Inserted,
            false => InTurn::Guarded,
        },
    )
}

/// Whether the database itself answered with `error` (it carries the database's code), as
/// opposed to a failure to reach it.
fn answered_by_the_database(error: &Error) -> bool {
    error
        .as_backend()
        .is_some_and(|backend| backend.code().is_some())
}

/// Each document's outcome, or contention for one that none settled (which the loops that
/// fill `outcomes` leave to a write that kept meeting changes).
fn settled_or_contention<'d>(
    outcomes: Vec<Option<Result<Outcome, Error>>>,
    documents: impl Iterator<Item = &'d super::Prepared>,
) -> Vec<Result<Outcome, Error>> {
    outcomes
        .into_iter()
        .zip(documents)
        .map(|(outcome, doc)| outcome.unwrap_or_else(|| Err(contention(&doc.document()))))
        .collect()
}

/// Polls `chunk` once, which sends its first write to the connection, so that the server works
/// on it while the caller goes on; the caller awaits it afterwards, which polls it again with
/// the caller's own waker (the no-op waker of this poll is then replaced).
fn send_now<F: Future + ?Sized>(chunk: Pin<&mut F>) -> Poll<F::Output> {
    chunk.poll(&mut Context::from_waker(Waker::noop()))
}

/// The outcomes of the chunks in flight whose statements are answered already, polled once
/// each ([`send_now`]) so that each sends its next statement if its last was answered; those
/// settled are no longer in flight.
fn answered<F: Future + ?Sized>(in_flight: &mut VecDeque<Pin<Box<F>>>) -> Vec<F::Output> {
    let mut settled = Vec::new();
    in_flight.retain_mut(|chunk| match send_now(chunk.as_mut()) {
        Poll::Ready(outcome) => {
            settled.push(outcome);
            false
        }
        Poll::Pending => true,
    });
    settled
}

/// Where a chunk stands among the chunks of a batch in flight together. Chunks in flight
/// together read in any order but write in input order, as single upserts would: a chunk writes
/// once the chunk sent before it has ended its writes ([`Place::come`]), so a constraint between
/// rows of two chunks (another unique index, a foreign key to the table itself, a trigger) meets
/// them in that order, whichever of them needs more statements. Its own state tells the chunk
/// after it how far it is; dropped before [`Place::done`], it says the chunk failed.
struct Place {
    /// The state of the chunk sent before it; none for the first, or a chunk alone.
    ahead: Option<Arc<AtomicU8>>,
    /// Its own state, which the chunk after it reads; none for a chunk alone.
    own: Option<Arc<AtomicU8>>,
    /// The marks inserts of fresh rows leave in the session ([`Landing`]): the chunk ahead's,
    /// if any, and its own; none where the driver has one chunk in flight.
    marks: Option<(Option<Mark>, Mark)>,
}

/// A chunk still running, [`Place`]'s state.
const RUNNING: u8 = 0;
/// A chunk whose last write, its plain insert of fresh rows, is sent ([`Place::inserting`]).
const INSERTING: u8 = 1;
/// A chunk whose writes all ended, [`Place`]'s state.
const DONE: u8 = 2;
/// A chunk that failed or was dropped, [`Place`]'s state.
const FAILED: u8 = 3;

/// How the chunk ahead stands, for a chunk that would insert fresh rows behind it
/// ([`Place::come_or_inserting`]).
enum Ahead {
    /// Its writes ended: `true` if they all did, `false` if it failed.
    Ended(bool),
    /// Its last write, an insert of fresh rows that leaves this mark where it lands, is sent.
    Inserting(Mark),
}

impl Place {
    /// A chunk with none ahead of it and none after it.
    fn alone() -> Place {
        Place {
            ahead: None,
            own: None,
            marks: None,
        }
    }

    /// Whether the chunk may write: `true` once the chunk ahead has ended its writes, `false`
    /// if it failed (the batch then ends, and this chunk writes nothing). Needs no waker: the
    /// batch polls every chunk in flight, oldest first, whenever one makes progress, and the
    /// chunk ahead sets its state as it ends.
    async fn come(&self) -> bool {
        let Some(ahead) = &self.ahead else {
            return true;
        };
        std::future::poll_fn(|_| match ahead.load(Ordering::Acquire) {
            RUNNING | INSERTING => Poll::Pending,
            state => Poll::Ready(state == DONE),
        })
        .await
    }

    /// As [`Place::come`], or sooner, once the chunk ahead's last write is its insert of fresh
    /// rows and it is sent, where inserts leave marks.
    async fn come_or_inserting(&self) -> Ahead {
        let (Some(ahead), Some((Some(mark), _))) = (&self.ahead, self.marks) else {
            return Ahead::Ended(self.come().await);
        };
        std::future::poll_fn(|_| match ahead.load(Ordering::Acquire) {
            RUNNING => Poll::Pending,
            INSERTING => Poll::Ready(Ahead::Inserting(mark)),
            state => Poll::Ready(Ahead::Ended(state == DONE)),
        })
        .await
    }

    /// What the chunk's insert of fresh rows must find in the session (`after`) and leaves in it.
    fn landing(&self, after: Option<Mark>) -> Landing {
        Landing {
            after,
            leaves: self.marks.map(|(_, own)| own),
        }
    }

    /// Says that the chunk's insert of fresh rows, which ends its writes where it lands, is
    /// about to be sent: the chunk after it may go behind it.
    fn inserting(&self) {
        self.swap(RUNNING, INSERTING);
    }

    /// Says that the chunk's insert of fresh rows did not land: it goes on writing.
    fn running(&self) {
        self.swap(INSERTING, RUNNING);
    }

    /// Says that the chunk's writes all ended.
    fn done(&self) {
        if let Some(own) = &self.own {
            own.store(DONE, Ordering::Release);
        }
    }

    fn swap(&self, from: u8, to: u8) {
        if let Some(own) = &self.own {
            let _ = own.compare_exchange(from, to, Ordering::Release, Ordering::Relaxed);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // Leaves `DONE` as it is.
        if let Some(own) = &self.own {
            let _ = own.fetch_update(Ordering::Release, Ordering::Relaxed, |state| {
                (state != DONE).then_some(FAILED)
            });
        }
    }
}

/// The places of a batch's chunks in the order they are sent ([`Place`]).
struct Places {
    /// The state of the chunk sent last.
    last: Option<Arc<AtomicU8>>,
    /// The batch's id in the marks its inserts leave; none where they leave none.
    batch: Option<ulid::Ulid>,
    /// How many chunks were sent.
    sent: u32,
}

impl Places {
    /// With marks for inserts of fresh rows where `marked` (more than one chunk in flight).
    fn new(marked: bool) -> Places {
        Places {
            last: None,
            batch: marked.then(ulid::Ulid::generate),
            sent: 0,
        }
    }

    /// The place of the chunk sent next.
    fn next(&mut self) -> Place {
        let own = Arc::new(AtomicU8::new(RUNNING));
        let ahead = self.last.replace(Arc::clone(&own));
        let mark = |chunk| self.batch.map(|batch| Mark { batch, chunk });
        let marks = mark(self.sent).map(|own| (self.sent.checked_sub(1).and_then(mark), own));
        self.sent += 1;
        Place {
            ahead,
            own: Some(own),
            marks,
        }
    }
}

/// Records a settled chunk's outcomes ([`record`]). On its error, first waits for every other
/// chunk in flight to end (those sent before it finish their writes, those sent after it stop
/// before theirs), so that nothing of the batch is written after it returns.
async fn record_settled(
    settled: ChunkSettled,
    in_flight: &mut VecDeque<Settling<'_>>,
    outcomes: &mut [Option<Result<Outcome, Error>>],
) -> Result<Foresight, Error> {
    match settled {
        Ok(settled) => Ok(record(settled, outcomes)),
        Err(error) => {
            while !in_flight.is_empty() {
                let _ = next_settled(in_flight, None).await;
            }
            Err(error)
        }
    }
}

/// What [`next_settled`] waited for.
enum Next<T> {
    /// A chunk settled, with this outcome.
    Settled(T),
    /// A lookup foretold how the next chunk is best sent.
    Foreseen(Foresight),
}

/// The outcome of the first chunk in flight to settle, which is then no longer in flight, or,
/// where `early` is given, what a lookup foretells, if that comes first. Every chunk in flight
/// is polled while it waits, so each sends its next statement as soon as its last is answered.
/// `in_flight` must not be empty.
async fn next_settled<F: Future + ?Sized>(
    in_flight: &mut VecDeque<Pin<Box<F>>>,
    early: Option<&OnceLock<Foresight>>,
) -> Next<F::Output> {
    std::future::poll_fn(|context| {
        for at in 0..in_flight.len() {
            if let Poll::Ready(outcome) = in_flight[at].as_mut().poll(context) {
                in_flight.remove(at);
                return Poll::Ready(Next::Settled(outcome));
            }
        }
        match early.and_then(OnceLock::get) {
            Some(&foreseen) => Poll::Ready(Next::Foreseen(foreseen)),
            None => Poll::Pending,
        }
    })
    .await
}

/// Stores the outcome of each settled input, and says how the next chunk is best sent: looked
/// up before its write ([`BatchDriver::look_up`]) while at least half of this one was stored
/// unchanged, which the first chunk of a first ingest (or of a re-ingest that changes every
/// document) shows is not so, and its later chunks then go without the extra round trip; and
/// inserted as fresh rows ([`BatchDriver::insert_fresh`]) while this one was inserted whole.
fn record(
    settled: Vec<(usize, Result<Outcome, Error>)>,
    outcomes: &mut [Option<Result<Outcome, Error>>],
) -> Foresight {
    let count = |wanted: Outcome| {
        settled
            .iter()
            .filter(|(_, outcome)| outcome.as_ref().ok() == Some(&wanted))
            .count()
    };
    let foresight = Foresight {
        look_up: count(Outcome::Unchanged) * 2 >= settled.len(),
        fresh: !settled.is_empty() && count(Outcome::Inserted) == settled.len(),
    };
    for (index, outcome) in settled {
        outcomes[index] = Some(outcome);
    }
    foresight
}

/// The fewest documents of a chunk worth a shortcut: a lookup before its write, or a plain
/// insert of fresh rows. Below, the guarded write alone costs less than the round trip a
/// shortcut adds (always for a lookup, when it misses for an insert).
pub(crate) const SHORTCUT_MIN_DOCS: usize = 64;
