//! Input refused before anything is sent, on every backend, with the exact error and nothing
//! written: timestamps outside the id's range, keys that are empty or ambiguous, a name a
//! flattened entry writes twice, and a flattened entry under a name idem writes.

use std::collections::BTreeMap;

use idem_core::model::APPLIED_OPS_FIELD;
use idem_core::{Error, ErrorKind, Idempotent, Outcome, TimestampProblem};
use idem_tests::backends::fresh_backends;
use serde::{Deserialize, Serialize};

use crate::support::{
    assert_db_sent_nothing, forget_commands, scored_post, text_key, Meeting, ScoredPost,
};

// ---------------------------------------------------------------------------------------------
// Ids: timestamps and keys

/// Ids made by the reference helper: `sha256(slug + ":" + lang)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "legacy_posts", id_scheme = "joined")]
#[serde(rename_all = "camelCase")]
struct LegacyPost {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    title: String,
}

#[tokio::test]
async fn a_timestamp_before_1970_is_refused_before_anything_is_sent() {
    // Backend-free: the id derivation refuses it alone.
    assert!(matches!(
        ScoredPost::derive_id("early", "en", &i64::MIN).map_err(Error::into_kind),
        Err(ErrorKind::TimestampOutOfRange {
            problem: TimestampProblem::BeforeUnixEpoch,
            ..
        })
    ));
    // A chrono instant a nanosecond before the epoch is before it too: never wrapped to 0.
    let instant = chrono::DateTime::from_timestamp(-1, 999_999_999).unwrap();
    assert!(matches!(
        Meeting::derive_id("r1", &instant).map_err(Error::into_kind),
        Err(ErrorKind::TimestampOutOfRange {
            field: "starts_at",
            problem: TimestampProblem::BeforeUnixEpoch,
            ..
        })
    ));

    for db in fresh_backends("before_1970").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        db.ensure::<Meeting>().await;
        db.upsert(&scored_post("kept")).await.unwrap();
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);

        let early = ScoredPost {
            published_at: -1,
            ..scored_post("early")
        };
        match db.upsert(&early).await {
            Err(error) => match error.kind() {
                ErrorKind::TimestampOutOfRange {
                    field,
                    stored_name,
                    value,
                    problem,
                } => {
                    assert_eq!(*field, "published_at", "{db}");
                    assert_eq!(*stored_name, "publishedAt", "{db}");
                    assert_eq!(*value, "-1 ms", "{db}");
                    assert_eq!(*problem, TimestampProblem::BeforeUnixEpoch, "{db}");
                    assert_eq!(error.document().collection, "posts", "{db}");
                    assert_eq!(
                        error.document().natural_key.parts(),
                        [text_key("slug", "early"), text_key("lang", "en")],
                        "{db}"
                    );
                }
                _ => panic!("{db}: expected TimestampOutOfRange, got {error:?}"),
            },
            other => panic!("{db}: expected TimestampOutOfRange, got {other:?}"),
        }
        let meeting = Meeting {
            room: "r1".into(),
            starts_at: instant,
            title: "Before time".into(),
        };
        assert!(
            matches!(
                db.upsert(&meeting).await.map_err(Error::into_kind),
                Err(ErrorKind::TimestampOutOfRange {
                    field: "starts_at",
                    problem: TimestampProblem::BeforeUnixEpoch,
                    ..
                })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );
        assert!(
            db.raw::<Meeting>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

#[tokio::test]
async fn a_timestamp_past_the_ulid_range_is_refused_before_anything_is_sent() {
    let last = (1i64 << 48) - 1;
    // The last millisecond is an id, never wrapped or clamped.
    assert_eq!(
        ScoredPost::derive_id("late", "en", &last)
            .unwrap()
            .timestamp_ms(),
        last as u64
    );
    assert!(matches!(
        ScoredPost::derive_id("late", "en", &i64::MAX).map_err(Error::into_kind),
        Err(ErrorKind::TimestampOutOfRange {
            problem: TimestampProblem::AfterUlidRange,
            ..
        })
    ));

    for db in fresh_backends("past_ulid_range").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        db.upsert(&scored_post("kept")).await.unwrap();
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);

        let late = ScoredPost {
            published_at: last + 1,
            ..scored_post("late")
        };
        match db.upsert(&late).await.map_err(Error::into_kind) {
            Err(ErrorKind::TimestampOutOfRange {
                field,
                value,
                problem,
                ..
            }) => {
                assert_eq!(field, "published_at", "{db}");
                assert_eq!(value, format!("{} ms", 1i64 << 48), "{db}");
                assert_eq!(problem, TimestampProblem::AfterUlidRange, "{db}");
            }
            other => panic!("{db}: expected TimestampOutOfRange, got {other:?}"),
        }
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );

        // The last millisecond itself is stored, under the id of that millisecond.
        let at_last = ScoredPost {
            published_at: last,
            ..scored_post("late")
        };
        assert_eq!(
            db.upsert(&at_last).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let stored = db.stored::<ScoredPost>().await;
        let late = stored
            .iter()
            .find(|document| document["slug"] == "late")
            .unwrap_or_else(|| panic!("{db}: the post at the last millisecond: {stored:?}"));
        assert_eq!(late["publishedAt"], last, "{db}");
        assert_eq!(late["_id"], at_last.id().unwrap().to_string(), "{db}");
    }
}

