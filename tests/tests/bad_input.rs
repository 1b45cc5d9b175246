//! A catalogue of bad input against a real server, one named case each: the exact refusal (or
//! outcome), proof that nothing was written (the driver's command monitoring: no write command
//! sent, or the server's replies counting zero documents written), and the stored data compared
//! byte for byte before and after.
//!
//! The server cases start their own SecantusDB on a persistent temporary storage path, stop it and
//! start it again on the same port and path; a guard kills it when the test ends, passing or not.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use idem_core::mongo::Store;
use idem_core::{Error, Idempotent, KeyValue, Outcome, TimestampProblem};
use idem_tests::fixtures::{account, entry, Account, Entry, Payment};
use idem_tests::{fresh_database, raw_documents as raw, stored_documents, CommandLog};
use mongodb::bson::{self, doc, Bson, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// The types under test

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    title: String,
    body: String,
    score: f64,
    #[idem(volatile)]
    fetched_at: i64,
    #[idem(frozen)]
    author_id: String,
}

fn post(slug: &str) -> Post {
    Post {
        slug: slug.into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
        body: "First post.".into(),
        score: 0.0,
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
    }
}

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

/// A measurement whose frozen reading may be NaN (a sensor that had no value).
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(frozen)]
    calibration: f64,
    note: String,
}

