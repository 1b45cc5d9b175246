//! What serde writes, as the JSON a row's columns hold: `serde_json::to_value` without its one
//! silent loss. `serde_json` turns NaN and the infinities into `null`, so a reading of NaN would
//! be stored as a missing value, a frozen NaN could later be set to anything, and an unchanged
//! document would compare as changed. Here a non-finite float is never lost: at the top of a
//! document it is kept apart (a `double precision` column holds it), anywhere else it is an
//! error naming where it was found (JSON, hence `jsonb`, has no such number).

use serde::ser::{self, Serialize};

use crate::map_key::key_text;
use crate::push::path_step;
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt;

/// Why a value has no JSON form.
#[derive(Debug)]
pub(crate) enum JsonError {
    /// A NaN or an infinity, at `path` (`.field`, `[index]` and `["key"]` steps from the top).
    NonFinite { path: String, value: f64 },
    /// A string or map key holding U+0000, at `path`: PostgreSQL text and jsonb cannot store it.
    Nul { path: String },
    /// Anything else serde or the value reported.
    Other(String),
}

impl JsonError {
    /// The error as the message of [`crate::ErrorKind::Serialize`].
    pub fn message(&self) -> String {
        match self {
            JsonError::NonFinite { path, value } => format!(
                "{} holds {}, which a SQL store keeps only in a float column of its own \
                 (PostgreSQL's double precision, SQLite's REAL), not inside jsonb or JSON text",
                shown_path(path),
                show_float(*value)
            ),
            JsonError::Nul { path } => format!(
                "{} holds the character U+0000, which the SQL stores do not keep (PostgreSQL text and \
                 jsonb refuse it, SQLite's text functions end at it)",
                shown_path(path)
            ),
            JsonError::Other(message) => message.clone(),
        }
    }

    /// The error met one level further down, under `step`: paths are built on the way out,
    /// so a value that serializes pays nothing for them.
    fn under(self, step: impl FnOnce() -> String) -> Self {
        match self {
            JsonError::NonFinite { path, value } => JsonError::NonFinite {
                path: step() + &path,
                value,
            },
            JsonError::Nul { path } => JsonError::Nul {
                path: step() + &path,
            },
            other => other,
        }
    }
}

/// Where a value is, for a message: `field nested.x`, or `the value` at the top.
fn shown_path(path: &str) -> String {
    match path.strip_prefix('.').unwrap_or(path) {
        "" => "the value".to_owned(),
        path => format!("field {path}"),
    }
}

/// Whether `text` holds U+0000, which neither PostgreSQL's text nor SQLite's text functions
/// keep.
pub(crate) fn holds_nul(text: &str) -> bool {
    memchr::memchr(0, text.as_bytes()).is_some()
}

/// `text` as a JSON string, unless it holds U+0000.
fn string(text: &str) -> Result<Value, JsonError> {
    if holds_nul(text) {
        return Err(JsonError::Nul {
            path: String::new(),
        });
    }
    Ok(Value::String(text.to_owned()))
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for JsonError {}

impl ser::Error for JsonError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        JsonError::Other(message.to_string())
    }
}

/// A float as PostgreSQL writes it in a `double precision` column (`NaN`, `Infinity`).
pub(crate) fn show_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "Infinity".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Infinity".to_owned()
    } else {
        value.to_string()
    }
}

/// `value` as JSON; any non-finite float in it is an error naming its path.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Value, JsonError> {
    value.serialize(Json::NESTED)
}

/// A document's entries as JSON, with the top-level fields whose value is a non-finite float
/// (bare or in `Some`) kept apart as (stored name, value) and `null` in their place. A
/// non-finite float deeper down is an error naming its path.
pub(crate) fn to_document<T: Serialize + ?Sized>(
    doc: &T,
) -> Result<(Value, Vec<(String, f64)>), JsonError> {
    let kept = RefCell::new(Vec::new());
    let value = doc.serialize(Json { kept: Some(&kept) })?;
    Ok((value, kept.into_inner()))
}

