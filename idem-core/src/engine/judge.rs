//! What a stored document means for an incoming write, read through a driver and judged by
//! [`crate::verdict`]: the one place where stored values are compared with incoming ones.
//!
//! A document idem wrote carries digests of its guarded fields, and those are compared. A
//! document another tool wrote carries none; its values are compared here in the neutral form
//! ([`same_value`]): numbers by value (mongosh stores `1700000000000` as a double; jsonb reads
//! `1.0` back as `1`), maps whatever their order. The SQL stores keep one digest of every
//! guarded field together: where it is not the incoming document's, the values are compared
//! so too, and the write that may go through is pinned to the digest as read.

use serde_json::Value;

use super::{Driver, StoredDigest, WriteKind};
use crate::error::{Error, ErrorKind};
use crate::model::Field;
use crate::outcome::Outcome;
use crate::verdict::{Guarded, Stored, StoredVersion, Verdict};

/// What a write does to a stored document.
#[derive(Debug)]
pub(crate) enum Judged {
    /// Nothing to write: `Unchanged`, `Stale` or `Deleted`.
    Settled(Outcome),
    /// The write would orphan or change what may not change.
    Refused(Error),
    /// The write replaces it; `foreign`: only a second step pinned to what was read may, since
    /// a server guard cannot compare values stored without digests.
    Replace {
        /// Stored without digests.
        foreign: bool,
    },
}

/// What `stored`, the document under `doc`'s id or holding its natural key, means for a write
/// of `kind`.
pub(crate) fn judge<D: Driver>(
    driver: &D,
    kind: WriteKind,
    doc: &D::Light,
    stored: &D::Stored,
) -> Judged {
    let stored_id = driver.stored_id(stored);
    if stored_id.as_deref() != Some(doc.id_text.as_str()) {
        return Judged::Refused(id_change(driver, doc, stored, stored_id));
    }
    if let Some(field) = driver.key_differs(doc, stored) {
        return Judged::Refused(refusal(driver, doc, stored, field));
    }
    if kind == WriteKind::InsertNew {
        // A member of a derived set is there or not; what it holds is the rule's, not this
        // call's.
        return Judged::Settled(Outcome::Unchanged);
    }
    if kind == WriteKind::Delete {
        // Deleting checks no other field: the marker is all it writes.
        return match driver.is_tombstoned(stored) {
            true => Judged::Settled(Outcome::Unchanged),
            false => Judged::Replace { foreign: false },
        };
    }
    let (reduced, by_value) = reduce(driver, doc, stored);
    match reduced.judge(doc.hash.as_str(), doc.version_key.as_deref()) {
        Verdict::Replace => Judged::Replace {
            foreign: by_value || reduced.has_foreign(),
        },
        Verdict::Settled(outcome) => Judged::Settled(outcome),
        Verdict::Refused(field) => Judged::Refused(refusal(driver, doc, stored, field)),
    }
}

/// A stored document reduced to what the verdict reads, compared as the server guard compares;
/// and whether its guarded fields were compared by value for a digest of them all that is not
/// the incoming one's ([`StoredDigest::Whole`]), which the server guard stops at, so that only a
/// second step pinned to what was read replaces it.
fn reduce<'s, D: Driver>(driver: &D, doc: &D::Light, stored: &'s D::Stored) -> (Stored<'s>, bool) {
    let mut incoming_whole = None;
    let mut by_value = false;
    let guarded = doc
        .digests
        .iter()
        .map(|(field, incoming)| {
            let state = match driver.stored_digest(stored, field) {
                StoredDigest::Whole(whole) => {
                    let incoming_whole = incoming_whole.get_or_insert_with(|| {
                        crate::hash::frozen_digest(
                            (doc.digests.iter()).map(|(field, digest)| (*field, digest.as_deref())),
                        )
                    });
                    match (whole == incoming_whole.as_str(), incoming) {
                        (true, None) => Guarded::Unwritten,
                        (true, Some(_)) => Guarded::Same,
                        (false, _) => {
                            by_value = true;
                            compared_by_value(driver, doc, stored, field)
                        }
                    }
                }
                // No digest of this field beside others' (MongoDB): never written only where its
                // value is not either, and only in an `Option`; a field made frozen since holds
                // a value, and a null another type left is a value for this one. Compared as
                // where one digest covers every field.
                StoredDigest::Unwritten => match compared_by_value(driver, doc, stored, field) {
                    Guarded::Unwritten => Guarded::Unwritten,
                    compared => {
                        by_value = true;
                        compared
                    }
                },
                StoredDigest::Digest(digest) if Some(digest) == incoming.as_deref() => {
                    Guarded::Same
                }
                // A digest that is not the incoming one's: the values are compared, and they
                // are the truth, as where one digest covers every field.
                StoredDigest::Digest(_) | StoredDigest::Other => {
                    by_value = true;
                    compared_by_value(driver, doc, stored, field)
                }
                StoredDigest::NoDigests => compared_by_value(driver, doc, stored, field),
            };
            (*field, state)
        })
        .collect();
    let reduced = Stored {
        tombstoned: driver.is_tombstoned(stored),
        guarded,
        version: doc
            .version_key
            .as_ref()
            .map(|_| match driver.stored_version(stored) {
                StoredVersion::Absent => stored_version_field(driver, doc, stored),
                read => read,
            }),
        hash: driver.stored_hash(stored),
    };
    (reduced, by_value)
}

