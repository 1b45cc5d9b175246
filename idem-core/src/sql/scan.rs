//! A document's row without the intermediate JSON: the values of its guarded and natural-key
//! fields (all a lookup and a judgement read), and, for a row to be written, the text of each
//! column straight from what serde writes, once a pass over it has vouched that the encoding
//! through JSON ([`super::row::PreparedRow::new`]'s, which says what is wrong with a document)
//! would give the same.
//!
//! An unchanged re-ingest settles most rows from a lookup that sends only ids, keys and hashes,
//! so building every column's text for them is wasted work; and building a JSON value of every
//! field, then its text, was most of the time of preparing a row to write. The pass here walks
//! what serde writes and answers `None` (encode through JSON) at the first value it cannot vouch
//! for: a shape its column does not take, a string holding U+0000, a NaN or an infinity, a map
//! key that is not text, a name idem writes itself, a field the table has no column for. It may
//! give up on more than the JSON encoding refuses (that costs the row its shortcut, never its
//! outcome); it must never vouch for less, or a row stored unchanged would settle where a
//! single upsert refuses it, nor encode a column otherwise. `tests/tests/stores/light_rows.rs`
//! holds it to both on every shape the row encoding knows and on generated documents.

use std::fmt;

use serde::ser::{self, Serialize};
use serde_json::{Map, Value};

use super::json;
use super::layout::{Content, Layout};
use super::row::{write_column_text, Discard};
use super::texts::ColumnTexts;
use crate::column::ColumnShape;
use crate::model::Model;

/// What the pass took of a document it vouched for.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// The guarded and natural-key fields' values, by stored name.
    pub picked: Vec<(&'static str, Value)>,
    /// For a whole row: the text of each sent column serde wrote a value for, in
    /// [`Layout::sent`] order (idem's own columns are the caller's to fill).
    pub columns: ColumnTexts,
    /// For a whole row: the entries no column takes (a flattened field's), for the extra
    /// column.
    pub extra: Map<String, Value>,
}

/// The pass over `doc` for `table`: with `whole`, also the columns' texts; `None` if it could
/// not vouch for the document.
pub(crate) fn walk<T: Serialize + ?Sized>(doc: &T, table: &Layout, whole: bool) -> Option<Walked> {
    let wanted = &table.picked_names;
    let mut walked = Walked {
        picked: Vec::with_capacity(wanted.len()),
        columns: match whole {
            true => ColumnTexts::new(table.sent.len(), &table.row_sizes),
            false => ColumnTexts::default(),
        },
        extra: Map::new(),
    };
    doc.serialize(Top {
        table,
        wanted,
        whole,
        walked: &mut walked,
    })
    .ok()?;
    Some(walked)
}

/// The pass could not vouch for the value: the whole encoding decides.
#[derive(Debug)]
pub(crate) struct Unvouched;

impl fmt::Display for Unvouched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not vouched for")
    }
}

impl std::error::Error for Unvouched {}

impl ser::Error for Unvouched {
    fn custom<M: fmt::Display>(_message: M) -> Self {
        Unvouched
    }
}

/// What a value is, as a column's text would take it ([`super::row::column_text`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    Text,
    /// An integer in `i64`'s range.
    Integer,
    /// Any other finite number.
    Number,
    Boolean,
    /// A sequence, map, struct or variant with content.
    Compound,
}

/// Whether a column of `shape` takes a value of `kind`, as [`super::row::column_text`] does.
fn fits(shape: ColumnShape, kind: Kind) -> bool {
    match (shape, kind) {
        (ColumnShape::Structured | ColumnShape::Flattened, _) | (_, Kind::Null) => true,
        (ColumnShape::Text, kind) => kind == Kind::Text,
        (ColumnShape::Integer, kind) => kind == Kind::Integer,
        (ColumnShape::Float, kind) => matches!(kind, Kind::Integer | Kind::Number),
        (ColumnShape::Boolean, kind) => kind == Kind::Boolean,
    }
}

/// `Serializer` methods that give up on what they are handed: the pass does not vouch for it.
/// Each is `name(argument types) -> what it would return`, with `<T>` for a value of any
/// `Serialize` type.
macro_rules! give_up {
    ($($method:ident $(<$value:ident>)? ($($argument:ty),*) -> $ok:ty;)*) => {
        $(
            fn $method$(<$value: Serialize + ?Sized>)?(
                self,
                $(_: $argument),*
            ) -> Result<$ok, Unvouched> {
                Err(Unvouched)
            }
        )*
    };
}

