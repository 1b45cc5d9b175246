//! Ids from the derive: deterministic, ordered by time, byte-identical to the reference helper
//! under `joined`, and every refusal named.

use std::time::{Duration, SystemTime};

use idem_core::{ErrorKind, Id, Idempotent, TimestampProblem};
use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "posts", id_scheme = "joined")]
struct LegacyPost {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
}

#[derive(Debug, Clone, Serialize, Idempotent)]
struct Counter {
    #[idem(key)]
    name: String,
    #[idem(key)]
    shard: u32,
}

fn post(slug: &str, lang: &str, published_at: i64) -> Post {
    Post {
        slug: slug.into(),
        lang: lang.into(),
        published_at,
        body: "…".into(),
    }
}

/// The reference helper, written out: a ULID with the timestamp in ms and the first 10 bytes of
/// `sha256(slug + ":" + lang)` as its random part.
fn reference_post_id(slug: &str, lang: &str, published_at_ms: u64) -> String {
    let digest = Sha256::digest(format!("{slug}:{lang}").as_bytes());
    let mut random = [0u8; 16];
    random[6..].copy_from_slice(&digest[..10]);
    ulid::Ulid::from_parts(published_at_ms, u128::from_be_bytes(random)).to_string()
}

#[test]
fn the_same_input_always_gives_the_same_id() {
    let a = post("hello", "en", 1_700_000_000_000).id().unwrap();
    let b = Post::derive_id("hello".to_string(), "en".to_string(), &1_700_000_000_000).unwrap();
    assert_eq!(a, b);
    // Any key value of the same text gives the same id: borrowed, owned or as `&str`.
    assert_eq!(
        a,
        Post::derive_id("hello", "en", &1_700_000_000_000).unwrap()
    );
    assert_eq!(a.to_string().len(), 26);
    assert_eq!(a.timestamp_ms(), 1_700_000_000_000);
}

#[test]
fn every_key_and_its_order_matter() {
    let base = post("hello", "en", 1).id().unwrap();
    assert_ne!(base, post("hello", "fr", 1).id().unwrap());
    assert_ne!(base, post("hellp", "en", 1).id().unwrap());
    assert_ne!(
        post("a", "b", 1).id().unwrap(),
        post("b", "a", 1).id().unwrap()
    );
    // v1 is injective where joining is not: ("a:b", "c") and ("a", "b:c") differ.
    assert_ne!(
        post("a:b", "c", 1).id().unwrap(),
        post("a", "b:c", 1).id().unwrap()
    );
}

#[test]
fn ids_sort_by_timestamp() {
    let earlier = post("zzz", "en", 1_600_000_000_000).id().unwrap();
    let later = post("aaa", "en", 1_700_000_000_000).id().unwrap();
    assert!(earlier < later);
    assert!(earlier.to_string() < later.to_string());
}

#[test]
fn joined_ids_are_byte_identical_to_the_reference_helper() {
    for (slug, lang, ms) in [
        ("hello-world", "en", 1_700_000_000_000u64),
        ("été", "fr", 0),
        ("x", "de", (1 << 48) - 1),
    ] {
        let id = LegacyPost::derive_id(slug.to_string(), lang.to_string(), &(ms as i64)).unwrap();
        assert_eq!(
            id.to_string(),
            reference_post_id(slug, lang, ms),
            "{slug}/{lang}/{ms}"
        );
    }
}

#[test]
fn joined_refuses_a_key_containing_the_separator() {
    let error = LegacyPost::derive_id("a:b".to_string(), "en".to_string(), &1).unwrap_err();
    match error.kind() {
        ErrorKind::AmbiguousKey {
            field,
            stored_name,
            value,
        } => {
            assert_eq!(error.document().collection, "posts");
            assert_eq!(*field, "slug");
            assert_eq!(*stored_name, "slug");
            assert_eq!(value, "a:b");
        }
        other => panic!("expected AmbiguousKey, got {other:?}"),
    }
    assert!(error.to_string().contains("slug"), "{error}");
}

#[test]
fn empty_text_keys_are_refused_under_both_schemes() {
    for error in [
        Post::derive_id("hello".to_string(), String::new(), &1).unwrap_err(),
        LegacyPost::derive_id(String::new(), "en".to_string(), &1).unwrap_err(),
    ] {
        assert!(
            matches!(
                error.kind(),
                ErrorKind::EmptyKey {
                    field: "lang" | "slug",
                    ..
                }
            ),
            "{error:?}"
        );
    }
}

