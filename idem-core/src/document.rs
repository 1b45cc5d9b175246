//! Which document a call or an error is about: its collection, its natural key, its id.

use std::fmt;

use crate::id::{Id, KeyValue};
use crate::model::Model;

/// The key values of one document, by field name, in declaration order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NaturalKey(Vec<(&'static str, KeyValue)>);

impl NaturalKey {
    /// A natural key from `(field, value)` pairs in declaration order.
    pub fn new(parts: Vec<(&'static str, KeyValue)>) -> Self {
        NaturalKey(parts)
    }

    /// The `(field, value)` pairs.
    pub fn parts(&self) -> &[(&'static str, KeyValue)] {
        &self.0
    }

    /// Whether a stored document of `model` (whose stored fields are `columns`) may hold this
    /// key, as every store's `find` asks before it reads: `false` where a value is beyond what
    /// its field holds (an integer wider than `i64` for an `i64` field), so that no document
    /// does; refused with [`KeyMismatch`](crate::ErrorKind::KeyMismatch) where the key does not
    /// name exactly the model's key fields, in declaration order, each with a value of its
    /// field's kind (where one store would compare a text with a number, and another find
    /// nothing or fail).
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn fits(
        &self,
        model: &Model,
        columns: &[crate::column::Column],
        document: &DocumentRef,
    ) -> Result<bool, crate::error::Error> {
        use crate::column::{Column, ColumnShape};
        use crate::error::{Error, ErrorKind};
        use crate::model::Field;
        let fields: Vec<&Field> = model.natural_key_fields().collect();
        let refused = |problem: String| {
            let expected: Vec<&str> = fields.iter().map(|field| field.name()).collect();
            Error::new(
                document.clone(),
                ErrorKind::KeyMismatch {
                    problem: format!("{problem}; the key is ({})", expected.join(", ")),
                },
            )
        };
        let named: Vec<&str> = self.0.iter().map(|(name, _)| *name).collect();
        let expected = fields
            .iter()
            .map(|field| Some(field.name()))
            .eq(named.iter().map(|name| Some(*name)));
        if !expected {
            return Err(refused(format!("it names ({})", named.join(", "))));
        }
        let mut held = true;
        for (field, (name, value)) in fields.iter().zip(&self.0) {
            let shape = columns
                .iter()
                .find(|column| column.stored_name() == field.stored_name())
                .map(Column::shape);
            let fits = match (shape, value) {
                (Some(ColumnShape::Text), KeyValue::Text(_))
                | (Some(ColumnShape::Boolean), KeyValue::Bool(_)) => true,
                (Some(ColumnShape::Integer), KeyValue::Integer(number)) => {
                    held &= i64::try_from(*number).is_ok();
                    true
                }
                (Some(ColumnShape::Integer), KeyValue::LargeUnsigned(_)) => {
                    held = false;
                    true
                }
                (Some(ColumnShape::Text | ColumnShape::Integer | ColumnShape::Boolean), _) => false,
                // A key of another type (an enum, an integer wider than `i64`): its column's
                // kind says nothing of the value's.
                _ => true,
            };
            if !fits {
                let kind = match shape {
                    Some(ColumnShape::Text) => "text",
                    Some(ColumnShape::Integer) => "an integer",
                    _ => "a boolean",
                };
                return Err(refused(format!("`{name}` holds {kind}, not {value}")));
            }
        }
        Ok(held)
    }
}

impl fmt::Display for NaturalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        show_key(f, self.0.iter().map(|(field, value)| (field, value)))
    }
}

/// A natural key as messages and reports show it: `{slug: "hello", lang: "en"}`.
pub(crate) fn show_key<F: fmt::Display, V: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    parts: impl IntoIterator<Item = (F, V)>,
) -> fmt::Result {
    f.write_str("{")?;
    for (index, (field, value)) in parts.into_iter().enumerate() {
        let separator = if index == 0 { "" } else { ", " };
        write!(f, "{separator}{field}: {value}")?;
    }
    f.write_str("}")
}

/// Which document an error is about: its collection and natural key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DocumentRef {
    /// The collection.
    pub collection: &'static str,
    /// The natural key; empty for errors about a whole collection or a document known by id.
    pub natural_key: NaturalKey,
    /// The id: the one the call named the document by, or the one it derives where it was
    /// derived before the error; `None` where deriving it failed (a timestamp out of range, an
    /// ambiguous key), for an event, and for errors about a whole collection.
    pub id: Option<Id>,
}

impl DocumentRef {
    /// The document of `model` with this natural key.
    pub fn new(model: &Model, natural_key: NaturalKey) -> Self {
        DocumentRef {
            collection: model.collection(),
            natural_key,
            id: None,
        }
    }

    /// The document of `model` stored under `id`.
    pub fn by_id(model: &Model, id: Id) -> Self {
        DocumentRef {
            id: Some(id),
            ..DocumentRef::collection(model)
        }
    }

    /// The collection of `model` as a whole.
    pub fn collection(model: &Model) -> Self {
        DocumentRef::new(model, NaturalKey::new(Vec::new()))
    }

    /// The same document of `model`, known by the id it derives, `id`, as well. An event's id
    /// (a type with an idempotency key and no key) is assigned by its first write, not derived,
    /// so an event stays named by its idempotency key alone.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
    pub(crate) fn with_derived_id(mut self, model: &Model, id: Id) -> Self {
        if model.key_fields().next().is_some() {
            self.id = Some(id);
        }
        self
    }
}

impl fmt::Display for DocumentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.id, self.natural_key.0.is_empty()) {
            (Some(id), true) => write!(f, "`{}` document {id}", self.collection),
            (None, true) => write!(f, "collection `{}`", self.collection),
            (_, false) => write!(f, "`{}` {}", self.collection, self.natural_key),
        }
    }
}