/// A meeting whose timestamp has sub-millisecond precision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "meetings")]
struct Meeting {
    #[idem(key)]
    room: String,
    #[idem(timestamp)]
    starts_at: chrono::DateTime<chrono::Utc>,
    title: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Comment {
    #[serde(skip_serializing_if = "Option::is_none")]
    comment_id: Option<String>,
    text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    slug: String,
    title: String,
    #[idem(push_by = "comment_id")]
    comments: Vec<Comment>,
}

// ---------------------------------------------------------------------------------------------
// Helpers

async fn store(test: &str) -> (Store, CommandLog) {
    let (database, log) = fresh_database(test).await;
    (Store::new(database), log)
}

fn text_key(field: &'static str, value: &str) -> (&'static str, KeyValue) {
    (field, KeyValue::Text(value.into()))
}

/// The commands recorded since the last take, asserting none was sent at all.
fn assert_nothing_sent(log: &CommandLog) {
    let commands = log.take();
    assert!(
        commands.names.is_empty(),
        "a refused document sends no command, sent {:?}",
        commands.names
    );
}

/// Asserts the recorded commands wrote no document, and returns their names.
fn assert_nothing_written(log: &CommandLog) -> Vec<String> {
    let commands = log.take();
    assert_eq!(
        commands.documents_written, 0,
        "nothing may be written; commands: {:?}",
        commands.names
    );
    commands.names
}

// ---------------------------------------------------------------------------------------------
// Ids: timestamps and keys

#[tokio::test]
async fn a_timestamp_before_1970_is_refused_before_anything_is_sent() {
    let (store, log) = store("before_1970").await;
    store.upsert(&post("kept")).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let early = Post {
        published_at: -1,
        ..post("early")
    };
    match store.upsert(&early).await.unwrap_err() {
        Error::TimestampOutOfRange {
            document,
            field,
            value,
            problem,
        } => {
            assert_eq!(field, "published_at");
            assert_eq!(value, "-1 ms");
            assert_eq!(problem, TimestampProblem::BeforeUnixEpoch);
            assert_eq!(document.collection, "posts");
            assert_eq!(
                document.natural_key.parts(),
                [text_key("slug", "early"), text_key("lang", "en")]
            );
        }
        other => panic!("expected TimestampOutOfRange, got {other:?}"),
    }
    assert_nothing_sent(&log);
    assert!(matches!(
        Post::derive_id("early", "en", &i64::MIN),
        Err(Error::TimestampOutOfRange {
            problem: TimestampProblem::BeforeUnixEpoch,
            ..
        })
    ));
    // A chrono instant a nanosecond before the epoch is before it too: never wrapped to 0.
    let instant = chrono::DateTime::from_timestamp(-1, 999_999_999).unwrap();
    assert!(matches!(
        Meeting::derive_id("r1", &instant),
        Err(Error::TimestampOutOfRange {
            field: "starts_at",
            problem: TimestampProblem::BeforeUnixEpoch,
            ..
        })
    ));
    assert_eq!(raw(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_timestamp_past_the_ulid_range_is_refused_before_anything_is_sent() {
    let (store, log) = store("past_ulid_range").await;
    store.upsert(&post("kept")).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let last = (1i64 << 48) - 1;
    let late = Post {
        published_at: last + 1,
        ..post("late")
    };
    match store.upsert(&late).await.unwrap_err() {
        Error::TimestampOutOfRange {
            field,
            value,
            problem,
            ..
        } => {
            assert_eq!(field, "published_at");
            assert_eq!(value, format!("{} ms", 1i64 << 48));
            assert_eq!(problem, TimestampProblem::AfterUlidRange);
        }
        other => panic!("expected TimestampOutOfRange, got {other:?}"),
    }
    assert_nothing_sent(&log);
    // The last millisecond is an id, never wrapped or clamped.
    assert_eq!(
        Post::derive_id("late", "en", &last).unwrap().timestamp_ms(),
        last as u64
    );
    assert!(matches!(
        Post::derive_id("late", "en", &i64::MAX),
        Err(Error::TimestampOutOfRange {
            problem: TimestampProblem::AfterUlidRange,
            ..
        })
    ));
    assert_eq!(raw(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_colon_in_a_key_is_refused_under_the_joined_scheme() {
    let (store, log) = store("joined_colon").await;
    let kept = LegacyPost {
        slug: "hello".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
    };
    store.upsert(&kept).await.unwrap();
    let before = raw(store.database(), "legacy_posts").await;
    let _ = log.take();

    // ("a:b", "c") and ("a", "b:c") would both join to "a:b:c".
    let ambiguous = LegacyPost {
        slug: "a".into(),
        lang: "b:c".into(),
        ..kept.clone()
    };
    match store.upsert(&ambiguous).await.unwrap_err() {
        Error::AmbiguousKey {
            document,
            field,
            value,
        } => {
            assert_eq!(field, "lang");
            assert_eq!(value, "b:c");
            assert_eq!(document.collection, "legacy_posts");
            assert_eq!(
                document.natural_key.parts(),
                [text_key("slug", "a"), text_key("lang", "b:c")]
            );
        }
        other => panic!("expected AmbiguousKey, got {other:?}"),
    }
    assert_nothing_sent(&log);
    assert!(matches!(
        LegacyPost::derive_id("a:b", "c", &1_700_000_000_000),
        Err(Error::AmbiguousKey { field: "slug", .. })
    ));
    // The same keys are fine under v1, which is injective.
    assert_ne!(
        Post::derive_id("a:b", "c", &0).unwrap(),
        Post::derive_id("a", "b:c", &0).unwrap()
    );
    assert_eq!(raw(store.database(), "legacy_posts").await, before);
}

#[tokio::test]
async fn an_empty_key_is_refused_under_both_schemes() {
    let (store, log) = store("empty_key").await;
    store.upsert(&post("kept")).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    match store.upsert(&post("")).await.unwrap_err() {
        Error::EmptyKey { document, field } => {
            assert_eq!(field, "slug");
            assert_eq!(document.collection, "posts");
            assert_eq!(
                document.natural_key.parts(),
                [text_key("slug", ""), text_key("lang", "en")]
            );
        }
        other => panic!("expected EmptyKey, got {other:?}"),
    }
    let legacy = LegacyPost {
        slug: "hello".into(),
        lang: String::new(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
    };
    assert!(matches!(
        store.upsert(&legacy).await,
        Err(Error::EmptyKey { field: "lang", .. })
    ));
    assert_nothing_sent(&log);
    assert!(matches!(
        Post::derive_id("hello", "", &0),
        Err(Error::EmptyKey { field: "lang", .. })
    ));
    assert_eq!(raw(store.database(), "posts").await, before);
    assert!(raw(store.database(), "legacy_posts").await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Floats: canonical in the content hash

#[tokio::test]
async fn every_nan_payload_hashes_alike_so_a_nan_replay_writes_nothing() {
    let (store, log) = store("nan").await;
    let nans = [
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff8_0000_0000_0001), // another quiet NaN payload
        f64::from_bits(0x7ff0_0000_0000_0001), // a signalling NaN
        f64::from_bits(0xfff0_dead_beef_0000),
    ];
    let with = |score: f64| Post {
        score,
        ..post("nan")
    };
    let hash = with(nans[0]).content_hash().unwrap();
    for nan in nans {
        assert!(nan.is_nan());
        assert_eq!(
            with(nan).content_hash().unwrap(),
            hash,
            "{:#x}",
            nan.to_bits()
        );
    }
    assert_ne!(with(f64::INFINITY).content_hash().unwrap(), hash);

    assert_eq!(
        store.upsert(&with(nans[0])).await.unwrap(),
        Outcome::Inserted
    );
    let before = raw(store.database(), "posts").await;
    let _ = log.take();
    for nan in nans {
        assert_eq!(
            store.upsert(&with(nan)).await.unwrap(),
            Outcome::Unchanged,
            "{:#x}",
            nan.to_bits()
        );
    }
    assert_nothing_written(&log);
    assert_eq!(raw(store.database(), "posts").await, before);
}

#[tokio::test]
async fn negative_zero_hashes_as_zero_so_a_zero_turned_negative_writes_nothing() {
    let (store, log) = store("negative_zero").await;
    let zero = post("zero");
    let negative = Post {
        score: -0.0,
        ..zero.clone()
    };
    assert!(negative.score.is_sign_negative());
    assert_eq!(
        zero.content_hash().unwrap(),
        negative.content_hash().unwrap()
    );
    assert_ne!(
        zero.content_hash().unwrap(),
        Post {
            score: f64::MIN_POSITIVE,
            ..zero.clone()
        }
        .content_hash()
        .unwrap()
    );

    assert_eq!(store.upsert(&zero).await.unwrap(), Outcome::Inserted);
    let before = raw(store.database(), "posts").await;
    let _ = log.take();
    assert_eq!(store.upsert(&negative).await.unwrap(), Outcome::Unchanged);
    assert_nothing_written(&log);
    // The stored value is still +0.0, bit for bit.
    assert_eq!(raw(store.database(), "posts").await, before);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored[0].get_f64("score").unwrap().to_bits(), 0);
}

#[tokio::test]
async fn a_nan_in_a_frozen_field_is_not_a_change() {
    let (store, log) = store("frozen_nan").await;
    let reading = Reading {
        sensor: "s1".into(),
        calibration: f64::NAN,
        note: "no calibration yet".into(),
    };
    assert_eq!(store.upsert(&reading).await.unwrap(), Outcome::Inserted);
    let before = raw(store.database(), "readings").await;
    let _ = log.take();

    // The server's own filter treats NaN as equal to NaN; idem's judgement of a stored document
    // must agree with it, alone and in a batch. Every deviation is collected, then reported.
    let mut problems = Vec::new();
    let retry = store.upsert(&reading).await;
    if !matches!(retry, Ok(Outcome::Unchanged)) {
        problems.push(format!("a plain retry: expected Unchanged, got {retry:?}"));
    }
    let batch = store
        .upsert_many(std::slice::from_ref(&reading))
        .await
        .unwrap();
    if !matches!(batch.outcomes(), [Ok(Outcome::Unchanged)]) {
        problems.push(format!(
            "a retry in a batch: expected Unchanged, got {:?}",
            batch.outcomes()
        ));
    }
    let written = log.take().documents_written;
    if written != 0 {
        problems.push(format!("the retries wrote {written} documents"));
    }
    if raw(store.database(), "readings").await != before {
        problems.push("the retries changed the stored document".to_owned());
    }

    // An edit that keeps the frozen NaN is an edit, not a frozen change.
    let edited = Reading {
        note: "still none".into(),
        ..reading.clone()
    };
    let edit = store
        .upsert_many(std::slice::from_ref(&edited))
        .await
        .unwrap();
    if !matches!(edit.outcomes(), [Ok(Outcome::Updated)]) {
        problems.push(format!(
            "an edit beside the frozen NaN in a batch: expected Updated, got {:?}",
            edit.outcomes()
        ));
    }
    let edited = Reading {
        note: "none at all".into(),
        ..reading.clone()
    };
    let edit = store.upsert(&edited).await;
    if !matches!(edit, Ok(Outcome::Updated)) {
        problems.push(format!(
            "an edit beside the frozen NaN: expected Updated, got {edit:?}"
        ));
    }
    // A frozen NaN that became a number is a real change, and refused.
    let calibrated = Reading {
        calibration: 1.5,
        ..edited.clone()
    };
    let refused = store.upsert(&calibrated).await;
    if !matches!(
        refused,
        Err(Error::FrozenFieldChanged {
            field: "calibration",
            ..
        })
    ) {
        problems.push(format!(
            "NaN changed to 1.5: expected FrozenFieldChanged, got {refused:?}"
        ));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------------------------------------
// Size

fn oversized_post(slug: &str) -> Post {
    Post {
        body: "x".repeat(16 * 1024 * 1024 + 1),
        ..post(slug)
    }
}

#[tokio::test]
async fn a_document_over_16_mib_is_refused_before_anything_is_sent() {
    let (store, log) = store("too_large").await;
    store.upsert(&post("kept")).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    match store.upsert(&oversized_post("big")).await.unwrap_err() {
        Error::DocumentTooLarge {
            document,
            size,
            limit,
        } => {
            assert_eq!(limit, 16 * 1024 * 1024);
            assert!(size > limit, "{size} > {limit}");
            assert_eq!(
                document.natural_key.parts(),
                [text_key("slug", "big"), text_key("lang", "en")]
            );
        }
        other => panic!("expected DocumentTooLarge, got {other:?}"),
    }
    assert_nothing_sent(&log);
    // An edit of a stored document that would grow it past the limit: refused the same way.
    assert!(matches!(
        store.upsert(&oversized_post("kept")).await,
        Err(Error::DocumentTooLarge { .. })
    ));
    assert_nothing_sent(&log);
    assert_eq!(raw(store.database(), "posts").await, before);
}

/// The BSON size of `post` as stored: its fields, `_id`, the content hash, the digests of its
/// timestamp and frozen field (64 hex digits each), and the write marker (`i:` and a ULID).
/// Only the lengths of idem's values matter here, not the values.
fn stored_size(post: &Post) -> usize {
    let mut stored = bson::to_document(post).unwrap();
    stored.insert("_id", post.id().unwrap().to_string());
    stored.insert("sourceHash", post.content_hash().unwrap().to_hex());
    let digest = "0".repeat(64);
    stored.insert(
        "idemFrozen",
        doc! { "publishedAt": digest.as_str(), "authorId": digest.as_str() },
    );
    stored.insert("idemWrite", format!("i:{}", "0".repeat(26)));
    bson::to_vec(&stored).unwrap().len()
}

/// A post whose stored document is `size` bytes.
fn post_of_stored_size(slug: &str, size: usize) -> Post {
    let small = post(slug);
    let overhead = stored_size(&small) - small.body.len();
    Post {
        body: "x".repeat(size - overhead),
        ..small
    }
}

#[tokio::test]
async fn the_largest_document_idem_accepts_is_one_the_server_stores() {
    let (store, log) = store("size_limit").await;
    // idem measures the whole document it stores, with the fields it adds: the largest it
    // sends is exactly the server's limit.
    let largest = 16 * 1024 * 1024;
    let at_limit = post_of_stored_size("at-limit", largest);
    assert_eq!(stored_size(&at_limit), largest);
    assert_eq!(store.upsert(&at_limit).await.unwrap(), Outcome::Inserted);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(bson::to_vec(&stored[0]).unwrap().len(), largest);
    let _ = log.take();

    // One byte more is refused before sending.
    let over = post_of_stored_size("over", largest + 1);
    assert!(matches!(
        store.upsert(&over).await,
        Err(Error::DocumentTooLarge { .. })
    ));
    assert_nothing_sent(&log);

    // In a batch, the same document is a chunk of its own, and stored.
    let report = store
        .upsert_many(&[
            post("small"),
            post_of_stored_size("at-limit-2", largest),
            over,
        ])
        .await
        .unwrap();
    assert!(
        matches!(
            report.outcomes(),
            [
                Ok(Outcome::Inserted),
                Ok(Outcome::Inserted),
                Err(Error::DocumentTooLarge { .. })
            ]
        ),
        "{:?}",
        report.outcomes()
    );
    assert_eq!(stored_documents(store.database(), "posts").await.len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Immutability

#[tokio::test]
async fn a_changed_frozen_field_is_refused_and_nothing_is_written() {
    let (store, log) = store("frozen").await;
    let original = post("hello");
    store.upsert(&original).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let hijacked = Post {
        author_id: "eve".into(),
        body: "Hijacked.".into(),
        ..original.clone()
    };
    match store.upsert(&hijacked).await.unwrap_err() {
        Error::FrozenFieldChanged {
            document,
            stored_id,
            field,
            stored,
            incoming,
        } => {
            assert_eq!(field, "author_id");
            assert_eq!(stored, "\"ada\"");
            assert_eq!(incoming, "\"eve\"");
            assert_eq!(stored_id, original.id().unwrap().to_string());
            assert_eq!(
                document.natural_key.parts(),
                [text_key("slug", "hello"), text_key("lang", "en")]
            );
        }
        other => panic!("expected FrozenFieldChanged, got {other:?}"),
    }
    let names = assert_nothing_written(&log);
    assert_eq!(names, ["findAndModify"], "one round trip refuses it");
    assert_eq!(raw(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_changed_timestamp_is_refused_because_it_would_orphan_the_document() {
    let (store, log) = store("id_feeding").await;
    let original = post("hello");
    store.upsert(&original).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let moved = Post {
        published_at: original.published_at + 1,
        ..original.clone()
    };
    assert_ne!(moved.id().unwrap(), original.id().unwrap());
    match store.upsert(&moved).await.unwrap_err() {
        Error::FrozenFieldChanged {
            stored_id,
            field,
            stored,
            incoming,
            ..
        } => {
            assert_eq!(field, "published_at");
            assert_eq!(stored_id, original.id().unwrap().to_string());
            assert_eq!(stored, "1700000000000");
            assert_eq!(incoming, "1700000000001");
        }
        other => panic!("expected FrozenFieldChanged, got {other:?}"),
    }
    assert_nothing_written(&log);
    // The same in a batch: refused per document, nothing written.
    let report = store
        .upsert_many(std::slice::from_ref(&moved))
        .await
        .unwrap();
    assert!(matches!(
        report.outcomes(),
        [Err(Error::FrozenFieldChanged {
            field: "published_at",
            ..
        })]
    ));
    assert_nothing_written(&log);
    assert_eq!(raw(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_sub_millisecond_timestamp_change_keeps_the_id_but_is_refused() {
    let (store, log) = store("sub_millisecond").await;
    let starts_at = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap();
    let original = Meeting {
        room: "r1".into(),
        starts_at,
        title: "Standup".into(),
    };
    store.upsert(&original).await.unwrap();
    let before = raw(store.database(), "meetings").await;
    let _ = log.take();

    let nudged = Meeting {
        starts_at: starts_at + chrono::Duration::nanoseconds(1),
        ..original.clone()
    };
    assert_eq!(nudged.id().unwrap(), original.id().unwrap());
    assert!(matches!(
        store.upsert(&nudged).await,
        Err(Error::FrozenFieldChanged {
            field: "starts_at",
            ..
        })
    ));
    assert_nothing_written(&log);
    assert_eq!(raw(store.database(), "meetings").await, before);
}

// ---------------------------------------------------------------------------------------------
// Replays

#[tokio::test]
async fn a_stale_replay_is_not_written() {
    let (store, log) = store("stale").await;
    store.upsert(&entry("e1", 3, "third")).await.unwrap();
    let before = raw(store.database(), "entries").await;
    let _ = log.take();

    assert_eq!(
        store.upsert(&entry("e1", 2, "second")).await.unwrap(),
        Outcome::Stale
    );
    // The same revision with other content: the stored one stands.
    assert_eq!(
        store
            .upsert(&entry("e1", 3, "edited elsewhere"))
            .await
            .unwrap(),
        Outcome::Stale
    );
    let report = store
        .upsert_many(&[entry("e1", 1, "first"), entry("e1", 2, "second")])
        .await
        .unwrap();
    assert!(matches!(
        report.outcomes(),
        [Ok(Outcome::Stale), Ok(Outcome::Stale)]
    ));
    assert_nothing_written(&log);
    assert_eq!(raw(store.database(), "entries").await, before);
}

#[tokio::test]
async fn a_re_push_of_a_deleted_document_is_not_resurrected() {
    let (store, log) = store("re_push_deleted").await;
    store.upsert(&entry("e1", 1, "hello")).await.unwrap();
    let deleted = Entry {
        deleted_at: Some(1_700_000_500_000),
        ..entry("e1", 1, "hello")
    };
    assert_eq!(store.delete(&deleted).await.unwrap(), Outcome::Deleted);
    let before = raw(store.database(), "entries").await;
    let _ = log.take();

    assert_eq!(
        store.upsert(&entry("e1", 1, "hello")).await.unwrap(),
        Outcome::Deleted
    );
    assert_eq!(
        store
            .upsert(&entry("e1", 9, "edited offline"))
            .await
            .unwrap(),
        Outcome::Deleted
    );
    let report = store
        .upsert_many(&[entry("e1", 10, "again"), entry("e2", 1, "new")])
        .await
        .unwrap();
    assert!(matches!(
        report.outcomes(),
        [Ok(Outcome::Deleted), Ok(Outcome::Inserted)]
    ));
    // Only e2 was written.
    assert_eq!(log.take().documents_written, 1);
    let after = raw(store.database(), "entries").await;
    let id = entry("e1", 1, "").id().unwrap().to_string();
    let stored: Vec<Document> = stored_documents(store.database(), "entries").await;
    let e1 = stored
        .iter()
        .position(|d| d.get_str("_id") == Ok(id.as_str()))
        .unwrap();
    assert_eq!(after[e1], before[0]);
}

#[tokio::test]
async fn deleting_without_a_marker_is_refused() {
    let (store, log) = store("no_marker").await;
    store.upsert(&entry("e1", 1, "hello")).await.unwrap();
    let before = raw(store.database(), "entries").await;
    let _ = log.take();

    match store.delete(&entry("e1", 1, "hello")).await.unwrap_err() {
        Error::TombstoneNotSet { document, field } => {
            assert_eq!(field, "deleted_at");
            assert_eq!(
                document.natural_key.parts(),
                [text_key("user_id", "u1"), text_key("entry_id", "e1")]
            );
        }
        other => panic!("expected TombstoneNotSet, got {other:?}"),
    }
    assert_nothing_sent(&log);
    assert_eq!(raw(store.database(), "entries").await, before);
}

#[tokio::test]
async fn an_idempotency_key_reused_with_another_payload_is_refused() {
    let (store, log) = store("key_reused").await;
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 1_000,
    };
    let first = store.record(&payment).await.unwrap();
    let before = raw(store.database(), "payments").await;
    let _ = log.take();

    let reused = Payment {
        amount_cents: 9_999,
        ..payment.clone()
    };
    match store.record(&reused).await.unwrap_err() {
        Error::IdempotencyKeyReused {
            document,
            field,
            stored_id,
        } => {
            assert_eq!(field, "request_key");
            assert_eq!(stored_id, first.id);
            assert_eq!(
                document.natural_key.parts(),
                [text_key("request_key", "req-1")]
            );
        }
        other => panic!("expected IdempotencyKeyReused, got {other:?}"),
    }
    // Through `upsert` and `upsert_many`, which record events the same way.
    assert!(matches!(
        store.upsert(&reused).await,
        Err(Error::IdempotencyKeyReused { .. })
    ));
    let report = store.upsert_many(&[reused, payment]).await.unwrap();
    assert!(matches!(
        report.outcomes(),
        [
            Err(Error::IdempotencyKeyReused { .. }),
            Ok(Outcome::Unchanged)
        ]
    ));
    let names = assert_nothing_written(&log);
    assert!(
        names.iter().all(|name| name == "findAndModify"),
        "{names:?}"
    );
    assert_eq!(raw(store.database(), "payments").await, before);
}

// ---------------------------------------------------------------------------------------------
// Batches

#[tokio::test]
async fn duplicate_ids_in_one_batch_get_the_outcomes_of_writing_them_one_by_one() {
    let (store, log) = store("batch_duplicates").await;
    store.ensure_indexes::<Entry>().await.unwrap();
    let _ = log.take();

    let batch = [
        entry("e1", 1, "one"),   // first: Inserted
        entry("e2", 1, "x"),     // alone: Inserted
        entry("e1", 3, "three"), // newer: Updated
        entry("e1", 2, "two"),   // older than what is stored by then: Stale
        entry("e1", 3, "three"), // what is stored by then: Unchanged
        entry("e2", 1, "x"),     // a copy of the previous e2: not sent, Unchanged
    ];
    let report = store.upsert_many(&batch).await.unwrap();
    let outcomes: Vec<Outcome> = report
        .outcomes()
        .iter()
        .map(|o| *o.as_ref().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Inserted,
            Outcome::Inserted,
            Outcome::Updated,
            Outcome::Stale,
            Outcome::Unchanged,
            Outcome::Unchanged,
        ]
    );
    assert_eq!(report.collapsed(), 1);
    let commands = log.take();
    assert_eq!(commands.documents_written, 3);
    assert_eq!(
        commands.names.iter().filter(|n| *n == "update").count(),
        2,
        "one write command per round that writes: {:?}",
        commands.names
    );
    let stored = stored_documents(store.database(), "entries").await;
    assert_eq!(stored.len(), 2);
    let e1 = stored
        .iter()
        .find(|d| d.get_str("entryId") == Ok("e1"))
        .unwrap();
    assert_eq!(e1.get_i64("revision").unwrap(), 3);
    assert_eq!(e1.get_str("text").unwrap(), "three");

    // Replaying the whole batch writes nothing.
    let before = raw(store.database(), "entries").await;
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Unchanged), 4, "{report}");
    assert_eq!(report.count(Outcome::Stale), 2, "{report}");
    assert_nothing_written(&log);
    assert_eq!(raw(store.database(), "entries").await, before);

    // Without versions, each copy replaces the one before it, as one by one: the last stays.
    let report = store
        .upsert_many(&[
            Post {
                title: "first".into(),
                ..post("p")
            },
            Post {
                title: "last".into(),
                ..post("p")
            },
        ])
        .await
        .unwrap();
    assert!(matches!(
        report.outcomes(),
        [Ok(Outcome::Inserted), Ok(Outcome::Updated)]
    ));
    let posts = stored_documents(store.database(), "posts").await;
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].get_str("title").unwrap(), "last");
}

#[tokio::test]
async fn a_refused_document_inside_a_batch_does_not_stop_the_others() {
    let (store, log) = store("batch_refusals").await;
    let kept = post("kept");
    let other = post("other");
    store.upsert(&kept).await.unwrap();
    store.upsert(&other).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let batch = [
        post("a"),
        Post {
            published_at: -1,
            ..post("early")
        },
        post(""),
        Post {
            author_id: "eve".into(),
            ..kept.clone()
        },
        oversized_post("big"),
        other.clone(),
        post("b"),
    ];
    let report = store.upsert_many(&batch).await.unwrap();
    let outcomes = report.outcomes();
    assert!(matches!(outcomes[0], Ok(Outcome::Inserted)), "{outcomes:?}");
    assert!(matches!(
        outcomes[1],
        Err(Error::TimestampOutOfRange {
            problem: TimestampProblem::BeforeUnixEpoch,
            ..
        })
    ));
    assert!(matches!(
        outcomes[2],
        Err(Error::EmptyKey { field: "slug", .. })
    ));
    assert!(matches!(
        outcomes[3],
        Err(Error::FrozenFieldChanged {
            field: "author_id",
            ..
        })
    ));
    assert!(matches!(outcomes[4], Err(Error::DocumentTooLarge { .. })));
    assert!(matches!(outcomes[5], Ok(Outcome::Unchanged)));
    assert!(matches!(outcomes[6], Ok(Outcome::Inserted)), "{outcomes:?}");
    assert_eq!(report.refused(), 4);
    assert_eq!(log.take().documents_written, 2);

    // The two new documents are stored; the two that were stored are intact.
    let stored = stored_documents(store.database(), "posts").await;
    let mut slugs: Vec<&str> = stored.iter().map(|d| d.get_str("slug").unwrap()).collect();
    slugs.sort_unstable();
    assert_eq!(slugs, ["a", "b", "kept", "other"]);
    let untouched: Vec<_> = raw(store.database(), "posts")
        .await
        .into_iter()
        .filter(|d| matches!(d.get_str("slug"), Ok("kept" | "other")))
        .collect();
    assert_eq!(untouched, before);
}

// ---------------------------------------------------------------------------------------------
// Effects on what is not there

#[tokio::test]
async fn pushing_an_item_without_its_key_is_refused() {
    let (store, log) = store("item_without_key").await;
    let thread = Thread {
        slug: "launch".into(),
        title: "Launch".into(),
        comments: Vec::new(),
    };
    store.upsert(&thread).await.unwrap();
    let before = raw(store.database(), "threads").await;
    let _ = log.take();

    let anonymous = Comment {
        comment_id: None,
        text: "who am I?".into(),
    };
    match thread.push_comments(&store, &anonymous).await.unwrap_err() {
        Error::ItemWithoutKey {
            document,
            field,
            item_key,
        } => {
            assert_eq!(field, "comments");
            assert_eq!(item_key, "comment_id");
            assert_eq!(document.id, Some(thread.id().unwrap()));
        }
        other => panic!("expected ItemWithoutKey, got {other:?}"),
    }
    // An item that is not a document at all has no key either.
    assert!(matches!(
        store
            .push::<Thread, _>(thread.id().unwrap(), "comments", &"just text")
            .await,
        Err(Error::ItemWithoutKey { .. })
    ));
    assert_nothing_sent(&log);
    assert_eq!(raw(store.database(), "threads").await, before);
}

#[tokio::test]
async fn apply_once_on_a_missing_document_is_not_found() {
    let (store, log) = store("apply_missing").await;
    let ghost = account("ghost");
    let id = ghost.id().unwrap();
    match store
        .apply_once::<Account>(id, &"op-1".into(), doc! { "$inc": { "balance": 100 } })
        .await
        .unwrap_err()
    {
        Error::NotFound { document } => {
            assert_eq!(document.collection, "accounts");
            assert_eq!(document.id, Some(id));
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert_nothing_written(&log);
    assert!(raw(store.database(), "accounts").await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The server away

/// A client of `uri` recording the commands it starts and the documents the replies say were
/// written; `hook` sees each succeeded command's name.
#[derive(Clone, Default)]
struct Recorder {
    names: Arc<Mutex<Vec<String>>>,
    written: Arc<Mutex<u64>>,
    hook: Arc<Mutex<Option<Hook>>>,
}

type Hook = Box<dyn FnMut(&str) + Send>;

impl Recorder {
    async fn client(&self, uri: &str) -> Client {
        let mut options = ClientOptions::parse(uri).await.expect("the URI parses");
        let recorder = self.clone();
        options.command_event_handler =
            Some(EventHandler::callback(move |event| recorder.observe(event)));
        options.retry_writes = Some(false);
        Client::with_options(options).expect("client options are valid")
    }

    fn observe(&self, event: CommandEvent) {
        match event {
            CommandEvent::Started(started) => lock(&self.names).push(started.command_name),
            CommandEvent::Succeeded(succeeded) => {
                let count = |field: &str| match succeeded.reply.get(field) {
                    Some(Bson::Int32(n)) => *n as u64,
                    Some(Bson::Int64(n)) => *n as u64,
                    _ => 0,
                };
                *lock(&self.written) += match succeeded.command_name.as_str() {
                    "insert" | "delete" => count("n"),
                    "update" => {
                        count("nModified")
                            + succeeded
                                .reply
                                .get_array("upserted")
                                .map_or(0, |u| u.len() as u64)
                    }
                    _ => 0,
                };
                if let Some(hook) = lock(&self.hook).as_mut() {
                    hook(&succeeded.command_name);
                }
            }
            _ => {}
        }
    }

    fn take(&self) -> (Vec<String>, u64) {
        (
            std::mem::take(&mut *lock(&self.names)),
            std::mem::take(&mut *lock(&self.written)),
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A store on a client of a closed loopback port, with a short server selection timeout.
async fn unreachable_store(database: &str) -> (Store, Recorder) {
    let closed = free_port();
    let recorder = Recorder::default();
    let dead = recorder
        .client(&format!(
            "mongodb://127.0.0.1:{closed}/?retryWrites=false&directConnection=true\
             &serverSelectionTimeoutMS=300"
        ))
        .await;
    (Store::new(dead.database(database)), recorder)
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_retryable_error_and_the_same_call_then_succeeds() {
    let (live_database, log) = fresh_database("unreachable").await;
    let (unreachable, recorder) = unreachable_store(live_database.name()).await;

    let doc = post("hello");
    let started = Instant::now();
    let error = unreachable.upsert(&doc).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    match &error {
        Error::Backend { document, source } => {
            assert_eq!(document.collection, "posts");
            assert_eq!(source.backend(), "MongoDB");
            let source = error.as_mongo().expect("the driver's error, kept whole");
            assert!(
                matches!(
                    source.kind.as_ref(),
                    mongodb::error::ErrorKind::ServerSelection { .. }
                ),
                "{source:?}"
            );
        }
        other => panic!("expected Error::Backend, got {other:?}"),
    }
    assert!(error.is_retryable(), "{error}");
    assert!(!error.is_refusal());
    let message = error.to_string();
    assert!(message.contains("`posts`"), "{message}");
    assert!(message.contains("MongoDB: "), "{message}");
    // The batch call fails the same way, as a whole.
    let batch = unreachable.upsert_many(std::slice::from_ref(&doc)).await;
    assert!(matches!(&batch, Err(e @ Error::Backend { .. }) if e.is_retryable()));
    let (names, written) = recorder.take();
    assert!(names.is_empty(), "no server, no command: {names:?}");
    assert_eq!(written, 0);
    assert!(raw(&live_database, "posts").await.is_empty());

    // The same call against the live server succeeds, once.
    let live = Store::new(live_database.clone());
    assert_eq!(live.upsert(&doc).await.unwrap(), Outcome::Inserted);
    assert_eq!(live.upsert(&doc).await.unwrap(), Outcome::Unchanged);
    let _ = log.take();
    assert_eq!(raw(&live_database, "posts").await.len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_error_names_the_document_being_written() {
    let (unreachable, _recorder) = unreachable_store("idem_unreachable_names").await;
    let error = unreachable.upsert(&post("hello")).await.unwrap_err();
    // `Error::Backend`'s document is "the document being written, or the collection alone for
    // collection-wide calls"; an upsert of one document is not collection-wide.
    assert_eq!(
        error.document().natural_key.parts(),
        [text_key("slug", "hello"), text_key("lang", "en")],
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("`posts` {slug: \"hello\", lang: \"en\"}: MongoDB: "),
        "{error}"
    );
}

/// A SecantusDB of this test's own on a persistent storage path, stopped (SIGTERM, then SIGKILL
/// after 15 s) and its files removed when dropped, so a failing test leaves nothing running.
struct OwnServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl OwnServer {
    fn binary() -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let binary = root.join(".venv/bin/secantusd-py");
        if !binary.exists() {
            let status = Command::new(root.join("scripts/test-server"))
                .arg("install")
                .status()
                .expect("running scripts/test-server install");
            assert!(status.success(), "scripts/test-server install failed");
        }
        binary
    }

    /// Starts a server on a free port with a fresh storage directory, and waits for it.
    async fn start(test: &str) -> OwnServer {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("bad_input-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).expect("creating the server's directory");
        // An empty config disables the auto-discovery of ./secantusd.toml and ~/.secantus/.
        std::fs::write(dir.join("secantusd.toml"), "").expect("writing an empty config");
        let mut server = OwnServer {
            child: None,
            port: free_port(),
            dir,
        };
        server.spawn();
        server.wait_ready().await;
        server
    }

    fn uri(&self) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?retryWrites=false&directConnection=true\
             &serverMonitoringMode=poll&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=3000",
            self.port
        )
    }

    /// Starts the server process on this port and storage path (after a stop).
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "the server is running already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("opening the server log");
        let child = Command::new(Self::binary())
            .arg("--config")
            .arg(self.dir.join("secantusd.toml"))
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--storage-path")
            .arg(self.dir.join("data"))
            .arg("--enable-test-commands")
            .current_dir(&self.dir)
            .env("TMPDIR", self.dir.join("tmp"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("starting secantusd-py");
        self.child = Some(child);
    }

    /// Waits until the server answers `ping`.
    async fn wait_ready(&mut self) {
        let (port, dir) = (self.port, self.dir.clone());
        let child = &mut self.child;
        wait_for_ping(port, &dir, || {
            child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .map(|status| status.to_string())
        })
        .await;
    }

    /// Stops the server: SIGTERM (a clean shutdown), SIGKILL after 15 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Waits until the server on `port` answers `ping` (30 s at most); `exited` tells whether its
/// process is gone.
async fn wait_for_ping(port: u16, dir: &Path, mut exited: impl FnMut() -> Option<String>) {
    let uri =
        format!("mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=500");
    let client = Client::with_uri_str(&uri).await.expect("the URI parses");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = exited() {
            panic!(
                "secantusd-py exited during startup ({status}); log: {}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
        }
        if client
            .database("admin")
            .run_command(doc! { "ping": 1 })
            .await
            .is_ok()
        {
            return;
        }
        assert!(Instant::now() < deadline, "the server did not answer ping");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn the_same_call_succeeds_after_the_server_returns() {
    let mut server = OwnServer::start("server_returns").await;
    let recorder = Recorder::default();
    let client = recorder.client(&server.uri()).await;
    let store = Store::new(client.database("idem_server_returns"));
    let original = post("hello");
    assert_eq!(store.upsert(&original).await.unwrap(), Outcome::Inserted);
    let edited = Post {
        body: "Edited while the server was away.".into(),
        ..original.clone()
    };

    server.stop();
    let _ = recorder.take();
    let error = store.upsert(&edited).await.unwrap_err();
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    assert!(error.is_retryable(), "{error}");
    assert_eq!(recorder.take().1, 0, "nothing written while it was away");

    server.spawn();
    server.wait_ready().await;
    // The stored document survived the restart, untouched.
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get_str("body").unwrap(), "First post.");

    // The same call now succeeds, and converges.
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Unchanged);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].get_str("_id").unwrap(),
        original.id().unwrap().to_string()
    );
    assert_eq!(stored[0].get_str("body").unwrap(), edited.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_in_the_middle_of_a_batch_converges_on_retry() {
    let server = Arc::new(Mutex::new(OwnServer::start("restart_mid_batch").await));
    let uri = lock(&server).uri();
    let recorder = Recorder::default();
    let client = recorder.client(&uri).await;
    let store = Store::new(client.database("idem_restart_mid_batch"));

    // Half the keys are stored at revision 1.
    let keys: Vec<String> = (0..40).map(|n| format!("e{n:02}")).collect();
    let old: Vec<Entry> = keys[..20].iter().map(|k| entry(k, 1, "old")).collect();
    store.upsert_many(&old).await.unwrap();

    // The batch: every key at revision 2, with bodies large enough (512 KiB) that the server's
    // 16 MiB command limit splits it into two chunks, plus stale copies of some keys.
    let big = "y".repeat(512 * 1024);
    let mut batch: Vec<Entry> = keys.iter().map(|k| entry(k, 2, &big)).collect();
    batch.extend(keys[..5].iter().map(|k| entry(k, 1, "stale copy")));

    // Stop the server right after the first chunk's write command is answered.
    let weak: Weak<Mutex<OwnServer>> = Arc::downgrade(&server);
    *lock(&recorder.hook) = Some(Box::new(move |command| {
        if command == "update" {
            if let Some(server) = weak.upgrade() {
                lock(&server).stop();
            }
        }
    }));
    let _ = recorder.take();
    let interrupted = store.upsert_many(&batch).await;
    *lock(&recorder.hook) = None;
    let (names, _) = recorder.take();
    assert_eq!(
        names.iter().filter(|n| *n == "update").count(),
        1,
        "the batch was cut after its first chunk: {names:?}"
    );
    let error = interrupted.expect_err("the second chunk cannot reach a stopped server");
    assert!(error.is_retryable(), "{error}");

    let (port, dir) = {
        let mut server = lock(&server);
        server.spawn();
        (server.port, server.dir.clone())
    };
    wait_for_ping(port, &dir, || {
        let mut server = lock(&server);
        let child = server.child.as_mut()?;
        child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.to_string())
    })
    .await;

    // The retry converges: one document per key, every one at its newest revision.
    let report = store.upsert_many(&batch).await.unwrap();
    eprintln!("interrupted by: {error}\nthe retry after the restart: {report}");
    assert_eq!(report.refused(), 0, "{report}");
    let outcomes = report.outcomes();
    for (doc, outcome) in batch.iter().zip(outcomes) {
        let outcome = *outcome.as_ref().unwrap();
        if doc.revision == 1 {
            assert_eq!(outcome, Outcome::Stale, "{}", doc.entry_id);
        } else {
            assert!(
                matches!(
                    outcome,
                    Outcome::Inserted | Outcome::Updated | Outcome::Unchanged
                ),
                "{}: {outcome}",
                doc.entry_id
            );
        }
    }
    let mut stored = stored_documents(store.database(), "entries").await;
    stored.sort_by(|a, b| a.get_str("entryId").ok().cmp(&b.get_str("entryId").ok()));
    assert_eq!(stored.len(), keys.len());
    for (document, key) in stored.iter().zip(&keys) {
        assert_eq!(document.get_str("entryId").unwrap(), key);
        assert_eq!(document.get_i64("revision").unwrap(), 2, "{key}");
        assert_eq!(document.get_str("text").unwrap().len(), big.len(), "{key}");
        assert_eq!(
            document.get_str("_id").unwrap(),
            entry(key, 2, "").id().unwrap().to_string()
        );
    }
    // And a third run writes nothing.
    let _ = recorder.take();
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Unchanged), keys.len(), "{report}");
    assert_eq!(recorder.take().1, 0);
}
