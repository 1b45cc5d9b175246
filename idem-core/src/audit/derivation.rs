//! The id a stored document derives, read from its stored values without the type.

use serde_json::Value;

use crate::error::ErrorKind;
use crate::id::{derive_id, Id, IdKey, IdTimestamp, KeyPart};
use crate::model::{Field, Model};

/// A key value read from a stored document.
struct StoredKeyValue<'a>(KeyPart<'a>);

impl IdKey for StoredKeyValue<'_> {
    fn key_part(&self) -> KeyPart<'_> {
        self.0
    }
}

/// The id derived from a stored document's key values (`key`, in declaration order; null for
/// one missing) and timestamp, in the neutral form, for a document that does not read as its
/// type: keys as text, integers or booleans, the timestamp as integer milliseconds (a driver
/// gives a stored date as its milliseconds). Other stored types (a chrono timestamp stored as
/// text, a `SystemTime` stored as a struct) need the typed audit. Every backend's audit derives
/// ids of untyped documents here.
pub(crate) fn derive_from_stored(
    model: &Model,
    key: &[Value],
    timestamp: Option<&Value>,
) -> Result<Id, String> {
    let parts = model
        .natural_key_fields()
        .zip(key)
        .map(|(field, value)| match value {
            Value::String(text) => Ok(StoredKeyValue(KeyPart::Text(text))),
            Value::Bool(flag) => Ok(StoredKeyValue(KeyPart::Bool(*flag))),
            Value::Number(number) => number
                .as_i64()
                .map(i128::from)
                .or_else(|| number.as_u64().map(i128::from))
                .map(|integer| StoredKeyValue(KeyPart::Integer(integer)))
                .ok_or_else(|| unusable(field, value, "a key is an integer")),
            _ => Err(unusable(
                field,
                value,
                "a key is text, an integer or a boolean",
            )),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let keys: Vec<&dyn IdKey> = parts.iter().map(|part| part as &dyn IdKey).collect();
    let millis = match (model.timestamp_field(), timestamp) {
        (Some(field), Some(value)) => Some(value.as_i64().ok_or_else(|| {
            let expected = match value {
                // A SQL table's date and time columns are read as text.
                Value::String(_) => {
                    "a timestamp is integer milliseconds or a date, and a date written as text \
                     (as a SQL date or time column is read) is not read as one yet"
                }
                _ => "a timestamp is integer milliseconds or a date",
            };
            unusable(field, value, expected)
        })?),
        (Some(field), None) => return Err(unusable(field, &Value::Null, "")),
        (None, _) => None,
    };
    let timestamp = millis.as_ref().map(|millis| millis as &dyn IdTimestamp);
    derive_id(model, &keys, timestamp).map_err(|error| match error.kind() {
        ErrorKind::EmptyKey { field, .. } => format!("key field `{field}` is empty"),
        ErrorKind::AmbiguousKey { field, value, .. } => format!(
            "key field `{field}` = {value:?} contains ':', which the joined scheme cannot tell \
             from its separator"
        ),
        ErrorKind::TimestampOutOfRange { field, problem, .. } => {
            format!("timestamp field `{field}`: {problem}")
        }
        _ => error.to_string(),
    })
}

/// Why a stored value cannot feed the id.
fn unusable(field: &Field, value: &Value, expected: &str) -> String {
    match value {
        Value::Null => format!("`{}` is missing", field.stored_name()),
        value => format!("`{}` holds {value}, but {expected}", field.stored_name()),
    }
}
