//! Versions: the values that order replays, and the one stored form every backend compares.
//!
//! A version field is stored as serde writes it, which for many types does not sort as the
//! value does (a `chrono::DateTime` is RFC 3339 text, where `…00Z` sorts after `…00.500Z`; a
//! `SystemTime` is a struct). So idem also stores an order key beside the document: the value
//! as a signed 128-bit integer (nanoseconds for time types), offset by 2^127 and written as 32
//! lowercase hex digits. Comparing two order keys as text compares the versions, on any server.

use std::fmt;
use std::time::SystemTime;

/// A value that orders replays of a document: `#[idem(version)]`.
///
/// Implemented for the integer types up to 64 bits and `i128`, `std::time::SystemTime`,
/// `bson::DateTime` (feature `mongodb`), `chrono::DateTime<Tz>` (feature `chrono`) and
/// `time::OffsetDateTime` (feature `time`). Text, floats and `Option` are not versions: text
/// sorts `"10"` before `"9"`, a float can be NaN, and a missing version cannot be ordered.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[idem(version)]` field: it is not an ordered version type",
    label = "not a version type",
    note = "a version is an integer revision (`i64`, `u32`, …) or an instant (`SystemTime`, `bson::DateTime` with feature `mongodb`, `chrono::DateTime<Tz>` with feature `chrono`, `time::OffsetDateTime` with feature `time`); text, floats and `Option` do not order replays"
)]
pub trait OrderedVersion {
    /// The version as an order key: a later version has a greater key.
    fn version_key(&self) -> VersionKey;
}

impl<T: OrderedVersion + ?Sized> OrderedVersion for &T {
    fn version_key(&self) -> VersionKey {
        (**self).version_key()
    }
}

/// A version reduced to its order: integers as themselves, instants as nanoseconds since the
/// Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionKey(i128);

impl VersionKey {
    /// The key of an integer version, or of an instant in nanoseconds since the Unix epoch.
    pub const fn new(value: i128) -> Self {
        VersionKey(value)
    }

    /// The ordered value.
    pub const fn value(self) -> i128 {
        self.0
    }

    /// The stored form: 32 hex digits whose text order is the version order.
    pub fn to_stored(self) -> String {
        self.to_string()
    }
}

impl fmt::Display for VersionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Flipping the sign bit maps i128::MIN..=i128::MAX onto 0..=u128::MAX in order.
        write!(f, "{:032x}", (self.0 as u128) ^ (1 << 127))
    }
}

macro_rules! integer_versions {
    ($($ty:ty),*) => {$(
        impl OrderedVersion for $ty {
            fn version_key(&self) -> VersionKey {
                VersionKey(i128::from(*self))
            }
        }
    )*};
}

integer_versions!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

impl OrderedVersion for isize {
    fn version_key(&self) -> VersionKey {
        VersionKey(*self as i128)
    }
}

impl OrderedVersion for usize {
    fn version_key(&self) -> VersionKey {
        VersionKey(*self as i128)
    }
}

impl OrderedVersion for SystemTime {
    fn version_key(&self) -> VersionKey {
        let nanos = match self.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(after) => after.as_nanos() as i128,
            Err(before) => -(before.duration().as_nanos() as i128),
        };
        VersionKey(nanos)
    }
}

#[cfg(feature = "mongodb")]
impl OrderedVersion for mongodb::bson::DateTime {
    fn version_key(&self) -> VersionKey {
        VersionKey(i128::from(self.timestamp_millis()) * 1_000_000)
    }
}

#[cfg(feature = "chrono")]
impl<Tz: chrono::TimeZone> OrderedVersion for chrono::DateTime<Tz> {
    fn version_key(&self) -> VersionKey {
        // Seconds and the nanoseconds within them: every representable instant fits, where
        // `timestamp_nanos_opt` stops in 2262.
        VersionKey(
            i128::from(self.timestamp()) * 1_000_000_000
                + i128::from(self.timestamp_subsec_nanos()),
        )
    }
}

#[cfg(feature = "time")]
impl OrderedVersion for time::OffsetDateTime {
    fn version_key(&self) -> VersionKey {
        VersionKey(self.unix_timestamp_nanos())
    }
}

/// A version type serde can read back: how a document stored without idem's order key (by
/// another tool, or before the type gained its `#[idem(version)]`) is ordered all the same.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[idem(version)]` field: serde cannot read it back",
    label = "not readable by serde",
    note = "a stored version is read back to order documents written without idem's order key: derive or implement `serde::Deserialize` for it"
)]
pub trait ReadBackVersion: serde::de::DeserializeOwned {}

impl<T: serde::de::DeserializeOwned> ReadBackVersion for T {}

/// The order key of a stored version `value` read back as `T`; an integral double (mongosh
/// writes every number as one) reads as its integer. `None` if it does not read as `T`.
#[doc(hidden)]
pub fn stored_version_key<T: OrderedVersion + ReadBackVersion>(
    value: &serde_json::Value,
) -> Option<VersionKey> {
    if let Ok(version) = T::deserialize(value) {
        return Some(version.version_key());
    }
    let integral = value
        .as_f64()
        .filter(|float| float.fract() == 0.0 && float.abs() < 9.0e15)?;
    T::deserialize(serde_json::Value::from(integral as i64))
        .ok()
        .map(|version| version.version_key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_version_reads_back_as_its_type_or_not_at_all() {
        assert_eq!(
            stored_version_key::<i64>(&serde_json::json!(10)),
            Some(VersionKey(10))
        );
        let mongosh = serde_json::json!(10.0);
        assert_eq!(stored_version_key::<u32>(&mongosh), Some(VersionKey(10)));
        assert_eq!(stored_version_key::<i64>(&serde_json::json!("x")), None);
        let instant = serde_json::json!({"secs_since_epoch": 1, "nanos_since_epoch": 5});
        assert_eq!(
            stored_version_key::<SystemTime>(&instant),
            Some(VersionKey(1_000_000_005))
        );
    }

    #[test]
    fn the_stored_form_sorts_as_the_value() {
        let values = [i128::MIN, -1_000, -1, 0, 1, 9, 10, 1_000, i128::MAX];
        for pair in values.windows(2) {
            let (lower, higher) = (VersionKey(pair[0]), VersionKey(pair[1]));
            assert!(lower.to_stored() < higher.to_stored(), "{pair:?}");
            assert_eq!(lower.to_stored().len(), 32);
        }
    }

    #[test]
    fn instants_order_below_the_second() {
        let second = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let later = second + std::time::Duration::from_millis(500);
        assert!(second.version_key().to_stored() < later.version_key().to_stored());
        let before_epoch = SystemTime::UNIX_EPOCH - std::time::Duration::from_nanos(1);
        assert_eq!(before_epoch.version_key(), VersionKey(-1));
    }
}
