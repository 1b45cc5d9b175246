//! A row is prepared without the intermediate JSON where a pass over what serde writes vouches
//! for the document: light (its id, natural key, hashes and guarded values, all a re-ingest's
//! lookup sends and a judgement reads), or whole, each column's text straight from serde. The
//! pass must never vouch for a document the encoding through JSON refuses (a row stored
//! unchanged would then settle `Unchanged` where a single upsert refuses it), and where it
//! vouches, both must give what the JSON encoding gives. These tests hold it to that on every
//! shape the row encoding refuses or treats apart, and on generated documents.

use std::collections::BTreeMap;

use idem_core::Idempotent;
use proptest::prelude::*;
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

/// Whether the pass vouched for `doc`, after checking that its light and whole rows agree with
/// the JSON encoding's, and that it vouched for both or neither.
fn agreement<T: Idempotent + Serialize>(doc: &T) -> bool {
    let light = idem_core::__private::light_row_agreement(doc)
        .unwrap_or_else(|disagreement| panic!("light: {disagreement}"));
    let whole = match doc.id() {
        Ok(_) => idem_core::__private::row_encoding_agreement(doc)
            .unwrap_or_else(|disagreement| panic!("whole: {disagreement}")),
        Err(_) => false,
    };
    assert_eq!(
        light, whole,
        "the light and the whole row are vouched for alike"
    );
    light
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Nested {
    x: f64,
    label: String,
    map: BTreeMap<i32, String>,
}

/// Every column shape, guarded fields of several kinds, a version, and a field whose serde
/// writes another kind than its type (`views_text`).
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "light_articles")]
#[serde(rename_all = "camelCase")]
struct Article {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(frozen)]
    author: String,
    #[idem(frozen)]
    rating: f64,
    #[idem(version)]
    revision: u32,
    body: String,
    views: i64,
    score: f64,
    flag: bool,
    letter: char,
    tags: Vec<String>,
    nested: Nested,
    #[serde(skip_serializing_if = "Option::is_none")]
    maybe: Option<String>,
    #[serde(serialize_with = "as_text")]
    views_text: i64,
    wide: u64,
    level: Level,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum Level {
    Low,
    High(u8),
}

fn as_text<S: Serializer>(value: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    match *value < 0 {
        // A negative count is written as text: its integer column refuses it.
        true => serializer.serialize_str(&value.to_string()),
        false => serializer.serialize_i64(*value),
    }
}

fn article() -> Article {
    Article {
        slug: "hello".into(),
        lang: "en".into(),
        author: "ada".into(),
        rating: 4.5,
        revision: 3,
        body: "Some text".into(),
        views: 10,
        score: 0.5,
        flag: true,
        letter: 'x',
        tags: vec!["a".into(), "b".into()],
        nested: Nested {
            x: 1.0,
            label: "inner".into(),
            map: BTreeMap::from([(1, "one".into())]),
        },
        maybe: None,
        views_text: 7,
        wide: 1,
        level: Level::High(2),
    }
}

#[test]
fn an_ordinary_document_is_prepared_light_and_agrees_with_its_row() {
    assert!(agreement(&article()), "an ordinary document is vouched for");
    let mut more = article();
    more.maybe = Some("present".into());
    more.level = Level::Low;
    more.wide = u64::MAX;
    assert!(agreement(&more));
    // Floats and integers written as JSON writes them.
    for score in [1.0, -0.0, 1e20, 1.5e-7, 5e-324, f64::MAX] {
        assert!(agreement(&Article { score, ..article() }), "{score}");
    }
    for views in [i64::MIN, -1, 0, i64::MAX] {
        assert!(agreement(&Article { views, ..article() }), "{views}");
    }
}

#[test]
fn what_the_row_refuses_or_keeps_apart_is_never_vouched_for() {
    let cases: Vec<(&str, Article)> = vec![
        (
            "U+0000 in a text column",
            Article {
                body: "a\0b".into(),
                ..article()
            },
        ),
        (
            "U+0000 in a key",
            Article {
                slug: "a\0".into(),
                ..article()
            },
        ),
        (
            "U+0000 in a guarded field",
            Article {
                author: "\0".into(),
                ..article()
            },
        ),
        (
            "U+0000 in a list",
            Article {
                tags: vec!["\0".into()],
                ..article()
            },
        ),
        (
            "U+0000 deep down",
            Article {
                nested: Nested {
                    label: "\0".into(),
                    ..article().nested
                },
                ..article()
            },
        ),
        (
            "U+0000 in a char",
            Article {
                letter: '\0',
                ..article()
            },
        ),
        (
            "NaN deep down",
            Article {
                nested: Nested {
                    x: f64::NAN,
                    ..article().nested
                },
                ..article()
            },
        ),
        (
            "an infinity deep down",
            Article {
                nested: Nested {
                    x: f64::INFINITY,
                    ..article().nested
                },
                ..article()
            },
        ),
        (
            "NaN in its float column",
            Article {
                score: f64::NAN,
                ..article()
            },
        ),
        (
            "NaN in a guarded float",
            Article {
                rating: f64::NAN,
                ..article()
            },
        ),
        (
            "text in an integer column",
            Article {
                views_text: -3,
                ..article()
            },
        ),
    ];
    for (shape, doc) in cases {
        assert!(!agreement(&doc), "{shape}: prepared whole, not light");
    }
}

