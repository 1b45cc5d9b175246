//! The values a judgement reads of a row, incoming or stored, from the texts both carry.

use serde_json::Value;

use super::{shape_of, stored_value, LightRow, StoredRow};
use crate::column::ColumnShape;
use crate::model::Field;
use crate::sql::layout::Layout;

/// What the engine asks of a row, incoming or stored, on a table of `layout`: every SQL
/// driver's answers, from the texts both carry.
pub(crate) struct RowReader<'a> {
    layout: &'a Layout,
}

impl<'a> RowReader<'a> {
    pub fn new(layout: &'a Layout) -> Self {
        RowReader { layout }
    }

    /// Where `field` is among the guarded fields, whose values stored rows carry.
    fn guarded_position(&self, field: &Field) -> Option<usize> {
        self.layout
            .model
            .digested_fields()
            .position(|guarded| guarded.stored_name() == field.stored_name())
    }

    /// Where `field` is among the natural-key fields.
    fn key_position(&self, field: &Field) -> Option<usize> {
        self.layout
            .model
            .natural_key_fields()
            .position(|key| key.stored_name() == field.stored_name())
    }

    /// The stored text of `field`, if the row read carries it.
    fn stored_text<'s>(&self, stored: &'s StoredRow, field: &Field) -> Option<&'s str> {
        if field.role() == crate::Role::Version {
            return stored.version_value.as_deref();
        }
        match self.guarded_position(field) {
            Some(at) => stored.guarded_values.get(at)?.as_deref(),
            None => stored
                .natural_key
                .as_ref()?
                .get(self.key_position(field)?)?
                .as_deref(),
        }
    }

    /// The incoming text of a natural-key field's column.
    fn incoming_key_text<'d>(&self, doc: &'d LightRow, field: &Field) -> Option<&'d str> {
        doc.key_texts.get(self.key_position(field)?)?.as_deref()
    }

    /// The incoming value of a guarded field, in the neutral form.
    pub fn incoming_value(&self, doc: &LightRow, field: &Field) -> Value {
        match self.guarded_position(field) {
            Some(at) => doc.guarded[at].0.clone(),
            None => self
                .incoming_key_text(doc, field)
                .map_or(Value::Null, |text| stored_value(self.layout, field, text)),
        }
    }

    /// The incoming value of `field`, as a refusal shows it.
    pub fn incoming_shown(&self, doc: &LightRow, field: &Field) -> String {
        match self.guarded_position(field) {
            Some(at) => {
                let (value, shown) = &doc.guarded[at];
                shown.clone().unwrap_or_else(|| value.to_string())
            }
            None => self.incoming_value(doc, field).to_string(),
        }
    }

    /// The stored value of `field` in the neutral form.
    pub fn stored_value(&self, stored: &StoredRow, field: &Field) -> Option<Value> {
        // A column holds a value or NULL: never "missing", but for a key the row read lacks.
        let carried = field.role() == crate::Role::Version
            || self.guarded_position(field).is_some()
            || stored.natural_key.is_some();
        match self.stored_text(stored, field) {
            Some(text) => Some(stored_value(self.layout, field, text)),
            None => carried.then_some(Value::Null),
        }
    }

    /// The stored value of `field`, as a refusal shows it.
    pub fn stored_shown(&self, stored: &StoredRow, field: &Field) -> Option<String> {
        let text = self.stored_text(stored, field)?;
        Some(match stored_value(self.layout, field, text) {
            // NaN or an infinity, shown as the database writes it, like the incoming one.
            Value::String(_) if shape_of(self.layout, field) == ColumnShape::Float => {
                text.to_owned()
            }
            value => value.to_string(),
        })
    }

    /// The first natural-key field whose stored text is not `doc`'s.
    pub fn key_differs(&self, doc: &LightRow, stored: &StoredRow) -> Option<&'static Field> {
        let keys = stored.natural_key.as_ref()?;
        self.layout
            .model
            .natural_key_fields()
            .zip(keys)
            .find(|(field, stored)| stored.as_deref() != self.incoming_key_text(doc, field))
            .map(|(field, _)| field)
    }
}
