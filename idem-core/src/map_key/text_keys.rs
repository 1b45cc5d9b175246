//! Every map key of a value written as text and read back from it, however deep the map: for a
//! store whose documents' names can only be text (BSON's), so that a map keyed by integers,
//! booleans or unit variants is stored as the SQL stores' JSON stores it (each key as
//! [`key_text`] writes it: `1`, `-7`, `true`) and read back into the key's type from that text
//! as serde_json reads it.
//!
//! The wrappers change map keys alone and hand everything else to the serializer or
//! deserializer they wrap as it is. The content hash comes from the type's value, and the
//! guards' digests from the stored values, which hold the same text keys on every store: a map
//! with integer keys gets the same hash and digests on MongoDB as on PostgreSQL and SQLite.

use std::fmt;

use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess,
    SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::ser::{self, Serialize, Serializer};

use super::key_text;

/// A value whose maps write their keys as text, however deep they are.
pub(crate) struct TextKeys<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> Serialize for TextKeys<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Writer(serializer))
    }
}

/// A map key, written as its text ([`key_text`]), as the SQL stores write it into their JSON.
struct KeyText<'a, K: ?Sized>(&'a K);

impl<K: Serialize + ?Sized> Serialize for KeyText<'_, K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = key_text(self.0).map_err(ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

/// Hands everything to the serializer it wraps, each value inside as [`TextKeys`] and each map
/// key as [`KeyText`]. It also wraps that serializer's compound serializers.
struct Writer<S>(S);

/// The methods a [`Writer`] hands on as they are: those of values that hold no other value.
macro_rules! forward_serialize {
    ($($method:ident($($argument:ident: $type:ty),*);)*) => {$(
        fn $method(self, $($argument: $type),*) -> Result<S::Ok, S::Error> {
            self.0.$method($($argument),*)
        }
    )*};
}

/// The methods of values holding one value: that value as [`TextKeys`].
macro_rules! forward_holders {
    ($($method:ident($($argument:ident: $type:ty),*);)*) => {$(
        fn $method<T: Serialize + ?Sized>(
            self,
            $($argument: $type,)*
            value: &T,
        ) -> Result<S::Ok, S::Error> {
            self.0.$method($($argument,)* &TextKeys(value))
        }
    )*};
}

/// The methods of compound values: the wrapped serializer's compound, as a [`Writer`].
macro_rules! forward_compounds {
    ($($method:ident($($argument:ident: $type:ty),*) -> $compound:ident;)*) => {$(
        fn $method(self, $($argument: $type),*) -> Result<Self::$compound, S::Error> {
            self.0.$method($($argument),*).map(Writer)
        }
    )*};
}

