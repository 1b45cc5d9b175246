//! Where each chunk stands among the chunks of a batch in flight together, so that chunks
//! that read in any order still write in input order.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Poll;

use super::{Landing, Mark};

/// Where a chunk stands among the chunks of a batch in flight together. Chunks in flight
/// together read in any order but write in input order, as single upserts would: a chunk writes
/// once the chunk sent before it has ended its writes ([`Place::come`]), so a constraint between
/// rows of two chunks (another unique index, a foreign key to the table itself, a trigger) meets
/// them in that order, whichever of them needs more statements. Its own state tells the chunk
/// after it how far it is; dropped before [`Place::done`], it says the chunk failed.
pub(super) struct Place {
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
pub(super) enum Ahead {
    /// Its writes ended: `true` if they all did, `false` if it failed.
    Ended(bool),
    /// Its last write, an insert of fresh rows that leaves this mark where it lands, is sent.
    Inserting(Mark),
}

impl Place {
    /// A chunk with none ahead of it and none after it.
    pub(super) fn alone() -> Place {
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
    pub(super) async fn come(&self) -> bool {
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
    pub(super) async fn come_or_inserting(&self) -> Ahead {
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
    pub(super) fn landing(&self, after: Option<Mark>) -> Landing {
        Landing {
            after,
            leaves: self.marks.map(|(_, own)| own),
        }
    }

    /// Says that the chunk's insert of fresh rows, which ends its writes where it lands, is
    /// about to be sent: the chunk after it may go behind it.
    pub(super) fn inserting(&self) {
        self.swap(RUNNING, INSERTING);
    }

    /// Says that the chunk's insert of fresh rows did not land: it goes on writing.
    pub(super) fn running(&self) {
        self.swap(INSERTING, RUNNING);
    }

    /// Says that the chunk's writes all ended.
    pub(super) fn done(&self) {
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
pub(super) struct Places {
    /// The state of the chunk sent last.
    last: Option<Arc<AtomicU8>>,
    /// The batch's id in the marks its inserts leave; none where they leave none.
    batch: Option<ulid::Ulid>,
    /// How many chunks were sent.
    sent: u32,
}

impl Places {
    /// With marks for inserts of fresh rows where `marked` (more than one chunk in flight).
    pub(super) fn new(marked: bool) -> Places {
        Places {
            last: None,
            batch: marked.then(ulid::Ulid::generate),
            sent: 0,
        }
    }

    /// The place of the chunk sent next.
    pub(super) fn next(&mut self) -> Place {
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
