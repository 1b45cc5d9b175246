//! Natural keys held by more than one document: found in one pass in natural-key order, and,
//! where an adoption is told to keep one by a field's value, which one stays.

#[cfg(feature = "mongodb")]
use std::cmp::Ordering;

use super::finding::{ShownKey, ShownValue, SAMPLES_PER_KIND};
use super::report::AuditReport;
use crate::model::Model;

/// A stored value of a natural-key field, as a store's unique index compares it and a report
/// shows it.
pub(crate) trait KeyValue {
    /// Whether `self` and `other` are equal as the unique index compares them.
    fn same(&self, other: &Self) -> bool;
    /// The value as a report shows it.
    fn shown(&self) -> ShownValue;
}

/// A natural key as stored: each key field's stored name and value.
pub(crate) struct StoredKey<V>(pub Vec<(&'static str, V)>);

impl<V: KeyValue> StoredKey<V> {
    /// `model`'s natural key, each field's value as `value_of` reads it by its stored name.
    pub fn of(model: &Model, mut value_of: impl FnMut(&'static str) -> V) -> Self {
        let key = model.natural_key_fields().map(|field| {
            let name = field.stored_name();
            (name, value_of(name))
        });
        StoredKey(key.collect())
    }

    /// Whether `self` and `other` collide in the unique natural-key index.
    pub fn collides_with(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && (self.0.iter().zip(&other.0)).all(|((_, a), (_, b))| a.same(b))
    }

    /// The key as a report shows it.
    pub fn shown(&self) -> ShownKey {
        let shown = self
            .0
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.shown()));
        ShownKey(shown.collect())
    }
}

/// A value as the SQL stores read a row, as JSON: equal where the JSON is.
impl KeyValue for serde_json::Value {
    fn same(&self, other: &Self) -> bool {
        self == other
    }

    fn shown(&self) -> ShownValue {
        ShownValue::from_json(self.clone())
    }
}

/// The holders of the natural key a scan in natural-key order is at: documents or rows sharing a
/// key come one after the other, so finding duplicates needs only the current key and its first
/// few ids, whatever the size of the collection or table. Both backends' audits count with it.
pub(crate) struct DuplicateTracker<V> {
    current: Option<KeyHolders<V>>,
}

struct KeyHolders<V> {
    key: StoredKey<V>,
    holders: u64,
    sample_ids: Vec<String>,
    /// Whether the first holder was counted clean: it is not, once a second one shows the key
    /// is duplicated.
    first_was_clean: bool,
}

impl<V: KeyValue> DuplicateTracker<V> {
    /// A scan that has met no key yet.
    pub fn new() -> Self {
        DuplicateTracker { current: None }
    }

    /// Counts a holder of `key` (`None`: a key that collides with no other, such as one with a
    /// NULL part in a PostgreSQL unique constraint) with its id, and whether it has no problem
    /// of its own; counts it clean in `report` unless it is a second or later holder of its
    /// key. The first holder of a duplicated key leaves the clean count when the second arrives.
    pub fn count(
        &mut self,
        report: &mut AuditReport,
        key: Option<StoredKey<V>>,
        id: &str,
        clean: bool,
    ) {
        if let (Some(current), Some(key)) = (self.current.as_mut(), key.as_ref()) {
            if current.key.collides_with(key) {
                current.holders += 1;
                if current.sample_ids.len() < SAMPLES_PER_KIND {
                    current.sample_ids.push(id.to_owned());
                }
                if current.holders == 2 && current.first_was_clean {
                    report.clean -= 1;
                }
                return;
            }
        }
        self.finish_key(report);
        if clean {
            report.clean += 1;
        }
        self.current = key.map(|key| KeyHolders {
            key,
            holders: 1,
            sample_ids: vec![id.to_owned()],
            first_was_clean: clean,
        });
    }

    /// Ends the scan: the last key is reported if it was duplicated.
    pub fn finish(mut self, report: &mut AuditReport) {
        self.finish_key(report);
    }

    fn finish_key(&mut self, report: &mut AuditReport) {
        if let Some(done) = self.current.take() {
            if done.holders > 1 {
                report
                    .duplicates
                    .record(done.key.shown(), done.holders, done.sample_ids);
            }
        }
    }
}

// Only MongoDB's adoption has duplicate rules: a SQL table's unique constraint keeps a key to
// one row from the start.

/// A stored value as the duplicate rules order it: numbers by value, dates by instant, text by
/// its UTF-8 bytes; a store gives any other kind as `None`, which is not ordered.
#[cfg(feature = "mongodb")]
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub(crate) enum Ordered<'a> {
    /// A number, whatever its stored type.
    Number(f64),
    /// A date, as its milliseconds since the epoch.
    Date(i64),
    /// Text.
    Text(&'a str),
}

/// The index of the one document, among those sharing a key, whose value of the rule's field
/// (`values`, in their order) is the most `direction` (the greatest, or the least); `None` to
/// keep them all, where a value is missing or not ordered, the values are of different kinds,
/// or the extreme is held twice.
#[cfg(feature = "mongodb")]
pub(crate) fn kept_by_value(values: &[Option<Ordered<'_>>], direction: Ordering) -> Option<usize> {
    let values: Vec<Ordered<'_>> = values.iter().copied().collect::<Option<_>>()?;
    let kind = std::mem::discriminant(values.first()?);
    if values
        .iter()
        .any(|value| std::mem::discriminant(value) != kind)
    {
        return None;
    }
    let mut best = 0;
    let mut tied = false;
    for at in 1..values.len() {
        match values[at].partial_cmp(&values[best])? {
            ordering if ordering == direction => {
                best = at;
                tied = false;
            }
            Ordering::Equal => tied = true,
            _ => {}
        }
    }
    (!tied).then_some(best)
}

#[cfg(all(test, feature = "mongodb"))]
mod tests {
    use super::*;

    #[test]
    fn the_greatest_or_least_value_is_kept_and_a_tie_is_left() {
        use Ordered::{Date, Number, Text};
        let numbers = [Some(Number(3.0)), Some(Number(5.5)), Some(Number(1.0))];
        assert_eq!(kept_by_value(&numbers, Ordering::Greater), Some(1));
        assert_eq!(kept_by_value(&numbers, Ordering::Less), Some(2));
        let dates = [Some(Date(20)), Some(Date(10))];
        assert_eq!(kept_by_value(&dates, Ordering::Greater), Some(0));
        let tied = [Some(Number(5.0)), Some(Number(3.0)), Some(Number(5.0))];
        assert_eq!(kept_by_value(&tied, Ordering::Greater), None);
        assert_eq!(kept_by_value(&tied, Ordering::Less), Some(1));
        let mixed = [Some(Number(5.0)), Some(Text("6"))];
        assert_eq!(kept_by_value(&mixed, Ordering::Greater), None);
        let missing = [Some(Number(1.0)), None];
        assert_eq!(kept_by_value(&missing, Ordering::Greater), None);
    }
}