/// The top of a document: a struct, or a map (a flattened field's).
struct Top<'p> {
    table: &'p Layout,
    wanted: &'p [&'static str],
    whole: bool,
    walked: &'p mut Walked,
}

impl Top<'_> {
    fn entry<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), Unvouched> {
        let model: &Model = self.table.model;
        if model.is_reserved(name) {
            return Err(Unvouched);
        }
        let table = self.table;
        let index = table.column_named(name);
        let has_extra = table.column_with(Content::Extra).is_some();
        // Where the value goes in a whole row: the position of its column among the sent ones.
        let sent_at = |index: usize| {
            let column = &table.columns[index];
            match (column.content, column.is_sent()) {
                (Content::Stored(_), true) => table.sent.iter().position(|&sent| sent == index),
                _ => None,
            }
        };
        if let Some(&wanted) = self.wanted.iter().find(|wanted| **wanted == name) {
            // A top-level NaN is kept apart by the JSON encoding: not vouched for here.
            let value = json::to_json(value).map_err(|_| Unvouched)?;
            // As its column takes it, in either pass: the light one sends keys as these texts.
            match index {
                Some(index) => {
                    let at = sent_at(index).ok_or(Unvouched)?;
                    let column = &table.columns[index];
                    match self.whole {
                        true => self
                            .walked
                            .columns
                            .write(at, |out| write_column_text(column, Some(&value), out)),
                        false => write_column_text(column, Some(&value), &mut Discard).map(drop),
                    }
                    .map_err(|_| Unvouched)?;
                }
                None if has_extra => {
                    if self.whole {
                        self.walked.extra.insert(name.to_owned(), value.clone());
                    }
                }
                None => return Err(Unvouched),
            }
            self.walked.picked.retain(|(picked, _)| *picked != wanted);
            self.walked.picked.push((wanted, value));
            return Ok(());
        }
        let Some(index) = index else {
            if !has_extra {
                return Err(Unvouched);
            }
            match self.whole {
                true => {
                    let value = json::to_json(value).map_err(|_| Unvouched)?;
                    self.walked.extra.insert(name.to_owned(), value);
                }
                false => drop(value.serialize(Check)?),
            }
            return Ok(());
        };
        let column = &table.columns[index];
        if !matches!(column.content, Content::Stored(_)) {
            return Err(Unvouched);
        }
        if !column.is_sent() {
            // A pushed list: never written by an upsert, but encoded all the same.
            return value.serialize(Check).map(drop);
        }
        if !self.whole {
            let kind = value.serialize(Check)?;
            return match fits(column.shape, kind) {
                true => Ok(()),
                false => Err(Unvouched),
            };
        }
        let at = sent_at(index).ok_or(Unvouched)?;
        self.walked.columns.write(at, |out| match column.shape {
            ColumnShape::Structured | ColumnShape::Flattened => {
                let value = json::to_json(value).map_err(|_| Unvouched)?;
                write_column_text(column, Some(&value), out).map_err(|_| Unvouched)
            }
            shape => value.serialize(Scalar { shape, out }),
        })
    }
}

impl<'p> ser::Serializer for Top<'p> {
    type Ok = ();
    type Error = Unvouched;
    type SerializeSeq = ser::Impossible<(), Unvouched>;
    type SerializeTuple = ser::Impossible<(), Unvouched>;
    type SerializeTupleStruct = ser::Impossible<(), Unvouched>;
    type SerializeTupleVariant = ser::Impossible<(), Unvouched>;
    type SerializeMap = TopMap<'p>;
    type SerializeStruct = Self;
    type SerializeStructVariant = ser::Impossible<(), Unvouched>;

