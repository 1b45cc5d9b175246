//! The checks of the fuzz targets, shared by the libFuzzer binaries (`fuzz_targets/`) and the
//! seeded fallback runner (`examples/seeded.rs`). Each takes the fuzzer's bytes and panics on a
//! failed check. The spec's key encodings come from `idem-spec-reference` (`spec-reference/`),
//! written out from `docs/SPEC.md` independently of idem-core.

use std::collections::HashSet;

use arbitrary::{Arbitrary, Unstructured};
use idem_core::hash::{canonical_bytes, canonical_document_bytes, content_hash, hash_value};
use idem_core::id::{derive_id, encode_key_v1, MAX_TIMESTAMP_MS};
use idem_core::{Error, ErrorKind, Field, IdKey, IdScheme, Idempotent, Model, Role};
use idem_spec_reference::id::{hash_part, joined_input, v1_input, KeyValue};
use serde::ser::{
    Serialize, SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant, Serializer,
};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------------
// content_hash

/// A value that reaches every method of serde's data model, nested to a bounded depth.
#[derive(Clone, Debug)]
pub enum Val {
    Unit,
    Null,
    Some(Box<Val>),
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(f32),
    F64(f64),
    Char(char),
    Str(String),
    Bytes(Vec<u8>),
    Seq(Vec<Val>),
    Tuple(Vec<Val>),
    TupleStruct(Vec<Val>),
    Map(Vec<(Val, Val)>),
    Struct(Vec<Val>),
    UnitStruct,
    NewtypeStruct(Box<Val>),
    UnitVariant(u8),
    NewtypeVariant(u8, Box<Val>),
    TupleVariant(u8, Vec<Val>),
    StructVariant(u8, Vec<Val>),
}

const NAMES: [&str; 6] = ["a", "b", "", "sourceHash", "ünï", "a\0b"];

fn name(index: usize) -> &'static str {
    NAMES[index % NAMES.len()]
}

impl Val {
    /// An arbitrary value at most `depth` containers deep.
    pub fn arbitrary_at(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Val> {
        let leaves = 19u8;
        let kinds = if depth == 0 { leaves } else { leaves + 11 };
        let items = |u: &mut Unstructured<'_>| -> arbitrary::Result<Vec<Val>> {
            let len = u.int_in_range(0..=6)?;
            (0..len).map(|_| Val::arbitrary_at(u, depth - 1)).collect()
        };
        Ok(match u.int_in_range(0..=kinds - 1)? {
            0 => Val::Unit,
            1 => Val::Null,
            2 => Val::Bool(u.arbitrary()?),
            3 => Val::I8(u.arbitrary()?),
            4 => Val::I16(u.arbitrary()?),
            5 => Val::I32(u.arbitrary()?),
            6 => Val::I64(u.arbitrary()?),
            7 => Val::I128(u.arbitrary()?),
            8 => Val::U8(u.arbitrary()?),
            9 => Val::U16(u.arbitrary()?),
            10 => Val::U32(u.arbitrary()?),
            11 => Val::U64(u.arbitrary()?),
            12 => Val::U128(u.arbitrary()?),
            13 => Val::F32(u.arbitrary()?),
            14 => Val::F64(u.arbitrary()?),
            15 => Val::Char(u.arbitrary()?),
            16 => Val::Str(u.arbitrary()?),
            17 => Val::Bytes(u.arbitrary()?),
            18 => Val::UnitStruct,
            19 => Val::Some(Box::new(Val::arbitrary_at(u, depth - 1)?)),
            20 => Val::Seq(items(u)?),
            21 => Val::Tuple(items(u)?),
            22 => Val::TupleStruct(items(u)?),
            23 => {
                let len = u.int_in_range(0..=6)?;
                let entries = (0..len)
                    .map(|_| {
                        Ok((
                            Val::arbitrary_at(u, depth - 1)?,
                            Val::arbitrary_at(u, depth - 1)?,
                        ))
                    })
                    .collect::<arbitrary::Result<_>>()?;
                Val::Map(entries)
            }
            24 => Val::Struct(items(u)?),
            25 => Val::NewtypeStruct(Box::new(Val::arbitrary_at(u, depth - 1)?)),
            26 => Val::UnitVariant(u.arbitrary()?),
            27 => Val::NewtypeVariant(u.arbitrary()?, Box::new(Val::arbitrary_at(u, depth - 1)?)),
            28 => Val::TupleVariant(u.arbitrary()?, items(u)?),
            _ => Val::StructVariant(u.arbitrary()?, items(u)?),
        })
    }

