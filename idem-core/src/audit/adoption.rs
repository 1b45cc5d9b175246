//! What an adoption decides, on every store: whether it may run at all, how far one run goes,
//! and, where documents share a natural key, which of them stays.

use super::fields::note_unknown;
use super::finding::UnknownField;
#[cfg(feature = "mongodb")]
use super::finding::{ShownKey, SAMPLES_PER_KIND};
use super::hash_check::HashDiagnosis;
use super::report::AdoptReport;
use crate::model::Model;
use crate::model_check::ModelCheck;

/// Refuses the adoption of an event type's documents (a type with an idempotency key): their
/// ids are not derived from their content, so there is none to move them to.
pub(crate) fn check_derived_ids(model: &Model) -> Result<(), crate::Error> {
    match model.idempotency_key_field() {
        Some(_) => Err(crate::Error::new(
            crate::document::DocumentRef::collection(model),
            crate::error::ErrorKind::NoDerivedId,
        )),
        None => Ok(()),
    }
}

/// What an adoption with a model given at run time reads before it moves anything, on every
/// store: a sample of the stored documents, checked against the model (`check`, on those under a
/// ULID), and searched, where their stored hash is not their content's, for a field the model
/// would hash and the type does not (`diagnosis`). A store shows them its sample;
/// [`ModelSample::checked`] decides.
pub(crate) struct ModelSample<'m> {
    pub check: ModelCheck<'m>,
    pub diagnosis: HashDiagnosis,
}

impl<'m> ModelSample<'m> {
    pub fn new(model: &'m Model) -> Self {
        ModelSample {
            check: ModelCheck::new(model),
            diagnosis: HashDiagnosis::default(),
        }
    }

    /// What the sample decides: the adoption is refused where the documents show another model
    /// (unless `ignore_model_check`), and where stored fields are not the model's (`unknown`,
    /// as the store found them, and those the stored hashes leave out), unless
    /// `allow_unknown_fields`, since the hashes it would store may not be the type's. Else those
    /// fields, which the moves leave out of the hashes.
    pub fn checked(
        self,
        model: &Model,
        mut unknown: Vec<UnknownField>,
        ignore_model_check: bool,
        allow_unknown_fields: bool,
    ) -> Result<Vec<UnknownField>, crate::Error> {
        for field in self.diagnosis.finding() {
            note_unknown(&mut unknown, field);
        }
        if let (Some(mismatch), false) = (self.check.finding(), ignore_model_check) {
            return Err(mismatch.refusal(model));
        }
        if unknown.is_empty() || allow_unknown_fields {
            return Ok(unknown);
        }
        let shown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        Err(crate::Error::schema_mismatch(
            model,
            format!(
                "stored fields that are not fields of the model given: {}; adoption would store \
                 content hashes the type may not compute, so the next upsert of each document \
                 would rewrite it. Give the type's fields (`--fields`, in its order, or `--model \
                 FILE`), name the fields the type does not hash (`--volatile`, `--effect`, \
                 `--tombstone`, `--push-by`), or, if they are no fields of the type, leave them \
                 out of the hashes with `--allow-unknown-fields` \
                 (`AdoptOptions::allowing_unknown_fields`); nothing was moved",
                shown.join("; ")
            ),
        ))
    }
}

/// Why an adoption run ended before the end: a limit was reached, and the next run goes on from
/// where this one stopped, or the store failed.
#[cfg(feature = "mongodb")]
pub(crate) enum Halt {
    /// A limit of the run ([`RunLimits`]) was reached.
    Limit,
    /// The store failed.
    Failed(crate::Error),
}

#[cfg(feature = "mongodb")]
impl From<crate::Error> for Halt {
    fn from(error: crate::Error) -> Self {
        Halt::Failed(error)
    }
}

/// How far one adoption run may go: a number of documents, to bound the work of one call, and,
/// for tests of the resumption, a number of writes, which stops a run even inside a move. Every
/// store's adoption counts documents here.
pub(crate) struct RunLimits {
    max_documents: Option<u64>,
    // Only MongoDB's adoption, whose move takes several writes, stops inside one.
    #[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
    max_writes: Option<u64>,
    /// Writes counted so far.
    #[cfg_attr(not(feature = "mongodb"), allow(dead_code))]
    writes: u64,
}

impl RunLimits {
    /// A run limited to `max_documents` documents and `max_writes` writes (`None`: no limit).
    pub fn new(max_documents: Option<u64>, max_writes: Option<u64>) -> Self {
        RunLimits {
            max_documents,
            max_writes,
            writes: 0,
        }
    }

    /// How many more documents the run may begin, `None` without a limit; at none, the run
    /// stops before the next document's first write. The documents `report` settled (moved,
    /// finished or archived) and the `planned` moves not sent yet count, not those that could
    /// not be moved (else a run whose first documents always fail would never get past them).
    pub fn documents_left(&self, report: &AdoptReport, planned: u64) -> Option<u64> {
        let settled = report.moved.count + report.finished.count + report.archived.count;
        self.max_documents
            .map(|limit| limit.saturating_sub(settled + planned))
    }

    /// [`Halt::Limit`] once the document limit is reached ([`RunLimits::documents_left`], the
    /// `planned` moves counted), before the next document's first write.
    #[cfg(feature = "mongodb")]
    pub fn begin(&self, report: &AdoptReport, planned: usize) -> Result<(), Halt> {
        match self.documents_left(report, planned as u64) {
            Some(0) => Err(Halt::Limit),
            _ => Ok(()),
        }
    }

