//! How the SQL stores' audits and adoptions read a row: as the type, or with a model given at
//! run time, whose ids and hashes come from the stored values.
//!
//! # Hashes without the type
//!
//! The hash of a row read without the type is the hash of its stored values, each column in the
//! type's order (the `field_order` given, else the table's column order, which is the type's
//! declaration order in a table idem made): a float column as a float, whatever digits the
//! database printed, and a NULL column both as null and as absent (a field serde skips when
//! `None`), whichever matches. A nested object in a JSON column reads as a map, where the type
//! may have hashed a struct in its declaration order: such a row whose hash matches no reading
//! is counted as not checked
//! ([`AuditReport::hash_unchecked`](crate::AuditReport::hash_unchecked)), not as changed, and
//! adoption keeps its stored hash.

use serde::de::DeserializeOwned;
use serde::ser::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::layout::{Content, Layout};
use super::row::{prepare_light, row_as, shape_of, PreparedRow};
use crate::audit::{DigestReading, Judged, StoredDocument, TypedReading};
use crate::column::{Column, ColumnShape};
use crate::document::DocumentRef;
use crate::engine::batch::Ready;
use crate::engine::{Prepared, StoredDigest};
use crate::hash::ContentHash;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model, FROZEN_DIGESTS_FIELD, ID_FIELD, RESERVED_FIELDS};
use crate::short_text::ShortText;

#[derive(Clone, Copy)]
pub(crate) enum Reading<'a> {
    /// As the type: `read` gives a row's id and content hash, or why the row does not read as
    /// the type.
    Typed {
        read: fn(&Layout, Map<String, Value>) -> Result<TypedReading, String>,
    },
    /// As stored, for a model given at run time, the hashed columns in `field_order` (the
    /// type's order; the table's if empty).
    Stored { field_order: &'a [&'a str] },
}

impl Reading<'_> {
    /// The reading of `T`.
    pub fn typed<T: Idempotent + Serialize + DeserializeOwned>() -> Self {
        Reading::Typed {
            read: read_typed::<T>,
        }
    }

    pub fn is_typed(&self) -> bool {
        matches!(self, Reading::Typed { .. })
    }
}

/// Reads a row as `T`: its id, content hash and digests as a write of it computes them.
fn read_typed<T: Idempotent + Serialize + DeserializeOwned>(
    table: &Layout,
    stored: Map<String, Value>,
) -> Result<TypedReading, String> {
    let value: T = row_as(table, stored)?;
    // Prepared as a write of it is (light where that vouches for it), which gives its id, hash
    // and digests at once; where it would not be written, its id and hash alone.
    let ready = match prepare_light(&value, table) {
        Ok(ready) => ready,
        Err(_) => return Ok(TypedReading::of(&value)),
    };
    let prepared: &Prepared = match &ready {
        Ready::Light(light) => light,
        Ready::Whole(whole) => whole,
    };
    Ok(TypedReading {
        id: Ok(prepared.id),
        hash: prepared.hash.parse().ok(),
        digests: Some(prepared.digests.iter().map(|(_, digest)| *digest).collect()),
        version_key: None,
    })
}

/// Where adoption moves a row, or why it cannot: [`typed_destination`], or
/// [`stored_destination`] for a model given at run time.
pub(crate) type Destined<'d> =
    dyn Fn(&Layout, Map<String, Value>) -> Result<Destination, String> + Sync + 'd;

/// Where adoption moves a row: its derived id, and the values of idem's columns it writes with
/// it (the content hash, the digests, the version key), by column index.
pub(crate) struct Destination {
    pub id_text: String,
    pub document: DocumentRef,
    pub contents: Vec<(usize, Option<String>)>,
}

/// Where adopting a row of `T` moves it: under the id `T` derives, with the hash, digests and
/// version key of the row read as `T`.
pub(crate) fn typed_destination<T: Idempotent + Serialize + DeserializeOwned>(
    table: &Layout,
    stored: Map<String, Value>,
) -> Result<Destination, String> {
    let value: T =
        row_as(table, stored).map_err(|error| format!("does not read as its type: {error}"))?;
    let prepared = PreparedRow::new(&value, table).map_err(|error| error.to_string())?;
    let contents = [Content::Hash, Content::Digests, Content::VersionKey]
        .into_iter()
        .filter_map(|content| table.column_with(content))
        .map(|index| (index, prepared.value_of(table, index).map(str::to_owned)))
        .collect();
    Ok(Destination {
        id_text: prepared.id_text.to_string(),
        document: prepared.document(),
        contents,
    })
}