    /// The same value with the entries of every map in reverse order.
    fn reversed_maps(&self) -> Val {
        let all = |items: &[Val]| items.iter().map(Val::reversed_maps).collect();
        match self {
            Val::Some(v) => Val::Some(Box::new(v.reversed_maps())),
            Val::NewtypeStruct(v) => Val::NewtypeStruct(Box::new(v.reversed_maps())),
            Val::NewtypeVariant(i, v) => Val::NewtypeVariant(*i, Box::new(v.reversed_maps())),
            Val::Seq(items) => Val::Seq(all(items)),
            Val::Tuple(items) => Val::Tuple(all(items)),
            Val::TupleStruct(items) => Val::TupleStruct(all(items)),
            Val::Struct(items) => Val::Struct(all(items)),
            Val::TupleVariant(i, items) => Val::TupleVariant(*i, all(items)),
            Val::StructVariant(i, items) => Val::StructVariant(*i, all(items)),
            Val::Map(entries) => Val::Map(
                entries
                    .iter()
                    .rev()
                    .map(|(k, v)| (k.reversed_maps(), v.reversed_maps()))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Whether some map holds two keys with the same canonical encoding: such a "map" is not a
    /// map, and the order of its twins is kept.
    fn has_twin_keys(&self) -> bool {
        match self {
            Val::Some(v) | Val::NewtypeStruct(v) | Val::NewtypeVariant(_, v) => v.has_twin_keys(),
            Val::Seq(items)
            | Val::Tuple(items)
            | Val::TupleStruct(items)
            | Val::Struct(items)
            | Val::TupleVariant(_, items)
            | Val::StructVariant(_, items) => items.iter().any(Val::has_twin_keys),
            Val::Map(entries) => {
                let mut keys = HashSet::new();
                entries.iter().any(|(k, v)| {
                    !keys.insert(canonical_bytes(k).expect("a key encodes"))
                        || k.has_twin_keys()
                        || v.has_twin_keys()
                })
            }
            _ => false,
        }
    }
}

impl Serialize for Val {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Val::Unit => s.serialize_unit(),
            Val::Null => s.serialize_none(),
            Val::Some(v) => s.serialize_some(v),
            Val::Bool(v) => s.serialize_bool(*v),
            Val::I8(v) => s.serialize_i8(*v),
            Val::I16(v) => s.serialize_i16(*v),
            Val::I32(v) => s.serialize_i32(*v),
            Val::I64(v) => s.serialize_i64(*v),
            Val::I128(v) => s.serialize_i128(*v),
            Val::U8(v) => s.serialize_u8(*v),
            Val::U16(v) => s.serialize_u16(*v),
            Val::U32(v) => s.serialize_u32(*v),
            Val::U64(v) => s.serialize_u64(*v),
            Val::U128(v) => s.serialize_u128(*v),
            Val::F32(v) => s.serialize_f32(*v),
            Val::F64(v) => s.serialize_f64(*v),
            Val::Char(v) => s.serialize_char(*v),
            Val::Str(v) => s.serialize_str(v),
            Val::Bytes(v) => s.serialize_bytes(v),
            Val::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Val::Tuple(items) => {
                let mut tuple = s.serialize_tuple(items.len())?;
                for item in items {
                    tuple.serialize_element(item)?;
                }
                tuple.end()
            }
            Val::TupleStruct(items) => {
                let mut tuple = s.serialize_tuple_struct("T", items.len())?;
                for item in items {
                    tuple.serialize_field(item)?;
                }
                tuple.end()
            }
            Val::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Val::Struct(items) => {
                let mut st = s.serialize_struct("S", items.len())?;
                for (i, item) in items.iter().enumerate() {
                    st.serialize_field(name(i), item)?;
                }
                st.end()
            }
            Val::UnitStruct => s.serialize_unit_struct("U"),
            Val::NewtypeStruct(v) => s.serialize_newtype_struct("N", v),
            Val::UnitVariant(i) => s.serialize_unit_variant("E", u32::from(*i), name(*i as usize)),
            Val::NewtypeVariant(i, v) => {
                s.serialize_newtype_variant("E", u32::from(*i), name(*i as usize), v)
            }
            Val::TupleVariant(i, items) => {
                let mut tv =
                    s.serialize_tuple_variant("E", u32::from(*i), name(*i as usize), items.len())?;
                for item in items {
                    tv.serialize_field(item)?;
                }
                tv.end()
            }
            Val::StructVariant(i, items) => {
                let mut sv =
                    s.serialize_struct_variant("E", u32::from(*i), name(*i as usize), items.len())?;
                for (j, item) in items.iter().enumerate() {
                    sv.serialize_field(name(j), item)?;
                }
                sv.end()
            }
        }
    }
}

/// A derived document: its content hash leaves out the volatile field and the hash field.
#[derive(Debug, serde::Serialize, Idempotent)]
#[idem(collection = "fuzzed")]
pub struct Doc {
    #[idem(key)]
    pub key: String,
    pub body: Val,
    pub extra: std::collections::HashMap<String, f64>,
    #[idem(volatile)]
    pub seen: i64,
}

/// The same hash twice, and SHA-256 over the canonical bytes.
fn check_hash<T: Serialize + ?Sized>(value: &T) -> idem_core::ContentHash {
    let first = hash_value(value).expect("a value of infallible Serialize hashes");
    let second = hash_value(value).expect("and hashes again");
    assert_eq!(first, second, "the same value hashed twice");
    let bytes = canonical_bytes(value).expect("canonical bytes");
    assert_eq!(
        first.as_bytes().as_slice(),
        Sha256::digest(&bytes).as_slice(),
        "hash_value is SHA-256 over canonical_bytes"
    );
    assert_eq!(
        canonical_bytes(value).unwrap(),
        bytes,
        "canonical bytes twice"
    );
    first
}

/// The `content_hash` target: JSON parsed from the bytes, and a structured value drawn from
/// them, hash the same twice and equal SHA-256 over their canonical bytes; map order does not
/// matter; a derived document's hash ignores its volatile field, and only a document with a map
/// writing one key twice is refused.
pub fn content_hash_target(data: &[u8]) {
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) {
        check_hash(&json);
    }
    let mut u = Unstructured::new(data);
    let Ok(value) = Val::arbitrary_at(&mut u, 6) else {
        return;
    };
    let hash = check_hash(&value);
    if !value.has_twin_keys() {
        assert_eq!(
            check_hash(&value.reversed_maps()),
            hash,
            "map order changed the hash of {value:?}"
        );
    }
    let extra: Vec<(String, f64)> = u.arbitrary().unwrap_or_default();
    let key: String = u.arbitrary().unwrap_or_default();
    let doc = Doc {
        key,
        body: value,
        extra: extra.into_iter().collect(),
        seen: u.arbitrary().unwrap_or_default(),
    };
    let hash = match doc.content_hash() {
        Ok(hash) => hash,
        // A map that writes one text key twice cannot be stored: a document holding one is
        // refused, and only such a document.
        Err(_) => {
            assert!(doc.body.has_twin_keys(), "refused without twin keys: {doc:?}");
            return;
        }
    };
    assert_eq!(hash, content_hash(&doc, &Doc::MODEL).unwrap());
    let bytes = canonical_document_bytes(&doc, &Doc::MODEL).unwrap();
    assert_eq!(
        hash.as_bytes().as_slice(),
        Sha256::digest(&bytes).as_slice()
    );
    let later = Doc {
        seen: doc.seen.wrapping_add(1),
        ..doc
    };
    assert_eq!(
        later.content_hash().unwrap(),
        hash,
        "the volatile field is not hashed"
    );
}