impl<S: Serializer> Serializer for Writer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Writer<S::SerializeSeq>;
    type SerializeTuple = Writer<S::SerializeTuple>;
    type SerializeTupleStruct = Writer<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Writer<S::SerializeTupleVariant>;
    type SerializeMap = Writer<S::SerializeMap>;
    type SerializeStruct = Writer<S::SerializeStruct>;
    type SerializeStructVariant = Writer<S::SerializeStructVariant>;

    forward_serialize! {
        serialize_bool(value: bool);
        serialize_i8(value: i8);
        serialize_i16(value: i16);
        serialize_i32(value: i32);
        serialize_i64(value: i64);
        serialize_i128(value: i128);
        serialize_u8(value: u8);
        serialize_u16(value: u16);
        serialize_u32(value: u32);
        serialize_u64(value: u64);
        serialize_u128(value: u128);
        serialize_f32(value: f32);
        serialize_f64(value: f64);
        serialize_char(value: char);
        serialize_str(value: &str);
        serialize_bytes(value: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }
    forward_holders! {
        serialize_some();
        serialize_newtype_struct(name: &'static str);
        serialize_newtype_variant(name: &'static str, index: u32, variant: &'static str);
    }
    forward_compounds! {
        serialize_seq(len: Option<usize>) -> SerializeSeq;
        serialize_tuple(len: usize) -> SerializeTuple;
        serialize_tuple_struct(name: &'static str, len: usize) -> SerializeTupleStruct;
        serialize_tuple_variant(name: &'static str, index: u32, variant: &'static str, len: usize)
            -> SerializeTupleVariant;
        serialize_map(len: Option<usize>) -> SerializeMap;
        serialize_struct(name: &'static str, len: usize) -> SerializeStruct;
        serialize_struct_variant(name: &'static str, index: u32, variant: &'static str, len: usize)
            -> SerializeStructVariant;
    }

    fn collect_str<T: fmt::Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The compound serializers whose items are values: each item as [`TextKeys`].
macro_rules! forward_items {
    ($($trait:ident::$method:ident;)*) => {$(
        impl<S: ser::$trait> ser::$trait for Writer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
                self.0.$method(&TextKeys(value))
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

forward_items! {
    SerializeSeq::serialize_element;
    SerializeTuple::serialize_element;
    SerializeTupleStruct::serialize_field;
    SerializeTupleVariant::serialize_field;
}

/// The compound serializers whose items are named fields: each value as [`TextKeys`].
macro_rules! forward_fields {
    ($($trait:ident;)*) => {$(
        impl<S: ser::$trait> ser::$trait for Writer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), S::Error> {
                self.0.serialize_field(key, &TextKeys(value))
            }
            fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                self.0.skip_field(key)
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

forward_fields! {
    SerializeStruct;
    SerializeStructVariant;
}

impl<S: ser::SerializeMap> ser::SerializeMap for Writer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&KeyText(key))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&TextKeys(value))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// Hands everything to the deserializer it wraps, with the visitor wrapped so that every map
/// inside reads its keys through [`Key`]. It also wraps that deserializer's seeds and its
/// sequence, map and enum accesses.
pub(crate) struct Reader<D>(pub D);

/// A map key: read from its text where its type wants a number or a boolean, as serde_json
/// reads the keys of the SQL stores' JSON; as stored otherwise.
struct Key<D>(D);

/// A visitor whose maps read their keys through [`Key`].
struct Visiting<V>(V);

macro_rules! forward_deserialize {
    ($($method:ident($($argument:ident: $type:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(
            self,
            $($argument: $type,)*
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.$method($($argument,)* Visiting(visitor))
        }
    )*};
}

/// The methods a [`Key`] hands on as they are: those of keys that are no number or boolean.
macro_rules! forward_key_methods {
    () => {
        forward_deserialize! {
            deserialize_any();
            deserialize_char();
            deserialize_str();
            deserialize_string();
            deserialize_bytes();
            deserialize_byte_buf();
            deserialize_unit();
            deserialize_seq();
            deserialize_map();
            deserialize_identifier();
            deserialize_ignored_any();
            deserialize_unit_struct(name: &'static str);
            deserialize_tuple(len: usize);
            deserialize_tuple_struct(name: &'static str, len: usize);
            deserialize_struct(name: &'static str, fields: &'static [&'static str]);
            deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        }
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Reader<D> {
    type Error = D::Error;

    forward_key_methods!();
    forward_deserialize! {
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
        deserialize_option();
        deserialize_newtype_struct(name: &'static str);
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The text of a stored key, parsed as serde_json parses a numeric key: a number alone, starting
/// with a digit or `-`.
fn parse_key<'de, N: DeserializeOwned, D: Deserializer<'de>>(key: D) -> Result<N, D::Error> {
    let text = String::deserialize(key)?;
    let numeric = text.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        && !text.ends_with(|c: char| c.is_ascii_whitespace());
    if !numeric {
        return Err(de::Error::invalid_type(
            Unexpected::Str(&text),
            &"a number as text",
        ));
    }
    serde_json::from_str(&text).map_err(de::Error::custom)
}

macro_rules! numeric_keys {
    ($($method:ident => $visit:ident($type:ty);)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            visitor.$visit(parse_key::<$type, D>(self.0)?)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Key<D> {
    type Error = D::Error;

    forward_key_methods!();
    numeric_keys! {
        deserialize_i8 => visit_i8(i8);
        deserialize_i16 => visit_i16(i16);
        deserialize_i32 => visit_i32(i32);
        deserialize_i64 => visit_i64(i64);
        deserialize_i128 => visit_i128(i128);
        deserialize_u8 => visit_u8(u8);
        deserialize_u16 => visit_u16(u16);
        deserialize_u32 => visit_u32(u32);
        deserialize_u64 => visit_u64(u64);
        deserialize_u128 => visit_u128(u128);
        deserialize_f32 => visit_f32(f32);
        deserialize_f64 => visit_f64(f64);
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let text = String::deserialize(self.0)?;
        match text.as_str() {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            _ => Err(de::Error::invalid_type(Unexpected::Str(&text), &visitor)),
        }
    }
    // A stored key is never null.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_some(self)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        visitor.visit_newtype_struct(self)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visits {
    ($($method:ident($type:ty);)*) => {$(
        fn $method<E: de::Error>(self, value: $type) -> Result<V::Value, E> {
            self.0.$method(value)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Visiting<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visits! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, value: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Reader(value))
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, value: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Reader(value))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Reader(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, entries: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Reader(entries))
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Reader(data))
    }
}

/// A seed whose value reads its maps' keys through [`Key`].
impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Reader<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Reader(deserializer))
    }
}

/// A seed of a map key, read through [`Key`].
struct KeySeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Key(deserializer))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Reader<A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.0.next_element_seed(Reader(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Reader<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(KeySeed(seed))
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(Reader(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Reader<A> {
    type Error = A::Error;
    type Variant = Reader<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(Reader(seed))?;
        Ok((value, Reader(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Reader<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }
    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.newtype_variant_seed(Reader(seed))
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Visiting(visitor))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Visiting(visitor))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use mongodb::bson::doc;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::mongo::text_keys::{from_document, to_document};
    use mongodb::bson::{self, Bson};

    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
    enum Shade {
        Light,
        Dark,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Maps {
        by_number: BTreeMap<u32, String>,
        by_signed: HashMap<i64, Vec<BTreeMap<i8, bool>>>,
        by_flag: BTreeMap<bool, u8>,
        by_shade: BTreeMap<Shade, Option<BTreeMap<u128, String>>>,
        by_name: BTreeMap<String, i32>,
        when: bson::DateTime,
    }

    fn maps() -> Maps {
        Maps {
            by_number: [(1, "one".to_owned()), (20, "twenty".to_owned())].into(),
            by_signed: [(-7, vec![[(3, true)].into()])].into(),
            by_flag: [(true, 1), (false, 0)].into(),
            by_shade: [
                (Shade::Dark, Some([(u128::MAX, "max".to_owned())].into())),
                (Shade::Light, None),
            ]
            .into(),
            by_name: [("plain".to_owned(), 5)].into(),
            when: bson::DateTime::from_millis(1_700_000_000_000),
        }
    }

    #[test]
    fn map_keys_are_stored_as_the_sql_stores_store_them_and_read_back_as_their_type(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let stored = to_document(&maps())?;
        assert_eq!(
            stored.get_document("by_number")?,
            &doc! { "1": "one", "20": "twenty" }
        );
        assert_eq!(
            stored.get_document("by_signed")?,
            &doc! { "-7": [{ "3": true }] }
        );
        assert_eq!(
            stored.get_document("by_flag")?,
            &doc! { "false": 0, "true": 1 }
        );
        assert!(matches!(stored.get("when"), Some(Bson::DateTime(_))));
        let sql = serde_json::to_value(maps())?;
        assert_eq!(
            serde_json::to_value(&stored)?["by_shade"],
            sql["by_shade"],
            "the same keys as serde_json writes"
        );
        assert_eq!(from_document::<Maps>(stored)?, maps());
        Ok(())
    }

    #[test]
    fn a_key_that_is_no_number_is_refused_where_a_number_is_read_naming_where() {
        let stored = doc! {
            "by_number": { "1": "one", "x": "ex" },
            "by_signed": {}, "by_flag": {}, "by_shade": {}, "by_name": {},
            "when": bson::DateTime::from_millis(0),
        };
        let error = from_document::<Maps>(stored).unwrap_err();
        assert!(error.starts_with("by_number"), "{error}");
        for text in ["+1", " 1", "1 ", "01"] {
            let stored = doc! { text: "one" };
            assert!(
                from_document::<BTreeMap<u32, String>>(stored).is_err(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_key_with_no_text_is_refused() {
        let by_list: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        let error = to_document(&doc_of(by_list)).unwrap_err().to_string();
        assert!(error.contains("a map key must be"), "{error}");
        let by_nan: Vec<(f64, u8)> = vec![(f64::NAN, 1)];
        assert!(to_document(&doc_of(MapOf(by_nan))).is_err());
    }

    #[derive(Serialize)]
    struct Holder<T> {
        value: T,
    }

    fn doc_of<T>(value: T) -> Holder<T> {
        Holder { value }
    }

    /// Entries serialized as a map, whatever their key.
    struct MapOf(Vec<(f64, u8)>);

    impl Serialize for MapOf {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().map(|(key, value)| (key, value)))
        }
    }
}
