//! The pass of an audit over a SQL table's rows, each read as JSON, the same for every SQL
//! store: each row's problems counted, natural keys held twice found (the rows come in key
//! order), and, for a model given at run time, the check that it is the rows' model.

use serde_json::{Map, Value};

use super::judge::{judge, Reading};
use super::layout::Content;
use super::layout::Layout;
use crate::audit::{AuditPass, AuditReport, HashDiagnosis, StoredKey, UnknownField, UnknownReason};
use crate::column::{Column, ColumnShape};
use crate::model::{Model, ID_FIELD};

/// One pass over a table's rows, in natural-key order ([`AuditPass`]).
pub(crate) struct RowScan<'a> {
    layout: &'a Layout,
    reading: Reading<'a>,
    pass: AuditPass<'a, Value>,
}

impl<'a> RowScan<'a> {
    pub fn new(layout: &'a Layout, reading: Reading<'a>) -> Self {
        RowScan {
            layout,
            reading,
            pass: AuditPass::new(layout.model, reading.is_typed()),
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
        if let Some(id) = stored.get(ID_FIELD).and_then(Value::as_str) {
            self.pass.check_model(id, || &stored);
        }
        let shown = shown_row_id(stored.get(ID_FIELD), location);
        let key = StoredKey::of(self.layout.model, |name| {
            stored.get(name).cloned().unwrap_or(Value::Null)
        });
        // Kept for the diagnosis, before the typed reading takes the row.
        let diagnosed = self.pass.wants_diagnosis().then(|| stored.clone());
        let judged = judge(self.layout, self.reading, stored);
        let field_order = self.field_order();
        if let (Some(stored), Some(diagnosis)) = (diagnosed, self.pass.diagnosis_of(&judged)) {
            diagnose(diagnosis, self.layout, field_order, &stored);
        }
        // A key with a NULL part collides with no other, as in a unique constraint.
        let key = (!key.0.iter().any(|(_, value)| value.is_null())).then_some(key);
        self.pass.count(report, &judged, &shown, key);
    }

    /// Ends the pass: the last key's duplicates, and the model check's finding.
    pub fn finish(self, report: &mut AuditReport) {
        let stored_names = self
            .field_order()
            .is_empty()
            .then(|| stored_columns(self.layout).map(|(name, _)| name));
        self.pass.finish(report, stored_names);
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

/// A row as a report shows it: its `_id`, or where it is if it has none (`ctid (0,1)`, valid
/// until the row is next written; `natural key ["a"]`).
pub(crate) fn shown_row_id(id: Option<&Value>, location: &str) -> String {
    match id {
        None | Some(Value::Null) => format!("(no _id, at {location})"),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
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
