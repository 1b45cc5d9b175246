//! `get` and `find`: a stored document reads back as its type, by id and by natural key, exactly
//! as it was written (nulls, defaults, flattened entries, NaN and the infinities included, maps
//! keyed by integers; MariaDB refuses NaN and the infinities, which its `DOUBLE` cannot hold); a
//! stored document that does not read as its type is an error naming the value.

use idem_core::{Deletion, Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

use crate::support::assert_non_finite_refused_on_mariadb;

/// A card read back exactly as it was written: a key serde stores as a 32-bit integer, an
/// optional field serde omits and one it stores as null, an infinite score, a list, and a
/// tombstone; `deny_unknown_fields`, so any field of idem's own left in the read would fail it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "cards")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Card {
    #[idem(key)]
    handle: String,
    #[idem(key)]
    shard: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    bio: Option<String>,
    nickname: Option<String>,
    score: f64,
    tags: Vec<String>,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

/// A type whose unknown fields serde keeps in a flattened map, with a field stored under the
/// name a query gives its table (`t`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "labels")]
struct Label {
    #[idem(key)]
    name: String,
    reading: f64,
    #[serde(rename = "t")]
    tally: i32,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, String>,
}

/// `get` by id and the generated `find` by natural key return what was written, as the type;
/// `None` for what is not stored; a deleted document with its tombstone set.
#[tokio::test]
async fn a_document_reads_back_as_its_type_by_id_and_by_natural_key() {
    let card = Card {
        handle: "ada".into(),
        shard: 7,
        bio: None,
        nickname: None,
        score: f64::INFINITY,
        tags: vec!["first".into(), "second".into()],
        deleted_at: None,
    };
    let label = Label {
        name: "sensor".into(),
        reading: f64::NAN,
        tally: 3,
        extra: [("unit".to_owned(), "kPa".to_owned())].into(),
    };
    for db in fresh_backends("typed_reads").await {
        db.ensure::<Card>().await;
        db.ensure::<Label>().await;
        // MariaDB's `DOUBLE` holds no infinity and no NaN: both refused there (`floats.rs`), the
        // rest read back with finite floats in their place.
        let (card, label) = match db.is_mysql() {
            true => {
                assert_non_finite_refused_on_mariadb(&db, &card, "score").await;
                assert_non_finite_refused_on_mariadb(&db, &label, "reading").await;
                let card = Card {
                    score: 1.5,
                    ..card.clone()
                };
                let label = Label {
                    reading: 0.25,
                    ..label.clone()
                };
                (card, label)
            }
            false => (card.clone(), label.clone()),
        };
        db.upsert(&card).await.unwrap();
        db.upsert(&label).await.unwrap();
        let id = card.id().unwrap();

        assert_eq!(
            db.get::<Card>(id).await.unwrap(),
            Some(card.clone()),
            "{db}"
        );
        assert_eq!(
            db.find::<Card>(card.natural_key()).await.unwrap(),
            Some(card.clone()),
            "{db}"
        );
        // The generated lookup, with the key values in declaration order.
        let found = match &db {
            Db::Mongo { store, .. } => Card::find(store, "ada", 7).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => {
                idem_tests::through_postgres!(sqlx, client, |c| Card::find(&store.on(c), "ada", 7)
                    .await)
            }
            Db::Sqlite {
                store, connection, ..
            } => Card::find(&store.on(&mut *connection.lock().await), "ada", 7).await,
            Db::Mysql {
                store, connection, ..
            } => Card::find(&store.on(&mut *connection.lock().await), "ada", 7).await,
        };
        assert_eq!(found.unwrap(), Some(card.clone()), "{db}");

        let other = Card {
            shard: 8,
            ..card.clone()
        };
        assert_eq!(
            db.get::<Card>(other.id().unwrap()).await.unwrap(),
            None,
            "{db}"
        );
        assert_eq!(
            db.find::<Card>(other.natural_key()).await.unwrap(),
            None,
            "{db}"
        );

        let read = db.get::<Label>(label.id().unwrap()).await.unwrap();
        let read = read.unwrap_or_else(|| panic!("{db}: the label is stored"));
        assert!(
            read.reading.to_bits() == label.reading.to_bits()
                || (read.reading.is_nan() && label.reading.is_nan()),
            "{db}: {read:?}"
        );
        assert_eq!(read.extra, label.extra, "{db}: the flattened entries");
        assert_eq!(read.tally, 3, "{db}");

        let deleted = Card {
            deleted_at: Some(1_700_000_000_000),
            ..card.clone()
        };
        assert_eq!(
            db.delete(&deleted).await.unwrap(),
            Deletion::Deleted,
            "{db}"
        );
        assert_eq!(db.get::<Card>(id).await.unwrap(), Some(deleted), "{db}");
    }
}

/// A reading whose fields serialize as null without being `Option`s, beside fields serde may
/// leave out and read back with their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "nullable_readings")]
struct NullableReading {
    #[idem(key)]
    sensor: String,
    /// Any JSON, null included; serde has no default for a missing one.
    meta: serde_json::Value,
    /// A unit struct: stored as null.
    marker: (),
    /// Left out when empty, read back empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    /// Always written; read back with its default when a row has no value.
    #[serde(default)]
    labels: Vec<String>,
}

/// A field stored as null that is not an `Option` reads back as null, not as missing; one serde
/// left out reads back as its default. Then the same row written with values reads back with them.
#[tokio::test]
async fn a_stored_null_reads_back_as_null_and_a_left_out_field_as_its_default() {
    let reading = NullableReading {
        sensor: "s-1".into(),
        meta: serde_json::Value::Null,
        marker: (),
        notes: Vec::new(),
        labels: Vec::new(),
    };
    let filled = NullableReading {
        meta: serde_json::json!({ "unit": "kPa", "scale": null }),
        notes: vec!["calibrated".into()],
        labels: vec!["roof".into()],
        ..reading.clone()
    };
    for db in fresh_backends("nullable_reads").await {
        db.ensure::<NullableReading>().await;
        let id = reading.id().unwrap();
        assert_eq!(
            db.upsert(&reading).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(reading.clone()),
            "{db}"
        );
        assert_eq!(
            db.find::<NullableReading>(reading.natural_key())
                .await
                .unwrap(),
            Some(reading.clone()),
            "{db}"
        );
        assert_eq!(db.upsert(&filled).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(filled.clone()),
            "{db}"
        );
        assert_eq!(db.upsert(&reading).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(reading.clone()),
            "{db}"
        );
    }
}

/// A type serde defaults as a whole, whose default differs from what is written: `None` and an
/// empty list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "retry_policies")]
#[serde(default)]
struct RetryPolicy {
    #[idem(key)]
    name: String,
    retries: Option<u32>,
    backoff_ms: Vec<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            name: String::new(),
            retries: Some(3),
            backoff_ms: vec![100, 200],
        }
    }
}

