//! The changes an operation makes to a document's `#[idem(effect)]` fields, for `apply_once` on
//! every backend: typed, and encoded for each backend when made.
#![cfg_attr(
    not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")),
    allow(dead_code)
)]

use serde::Serialize;

use crate::column::{Column, ColumnShape};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::{Model, OpId};

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
    #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
    pub json: SqlValue,
}

impl SetValue {
    /// What kind of value this is, as its column's shape sees it; `None` if it cannot be sent.
    fn kind(&self) -> Option<ValueKind> {
        #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
        return match &self.json {
            SqlValue::Json(value) => Some(ValueKind::of_json(value)),
            SqlValue::NonFinite(_) => Some(ValueKind::Float),
            SqlValue::Invalid(_) => None,
        };
        #[cfg(all(
            feature = "mongodb",
            not(any(feature = "_postgres", feature = "_sqlx_store"))
        ))]
        return self.bson.as_ref().ok().map(ValueKind::of_bson);
        #[cfg(not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")))]
        None
    }

    /// The value as a message shows it: as JSON, a non-finite float by its name.
    fn shown(&self) -> String {
        #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
        return match &self.json {
            SqlValue::Json(value) => value.to_string(),
            SqlValue::NonFinite(float) => crate::sql::json::show_float(*float),
            SqlValue::Invalid(problem) => problem.clone(),
        };
        #[cfg(all(
            feature = "mongodb",
            not(any(feature = "_postgres", feature = "_sqlx_store"))
        ))]
        return match &self.bson {
            Ok(value) => value.to_string(),
            Err(problem) => problem.clone(),
        };
        #[cfg(not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")))]
        String::new()
    }
}

/// A set value's kind, as far as the shape of the field it is set in goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ValueKind {
    Null,
    Boolean,
    /// An integer in `i64`'s range.
    Integer,
    /// An integer beyond `i64`'s range.
    WideInteger,
    Float,
    Text,
    Structured,
}

impl ValueKind {
    pub(crate) fn of_json(value: &serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null => ValueKind::Null,
            Value::Bool(_) => ValueKind::Boolean,
            Value::Number(number) if number.is_i64() => ValueKind::Integer,
            Value::Number(number) if number.is_u64() => ValueKind::WideInteger,
            Value::Number(_) => ValueKind::Float,
            Value::String(_) => ValueKind::Text,
            Value::Array(_) | Value::Object(_) => ValueKind::Structured,
        }
    }

    #[cfg(all(
        feature = "mongodb",
        not(any(feature = "_postgres", feature = "_sqlx_store"))
    ))]
    fn of_bson(value: &mongodb::bson::Bson) -> Self {
        use mongodb::bson::Bson;
        match value {
            Bson::Null | Bson::Undefined => ValueKind::Null,
            Bson::Boolean(_) => ValueKind::Boolean,
            Bson::Int32(_) | Bson::Int64(_) => ValueKind::Integer,
            Bson::Double(_) => ValueKind::Float,
            Bson::String(_) => ValueKind::Text,
            _ => ValueKind::Structured,
        }
    }

    pub(crate) fn shown(self) -> &'static str {
        match self {
            ValueKind::Null => "null",
            ValueKind::Boolean => "a boolean",
            ValueKind::Integer => "an integer",
            ValueKind::WideInteger => "an integer beyond i64's range",
            ValueKind::Float => "a float",
            ValueKind::Text => "a string",
            ValueKind::Structured => "a list or a map",
        }
    }
}

/// What a field of `shape` expects, where it cannot hold a value of `kind`: the rule a SQL
/// column holds as it is written ([`crate::sql::row::write_column_text`]), kept on every
/// backend, so that MongoDB, which would store anything, gives the same answer.
pub(crate) fn expected(shape: ColumnShape, kind: ValueKind) -> Option<&'static str> {
    match (shape, kind) {
        (_, ValueKind::Null) | (ColumnShape::Structured | ColumnShape::Flattened, _) => None,
        (ColumnShape::Text, ValueKind::Text)
        | (ColumnShape::Integer, ValueKind::Integer)
        | (ColumnShape::Float, ValueKind::Integer | ValueKind::WideInteger | ValueKind::Float)
        | (ColumnShape::Boolean, ValueKind::Boolean) => None,
        (ColumnShape::Text, _) => Some("text"),
        (ColumnShape::Integer, _) => Some("an integer in i64's range"),
        (ColumnShape::Float, _) => Some("a number"),
        (ColumnShape::Boolean, _) => Some("a boolean"),
    }
}

