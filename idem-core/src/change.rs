//! The changes an operation makes to a document's `#[idem(effect)]` fields, for `apply_once` on
//! every backend: typed, and encoded for each backend when made.
#![cfg_attr(
    not(any(feature = "mongodb", feature = "_postgres", feature = "sqlite")),
    allow(dead_code)
)]

use serde::Serialize;

use crate::column::{Column, ColumnShape};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::Model;

/// One change an operation makes to an `#[idem(effect)]` field (named by its stored name), for
/// `apply_once` on every store: add to a number, or set a value.
///
/// ```
/// use idem_core::Change;
/// let credit = [Change::add("balance", 25), Change::set("lastCredit", &"2026-12-01")];
/// # let _ = credit;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub(crate) field: &'static str,
    pub(crate) kind: ChangeKind,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ChangeKind {
    /// Adds to a number; a missing (or NULL) field counts as 0.
    Add(Amount),
    /// Sets the field to a value, encoded for each backend when the change was made.
    Set(Box<SetValue>),
    /// A change that cannot be sent, and why.
    Invalid(String),
}

/// An amount to add.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Amount {
    Integer(i64),
    Float(f64),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Integer(amount) => write!(f, "{amount}"),
            Amount::Float(amount) => write!(f, "{amount}"),
        }
    }
}

/// A set value as each backend stores it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SetValue {
    /// As BSON, or why it is not.
    #[cfg(feature = "mongodb")]
    pub bson: Result<mongodb::bson::Bson, String>,
    /// In the neutral JSON form a SQL column is written from.
    #[cfg(any(feature = "_postgres", feature = "sqlite"))]
    pub json: SqlValue,
}

/// A set value as a SQL column takes it.
#[cfg(any(feature = "_postgres", feature = "sqlite"))]
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SqlValue {
    /// As serde writes it.
    Json(serde_json::Value),
    /// NaN or an infinity, which only a `double precision` column holds (JSON has no such
    /// number).
    NonFinite(f64),
    /// Why it cannot be sent.
    Invalid(String),
}

impl Change {
    /// Adds `amount` to the numeric effect field `field` (its stored name): `$inc` on MongoDB,
    /// `balance = balance + amount` in SQL. A missing or NULL field counts as 0.
    pub fn add(field: &'static str, amount: i64) -> Self {
        Change {
            field,
            kind: ChangeKind::Add(Amount::Integer(amount)),
        }
    }

    /// Adds a float `amount` to the numeric effect field `field`, as [`Change::add`]. A
    /// non-finite amount is refused by `apply_once` with [`ErrorKind::Serialize`], before anything
    /// is sent.
    pub fn add_float(field: &'static str, amount: f64) -> Self {
        Change {
            field,
            kind: if amount.is_finite() {
                ChangeKind::Add(Amount::Float(amount))
            } else {
                ChangeKind::Invalid(format!("{amount} is not a finite amount"))
            },
        }
    }

    /// Sets the effect field `field` (its stored name) to `value`, as an upsert would store it.
    /// A value that does not serialize is refused by `apply_once` with [`ErrorKind::Serialize`].
    /// NaN and the infinities are stored as an upsert stores them (a `double precision` column
    /// on PostgreSQL).
    #[cfg_attr(
        not(any(feature = "mongodb", feature = "_postgres", feature = "sqlite")),
        allow(unused_variables)
    )]
    pub fn set<V: Serialize + ?Sized>(field: &'static str, value: &V) -> Self {
        let value = SetValue {
            #[cfg(feature = "mongodb")]
            bson: mongodb::bson::to_bson(value).map_err(|error| error.to_string()),
            #[cfg(any(feature = "_postgres", feature = "sqlite"))]
            json: match crate::sql::json::to_json(value) {
                Ok(value) => SqlValue::Json(value),
                Err(crate::sql::json::JsonError::NonFinite { path, value }) if path.is_empty() => {
                    SqlValue::NonFinite(value)
                }
                Err(error) => SqlValue::Invalid(error.message()),
            },
        };
        Change {
            field,
            kind: ChangeKind::Set(Box::new(value)),
        }
    }

    /// The effect field changed (its stored name).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

/// Refuses, before anything is sent, an operation that changes a field the type does not give
/// to operations ([`ErrorKind::NotAnEffectField`]: upserts own the others), one field twice (its
/// changes would not say in which order they apply), or adds to a field that is not a number
/// of that kind (`columns`: the type's, [`crate::Idempotent::stored_columns`]), which one store
/// would refuse and another turn into a float.
pub(crate) fn check(
    model: &Model,
    columns: &[Column],
    changes: &[Change],
    document: &DocumentRef,
) -> Result<(), Error> {
    for (at, change) in changes.iter().enumerate() {
        if !model
            .effect_fields()
            .any(|field| field.stored_name() == change.field)
        {
            return Err(Error::new(
                document.clone(),
                ErrorKind::NotAnEffectField {
                    path: change.field.to_owned(),
                },
            ));
        }
        if let ChangeKind::Add(amount) = &change.kind {
            let shape = columns
                .iter()
                .find(|column| column.stored_name() == change.field)
                .map(Column::shape);
            let adds = matches!(
                (amount, shape),
                (
                    Amount::Integer(_),
                    Some(ColumnShape::Integer | ColumnShape::Float)
                ) | (Amount::Float(_), Some(ColumnShape::Float))
            );
            if !adds {
                return Err(Error::new(
                    document.clone(),
                    ErrorKind::Serialize {
                        message: format!(
                            "cannot add {amount} to `{}`: add integers to an integer or float \
                         field, floats to a float field",
                            change.field
                        ),
                    },
                ));
            }
        }
        if changes[..at]
            .iter()
            .any(|earlier| earlier.field == change.field)
        {
            return Err(Error::new(
                document.clone(),
                ErrorKind::Serialize {
                    message: format!(
                        "the operation changes `{}` twice; make it one change",
                        change.field
                    ),
                },
            ));
        }
    }
    Ok(())
}

/// The refusal of a change that cannot be sent.
pub(crate) fn invalid(document: &DocumentRef, field: &str, problem: &str) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::Serialize {
            message: format!("the change of field {field:?}: {problem}"),
        },
    )
}
