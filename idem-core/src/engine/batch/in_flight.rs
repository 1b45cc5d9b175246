//! The chunks of a batch in flight together: each polled so that it sends its next statement
//! as soon as its last is answered, and what each settled recorded, with what it foretells of
//! the next chunk.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use crate::error::Error;
use crate::outcome::Outcome;

/// What the last chunk settled foretells of the next ([`record`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Foresight {
    /// Look it up before its write ([`BatchDriver::look_up`](super::BatchDriver::look_up)).
    pub(super) look_up: bool,
    /// Insert it as fresh rows
    /// ([`BatchDriver::insert_fresh`](super::BatchDriver::insert_fresh)).
    pub(super) fresh: bool,
}

impl Foresight {
    /// Before any chunk settled: a lookup, which a re-ingest gains by and a first ingest pays
    /// once.
    pub(super) const FIRST: Foresight = Foresight {
        look_up: true,
        fresh: false,
    };
}

/// One chunk's write under way: each input index with its outcome, once settled.
pub(super) type Settling<'f> = Pin<Box<dyn Future<Output = ChunkSettled> + Send + 'f>>;

/// A chunk's end: each input index with its outcome, or the error that ended the batch.
pub(super) type ChunkSettled = Result<Vec<(usize, Result<Outcome, Error>)>, Error>;

/// Polls `chunk` once, which sends its first write to the connection, so that the server works
/// on it while the caller goes on; the caller awaits it afterwards, which polls it again with
/// the caller's own waker (the no-op waker of this poll is then replaced).
pub(super) fn send_now<F: Future + ?Sized>(chunk: Pin<&mut F>) -> Poll<F::Output> {
    chunk.poll(&mut Context::from_waker(Waker::noop()))
}

/// The outcomes of the chunks in flight whose statements are answered already, polled once
/// each ([`send_now`]) so that each sends its next statement if its last was answered; those
/// settled are no longer in flight.
pub(super) fn answered<F: Future + ?Sized>(
    in_flight: &mut VecDeque<Pin<Box<F>>>,
) -> Vec<F::Output> {
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

/// Records a settled chunk's outcomes ([`record`]). On its error, first waits for every other
/// chunk in flight to end (those sent before it finish their writes, those sent after it stop
/// before theirs), so that nothing of the batch is written after it returns.
pub(super) async fn record_settled(
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
pub(super) enum Next<T> {
    /// A chunk settled, with this outcome.
    Settled(T),
    /// A lookup foretold how the next chunk is best sent.
    Foreseen(Foresight),
}

/// The outcome of the first chunk in flight to settle, which is then no longer in flight, or,
/// where `early` is given, what a lookup foretells, if that comes first. Every chunk in flight
/// is polled while it waits, so each sends its next statement as soon as its last is answered.
/// `in_flight` must not be empty.
pub(super) async fn next_settled<F: Future + ?Sized>(
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
/// up before its write ([`BatchDriver::look_up`](super::BatchDriver::look_up)) while at least
/// half of this one was stored unchanged, which the first chunk of a first ingest (or of a
/// re-ingest that changes every document) shows is not so, and its later chunks then go without
/// the extra round trip; and inserted as fresh rows
/// ([`BatchDriver::insert_fresh`](super::BatchDriver::insert_fresh)) while this one was inserted
/// whole.
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