#[test]
fn timestamps_outside_the_ulid_range_are_refused_never_clamped() {
    let cases = [
        (-1i64, TimestampProblem::BeforeUnixEpoch),
        (1 << 48, TimestampProblem::AfterUlidRange),
    ];
    for (millis, expected) in cases {
        let error = post("hello", "en", millis).id().unwrap_err();
        match error.kind() {
            ErrorKind::TimestampOutOfRange { field, problem, .. } => {
                assert_eq!(
                    error.document().natural_key.to_string(),
                    r#"{slug: "hello", lang: "en"}"#
                );
                assert_eq!(*field, "published_at");
                assert_eq!(*problem, expected);
            }
            other => panic!("expected TimestampOutOfRange, got {other:?}"),
        }
    }
    assert_eq!(
        post("hello", "en", (1 << 48) - 1)
            .id()
            .unwrap()
            .timestamp_ms(),
        (1 << 48) - 1
    );
    assert_eq!(post("hello", "en", 0).id().unwrap().timestamp_ms(), 0);
}

#[test]
fn without_a_timestamp_the_id_is_a_pure_function_of_the_key() {
    let id = Counter::derive_id("clicks".to_string(), 7).unwrap();
    assert_eq!(id.timestamp_ms(), 0);
    assert_eq!(
        id,
        Counter {
            name: "clicks".into(),
            shard: 7
        }
        .id()
        .unwrap()
    );
    assert_ne!(id, Counter::derive_id("clicks".to_string(), 8).unwrap());
}

#[derive(Serialize, Idempotent)]
struct SystemEvent {
    #[idem(key)]
    name: String,
    #[idem(timestamp)]
    at: SystemTime,
}

#[derive(Serialize, Idempotent)]
struct ChronoEvent {
    #[idem(key)]
    name: String,
    #[idem(timestamp)]
    at: chrono::DateTime<chrono::Utc>,
}

#[derive(Serialize, Idempotent)]
struct TimeEvent {
    #[idem(key)]
    name: String,
    #[idem(timestamp)]
    at: time::OffsetDateTime,
}

#[derive(Serialize, Idempotent)]
struct BsonEvent {
    #[idem(key)]
    name: String,
    #[idem(timestamp)]
    at: idem_core::mongodb::bson::DateTime,
}

#[test]
fn every_timestamp_type_gives_the_same_time_part_and_truncates_below_a_millisecond() {
    let millis = 1_700_000_000_123u64;
    let instant =
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis) + Duration::from_nanos(999_999);
    let name = || "deploy".to_string();
    let ids: Vec<Id> = vec![
        SystemEvent {
            name: name(),
            at: instant,
        }
        .id()
        .unwrap(),
        ChronoEvent {
            name: name(),
            at: chrono::DateTime::<chrono::Utc>::from(instant),
        }
        .id()
        .unwrap(),
        TimeEvent {
            name: name(),
            at: time::OffsetDateTime::from(instant),
        }
        .id()
        .unwrap(),
        BsonEvent {
            name: name(),
            at: idem_core::mongodb::bson::DateTime::from_system_time(instant),
        }
        .id()
        .unwrap(),
    ];
    for id in &ids {
        assert_eq!(id.timestamp_ms(), millis);
        assert_eq!(*id, ids[0]);
    }
}

#[test]
fn time_types_before_the_epoch_are_refused() {
    let before = SystemTime::UNIX_EPOCH - Duration::from_nanos(1);
    let errors = [
        SystemEvent {
            name: "x".into(),
            at: before,
        }
        .id()
        .unwrap_err(),
        ChronoEvent {
            name: "x".into(),
            at: chrono::DateTime::<chrono::Utc>::from(before),
        }
        .id()
        .unwrap_err(),
        TimeEvent {
            name: "x".into(),
            at: time::OffsetDateTime::from(before),
        }
        .id()
        .unwrap_err(),
    ];
    for error in errors {
        assert!(
            matches!(
                error.kind(),
                ErrorKind::TimestampOutOfRange {
                    problem: TimestampProblem::BeforeUnixEpoch,
                    field: "at",
                    ..
                }
            ),
            "{error:?}"
        );
    }
}

#[test]
fn ids_round_trip_through_text_and_serde() {
    let id = post("hello", "en", 1_700_000_000_000).id().unwrap();
    assert_eq!(id.to_string().parse::<Id>().unwrap(), id);
    assert_eq!(Id::from(ulid::Ulid::from(id)), id);
    let json = serde_json::to_string(&id).unwrap();
    assert_eq!(json, format!("\"{id}\""));
    assert_eq!(serde_json::from_str::<Id>(&json).unwrap(), id);
}

#[test]
fn the_model_names_collection_scheme_and_roles() {
    let model = <Post as Idempotent>::MODEL;
    assert_eq!(model.collection(), "posts");
    assert_eq!(model.id_scheme(), idem_core::IdScheme::V1);
    assert_eq!(
        model
            .key_fields()
            .map(|field| field.name())
            .collect::<Vec<_>>(),
        ["slug", "lang"]
    );
    assert_eq!(
        model.timestamp_field().map(|field| field.name()),
        Some("published_at")
    );
    assert_eq!(
        <LegacyPost as Idempotent>::MODEL.id_scheme(),
        idem_core::IdScheme::Joined
    );
    assert_eq!(<Counter as Idempotent>::MODEL.collection(), "counter");
}
