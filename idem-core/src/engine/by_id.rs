//! The writes that change one stored document named by its id (`push`, `apply_once`,
//! `delete_by_id`): one guarded write, and when the guard lets nothing through, what is stored
//! says why. The rule is the same on every backend: the guard's answer, or the stored
//! document's, or [`ErrorKind::NotFound`]; a document that changed between the write and the
//! read that explains it goes again, [`ErrorKind::Contention`] after the attempts.

use std::future::Future;

use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::MAX_ATTEMPTS;

/// What one attempt of a write by id found.
pub(crate) enum ById<R> {
    /// The answer: the guard let the write through, or what is stored already answers the call
    /// (the item is in the list, the operation was applied, the document is deleted).
    Answered(R),
    /// No document is stored under the id.
    Missing,
    /// The document changed between the write and the read that explains it: go again.
    Changed,
}

/// Makes `attempt` until it answers: the call's result, [`ErrorKind::NotFound`] for a missing
/// document, [`ErrorKind::Contention`] when the document kept changing.
pub(crate) async fn settle_by_id<R, Attempt>(
    document: &DocumentRef,
    mut attempt: impl FnMut() -> Attempt,
) -> Result<R, Error>
where
    Attempt: Future<Output = Result<ById<R>, Error>>,
{
    for round in 0..MAX_ATTEMPTS {
        if round > 0 {
            crate::trace::retry("a concurrent writer changed the document");
        }
        match attempt().await? {
            ById::Answered(answer) => return Ok(answer),
            ById::Missing => return Err(Error::new(document.clone(), ErrorKind::NotFound)),
            ById::Changed => {}
        }
    }
    Err(super::contention(document))
}

/// The answer of a write by id whose one statement also says whether the document exists: the
/// backends whose statement and check read one snapshot need no second read.
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn answered_in_one<R>(written: bool, exists: bool, done: R, already: R) -> ById<R> {
    match (written, exists) {
        (true, _) => ById::Answered(done),
        (false, true) => ById::Answered(already),
        (false, false) => ById::Missing,
    }
}
