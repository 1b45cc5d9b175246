//! Properties of ids and content hashes over generated input (proptest): ids are deterministic,
//! `v1` is injective over more than 100,000 distinct key tuples, ids sort by timestamp, `joined`
//! refuses exactly the tuples with a ':', and content hashes do not depend on map insertion
//! order and equal SHA-256 over the canonical bytes.
//!
//! Each property checks idem against the spec's encodings as `idem-spec-reference`
//! (`spec-reference/`) writes them out from `docs/SPEC.md`, not against idem's own helpers.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use idem_core::hash::{canonical_bytes, canonical_document_bytes, content_hash, hash_value};
use idem_core::id::{derive_id, encode_key_v1, MAX_TIMESTAMP_MS};
use idem_core::{Error, ErrorKind, Field, IdKey, IdScheme, Idempotent, Model, Role};
use idem_spec_reference::content;
use idem_spec_reference::id::{hash_part, joined_input, v1_input, KeyValue};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde::ser::{Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------------
// Key tuples

/// A key value as a Rust type gives it.
#[derive(Clone, Debug)]
enum Key {
    Text(String),
    Char(char),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    Bool(bool),
}

impl Key {
    fn as_id_key(&self) -> &dyn IdKey {
        match self {
            Key::Text(value) => value,
            Key::Char(value) => value,
            Key::I64(value) => value,
            Key::U64(value) => value,
            Key::I128(value) => value,
            Key::U128(value) => value,
            Key::Bool(value) => value,
        }
    }

    /// The value the spec sees: a char is its one-character text, an integer has no width.
    fn value(&self) -> KeyValue {
        match self {
            Key::Text(text) => KeyValue::from(text.as_str()),
            Key::Char(c) => KeyValue::from(*c),
            Key::I64(n) => KeyValue::from(*n),
            Key::U64(n) => KeyValue::from(*n),
            Key::I128(n) => KeyValue::from(*n),
            Key::U128(n) => KeyValue::from(*n),
            Key::Bool(b) => KeyValue::from(*b),
        }
    }

    /// The text `joined` hashes for this key.
    fn joined_text(&self) -> String {
        self.value().joined_text()
    }
}

const fn key_fields<const N: usize>() -> [Field; N] {
    const NAMES: [&str; 4] = ["k0", "k1", "k2", "k3"];
    let mut fields = [Field::new("ts", "ts", Role::Timestamp); N];
    let mut i = 0;
    while i + 1 < N {
        fields[i] = Field::new(NAMES[i], NAMES[i], Role::Key);
        i += 1;
    }
    fields
}

static TWO_KEYS: [Field; 3] = key_fields::<3>();
static THREE_KEYS: [Field; 4] = key_fields::<4>();

/// A model with `keys` key fields (2 or 3) and a timestamp, under `scheme`.
fn model(scheme: IdScheme, keys: usize) -> Model {
    let fields: &'static [Field] = if keys == 2 { &TWO_KEYS } else { &THREE_KEYS };
    Model::new("properties", scheme, "sourceHash", fields)
}

fn id_of(
    scheme: IdScheme,
    keys: &[Key],
    timestamp: u64,
) -> Result<idem_core::Id, idem_core::Error> {
    let refs: Vec<&dyn IdKey> = keys.iter().map(Key::as_id_key).collect();
    derive_id(&model(scheme, keys.len()), &refs, Some(&timestamp))
}

/// Non-empty text that stresses the encodings: separators, NUL and the tag bytes, text that
/// looks like another key's encoding, unicode, and long strings (up to 1 KiB).
fn text() -> impl Strategy<Value = String> {
    let tricky = prop::sample::select(vec![
        'a', 'b', ':', '\0', '\u{1}', '\u{2}', '\u{4}', '\u{8}', ' ', 'é', '\u{301}', '日', '🦀',
    ]);
    prop_oneof![
        3 => vec(tricky, 1..16).prop_map(String::from_iter),
        3 => vec(any::<char>(), 1..24).prop_map(String::from_iter),
        1 => vec(any::<char>(), 1..64).prop_map(String::from_iter),
        1 => (1usize..=1024, any::<char>()).prop_map(|(len, c)| {
            let mut text = c.to_string().repeat(len);
            while text.len() > 1024 {
                text.pop();
            }
            text
        }),
        // An encoded text key, as text: a 2-key tuple must not meet a 1-key prefix of it.
        1 => vec(any::<char>(), 1..8).prop_map(|inner| {
            let inner = String::from_iter(inner);
            let mut text = String::from("\u{1}");
            for byte in (inner.len() as u64).to_be_bytes() {
                text.push(char::from(byte));
            }
            text + &inner
        }),
    ]
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        8 => text().prop_map(Key::Text),
        1 => any::<char>().prop_map(Key::Char),
        2 => any::<i64>().prop_map(Key::I64),
        1 => (-3i64..=3).prop_map(Key::I64),
        1 => any::<u64>().prop_map(Key::U64),
        1 => any::<i128>().prop_map(Key::I128),
        1 => any::<u128>().prop_map(Key::U128),
        1 => ((i128::MAX as u128)..=u128::MAX).prop_map(Key::U128),
        1 => any::<bool>().prop_map(Key::Bool),
    ]
}