/// A flattened map: its entries go to the extra column, and one named as idem names its own
/// columns is refused.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "light_profiles")]
struct Profile {
    #[idem(key)]
    handle: String,
    #[idem(frozen)]
    joined: String,
    #[serde(flatten)]
    extra: BTreeMap<String, Extra>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Extra {
    Number(f64),
    Text(String),
    List(Vec<Extra>),
}

fn profile(extra: &[(&str, Extra)]) -> Profile {
    Profile {
        handle: "ada".into(),
        joined: "2024".into(),
        extra: extra
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect(),
    }
}

#[test]
fn a_flattened_field_is_vouched_for_only_where_its_entries_encode() {
    assert!(agreement(&profile(&[])));
    assert!(agreement(&profile(&[
        ("city", Extra::Text("Paris".into())),
        ("age", Extra::Number(36.0)),
        ("links", Extra::List(vec![Extra::Text("x".into())])),
    ])));
    for (shape, entries) in [
        (
            "an entry named _id",
            vec![("_id", Extra::Text("forged".into()))],
        ),
        // The content hash refuses a name written twice.
        (
            "an entry named as a field",
            vec![("joined", Extra::Text("2025".into()))],
        ),
        (
            "an entry named as the hash",
            vec![("sourceHash", Extra::Text("x".into()))],
        ),
        ("an entry holding NaN", vec![("n", Extra::Number(f64::NAN))]),
        (
            "NaN in an entry's list",
            vec![("l", Extra::List(vec![Extra::Number(f64::NAN)]))],
        ),
        (
            "U+0000 in an entry's name",
            vec![("a\0", Extra::Text("x".into()))],
        ),
        ("U+0000 in an entry", vec![("a", Extra::Text("\0".into()))]),
    ] {
        assert!(!agreement(&profile(&entries)), "{shape}: prepared whole");
    }
}

/// A hand-written `Serialize` that leaves out the key, or writes a field the type does not
/// declare: the row refuses both.
#[derive(Debug, Clone, Deserialize, Idempotent)]
#[idem(collection = "light_odd")]
struct Odd {
    #[idem(key)]
    code: String,
    note: String,
    #[serde(skip)]
    shape: OddShape,
}

#[derive(Debug, Clone, Copy, Default)]
enum OddShape {
    #[default]
    Plain,
    WithoutKey,
    Undeclared,
    NullKey,
}

impl Serialize for Odd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = serializer.serialize_struct("Odd", 3)?;
        match self.shape {
            OddShape::WithoutKey => {}
            OddShape::NullKey => fields.serialize_field("code", &None::<String>)?,
            _ => fields.serialize_field("code", &self.code)?,
        }
        fields.serialize_field("note", &self.note)?;
        if let OddShape::Undeclared = self.shape {
            fields.serialize_field("surprise", &1)?;
        }
        fields.end()
    }
}

#[test]
fn a_document_its_row_refuses_for_its_fields_is_never_vouched_for() {
    let odd = |shape| Odd {
        code: "c1".into(),
        note: "n".into(),
        shape,
    };
    assert!(agreement(&odd(OddShape::Plain)));
    for shape in [
        OddShape::WithoutKey,
        OddShape::Undeclared,
        OddShape::NullKey,
    ] {
        assert!(!agreement(&odd(shape)), "{shape:?}: prepared whole");
    }
}

/// An internally tagged struct writes a field no Rust field declares: its tag, which has a
/// column of its own.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "light_tagged")]
#[serde(tag = "kind")]
struct Tagged {
    #[idem(key)]
    number: String,
    #[idem(frozen)]
    total: i64,
}

#[test]
fn an_internally_tagged_struct_is_prepared_light() {
    assert!(agreement(&Tagged {
        number: "1".into(),
        total: 3,
    }));
}

/// Text that sometimes holds U+0000, floats that are sometimes not finite.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z ]{0,12}",
        1 => "[a-z]{0,3}\u{0}[a-z]{0,3}",
        1 => "\\PC{0,6}",
    ]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -1e6f64..1e6,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
    ]
}

prop_compose! {
    fn generated()(
        slug in text(), lang in text(), author in text(), rating in float(),
        revision in any::<u32>(), body in text(), views in any::<i64>(), score in float(),
        flag in any::<bool>(), letter in any::<char>(), tags in proptest::collection::vec(text(), 0..3),
        x in float(), label in text(), keys in proptest::collection::vec(any::<i32>(), 0..3),
        maybe in proptest::option::of(text()), views_text in any::<i64>(), wide in any::<u64>(),
        high in proptest::option::of(any::<u8>()),
    ) -> Article {
        Article {
            slug, lang, author, rating, revision, body, views, score, flag, letter, tags,
            nested: Nested { x, label, map: keys.into_iter().map(|key| (key, "v".to_owned())).collect() },
            maybe, views_text, wide,
            level: high.map_or(Level::Low, Level::High),
        }
    }
}

proptest! {
    // Failures print the minimal input; nothing is written next to the sources.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever the document holds, the light preparation vouches only for a row that encodes,
    /// and then agrees with it.
    #[test]
    fn a_generated_document_is_vouched_for_only_where_its_row_agrees(doc in generated()) {
        agreement(&doc);
    }

    #[test]
    fn a_generated_flattened_document_is_vouched_for_only_where_its_row_agrees(
        entries in proptest::collection::vec((text(), text(), float()), 0..4),
    ) {
        let entries: Vec<(String, Extra)> = entries
            .into_iter()
            .flat_map(|(name, text, number)| {
                [
                    (format!("{name}t"), Extra::Text(text)),
                    (format!("{name}n"), Extra::Number(number)),
                ]
            })
            .collect();
        let borrowed: Vec<(&str, Extra)> =
            entries.iter().map(|(name, value)| (name.as_str(), value.clone())).collect();
        agreement(&profile(&borrowed));
    }
}