/// A set value as a SQL column takes it.
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
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
        not(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store")),
        allow(unused_variables)
    )]
    pub fn set<V: Serialize + ?Sized>(field: &'static str, value: &V) -> Self {
        let value = SetValue {
            #[cfg(feature = "mongodb")]
            bson: crate::mongo::text_keys::to_bson(value).map_err(|error| error.to_string()),
            #[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
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

    /// The integer this change adds, if it adds one.
    #[cfg(any(feature = "mongodb", feature = "_postgres", feature = "sqlite"))]
    pub(crate) fn integer_amount(&self) -> Option<i64> {
        match self.kind {
            ChangeKind::Add(Amount::Integer(amount)) => Some(amount),
            _ => None,
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
        let shape = columns
            .iter()
            .find(|column| column.stored_name() == change.field)
            .map(Column::shape);
        if let ChangeKind::Set(value) = &change.kind {
            let kind = value.kind();
            if let Some((expected, kind)) = shape
                .zip(kind)
                .and_then(|(shape, kind)| Some((expected(shape, kind)?, kind)))
            {
                return Err(invalid(
                    document,
                    change.field,
                    &format!(
                        "the field holds {expected}, not {} ({})",
                        kind.shown(),
                        value.shown()
                    ),
                ));
            }
        }
        if let ChangeKind::Add(amount) = &change.kind {
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

/// Refuses, before anything is sent, an op id holding U+0000 ([`ErrorKind::OpIdHoldsNul`]), on
/// every store alike: PostgreSQL's text refuses it and SQLite's text functions end at it, so an
/// op id recorded there would not be the one given, and the same op could not be told again.
pub(crate) fn check_op(op: &OpId, document: &DocumentRef) -> Result<(), Error> {
    match op.as_str().contains('\0') {
        true => Err(Error::new(
            document.clone(),
            ErrorKind::OpIdHoldsNul {
                op_id: op.as_str().to_owned(),
            },
        )),
        false => Ok(()),
    }
}

/// `error`, or, where the backend's error says an addition left its number's range
/// (`overflowed`) and `changes` add an integer, [`ErrorKind::AddOutOfRange`] naming the first
/// field they add an integer to (the server does not say which). (SQLite's sum does not fail:
/// its statement checks the range itself, and names the field.)
#[cfg(any(feature = "mongodb", feature = "_postgres"))]
pub(crate) fn out_of_range_or(
    error: Error,
    changes: &[Change],
    overflowed: impl Fn(&crate::error::BackendError) -> bool,
) -> Error {
    let first_integer_added = changes
        .iter()
        .find(|change| change.integer_amount().is_some());
    match (error.as_backend(), first_integer_added) {
        (Some(backend), Some(change)) if overflowed(backend) => {
            add_out_of_range(error.document(), change.field)
        }
        _ => error,
    }
}

/// The refusal of an operation whose integer addition to `field` left `i64`'s range.
pub(crate) fn add_out_of_range(document: &DocumentRef, field: &str) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::AddOutOfRange {
            field: field.to_owned(),
        },
    )
}

/// The refusal of an addition to the effect field `field` (its stored name), which the stored
/// document holds `stored` in (another tool's text, say): nothing can be added to it.
#[cfg(any(feature = "mongodb", feature = "_sql_store"))]
pub(crate) fn stored_not_a_number(document: &DocumentRef, field: &str, stored: &str) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::Deserialize {
            message: format!(
                "`{field}` is stored as {stored}, not a number, so nothing can be added to it; \
                 store a number (or null) there"
            ),
        },
    )
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