    give_up! {
        serialize_bool(bool) -> ();
        serialize_i8(i8) -> ();
        serialize_i16(i16) -> ();
        serialize_i32(i32) -> ();
        serialize_i64(i64) -> ();
        serialize_u8(u8) -> ();
        serialize_u16(u16) -> ();
        serialize_u32(u32) -> ();
        serialize_u64(u64) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_char(char) -> ();
        serialize_str(&str) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_some<T>(&T) -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_unit_variant(&'static str, u32, &'static str) -> ();
        serialize_newtype_struct<T>(&'static str, &T) -> ();
        serialize_newtype_variant<T>(&'static str, u32, &'static str, &T) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<TopMap<'p>, Unvouched> {
        Ok(TopMap {
            top: self,
            key: None,
        })
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, Unvouched> {
        Ok(self)
    }
}

impl ser::SerializeStruct for Top<'_> {
    type Ok = ();
    type Error = Unvouched;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unvouched> {
        self.entry(key, value)
    }
    fn end(self) -> Result<(), Unvouched> {
        Ok(())
    }
}

/// The top of a document serde writes as a map: a struct with a flattened field.
struct TopMap<'p> {
    top: Top<'p>,
    key: Option<String>,
}

impl ser::SerializeMap for TopMap<'_> {
    type Ok = ();
    type Error = Unvouched;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unvouched> {
        self.key = Some(json::map_key(key).map_err(|_| Unvouched)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        let key = self.key.take().ok_or(Unvouched)?;
        self.top.entry(&key, value)
    }
    fn end(self) -> Result<(), Unvouched> {
        Ok(())
    }
}

/// Checks a value below the top against [`super::json`]'s rules, without building it.
struct Check;

fn integer(fits_i64: bool) -> Result<Kind, Unvouched> {
    Ok(match fits_i64 {
        true => Kind::Integer,
        false => Kind::Number,
    })
}

fn float(value: f64) -> Result<Kind, Unvouched> {
    match value.is_finite() {
        true => Ok(Kind::Number),
        false => Err(Unvouched),
    }
}

fn text(value: &str) -> Result<Kind, Unvouched> {
    match super::json::holds_nul(value) {
        true => Err(Unvouched),
        false => Ok(Kind::Text),
    }
}

impl ser::Serializer for Check {
    type Ok = Kind;
    type Error = Unvouched;
    type SerializeSeq = Check;
    type SerializeTuple = Check;
    type SerializeTupleStruct = Check;
    type SerializeTupleVariant = Check;
    type SerializeMap = Check;
    type SerializeStruct = Check;
    type SerializeStructVariant = Check;

