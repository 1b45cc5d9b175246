//! The canonical serializer: each value's tag and payload, written to a [`Sink`] as its
//! `Serialize` impl calls for them, sequences, structs and maps opened into [`super::compound`].

use std::fmt;

use serde::ser::{self, Serialize};

use super::compound::{Map, Sequence, Struct};
use super::sink::Sink;
use super::tags::{
    BOOL, BYTES, CANONICAL_NAN, FLOAT, LARGE_UNSIGNED, NULL, SEQ_START, STRUCT_START, TEXT,
    UNIT_VARIANT, VARIANT,
};
use crate::model::Model;

/// An error raised by a value's own `Serialize` impl. A `Box<str>`, so every `Result` the
/// encoder returns fits two registers.
#[derive(Debug)]
pub(super) struct EncodeError(Box<str>);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

impl ser::Error for EncodeError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        EncodeError(message.to_string().into_boxed_str())
    }
}

impl From<EncodeError> for String {
    fn from(error: EncodeError) -> String {
        error.0.into_string()
    }
}

/// The canonical serializer. `top_level` is set for the document itself, whose volatile fields
/// and hash field are left out; nested values have it unset. `unique_names` is set all through a
/// document: a map (a struct with a flattened field among them) that writes one text key twice
/// cannot be stored, since a stored document keeps one value per name, and is refused.
pub(super) struct Encoder<'s, S: Sink> {
    pub(super) sink: &'s mut S,
    pub(super) top_level: Option<&'s Model>,
    pub(super) unique_names: bool,
}

impl<S: Sink> Encoder<'_, S> {
    #[inline(always)]
    fn text(&mut self, text: &str) {
        write_text(self.sink, TEXT, text.as_bytes());
    }

    #[inline(always)]
    fn integer(self, value: i128) -> Result<(), EncodeError> {
        self.sink.write_integer(value);
        Ok(())
    }
}

#[inline(always)]
pub(super) fn write_text<S: Sink>(sink: &mut S, tag: u8, bytes: &[u8]) {
    sink.write_tagged(tag, bytes);
}

pub(super) fn nested<S: Sink>(sink: &mut S, unique_names: bool) -> Encoder<'_, S> {
    Encoder {
        sink,
        top_level: None,
        unique_names,
    }
}

impl<'s, S: Sink> ser::Serializer for Encoder<'s, S> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Sequence<'s, S>;
    type SerializeTuple = Sequence<'s, S>;
    type SerializeTupleStruct = Sequence<'s, S>;
    type SerializeTupleVariant = Sequence<'s, S>;
    type SerializeMap = Map<'s, S>;
    type SerializeStruct = Struct<'s, S>;
    type SerializeStructVariant = Struct<'s, S>;

    fn serialize_bool(self, value: bool) -> Result<(), EncodeError> {
        self.sink.write(&[BOOL, u8::from(value)]);
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i16(self, value: i16) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i32(self, value: i32) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i64(self, value: i64) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_i128(self, value: i128) -> Result<(), EncodeError> {
        self.integer(value)
    }

    fn serialize_u8(self, value: u8) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u16(self, value: u16) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u32(self, value: u32) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u64(self, value: u64) -> Result<(), EncodeError> {
        self.integer(value.into())
    }

    fn serialize_u128(self, value: u128) -> Result<(), EncodeError> {
        match i128::try_from(value) {
            Ok(fits) => self.integer(fits),
            Err(_) => {
                self.sink.write(&[LARGE_UNSIGNED]);
                self.sink.write(&value.to_be_bytes());
                Ok(())
            }
        }
    }

    fn serialize_f32(self, value: f32) -> Result<(), EncodeError> {
        self.serialize_f64(value.into())
    }

    fn serialize_f64(self, value: f64) -> Result<(), EncodeError> {
        let bits = if value.is_nan() {
            CANONICAL_NAN
        } else if value == 0.0 {
            0
        } else {
            value.to_bits()
        };
        self.sink.write(&[FLOAT]);
        self.sink.write(&bits.to_be_bytes());
        Ok(())
    }

    fn serialize_char(mut self, value: char) -> Result<(), EncodeError> {
        self.text(value.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }

    fn serialize_str(mut self, value: &str) -> Result<(), EncodeError> {
        self.text(value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), EncodeError> {
        write_text(self.sink, BYTES, value);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), EncodeError> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), EncodeError> {
        self.sink.write(&[NULL]);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), EncodeError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), EncodeError> {
        self.sink.write(&[UNIT_VARIANT]);
        self.text(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Sequence<'s, S>, EncodeError> {
        self.sink.write(&[SEQ_START]);
        Ok(Sequence {
            sink: self.sink,
            unique_names: self.unique_names,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Sequence<'s, S>, EncodeError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Sequence<'s, S>, EncodeError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Sequence<'s, S>, EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        self.serialize_seq(Some(len))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Map<'s, S>, EncodeError> {
        // The hint is the exact entry count for std maps; capped, since any impl can give one.
        let entries = len.unwrap_or(0).min(1024);
        Ok(Map {
            sink: self.sink,
            top_level: self.top_level,
            unique_names: self.unique_names,
            buffer: Vec::new(),
            entries: Vec::with_capacity(entries),
        })
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Struct<'s, S>, EncodeError> {
        self.sink.write(&[STRUCT_START]);
        Ok(Struct {
            sink: self.sink,
            top_level: self.top_level,
            unique_names: self.unique_names,
        })
    }

    fn serialize_struct_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Struct<'s, S>, EncodeError> {
        self.sink.write(&[VARIANT]);
        self.text(variant);
        self.sink.write(&[STRUCT_START]);
        Ok(Struct {
            sink: self.sink,
            top_level: None,
            unique_names: self.unique_names,
        })
    }
}
