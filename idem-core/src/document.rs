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
    /// The id, when the call named the document by id.
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