    fn serialize_bool(self, _v: bool) -> Result<Kind, Unvouched> {
        Ok(Kind::Boolean)
    }
    fn serialize_i8(self, _v: i8) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_i16(self, _v: i16) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_i32(self, _v: i32) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_i64(self, _v: i64) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_i128(self, v: i128) -> Result<Kind, Unvouched> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(_), _) => integer(true),
            (_, Ok(_)) => integer(false),
            _ => Err(Unvouched),
        }
    }
    fn serialize_u8(self, _v: u8) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_u16(self, _v: u16) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_u32(self, _v: u32) -> Result<Kind, Unvouched> {
        integer(true)
    }
    fn serialize_u64(self, v: u64) -> Result<Kind, Unvouched> {
        integer(i64::try_from(v).is_ok())
    }
    fn serialize_u128(self, v: u128) -> Result<Kind, Unvouched> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(_), _) => integer(true),
            (_, Ok(_)) => integer(false),
            _ => Err(Unvouched),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<Kind, Unvouched> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Kind, Unvouched> {
        float(v)
    }
    fn serialize_char(self, v: char) -> Result<Kind, Unvouched> {
        text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Kind, Unvouched> {
        text(v)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
    fn serialize_none(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Kind, Unvouched> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Kind, Unvouched> {
        Ok(Kind::Null)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<Kind, Unvouched> {
        Ok(Kind::Text)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Kind, Unvouched> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<Kind, Unvouched> {
        value.serialize(Check)?;
        Ok(Kind::Compound)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Check, Unvouched> {
        Ok(Check)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Check, Unvouched> {
        Ok(Check)
    }
}

/// A compound value below the top: each element or field checked, keys aside.
macro_rules! checks_each {
    ($($compound:ident::$method:ident($($key:ty)?);)*) => {
        $(
            impl ser::$compound for Check {
                type Ok = Kind;
                type Error = Unvouched;
                fn $method<T: Serialize + ?Sized>(
                    &mut self,
                    $(_: $key,)?
                    value: &T,
                ) -> Result<(), Unvouched> {
                    value.serialize(Check).map(drop)
                }
                fn end(self) -> Result<Kind, Unvouched> {
                    Ok(Kind::Compound)
                }
            }
        )*
    };
}

checks_each! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(&'static str);
    SerializeStructVariant::serialize_field(&'static str);
}

impl ser::SerializeMap for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unvouched> {
        json::map_key(key).map(drop).map_err(|_| Unvouched)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}

/// Writes the text of a value in a column of a scalar shape to `out`, as [`write_column_text`]
/// writes the value's JSON: `false` (nothing written) for a null.
struct Scalar<'o> {
    shape: ColumnShape,
    out: &'o mut String,
}

impl Scalar<'_> {
    fn integer(self, value: impl fmt::Display, fits_i64: bool) -> Result<bool, Unvouched> {
        match (self.shape, fits_i64) {
            (ColumnShape::Integer, true) | (ColumnShape::Float, _) => self.display(value),
            _ => Err(Unvouched),
        }
    }

    fn float(self, value: f64) -> Result<bool, Unvouched> {
        match (self.shape, serde_json::Number::from_f64(value)) {
            (ColumnShape::Float, Some(number)) => self.display(number),
            _ => Err(Unvouched),
        }
    }

    fn text(self, value: &str) -> Result<bool, Unvouched> {
        match self.shape == ColumnShape::Text && !super::json::holds_nul(value) {
            true => {
                self.out.push_str(value);
                Ok(true)
            }
            false => Err(Unvouched),
        }
    }

    fn display(self, value: impl fmt::Display) -> Result<bool, Unvouched> {
        use fmt::Write as _;
        // Writing to a `String` cannot fail.
        let _ = write!(self.out, "{value}");
        Ok(true)
    }
}

type NoScalar = ser::Impossible<bool, Unvouched>;

impl<'o> ser::Serializer for Scalar<'o> {
    type Ok = bool;
    type Error = Unvouched;
    type SerializeSeq = NoScalar;
    type SerializeTuple = NoScalar;
    type SerializeTupleStruct = NoScalar;
    type SerializeTupleVariant = NoScalar;
    type SerializeMap = NoScalar;
    type SerializeStruct = NoScalar;
    type SerializeStructVariant = NoScalar;

    fn serialize_bool(self, v: bool) -> Result<bool, Unvouched> {
        match self.shape {
            ColumnShape::Boolean => self.display(v),
            _ => Err(Unvouched),
        }
    }
    fn serialize_i8(self, v: i8) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_i16(self, v: i16) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_i32(self, v: i32) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_i64(self, v: i64) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_u8(self, v: u8) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_u16(self, v: u16) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_u32(self, v: u32) -> Result<bool, Unvouched> {
        self.integer(v, true)
    }
    fn serialize_u64(self, v: u64) -> Result<bool, Unvouched> {
        self.integer(v, i64::try_from(v).is_ok())
    }
    fn serialize_i128(self, v: i128) -> Result<bool, Unvouched> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(_), _) => self.integer(v, true),
            (_, Ok(_)) => self.integer(v, false),
            _ => Err(Unvouched),
        }
    }
    fn serialize_u128(self, v: u128) -> Result<bool, Unvouched> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(_), _) => self.integer(v, true),
            (_, Ok(_)) => self.integer(v, false),
            _ => Err(Unvouched),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<bool, Unvouched> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<bool, Unvouched> {
        self.float(v)
    }
    fn serialize_char(self, v: char) -> Result<bool, Unvouched> {
        self.text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<bool, Unvouched> {
        self.text(v)
    }
    fn serialize_none(self) -> Result<bool, Unvouched> {
        Ok(false)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<bool, Unvouched> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<bool, Unvouched> {
        Ok(false)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<bool, Unvouched> {
        Ok(false)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<bool, Unvouched> {
        self.text(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<bool, Unvouched> {
        value.serialize(self)
    }
    give_up! {
        serialize_bytes(&[u8]) -> bool;
        serialize_newtype_variant<T>(&'static str, u32, &'static str, &T) -> bool;
        serialize_seq(Option<usize>) -> NoScalar;
        serialize_tuple(usize) -> NoScalar;
        serialize_tuple_struct(&'static str, usize) -> NoScalar;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> NoScalar;
        serialize_map(Option<usize>) -> NoScalar;
        serialize_struct(&'static str, usize) -> NoScalar;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> NoScalar;
    }
}
