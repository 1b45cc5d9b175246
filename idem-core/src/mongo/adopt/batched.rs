//! The moves of many documents at once: each step of [`moves`](super::moves) as one command
//! for all of them, in the same order, so a move costs four round trips per batch, not per
//! document.

use std::collections::{HashMap, HashSet};

use mongodb::bson::{doc, Bson};

use super::moves::{claim_update, key_set_aside, releasing_mark, reservation, unchanged};
use super::Adoption;
use crate::audit::Halt;
use crate::error::Error;
use crate::model::ID_FIELD;
use crate::mongo::batch::{refused_statements, reply_count};
use crate::mongo::collect;
use crate::mongo::write::id_text;

/// How many documents an adoption moves together: a reserve of each, then a release of each,
/// then a claim of each, each step one command.
pub(super) const MOVES_PER_BATCH: usize = 100;

impl Adoption<'_> {
    /// Moves the pending documents together: one insert of every reservation, one update marking
    /// each releasing, one delete of every original still as read, one update claiming every
    /// reservation whose original is gone. Each step is the one a single move makes, for many
    /// documents at once, and in the same order, so what a crash leaves is what it leaves of
    /// single moves. A document any step of which does
    /// not go as planned (its derived id held, its original changed, its key taken meanwhile)
    /// goes on alone from where it is, as a single move would.
    pub(super) async fn send_pending(&mut self) -> Result<(), Error> {
        let plans = std::mem::take(&mut self.pending);
        if plans.is_empty() {
            return Ok(());
        }
        let limits = self.store.server_limits(self.model).await?;
        let (store, model) = (self.store, self.model);
        let send = |command, statements| store.send_statements(model, command, statements, limits);
        // 1. Reserve.
        let statements = plans.iter().map(|plan| plan.reserved.clone());
        let sent = send(("insert", "documents"), statements.enumerate().collect()).await?;
        let not_reserved: HashSet<usize> = refused_statements(&sent).into_keys().collect();
        let reserved: Vec<usize> = (0..plans.len())
            .filter(|index| !not_reserved.contains(index))
            .collect();
        // 2. Mark each reservation releasing, then release.
        let statements = reserved.iter().map(|&index| {
            let plan = &plans[index];
            let filter = reservation(&plan.derived.to_string(), &plan.from);
            (index, doc! { "q": filter, "u": releasing_mark() })
        });
        let sent = send(("update", "updates"), statements.collect()).await?;
        // A reservation the server would not mark keeps its original: it goes on alone.
        let not_marked: HashSet<usize> = refused_statements(&sent).into_keys().collect();
        let reserved: Vec<usize> = (reserved.into_iter())
            .filter(|index| !not_marked.contains(index))
            .collect();
        let statements = reserved.iter().map(|&index| {
            let delete = doc! { "q": unchanged(&plans[index].original), "limit": 1 };
            (index, delete)
        });
        let sent = send(("delete", "deletes"), statements.collect()).await?;
        let deleted: usize = sent.iter().map(|(_, reply)| reply_count(reply, "n")).sum();
        let mut still_there: HashSet<usize> = HashSet::new();
        if deleted < reserved.len() {
            // Which originals another writer changed since the read: those stay.
            let ids: Vec<Bson> = reserved
                .iter()
                .map(|&index| plans[index].from.clone())
                .collect();
            crate::trace::round_trip("find");
            let find = self
                .collection
                .find(doc! { ID_FIELD: { "$in": ids } })
                .projection(doc! { ID_FIELD: 1 });
            // By the id's value and type: `1` and `"1"` are two documents whose ids print alike.
            let position: HashMap<(String, u8), usize> = reserved
                .iter()
                .map(|&index| (id_key(&plans[index].from), index))
                .collect();
            for found in collect(find, &self.collection_ref()).await? {
                let id = found.get(ID_FIELD).unwrap_or(&Bson::Null);
                still_there.extend(position.get(&id_key(id)));
            }
        }
        // 3. Claim.
        let mut statements = Vec::new();
        for index in reserved
            .into_iter()
            .filter(|index| !still_there.contains(index))
        {
            let plan = &plans[index];
            let Some(key) = key_set_aside(&plan.reserved) else {
                continue;
            };
            let claim = doc! {
                "q": reservation(&plan.derived.to_string(), &plan.from),
                "u": claim_update(key),
            };
            statements.push((index, claim));
        }
        let sent = send(("update", "updates"), statements).await?;
        let not_claimed: HashSet<usize> = refused_statements(&sent).into_keys().collect();
        // The documents below were counted against the document limit when they were planned.
        for (index, plan) in plans.into_iter().enumerate() {
            let (from, to) = (id_text(&plan.from), plan.derived.to_string());
            let claimed = if not_marked.contains(&index) {
                self.move_document(plan, (true, false)).await
            } else if not_reserved.contains(&index) {
                // Its derived id or another unique value is held: the single move says which.
                self.move_document(plan, (false, false)).await
            } else if still_there.contains(&index) {
                // Reserved and marked, and its original changed: the single move refreshes (the
                // mark kept) and goes on.
                self.move_document(plan, (true, true)).await
            } else if not_claimed.contains(&index) {
                let derived = plan.derived.to_string();
                self.claim(&derived, &plan.from, Some(&plan.reserved)).await
            } else {
                Ok(Ok(()))
            };
            match claimed {
                Ok(ended) => self.report.record_move(from, to, false, ended),
                // A batched run has no write limit.
                Err(Halt::Limit) => {}
                Err(Halt::Failed(error)) => return Err(error),
            }
        }
        Ok(())
    }
}

/// An `_id` as a key of a map: its text and its type.
fn id_key(id: &Bson) -> (String, u8) {
    (id_text(id), id.element_type() as u8)
}