fn tuple() -> impl Strategy<Value = Vec<Key>> {
    vec(key(), 2..=3)
}

fn timestamp() -> impl Strategy<Value = u64> {
    prop_oneof![0..=MAX_TIMESTAMP_MS, Just(0), Just(MAX_TIMESTAMP_MS)]
}

// ---------------------------------------------------------------------------------------------
// Ids

/// A type whose keys are text, an integer and a boolean, to compare the generated
/// `derive_id` with `id()` and with the runtime's `derive_id`.
#[derive(Clone, Debug, serde::Serialize, Idempotent)]
#[idem(collection = "mixed")]
struct Mixed {
    #[idem(key)]
    name: String,
    #[idem(key)]
    number: i64,
    #[idem(key)]
    flag: bool,
    #[idem(timestamp)]
    at: u64,
}

/// Failures print the minimal input; nothing is written next to the sources.
fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(2_000))]

    #[test]
    fn ids_are_deterministic(keys in tuple(), ts in timestamp()) {
        for scheme in [IdScheme::V1, IdScheme::Joined] {
            let first = id_of(scheme, &keys, ts);
            let second = id_of(scheme, &keys, ts);
            match (&first, &second) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                _ => prop_assert!(false, "{:?} then {:?}", first, second),
            }
        }
        // The same values in other Rust types (a char as text, integers of other widths) give
        // the same id.
        let widened: Vec<Key> = keys
            .iter()
            .map(|key| match key.value() {
                KeyValue::Text(text) => Key::Text(text),
                KeyValue::Integer(n) => Key::I128(n),
                KeyValue::LargeUnsigned(n) => Key::U128(n),
                KeyValue::Bool(b) => Key::Bool(b),
            })
            .collect();
        prop_assert_eq!(
            id_of(IdScheme::V1, &keys, ts).ok(),
            id_of(IdScheme::V1, &widened, ts).ok()
        );
    }

    #[test]
    fn generated_derive_id_equals_id_and_the_runtime(
        name in text(),
        number in any::<i64>(),
        flag in any::<bool>(),
        at in timestamp(),
    ) {
        let doc = Mixed { name: name.clone(), number, flag, at };
        let generated = Mixed::derive_id(&name, number, flag, &at).unwrap();
        prop_assert_eq!(generated, doc.id().unwrap());
        prop_assert_eq!(generated, doc.clone().id().unwrap());
        let runtime = derive_id(
            &Mixed::MODEL,
            &[&name as &dyn IdKey, &number, &flag],
            Some(&at),
        )
        .unwrap();
        prop_assert_eq!(generated, runtime);
        prop_assert_eq!(generated.timestamp_ms(), at);
    }

    #[test]
    fn ulid_order_follows_timestamp_order(
        a in tuple(),
        b in tuple(),
        ta in timestamp(),
        tb in timestamp(),
    ) {
        let (Ok(ia), Ok(ib)) = (id_of(IdScheme::V1, &a, ta), id_of(IdScheme::V1, &b, tb)) else {
            return Err(TestCaseError::fail("a valid tuple was refused"));
        };
        prop_assert_eq!(ia.timestamp_ms(), ta);
        prop_assert_eq!(ib.timestamp_ms(), tb);
        if ta != tb {
            prop_assert_eq!(ia.cmp(&ib), ta.cmp(&tb));
            prop_assert_eq!(ia.to_string().cmp(&ib.to_string()), ta.cmp(&tb));
            prop_assert_eq!(ia.to_bytes().cmp(&ib.to_bytes()), ta.cmp(&tb));
        }
        // The same keys at two times: only the time part differs.
        let later = id_of(IdScheme::V1, &a, tb).unwrap();
        prop_assert_eq!(ia.hash_part(), later.hash_part());
    }

    #[test]
    fn joined_refuses_exactly_the_tuples_containing_a_colon(
        keys in tuple(),
        ts in timestamp(),
    ) {
        let texts: Vec<String> = keys.iter().map(Key::joined_text).collect();
        match id_of(IdScheme::Joined, &keys, ts).map_err(Error::into_kind) {
            Ok(id) => {
                prop_assert!(texts.iter().all(|t| !t.contains(':')), "{:?}", texts);
                let values: Vec<KeyValue> = keys.iter().map(Key::value).collect();
                prop_assert_eq!(id.hash_part(), hash_part(joined_input(&values).as_bytes()));
                prop_assert_eq!(id.timestamp_ms(), ts);
            }
            Err(ErrorKind::AmbiguousKey { field, value, .. }) => {
                let first = texts.iter().position(|t| t.contains(':'));
                prop_assert!(first.is_some(), "refused without a ':': {:?}", texts);
                let first = first.unwrap();
                prop_assert_eq!(field, ["k0", "k1", "k2"][first]);
                prop_assert_eq!(&value, &texts[first]);
            }
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn an_empty_text_key_is_refused_under_both_schemes(
        mut keys in tuple(),
        position in 0usize..3,
        ts in timestamp(),
    ) {
        let position = position.min(keys.len() - 1);
        keys[position] = Key::Text(String::new());
        for scheme in [IdScheme::V1, IdScheme::Joined] {
            match id_of(scheme, &keys, ts).map_err(Error::into_kind) {
                // joined refuses the first key that is empty or holds a ':'.
                Err(ErrorKind::AmbiguousKey { .. }) if scheme == IdScheme::Joined => {
                    let first_colon = keys.iter().position(|k| k.joined_text().contains(':'));
                    prop_assert!(first_colon.is_some_and(|colon| colon < position));
                }
                Err(ErrorKind::EmptyKey { field, .. }) => {
                    let first_empty = keys
                        .iter()
                        .position(|k| k.joined_text().is_empty())
                        .unwrap();
                    prop_assert_eq!(field, ["k0", "k1", "k2"][first_empty]);
                }
                other => prop_assert!(false, "{:?}: expected EmptyKey, got {:?}", scheme, other),
            }
        }
    }
}

/// More than 100,000 distinct key tuples (2 or 3 keys), with no two sharing a `v1` encoding or
/// a hash part. The encoding is checked against the spec's.
#[test]
fn v1_is_injective_over_100_000_distinct_key_tuples() {
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(Config {
        cases: 105_000,
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    });
    let by_hash_part: RefCell<HashMap<[u8; 10], Vec<KeyValue>>> = RefCell::default();
    let by_encoding: RefCell<HashMap<Vec<u8>, Vec<KeyValue>>> = RefCell::default();
    runner
        .run(&tuple(), |keys| {
            let values: Vec<KeyValue> = keys.iter().map(Key::value).collect();
            let spec = v1_input(&values);
            let mut encoded = Vec::new();
            for key in &keys {
                encode_key_v1(key.as_id_key().key_part(), |bytes| {
                    encoded.extend_from_slice(bytes)
                });
            }
            prop_assert_eq!(&encoded, &spec, "the encoding of {:?}", keys);
            let id = id_of(IdScheme::V1, &keys, 0).unwrap();
            prop_assert_eq!(id.hash_part(), hash_part(&spec));

            if let Some(other) = by_encoding
                .borrow_mut()
                .insert(spec, values.clone())
                .filter(|other| *other != values)
            {
                return Err(TestCaseError::fail(format!(
                    "{other:?} and {values:?} share a v1 encoding"
                )));
            }
            if let Some(other) = by_hash_part
                .borrow_mut()
                .insert(id.hash_part(), values.clone())
                .filter(|other| *other != values)
            {
                return Err(TestCaseError::fail(format!(
                    "{other:?} and {values:?} share a hash part"
                )));
            }
            Ok(())
        })
        .unwrap();
    let distinct = by_encoding.borrow().len();
    assert!(distinct >= 100_000, "only {distinct} distinct tuples");
    assert_eq!(by_hash_part.borrow().len(), distinct);
    eprintln!(
        "v1: {distinct} distinct key tuples, no shared encoding or hash part ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Content hashes

/// Map entries serialized in the order given: what a map type with insertion order (an
/// `IndexMap`, a JSON object parsed in order) hands the serializer.
struct InOrder<'a, K, V>(&'a [(K, V)]);

impl<K: Serialize, V: Serialize> Serialize for InOrder<'_, K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        "\\PC{0,16}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("\\PC{0,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// The same entries in two orders.
type Shuffled<K, V> = (Vec<(K, V)>, Vec<(K, V)>);

/// Distinct-keyed entries in two independent shuffles.
fn shuffled_entries<K, V>(
    keys: impl Strategy<Value = K>,
    values: impl Strategy<Value = V>,
) -> impl Strategy<Value = Shuffled<K, V>>
where
    K: Ord + Clone + std::fmt::Debug,
    V: Clone + std::fmt::Debug,
{
    btree_map(keys, values, 0..16).prop_flat_map(|map| {
        let entries: Vec<(K, V)> = map.into_iter().collect();
        (
            Just(entries.clone()).prop_shuffle(),
            Just(entries).prop_shuffle(),
        )
    })
}

/// A document with a map field, whose content hash must not depend on the map's order.
#[derive(Clone, Debug, serde::Serialize, Idempotent)]
#[idem(collection = "tagged")]
struct Tagged {
    #[idem(key)]
    name: String,
    tags: HashMap<String, Value>,
    #[idem(volatile)]
    seen_at: i64,
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn content_hashes_do_not_depend_on_map_insertion_order(
        (first, second) in shuffled_entries("\\PC{0,12}", json()),
    ) {
        let hash_map: HashMap<String, Value> = first.iter().cloned().collect();
        let reinserted: HashMap<String, Value> = second.iter().cloned().collect();
        let b_tree: BTreeMap<String, Value> = second.iter().cloned().collect();
        let object: serde_json::Map<String, Value> = first.iter().cloned().collect();
        let expected = hash_value(&InOrder(&first)).unwrap();
        prop_assert_eq!(hash_value(&InOrder(&second)).unwrap(), expected);
        prop_assert_eq!(hash_value(&hash_map).unwrap(), expected);
        prop_assert_eq!(hash_value(&reinserted).unwrap(), expected);
        prop_assert_eq!(hash_value(&b_tree).unwrap(), expected);
        prop_assert_eq!(hash_value(&object).unwrap(), expected);
        prop_assert_eq!(hash_value(&Value::Object(object)).unwrap(), expected);

        // In a document too, and a new entry is a change.
        let doc = |tags: HashMap<String, Value>| Tagged { name: "t".into(), tags, seen_at: 1 };
        prop_assert_eq!(
            doc(hash_map.clone()).content_hash().unwrap(),
            doc(reinserted).content_hash().unwrap()
        );
        let mut grown = hash_map.clone();
        grown.insert("\u{10FFFF}new".into(), Value::Null);
        prop_assert_ne!(hash_value(&grown).unwrap(), expected);
        prop_assert_ne!(
            doc(hash_map).content_hash().unwrap(),
            doc(grown).content_hash().unwrap()
        );
    }

    #[test]
    fn maps_with_integer_keys_do_not_depend_on_insertion_order(
        (first, second) in shuffled_entries(any::<i64>(), "\\PC{0,8}"),
    ) {
        let hash_map: HashMap<i64, String> = first.iter().cloned().collect();
        let b_tree: BTreeMap<i64, String> = second.iter().cloned().collect();
        let expected = hash_value(&InOrder(&first)).unwrap();
        prop_assert_eq!(hash_value(&InOrder(&second)).unwrap(), expected);
        prop_assert_eq!(hash_value(&hash_map).unwrap(), expected);
        prop_assert_eq!(hash_value(&b_tree).unwrap(), expected);
        // Keys of another width are the same keys.
        let widened: BTreeMap<i128, String> =
            first.iter().map(|(k, v)| (i128::from(*k), v.clone())).collect();
        prop_assert_eq!(hash_value(&widened).unwrap(), expected);
    }

    #[test]
    fn hash_value_is_sha256_over_canonical_bytes(value in json()) {
        let hash = hash_value(&value).unwrap();
        let bytes = canonical_bytes(&value).unwrap();
        prop_assert_eq!(hash.as_bytes().to_vec(), Sha256::digest(&bytes).to_vec());
        // Equal values hash equal: a clone, and the same value rebuilt from its text.
        prop_assert_eq!(hash_value(&value.clone()).unwrap(), hash);
        prop_assert_eq!(canonical_bytes(&value.clone()).unwrap(), bytes);
    }

    #[test]
    fn a_document_hash_is_sha256_over_its_canonical_bytes(
        name in "\\PC{1,16}",
        (tags, _) in shuffled_entries("\\PC{0,8}", json()),
        seen_at in any::<i64>(),
    ) {
        let doc = Tagged { name, tags: tags.into_iter().collect(), seen_at };
        let hash = doc.content_hash().unwrap();
        prop_assert_eq!(hash, content_hash(&doc, &Tagged::MODEL).unwrap());
        let bytes = canonical_document_bytes(&doc, &Tagged::MODEL).unwrap();
        prop_assert_eq!(hash.as_bytes().to_vec(), Sha256::digest(&bytes).to_vec());
        // The volatile field is left out: another value, the same hash.
        let later = Tagged { seen_at: seen_at.wrapping_add(1), ..doc.clone() };
        prop_assert_eq!(later.content_hash().unwrap(), hash);
    }

    #[test]
    fn integers_of_every_width_hash_alike(n in any::<i32>()) {
        let expected = hash_value(&i64::from(n)).unwrap();
        prop_assert_eq!(hash_value(&n).unwrap(), expected);
        prop_assert_eq!(hash_value(&i128::from(n)).unwrap(), expected);
        prop_assert_eq!(hash_value(&Value::from(n)).unwrap(), expected);
        if let Ok(unsigned) = u64::try_from(n) {
            prop_assert_eq!(hash_value(&unsigned).unwrap(), expected);
            prop_assert_eq!(hash_value(&u128::from(unsigned)).unwrap(), expected);
        }
    }

    #[test]
    fn every_nan_and_both_zeros_are_canonical(payload in any::<u64>(), x in any::<f64>()) {
        let nan = f64::from_bits(0x7ff0_0000_0000_0000 | payload | 1);
        let negative_nan = f64::from_bits(nan.to_bits() | (1 << 63));
        prop_assert!(nan.is_nan() && negative_nan.is_nan());
        let expected = hash_value(&f64::NAN).unwrap();
        prop_assert_eq!(hash_value(&nan).unwrap(), expected);
        prop_assert_eq!(hash_value(&negative_nan).unwrap(), expected);
        prop_assert_eq!(hash_value(&(nan as f32)).unwrap(), expected);
        prop_assert_eq!(hash_value(&-0.0f64).unwrap(), hash_value(&0.0f64).unwrap());
        prop_assert_eq!(hash_value(&-0.0f32).unwrap(), hash_value(&0.0f64).unwrap());
        // Any other float hashes as its own bits.
        if !x.is_nan() && x != 0.0 {
            prop_assert_eq!(canonical_bytes(&x).unwrap(), content::float(x).to_vec());
            prop_assert_ne!(hash_value(&x).unwrap(), expected);
        }
    }
}