/// Judges one row of `table` ([`crate::audit::judge`]), its columns as `to_jsonb` gives them.
pub(crate) fn judge(table: &Layout, reading: Reading<'_>, stored: Map<String, Value>) -> Judged {
    let model = table.model;
    match reading {
        Reading::Typed { read } => {
            // What the judgement reads besides the type's reading, kept before it takes the row.
            let kept: Map<String, Value> = model
                .natural_key_fields()
                .chain(model.timestamp_field())
                .chain(model.digested_fields())
                .map(Field::stored_name)
                .chain([ID_FIELD, model.hash_field(), FROZEN_DIGESTS_FIELD])
                .filter_map(|name| Some((name.to_owned(), stored.get(name)?.clone())))
                .collect();
            let typed = read(table, stored);
            crate::audit::judge(model, Some(typed), &Row::new(table, &[], &kept))
        }
        Reading::Stored { field_order } => {
            crate::audit::judge(model, None, &Row::new(table, field_order, &stored))
        }
    }
}

/// A row as the judgement reads it: its columns as JSON, those the hash covers in
/// `field_order`.
struct Row<'r> {
    table: &'r Layout,
    field_order: &'r [&'r str],
    stored: &'r Map<String, Value>,
}

impl<'r> Row<'r> {
    fn new(table: &'r Layout, field_order: &'r [&'r str], stored: &'r Map<String, Value>) -> Self {
        Row {
            table,
            field_order,
            stored,
        }
    }
}

impl StoredDocument for Row<'_> {
    fn id_text(&self) -> Option<&str> {
        self.stored.get(ID_FIELD).and_then(Value::as_str)
    }

    fn neutral(&self, field: &Field) -> Value {
        self.stored
            .get(field.stored_name())
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn stored_hash(&self, model: &Model) -> Option<&str> {
        self.stored.get(model.hash_field()).and_then(Value::as_str)
    }

    fn stored_digest(&self, _: &Field) -> StoredDigest<'_> {
        super::row::digest_in(self.stored.get(FROZEN_DIGESTS_FIELD))
    }

    fn value_digests(&self, field: &Field) -> Vec<DigestReading> {
        value_digest_readings(self.table, self.stored, field)
    }

    fn stored_hashes(&self) -> (Vec<ContentHash>, bool) {
        stored_hashes(self.table, self.field_order, self.stored)
    }
}

/// Where a run-time adoption moves a row: under the id its stored values derive, with the hash
/// [`Judged::destination`] keeps.
pub(crate) fn stored_destination(
    table: &Layout,
    field_order: &[&str],
    stored: Map<String, Value>,
) -> Result<Destination, String> {
    // A structured value holding an integer of 17 digits or more may hold a float serde wrote
    // with an exponent (`jsonb` gives it back as an integer), whose digest the type's would
    // not match: such a row is left without digests, compared by value (numbers whatever
    // their type) until its next write stores them.
    let ambiguous = table.model.digested_fields().any(|field| {
        shape_of(table, field) == ColumnShape::Structured
            && stored
                .get(field.stored_name())
                .and_then(with_exponent_floats)
                .is_some()
    });
    let digests = (table.model.digested_fields())
        .map(|field| Some((field, value_digest(table, &stored, field).ok()?)))
        .collect::<Option<Vec<_>>>()
        .filter(|_| !ambiguous)
        .map(|digests| {
            let digests = digests
                .iter()
                .map(|(field, digest)| (*field, digest.as_deref()));
            crate::hash::frozen_digest(digests).as_str().to_owned()
        });
    let (id, hash) = judge(table, Reading::Stored { field_order }, stored).destination()?;
    let contents = [(Content::Hash, Some(hash)), (Content::Digests, digests)]
        .into_iter()
        .filter_map(|(content, value)| Some((table.column_with(content)?, value)))
        .collect();
    Ok(Destination {
        id_text: id.to_string(),
        document: DocumentRef::by_id(table.model, id),
        contents,
    })
}