// ---------------------------------------------------------------------------------------------
// key_encoding

/// A key value of any `IdKey` type.
#[derive(Arbitrary, Clone, Debug)]
pub enum Key {
    Text(String),
    Char(char),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    Isize(isize),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    Usize(usize),
    Bool(bool),
}

impl Key {
    fn as_id_key(&self) -> &dyn IdKey {
        match self {
            Key::Text(v) => v,
            Key::Char(v) => v,
            Key::I8(v) => v,
            Key::I16(v) => v,
            Key::I32(v) => v,
            Key::I64(v) => v,
            Key::I128(v) => v,
            Key::Isize(v) => v,
            Key::U8(v) => v,
            Key::U16(v) => v,
            Key::U32(v) => v,
            Key::U64(v) => v,
            Key::U128(v) => v,
            Key::Usize(v) => v,
            Key::Bool(v) => v,
        }
    }

    /// The value the spec sees: a char is its one-character text, an integer has no width.
    fn value(&self) -> KeyValue {
        match self {
            Key::Text(v) => KeyValue::from(v.as_str()),
            Key::Char(v) => KeyValue::from(*v),
            Key::I8(v) => KeyValue::from(*v),
            Key::I16(v) => KeyValue::from(*v),
            Key::I32(v) => KeyValue::from(*v),
            Key::I64(v) => KeyValue::from(*v),
            Key::I128(v) => KeyValue::from(*v),
            Key::Isize(v) => KeyValue::from(*v),
            Key::U8(v) => KeyValue::from(*v),
            Key::U16(v) => KeyValue::from(*v),
            Key::U32(v) => KeyValue::from(*v),
            Key::U64(v) => KeyValue::from(*v),
            Key::U128(v) => KeyValue::from(*v),
            Key::Usize(v) => KeyValue::from(*v),
            Key::Bool(v) => KeyValue::from(*v),
        }
    }
}

