//! What idem tells a [`tracing`](https://docs.rs/tracing) subscriber, with the `tracing` feature:
//! one span per call (`upsert`, `upsert_many`, `insert_new`, `push`, `apply_once`, `record`,
//! `delete`, `delete_by_id`, `get`, `find`, `audit`, `adopt`) carrying the collection, the id when the call has
//! one (for `find`, the natural key it looks up as `key`, and the id of the document it found),
//! the outcome, the round trips to the server and the retries; and events for index creation,
//! contention retries, refusals and batch splits.
//!
//! Everything is under the target `idem` (`RUST_LOG=idem=debug` with `tracing-subscriber`'s
//! `EnvFilter`). Without the feature each item here is empty and inlined away: a call pays
//! nothing for it.

use std::future::Future;

use crate::document::NaturalKey;
use crate::error::Error;
use crate::id::Id;

/// The calls that get a span, named as the span is (a `find`'s is [`Call::find`]'s).
#[derive(Clone, Copy, Debug)]
pub(crate) enum CallKind {
    Upsert,
    UpsertMany,
    InsertNew,
    Push,
    ApplyOnce,
    Record,
    Delete,
    DeleteById,
    Get,
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    Audit,
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    Adopt,
}

/// What a call's span shows as its outcome.
pub(crate) trait Shown {
    /// The outcome as the span's `outcome` field shows it.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    fn shown(&self) -> String;

    /// The id of the document the call came back with, for a span opened without one (a read
    /// by natural key).
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    fn found_id(&self) -> Option<Id> {
        None
    }
}

