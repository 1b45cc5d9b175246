//! The trait `#[derive(Idempotent)]` implements: a document's id, natural key, content hash and
//! op ids, from the type's [`Model`].

use crate::document::{DocumentRef, NaturalKey};
use crate::error::{Error, ErrorKind};
use crate::hash::ContentHash;
use crate::id::{Id, IdKey, KeyValue};
use crate::model::{Model, OpId};
use crate::version::VersionKey;

/// A type whose writes are idempotent by construction. Derive it with `#[derive(Idempotent)]`.
pub trait Idempotent {
    /// The type's collection, id scheme and field roles.
    const MODEL: Model;

    /// The document's deterministic id, from its key fields and timestamp.
    fn id(&self) -> Result<Id, Error>;

    /// The values of the key fields, in declaration order.
    fn natural_key(&self) -> NaturalKey;

    /// Calls `with` on the values of the key fields, in declaration order: what
    /// [`natural_key`](Idempotent::natural_key) holds, borrowed instead of copied. The derive
    /// borrows the fields themselves; this default builds the natural key first.
    fn with_key_values<R>(&self, with: impl FnOnce(&[&dyn IdKey]) -> R) -> R {
        let key = self.natural_key();
        let values: Vec<&dyn IdKey> = key.parts().iter().map(|(_, value)| value as _).collect();
        with(&values)
    }

    /// The content hash: the model's hash algorithm (SHA-256 unless `hash_algorithm` says
    /// otherwise) over the canonical encoding of every stored field except the hash field and
    /// those other routes own or that do not count as content: volatile, tombstone, pushed and
    /// effect fields.
    fn content_hash(&self) -> Result<ContentHash, Error>
    where
        Self: serde::Serialize,
    {
        crate::hash::content_hash(self, &Self::MODEL)
            .map_err(|message| Error::new(self.document_ref(), ErrorKind::Serialize { message }))
    }

    /// The collection and natural key, as errors name the document. A write's errors build the
    /// same name from [`with_key_values`](Idempotent::with_key_values) once the document is
    /// prepared, so an override of this method does not reach them.
    fn document_ref(&self) -> DocumentRef {
        DocumentRef::new(&Self::MODEL, self.natural_key())
    }

    /// A deterministic operation id for an effect of this document, for
    /// [`apply_once`](crate::mongo::Store::apply_once): the same document and purpose always give
    /// the same op id, so the effect applies once however often the document is written, and
    /// two different (document, purpose) pairs never give the same op id, so neither effect is
    /// skipped as already applied.
    ///
    /// A document's op id is `{id}:{purpose}`: the id's 26 characters, `:` and the purpose.
    ///
    /// An event type's id is assigned by its first write, so its op id comes from its
    /// collection and idempotency key instead: `{collection}:{key}:{purpose}`, where the
    /// collection and the key (its text; an integer in decimal, a boolean as `true` or
    /// `false`) are each written as they are if they are not empty and hold no `:`, and
    /// otherwise as `:`, their length in UTF-8 bytes in decimal, `:` and themselves. The key
    /// `r:bonus` with the purpose `credit` gives `payments::7:r:bonus:credit`, the key `r` with
    /// the purpose `bonus:credit` gives `payments:r:bonus:credit`. A collection of 26 Crockford
    /// base32 characters (in either case), which could be a document's id, is length-prefixed
    /// too, so an event's op id never reads as `{id}:{purpose}`. Keys and collections without
    /// `:` keep the op ids earlier versions gave them, so an event replayed after an upgrade is
    /// still recognised as applied. docs/SPEC.md (section 4) specifies the layout.
    fn op_id(&self, purpose: &str) -> Result<OpId, Error> {
        /// `text` as a part of an event's op id: as is, or length-prefixed where it could be
        /// misread (empty, holding the separator, or, for the collection, reading as an id).
        fn part(text: &str, could_read_as_id: bool) -> std::borrow::Cow<'_, str> {
            let reads_as_id = could_read_as_id
                && text.len() == 26
                && text.bytes().all(|byte| {
                    byte.is_ascii_alphanumeric()
                        && !matches!(byte.to_ascii_uppercase(), b'I' | b'L' | b'O' | b'U')
                });
            if text.is_empty() || text.contains(':') || reads_as_id {
                format!(":{}:{text}", text.len()).into()
            } else {
                text.into()
            }
        }
        if Self::MODEL.idempotency_key_field().is_some() {
            let key = idempotency_key(self)?;
            return Ok(OpId::new(format!(
                "{}:{}:{purpose}",
                part(Self::MODEL.collection(), true),
                part(&key, false)
            )));
        }
        Ok(OpId::new(format!("{}:{purpose}", self.id()?)))
    }

    /// The order key of the document's `#[idem(version)]` field, if it has one.
    fn version_key(&self) -> Option<VersionKey> {
        None
    }

    /// The order key of a stored value of the `#[idem(version)]` field, read back as its type:
    /// how a document stored without idem's order key is ordered. `None` for a type without
    /// versions, or a value that does not read as the field's type.
    #[doc(hidden)]
    fn stored_version_key(_value: &serde_json::Value) -> Option<VersionKey>
    where
        Self: Sized,
    {
        None
    }

    /// Every field serde writes, in declaration order, with the kind of value it holds: what a
    /// backend with typed columns makes its table of. The derive lists every field that is not
    /// `#[serde(skip)]`ped.
    fn stored_columns() -> Vec<crate::column::Column>
    where
        Self: Sized,
    {
        Vec::new()
    }
}

/// The idempotency key of an event, as text; an empty key is refused, since requests that lost
/// their key would all fold into the first one.
pub(crate) fn idempotency_key<T: Idempotent + ?Sized>(event: &T) -> Result<String, Error> {
    match event.natural_key().parts() {
        [(field, KeyValue::Text(text))] if text.is_empty() => Err(Error::new(
            event.document_ref(),
            ErrorKind::EmptyKey {
                field,
                stored_name: T::MODEL
                    .idempotency_key_field()
                    .map_or(field, |key| key.stored_name()),
            },
        )),
        [(_, KeyValue::Text(text))] => Ok(text.clone()),
        [(_, other)] => Ok(other.to_string()),
        _ => Err(Error::new(event.document_ref(), ErrorKind::NoDerivedId)),
    }
}
