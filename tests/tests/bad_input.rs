//! A catalogue of bad input against real servers, one named case each: the exact refusal (or
//! outcome), and proof that nothing was written: the stored data compared exactly before and
//! after ([`Db::raw`]: each document's bytes on MongoDB, each row's text with its row version on
//! PostgreSQL), and on MongoDB the driver's command monitoring as well (no command sent, or the
//! server's replies counting zero documents written).
//!
//! Every backend under test (MongoDB, and each PostgreSQL server: see `idem_tests::backends`)
//! runs each case whose input means the same on all of them: timestamps outside the id's range,
//! keys that are empty or ambiguous, NaN, the infinities and negative zero, a changed
//! sub-millisecond timestamp, a reused idempotency key, copies and refusals inside a batch, a
//! pushed item without its key, an operation on a missing document, a stored document that does
//! not read as its type, a name a flattened entry writes twice. The refusals that
//! `conformance.rs` already makes on every backend (a changed frozen field or timestamp, a stale
//! replay, the re-push of a deleted document, a delete without its marker) are not repeated here.
//!
//! Refused on PostgreSQL only, because its storage has limits MongoDB's has not: a NaN or an
//! infinity inside a `jsonb` value (JSON has no such number), the character U+0000 in a value
//! (text and jsonb cannot hold it), and a natural key too long for a row of the natural-key
//! index. MongoDB stores them, which the same cases show; U+0000 in a field name is refused on
//! both.
//!
//! MongoDB only, because what they test exists only there: the 16 MiB BSON document limit; a
//! client whose server cannot be reached (the driver's server selection); and a server stopped and
//! started again. Those server cases start their own SecantusDB on a persistent temporary storage
//! path, stop it and start it again on the same port and path; a guard kills it when the test
//! ends, passing or not.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use idem_core::mongo::Store;
use idem_core::{Error, Idempotent, KeyValue, Outcome, Pushed, TimestampProblem};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{account, entry, Account, Entry, Payment};
use idem_tests::{fresh_database, raw_documents as raw, stored_documents, CommandLog};
use mongodb::bson::{self, doc, Bson};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

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

/// A gauge whose readings may be NaN or infinite, in a float field and in an optional one.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "gauges")]
struct Gauge {
    #[idem(key)]
    name: String,
    value: f64,
    peak: Option<f64>,
}

/// Floats inside structured values: a map and a list.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "surveys")]
struct Survey {
    #[idem(key)]
    name: String,
    nested: BTreeMap<String, f64>,
    samples: Vec<f64>,
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

/// A MongoDB store on a fresh database of its own, for the cases only MongoDB has.
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

/// Forgets the commands `db` sent so far (MongoDB; PostgreSQL has no command log).
fn forget_commands(db: &Db) {
    if let Some(log) = db.command_log() {
        let _ = log.take();
    }
}

/// On MongoDB, asserts that `db` sent no command since the last take: the refusal came before
/// the server was asked anything. On PostgreSQL, [`Db::raw`] is the proof.
fn assert_db_sent_nothing(db: &Db) {
    if let Some(log) = db.command_log() {
        assert_nothing_sent(log);
    }
}

/// On MongoDB, asserts that the commands `db` sent since the last take wrote no document. On
/// PostgreSQL, [`Db::raw`] is the proof.
fn assert_db_wrote_nothing(db: &Db) {
    if let Some(log) = db.command_log() {
        assert_nothing_written(log);
    }
}

/// The float stored in `field` of the document or row of `collection` whose `key_field` is
/// `key`, exactly as the server holds it: a BSON double, or a `double precision` column.
async fn stored_float(db: &Db, collection: &str, key_field: &str, key: &str, field: &str) -> f64 {
    match db {
        Db::Mongo { store, .. } => stored_documents(store.database(), collection)
            .await
            .into_iter()
            .find(|document| document.get_str(key_field) == Ok(key))
            .unwrap_or_else(|| panic!("{db}: no {collection} document with {key_field} {key}"))
            .get_f64(field)
            .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}")),
        Db::Postgres { client, .. } => {
            let sql =
                format!("SELECT \"{field}\" FROM \"{collection}\" WHERE \"{key_field}\" = $1");
            client
                .query_one(&sql, &[&key])
                .await
                .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}"))
                .get(0)
        }
    }
}

/// The JSON value [`Db::stored`] shows for the non-finite float PostgreSQL writes as `text`
/// (`NaN`, `Infinity`, `-Infinity`): that text as a string on PostgreSQL (`to_jsonb` of a
/// `double precision`), relaxed extended JSON on MongoDB.
fn shown_non_finite(db: &Db, text: &str) -> Value {
    if db.is_postgres() {
        Value::from(text)
    } else {
        json!({ "$numberDouble": text })
    }
}

// ---------------------------------------------------------------------------------------------
// Ids: timestamps and keys

