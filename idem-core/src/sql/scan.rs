//! What a lookup needs of a document, without encoding its columns: the values of its guarded
//! and natural-key fields, once a pass over the rest has vouched that encoding the whole row
//! ([`super::row::PreparedRow::new`]) would succeed.
//!
//! An unchanged re-ingest settles most rows from a lookup that sends only ids, keys and hashes,
//! so building every column's text for them is wasted work: about half of the client's time in
//! one. The pass here walks what serde writes without building it, and answers `None` (prepare
//! the row whole, which says what is wrong) at the first value it cannot vouch for: a shape its
//! column does not take, a string holding U+0000, a NaN or an infinity, a map key that is not
//! text, a name idem writes itself, a field the table has no column for. It may refuse more
//! than the whole encoding does (that costs the row its shortcut, never its outcome); it must
//! never vouch for less, or a row stored unchanged would settle where a single upsert refuses
//! it. `tests` holds both passes to that on every shape the row encoding knows.

use std::fmt;

use serde::ser::{self, Serialize};
use serde_json::Value;

use super::json;
use super::layout::{Content, Layout};
use crate::column::ColumnShape;
use crate::model::Model;

/// The guarded and natural-key fields' values, by stored name, of a document the pass vouched
/// for; `None` if it could not.
pub(crate) fn picked_fields<T: Serialize + ?Sized>(
    doc: &T,
    table: &Layout,
) -> Option<Vec<(&'static str, Value)>> {
    let wanted: Vec<&'static str> = table
        .model
        .digested_fields()
        .chain(table.model.natural_key_fields())
        .map(|field| field.stored_name())
        .collect();
    let mut picked = Vec::with_capacity(wanted.len());
    doc.serialize(Top {
        table,
        wanted: &wanted,
        picked: &mut picked,
    })
    .ok()?;
    Some(picked)
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

/// The top of a document: a struct, or a map (a flattened field's).
struct Top<'p> {
    table: &'p Layout,
    wanted: &'p [&'static str],
    picked: &'p mut Vec<(&'static str, Value)>,
}

impl Top<'_> {
    fn entry<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), Unvouched> {
        let model: &Model = self.table.model;
        if model.is_reserved(name) {
            return Err(Unvouched);
        }
        if let Some(&wanted) = self.wanted.iter().find(|wanted| **wanted == name) {
            // A top-level NaN is kept apart by the whole encoding: not vouched for here.
            let value = json::to_json(value).map_err(|_| Unvouched)?;
            self.picked.retain(|(picked, _)| *picked != wanted);
            self.picked.push((wanted, value));
            return Ok(());
        }
        let kind = value.serialize(Check)?;
        let column = match self.table.column_named(name) {
            Some(index) => &self.table.columns[index],
            None if self.table.column_with(Content::Extra).is_some() => return Ok(()),
            None => return Err(Unvouched),
        };
        match column.content {
            Content::Stored(_) if !column.is_sent() || fits(column.shape, kind) => Ok(()),
            _ => Err(Unvouched),
        }
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

    fn serialize_bool(self, _v: bool) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_i8(self, _v: i8) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_i16(self, _v: i16) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_i32(self, _v: i32) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_u8(self, _v: u8) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_u16(self, _v: u16) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_u32(self, _v: u32) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_f32(self, _v: f32) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_char(self, _v: char) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_i64(self, _v: i64) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_u64(self, _v: u64) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_f64(self, _v: f64) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_str(self, _v: &str) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_none(self) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_unit(self) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _value: &T,
    ) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Unvouched> {
        Err(Unvouched)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Unvouched> {
        Err(Unvouched)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Unvouched> {
        Err(Unvouched)
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Unvouched> {
        Err(Unvouched)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Unvouched> {
        Err(Unvouched)
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
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Unvouched> {
        Err(Unvouched)
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
    match value.contains('\0') {
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

impl ser::SerializeSeq for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}

impl ser::SerializeTuple for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}

impl ser::SerializeTupleStruct for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}

impl ser::SerializeTupleVariant for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
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

impl ser::SerializeStruct for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}

impl ser::SerializeStructVariant for Check {
    type Ok = Kind;
    type Error = Unvouched;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Unvouched> {
        value.serialize(Check).map(drop)
    }
    fn end(self) -> Result<Kind, Unvouched> {
        Ok(Kind::Compound)
    }
}