    /// Whether the run has a write limit: it then moves one document at a time, as the limit
    /// counts them, and may stop between any two writes.
    #[cfg(feature = "mongodb")]
    pub fn counts_writes(&self) -> bool {
        self.max_writes.is_some()
    }

    /// Counts one write; [`Halt::Limit`] once the write limit is reached, before the write.
    #[cfg(feature = "mongodb")]
    pub fn write(&mut self) -> Result<(), Halt> {
        if self.max_writes.is_some_and(|limit| self.writes >= limit) {
            return Err(Halt::Limit);
        }
        self.writes += 1;
        Ok(())
    }

    /// Counts `writes` writes that go together: a run stops before the first or after the
    /// last ([`Halt::Limit`], counting none, where fewer are left), unless its limit is below
    /// `writes`, where it counts the first alone (`Ok(false)`: the caller counts the others
    /// with [`RunLimits::write`]), so that such a run still gets past them.
    #[cfg(feature = "mongodb")]
    pub fn writes_together(&mut self, writes: u64) -> Result<bool, Halt> {
        match self.max_writes {
            Some(limit) if limit < writes => self.write().map(|()| false),
            Some(limit) if self.writes + writes > limit => Err(Halt::Limit),
            _ => {
                self.writes += writes;
                Ok(true)
            }
        }
    }
}

/// How one move of a document ended: done, or, for the reason given, not (nothing was lost).
#[cfg(feature = "mongodb")]
pub(crate) type MoveEnd = Result<(), String>;

#[cfg(feature = "mongodb")]
impl AdoptReport {
    /// Reports the move of the document `from` to `to` as it `ended`: among the moved documents,
    /// or those an interrupted run left half moved (`finished`), else among the failed ones,
    /// with why.
    pub(crate) fn record_move(&mut self, from: String, to: String, finished: bool, ended: MoveEnd) {
        match (ended, finished) {
            (Ok(()), false) => self.moved.record_misplaced(from, to),
            (Ok(()), true) => self.finished.record_misplaced(from, to),
            (Err(why), _) => self.failed.record(from, Some(why)),
        }
    }
}

// Only MongoDB's adoption meets duplicates: a SQL table's unique constraint keeps a key to one
// row from the start.

/// Which document of a natural key's group an adoption keeps and moves, the others being
/// archived: a lone one; among several, the one the duplicate rule chooses (`chosen`, asked
/// only then) where it names one of them. `None`: the group is left as it is and reported
/// ([`leave_duplicates`]).
#[cfg(feature = "mongodb")]
pub(crate) fn kept_of_group(
    holders: usize,
    chosen: impl FnOnce() -> Option<usize>,
) -> Option<usize> {
    match holders {
        0 => None,
        1 => Some(0),
        _ => chosen().filter(|&at| at < holders),
    }
}

/// Reports a natural key whose `holders` documents an adoption leaves where they are, with the
/// first of their ids (`ids`, in the order the scan met them).
#[cfg(feature = "mongodb")]
pub(crate) fn leave_duplicates(
    report: &mut AdoptReport,
    key: ShownKey,
    holders: usize,
    ids: impl IntoIterator<Item = String>,
) {
    let ids = ids.into_iter().take(SAMPLES_PER_KIND).collect();
    report.duplicates.record(key, holders as u64, ids);
}

/// Whether a run that could not create the unique natural-key index before its moves
/// (`indexed_first` false: duplicates blocked it) creates it after them: when no key is left
/// duplicated. Idem writers cannot write while duplicates block the index, so moves are safe
/// without it.
#[cfg(feature = "mongodb")]
pub(crate) fn index_after_moves(indexed_first: bool, report: &AdoptReport) -> bool {
    !indexed_first && report.duplicates.keys == 0
}

#[cfg(all(test, feature = "mongodb"))]
mod tests {
    use super::*;

    #[test]
    fn a_lone_document_is_kept_and_a_choice_out_of_range_keeps_none() {
        assert_eq!(
            kept_of_group(1, || unreachable!("not asked for one")),
            Some(0)
        );
        assert_eq!(kept_of_group(3, || Some(2)), Some(2));
        assert_eq!(kept_of_group(3, || Some(3)), None);
        assert_eq!(kept_of_group(2, || None), None);
        assert_eq!(kept_of_group(0, || Some(0)), None);
    }

    #[test]
    fn documents_settled_and_planned_count_against_the_limit_and_writes_stop_before_the_next() {
        let mut report = AdoptReport::new("c");
        report.moved.record_misplaced("a".into(), "b".into());
        report.archived.record("c".into(), None);
        report.failed.record("d".into(), None);
        let limits = RunLimits::new(Some(3), None);
        assert_eq!(limits.documents_left(&report, 0), Some(1));
        assert_eq!(limits.documents_left(&report, 1), Some(0));
        assert_eq!(RunLimits::new(None, None).documents_left(&report, 9), None);
        let mut writes = RunLimits::new(None, Some(2));
        assert!(writes.write().is_ok() && writes.write().is_ok());
        assert!(matches!(writes.write(), Err(Halt::Limit)));
    }
}