#[tokio::test]
async fn a_colon_in_a_key_is_refused_under_the_joined_scheme() {
    assert!(matches!(
        LegacyPost::derive_id("a:b", "c", &1_700_000_000_000).map_err(Error::into_kind),
        Err(ErrorKind::AmbiguousKey { field: "slug", .. })
    ));
    // The same keys are fine under v1, which is injective.
    assert_ne!(
        ScoredPost::derive_id("a:b", "c", &0).unwrap(),
        ScoredPost::derive_id("a", "b:c", &0).unwrap()
    );

    for db in fresh_backends("joined_colon").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<LegacyPost>().await;
        let kept = LegacyPost {
            slug: "hello".into(),
            lang: "en".into(),
            published_at: 1_700_000_000_000,
            title: "Hello".into(),
        };
        db.upsert(&kept).await.unwrap();
        let before = db.raw::<LegacyPost>().await;
        forget_commands(&db);

        // ("a:b", "c") and ("a", "b:c") would both join to "a:b:c".
        let ambiguous = LegacyPost {
            slug: "a".into(),
            lang: "b:c".into(),
            ..kept.clone()
        };
        match db.upsert(&ambiguous).await {
            Err(error) => match error.kind() {
                ErrorKind::AmbiguousKey {
                    field,
                    stored_name,
                    value,
                } => {
                    assert_eq!(*field, "lang", "{db}");
                    assert_eq!(*stored_name, "lang", "{db}");
                    assert_eq!(*value, "b:c", "{db}");
                    assert_eq!(error.document().collection, "legacy_posts", "{db}");
                    assert_eq!(
                        error.document().natural_key.parts(),
                        [text_key("slug", "a"), text_key("lang", "b:c")],
                        "{db}"
                    );
                }
                _ => panic!("{db}: expected AmbiguousKey, got {error:?}"),
            },
            other => panic!("{db}: expected AmbiguousKey, got {other:?}"),
        }
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<LegacyPost>().await,
            before,
            "{db}: nothing written"
        );
    }
}