/// Serializes one value as JSON. At the top of a document, `kept` collects the fields holding a
/// non-finite float; below it is `None`.
#[derive(Clone, Copy)]
struct Json<'k> {
    kept: Option<&'k Kept>,
}

/// The top-level fields holding a non-finite float.
type Kept = RefCell<Vec<(String, f64)>>;

impl Json<'_> {
    const NESTED: Json<'static> = Json { kept: None };
}

fn float(value: f64) -> Result<Value, JsonError> {
    match Number::from_f64(value) {
        Some(number) => Ok(Value::Number(number)),
        None => Err(JsonError::NonFinite {
            path: String::new(),
            value,
        }),
    }
}

impl<'k> ser::Serializer for Json<'k> {
    type Ok = Value;
    type Error = JsonError;
    type SerializeSeq = Sequence;
    type SerializeTuple = Sequence;
    type SerializeTupleStruct = Sequence;
    type SerializeTupleVariant = Variant<Sequence>;
    type SerializeMap = Object<'k>;
    type SerializeStruct = Object<'k>;
    type SerializeStructVariant = Variant<Object<'k>>;

    fn serialize_bool(self, v: bool) -> Result<Value, JsonError> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<Value, JsonError> {
        serde_json::to_value(v).map_err(|error| JsonError::Other(error.to_string()))
    }
    fn serialize_u8(self, v: u8) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, JsonError> {
        Ok(Value::from(v))
    }
    fn serialize_u128(self, v: u128) -> Result<Value, JsonError> {
        serde_json::to_value(v).map_err(|error| JsonError::Other(error.to_string()))
    }
    fn serialize_f32(self, v: f32) -> Result<Value, JsonError> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, JsonError> {
        float(v)
    }
    fn serialize_char(self, v: char) -> Result<Value, JsonError> {
        string(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Value, JsonError> {
        string(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, JsonError> {
        Ok(Value::Array(
            v.iter().map(|&byte| Value::from(byte)).collect(),
        ))
    }
    fn serialize_none(self) -> Result<Value, JsonError> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, JsonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, JsonError> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, JsonError> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Value, JsonError> {
        Ok(Value::String(variant.to_owned()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Value, JsonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, JsonError> {
        let inner = value
            .serialize(Json::NESTED)
            .map_err(|error| error.under(|| path_step(variant)))?;
        let mut object = Map::new();
        object.insert(variant.to_owned(), inner);
        Ok(Value::Object(object))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Sequence, JsonError> {
        Ok(Sequence(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<Sequence, JsonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Sequence, JsonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Variant<Sequence>, JsonError> {
        Ok(Variant {
            variant,
            inner: Sequence(Vec::with_capacity(len)),
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'k>, JsonError> {
        Ok(Object::new(self.kept))
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Object<'k>, JsonError> {
        Ok(Object::new(self.kept))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Variant<Object<'k>>, JsonError> {
        Ok(Variant {
            variant,
            inner: Object::new(None),
        })
    }
}

/// The elements of a sequence or tuple.
struct Sequence(Vec<Value>);

impl Sequence {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        let index = self.0.len();
        let element = value
            .serialize(Json::NESTED)
            .map_err(|error| error.under(|| format!("[{index}]")))?;
        self.0.push(element);
        Ok(())
    }
}

impl ser::SerializeSeq for Sequence {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTuple for Sequence {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTupleStruct for Sequence {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Value::Array(self.0))
    }
}

/// The entries of a map or struct, a map key waiting for its value, and at the top of a
/// document where to keep a field's non-finite float.
struct Object<'k> {
    entries: Map<String, Value>,
    key: Option<String>,
    kept: Option<&'k Kept>,
}

impl<'k> Object<'k> {
    fn new(kept: Option<&'k Kept>) -> Self {
        Object {
            entries: Map::new(),
            key: None,
            kept,
        }
    }

    fn insert<T: Serialize + ?Sized>(&mut self, key: String, value: &T) -> Result<(), JsonError> {
        let value = match (value.serialize(Json::NESTED), self.kept) {
            (Ok(value), _) => value,
            // The field is itself the float: its own column keeps it.
            (Err(JsonError::NonFinite { path, value }), Some(kept)) if path.is_empty() => {
                kept.borrow_mut().push((key.clone(), value));
                Value::Null
            }
            (Err(error), _) => return Err(error.under(|| path_step(&key))),
        };
        self.entries.insert(key, value);
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), JsonError> {
        self.key = Some(map_key(key)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| JsonError::Other("a map value was written before its key".into()))?;
        self.insert(key, value)
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Value::Object(self.entries))
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        self.insert(key.to_owned(), value)
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Value::Object(self.entries))
    }
}

/// A tuple or struct variant: `{"Variant": …}`, as serde_json writes it.
struct Variant<Inner> {
    variant: &'static str,
    inner: Inner,
}

impl<Inner> Variant<Inner> {
    fn wrap(variant: &'static str, value: Value) -> Value {
        let mut object = Map::new();
        object.insert(variant.to_owned(), value);
        Value::Object(object)
    }
}

impl ser::SerializeTupleVariant for Variant<Sequence> {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        let variant = self.variant;
        self.inner
            .push(value)
            .map_err(|error| error.under(|| path_step(variant)))
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Self::wrap(self.variant, Value::Array(self.inner.0)))
    }
}

impl ser::SerializeStructVariant for Variant<Object<'_>> {
    type Ok = Value;
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        let variant = self.variant;
        self.inner
            .insert(key.to_owned(), value)
            .map_err(|error| error.under(|| path_step(variant)))
    }
    fn end(self) -> Result<Value, JsonError> {
        Ok(Self::wrap(self.variant, Value::Object(self.inner.entries)))
    }
}

/// `key` as the string a JSON object's key is ([`crate::map_key::key_text`]), unless it holds
/// U+0000.
pub(crate) fn map_key<T: Serialize + ?Sized>(key: &T) -> Result<String, JsonError> {
    let key = key_text(key).map_err(|error| JsonError::Other(error.to_string()))?;
    if holds_nul(&key) {
        return Err(JsonError::Nul {
            path: path_step(&key),
        });
    }
    Ok(key)
}

/// One stored field read back: JSON, or a float JSON cannot hold (NaN, an infinity).
pub(crate) enum Cell {
    Json(Value),
    Float(f64),
}

/// Deserializes `T` from a row's stored fields.
pub(crate) fn from_cells<T: serde::de::DeserializeOwned>(
    cells: Vec<(String, Cell)>,
) -> Result<T, String> {
    let cells: serde::de::value::MapDeserializer<'_, _, serde_json::Error> =
        serde::de::value::MapDeserializer::new(cells.into_iter());
    crate::read::read_as(cells)
}

impl<'de> serde::de::IntoDeserializer<'de, serde_json::Error> for Cell {
    type Deserializer = Cell;

    fn into_deserializer(self) -> Cell {
        self
    }
}

/// Each `deserialize_*` of a [`Cell`]: JSON deserializes as itself, a float as a float.
macro_rules! cell_methods {
    ($($method:ident($($argument:ident: $type:ty),*);)*) => {$(
        fn $method<V: serde::de::Visitor<'de>>(
            self,
            $($argument: $type,)*
            visitor: V,
        ) -> Result<V::Value, serde_json::Error> {
            match self {
                Cell::Json(value) => value.$method($($argument,)* visitor),
                Cell::Float(float) => visitor.visit_f64(float),
            }
        }
    )*};
}

impl<'de> serde::Deserializer<'de> for Cell {
    type Error = serde_json::Error;

    cell_methods! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        match self {
            Cell::Json(value) => value.deserialize_option(visitor),
            float @ Cell::Float(_) => visitor.visit_some(float),
        }
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        match self {
            Cell::Json(value) => value.deserialize_newtype_struct(name, visitor),
            float @ Cell::Float(_) => visitor.visit_newtype_struct(float),
        }
    }
}