/// What was written reads back, not serde's default: a `None` stored as null stays `None`.
#[tokio::test]
async fn a_written_none_reads_back_as_none_where_the_default_is_some() {
    let policy = RetryPolicy {
        name: "no-retries".into(),
        retries: None,
        backoff_ms: Vec::new(),
    };
    for db in fresh_backends("defaulted_reads").await {
        db.ensure::<RetryPolicy>().await;
        db.upsert(&policy).await.unwrap();
        assert_eq!(
            db.get::<RetryPolicy>(policy.id().unwrap()).await.unwrap(),
            Some(policy.clone()),
            "{db}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Reads of what other code wrote

/// A station as the application reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "stations")]
struct Station {
    #[idem(key)]
    code: String,
    site: Site,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Site {
    city: String,
}

/// The same station as other code wrote it: the city a number.
#[derive(Serialize, Idempotent)]
#[idem(collection = "stations")]
struct MistypedStation {
    #[idem(key)]
    code: String,
    site: MistypedSite,
}

#[derive(Serialize)]
struct MistypedSite {
    city: i64,
}

/// A stored document that does not read as its type is `ErrorKind::Deserialize`, naming the
/// document and the path of the value that does not fit, and the read changes nothing.
#[tokio::test]
async fn a_document_that_does_not_read_as_its_type_names_the_value() {
    for db in fresh_backends("misread").await {
        db.ensure::<Station>().await;
        let mistyped = MistypedStation {
            code: "ost".into(),
            site: MistypedSite { city: 7 },
        };
        db.write_as_another_tool(&mistyped).await;
        let before = db.raw::<Station>().await;
        let id = mistyped.id().unwrap();
        match db.get::<Station>(id).await {
            Err(error) if matches!(error.kind(), ErrorKind::Deserialize { .. }) => {
                assert_eq!(error.document().id, Some(id), "{db}");
                let shown = error.to_string();
                assert!(
                    shown.contains("site.city: invalid type: integer `7`, expected a string"),
                    "{db}: {shown}"
                );
            }
            other => panic!("{db}: expected Deserialize, got {other:?}"),
        }
        assert_eq!(db.raw::<Station>().await, before, "{db}: nothing written");
    }
}

/// serde's pattern for a double option: present as `Some`, whatever it holds, so a written null
/// (`Some(None)`, "cleared") reads back apart from a field left out (`None`, "not given").
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Deserialize::deserialize(deserializer).map(Some)
}

/// A profile patch: a nickname not given, cleared, or set, in a double option.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "profile_patches")]
struct ProfilePatch {
    #[idem(key)]
    user: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    nickname: Option<Option<String>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    age: Option<Option<i64>>,
}

/// Each of a double option's three states reads back as written, on every backend (a SQL column
/// of a double option tells a written null from a left-out field), and the copy read back,
/// written again, is `Unchanged`.
#[tokio::test]
async fn each_state_of_a_double_option_reads_back_as_written() {
    for db in fresh_backends("double_option").await {
        db.ensure::<ProfilePatch>().await;
        for (user, nickname, age) in [
            ("not-given", None, None),
            ("cleared", Some(None), Some(None)),
            ("set", Some(Some("ada".to_owned())), Some(Some(36))),
        ] {
            let patch = ProfilePatch {
                user: user.into(),
                nickname,
                age,
            };
            assert_eq!(db.upsert(&patch).await.unwrap(), Outcome::Inserted, "{db}");
            let read = db
                .get::<ProfilePatch>(patch.id().unwrap())
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{db}: {user} is stored"));
            assert_eq!(read, patch, "{db}: {user}");
            assert_eq!(
                db.upsert(&read).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {user}: the copy read back is unchanged"
            );
        }
    }
}

/// A document keyed by an integer, a boolean and a text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "keyed")]
struct Keyed {
    #[idem(key)]
    n: i64,
    #[idem(key)]
    flag: bool,
    #[idem(key)]
    s: String,
    v: i64,
}

/// `find` with a natural key that does not fit the type is refused the same way on every
/// backend, naming the type's key, before anything is read: a value of another kind (where
/// PostgreSQL and SQLite compared the text "5" with the integer 5 and found the document, and
/// MongoDB found nothing), a part missing (where every backend found a document by the other
/// parts), the parts in another order or under another name. An integer no `i64` field holds is
/// found nowhere, on every backend (where PostgreSQL failed).
#[tokio::test]
async fn find_by_a_natural_key_that_does_not_fit_the_type_is_refused() {
    use idem_core::{KeyValue, NaturalKey};
    let key = |parts: &[(&'static str, KeyValue)]| NaturalKey::new(parts.to_vec());
    let (n, flag, s) = (
        KeyValue::Integer(5),
        KeyValue::Bool(true),
        KeyValue::Text("7".into()),
    );
    let text = |value: &str| KeyValue::Text(value.into());
    let refused = [
        (
            key(&[("n", text("5")), ("flag", flag.clone()), ("s", s.clone())]),
            "`n` holds an integer, not \"5\"",
        ),
        (
            key(&[
                ("n", n.clone()),
                ("flag", flag.clone()),
                ("s", KeyValue::Integer(7)),
            ]),
            "`s` holds text, not 7",
        ),
        (
            key(&[
                ("n", n.clone()),
                ("flag", KeyValue::Integer(1)),
                ("s", s.clone()),
            ]),
            "`flag` holds a boolean, not 1",
        ),
        (
            key(&[("n", n.clone()), ("flag", flag.clone())]),
            "it names (n, flag)",
        ),
        (
            key(&[("s", s.clone()), ("n", n.clone()), ("flag", flag.clone())]),
            "it names (s, n, flag)",
        ),
        (
            key(&[("n", n.clone()), ("flag", flag.clone()), ("z", s.clone())]),
            "it names (n, flag, z)",
        ),
    ];
    for db in idem_tests::backends::fresh_backends("find_key_fit").await {
        db.ensure::<Keyed>().await;
        let doc = Keyed {
            n: 5,
            flag: true,
            s: "7".into(),
            v: 1,
        };
        db.upsert(&doc).await.unwrap();
        let found = db
            .find::<Keyed>(key(&[
                ("n", n.clone()),
                ("flag", flag.clone()),
                ("s", s.clone()),
            ]))
            .await
            .unwrap();
        assert_eq!(found, Some(doc.clone()), "{db}");
        for (key, problem) in refused.clone() {
            crate::support::forget_commands(&db);
            let error = db.find::<Keyed>(key).await.unwrap_err();
            assert!(
                matches!(error.kind(), ErrorKind::KeyMismatch { .. })
                    && error.to_string().contains(problem)
                    && error.to_string().contains("the key is (n, flag, s)"),
                "{db}: {error}"
            );
            if db.command_log().is_some() {
                crate::support::assert_db_sent_nothing(&db);
            }
        }
        let beyond = key(&[
            ("n", KeyValue::Integer(1 << 70)),
            ("flag", flag.clone()),
            ("s", s.clone()),
        ]);
        assert_eq!(db.find::<Keyed>(beyond).await.unwrap(), None, "{db}");
    }
}

/// Maps keyed by integers, one of them frozen, and one keyed by booleans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "scoreboards")]
struct Scoreboard {
    #[idem(key)]
    league: String,
    rounds: std::collections::BTreeMap<u32, String>,
    #[idem(frozen)]
    seeds: std::collections::HashMap<i64, String>,
    flags: std::collections::BTreeMap<bool, u8>,
}

/// A map keyed by integers (or booleans) is stored on every store with each key as text, as
/// serde_json writes it, and reads back as its type by `get`, `find` and the audit; the content
/// hash and a frozen map's guard are the same on every store, single writes and batches alike.
#[tokio::test]
async fn a_map_with_integer_keys_is_stored_with_text_keys_and_reads_back_as_its_type() {
    let board = Scoreboard {
        league: "north".into(),
        rounds: [(1, "one".to_owned()), (20, "twenty".to_owned())].into(),
        seeds: [(-3, "low".to_owned()), (7, "high".to_owned())].into(),
        flags: [(true, 1), (false, 0)].into(),
    };
    for db in fresh_backends("integer_map_keys").await {
        db.ensure::<Scoreboard>().await;
        assert_eq!(db.upsert(&board).await.unwrap(), Outcome::Inserted, "{db}");
        let stored = db.stored::<Scoreboard>().await;
        let expected = serde_json::json!({
            "rounds": { "1": "one", "20": "twenty" },
            "seeds": { "-3": "low", "7": "high" },
            "flags": { "false": 0, "true": 1 },
        });
        for field in ["rounds", "seeds", "flags"] {
            assert_eq!(stored[0][field], expected[field], "{db}: {field}");
        }
        let id = board.id().unwrap();
        assert_eq!(
            db.get::<Scoreboard>(id).await.unwrap(),
            Some(board.clone()),
            "{db}"
        );
        assert_eq!(
            db.find::<Scoreboard>(board.natural_key()).await.unwrap(),
            Some(board.clone()),
            "{db}"
        );
        // The stored hash is the type's, and the frozen map's digest the incoming one's.
        assert_eq!(db.upsert(&board).await.unwrap(), Outcome::Unchanged, "{db}");
        let reseeded = Scoreboard {
            seeds: [(7, "high".to_owned())].into(),
            ..board.clone()
        };
        match db.upsert(&reseeded).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged { field, .. }) => assert_eq!(field, "seeds", "{db}"),
            other => panic!("{db}: expected FrozenFieldChanged on `seeds`, got {other:?}"),
        }

        let next_round = Scoreboard {
            rounds: [(1, "one".to_owned()), (300, "three hundred".to_owned())].into(),
            ..board.clone()
        };
        let south = Scoreboard {
            league: "south".into(),
            ..board.clone()
        };
        let report = db
            .upsert_many(&[next_round.clone(), reseeded, south.clone(), board.clone()])
            .await
            .unwrap();
        let outcomes: Vec<Result<Outcome, &str>> = report
            .outcomes()
            .iter()
            .map(|outcome| match outcome {
                Ok(outcome) => Ok(*outcome),
                Err(error) => match error.kind() {
                    ErrorKind::FrozenFieldChanged { field, .. } => Err(*field),
                    _ => panic!("{db}: {error}"),
                },
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                Ok(Outcome::Updated),
                Err("seeds"),
                Ok(Outcome::Inserted),
                Ok(Outcome::Updated),
            ],
            "{db}"
        );
        for written in [&board, &south] {
            assert_eq!(
                db.get::<Scoreboard>(written.id().unwrap()).await.unwrap(),
                Some(written.clone()),
                "{db}"
            );
        }
        let audit = db.audit::<Scoreboard>().await;
        assert!(audit.is_clean(), "{db}: {audit}");
    }
}