/// Two key tuples (1 to 4 keys) and a timestamp.
#[derive(Arbitrary, Debug)]
pub struct KeyInput {
    pub a: Vec<Key>,
    pub b: Vec<Key>,
    pub timestamp: i64,
}

const fn fields<const N: usize>() -> [Field; N] {
    const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
    let mut fields = [Field::new("ts", "ts", Role::Timestamp); N];
    let mut i = 0;
    while i + 1 < N {
        fields[i] = Field::new(KEYS[i], KEYS[i], Role::Key);
        i += 1;
    }
    fields
}

static FIELDS_1: [Field; 2] = fields::<2>();
static FIELDS_2: [Field; 3] = fields::<3>();
static FIELDS_3: [Field; 4] = fields::<4>();
static FIELDS_4: [Field; 5] = fields::<5>();

fn model(scheme: IdScheme, keys: usize) -> Model {
    let fields: &'static [Field] = match keys {
        1 => &FIELDS_1,
        2 => &FIELDS_2,
        3 => &FIELDS_3,
        _ => &FIELDS_4,
    };
    Model::new("fuzzed", scheme, "sourceHash", fields)
}

fn encode(keys: &[Key]) -> Vec<u8> {
    let mut out = Vec::new();
    for key in keys {
        encode_key_v1(key.as_id_key().key_part(), |bytes| {
            out.extend_from_slice(bytes)
        });
    }
    out
}

/// `derive_id` twice, compared; the first result.
fn derive_twice(scheme: IdScheme, keys: &[Key], timestamp: i64) -> Result<idem_core::Id, Error> {
    let refs: Vec<&dyn IdKey> = keys.iter().map(Key::as_id_key).collect();
    let model = model(scheme, keys.len());
    let first = derive_id(&model, &refs, Some(&timestamp));
    let second = derive_id(&model, &refs, Some(&timestamp));
    match (&first, &second) {
        (Ok(x), Ok(y)) => assert_eq!(x, y, "{scheme:?} {keys:?}"),
        (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string()),
        _ => panic!("{scheme:?} {keys:?}: {first:?} then {second:?}"),
    }
    first
}

