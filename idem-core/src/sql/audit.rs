//! The pass of an audit over a SQL table's rows, each read as JSON, the same for every SQL
//! store: each row's problems counted, natural keys held twice found (the rows come in key
//! order), and, for a model given at run time, the check that it is the rows' model.

use serde_json::{Map, Value};

use super::judge::{judge, Reading};
use super::layout::Content;
use super::layout::Layout;
use crate::audit::{
    AuditReport, DuplicateTracker, HashDiagnosis, ScannedKey, ShownKey, ShownValue, UnknownField,
    UnknownReason,
};
use crate::column::{Column, ColumnShape};
use crate::id::Id;
use crate::model::{Model, ID_FIELD};
use crate::model_check::ModelCheck;

/// One pass over a table's rows, in natural-key order.
pub(crate) struct RowScan<'a> {
    layout: &'a Layout,
    reading: Reading<'a>,
    duplicates: DuplicateTracker<RowKey>,
    /// A model given at run time may not be the rows' (a flag forgotten or wrong).
    model_check: Option<ModelCheck<'a>>,
    /// For a model given at run time: which column, left out, makes stored hashes match.
    diagnosis: Option<HashDiagnosis>,
}

impl<'a> RowScan<'a> {
    pub fn new(layout: &'a Layout, reading: Reading<'a>) -> Self {
        RowScan {
            layout,
            reading,
            duplicates: DuplicateTracker::new(),
            model_check: (!reading.is_typed()).then(|| ModelCheck::new(layout.model)),
            diagnosis: (!reading.is_typed()).then(HashDiagnosis::default),
        }
    }

    /// The field order of a model given at run time (empty for a typed reading, or none given).
    fn field_order(&self) -> &'a [&'a str] {
        match self.reading {
            Reading::Stored { field_order } => field_order,
            Reading::Typed { .. } => &[],
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
        let diagnosed = self
            .diagnosis
            .as_ref()
            .filter(|diagnosis| diagnosis.wants())
            .map(|_| stored.clone());
        let mismatches = report.hash_mismatch.count;
        let audited = audit_row(report, self.layout, self.reading, stored, location);
        let field_order = self.field_order();
        if let (Some(stored), Some(diagnosis)) = (diagnosed, &mut self.diagnosis) {
            if report.hash_mismatch.count > mismatches {
                diagnose(diagnosis, self.layout, field_order, &stored);
            }
        }
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
        let field_order = self.field_order();
        self.duplicates.finish(report);
        report.model_mismatch = self.model_check.and_then(|check| check.finding());
        if let Some(diagnosis) = &self.diagnosis {
            for field in diagnosis.finding() {
                crate::audit::note_unknown(&mut report.unknown_fields, field);
            }
            if field_order.is_empty() {
                report.unnamed_fields = crate::audit::unnamed_fields(
                    self.layout.model,
                    stored_columns(self.layout).map(|(name, _)| name),
                );
            }
        }
    }
}

/// The stored-field columns of `layout`, in table order, with their shapes.
fn stored_columns(layout: &Layout) -> impl Iterator<Item = (&'static str, ColumnShape)> + '_ {
    layout
        .columns
        .iter()
        .filter(|column| matches!(column.content, Content::Stored(_)))
        .map(|column| (column.name, column.shape))
}

/// Examines a row whose stored hash differs from its stored values' ([`HashDiagnosis`]).
pub(crate) fn diagnose(
    diagnosis: &mut HashDiagnosis,
    layout: &Layout,
    field_order: &[&str],
    stored: &Map<String, Value>,
) {
    let Some(stored_hash) = stored
        .get(layout.model.hash_field())
        .and_then(Value::as_str)
    else {
        return;
    };
    let fields: Vec<(&str, &Value)> = stored_columns(layout)
        .filter_map(|(name, _)| Some((name, stored.get(name)?)))
        .collect();
    diagnosis.examine(layout.model, field_order, &fields, stored_hash, |value| {
        value.is_null()
    });
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

/// The columns of a table read with a model given at run time that are not fields of the
/// model: the table's own key (`table_keys`: a primary key other than `_id`, an identity or
/// serial column), and, where the model lists its fields (`field_order`), each column it does
/// not list. idem's own columns are none.
pub(crate) fn catalog_unknowns<'n>(
    model: &Model,
    field_order: &[&str],
    columns: impl IntoIterator<Item = &'n str>,
    table_keys: &[String],
) -> Vec<UnknownField> {
    columns
        .into_iter()
        .filter(|name| {
            !model.is_reserved(name)
                && !model
                    .fields()
                    .iter()
                    .any(|field| field.stored_name() == *name)
        })
        .filter_map(|name| {
            if table_keys.iter().any(|key| key == name) {
                Some(UnknownField::new(name, UnknownReason::TableKey))
            } else if !crate::audit::is_model_field(model, field_order, name) {
                Some(UnknownField::new(name, UnknownReason::NotListed))
            } else {
                None
            }
        })
        .collect()
}

/// The columns of a table read as a type that the type does not have (`present`: every column
/// of the table). None where the type has a flattened field, whose entries have no column.
pub(crate) fn typed_unknowns<'n>(
    layout: &Layout,
    present: impl IntoIterator<Item = &'n str>,
) -> Vec<UnknownField> {
    if layout.column_with(Content::Extra).is_some() {
        return Vec::new();
    }
    present
        .into_iter()
        .filter(|name| {
            !layout.model.is_reserved(name)
                && !layout.columns.iter().any(|column| column.name == *name)
        })
        .map(|name| UnknownField::new(name, UnknownReason::NotListed))
        .collect()
}

/// The stored fields of `layout` but those `left_out`: what a layout read without them is made
/// of.
pub(crate) fn columns_without(layout: &Layout, left_out: &[UnknownField]) -> Vec<Column> {
    stored_columns(layout)
        .filter(|(name, _)| !left_out.iter().any(|field| field.name == *name))
        .map(|(name, shape)| Column::new(name, shape))
        .collect()
}
