//! `upsert_many` on any driver: the outcomes that upserting the documents one by one, in input
//! order, would give ([`crate::batch`]), sent in rounds keyed by id and in chunks.
//!
//! Copies collapse by id and content, never by natural key alone: two documents with one natural
//! key and different ids (a timestamp stored at second precision) are two writes, the second of
//! which is refused as a single upsert would refuse it.

mod chunk;
mod fresh;
mod in_flight;
mod pipeline;
mod place;

use std::future::Future;

use serde::Serialize;

use super::Driver;
use crate::error::Error;
use crate::idempotent::Idempotent;

// Only the MongoDB store settles a write read first from outside a batch.
#[cfg_attr(not(feature = "mongodb"), allow(unused_imports))]
pub(crate) use chunk::settle_read_first;
pub(crate) use pipeline::upsert_many;

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
    /// writes ([`Place`](place::Place)), so rows are written in input order, as single upserts
    /// would write them; or, where the chunk before ends with a plain insert of fresh rows, at
    /// once behind it, to write only if that insert landed ([`Landing`]).
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

/// What [`BatchDriver::insert_fresh`] did.
// Only the SQL stores insert fresh rows.
#[cfg_attr(
    not(any(feature = "_postgres", feature = "_sqlx_store")),
    allow(dead_code)
)]
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
/// ([`BatchDriver::insert_fresh`]). A chunk whose writes wait for the chunk ahead's
/// ([`Place`](place::Place))
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
// The SQL stores look up; the engine reads it on every build, MongoDB's alone too.
#[cfg_attr(not(feature = "_sql_store"), allow(dead_code))]
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
    #[cfg_attr(
        not(any(feature = "_postgres", feature = "_sqlx_store")),
        allow(dead_code)
    )]
    Light(L),
    Whole(D),
}

/// A document of `D` prepared for its chunk.
type ReadyOf<D> = Ready<<D as super::Driver>::Light, <D as super::Driver>::Doc>;

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

/// The fewest documents of a chunk worth a shortcut: a lookup before its write, or a plain
/// insert of fresh rows. Below, the guarded write alone costs less than the round trip a
/// shortcut adds (always for a lookup, when it misses for an insert).
pub(crate) const SHORTCUT_MIN_DOCS: usize = 64;
