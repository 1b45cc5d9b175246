//! The two reports, as a person reads them (`Display`: each problem with its samples and what
//! to do about it) and as a program does (`Serialize`): what an audit found, and what an
//! adoption did.

use std::fmt;

use serde::Serialize;

use super::finding::{Duplicates, Finding, UnknownField, UnknownReason, SAMPLES_PER_KIND};

/// What an audit found in one collection (or table). Each document is counted under every
/// problem it has, so the counts may add up to more than the documents scanned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AuditReport {
    /// The collection or table audited.
    pub collection: String,
    /// Documents read.
    pub scanned: u64,
    /// Documents with no problem at all.
    pub clean: u64,
    /// Natural keys held by more than one document.
    pub duplicates: Duplicates,
    /// Documents whose `_id` is not an idem id at all (an ObjectId, a number, other text): written
    /// by another tool. `adopt` moves them to their derived ids.
    pub legacy_ids: Finding,
    /// Documents under an idem id that is not the one derived from their content: a field
    /// feeding the id (a key, the timestamp) was changed by other code, orphaning them.
    pub orphans: Finding,
    /// Documents from which no id can be derived: a key or the timestamp is missing, empty, of a
    /// type that is no key or time, or out of range.
    pub underivable: Finding,
    /// Documents without a content hash (written by another tool).
    pub missing_hash: Finding,
    /// Documents whose stored content hash is not the hash of their stored content: changed by
    /// another tool after idem wrote them.
    pub hash_mismatch: Finding,
    /// Documents whose stored content hash an audit without the type cannot check: it differs
    /// from the hash of their stored values, but they hold nested objects, which the type may
    /// have hashed as structs in an order the store does not keep (PostgreSQL's `jsonb` keeps
    /// none). Not a problem: the audit with the type (`Store::audit::<T>`) checks them. Always
    /// empty for a typed audit.
    pub hash_unchecked: Finding,
    /// Documents whose stored guard digests (`idemFrozen`) are not their stored values': a
    /// frozen field's or the timestamp's value, or the digest, changed after idem wrote them.
    /// Each sample's detail names the field, and says where it has no digest beside a written
    /// value. A re-ingest of the same content leaves such a document `Unchanged`; the next write
    /// that changes it is refused for that field, or, where it has no digest, may set it.
    pub digest_mismatch: Finding,
    /// Documents that do not deserialize into the type: only checked by a typed audit (`None`
    /// when the model was given at run time).
    pub undeserializable: Option<Finding>,
    /// Documents an interrupted `adopt` left half moved: running `adopt` again finishes them.
    pub moves_in_progress: Finding,
    /// Stored fields (columns) that are not fields of the model audited with, each with how the
    /// audit knows. Their values are left out of the content hashes the audit computes (the
    /// type never hashes them), and, for a model given at run time, `adopt` refuses to run while
    /// there are any, unless told to leave them out (`AdoptOptions::allow_unknown_fields`,
    /// `--allow-unknown-fields`): a wrong model would store hashes the type does not compute.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_fields: Vec<UnknownField>,
    /// For a model given at run time without its list of fields (no `field_order`, no
    /// `--fields`): the stored fields the content hashes cover that the model does not name.
    /// The audit takes each for a hashed field of the type, in stored order; a hash that
    /// differs may then be the model's mistake rather than a change by another tool, and the
    /// summary says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unnamed_fields: Vec<String>,
    /// What a PostgreSQL table lacks for idem's writes, as the check before the first write
    /// names it: the table itself, a column missing or of another type, the unique constraint
    /// on the natural key. Always empty for a MongoDB collection, whose index idem builds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub table_problems: Vec<String>,
    /// For a model given at run time: the stored documents were written with another model
    /// (see [`crate::model_check`]), so the orphans and legacy ids counted here are the flags'
    /// mistake, and `adopt` refuses to move them.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_mismatch: Option<crate::model_check::ModelMismatch>,
}

impl AuditReport {
    /// An empty report for `collection`; `typed` says whether documents are checked against a
    /// type.
    pub fn new(collection: impl Into<String>, typed: bool) -> Self {
        AuditReport {
            collection: collection.into(),
            undeserializable: typed.then(Finding::default),
            ..AuditReport::default()
        }
    }