/// A guarded field compared by value, as stored without digests. A field left out reads as
/// null, as a SQL column holds it: never written only in an `Option` field, elsewhere a value
/// like any other.
fn compared_by_value<D: Driver>(
    driver: &D,
    doc: &D::Light,
    stored: &D::Stored,
    field: &'static Field,
) -> Guarded {
    match driver.stored_value(stored, field).unwrap_or(Value::Null) {
        Value::Null if field.null_is_unwritten() => Guarded::Unwritten,
        value => Guarded::Foreign {
            same: same_value(&value, &driver.incoming_value(doc, field)),
        },
    }
}

/// The version of a document stored without idem's order key, from its version field: what
/// another tool (or idem before the type had versions) stored there still orders replays.
fn stored_version_field<'s, D: Driver>(
    driver: &D,
    doc: &D::Light,
    stored: &'s D::Stored,
) -> StoredVersion<'s> {
    let Some(field) = doc.model.version_field() else {
        return StoredVersion::Absent;
    };
    match driver.stored_value(stored, field) {
        None | Some(Value::Null) => StoredVersion::Absent,
        Some(value) => {
            (doc.stored_version)(&value).map_or(StoredVersion::Unordered, StoredVersion::Foreign)
        }
    }
}

/// The refusal of a write whose natural key is stored under another id: the timestamp if its
/// stored value differs (a moved timestamp derives a new id), else `_id` itself (the id was
/// derived another way, or another tool chose it).
fn id_change<D: Driver>(
    driver: &D,
    doc: &D::Light,
    stored: &D::Stored,
    stored_id: Option<String>,
) -> Error {
    let moved = doc.model.timestamp_field().filter(|field| {
        driver
            .stored_value(stored, field)
            .is_none_or(|value| !same_value(&value, &driver.incoming_value(doc, field)))
    });
    match moved {
        Some(field) => refusal(driver, doc, stored, field),
        None => Error::new(
            doc.document(),
            ErrorKind::IdChanged {
                stored_id: stored_id.unwrap_or_else(|| "(missing)".to_owned()),
                derived_id: doc.id_text.to_string(),
            },
        ),
    }
}

/// The refusal of a write that would change `field`.
fn refusal<D: Driver>(
    driver: &D,
    doc: &D::Light,
    stored: &D::Stored,
    field: &'static Field,
) -> Error {
    let shown = driver
        .stored_shown(stored, field)
        .unwrap_or_else(|| "(missing)".to_owned());
    Error::new(
        doc.document(),
        ErrorKind::FrozenFieldChanged {
            stored_id: driver
                .stored_id(stored)
                .unwrap_or_else(|| doc.id_text.to_string()),
            field: field.name(),
            stored_name: field.stored_name(),
            stored: shown,
            incoming: driver.incoming_shown(doc, field),
        },
    )
}

/// Whether two values in the neutral form are the same value: numbers by value whatever their
/// type (an integral double is its integer), maps whatever the order of their entries, lists
/// item by item.
pub(crate) fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(name, value)| y.get(name).is_some_and(|other| same_value(value, other)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_by_value_and_maps_whatever_their_order() {
        assert!(same_value(
            &json!(1_700_000_000_000_i64),
            &json!(1_700_000_000_000.0)
        ));
        assert!(same_value(&json!(1), &json!(1.0)));
        assert!(!same_value(&json!(1), &json!(1.5)));
        assert!(same_value(
            &json!({"a": 1, "b": [1.0, "x"]}),
            &json!({"b": [1, "x"], "a": 1.0})
        ));
        assert!(!same_value(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!same_value(&json!("1"), &json!(1)));
        assert!(same_value(&json!(u64::MAX), &json!(u64::MAX)));
    }
}
