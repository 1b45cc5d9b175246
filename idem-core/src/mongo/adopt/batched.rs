//! The moves of many documents at once: each step of [`moves`](super::moves) as one command
//! for all of them, in the same order, so a move costs three round trips per batch, not per
//! document.

use std::collections::{HashMap, HashSet};

use mongodb::bson::{doc, Bson, Document};

use super::moves::{claim_update, key_set_aside, reservation, unchanged, Claimed};
use super::Adoption;
use crate::audit::Halt;
use crate::error::Error;
use crate::model::ID_FIELD;
use crate::mongo::batch::{write_commands, write_errors};
use crate::mongo::mongo_error;
use crate::mongo::write::id_text;

/// How many documents an adoption moves together: a reserve of each, then a release of each,
/// then a claim of each, each step one command.
pub(super) const MOVES_PER_BATCH: usize = 100;

impl Adoption<'_> {
    /// Moves the pending documents together: one insert of every reservation, one delete of every
    /// original still as read, one update claiming every reservation whose original is gone. Each
    /// step is the one a single move makes, for many documents at once, and in the same order, so
    /// what a crash leaves is what it leaves of single moves. A document any step of which does
    /// not go as planned (its derived id held, its original changed, its key taken meanwhile)
    /// goes on alone from where it is, as a single move would.
    pub(super) async fn send_pending(&mut self) -> Result<(), Error> {
        let plans = std::mem::take(&mut self.pending);
        if plans.is_empty() {
            return Ok(());
        }
        let whole = self.collection_ref();
        let limits = self.store.server_limits(self.model).await?;
        let collection = self.model.collection();
        // 1. Reserve.
        let statements: Vec<(usize, Document)> = plans
            .iter()
            .enumerate()
            .map(|(index, plan)| (index, plan.reserved.clone()))
            .collect();
        let mut not_reserved = HashSet::new();
        for command in write_commands(statements, limits) {
            let (indexes, documents): (Vec<usize>, Vec<Document>) = command.into_iter().unzip();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "insert": collection, "documents": documents, "ordered": false },
                )
                .await?;
            not_reserved.extend(write_errors(&reply).keys().map(|&at| indexes[at]));
        }
        // 2. Release.
        let reserved: Vec<usize> = (0..plans.len())
            .filter(|index| !not_reserved.contains(index))
            .collect();
        let statements: Vec<(usize, Document)> = reserved
            .iter()
            .map(|&index| {
                (
                    index,
                    doc! { "q": unchanged(&plans[index].original), "limit": 1 },
                )
            })
            .collect();
        let mut deleted = 0;
        for command in write_commands(statements, limits) {
            let deletes: Vec<Document> = command.into_iter().map(|(_, delete)| delete).collect();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "delete": collection, "deletes": deletes, "ordered": false },
                )
                .await?;
            deleted += reply
                .get_i32("n")
                .map(i64::from)
                .or_else(|_| reply.get_i64("n"))
                .unwrap_or(0);
        }
        let mut still_there = HashSet::new();
        if usize::try_from(deleted).unwrap_or(0) < reserved.len() {
            // Which originals another writer changed since the read: those stay.
            let ids: Vec<Bson> = reserved
                .iter()
                .map(|&index| plans[index].from.clone())
                .collect();
            crate::trace::round_trip("find");
            let mut cursor = self
                .collection
                .find(doc! { ID_FIELD: { "$in": ids } })
                .projection(doc! { ID_FIELD: 1 })
                .await
                .map_err(|source| mongo_error(&whole, source))?;
            let position: HashMap<String, usize> = reserved
                .iter()
                .map(|&index| (id_text(&plans[index].from), index))
                .collect();
            while cursor
                .advance()
                .await
                .map_err(|source| mongo_error(&whole, source))?
            {
                let found: Document = cursor
                    .deserialize_current()
                    .map_err(|source| mongo_error(&whole, source))?;
                let id = found.get(ID_FIELD).map(id_text).unwrap_or_default();
                if let Some(&index) = position.get(&id) {
                    still_there.insert(index);
                }
            }
        }
        // 3. Claim.
        let released: Vec<usize> = reserved
            .iter()
            .copied()
            .filter(|index| !still_there.contains(index))
            .collect();
        let mut statements = Vec::new();
        for &index in &released {
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
        let mut not_claimed = HashSet::new();
        for command in write_commands(statements, limits) {
            let (indexes, updates): (Vec<usize>, Vec<Document>) = command.into_iter().unzip();
            let reply = self
                .store
                .run_write_command(
                    &whole,
                    doc! { "update": collection, "updates": updates, "ordered": false },
                )
                .await?;
            not_claimed.extend(write_errors(&reply).keys().map(|&at| indexes[at]));
        }
        // The documents below were counted against the document limit when they were planned.
        for (index, plan) in plans.into_iter().enumerate() {
            let (from, to) = (id_text(&plan.from), plan.derived.to_string());
            let claimed = if not_reserved.contains(&index) {
                // Its derived id or another unique value is held: the single move says which.
                self.move_document(plan, false).await
            } else if still_there.contains(&index) {
                // Reserved, and its original changed: the single move refreshes and goes on.
                self.move_document(plan, true).await
            } else if not_claimed.contains(&index) {
                let derived = plan.derived.to_string();
                self.claim(&derived, &plan.from, Some(&plan.reserved)).await
            } else {
                Ok(Claimed::Done)
            };
            match claimed {
                Ok(claimed) => {
                    let report = &mut self.report;
                    claimed.record(&mut report.moved, &mut report.failed, from, to);
                }
                // A batched run has no write limit.
                Err(Halt::Limit) => {}
                Err(Halt::Failed(error)) => return Err(error),
            }
        }
        Ok(())
    }
}