    /// Whether the audit found nothing to fix: idem can take the collection over as it is.
    pub fn is_clean(&self) -> bool {
        self.clean == self.scanned && self.table_problems.is_empty() && !self.has_model_mismatch()
    }

    /// Whether the documents were written with another model than the one audited with.
    pub fn has_model_mismatch(&self) -> bool {
        #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
        return self.model_mismatch.is_some();
        #[cfg(not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")))]
        return false;
    }

    /// Whether the documents were checked against a type (a typed audit), not a model given at
    /// run time.
    fn is_typed(&self) -> bool {
        self.undeserializable.is_some()
    }

    /// The stored fields the stored hashes show the type does not hash.
    fn unhashed_by_the_type(&self) -> Vec<&str> {
        self.unknown_fields
            .iter()
            .filter(|field| field.reason == UnknownReason::NotInStoredHashes)
            .map(|field| field.name.as_str())
            .collect()
    }

    /// What to do about hashes that differ: blamed on another tool only where nothing about the
    /// model given at run time may explain them.
    fn hash_mismatch_advice(&self) -> String {
        let unhashed = self.unhashed_by_the_type();
        if !unhashed.is_empty() {
            return format!(
                "likely the model, not the data: the stored hashes match the content without \
                 {}. If the type has such a field but does not hash it, name it with \
                 `--volatile`, `--effect`, `--tombstone` or `--push-by`; if it is no field of \
                 the type, list the type's fields with `--fields`; or give the type's model \
                 with `--model FILE` (written by `idem_core::model_file::write`)",
                backticked(&unhashed)
            );
        }
        if !self.is_typed() && !self.unnamed_fields.is_empty() {
            let unnamed: Vec<&str> = self.unnamed_fields.iter().map(String::as_str).collect();
            return format!(
                "either the model given is not the type's, or another tool changed them after \
                 idem wrote them. The hashes computed here cover {} (fields no flag names), in \
                 stored order: if the type leaves one out, name it with `--volatile`, \
                 `--effect`, `--tombstone` or `--push-by`; list the type's fields in its order \
                 with `--fields`, or give its model with `--model FILE`. If the model is right, \
                 the next upsert of each writes it again",
                backticked(&unnamed)
            );
        }
        "another tool changed them after idem wrote them: the next upsert of each writes it \
         again"
            .to_owned()
    }

    /// What to do about stored fields the model does not have.
    fn unknown_fields_advice(&self) -> &'static str {
        if self.is_typed() {
            "nothing if they are no fields of the type: idem neither reads nor hashes them (on \
             MongoDB an upsert replaces the whole document, which drops them). If the type \
             should have them, add them to it"
        } else {
            "they are left out of the content hashes computed here. If one is a field of the \
             type, list it with `--fields` (every field, in the type's order) or give the type's \
             model with `--model FILE`; if the type has it but does not hash it, name it with \
             `--volatile`, `--effect`, `--tombstone` or `--push-by`. `adopt` refuses to store \
             hashes while they exist, unless `--allow-unknown-fields` says they are not the \
             type's"
        }
    }

    /// The kinds of problems found per document, with how each is named in the summary and
    /// what to do about it.
    fn findings(&self) -> Vec<(&'static str, String, &Finding)> {
        let mut findings =
            vec![
            (
                "legacy ids (not idem ids)",
                "`idem adopt --yes` (or `Store::adopt`) moves them to their derived ids".into(),
                &self.legacy_ids,
            ),
            (
                "orphans (an idem id, but not the one derived from the content)",
                "a key or the timestamp was changed after idem wrote them; if that was meant, \
                 `idem adopt --yes` moves them to the id the content derives now".into(),
                &self.orphans,
            ),
            (
                "no id can be derived (a key or the timestamp is missing or unusable)",
                "fix or remove these documents: `adopt` leaves them, and idem's writes never \
                 touch them".into(),
                &self.underivable,
            ),
            (
                "without a content hash",
                "nothing to do: the next upsert of each writes its hash (`adopt` does too)".into(),
                &self.missing_hash,
            ),
            (
                "stored content hash differs from the content",
                self.hash_mismatch_advice(),
                &self.hash_mismatch,
            ),
            (
                "a stored guard digest differs from its value (a frozen field or the timestamp)",
                "another tool changed the value or `idemFrozen` after idem wrote them (or the \
                 field became frozen since): the next write that changes each is refused for \
                 that field, or, where it has no digest, may set it. If the stored value is the \
                 right one, clear `idemFrozen` on them (NULL; `$unset` on MongoDB): idem then \
                 compares the value itself and writes its digest again with the next change".into(),
                &self.digest_mismatch,
            ),
        ];
        if let Some(undeserializable) = &self.undeserializable {
            findings.push((
                "do not deserialize into the type",
                "fix these documents or the type: idem reads them as the type".into(),
                undeserializable,
            ));
        }
        findings.push((
            "half moved by an interrupted `adopt`",
            "run `adopt` again: it finishes them first".into(),
            &self.moves_in_progress,
        ));
        findings
    }
}

