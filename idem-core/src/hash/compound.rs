//! Sequences, structs and maps as the encoder writes them: items and fields as they come, map
//! entries buffered and written sorted by key.

use serde::ser::{self, Serialize};

use super::encoder::{nested, write_text, EncodeError};
use super::sink::Sink;
use super::tags::{MAP_END, MAP_START, SEQ_END, STRUCT_END, TEXT};
use crate::model::Model;

/// Items written in order, between the sequence tags.
pub(super) struct Sequence<'s, S: Sink> {
    pub(super) sink: &'s mut S,
    pub(super) unique_names: bool,
}

impl<S: Sink> Sequence<'_, S> {
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn close(self) -> Result<(), EncodeError> {
        self.sink.write(&[SEQ_END]);
        Ok(())
    }
}

impl<S: Sink> ser::SerializeSeq for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTuple for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTupleStruct for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeTupleVariant for Sequence<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.item(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

/// Struct fields, written as they come: their order is fixed by the type.
pub(super) struct Struct<'s, S: Sink> {
    pub(super) sink: &'s mut S,
    pub(super) top_level: Option<&'s Model>,
    pub(super) unique_names: bool,
}

impl<S: Sink> Struct<'_, S> {
    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), EncodeError> {
        if self.top_level.is_some_and(|model| !model.is_hashed(name)) {
            return Ok(());
        }
        write_text(self.sink, TEXT, name.as_bytes());
        value.serialize(nested(self.sink, self.unique_names))
    }

    fn close(self) -> Result<(), EncodeError> {
        self.sink.write(&[STRUCT_END]);
        Ok(())
    }
}

impl<S: Sink> ser::SerializeStruct for Struct<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

impl<S: Sink> ser::SerializeStructVariant for Struct<'_, S> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.close()
    }
}

/// One buffered map entry: where its key and value lie in the buffer.
pub(super) struct Entry {
    key_start: usize,
    value_start: usize,
    end: usize,
}

/// Map entries, buffered until the map ends so they can be written sorted by key.
pub(super) struct Map<'s, S: Sink> {
    pub(super) sink: &'s mut S,
    pub(super) top_level: Option<&'s Model>,
    pub(super) unique_names: bool,
    pub(super) buffer: Vec<u8>,
    pub(super) entries: Vec<Entry>,
}

impl<S: Sink> Map<'_, S> {
    /// The key of an entry as text, if it is text.
    fn text_key(&self, entry: &Entry) -> Option<&str> {
        let key = &self.buffer[entry.key_start..entry.value_start];
        let (&tag, rest) = key.split_first()?;
        let text = rest.get(8..).filter(|_| tag == TEXT)?;
        std::str::from_utf8(text).ok()
    }
}

impl<S: Sink> ser::SerializeMap for Map<'_, S> {
    type Ok = ();
    type Error = EncodeError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        let key_start = self.buffer.len();
        key.serialize(nested(&mut self.buffer, self.unique_names))?;
        let value_start = self.buffer.len();
        self.entries.push(Entry {
            key_start,
            value_start,
            end: value_start,
        });
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        value.serialize(nested(&mut self.buffer, self.unique_names))?;
        let end = self.buffer.len();
        match self.entries.last_mut() {
            Some(entry) => entry.end = end,
            None => return Err(ser::Error::custom("map value without a key")),
        }
        Ok(())
    }

    fn end(mut self) -> Result<(), EncodeError> {
        let buffer = &self.buffer;
        // Unstable sort needs no scratch buffer; ties (two keys encoding alike) keep their
        // order through `key_start`, exactly as the stable sort did.
        self.entries.sort_unstable_by(|a, b| {
            buffer[a.key_start..a.value_start]
                .cmp(&buffer[b.key_start..b.value_start])
                .then(a.key_start.cmp(&b.key_start))
        });
        if self.unique_names {
            let repeated = self.entries.windows(2).find(|pair| {
                buffer[pair[0].key_start..pair[0].value_start]
                    == buffer[pair[1].key_start..pair[1].value_start]
            });
            if let Some(name) = repeated.and_then(|pair| self.text_key(&pair[0])) {
                return Err(ser::Error::custom(format!(
                    "the name `{name}` is written twice in one struct or map (a flattened \
                     field's entry named like another field?), and a stored document keeps \
                     only one of them"
                )));
            }
        }
        self.sink.write(&[MAP_START]);
        for entry in &self.entries {
            let excluded = match (self.top_level, self.text_key(entry)) {
                (Some(model), Some(key)) => !model.is_hashed(key),
                _ => false,
            };
            if !excluded {
                self.sink.write(&self.buffer[entry.key_start..entry.end]);
            }
        }
        self.sink.write(&[MAP_END]);
        Ok(())
    }
}