#[tokio::test]
async fn a_timestamp_before_1970_is_refused_before_anything_is_sent() {
    // Backend-free: the id derivation refuses it alone.
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

    for db in fresh_backends("before_1970").await {
        db.ensure::<Post>().await;
        db.ensure::<Meeting>().await;
        db.upsert(&post("kept")).await.unwrap();
        let before = db.raw::<Post>().await;
        forget_commands(&db);

        let early = Post {
            published_at: -1,
            ..post("early")
        };
        match db.upsert(&early).await {
            Err(Error::TimestampOutOfRange {
                document,
                field,
                stored_name,
                value,
                problem,
            }) => {
                assert_eq!(field, "published_at", "{db}");
                assert_eq!(stored_name, "publishedAt", "{db}");
                assert_eq!(value, "-1 ms", "{db}");
                assert_eq!(problem, TimestampProblem::BeforeUnixEpoch, "{db}");
                assert_eq!(document.collection, "posts", "{db}");
                assert_eq!(
                    document.natural_key.parts(),
                    [text_key("slug", "early"), text_key("lang", "en")],
                    "{db}"
                );
            }
            other => panic!("{db}: expected TimestampOutOfRange, got {other:?}"),
        }
        let meeting = Meeting {
            room: "r1".into(),
            starts_at: instant,
            title: "Before time".into(),
        };
        assert!(
            matches!(
                db.upsert(&meeting).await,
                Err(Error::TimestampOutOfRange {
                    field: "starts_at",
                    problem: TimestampProblem::BeforeUnixEpoch,
                    ..
                })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
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

    for db in fresh_backends("past_ulid_range").await {
        db.ensure::<Post>().await;
        db.upsert(&post("kept")).await.unwrap();
        let before = db.raw::<Post>().await;
        forget_commands(&db);

        let late = Post {
            published_at: last + 1,
            ..post("late")
        };
        match db.upsert(&late).await {
            Err(Error::TimestampOutOfRange {
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
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");

        // The last millisecond itself is stored, under the id of that millisecond.
        let at_last = Post {
            published_at: last,
            ..post("late")
        };
        assert_eq!(
            db.upsert(&at_last).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let stored = db.stored::<Post>().await;
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
        LegacyPost::derive_id("a:b", "c", &1_700_000_000_000),
        Err(Error::AmbiguousKey { field: "slug", .. })
    ));
    // The same keys are fine under v1, which is injective.
    assert_ne!(
        Post::derive_id("a:b", "c", &0).unwrap(),
        Post::derive_id("a", "b:c", &0).unwrap()
    );

    for db in fresh_backends("joined_colon").await {
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
            Err(Error::AmbiguousKey {
                document,
                field,
                stored_name,
                value,
            }) => {
                assert_eq!(field, "lang", "{db}");
                assert_eq!(stored_name, "lang", "{db}");
                assert_eq!(value, "b:c", "{db}");
                assert_eq!(document.collection, "legacy_posts", "{db}");
                assert_eq!(
                    document.natural_key.parts(),
                    [text_key("slug", "a"), text_key("lang", "b:c")],
                    "{db}"
                );
            }
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
        Post::derive_id("hello", "", &0),
        Err(Error::EmptyKey { field: "lang", .. })
    ));

    for db in fresh_backends("empty_key").await {
        db.ensure::<Post>().await;
        db.ensure::<LegacyPost>().await;
        db.upsert(&post("kept")).await.unwrap();
        let before = db.raw::<Post>().await;
        forget_commands(&db);

        match db.upsert(&post("")).await {
            Err(error @ Error::EmptyKey { .. }) => {
                // The same name in Rust and stored: shown once.
                assert!(
                    error.to_string().contains("key field `slug` is empty"),
                    "{db}: {error}"
                );
                let Error::EmptyKey {
                    document,
                    field,
                    stored_name,
                } = error
                else {
                    unreachable!()
                };
                assert_eq!((field, stored_name), ("slug", "slug"), "{db}");
                assert_eq!(document.collection, "posts", "{db}");
                assert_eq!(
                    document.natural_key.parts(),
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
                db.upsert(&legacy).await,
                Err(Error::EmptyKey { field: "lang", .. })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        assert!(
            db.raw::<LegacyPost>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Floats: canonical in the content hash, and never lost

#[tokio::test]
async fn every_nan_payload_hashes_alike_so_a_nan_replay_writes_nothing() {
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

    for db in fresh_backends("nan").await {
        db.ensure::<Post>().await;
        assert_eq!(
            db.upsert(&with(nans[0])).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Post>().await;
        forget_commands(&db);
        for nan in nans {
            assert_eq!(
                db.upsert(&with(nan)).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {:#x}",
                nan.to_bits()
            );
        }
        let batch: Vec<Post> = nans.into_iter().map(with).collect();
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            report.count(Outcome::Unchanged),
            nans.len(),
            "{db}: {report}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        assert!(
            stored_float(&db, "posts", "slug", "nan", "score")
                .await
                .is_nan(),
            "{db}"
        );
    }
}

#[tokio::test]
async fn negative_zero_hashes_as_zero_so_a_zero_turned_negative_writes_nothing() {
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

    for db in fresh_backends("negative_zero").await {
        db.ensure::<Post>().await;
        assert_eq!(db.upsert(&zero).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Post>().await;
        forget_commands(&db);
        assert_eq!(
            db.upsert(&negative).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        // The stored value is still +0.0, bit for bit.
        assert_eq!(
            stored_float(&db, "posts", "slug", "zero", "score")
                .await
                .to_bits(),
            0,
            "{db}"
        );
    }
}

#[tokio::test]
async fn a_nan_in_a_frozen_field_is_not_a_change() {
    // Every deviation on every backend is collected, then reported.
    let mut problems = Vec::new();
    for db in fresh_backends("frozen_nan").await {
        db.ensure::<Reading>().await;
        let reading = Reading {
            sensor: "s1".into(),
            calibration: f64::NAN,
            note: "no calibration yet".into(),
        };
        assert_eq!(
            db.upsert(&reading).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Reading>().await;
        forget_commands(&db);

        // MongoDB's own filter treats NaN as equal to NaN; idem's judgement of a stored document
        // must agree with it, alone and in a batch, on every backend.
        let retry = db.upsert(&reading).await;
        if !matches!(retry, Ok(Outcome::Unchanged)) {
            problems.push(format!(
                "{db}: a plain retry: expected Unchanged, got {retry:?}"
            ));
        }
        let batch = db
            .upsert_many(std::slice::from_ref(&reading))
            .await
            .unwrap();
        if !matches!(batch.outcomes(), [Ok(Outcome::Unchanged)]) {
            problems.push(format!(
                "{db}: a retry in a batch: expected Unchanged, got {:?}",
                batch.outcomes()
            ));
        }
        if let Some(log) = db.command_log() {
            let written = log.take().documents_written;
            if written != 0 {
                problems.push(format!("{db}: the retries wrote {written} documents"));
            }
        }
        if db.raw::<Reading>().await != before {
            problems.push(format!("{db}: the retries changed the stored document"));
        }

        // An edit that keeps the frozen NaN is an edit, not a frozen change.
        let edited = Reading {
            note: "still none".into(),
            ..reading.clone()
        };
        let edit = db.upsert_many(std::slice::from_ref(&edited)).await.unwrap();
        if !matches!(edit.outcomes(), [Ok(Outcome::Updated)]) {
            problems.push(format!(
                "{db}: an edit beside the frozen NaN in a batch: expected Updated, got {:?}",
                edit.outcomes()
            ));
        }
        let edited = Reading {
            note: "none at all".into(),
            ..reading.clone()
        };
        let edit = db.upsert(&edited).await;
        if !matches!(edit, Ok(Outcome::Updated)) {
            problems.push(format!(
                "{db}: an edit beside the frozen NaN: expected Updated, got {edit:?}"
            ));
        }
        let stored = stored_float(&db, "readings", "sensor", "s1", "calibration").await;
        if !stored.is_nan() {
            problems.push(format!("{db}: the frozen NaN is stored as {stored}"));
        }

        // A frozen NaN that became a number is a real change, and refused, alone and in a batch.
        let before = db.raw::<Reading>().await;
        forget_commands(&db);
        let calibrated = Reading {
            calibration: 1.5,
            ..edited.clone()
        };
        match db.upsert(&calibrated).await {
            Err(Error::FrozenFieldChanged {
                field: "calibration",
                stored,
                incoming,
                ..
            }) if stored.contains("NaN") && incoming == "1.5" => {}
            refused => problems.push(format!(
                "{db}: NaN changed to 1.5: expected FrozenFieldChanged from NaN to 1.5, got \
                 {refused:?}"
            )),
        }
        let refused = db
            .upsert_many(std::slice::from_ref(&calibrated))
            .await
            .unwrap();
        if !matches!(
            refused.outcomes(),
            [Err(Error::FrozenFieldChanged {
                field: "calibration",
                ..
            })]
        ) {
            problems.push(format!(
                "{db}: NaN changed to 1.5 in a batch: expected FrozenFieldChanged, got {:?}",
                refused.outcomes()
            ));
        }
        if let Some(log) = db.command_log() {
            let written = log.take().documents_written;
            if written != 0 {
                problems.push(format!("{db}: the refusals wrote {written} documents"));
            }
        }
        if db.raw::<Reading>().await != before {
            problems.push(format!("{db}: the refusals changed the stored document"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn nan_and_the_infinities_in_a_float_field_are_stored_and_a_replay_writes_nothing() {
    let values = [
        ("nan", f64::NAN, "NaN"),
        ("inf", f64::INFINITY, "Infinity"),
        ("-inf", f64::NEG_INFINITY, "-Infinity"),
    ];
    let gauge = |name: &str, value: f64| Gauge {
        name: name.into(),
        value,
        peak: Some(value),
    };
    for db in fresh_backends("non_finite").await {
        db.ensure::<Gauge>().await;
        for (name, value, _) in values {
            assert_eq!(
                db.upsert(&gauge(name, value)).await.unwrap(),
                Outcome::Inserted,
                "{db}: {name}"
            );
        }
        let stored = db.stored::<Gauge>().await;
        assert_eq!(stored.len(), values.len(), "{db}: {stored:?}");
        for (name, value, text) in values {
            let document = stored
                .iter()
                .find(|document| document["name"] == name)
                .unwrap_or_else(|| panic!("{db}: no gauge {name}: {stored:?}"));
            // Neither field is lost to null (which `stored` would leave out).
            assert_eq!(
                document["value"],
                shown_non_finite(&db, text),
                "{db}: {name}"
            );
            assert_eq!(
                document["peak"],
                shown_non_finite(&db, text),
                "{db}: {name}"
            );
            for field in ["value", "peak"] {
                let read = stored_float(&db, "gauges", "name", name, field).await;
                assert!(
                    read.to_bits() == value.to_bits() || (read.is_nan() && value.is_nan()),
                    "{db}: {name}.{field} stored as {read}"
                );
            }
        }
        let before = db.raw::<Gauge>().await;
        if db.is_postgres() {
            for text in ["NaN", "Infinity", "-Infinity"] {
                assert!(
                    before
                        .iter()
                        .any(|row| row.contains(&format!(",{text},{text},"))),
                    "{db}: no row holds {text}: {before:?}"
                );
            }
        }

        // A replay, alone and in a batch, writes nothing.
        forget_commands(&db);
        for (name, value, _) in values {
            assert_eq!(
                db.upsert(&gauge(name, value)).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {name}"
            );
        }
        let batch: Vec<Gauge> = values
            .iter()
            .map(|&(name, value, _)| gauge(name, value))
            .collect();
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            report.count(Outcome::Unchanged),
            values.len(),
            "{db}: {report}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Gauge>().await, before, "{db}: nothing written");

        // NaN becomes a number and a number NaN again: each an update, none lost.
        assert_eq!(
            db.upsert(&gauge("nan", 2.0)).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            stored_float(&db, "gauges", "name", "nan", "value").await,
            2.0,
            "{db}"
        );
        assert_eq!(
            db.upsert(&gauge("nan", f64::NAN)).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert!(
            stored_float(&db, "gauges", "name", "nan", "value")
                .await
                .is_nan(),
            "{db}"
        );
    }
}

/// JSON, and so `jsonb`, has no NaN or infinity: PostgreSQL refuses one inside a structured value
/// before anything is sent, naming where it is. MongoDB stores the same document (BSON has them).
#[tokio::test]
async fn nan_or_an_infinity_inside_a_structured_value_is_refused_on_postgres_naming_its_path() {
    let survey = |name: &str| Survey {
        name: name.into(),
        nested: BTreeMap::from([("x".to_owned(), 1.0)]),
        samples: vec![1.0, 2.0],
    };
    let cases = [
        (
            Survey {
                nested: BTreeMap::from([("x".to_owned(), f64::NAN)]),
                ..survey("nested-nan")
            },
            "field nested.x holds NaN",
        ),
        (
            Survey {
                nested: BTreeMap::from([("a b".to_owned(), f64::INFINITY)]),
                ..survey("nested-inf")
            },
            "field nested[\"a b\"] holds Infinity",
        ),
        (
            Survey {
                samples: vec![1.0, f64::NEG_INFINITY],
                ..survey("samples")
            },
            "field samples[1] holds -Infinity",
        ),
    ];
    for db in fresh_backends("nested_non_finite").await {
        db.ensure::<Survey>().await;
        db.upsert(&survey("kept")).await.unwrap();
        let before = db.raw::<Survey>().await;
        forget_commands(&db);
        if db.is_postgres() {
            for (doc, path) in &cases {
                let expect_refused = |result: Result<Outcome, Error>| match result {
                    Err(Error::Serialize { document, message }) => {
                        assert_eq!(
                            document.natural_key.parts(),
                            [text_key("name", &doc.name)],
                            "{db}"
                        );
                        assert!(
                            message.starts_with(path) && message.contains("not inside jsonb"),
                            "{db}: {message}"
                        );
                    }
                    other => panic!("{db}: {path}: expected Error::Serialize, got {other:?}"),
                };
                expect_refused(db.upsert(doc).await);
                let mut report = db
                    .upsert_many(std::slice::from_ref(doc))
                    .await
                    .unwrap()
                    .into_outcomes();
                expect_refused(report.remove(0));
            }
            assert_eq!(db.raw::<Survey>().await, before, "{db}: nothing written");
        } else {
            for (doc, path) in &cases {
                assert_eq!(
                    db.upsert(doc).await.unwrap(),
                    Outcome::Inserted,
                    "{db}: {path}"
                );
                assert_eq!(
                    db.upsert(doc).await.unwrap(),
                    Outcome::Unchanged,
                    "{db}: {path}"
                );
            }
            let stored = db.stored::<Survey>().await;
            let find = |name: &str| {
                stored
                    .iter()
                    .find(|document| document["name"] == name)
                    .unwrap_or_else(|| panic!("{db}: no survey {name}: {stored:?}"))
            };
            assert_eq!(
                find("nested-nan")["nested"]["x"],
                shown_non_finite(&db, "NaN"),
                "{db}"
            );
            assert_eq!(
                find("nested-inf")["nested"]["a b"],
                shown_non_finite(&db, "Infinity"),
                "{db}"
            );
            assert_eq!(
                find("samples")["samples"][1],
                shown_non_finite(&db, "-Infinity"),
                "{db}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The character U+0000

/// A document with a string and a map whose values and names may hold U+0000.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "labels")]
struct Label {
    #[idem(key)]
    name: String,
    text: String,
    attributes: BTreeMap<String, String>,
}

fn label(name: &str, text: &str, attribute: (&str, &str)) -> Label {
    Label {
        name: name.into(),
        text: text.into(),
        attributes: [(attribute.0.to_owned(), attribute.1.to_owned())].into(),
    }
}

/// U+0000 in a field name is refused on every backend, naming the field (a BSON name is a C
/// string); in a value, MongoDB stores it and reads it back, PostgreSQL refuses it naming where
/// it is (its text and jsonb cannot hold it). A refused document writes nothing and does not
/// stop the rest of its batch.
#[tokio::test]
async fn the_character_u0000_is_stored_where_the_backend_can_hold_it_and_refused_elsewhere() {
    for db in fresh_backends("nul").await {
        db.ensure::<Label>().await;
        let in_name = label("in-name", "ok", ("k\0z", "v"));
        let in_text = label("in-text", "x\0y", ("k", "v"));
        let in_map = label("in-map", "ok", ("k", "v\0w"));
        let fine = label("fine", "ok", ("k", "v"));
        let before = db.raw::<Label>().await;
        forget_commands(&db);
        let shown = match db.upsert(&in_name).await {
            Err(error @ Error::Serialize { .. }) => error.to_string(),
            other => panic!("{db}: expected a refusal, got {other:?}"),
        };
        assert!(
            shown.contains(r#"field attributes["k\0z"]"#) && shown.contains("U+0000"),
            "{db}: {shown}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Label>().await, before, "{db}: nothing written");

        let batch = [
            in_name.clone(),
            fine.clone(),
            in_text.clone(),
            in_map.clone(),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(matches!(outcomes[0], Err(Error::Serialize { .. })), "{db}");
        assert_eq!(outcomes[1].as_ref().unwrap(), &Outcome::Inserted, "{db}");
        match &db {
            Db::Mongo { .. } => {
                for (outcome, doc) in outcomes[2..].iter().zip(&batch[2..]) {
                    assert_eq!(outcome.as_ref().unwrap(), &Outcome::Inserted, "{db}");
                    let read = db.get::<Label>(doc.id().unwrap()).await.unwrap();
                    assert_eq!(read.as_ref(), Some(doc), "{db}: read back whole");
                }
            }
            Db::Postgres { .. } => {
                for (outcome, path) in outcomes[2..]
                    .iter()
                    .zip(["field text", "field attributes.k"])
                {
                    let shown = outcome.as_ref().unwrap_err().to_string();
                    assert!(
                        shown.contains(&format!("{path} holds the character U+0000")),
                        "{db}: {shown}"
                    );
                }
                assert_eq!(
                    db.stored::<Label>().await.len(),
                    1,
                    "{db}: only the fine one"
                );
            }
        }
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
                Err(error @ Error::Serialize { .. }) => assert!(
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
        assert!(matches!(outcomes[0], Err(Error::Serialize { .. })), "{db}");
        assert_eq!(outcomes[1].as_ref().unwrap(), &Outcome::Inserted, "{db}");
        assert!(matches!(outcomes[2], Err(Error::Serialize { .. })), "{db}");
        assert_eq!(
            db.get::<Record>(fine.id().unwrap()).await.unwrap(),
            Some(fine.clone()),
            "{db}"
        );
    }
}

/// An event with extra entries stored beside its fields.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "tagged_events")]
struct TaggedEvent {
    #[idem(idempotency_key)]
    request_key: String,
    #[serde(flatten)]
    tags: BTreeMap<String, String>,
}

/// An event that cannot be stored is refused before anything is sent, on MongoDB even before
/// the first call's index check.
#[tokio::test]
async fn an_event_that_cannot_be_stored_is_refused_before_anything_is_sent() {
    for db in fresh_backends("event_refused").await {
        // PostgreSQL checks the table before it prepares a row: the table must exist.
        if db.is_postgres() {
            db.ensure::<TaggedEvent>().await;
        }
        let before = db.raw::<TaggedEvent>().await;
        forget_commands(&db);
        let event = TaggedEvent {
            request_key: "req-1".into(),
            tags: [("request_key".to_owned(), "other".to_owned())].into(),
        };
        match db.record(&event).await {
            Err(error @ Error::Serialize { .. }) => assert!(
                error
                    .to_string()
                    .contains("the name `request_key` is written twice"),
                "{db}: {error}"
            ),
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<TaggedEvent>().await,
            before,
            "{db}: nothing written"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Keys PostgreSQL cannot index

/// `len` hex digits of a chain of SHA-256 digests: text that does not compress.
fn incompressible(len: usize) -> String {
    let mut text = String::with_capacity(len + 64);
    let mut digest = Sha256::digest(b"bad_input");
    while text.len() < len {
        for byte in digest.iter() {
            text.push_str(&format!("{byte:02x}"));
        }
        digest = Sha256::digest(digest);
    }
    text.truncate(len);
    text
}

/// A natural key longer than a row of the natural-key index may be (PostgreSQL's btree holds
/// about 2700 bytes after compression) is a refusal naming the document, shown short, with
/// nothing written; the rest of its batch is written. MongoDB has no such limit and stores it.
#[tokio::test]
async fn a_natural_key_too_long_for_the_postgres_index_is_an_error_naming_the_document() {
    let long = Post {
        slug: incompressible(10_000),
        ..post("long")
    };
    for db in fresh_backends("long_key").await {
        if !db.is_postgres() {
            assert_eq!(db.upsert(&long).await.unwrap(), Outcome::Inserted, "{db}");
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post("kept")).await.unwrap();
        let before = db.raw::<Post>().await;
        let expect_error = |result: Result<Outcome, Error>| {
            let error = match result {
                Err(error @ Error::Backend { .. }) => error,
                other => panic!("{db}: expected Error::Backend, got {other:?}"),
            };
            assert_eq!(error.document().collection, "posts", "{db}");
            assert_eq!(
                error.document().natural_key.parts(),
                [text_key("slug", &long.slug), text_key("lang", "en")],
                "{db}"
            );
            let source = error.as_backend().expect("a backend error");
            assert_eq!(source.backend(), "PostgreSQL", "{db}");
            // 54000: program_limit_exceeded, the size of an index row.
            assert_eq!(source.code(), Some("54000"), "{db}: {error}");
            assert!(!error.is_retryable(), "{db}: the same key fails again");
            assert!(error.is_refusal(), "{db}: the document itself is refused");
            let message = error.to_string();
            assert!(message.contains("index row"), "{db}: {message}");
            // The key is shown by its start and length, not repeated whole.
            assert!(message.contains("(10000 bytes)"), "{db}: {message}");
            assert!(
                message.len() < 1_000,
                "{db}: {} bytes: {message}",
                message.len()
            );
        };
        expect_error(db.upsert(&long).await);
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");

        let report = db
            .upsert_many(&[long.clone(), post("short")])
            .await
            .unwrap();
        let mut outcomes = report.into_outcomes();
        assert!(
            matches!(outcomes[1], Ok(Outcome::Inserted)),
            "{db}: {:?}",
            outcomes[1]
        );
        expect_error(outcomes.remove(0));
        let after = db.raw::<Post>().await;
        assert_eq!(after.len(), 2, "{db}: kept and short");
        assert!(after.contains(&before[0]), "{db}: kept is untouched");
    }
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
// Immutability (a changed frozen field and a moved timestamp: `conformance.rs`)

#[tokio::test]
async fn a_sub_millisecond_timestamp_change_keeps_the_id_but_is_refused() {
    let starts_at = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap();
    let original = Meeting {
        room: "r1".into(),
        starts_at,
        title: "Standup".into(),
    };
    let nudged = Meeting {
        starts_at: starts_at + chrono::Duration::nanoseconds(1),
        ..original.clone()
    };
    assert_eq!(nudged.id().unwrap(), original.id().unwrap());
    let at = std::time::SystemTime::UNIX_EPOCH
        + Duration::from_millis(1_700_000_000_000)
        + Duration::from_micros(250);
    let deploy = Deploy {
        service: "api".into(),
        at,
        version: "1.0".into(),
    };
    let nudged_deploy = Deploy {
        at: at + Duration::from_micros(1),
        ..deploy.clone()
    };
    assert_eq!(nudged_deploy.id().unwrap(), deploy.id().unwrap());

    for db in fresh_backends("sub_millisecond").await {
        db.ensure::<Meeting>().await;
        db.upsert(&original).await.unwrap();
        let before = db.raw::<Meeting>().await;
        forget_commands(&db);

        match db.upsert(&nudged).await {
            Err(Error::FrozenFieldChanged {
                field, stored_id, ..
            }) => {
                assert_eq!(field, "starts_at", "{db}");
                assert_eq!(stored_id, original.id().unwrap().to_string(), "{db}");
            }
            other => panic!("{db}: expected FrozenFieldChanged, got {other:?}"),
        }
        let report = db.upsert_many(std::slice::from_ref(&nudged)).await.unwrap();
        assert!(
            matches!(
                report.outcomes(),
                [Err(Error::FrozenFieldChanged {
                    field: "starts_at",
                    ..
                })]
            ),
            "{db}: {:?}",
            report.outcomes()
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Meeting>().await, before, "{db}: nothing written");
        // The original, to the nanosecond, is still a plain retry.
        assert_eq!(
            db.upsert(&original).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(db.raw::<Meeting>().await, before, "{db}: nothing written");

        // The same with a `SystemTime` a microsecond later.
        db.ensure::<Deploy>().await;
        db.upsert(&deploy).await.unwrap();
        let before = db.raw::<Deploy>().await;
        match db.upsert(&nudged_deploy).await {
            Err(Error::FrozenFieldChanged { field, .. }) => assert_eq!(field, "at", "{db}"),
            other => panic!("{db}: expected FrozenFieldChanged, got {other:?}"),
        }
        assert_eq!(db.raw::<Deploy>().await, before, "{db}: nothing written");
    }
}

/// A deploy whose timestamp is a `SystemTime`, with sub-millisecond precision.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "deploys")]
struct Deploy {
    #[idem(key)]
    service: String,
    #[idem(timestamp)]
    at: std::time::SystemTime,
    version: String,
}

// ---------------------------------------------------------------------------------------------
// Events (a stale replay, the re-push of a deleted document and a delete without its marker:
// `conformance.rs`)

#[tokio::test]
async fn an_idempotency_key_reused_with_another_payload_is_refused() {
    for db in fresh_backends("key_reused").await {
        db.ensure::<Payment>().await;
        let payment = Payment {
            request_key: "req-1".into(),
            amount_cents: 1_000,
        };
        let first = db.record(&payment).await.unwrap();
        let before = db.raw::<Payment>().await;
        forget_commands(&db);

        let reused = Payment {
            amount_cents: 9_999,
            ..payment.clone()
        };
        match db.record(&reused).await {
            Err(Error::IdempotencyKeyReused {
                document,
                field,
                stored_id,
            }) => {
                assert_eq!(field, "request_key", "{db}");
                assert_eq!(stored_id, first.id, "{db}");
                assert_eq!(
                    document.natural_key.parts(),
                    [text_key("request_key", "req-1")],
                    "{db}"
                );
            }
            other => panic!("{db}: expected IdempotencyKeyReused, got {other:?}"),
        }
        // Through `upsert` and `upsert_many`, which record events the same way.
        match db.upsert(&reused).await {
            Err(Error::IdempotencyKeyReused { stored_id, .. }) => {
                assert_eq!(stored_id, first.id, "{db}")
            }
            other => panic!("{db}: expected IdempotencyKeyReused, got {other:?}"),
        }
        let report = db.upsert_many(&[reused, payment]).await.unwrap();
        assert!(
            matches!(
                report.outcomes(),
                [
                    Err(Error::IdempotencyKeyReused { .. }),
                    Ok(Outcome::Unchanged)
                ]
            ),
            "{db}: {:?}",
            report.outcomes()
        );
        if let Some(log) = db.command_log() {
            let names = assert_nothing_written(log);
            assert!(
                names.iter().all(|name| name == "findAndModify"),
                "{db}: {names:?}"
            );
        }
        assert_eq!(db.raw::<Payment>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// Batches

#[tokio::test]
async fn duplicate_ids_in_one_batch_get_the_outcomes_of_writing_them_one_by_one() {
    for db in fresh_backends("batch_duplicates").await {
        db.ensure::<Entry>().await;
        db.ensure::<Post>().await;
        forget_commands(&db);

        let batch = [
            entry("e1", 1, "one"),   // first: Inserted
            entry("e2", 1, "x"),     // alone: Inserted
            entry("e1", 3, "three"), // newer: Updated
            entry("e1", 2, "two"),   // older than what is stored by then: Stale
            entry("e1", 3, "three"), // what is stored by then: Unchanged
            entry("e2", 1, "x"),     // a copy of the previous e2: not sent, Unchanged
        ];
        let report = db.upsert_many(&batch).await.unwrap();
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
            ],
            "{db}"
        );
        assert_eq!(report.collapsed(), 1, "{db}");
        if let Some(log) = db.command_log() {
            let commands = log.take();
            assert_eq!(commands.documents_written, 3, "{db}");
            // `update` commands, or without update pipelines an `insert` of the new documents
            // and one pinned `update` per replacement.
            let writes = ["update", "insert"];
            assert_eq!(
                commands
                    .names
                    .iter()
                    .filter(|n| writes.contains(&n.as_str()))
                    .count(),
                2,
                "{db}: one write command per round that writes: {:?}",
                commands.names
            );
        }
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 2, "{db}");
        let e1 = stored
            .iter()
            .find(|d| d["entryId"] == "e1")
            .unwrap_or_else(|| panic!("{db}: no e1: {stored:?}"));
        assert_eq!(e1["revision"], 3, "{db}");
        assert_eq!(e1["text"], "three", "{db}");

        // Replaying the whole batch writes nothing.
        let before = db.raw::<Entry>().await;
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(report.count(Outcome::Unchanged), 4, "{db}: {report}");
        assert_eq!(report.count(Outcome::Stale), 2, "{db}: {report}");
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");

        // Without versions, each copy replaces the one before it, as one by one: the last stays.
        let report = db
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
        assert!(
            matches!(
                report.outcomes(),
                [Ok(Outcome::Inserted), Ok(Outcome::Updated)]
            ),
            "{db}: {:?}",
            report.outcomes()
        );
        let posts = db.stored::<Post>().await;
        assert_eq!(posts.len(), 1, "{db}");
        assert_eq!(posts[0]["title"], "last", "{db}");
    }
}

/// Each kind of refusal inside one batch, beside documents that are written. On MongoDB the
/// batch also carries a document over the 16 MiB BSON limit, which PostgreSQL does not have.
#[tokio::test]
async fn a_refused_document_inside_a_batch_does_not_stop_the_others() {
    for db in fresh_backends("batch_refusals").await {
        db.ensure::<Post>().await;
        let kept = post("kept");
        let other = post("other");
        db.upsert(&kept).await.unwrap();
        db.upsert(&other).await.unwrap();
        let before = db.raw::<Post>().await;
        forget_commands(&db);

        let mut batch = vec![
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
        ];
        let oversized = !db.is_postgres();
        if oversized {
            batch.push(oversized_post("big"));
        }
        batch.extend([other.clone(), post("b")]);
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                outcomes[1],
                Err(Error::TimestampOutOfRange {
                    problem: TimestampProblem::BeforeUnixEpoch,
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[1]
        );
        assert!(
            matches!(outcomes[2], Err(Error::EmptyKey { field: "slug", .. })),
            "{db}: {:?}",
            outcomes[2]
        );
        assert!(
            matches!(
                outcomes[3],
                Err(Error::FrozenFieldChanged {
                    field: "author_id",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[3]
        );
        if oversized {
            assert!(
                matches!(outcomes[4], Err(Error::DocumentTooLarge { .. })),
                "{db}: {:?}",
                outcomes[4]
            );
        }
        let last = outcomes.len() - 1;
        assert!(
            matches!(outcomes[last - 1], Ok(Outcome::Unchanged)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(outcomes[last], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert_eq!(report.refused(), 3 + usize::from(oversized), "{db}");
        if let Some(log) = db.command_log() {
            assert_eq!(log.take().documents_written, 2, "{db}");
        }

        // The two new documents are stored; the two that were stored are intact.
        let mut slugs: Vec<String> = db
            .stored::<Post>()
            .await
            .iter()
            .map(|d| d["slug"].as_str().unwrap_or_default().to_owned())
            .collect();
        slugs.sort_unstable();
        assert_eq!(slugs, ["a", "b", "kept", "other"], "{db}");
        let after = db.raw::<Post>().await;
        for untouched in &before {
            assert!(
                after.contains(untouched),
                "{db}: a stored document changed: {untouched} is gone from {after:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Effects on what is not there

/// `thread.push_comments(…)`, the generated method, on `db`'s backend.
async fn push_comment(db: &Db, thread: &Thread, comment: &Comment) -> Result<Pushed, Error> {
    match db {
        Db::Mongo { store, .. } => thread.push_comments(store, comment).await,
        Db::Postgres { store, client, .. } => {
            thread.push_comments(&store.on(client), comment).await
        }
    }
}

/// A comment as another client's type writes it: camelCase.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RenamedComment {
    comment_id: String,
    text: String,
}

/// A comment keyed by a list.
#[derive(Serialize)]
struct ListKeyComment {
    comment_id: Vec<String>,
    text: String,
}

/// A comment whose missing key serde writes as null.
#[derive(Serialize)]
struct NullKeyComment {
    comment_id: Option<String>,
    text: String,
}

#[tokio::test]
async fn pushing_an_item_without_its_key_is_refused() {
    for db in fresh_backends("item_without_key").await {
        db.ensure::<Thread>().await;
        let thread = Thread {
            slug: "launch".into(),
            title: "Launch".into(),
            comments: Vec::new(),
        };
        db.upsert(&thread).await.unwrap();
        let before = db.raw::<Thread>().await;
        forget_commands(&db);

        let anonymous = Comment {
            comment_id: None,
            text: "who am I?".into(),
        };
        match push_comment(&db, &thread, &anonymous).await {
            Err(Error::ItemWithoutKey {
                document,
                field,
                item_key,
                written,
            }) => {
                assert_eq!(field, "comments", "{db}");
                assert_eq!(item_key, "comment_id", "{db}");
                assert_eq!(written, ["text"], "{db}: what the item writes instead");
                assert_eq!(document.id, Some(thread.id().unwrap()), "{db}");
            }
            other => panic!("{db}: expected ItemWithoutKey, got {other:?}"),
        }
        // An item type whose `rename_all` the list's `push_by` does not spell: the error shows
        // the name it writes the key under.
        let renamed = RenamedComment {
            comment_id: "c1".into(),
            text: "hello".into(),
        };
        let error = db
            .push::<Thread, _>(thread.id().unwrap(), "comments", &renamed)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains(
                "has no `comment_id` field to tell it apart; it writes `commentId`, `text`"
            ),
            "{db}: {error}"
        );
        // A key serde writes as null is no key: two such items would fold into one, the
        // second answered `AlreadyPresent` and lost.
        let null_key = NullKeyComment {
            comment_id: None,
            text: "who am I?".into(),
        };
        let error = db
            .push::<Thread, _>(thread.id().unwrap(), "comments", &null_key)
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("has no `comment_id` field to tell it apart; it writes `text`"),
            "{db}: {error}"
        );
        // A key that is a list: MongoDB would match it element by element, so `["c1"]` would
        // pass for any stored item holding "c1" among its keys.
        let listed = ListKeyComment {
            comment_id: vec!["c1".into(), "c2".into()],
            text: "two at once".into(),
        };
        let error = db
            .push::<Thread, _>(thread.id().unwrap(), "comments", &listed)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::Serialize { .. })
                && error
                    .to_string()
                    .contains("has a list under its key `comment_id`"),
            "{db}: {error}"
        );
        // An item that is not a document at all has no key either.
        assert!(
            matches!(
                db.push::<Thread, _>(thread.id().unwrap(), "comments", &"just text")
                    .await,
                Err(Error::ItemWithoutKey { .. })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Thread>().await, before, "{db}: nothing written");
    }
}

#[tokio::test]
async fn apply_once_on_a_missing_document_is_not_found() {
    for db in fresh_backends("apply_missing").await {
        db.ensure::<Account>().await;
        forget_commands(&db);
        let ghost = account("ghost");
        let id = ghost.id().unwrap();
        match db
            .credit_once::<Account>(id, &"op-1".into(), "balance", 100)
            .await
        {
            Err(Error::NotFound { document }) => {
                assert_eq!(document.collection, "accounts", "{db}");
                assert_eq!(document.id, Some(id), "{db}");
            }
            other => panic!("{db}: expected NotFound, got {other:?}"),
        }
        assert_db_wrote_nothing(&db);
        assert!(
            db.raw::<Account>().await.is_empty(),
            "{db}: nothing written"
        );
    }
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
/// How long the unreachable store's driver looks for a server before it gives up.
const SERVER_SELECTION: Duration = Duration::from_millis(1_500);

async fn unreachable_store(database: &str) -> (Store, Recorder) {
    let closed = free_port();
    let recorder = Recorder::default();
    let dead = recorder
        .client(&format!(
            "mongodb://127.0.0.1:{closed}/?retryWrites=false&directConnection=true\
             &serverSelectionTimeoutMS={}",
            SERVER_SELECTION.as_millis()
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
    // One server selection per call: the first call (which checks the natural-key index before
    // it writes) gives up after one, where two would take at least twice as long.
    let waited = started.elapsed();
    assert!(
        waited >= SERVER_SELECTION && waited < SERVER_SELECTION * 2,
        "{waited:?} for a server selection of {SERVER_SELECTION:?}"
    );
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

/// A stored document that does not read as its type is `Error::Deserialize`, naming the
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
            Err(error @ Error::Deserialize { .. }) => {
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
