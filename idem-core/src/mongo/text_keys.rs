//! Maps keyed by something other than text (`BTreeMap<u32, _>`, `HashMap<i64, _>`, a map keyed
//! by `bool` or by a unit enum) in BSON, whose names are text: BSON's serializer refuses any other
//! key, and its deserializer hands a stored name to the key's type as text, which a number
//! refuses. So every write and read of a document, every pushed item and every value an
//! operation sets go through [`crate::map_key::text_keys`], which writes each key as text and
//! reads it back from it, as the SQL stores store them.

use mongodb::bson::{self, Bson, Document};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::map_key::text_keys::{Reader, TextKeys};
use crate::model::Model;
use crate::read::read_as;

/// `value` as a BSON document, every map key in it written as text.
pub(crate) fn to_document<T: Serialize + ?Sized>(value: &T) -> Result<Document, bson::ser::Error> {
    bson::to_document(&TextKeys(value))
}

/// `value` as BSON, every map key in it written as text: a pushed item, a value set by an
/// operation.
pub(crate) fn to_bson<T: Serialize + ?Sized>(value: &T) -> Result<Bson, bson::ser::Error> {
    bson::to_bson(&TextKeys(value))
}

/// `T` read from a stored document, every map key in it read from its text;
/// [`read_as`]'s message where it does not read as `T`.
pub(crate) fn from_document<T: DeserializeOwned>(document: Document) -> Result<T, String> {
    read_as(Reader(bson::Deserializer::new(Bson::Document(document))))
}

/// `T` read from a stored document of `model` ([`from_document`]) without the fields idem
/// writes itself ([`Model::is_reserved`]), so that a type with `#[serde(deny_unknown_fields)]`
/// reads its own documents: a typed read's, and a typed audit's.
pub(crate) fn from_stored<T: DeserializeOwned>(
    model: &Model,
    stored: Document,
) -> Result<T, String> {
    let own = stored
        .into_iter()
        .filter(|(name, _)| !model.is_reserved(name));
    from_document(own.collect())
}
