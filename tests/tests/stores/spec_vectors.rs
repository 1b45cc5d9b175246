//! The test vectors of `docs/SPEC.md`, checked against idem_core.
//!
//! `docs/id-vectors.json` and `docs/hash-vectors.json` are the machine-readable vectors that
//! `docs/check_vectors.py` recomputes from the spec alone; this test checks the same files
//! against the Rust code, so the spec, the vectors and the code cannot drift apart. The second
//! half hashes real Rust values (a derived struct, `serde_json::Value`s, enums, integers of
//! several widths) and pins their hashes to the spec's golden values.
//!
//! Run: `cargo test -p idem-tests --test stores spec_vectors::`

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use idem_core::hash::{canonical_bytes, canonical_document_bytes, content_hash, hash_value};
use idem_core::id::{derive_id, encode_key_v1};
use idem_core::{
    Error, ErrorKind, Field, Id, IdKey, IdScheme, IdTimestamp, Model, Role, TimestampProblem,
};
use serde::ser::{
    SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleVariant,
};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Value};

fn docs_file(name: &str) -> String {
    let path = format!("{}/../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {path}: {error}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

/// Fails with every problem at once, so one run shows all the drift.
fn assert_no_problems(what: &str, checked: usize, problems: &[String]) {
    assert!(checked > 0, "no {what} were checked");
    assert!(
        problems.is_empty(),
        "{} problems in {checked} {what}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Id vectors
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct IdVector {
    name: String,
    scheme: String,
    keys: Vec<KeyJson>,
    timestamp_ms: Option<i64>,
    timestamp_ns: Option<String>,
    hashed_hex: Option<String>,
    hash_part_hex: Option<String>,
    id: Option<String>,
    error: Option<String>,
    error_key_index: Option<usize>,
    timestamp_problem: Option<String>,
}

#[derive(Deserialize)]
struct KeyJson {
    #[serde(rename = "type")]
    kind: String,
    value: Value,
}

/// A key value of a vector, kept so it can be handed to `derive_id` as several Rust types.
#[derive(Clone, Debug)]
enum KeyValue {
    Text(String),
    Char(char),
    Integer(i128),
    LargeUnsigned(u128),
    Bool(bool),
}

impl KeyValue {
    fn from_json(key: &KeyJson) -> KeyValue {
        match (key.kind.as_str(), &key.value) {
            ("text", Value::String(text)) => KeyValue::Text(text.clone()),
            ("char", Value::String(text)) => {
                let mut chars = text.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => KeyValue::Char(c),
                    _ => panic!("a char key is one character: {text:?}"),
                }
            }
            ("int", Value::String(digits)) => match digits.parse::<i128>() {
                Ok(value) => KeyValue::Integer(value),
                Err(_) => KeyValue::LargeUnsigned(digits.parse().expect("an integer key")),
            },
            ("bool", Value::Bool(value)) => KeyValue::Bool(*value),
            (kind, value) => panic!("unknown key {kind}: {value}"),
        }
    }

    /// The widest Rust type: `String`, `char`, `i128`/`u128`, `bool`.
    fn wide(&self) -> Box<dyn IdKey> {
        match self {
            KeyValue::Text(text) => Box::new(text.clone()),
            KeyValue::Char(c) => Box::new(*c),
            KeyValue::Integer(value) => Box::new(*value),
            KeyValue::LargeUnsigned(value) => Box::new(*value),
            KeyValue::Bool(value) => Box::new(*value),
        }
    }

    /// The narrowest usual type: `Box<str>`, `i64` or `u64` where the value fits.
    fn narrow(&self) -> Box<dyn IdKey> {
        match self {
            KeyValue::Text(text) => Box::new(Box::<str>::from(text.as_str())),
            KeyValue::Integer(value) => match (i64::try_from(*value), u64::try_from(*value)) {
                (Ok(small), _) => Box::new(small),
                (_, Ok(unsigned)) => Box::new(unsigned),
                _ => self.wide(),
            },
            _ => self.wide(),
        }
    }

    /// Unsigned where possible: a `u128` at most `i128::MAX` must hash as that integer.
    fn unsigned(&self) -> Box<dyn IdKey> {
        match self {
            KeyValue::Text(text) => Box::new(std::sync::Arc::<str>::from(text.as_str())),
            KeyValue::Integer(value) => match u128::try_from(*value) {
                Ok(unsigned) => Box::new(unsigned),
                Err(_) => self.wide(),
            },
            _ => self.wide(),
        }
    }
}

/// Makes one Rust value of a key.
type KeyType = fn(&KeyValue) -> Box<dyn IdKey>;

/// The Rust types every key is tried as: all must give the same id.
const KEY_TYPES: [(&str, KeyType); 3] = [
    ("wide", KeyValue::wide),
    ("narrow", KeyValue::narrow),
    ("unsigned", KeyValue::unsigned),
];

/// The vector's timestamp as every Rust type that can hold it.
fn timestamps(vector: &IdVector) -> Vec<(&'static str, Box<dyn IdTimestamp>)> {
    let mut all: Vec<(&'static str, Box<dyn IdTimestamp>)> = Vec::new();
    if let Some(ms) = vector.timestamp_ms {
        all.push(("i64", Box::new(ms)));
        if let Ok(unsigned) = u64::try_from(ms) {
            all.push(("u64", Box::new(unsigned)));
            all.push((
                "SystemTime",
                Box::new(SystemTime::UNIX_EPOCH + Duration::from_millis(unsigned)),
            ));
        }
        all.push((
            "bson::DateTime",
            Box::new(idem_core::mongodb::bson::DateTime::from_millis(ms)),
        ));
        if let Some(date) = chrono::DateTime::from_timestamp_millis(ms) {
            all.push(("chrono", Box::new(date)));
        }
        // The `time` crate stops at year 9999 without its `large-dates` feature.
        if let Ok(date) =
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        {
            all.push(("time", Box::new(date)));
        }
    }
    if let Some(ns) = &vector.timestamp_ns {
        let ns: i128 = ns.parse().expect("timestamp_ns is an integer");
        let system = match u64::try_from(ns) {
            Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_nanos(after),
            Err(_) => SystemTime::UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs() as u64),
        };
        all.push(("SystemTime", Box::new(system)));
        let ns64 = i64::try_from(ns).expect("timestamp_ns fits an i64");
        all.push((
            "chrono",
            Box::new(chrono::DateTime::from_timestamp_nanos(ns64)),
        ));
        let date =
            time::OffsetDateTime::from_unix_timestamp_nanos(ns).expect("a time::OffsetDateTime");
        all.push(("time", Box::new(date)));
    }
    all
}

/// A model with one key field `k0`, `k1`, … per key, and a timestamp field `ts` if the vector
/// has a timestamp.
fn model(vector: &IdVector) -> Model {
    let scheme = match vector.scheme.as_str() {
        "v1" => IdScheme::V1,
        "joined" => IdScheme::Joined,
        other => panic!("unknown scheme {other}"),
    };
    assert_eq!(scheme.name(), vector.scheme);
    let mut fields: Vec<Field> = (0..vector.keys.len())
        .map(|index| {
            let name = leak(&format!("k{index}"));
            Field::new(name, name, Role::Key)
        })
        .collect();
    if vector.timestamp_ms.is_some() || vector.timestamp_ns.is_some() {
        fields.push(Field::new("ts", "ts", Role::Timestamp));
    }
    Model::new(
        "vectors",
        scheme,
        "sourceHash",
        Box::leak(fields.into_boxed_slice()),
    )
}

fn problem_name(problem: &TimestampProblem) -> &'static str {
    match problem {
        TimestampProblem::BeforeUnixEpoch => "before_unix_epoch",
        TimestampProblem::AfterUlidRange => "after_ulid_range",
        _ => "unknown",
    }
}

/// What is wrong with one `derive_id` result, if anything.
fn check_result(vector: &IdVector, result: Result<Id, Error>) -> Option<String> {
    let expected_field = vector.error_key_index.map(|index| format!("k{index}"));
    match (result.map_err(Error::into_kind), vector.error.as_deref()) {
        (Ok(id), None) => {
            let text = id.to_string();
            let expected_ms = match &vector.timestamp_ns {
                Some(ns) => ns.parse::<i128>().unwrap().div_euclid(1_000_000) as u64,
                None => vector.timestamp_ms.unwrap_or(0) as u64,
            };
            let round_trip: Option<Id> = text.parse().ok();
            if Some(&text) != vector.id.as_ref() {
                Some(format!("id {text}, expected {:?}", vector.id))
            } else if Some(hex(&id.hash_part())) != vector.hash_part_hex {
                Some(format!(
                    "hash part {}, expected {:?}",
                    hex(&id.hash_part()),
                    vector.hash_part_hex
                ))
            } else if id.timestamp_ms() != expected_ms {
                Some(format!(
                    "time part {}, expected {expected_ms}",
                    id.timestamp_ms()
                ))
            } else if round_trip != Some(id) {
                Some(format!("{text} does not parse back to the same id"))
            } else {
                None
            }
        }
        (Err(ErrorKind::AmbiguousKey { field, .. }), Some("ambiguous_key"))
        | (Err(ErrorKind::EmptyKey { field, .. }), Some("empty_key"))
            if Some(field) == expected_field.as_deref() =>
        {
            None
        }
        (
            Err(ErrorKind::TimestampOutOfRange {
                field: "ts",
                problem,
                ..
            }),
            Some("timestamp_out_of_range"),
        ) if Some(problem_name(&problem)) == vector.timestamp_problem.as_deref() => None,
        (Ok(id), Some(error)) => Some(format!("gave id {id}, expected error {error}")),
        (Err(error), expected) => Some(format!("refused with {error:?}, expected {expected:?}")),
    }
}

#[test]
fn id_vectors_match_idem_core() {
    let vectors: Vec<IdVector> =
        serde_json::from_str(&docs_file("id-vectors.json")).expect("docs/id-vectors.json parses");
    let spec = docs_file("SPEC.md");
    let mut problems = Vec::new();
    for vector in &vectors {
        let model = model(vector);
        let values: Vec<KeyValue> = vector.keys.iter().map(KeyValue::from_json).collect();
        let mut stamps: Vec<(&str, Option<Box<dyn IdTimestamp>>)> = timestamps(vector)
            .into_iter()
            .map(|(name, stamp)| (name, Some(stamp)))
            .collect();
        if stamps.is_empty() {
            stamps.push(("none", None));
        }
        for (key_types, represent) in KEY_TYPES {
            let boxed: Vec<Box<dyn IdKey>> = values.iter().map(represent).collect();
            let keys: Vec<&dyn IdKey> = boxed.iter().map(|key| key.as_ref()).collect();
            for (stamp_type, stamp) in &stamps {
                if let Some(problem) =
                    check_result(vector, derive_id(&model, &keys, stamp.as_deref()))
                {
                    problems.push(format!(
                        "{} ({key_types} keys, {stamp_type} timestamp): {problem}",
                        vector.name
                    ));
                }
            }
            if vector.scheme == "v1" && vector.error.is_none() {
                let mut hashed = Vec::new();
                for key in &keys {
                    encode_key_v1(key.key_part(), |bytes| hashed.extend_from_slice(bytes));
                }
                if Some(hex(&hashed)) != vector.hashed_hex {
                    problems.push(format!(
                        "{}: v1 encoding {}, expected {:?}",
                        vector.name,
                        hex(&hashed),
                        vector.hashed_hex
                    ));
                }
            }
        }
        for shown in [Some(&vector.name), vector.id.as_ref()]
            .into_iter()
            .flatten()
        {
            if !spec.contains(shown.as_str()) {
                problems.push(format!("{}: {shown} is not in docs/SPEC.md", vector.name));
            }
        }
    }
    assert_no_problems("id vectors", vectors.len(), &problems);
}

// ---------------------------------------------------------------------------------------------
// Content-hash vectors
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct HashVector {
    name: String,
    input: Value,
    document: Option<DocumentJson>,
    canonical_hex: String,
    hash: String,
}

#[derive(Deserialize)]
struct DocumentJson {
    hash_field: String,
    volatile: Vec<String>,
}

/// A value of `hash-vectors.json`, serialized through the serde call its kind names.
#[derive(Debug)]
enum Typed {
    Null,
    None,
    Unit,
    UnitStruct,
    Some(Box<Typed>),
    NewtypeStruct(Box<Typed>),
    Bool(bool),
    Integer(i128),
    LargeUnsigned(u128),
    F64(f64),
    F32(f32),
    Text(String),
    Char(char),
    Bytes(Vec<u8>),
    Seq(Vec<Typed>),
    Tuple(Vec<Typed>),
    Map(Vec<(Typed, Typed)>),
    Struct(&'static str, Vec<(&'static str, Typed)>),
    UnitVariant(&'static str),
    NewtypeVariant(&'static str, Box<Typed>),
    TupleVariant(&'static str, Vec<Typed>),
    StructVariant(&'static str, Vec<(&'static str, Typed)>),
}

fn parse_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn text_of(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected text, got {value}"))
}

fn items(value: &Value) -> Vec<Typed> {
    value
        .as_array()
        .expect("a list of values")
        .iter()
        .map(Typed::from_json)
        .collect()
}

fn fields(value: &Value) -> Vec<(&'static str, Typed)> {
    let pairs = value.as_array().expect("a list of [name, value] pairs");
    pairs
        .iter()
        .map(|pair| (leak(text_of(&pair[0])), Typed::from_json(&pair[1])))
        .collect()
}

impl Typed {
    fn from_json(value: &Value) -> Typed {
        let object = value
            .as_object()
            .expect("a typed value is a one-entry object");
        assert_eq!(
            object.len(),
            1,
            "a typed value is a one-entry object: {value}"
        );
        let (kind, payload) = object.iter().next().unwrap();
        match kind.as_str() {
            "null" => Typed::Null,
            "none" => Typed::None,
            "unit" => Typed::Unit,
            "unit_struct" => Typed::UnitStruct,
            "some" => Typed::Some(Box::new(Typed::from_json(payload))),
            "newtype_struct" => Typed::NewtypeStruct(Box::new(Typed::from_json(payload))),
            "bool" => Typed::Bool(payload.as_bool().expect("a bool")),
            "int" => match text_of(payload).parse::<i128>() {
                Ok(value) => Typed::Integer(value),
                Err(_) => Typed::LargeUnsigned(text_of(payload).parse().expect("an integer")),
            },
            "f64" => Typed::F64(text_of(payload).parse().expect("an f64")),
            "f64_bits" => Typed::F64(f64::from_bits(
                u64::from_str_radix(text_of(payload), 16).unwrap(),
            )),
            "f32_bits" => Typed::F32(f32::from_bits(
                u32::from_str_radix(text_of(payload), 16).unwrap(),
            )),
            "text" => Typed::Text(text_of(payload).to_owned()),
            "char" => Typed::Char(text_of(payload).chars().next().expect("a char")),
            "bytes" => Typed::Bytes(parse_hex(text_of(payload))),
            "seq" => Typed::Seq(items(payload)),
            "tuple" => Typed::Tuple(items(payload)),
            "map" => Typed::Map(
                payload
                    .as_array()
                    .expect("a list of [key, value] pairs")
                    .iter()
                    .map(|pair| (Typed::from_json(&pair[0]), Typed::from_json(&pair[1])))
                    .collect(),
            ),
            "struct" => Typed::Struct(leak(text_of(&payload["name"])), fields(&payload["fields"])),
            "unit_variant" => Typed::UnitVariant(leak(text_of(payload))),
            "newtype_variant" => Typed::NewtypeVariant(
                leak(text_of(&payload[0])),
                Box::new(Typed::from_json(&payload[1])),
            ),
            "tuple_variant" => Typed::TupleVariant(leak(text_of(&payload[0])), items(&payload[1])),
            "struct_variant" => {
                Typed::StructVariant(leak(text_of(&payload[0])), fields(&payload[1]))
            }
            other => panic!("unknown value kind {other}"),
        }
    }
}

impl Serialize for Typed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Typed::Null | Typed::Unit => serializer.serialize_unit(),
            Typed::None => serializer.serialize_none(),
            Typed::UnitStruct => serializer.serialize_unit_struct("Unit"),
            Typed::Some(value) => serializer.serialize_some(value),
            Typed::NewtypeStruct(value) => serializer.serialize_newtype_struct("Newtype", value),
            Typed::Bool(value) => serializer.serialize_bool(*value),
            // Integers go through the narrowest usual call, as real fields would.
            Typed::Integer(value) => match (i64::try_from(*value), u64::try_from(*value)) {
                (Ok(small), _) => serializer.serialize_i64(small),
                (_, Ok(unsigned)) => serializer.serialize_u64(unsigned),
                _ => serializer.serialize_i128(*value),
            },
            Typed::LargeUnsigned(value) => serializer.serialize_u128(*value),
            Typed::F64(value) => serializer.serialize_f64(*value),
            Typed::F32(value) => serializer.serialize_f32(*value),
            Typed::Text(text) => serializer.serialize_str(text),
            Typed::Char(c) => serializer.serialize_char(*c),
            Typed::Bytes(bytes) => serializer.serialize_bytes(bytes),
            Typed::Seq(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Typed::Tuple(items) => {
                let mut tuple = serializer.serialize_tuple(items.len())?;
                for item in items {
                    tuple.serialize_element(item)?;
                }
                tuple.end()
            }
            Typed::Map(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            Typed::Struct(name, fields) => {
                let mut state = serializer.serialize_struct(name, fields.len())?;
                for (field, value) in fields {
                    state.serialize_field(field, value)?;
                }
                state.end()
            }
            Typed::UnitVariant(variant) => serializer.serialize_unit_variant("Enum", 0, variant),
            Typed::NewtypeVariant(variant, value) => {
                serializer.serialize_newtype_variant("Enum", 0, variant, value)
            }
            Typed::TupleVariant(variant, items) => {
                let mut state =
                    serializer.serialize_tuple_variant("Enum", 0, variant, items.len())?;
                for item in items {
                    state.serialize_field(item)?;
                }
                state.end()
            }
            Typed::StructVariant(variant, fields) => {
                let mut state =
                    serializer.serialize_struct_variant("Enum", 0, variant, fields.len())?;
                for (field, value) in fields {
                    state.serialize_field(field, value)?;
                }
                state.end()
            }
        }
    }
}

/// A model whose documents leave out `document`'s volatile fields and hash field.
fn document_model(document: &DocumentJson) -> Model {
    let fields: Vec<Field> = document
        .volatile
        .iter()
        .map(|name| {
            let name = leak(name);
            Field::new(name, name, Role::Volatile)
        })
        .collect();
    Model::new(
        "documents",
        IdScheme::V1,
        leak(&document.hash_field),
        Box::leak(fields.into_boxed_slice()),
    )
}

fn hash_vectors() -> Vec<HashVector> {
    serde_json::from_str(&docs_file("hash-vectors.json")).expect("docs/hash-vectors.json parses")
}

/// The canonical bytes (hex) and hash of `value`, as a document of `document` if given.
fn encode<T: Serialize + ?Sized>(value: &T, document: Option<&DocumentJson>) -> (String, String) {
    match document {
        Some(document) => {
            let model = document_model(document);
            let bytes = canonical_document_bytes(value, &model).expect("encodes");
            (
                hex(&bytes),
                content_hash(value, &model).expect("hashes").to_hex(),
            )
        }
        None => (
            hex(&canonical_bytes(value).expect("encodes")),
            hash_value(value).expect("hashes").to_hex(),
        ),
    }
}

#[test]
fn hash_vectors_match_idem_core() {
    let vectors = hash_vectors();
    let spec = docs_file("SPEC.md");
    let mut problems = Vec::new();
    for vector in &vectors {
        let value = Typed::from_json(&vector.input);
        let (canonical, hash) = encode(&value, vector.document.as_ref());
        if canonical != vector.canonical_hex {
            problems.push(format!(
                "{}: canonical bytes {canonical}, expected {}",
                vector.name, vector.canonical_hex
            ));
        }
        if hash != vector.hash {
            problems.push(format!(
                "{}: hash {hash}, expected {}",
                vector.name, vector.hash
            ));
        }
        for shown in [&vector.name, &vector.hash] {
            if !spec.contains(shown.as_str()) {
                problems.push(format!("{}: {shown} is not in docs/SPEC.md", vector.name));
            }
        }
    }
    assert_no_problems("hash vectors", vectors.len(), &problems);
}

// ---------------------------------------------------------------------------------------------
// Real Rust values against the golden hashes
// ---------------------------------------------------------------------------------------------

/// Checks that `value` hashes to `expected` and matches the vector `name` of hash-vectors.json.
#[track_caller]
fn assert_golden<T: Serialize + ?Sized>(name: &str, value: &T, expected: &str) {
    let vectors = hash_vectors();
    let vector = vectors
        .iter()
        .find(|vector| vector.name == name)
        .unwrap_or_else(|| panic!("no hash vector named {name}"));
    let (canonical, hash) = encode(value, vector.document.as_ref());
    assert_eq!(canonical, vector.canonical_hex, "canonical bytes of {name}");
    assert_eq!(hash, vector.hash, "hash of {name} in hash-vectors.json");
    assert_eq!(hash, expected, "golden hash of {name}");
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Post {
    slug: String,
    lang: String,
    published_at: i64,
    title: String,
    body: String,
    fetched_at: i64,
    author_id: String,
    source_hash: Option<String>,
}

fn post() -> Post {
    Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
        body: "First post.".into(),
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
        source_hash: None,
    }
}

#[test]
fn a_derived_struct_hashes_to_the_golden_values() {
    const DOCUMENT: &str = "d0d0f7d6ee46746d51124724b9830a689bbe3e84a8e4094a6f160f2e17a5702c";
    assert_golden(
        "post-value",
        &post(),
        "ee41b3c3e7e7fff70e1ffaa4d1110b34e9c550c8b223cc0ebb1fa6faef5b3406",
    );
    assert_golden("post-document", &post(), DOCUMENT);
    let refetched = Post {
        fetched_at: 1_800_000_000_000,
        source_hash: Some("0".repeat(10)),
        ..post()
    };
    assert_golden("post-document-refetched", &refetched, DOCUMENT);

    #[derive(Serialize)]
    struct Point {
        y: i32,
        x: u8,
    }
    assert_golden(
        "struct",
        &Point { y: 2, x: 1 },
        "7940976147e11a9341c4dc8f5a62821c782392c5b173b98bd1013ed967761017",
    );
}

#[test]
fn json_values_hash_to_the_golden_values() {
    assert_golden(
        "null",
        &Value::Null,
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    );
    assert_golden(
        "map-empty",
        &json!({}),
        "34a6225b83a638ed08f01ecdbf30cf0be3478ffdd36be92295fee92c5585d57c",
    );
    assert_golden(
        "map-text-keys",
        &json!({"b": 1, "aa": 2, "a": 3}),
        "3a9710c49e4990bfadb62e0c27af730271898f47de682b1de8ed733249047524",
    );
    assert_golden(
        "map-nested",
        &json!({"outer": {"z": true, "y": [1.5]}}),
        "0252900d4aeaa9084c92740943fae9cfe910fc307bec254ba8a904869835fc57",
    );
    assert_golden(
        "seq",
        &json!([1, "a", null]),
        "7cf2ad60a567266ba9c6fe57c49cb9a8c17feb110aafba3ac6654c5200f7daa6",
    );
    assert_golden(
        "json-object",
        &json!({"slug": "hello-world", "lang": "en", "tags": ["rust", "mongodb"], "score": 4.5, "draft": false, "meta": null}),
        "8af4597190cb759131b80a0da0569b909b11d7e24f9ea40e40d03a99df3a54d3",
    );
    assert_golden(
        "map-document",
        &json!({"sourceHash": "x", "fetchedAt": 5, "slug": "a", "nested": {"fetchedAt": 6}}),
        "8fa33cf48bbadfd1fe137f0e52dcd56c368e5d5ef801dfa84b630df3961ad619",
    );
}

#[test]
fn scalars_of_every_width_hash_to_the_golden_values() {
    const SEVEN: &str = "e09ee460fed8d2762049172ceaec8ee138caf063c4ec4953d6e898ead6a65746";
    assert_golden("int-seven", &7u8, SEVEN);
    assert_golden("int-seven", &7i32, SEVEN);
    assert_golden("int-seven", &7u64, SEVEN);
    assert_golden("int-seven", &7u128, SEVEN);
    assert_golden("option-some", &Some(7i64), SEVEN);
    assert_golden(
        "int-zero",
        &0usize,
        "401da6ea6a614dd6d773b1ba84c91ee6d981827bd0bdc5188aa2e5dbffba558c",
    );
    assert_golden(
        "int-negative",
        &-1i8,
        "29b08e0d558b1774d2c7279f74323056906f8d15055ce3897db038f71470be51",
    );
    assert_golden(
        "int-i128-min",
        &i128::MIN,
        "4ab93f8ee5fbf076b428870d3a0e7b24c5f0386a027b4de9dad33051cd687a8b",
    );
    assert_golden(
        "int-u128-above-i128",
        &(1u128 << 127),
        "7aff320faac8d1d7a39c299b725f33e3333e277db7ad542cc0a12a5f88e9361d",
    );
    assert_golden(
        "int-u128-max",
        &u128::MAX,
        "74f680723ad4d0496e21ddc1fe775c72f40d78269228f9f72445133f4f3fb039",
    );
    assert_golden(
        "bool-true",
        &true,
        "9dcf97a184f32623d11a73124ceb99a5709b083721e878a16d78f596718ba7b2",
    );
    assert_golden(
        "bool-false",
        &false,
        "47dc540c94ceb704a23875c11273e16bb0b8a87aed84de911f2133568115f254",
    );
    assert_golden(
        "float",
        &1.5f64,
        "a39f5f7616203e78dbc030cf0b3c757dbafe91dca679b94ddbb4a4ef9fda84b9",
    );
    assert_golden(
        "float-zero",
        &0.0f64,
        "93e60f669b99ad3e3ee6284b139e57adfb419960f390858e46ea565bbf82d001",
    );
    assert_golden(
        "float-negative-zero",
        &-0.0f64,
        "93e60f669b99ad3e3ee6284b139e57adfb419960f390858e46ea565bbf82d001",
    );
    assert_golden(
        "float-negative-zero",
        &-0.0f32,
        "93e60f669b99ad3e3ee6284b139e57adfb419960f390858e46ea565bbf82d001",
    );
    assert_golden(
        "float-nan",
        &f64::NAN,
        "dad09c77208fb5a911e345040036cf9a0fe5ac0a40ae3db4c8b443bd57f85fc3",
    );
    assert_golden(
        "float-nan",
        &-f64::NAN,
        "dad09c77208fb5a911e345040036cf9a0fe5ac0a40ae3db4c8b443bd57f85fc3",
    );
    assert_golden(
        "float-nan",
        &f32::NAN,
        "dad09c77208fb5a911e345040036cf9a0fe5ac0a40ae3db4c8b443bd57f85fc3",
    );
    assert_golden(
        "float-infinity",
        &f64::INFINITY,
        "e0f81115c51c8f8635aab300b1b7c545672012278ba2a3c648b56e5edd00164d",
    );
    assert_golden(
        "float-f32",
        &0.1f32,
        "32c66b6bf264de8470cce776b733182530f5a37795a20f654008a2738986dd16",
    );
    assert_golden(
        "text-empty",
        "",
        "6c449f91c1adbf3945ad078f5f875c0c1f133f246c4588668faffbe23a3c195f",
    );
    assert_golden(
        "text-ascii",
        "abc",
        "ef25e757c6ccf92d99e38270a1d60dedf28ed7e2e631ad1590940c111dc4d205",
    );
    assert_golden(
        "text-unicode",
        "café",
        "e6f819f6206418024f01564f9d77b5e8ea0a5685868ff30e77f7c7fcec945ba2",
    );
    assert_golden(
        "char",
        &'é',
        "77d5eb273f45385119373344893427208c8891b83866729a2497ae60fe6039bd",
    );
    assert_golden(
        "tuple",
        &(true, 2u16),
        "c26a11643938b038739204a9533d57d75fddd8d5768ac6ff5c3d532cd88d729f",
    );
    assert_golden(
        "seq-empty",
        &Vec::<u8>::new(),
        "bd7c250566c6e99f47c174b589b7551f8b0e930ed056511d1e8f653bc71d3c4a",
    );
    assert_golden(
        "null",
        &(),
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    );
    assert_golden(
        "null",
        &Option::<String>::None,
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    );
}

#[test]
fn maps_hash_alike_in_every_insertion_order() {
    let in_order: BTreeMap<i64, &str> = [(1, "x"), (-1, "y"), (0, "z")].into_iter().collect();
    assert_golden(
        "map-int-keys",
        &in_order,
        "a9b6c55266bdd92855c8a55bbdc39b96ebba40af1447de02a428518efb604d03",
    );
    let hashed: std::collections::HashMap<i64, &str> =
        [(0, "z"), (-1, "y"), (1, "x")].into_iter().collect();
    assert_golden(
        "map-int-keys",
        &hashed,
        "a9b6c55266bdd92855c8a55bbdc39b96ebba40af1447de02a428518efb604d03",
    );
}

#[test]
fn enums_and_newtypes_hash_to_the_golden_values() {
    #[derive(Serialize)]
    enum Status {
        Draft,
        Published(i64),
        Moved(String, String),
        Edited { by: String },
    }
    #[derive(Serialize)]
    struct Slug(String);

    assert_golden(
        "unit-variant",
        &Status::Draft,
        "3ed3a967cdeae4491c5f23f96131d00422744cd5a8fe5408217fdb7580229cef",
    );
    assert_golden(
        "newtype-variant",
        &Status::Published(1_700_000_000_000),
        "70de92a28eb11165e35bcb56bb3eaf7fbb94a149161ff26e2e0b7a43d4d07d15",
    );
    assert_golden(
        "tuple-variant",
        &Status::Moved("a".into(), "b".into()),
        "b1fd850390d3b7288309c639e9cdd02b007c61ada5413268057a7a849933cf88",
    );
    assert_golden(
        "struct-variant",
        &Status::Edited { by: "ada".into() },
        "169c55a78c95b4b20a9a05e7c52f8d6d2a646d75b33e2b2994f96a0f643e812d",
    );
    assert_golden(
        "newtype-struct",
        &Slug("abc".into()),
        "ef25e757c6ccf92d99e38270a1d60dedf28ed7e2e631ad1590940c111dc4d205",
    );
}
