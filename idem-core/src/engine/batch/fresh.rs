//! The shortcut of a first ingest: a chunk's documents inserted as fresh rows with one plain
//! insert, which a stored row makes fail whole ([`BatchDriver::insert_fresh`]).

use super::place::{Ahead, Place};
use super::{BatchDriver, Fresh, Mark};
use crate::error::Error;
use crate::outcome::Outcome;

/// Whether `docs` are enough for a plain insert of fresh rows to be worth its risk
/// ([`BatchDriver::insert_fresh`]).
pub(super) fn worth_inserting_fresh<D: BatchDriver>(driver: &D, docs: &[&D::Doc]) -> bool {
    !docs.is_empty() && docs.len() >= driver.shortcut_min_docs()
}

/// Each of `docs` `Inserted`.
pub(super) fn inserted<Doc>(docs: &[Doc]) -> Vec<Result<Outcome, Error>> {
    docs.iter().map(|_| Ok(Outcome::Inserted)).collect()
}

/// `docs` inserted as fresh rows ([`BatchDriver::insert_fresh`]) by the chunk at `place`, to
/// write only if the session holds the mark `after` where it is given. `Some(Fresh::Inserted)`
/// where every one was; otherwise nothing was written, and they go the guarded way (`None`
/// where the driver has no such insert; [`Fresh::Met`] also where the database refused the
/// statement). While the insert is in flight the chunk after this one may be sent behind it
/// ([`Place::inserting`]).
pub(super) async fn insert_fresh<D: BatchDriver>(
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
        // meets, as it does any refusal. Not a conflict with another writer (a deadlock, a
        // serialization failure): that may have rolled back the caller's whole transaction
        // (InnoDB's deadlock does), after which a write would land outside it, so it is the
        // call's answer, which the driver starts over where the transaction is idem's own.
        Err(error) if answered_by_the_database(&error) && !error.is_retryable() => Some(Fresh::Met),
        Err(error) => return Err(error),
    };
    if fresh != Some(Fresh::Inserted) {
        place.running();
    }
    Ok(fresh)
}

/// What became of a chunk's documents sent to be inserted as fresh rows ([`fresh_in_turn`]).
pub(super) enum InTurn {
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
/// it on the session, to write only if that one landed ([`Landing`](super::Landing)); if it did
/// not, this one waits for its turn and tries again.
pub(super) async fn fresh_in_turn<D: BatchDriver>(
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
