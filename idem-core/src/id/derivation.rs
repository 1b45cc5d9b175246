//! An id from a document's keys and timestamp, under the model's scheme; the refusals of keys
//! and timestamps that cannot make one.

use std::fmt;

use sha2::{Digest, Sha256};

use super::{encode_key_v1, Id, IdKey, IdScheme, IdTimestamp, KeyPart, JOINED_SEPARATOR};
use crate::document::{DocumentRef, NaturalKey};
use crate::error::{Error, ErrorKind};
use crate::model::Model;

/// Derives an id from key values in declaration order and an optional timestamp.
///
/// This is what the generated `T::derive_id` calls. It allocates nothing unless it fails: the
/// key encoding streams into the hasher.
pub fn derive_id(
    model: &Model,
    keys: &[&dyn IdKey],
    timestamp: Option<&dyn IdTimestamp>,
) -> Result<Id, Error> {
    let hash_part = match model.id_scheme() {
        IdScheme::V1 => hash_part_v1(model, keys)?,
        IdScheme::Joined => hash_part_joined(model, keys)?,
    };
    debug_assert_eq!(
        timestamp.is_some(),
        model.timestamp_field().is_some(),
        "a timestamp is passed exactly when the model has a timestamp field"
    );
    let (timestamp_ms, field, stored_name) = match (timestamp, model.timestamp_field()) {
        (Some(timestamp), Some(field)) => {
            (timestamp.unix_millis(), field.name(), field.stored_name())
        }
        _ => (Ok(0), "", ""),
    };
    timestamp_ms
        .and_then(|millis| Id::from_parts(millis, hash_part))
        .map_err(|problem| {
            Error::new(
                DocumentRef::new(model, natural_key(model, keys)),
                ErrorKind::TimestampOutOfRange {
                    field,
                    stored_name,
                    value: timestamp.map(IdTimestamp::describe).unwrap_or_default(),
                    problem,
                },
            )
        })
}

/// The natural key of a document from its key values in declaration order.
pub fn natural_key(model: &Model, keys: &[&dyn IdKey]) -> NaturalKey {
    NaturalKey::new(
        model
            .natural_key_fields()
            .zip(keys)
            .map(|(field, key)| (field.name(), key.key_part().to_key_value()))
            .collect(),
    )
}

fn refuse_empty(model: &Model, keys: &[&dyn IdKey], index: usize) -> Error {
    let (field, stored_name) = key_names(model, index);
    Error::new(
        DocumentRef::new(model, natural_key(model, keys)),
        ErrorKind::EmptyKey { field, stored_name },
    )
}

/// The Rust and stored names of key field `index`.
fn key_names(model: &Model, index: usize) -> (&'static str, &'static str) {
    model
        .key_fields()
        .nth(index)
        .map_or(("", ""), |field| (field.name(), field.stored_name()))
}

fn first_ten(digest: &[u8]) -> [u8; 10] {
    let mut part = [0u8; 10];
    part.copy_from_slice(&digest[..10]);
    part
}

fn hash_part_v1(model: &Model, keys: &[&dyn IdKey]) -> Result<[u8; 10], Error> {
    let mut hasher = Sha256::new();
    for (index, key) in keys.iter().enumerate() {
        let part = key.key_part();
        if matches!(part, KeyPart::Text("")) {
            return Err(refuse_empty(model, keys, index));
        }
        encode_key_v1(part, |bytes| hasher.update(bytes));
    }
    Ok(first_ten(&hasher.finalize()))
}

fn hash_part_joined(model: &Model, keys: &[&dyn IdKey]) -> Result<[u8; 10], Error> {
    let mut hasher = Sha256::new();
    for (index, key) in keys.iter().enumerate() {
        if index > 0 {
            hasher.update([JOINED_SEPARATOR as u8]);
        }
        let mut digits = DigitBuffer::default();
        let mut utf8 = [0u8; 4];
        let text = match key.key_part() {
            KeyPart::Text(text) => text,
            KeyPart::Char(c) => c.encode_utf8(&mut utf8),
            KeyPart::Integer(value) => digits.format(value),
            KeyPart::LargeUnsigned(value) => digits.format(value),
            KeyPart::Bool(value) => {
                if value {
                    "true"
                } else {
                    "false"
                }
            }
        };
        if text.is_empty() {
            return Err(refuse_empty(model, keys, index));
        }
        if text.contains(JOINED_SEPARATOR) {
            let (field, stored_name) = key_names(model, index);
            return Err(Error::new(
                DocumentRef::new(model, natural_key(model, keys)),
                ErrorKind::AmbiguousKey {
                    field,
                    stored_name,
                    value: text.to_owned(),
                },
            ));
        }
        hasher.update(text.as_bytes());
    }
    Ok(first_ten(&hasher.finalize()))
}

/// Formats an integer on the stack, so the joined scheme allocates nothing either.
struct DigitBuffer {
    bytes: [u8; 40],
    len: usize,
}

impl Default for DigitBuffer {
    fn default() -> Self {
        DigitBuffer {
            bytes: [0; 40],
            len: 0,
        }
    }
}

impl DigitBuffer {
    fn format(&mut self, value: impl fmt::Display) -> &str {
        use fmt::Write;
        self.len = 0;
        // 40 bytes hold every i128 and u128 in decimal, so this write cannot fail.
        let _ = write!(self, "{value}");
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl fmt::Write for DigitBuffer {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let end = self.len + text.len();
        self.bytes
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}