/// Checks one tuple under both schemes; its values and `v1` hash part when `v1` accepts it.
fn check_tuple(keys: &[Key], timestamp: i64) -> Option<(Vec<KeyValue>, [u8; 10])> {
    let values: Vec<KeyValue> = keys.iter().map(Key::value).collect();
    let spec = v1_input(&values);
    let encoded = encode(keys);
    assert_eq!(encoded, spec, "the v1 encoding of {keys:?}");
    assert_eq!(encode(keys), encoded, "the same encoding twice");

    let in_range = (0..=MAX_TIMESTAMP_MS as i64).contains(&timestamp);
    let empty = values
        .iter()
        .position(|k| matches!(k, KeyValue::Text(t) if t.is_empty()));
    let v1 = derive_twice(IdScheme::V1, keys, timestamp);
    let v1_hash_part = match (v1.as_ref().map_err(Error::kind), empty, in_range) {
        (Ok(id), None, true) => {
            assert_eq!(id.hash_part(), hash_part(&spec));
            assert_eq!(id.timestamp_ms(), timestamp as u64);
            Some(id.hash_part())
        }
        (Err(ErrorKind::EmptyKey { field, .. }), Some(index), _) => {
            assert_eq!(*field, ["k0", "k1", "k2", "k3"][index]);
            None
        }
        (Err(ErrorKind::TimestampOutOfRange { .. }), None, false) => None,
        (other, _, _) => panic!("v1 {keys:?} at {timestamp}: {other:?}"),
    };

    // joined: the first key that is empty or contains ':' is refused; else the hash of the
    // texts joined by ':'.
    let texts: Vec<String> = values.iter().map(KeyValue::joined_text).collect();
    let bad = texts.iter().position(|t| t.is_empty() || t.contains(':'));
    match (
        derive_twice(IdScheme::Joined, keys, timestamp).map_err(Error::into_kind),
        bad,
        in_range,
    ) {
        (Ok(id), None, true) => {
            assert_eq!(id.hash_part(), hash_part(joined_input(&values).as_bytes()));
        }
        (Err(ErrorKind::EmptyKey { .. }), Some(i), _) => assert!(texts[i].is_empty()),
        (Err(ErrorKind::AmbiguousKey { value, .. }), Some(i), _) => assert_eq!(value, texts[i]),
        (Err(ErrorKind::TimestampOutOfRange { .. }), None, false) => {}
        (other, _, _) => panic!("joined {keys:?} at {timestamp}: {other:?}"),
    }
    v1_hash_part.map(|part| (values, part))
}

/// The `key_encoding` target: for two key tuples, the `v1` encoding is the spec's, the same
/// twice, and injective (different values, different encodings and hash parts); `derive_id`
/// under both schemes gives the same result twice and refuses exactly what the spec refuses.
pub fn key_encoding_target(data: &[u8]) {
    let Ok(mut input) = KeyInput::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    input.a.truncate(4);
    input.b.truncate(4);
    if input.a.is_empty() || input.b.is_empty() {
        return;
    }
    let a = check_tuple(&input.a, input.timestamp);
    let b = check_tuple(&input.b, input.timestamp);
    let values = |keys: &[Key]| keys.iter().map(Key::value).collect::<Vec<_>>();
    let (ca, cb) = (values(&input.a), values(&input.b));
    let (ea, eb) = (encode(&input.a), encode(&input.b));
    assert_eq!(ca == cb, ea == eb, "v1 is injective: {ca:?} / {cb:?}");
    if let (Some((ca, pa)), Some((cb, pb))) = (a, b) {
        assert_eq!(ca == cb, pa == pb, "hash parts: {ca:?} / {cb:?}");
    }
}
