//! A map key as the text every store keeps it as, so that a map keyed by integers is stored,
//! hashed and guarded alike everywhere: for text, `char`, integers and `bool`, the text
//! serde_json writes for a JSON object's key. A float key is written as Rust prints the `f64`
//! (an `f32` widened first: `0.1f32` is `"0.10000000149011612"`, `1.0` is `"1"`), where
//! serde_json writes `"0.1"` and `"1.0"`; both read back as the same float, and every store
//! keeps the same text.

use std::fmt;

// Only BSON, whose names are text alone, needs every key of a value turned to text.
#[cfg(feature = "mongodb")]
pub(crate) mod text_keys;

use serde::ser::{self, Impossible, Serialize, Serializer};

/// `key` as text: text as it is, a number in decimal, `true` or `false`, a unit variant's name,
/// a newtype's inner key as that key. Any other key is refused.
pub(crate) fn key_text<K: Serialize + ?Sized>(key: &K) -> Result<String, KeyError> {
    key.serialize(KeyText)
}

/// Why a map key has no text.
#[derive(Debug)]
pub(crate) struct KeyError(String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

impl ser::Error for KeyError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        KeyError(message.to_string())
    }
}

fn refused() -> KeyError {
    KeyError("a map key must be a string, a number, a bool or a unit variant".to_owned())
}

/// Writes a map key as [`key_text`] says.
struct KeyText;

macro_rules! key_as_text {
    ($($method:ident($type:ty);)*) => {$(
        fn $method(self, value: $type) -> Result<String, KeyError> {
            Ok(value.to_string())
        }
    )*};
}

macro_rules! key_refused {
    ($($method:ident($($argument:ty),*) -> $result:ty;)*) => {$(
        fn $method(self, $(_: $argument),*) -> Result<$result, KeyError> {
            Err(refused())
        }
    )*};
}

impl Serializer for KeyText {
    type Ok = String;
    type Error = KeyError;
    type SerializeSeq = Impossible<String, KeyError>;
    type SerializeTuple = Impossible<String, KeyError>;
    type SerializeTupleStruct = Impossible<String, KeyError>;
    type SerializeTupleVariant = Impossible<String, KeyError>;
    type SerializeMap = Impossible<String, KeyError>;
    type SerializeStruct = Impossible<String, KeyError>;
    type SerializeStructVariant = Impossible<String, KeyError>;

    key_as_text! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_i128(i128);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_u128(u128);
        serialize_char(char);
        serialize_str(&str);
    }

    key_refused! {
        serialize_bytes(&[u8]) -> String;
        serialize_none() -> String;
        serialize_unit() -> String;
        serialize_unit_struct(&'static str) -> String;
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize)
            -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize)
            -> Self::SerializeStructVariant;
    }

    fn serialize_f32(self, value: f32) -> Result<String, KeyError> {
        self.serialize_f64(f64::from(value))
    }
    fn serialize_f64(self, value: f64) -> Result<String, KeyError> {
        match value.is_finite() {
            true => Ok(value.to_string()),
            false => Err(KeyError(format!("a map key of {value} has no text form"))),
        }
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<String, KeyError> {
        Err(refused())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, KeyError> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, KeyError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, KeyError> {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    #[derive(Serialize)]
    enum Shade {
        Dark,
        Tinted(u8),
    }

    #[derive(Serialize)]
    struct Label(u32);

    #[test]
    fn a_key_is_the_text_serde_json_writes_for_it() {
        assert_eq!(key_text("plain").unwrap(), "plain");
        assert_eq!(key_text(&-7_i64).unwrap(), "-7");
        assert_eq!(key_text(&u128::MAX).unwrap(), u128::MAX.to_string());
        assert_eq!(key_text(&1.5_f32).unwrap(), "1.5");
        assert_eq!(key_text(&true).unwrap(), "true");
        assert_eq!(key_text(&'x').unwrap(), "x");
        assert_eq!(key_text(&Shade::Dark).unwrap(), "Dark");
        assert_eq!(key_text(&Label(3)).unwrap(), "3");
    }

    #[test]
    fn a_key_with_no_text_is_refused() {
        for refused in [
            key_text(&[1_u8]),
            key_text(&Some(1)),
            key_text(&()),
            key_text(&Shade::Tinted(1)),
        ] {
            let message = refused.unwrap_err().to_string();
            assert!(message.starts_with("a map key must be"), "{message}");
        }
        let message = key_text(&f64::NAN).unwrap_err().to_string();
        assert_eq!(message, "a map key of NaN has no text form");
    }
}