/// Names in backticks, joined by commas.
fn backticked(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    quoted.join(", ")
}

/// `n` and `noun`, singular for one: `1 key`, `2 keys`.
fn counted(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// The duplicated natural keys as a summary shows them, with `heading` and what to do.
fn show_duplicates(
    f: &mut fmt::Formatter<'_>,
    duplicates: &Duplicates,
    heading: &str,
    advice: &str,
) -> fmt::Result {
    writeln!(
        f,
        "  {heading}: {} held by {}",
        counted(duplicates.keys, "key"),
        counted(duplicates.documents, "document")
    )?;
    for duplicate in &duplicates.samples {
        writeln!(
            f,
            "    {} in {}: {}",
            duplicate.key,
            counted(duplicate.documents, "document"),
            duplicate.sample_ids.join(", ")
        )?;
    }
    let more = duplicates.keys - duplicates.samples.len() as u64;
    if more > 0 {
        writeln!(
            f,
            "    … and {} more (a report keeps the first {SAMPLES_PER_KIND})",
            counted(more, "key")
        )?;
    }
    writeln!(f, "    to do: {advice}")
}

/// What to do about duplicated natural keys.
const DUPLICATES_ADVICE: &str = "keep one document per key: merge or remove the others by \
     hand, or on MongoDB let adopt keep one by a field's value (`idem adopt --keep-duplicate \
     greatest:updatedAt`, or a `DuplicateRule`), which archives the others";

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "`{}`: {} documents scanned, {} clean",
            self.collection, self.scanned, self.clean
        )?;
        #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
        if let Some(mismatch) = &self.model_mismatch {
            writeln!(f, "  WRONG MODEL: {mismatch}")?;
        }
        if !self.table_problems.is_empty() {
            writeln!(f, "  the table lacks what idem's writes need:")?;
            for problem in &self.table_problems {
                writeln!(f, "    {problem}")?;
            }
        }
        if !self.unknown_fields.is_empty() {
            writeln!(f, "  stored fields the model does not have:")?;
            for field in &self.unknown_fields {
                writeln!(f, "    {field}")?;
            }
            writeln!(f, "    to do: {}", self.unknown_fields_advice())?;
        }
        if self.duplicates.keys > 0 {
            show_duplicates(
                f,
                &self.duplicates,
                "natural-key duplicates (they block the unique natural-key index, and idem's \
                 writes with it)",
                DUPLICATES_ADVICE,
            )?;
        }
        for (name, advice, finding) in self.findings() {
            if !finding.is_empty() {
                finding.show(f, name, &advice)?;
            }
        }
        if !self.hash_unchecked.is_empty() {
            self.hash_unchecked.show(
                f,
                "content hash not checked (nested objects, whose order only the type knows)",
                "nothing, or audit with the type (`Store::audit::<T>`), which checks them",
            )?;
        }
        if self.is_clean() {
            writeln!(f, "  no problems found")?;
        }
        Ok(())
    }
}