#[tokio::test]
async fn an_empty_key_is_refused_under_both_schemes() {
    assert!(matches!(
        ScoredPost::derive_id("hello", "", &0).map_err(Error::into_kind),
        Err(ErrorKind::EmptyKey { field: "lang", .. })
    ));

    for db in fresh_backends("empty_key").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        db.ensure::<LegacyPost>().await;
        db.upsert(&scored_post("kept")).await.unwrap();
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);

        match db.upsert(&scored_post("")).await {
            Err(error) if matches!(error.kind(), ErrorKind::EmptyKey { .. }) => {
                // The same name in Rust and stored: shown once.
                assert!(
                    error.to_string().contains("key field `slug` is empty"),
                    "{db}: {error}"
                );
                let ErrorKind::EmptyKey { field, stored_name } = error.kind() else {
                    unreachable!()
                };
                assert_eq!((*field, *stored_name), ("slug", "slug"), "{db}");
                assert_eq!(error.document().collection, "posts", "{db}");
                assert_eq!(
                    error.document().natural_key.parts(),
                    [text_key("slug", ""), text_key("lang", "en")],
                    "{db}"
                );
            }
            other => panic!("{db}: expected EmptyKey, got {other:?}"),
        }
        let legacy = LegacyPost {
            slug: "hello".into(),
            lang: String::new(),
            published_at: 1_700_000_000_000,
            title: "Hello".into(),
        };
        assert!(
            matches!(
                db.upsert(&legacy).await.map_err(Error::into_kind),
                Err(ErrorKind::EmptyKey { field: "lang", .. })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );
        assert!(
            db.raw::<LegacyPost>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A name written twice

/// A record whose flattened map may hold an entry named like one of its fields, here or in a
/// nested value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "records")]
struct Record {
    #[idem(key)]
    code: String,
    title: String,
    place: Place,
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Place {
    city: String,
    #[serde(flatten)]
    lines: BTreeMap<String, String>,
}

fn record(code: &str, extra: (&str, &str), line: (&str, &str)) -> Record {
    Record {
        code: code.into(),
        title: "Title".into(),
        place: Place {
            city: "Oslo".into(),
            lines: [(line.0.to_owned(), line.1.to_owned())].into(),
        },
        extra: [(extra.0.to_owned(), extra.1.to_owned())].into(),
    }
}

/// serde writes a flattened entry named like a field beside that field, and a stored document
/// keeps only one of them: the natural key itself could be stored as another value than the id
/// was derived from. Refused on every backend, at any depth, naming the name, with nothing
/// written and the rest of a batch written.
#[tokio::test]
async fn a_name_written_twice_is_refused() {
    for db in fresh_backends("name_twice").await {
        db.ensure::<Record>().await;
        let fine = record("fine", ("note", "n"), ("line1", "l"));
        let cases = [
            (record("key", ("code", "other"), ("line1", "l")), "code"),
            (record("field", ("title", "Other"), ("line1", "l")), "title"),
            (record("nested", ("note", "n"), ("city", "Bergen")), "city"),
        ];
        let before = db.raw::<Record>().await;
        forget_commands(&db);
        for (doc, name) in &cases {
            match db.upsert(doc).await {
                Err(error) if matches!(error.kind(), ErrorKind::Serialize { .. }) => assert!(
                    error
                        .to_string()
                        .contains(&format!("the name `{name}` is written twice")),
                    "{db}: {error}"
                ),
                other => panic!("{db}: {name}: expected a refusal, got {other:?}"),
            }
        }
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Record>().await, before, "{db}: nothing written");

        let batch = [cases[0].0.clone(), fine.clone(), cases[2].0.clone()];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(
                outcomes[0].as_ref().map_err(Error::kind),
                Err(ErrorKind::Serialize { .. })
            ),
            "{db}"
        );
        assert_eq!(outcomes[1].as_ref().unwrap(), &Outcome::Inserted, "{db}");
        assert!(
            matches!(
                outcomes[2].as_ref().map_err(Error::kind),
                Err(ErrorKind::Serialize { .. })
            ),
            "{db}"
        );
        assert_eq!(
            db.get::<Record>(fine.id().unwrap()).await.unwrap(),
            Some(fine.clone()),
            "{db}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Reserved names (the rest are compile errors: ui/names/)

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "labelled")]
struct Labelled {
    #[idem(key)]
    slug: String,
    #[serde(flatten)]
    labels: BTreeMap<String, String>,
}

/// Stores a document, then the same with a flattened entry named `reserved`: refused, single
/// or in a batch, with the stored state untouched.
async fn assert_reserved_entry_refused(test: &str, reserved: &str) {
    for db in fresh_backends(test).await {
        db.ensure::<Labelled>().await;
        let labelled = |entries: &[&str]| Labelled {
            slug: "hello".into(),
            labels: entries
                .iter()
                .map(|name| ((*name).to_owned(), "x".to_owned()))
                .collect(),
        };
        assert_eq!(
            db.upsert(&labelled(&["color"])).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Labelled>().await;

        let with_reserved = labelled(&["color", reserved]);
        // The refusal names the document by its id too, on every store.
        let id = with_reserved.id().unwrap();
        let expect_reserved = |result: &Result<Outcome, Error>| match result {
            Err(error) => match error.kind() {
                ErrorKind::ReservedName { stored_name, .. } => {
                    assert_eq!(stored_name, reserved, "{db}");
                    assert_eq!(error.document().id, Some(id), "{db}: {error:?}");
                }
                other => panic!("{db}: expected ReservedName {reserved:?}, got {other:?}"),
            },
            Ok(outcome) => panic!("{db}: expected ReservedName {reserved:?}, got {outcome:?}"),
        };
        expect_reserved(&db.upsert(&with_reserved).await);
        let report = db
            .upsert_many(std::slice::from_ref(&with_reserved))
            .await
            .unwrap();
        expect_reserved(&report.outcomes()[0]);
        assert_eq!(db.raw::<Labelled>().await, before, "{db}: nothing written");
    }
}

/// Promise catalogue case 9, reserved names: a flattened entry named like the hash field is
/// refused, and nothing is written.
#[tokio::test]
async fn a_flattened_entry_named_like_the_hash_field_is_refused() {
    assert_reserved_entry_refused("p9_flattened_hash_field", "sourceHash").await;
}

/// Promise catalogue case 9: a flattened entry named `_id` is refused.
#[tokio::test]
async fn a_flattened_id_entry_is_refused() {
    assert_reserved_entry_refused("p9_flattened_id", "_id").await;
}

/// Promise catalogue case 9: a flattened entry in idem's namespace is refused.
#[tokio::test]
async fn a_flattened_entry_in_idems_namespace_is_refused() {
    assert_reserved_entry_refused("p9_flattened_idem_name", APPLIED_OPS_FIELD).await;
}
