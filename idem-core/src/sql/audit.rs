//! The pass of an audit over a SQL table's rows, each read as JSON, the same for every SQL
//! store: each row's problems counted, natural keys held twice found (the rows come in key
//! order), and, for a model given at run time, the check that it is the rows' model.

use serde_json::{Map, Value};

use super::judge::{judge, Reading};
use super::layout::Layout;
use crate::audit::{AuditReport, DuplicateTracker, ScannedKey, ShownKey, ShownValue};
use crate::id::Id;
use crate::model::ID_FIELD;
use crate::model_check::ModelCheck;

/// One pass over a table's rows, in natural-key order.
pub(crate) struct RowScan<'a> {
    layout: &'a Layout,
    reading: Reading<'a>,
    duplicates: DuplicateTracker<RowKey>,
    /// A model given at run time may not be the rows' (a flag forgotten or wrong).
    model_check: Option<ModelCheck<'a>>,
}

impl<'a> RowScan<'a> {
    pub fn new(layout: &'a Layout, reading: Reading<'a>) -> Self {
        RowScan {
            layout,
            reading,
            duplicates: DuplicateTracker::new(),
            model_check: (!reading.is_typed()).then(|| ModelCheck::new(layout.model)),
        }
    }

    /// Counts one row, its columns as JSON; `location` says where a row without an `_id` is.
    pub fn row(&mut self, report: &mut AuditReport, stored: Map<String, Value>, location: &str) {
        report.scanned += 1;
        if let Some(check) = &mut self.model_check {
            if let Some(id) = stored.get(ID_FIELD).and_then(Value::as_str) {
                if check.wants(id) {
                    check.examine(id, &stored);
                }
            }
        }
        let audited = audit_row(report, self.layout, self.reading, stored, location);
        // A key with a NULL part collides with no other, as in a unique constraint.
        let key = (!audited.key.iter().any(Value::is_null)).then(|| {
            RowKey(
                self.layout
                    .model
                    .natural_key_fields()
                    .map(|field| field.stored_name())
                    .zip(audited.key)
                    .collect(),
            )
        });
        self.duplicates
            .count(report, key, &audited.id, audited.clean);
    }

    /// Ends the pass: the last key's duplicates, and the model check's finding.
    pub fn finish(self, report: &mut AuditReport) {
        self.duplicates.finish(report);
        report.model_mismatch = self.model_check.and_then(|check| check.finding());
    }
}

/// One row as the audit saw it.
struct AuditedRow {
    /// The stored `_id` as text, or where the row is if it has none.
    id: String,
    /// The natural-key values, in declaration order; NULL for a missing column.
    key: Vec<Value>,
    /// Whether the row has no problem of its own.
    clean: bool,
}

/// Counts the problems of one row: its id, its content hash, whether it reads as the type.
fn audit_row(
    report: &mut AuditReport,
    table: &Layout,
    reading: Reading<'_>,
    stored: Map<String, Value>,
    location: &str,
) -> AuditedRow {
    let model = table.model;
    let stored_id = stored
        .get(ID_FIELD)
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = shown_row_id(stored.get(ID_FIELD), location);
    let key: Vec<Value> = model
        .natural_key_fields()
        .map(|field| {
            stored
                .get(field.stored_name())
                .cloned()
                .unwrap_or(Value::Null)
        })
        .collect();
    let judged = judge(table, reading, stored);
    let mut clean = true;
    match judged.derived {
        // An event's id is random, assigned by its first write: there is none to derive.
        None => {}
        Some(Err(why)) => {
            report.underivable.record(id.clone(), Some(why));
            clean = false;
        }
        Some(Ok(derived)) => {
            let finding = match stored_id.as_deref() {
                Some(text) if text == derived.to_string() => None,
                Some(text) if text.parse::<Id>().is_ok() => Some(&mut report.orphans),
                _ => Some(&mut report.legacy_ids),
            };
            if let Some(finding) = finding {
                finding.record_misplaced(id.clone(), derived.to_string());
                clean = false;
            }
        }
    }
    clean &= judged.hash.record(report, &id);
    if let Some((field, how)) = judged.digest_mismatch {
        report
            .digest_mismatch
            .record(id.clone(), Some(how.detail(field)));
        clean = false;
    }
    if let (Some(why), Some(finding)) = (judged.undeserializable, &mut report.undeserializable) {
        finding.record(id.clone(), Some(why));
        clean = false;
    }
    AuditedRow { id, key, clean }
}

/// A row as a report shows it: its `_id`, or where it is if it has none (`ctid (0,1)`, `rowid
/// 7`: valid until the row is next written).
pub(crate) fn shown_row_id(id: Option<&Value>, location: &str) -> String {
    match id {
        None | Some(Value::Null) => format!("(no _id, at {location})"),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// A natural key as stored: each key column's stored name and value.
struct RowKey(Vec<(&'static str, Value)>);

impl ScannedKey for RowKey {
    fn collides_with(&self, other: &Self) -> bool {
        self.0 == other.0
    }

    fn shown(&self) -> ShownKey {
        ShownKey(
            self.0
                .iter()
                .map(|(name, value)| ((*name).to_owned(), shown_value(value.clone())))
                .collect(),
        )
    }
}

fn shown_value(value: Value) -> ShownValue {
    match value {
        Value::String(text) => ShownValue::Text(text),
        Value::Bool(flag) => ShownValue::Bool(flag),
        Value::Null => ShownValue::Null,
        Value::Number(number) => match number.as_i64() {
            Some(integer) => ShownValue::Integer(integer),
            None => ShownValue::Other(number.to_string()),
        },
        other => ShownValue::Other(other.to_string()),
    }
}