/// The digest of `field`'s stored value in `stored`, as a write of it stores it: a float
/// column's number as a float ([`Hashed`]), a NULL as never written where the field is an
/// `Option`. Adoption's and the audit's.
fn value_digest(
    table: &Layout,
    stored: &Map<String, Value>,
    field: &Field,
) -> Result<Option<ShortText>, String> {
    let value = stored.get(field.stored_name()).unwrap_or(&Value::Null);
    let hashed = Hashed::of(shape_of(table, field), value);
    crate::engine::guarded_value_digest(field, &hashed, value.is_null())
}

/// The digests `field`'s stored value in `stored` may have, read without the type: as
/// [`value_digest`] reads it, and where its column's type may not tell how it was written, as
/// the other value it may be (a text column's JSON, an integer's 0 or 1 as a boolean: what a
/// SQLite table made before `JSON_TEXT` and `BOOLEAN` declares, or another tool's table; a
/// structured value's integers of 17 digits and more as the floats serde may have written, which
/// PostgreSQL's `jsonb` gives back without their exponent).
fn value_digest_readings(
    table: &Layout,
    stored: &Map<String, Value>,
    field: &Field,
) -> Vec<DigestReading> {
    let mut digests = vec![value_digest(table, stored, field)];
    let other = match stored.get(field.stored_name()) {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
        Some(Value::Number(number)) if number.as_i64() == Some(0) => Some(Value::Bool(false)),
        Some(Value::Number(number)) if number.as_i64() == Some(1) => Some(Value::Bool(true)),
        Some(value @ (Value::Number(_) | Value::Array(_) | Value::Object(_))) => {
            with_exponent_floats(value)
        }
        _ => None,
    };
    digests.extend(other.map(|value| crate::hash::guard_digest(&value, false)));
    digests
}

/// The smallest float serde writes with an exponent (`1e16`), which `jsonb` then gives back as
/// an integer.
const EXPONENT_FLOAT_MIN: f64 = 1e16;

/// `value` with each integer from [`EXPONENT_FLOAT_MIN`] up (in magnitude) read as the float
/// it may have been written as; `None` where it holds no such integer.
fn with_exponent_floats(value: &Value) -> Option<Value> {
    let mut floats = value.clone();
    exponent_floats(&mut floats).then_some(floats)
}

/// Turns each integer of `value` from [`EXPONENT_FLOAT_MIN`] up into a float; whether there
/// was one.
fn exponent_floats(value: &mut Value) -> bool {
    match value {
        Value::Number(number) => {
            let float = (number.is_i64() || number.is_u64())
                .then(|| number.as_f64())
                .flatten()
                .filter(|float| float.abs() >= EXPONENT_FLOAT_MIN)
                .and_then(serde_json::Number::from_f64);
            match float {
                Some(float) => {
                    *number = float;
                    true
                }
                None => false,
            }
        }
        // Every item turned, not only up to the first.
        Value::Array(items) => items
            .iter_mut()
            .map(exponent_floats)
            .fold(false, |a, b| a | b),
        Value::Object(entries) => entries
            .values_mut()
            .map(exponent_floats)
            .fold(false, |a, b| a | b),
        _ => false,
    }
}

/// A stored value as it is hashed: a float column's number as a float.
enum Hashed<'a> {
    Json(&'a Value),
    Float(f64),
}

impl<'a> Hashed<'a> {
    /// `value`, stored in a column of `shape`, as it is hashed.
    fn of(shape: ColumnShape, value: &'a Value) -> Self {
        match (shape, value) {
            (ColumnShape::Float, Value::Number(number)) => {
                Hashed::Float(number.as_f64().unwrap_or(f64::NAN))
            }
            // `to_jsonb` writes NaN and the infinities as text.
            (ColumnShape::Float, Value::String(text)) => match text.parse::<f64>() {
                Ok(float) => Hashed::Float(float),
                Err(_) => Hashed::Json(value),
            },
            (_, value) => Hashed::Json(value),
        }
    }
}

impl Serialize for Hashed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Hashed::Json(value) => value.serialize(serializer),
            Hashed::Float(float) => serializer.serialize_f64(*float),
        }
    }
}

