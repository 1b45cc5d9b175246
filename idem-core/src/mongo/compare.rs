//! Comparing and showing stored values as a MongoDB filter would see them.

use mongodb::bson::Bson;

use crate::audit::{KeyValue, ShownValue};
use crate::engine::StoredScalar;

impl StoredScalar for Bson {
    fn is_null(&self) -> bool {
        matches!(self, Bson::Null)
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }
}

/// A natural key's value as the unique index compares it (as a filter does, [`bson_equal`])
/// and a report shows it (relaxed extended JSON).
impl KeyValue for Bson {
    fn same(&self, other: &Self) -> bool {
        bson_equal(self, other)
    }

    fn shown(&self) -> ShownValue {
        ShownValue::from_json(self.clone().into_relaxed_extjson())
    }
}

/// A value as error messages show it: relaxed extended JSON.
pub(crate) fn show(value: &Bson) -> String {
    value.clone().into_relaxed_extjson().to_string()
}

/// Numbers compare by value across int32, int64 and double, so a document written by another
/// tool with narrower integers is not a change. A server's reply and an index's key pattern
/// are read the same way.
pub(crate) fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(n) => Some(*n),
        _ => None,
    }
}

/// A whole number of a server's reply (a count, a statement's index) as a `usize`: an int32 or
/// an int64 that fits.
pub(crate) fn whole(value: &Bson) -> Option<usize> {
    match value {
        Bson::Int32(n) => usize::try_from(*n).ok(),
        Bson::Int64(n) => usize::try_from(*n).ok(),
        _ => None,
    }
}

/// Equality as a MongoDB filter sees it.
pub(crate) fn bson_equal(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Int64(x), Bson::Int64(y)) => x == y,
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((kx, vx), (ky, vy))| kx == ky && bson_equal(vx, vy))
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| bson_equal(vx, vy))
        }
        _ => match (number(a), number(b)) {
            // A filter's `$eq` matches NaN with NaN, so a stored NaN is not a change.
            (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => a == b,
        },
    }
}