macro_rules! shown_as_displayed {
    ($($type:ty),*) => {$(
        impl Shown for $type {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

shown_as_displayed!(
    crate::outcome::Outcome,
    crate::outcome::Deletion,
    crate::outcome::Pushed,
    crate::outcome::Applied,
    crate::outcome::Recorded,
    crate::batch::BatchReport
);

/// What `insert_new` did with its members.
impl<T> Shown for crate::insert::InsertReport<T> {
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// An audit: how much it read, and whether it found anything.
impl Shown for crate::audit::AuditReport {
    fn shown(&self) -> String {
        let verdict = if self.is_clean() {
            "clean"
        } else {
            "problems found"
        };
        format!("{} scanned, {verdict}", self.scanned)
    }
}

/// An adoption: what it moved and what it could not.
impl Shown for crate::audit::AdoptReport {
    fn shown(&self) -> String {
        format!(
            "{} moved, {} could not be moved{}",
            self.moved.count,
            self.failed.count,
            if self.stopped { ", stopped" } else { "" }
        )
    }
}

/// A read, and the derived id of the document it found.
impl<T: crate::idempotent::Idempotent> Shown for Option<T> {
    fn shown(&self) -> String {
        match self {
            Some(_) => "found".to_owned(),
            None => "none".to_owned(),
        }
    }

    fn found_id(&self) -> Option<Id> {
        self.as_ref().and_then(|document| document.id().ok())
    }
}

/// One call under way: its span, and the round trips and retries it made so far.
pub(crate) struct Call {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    #[cfg(feature = "tracing")]
    counts: std::sync::Arc<enabled::Counts>,
}

impl Call {
    /// A call of `kind` to `collection` about the document `id`, asked only when a subscriber
    /// listens.
    #[inline]
    #[allow(unused_variables)]
    pub fn new(kind: CallKind, collection: &str, id: impl FnOnce() -> Option<Id>) -> Self {
        #[cfg(feature = "tracing")]
        let span = enabled::span(kind, collection, id);
        Call::in_span(
            #[cfg(feature = "tracing")]
            span,
            false,
        )
    }

    /// A `find` in `collection` by the natural key `key`: the span shows the key as `key`, and
    /// as `id` the id of the document found, if one is.
    #[inline]
    #[allow(unused_variables)]
    pub fn find(collection: &str, key: &NaturalKey) -> Self {
        #[cfg(feature = "tracing")]
        let span = enabled::find_span(collection, key);
        Call::in_span(
            #[cfg(feature = "tracing")]
            span,
            true,
        )
    }

    /// A call in `span`; `shows_found_id` when the span gets its id from what the call returns.
    #[inline]
    #[allow(unused_variables)]
    fn in_span(#[cfg(feature = "tracing")] span: tracing::Span, shows_found_id: bool) -> Self {
        Call {
            #[cfg(feature = "tracing")]
            counts: std::sync::Arc::new(enabled::Counts::of(span.clone(), shows_found_id)),
            #[cfg(feature = "tracing")]
            span,
        }
    }

    /// Runs `call` in the span, counting the round trips and retries it makes, and records its
    /// outcome (or its error, and a refusal event) when it ends.
    #[cfg(any(feature = "mongodb", feature = "_sql_store"))]
    #[inline]
    pub async fn run<O, F>(self, call: F) -> Result<O, Error>
    where
        O: Shown,
        F: Future<Output = Result<O, Error>>,
    {
        #[cfg(feature = "tracing")]
        {
            enabled::run(self, call, false).await
        }
        #[cfg(not(feature = "tracing"))]
        {
            call.await
        }
    }

    /// [`run`](Call::run) for a driver that hands the span current when it sends a command to
    /// a worker thread, which holds it until the command is done (sqlx's SQLite connection): the
    /// call's future runs outside its span, so that the span ends with the call, and idem's
    /// events still name the call's span as their parent.
    #[cfg(feature = "_sql_store")]
    #[inline]
    pub async fn run_detached<O, F>(self, call: F) -> Result<O, Error>
    where
        O: Shown,
        F: Future<Output = Result<O, Error>>,
    {
        #[cfg(feature = "tracing")]
        {
            enabled::run(self, call, true).await
        }
        #[cfg(not(feature = "tracing"))]
        {
            call.await
        }
    }
}

/// One request sent to the server and answered (or lost) by the call under way: `command` names
/// it (`findAndModify`, `INSERT … ON CONFLICT`).
#[inline]
#[allow(unused_variables)]
pub(crate) fn round_trip(command: &str) {
    #[cfg(feature = "tracing")]
    enabled::round_trip(command);
}

/// A SQL statement's text as it leaves for the server, at `TRACE` under the target `idem::sql`:
/// which words a SQL store sends (a test of the write-marker store reads them), from every SQL
/// wire alike.
#[inline]
#[allow(unused_variables)]
#[cfg(feature = "_sql_store")]
pub(crate) fn statement_sent(sql: &str) {
    #[cfg(feature = "tracing")]
    tracing::trace!(target: "idem::sql", sql, "statement");
}

/// The call under way goes again because concurrent writers changed the document (`why`).
#[inline]
#[allow(unused_variables)]
pub(crate) fn retry(why: &'static str) {
    #[cfg(feature = "tracing")]
    enabled::retry(why);
}

/// The table of `collection` was created, its unique constraint on the natural key with it.
#[inline]
#[allow(unused_variables)]
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn table_created(collection: &str) {
    #[cfg(feature = "tracing")]
    enabled::in_call(|| tracing::info!(target: "idem", collection, "created the table"));
}

/// The unique natural-key index of `collection` was created.
#[inline]
#[allow(unused_variables)]
#[cfg(feature = "mongodb")]
pub(crate) fn index_created(collection: &str) {
    #[cfg(feature = "tracing")]
    enabled::in_call(
        || tracing::info!(target: "idem", collection, "created the natural-key index"),
    );
}

/// A batch of `documents` goes in `rounds` rounds (an id's second content in the batch waits for
/// the first), each sent `chunk` documents at a time.
#[inline]
#[allow(unused_variables)]
pub(crate) fn batch_split(documents: usize, rounds: usize, chunk: usize) {
    #[cfg(feature = "tracing")]
    enabled::in_call(|| tracing::debug!(target: "idem", documents, rounds, chunk, "batch split"));
}

#[cfg(feature = "tracing")]
mod enabled {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tracing::field::Empty;
    use tracing::Instrument;

    use super::{Call, CallKind, Shown};
    use crate::document::NaturalKey;
    use crate::error::Error;
    use crate::id::Id;

    /// The round trips and retries of one call, and its span: the parent of idem's events.
    pub(super) struct Counts {
        round_trips: AtomicU64,
        retries: AtomicU64,
        span: tracing::Span,
        /// The span's `id` is that of the document the call returns (a read by natural key).
        shows_found_id: bool,
    }

    impl Counts {
        pub(super) fn of(span: tracing::Span, shows_found_id: bool) -> Self {
            Counts {
                round_trips: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                span,
                shows_found_id,
            }
        }
    }

    /// Runs `emit` (which sends an event) in the span of the call being polled, if there is one.
    pub(super) fn in_call(emit: impl FnOnce()) {
        let span = CURRENT.with(|current| current.borrow().as_ref().map(|c| c.span.clone()));
        match span {
            Some(span) => span.in_scope(emit),
            None => emit(),
        }
    }

    thread_local! {
        /// The counts of the call being polled on this thread: set for the length of each poll
        /// of its future (wherever the executor polls it), so code deep inside the call counts
        /// without being handed anything.
        static CURRENT: RefCell<Option<Arc<Counts>>> = const { RefCell::new(None) };
    }

    /// A future that makes its call's counts current while it is polled.
    struct Counted<F> {
        counts: Arc<Counts>,
        inner: Pin<Box<F>>,
    }

    impl<F: Future> Future for Counted<F> {
        type Output = F::Output;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let counts = self.counts.clone();
            // A call made inside another (a batch of events records each) counts as itself,
            // and the outer call's counts come back when it returns.
            let outer = CURRENT.with(|current| current.borrow_mut().replace(counts));
            let polled = self.inner.as_mut().poll(cx);
            CURRENT.with(|current| *current.borrow_mut() = outer);
            polled
        }
    }

    macro_rules! call_span {
        ($name:literal, $collection:expr $(, $field:ident = $value:expr)*) => {
            tracing::info_span!(
                target: "idem",
                $name,
                collection = $collection,
                $($field = $value,)*
                id = Empty,
                outcome = Empty,
                round_trips = Empty,
                retries = Empty,
            )
        };
    }

    pub(super) fn span(
        kind: CallKind,
        collection: &str,
        id: impl FnOnce() -> Option<Id>,
    ) -> tracing::Span {
        let span = match kind {
            CallKind::Upsert => call_span!("idem.upsert", collection),
            CallKind::UpsertMany => call_span!("idem.upsert_many", collection),
            CallKind::InsertNew => call_span!("idem.insert_new", collection),
            CallKind::Push => call_span!("idem.push", collection),
            CallKind::ApplyOnce => call_span!("idem.apply_once", collection),
            CallKind::Record => call_span!("idem.record", collection),
            CallKind::Delete => call_span!("idem.delete", collection),
            CallKind::DeleteById => call_span!("idem.delete_by_id", collection),
            CallKind::Get => call_span!("idem.get", collection),
            #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
            CallKind::Audit => call_span!("idem.audit", collection),
            #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
            CallKind::Adopt => call_span!("idem.adopt", collection),
        };
        if !span.is_disabled() {
            if let Some(id) = id() {
                span.record("id", tracing::field::display(id));
            }
        }
        span
    }

    pub(super) fn find_span(collection: &str, key: &NaturalKey) -> tracing::Span {
        call_span!("idem.find", collection, key = tracing::field::display(key))
    }

    pub(super) async fn run<O, F>(call: Call, future: F, detached: bool) -> Result<O, Error>
    where
        O: Shown,
        F: Future<Output = Result<O, Error>>,
    {
        let Call { span, counts } = call;
        let counted = Counted {
            counts: counts.clone(),
            inner: Box::pin(future),
        };
        let result = match detached {
            true => counted.instrument(tracing::Span::none()).await,
            false => counted.instrument(span.clone()).await,
        };
        span.record("round_trips", counts.round_trips.load(Ordering::Relaxed));
        span.record("retries", counts.retries.load(Ordering::Relaxed));
        match &result {
            Ok(outcome) => {
                span.record("outcome", outcome.shown().as_str());
                if counts.shows_found_id && !span.is_disabled() {
                    if let Some(id) = outcome.found_id() {
                        span.record("id", tracing::field::display(id));
                    }
                }
            }
            Err(error) => {
                span.record("outcome", error_name(error));
                span.in_scope(|| {
                    if error.is_refusal() {
                        tracing::warn!(target: "idem", error = %error, "refused");
                    } else {
                        tracing::error!(
                            target: "idem",
                            error = %error,
                            retryable = error.is_retryable(),
                            "failed"
                        );
                    }
                });
            }
        }
        result
    }

    /// The error's kind, as the span's `outcome` shows a failed call (`ErrorKind::Contention`).
    fn error_name(error: &Error) -> String {
        let shown = format!("{:?}", error.kind());
        let end = shown.find([' ', '{', '(']).unwrap_or(shown.len());
        format!("ErrorKind::{}", &shown[..end])
    }

    fn with_current(count: impl FnOnce(&Counts)) {
        CURRENT.with(|current| {
            if let Some(counts) = current.borrow().as_ref() {
                count(counts);
            }
        });
    }

    pub(super) fn round_trip(command: &str) {
        with_current(|counts| {
            counts.round_trips.fetch_add(1, Ordering::Relaxed);
        });
        in_call(|| tracing::trace!(target: "idem", command, "round trip"));
    }

    pub(super) fn retry(why: &'static str) {
        with_current(|counts| {
            counts.retries.fetch_add(1, Ordering::Relaxed);
        });
        in_call(|| tracing::debug!(target: "idem", why, "contention, going again"));
    }
}