/// What an adoption did: the documents it moved to their derived ids, and those it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AdoptReport {
    /// The collection or table adopted.
    pub collection: String,
    /// Documents moved to their derived ids (each sample's detail names the derived id).
    pub moved: Finding,
    /// Documents an interrupted adoption had half moved, finished now.
    pub finished: Finding,
    /// Natural keys held by more than one document, left where they are: no rule was given to
    /// choose between them.
    pub duplicates: Duplicates,
    /// Documents a duplicate rule set aside, moved whole to the archive collection.
    pub archived: Finding,
    /// Documents that could not be moved, each with the reason; nothing was lost.
    pub failed: Finding,
    /// Whether the adoption stopped at its limit (documents or writes) before the end: running
    /// it again goes on.
    pub stopped: bool,
    /// Why the unique natural-key index, which duplicates blocked before the moves, could not be
    /// built after them (MongoDB): documents that still share a key, which the run did not find
    /// together (keys equal to the index but not to a filter, such as `1` and
    /// `NumberDecimal("1")`) or another tool wrote meanwhile. idem's writes are refused until it
    /// is built.
    pub index_blocked: Option<String>,
}

impl AdoptReport {
    /// An empty report for `collection`.
    pub fn new(collection: impl Into<String>) -> Self {
        AdoptReport {
            collection: collection.into(),
            ..AdoptReport::default()
        }
    }

    /// Whether every document is under its derived id now: nothing failed, no duplicate was
    /// left, and the adoption was not stopped early.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
            && self.duplicates.keys == 0
            && !self.stopped
            && self.index_blocked.is_none()
    }
}

impl fmt::Display for AdoptReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "`{}`:", self.collection)?;
        let findings = [
            ("moved", "", &self.moved),
            ("half moved before, finished now", "", &self.finished),
            (
                "duplicates set aside to the archive",
                "nothing is lost: each is whole in the archive collection, under its own id",
                &self.archived,
            ),
            (
                "could not be moved",
                "each says why; fix those documents and run `adopt` again",
                &self.failed,
            ),
        ];
        for (name, advice, finding) in findings {
            if !finding.is_empty() {
                finding.show(f, name, advice)?;
            }
        }
        if self.duplicates.keys > 0 {
            show_duplicates(
                f,
                &self.duplicates,
                "natural-key duplicates left in place",
                DUPLICATES_ADVICE,
            )?;
        }
        if self.stopped {
            writeln!(f, "  stopped at the limit: run it again to go on")?;
        }
        if let Some(why) = &self.index_blocked {
            writeln!(
                f,
                "  the natural-key index could not be built after the moves: {why}\n    to do: \
                 `idem audit` lists the documents sharing a key; keep one of each, then run \
                 `adopt` again"
            )?;
        }
        if self.moved.is_empty() && self.finished.is_empty() && self.is_complete() {
            writeln!(
                f,
                "  nothing to move: every document is under its derived id"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{ShownKey, ShownValue};

    #[test]
    fn a_report_reads_as_a_summary() {
        let mut report = AuditReport::new("posts", false);
        report.scanned = 3;
        report.clean = 1;
        let key = ShownKey(vec![
            ("slug".into(), ShownValue::Text("a".into())),
            ("lang".into(), ShownValue::Null),
        ]);
        report
            .duplicates
            .record(key, 2, vec!["x".into(), "y".into()]);
        report.missing_hash.record("x".into(), None);
        for n in 0..7 {
            report
                .legacy_ids
                .record_misplaced(format!("legacy-{n}"), format!("derived-{n}"));
        }
        let summary = report.to_string();
        assert!(summary.contains("{slug: \"a\", lang: null} in 2 documents: x, y"));
        assert!(
            summary.contains(": 1 key held by 2 documents\n"),
            "{summary}"
        );
        assert!(summary.contains("without a content hash: 1\n    x\n    to do: "));
        assert!(
            summary
                .contains("  legacy ids (not idem ids): 7\n    legacy-0 (derived id derived-0)\n"),
            "{summary}"
        );
        assert!(
            summary.contains(
                "    legacy-4 (derived id derived-4)\n    … and 2 more (a report \
                 keeps the first 5)\n    to do: `idem adopt --yes`"
            ),
            "{summary}"
        );
        // Every problem the summary lists says what to do about it.
        let problems = summary
            .lines()
            .filter(|line| line.starts_with("  "))
            .count()
            - summary
                .lines()
                .filter(|line| line.starts_with("    "))
                .count();
        assert_eq!(
            summary.matches("    to do: ").count(),
            problems,
            "{summary}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["legacy_ids"]["samples"][0],
            serde_json::json!({ "id": "legacy-0", "derived_id": "derived-0" })
        );
        assert!(!report.is_clean());
    }
}