/// The hashes a row's stored values may have (NULLs read as null, then as absent), and whether
/// it holds values whose hash only the type knows (nested objects, a flattened field's entries).
fn stored_hashes(
    table: &Layout,
    field_order: &[&str],
    stored: &Map<String, Value>,
) -> (Vec<ContentHash>, bool) {
    let model = table.model;
    let mut fields: Vec<(&str, Hashed<'_>)> = Vec::new();
    let mut nested = table.column_with(Content::Extra).is_some();
    for column in &table.columns {
        let (Content::Stored(_), Some(value)) = (column.content, stored.get(column.name)) else {
            continue;
        };
        let hashed = Hashed::of(column.shape, value);
        nested |= crate::hash::is_hashed_stored_field(model, column.name) && holds_object(value);
        fields.push((column.name, hashed));
    }
    let mut hashes = Vec::new();
    hashes.extend(crate::hash::stored_fields_hash(model, field_order, &fields).ok());
    if stored.values().any(Value::is_null) {
        fields.retain(|(_, value)| !matches!(value, Hashed::Json(Value::Null)));
        hashes.extend(crate::hash::stored_fields_hash(model, field_order, &fields).ok());
    }
    (hashes, nested)
}

/// Whether `value` holds an object at any depth.
fn holds_object(value: &Value) -> bool {
    match value {
        Value::Object(_) => true,
        Value::Array(items) => items.iter().any(holds_object),
        _ => false,
    }
}

/// The stored fields of a table read with a model given at run time, from its columns as the
/// database lists them (name and shape, in column order): every column but idem's own. `Err`
/// names a field of the model the table has no column for, with the table's columns.
pub(crate) fn columns_of_model(
    model: &Model,
    catalog: &[(String, ColumnShape)],
) -> Result<Vec<Column>, String> {
    if let Some(field) = model
        .fields()
        .iter()
        .find(|field| !catalog.iter().any(|(name, _)| name == field.stored_name()))
    {
        let names: Vec<&str> = catalog.iter().map(|(name, _)| name.as_str()).collect();
        return Err(format!(
            "the table has no column `{}` (its columns: {})",
            field.stored_name(),
            names.join(", ")
        ));
    }
    Ok(catalog
        .iter()
        .filter(|(name, _)| {
            name != ID_FIELD
                && name != model.hash_field()
                && !RESERVED_FIELDS.contains(&name.as_str())
        })
        .map(|(name, shape)| Column::new(crate::intern::name(name), *shape))
        .collect())
}

/// How a run-time adoption runs (`adopt_model` of the SQL stores).
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct AdoptOptions {
    /// Stop before the next row that would move once this many moved, leaving the table in a
    /// state the next run finishes: to bound the work of one call. Rows met that cannot move
    /// are still reported, so a run that is not `stopped` left nothing to move.
    pub max_documents: Option<u64>,
    /// Move rows even when the stored ones were written with another model than the one given
    /// (see [`crate::model_check`]): for a deliberate change of keys, timestamp or scheme. Off
    /// by default, when such a run is refused.
    pub ignore_model_check: bool,
    /// Move rows even when the table has columns that are not fields of the model given (see
    /// [`AuditReport::unknown_fields`](crate::AuditReport::unknown_fields)), leaving them out
    /// of the content hashes stored: they are no fields of the type. Off by default, when such
    /// a run is refused: a model that misses a field of the type would store hashes the type
    /// does not compute, and the next upsert of every row would rewrite it.
    pub allow_unknown_fields: bool,
}

impl AdoptOptions {
    /// Moves rows even when the stored ones match another model than the one given; see
    /// [`AdoptOptions::ignore_model_check`].
    pub fn ignoring_model_check(mut self) -> Self {
        self.ignore_model_check = true;
        self
    }

    /// Moves rows even when columns are not fields of the model given, leaving them out of the
    /// hashes; see [`AdoptOptions::allow_unknown_fields`].
    pub fn allowing_unknown_fields(mut self) -> Self {
        self.allow_unknown_fields = true;
        self
    }

    /// Stop after `documents` rows moved; see [`AdoptOptions::max_documents`].
    pub fn with_max_documents(mut self, documents: u64) -> Self {
        self.max_documents = Some(documents);
        self
    }
}
