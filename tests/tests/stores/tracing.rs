//! What a `tracing` subscriber sees of idem's calls (idem-core's `tracing` feature): one span per
//! call with its collection, id, outcome, round trips and retries, and events for index creation,
//! refusals and batch splits. Captured by a subscriber of the test's own, on every backend.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use idem_core::mongo::AdoptOptions;
use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{post, Post};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span or an event, with its fields as text.
#[derive(Clone, Debug)]
struct Seen {
    name: String,
    fields: BTreeMap<String, String>,
    /// For an event: the span it happened in.
    parent: Option<String>,
}

impl Seen {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// Records fields as text.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Every span when it closes and every event, in order.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl Capture {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<BTreeMap<String, String>>() {
                values.record(&mut Fields(fields));
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let parent = ctx.event_span(event).map(|span| span.name().to_owned());
        let message = fields.get("message").cloned().unwrap_or_default();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Seen {
                name: message,
                fields,
                parent,
            });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<BTreeMap<String, String>>()
                .cloned()
                .unwrap_or_default();
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Seen {
                    name: span.name().to_owned(),
                    fields,
                    parent: None,
                });
        }
    }
}

fn spans<'a>(seen: &'a [Seen], name: &str) -> Vec<&'a Seen> {
    seen.iter().filter(|seen| seen.name == name).collect()
}

/// Each call is one span naming its collection, id and outcome, with its round trips and
/// retries; creating the index, a refusal and a batch's split are events in their call's span.
#[tokio::test]
async fn each_call_is_a_span_with_its_outcome_round_trips_and_retries() {
    let capture = Capture::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    for db in fresh_backends("tracing").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let seen = capture.take();
        // A SQL store makes the whole table, and says so; MongoDB makes the index.
        let created = match db.is_sql() {
            true => "created the table",
            false => "created the natural-key index",
        };
        assert!(
            seen.iter()
                .any(|seen| seen.name == created && seen.field("collection") == "posts"),
            "{db}: {seen:#?}"
        );
        if db.is_sql() {
            assert!(
                !seen.iter().any(|seen| seen.name.contains("index")),
                "{db}: {seen:#?}"
            );
            // The table is there now: making sure of it again creates nothing.
            db.ensure::<Post>().await;
            let seen = capture.take();
            assert!(
                !seen.iter().any(|seen| seen.name.starts_with("created")),
                "{db}: {seen:#?}"
            );
        }
        let first = post();
        let id = first.id().unwrap().to_string();
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Inserted, "{db}");
        let seen = capture.take();
        let upserts = spans(&seen, "idem.upsert");
        assert_eq!(upserts.len(), 1, "{db}: {seen:#?}");
        assert_eq!(upserts[0].field("collection"), "posts", "{db}");
        assert_eq!(upserts[0].field("id"), id, "{db}");
        assert_eq!(upserts[0].field("outcome"), "Inserted", "{db}");
        assert_eq!(upserts[0].field("retries"), "0", "{db}");

        // The same document again: one round trip, nothing written. SQLite, embedded, and MariaDB,
        // whose upsert returns no rows, read the row the write left alone in a second statement
        // (under the write's locks): two.
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Unchanged, "{db}");
        let seen = capture.take();
        let upserts = spans(&seen, "idem.upsert");
        assert_eq!(upserts[0].field("outcome"), "Unchanged", "{db}");
        let statements = if db.is_sqlite() || db.is_mysql() {
            "2"
        } else {
            "1"
        };
        assert_eq!(
            upserts[0].field("round_trips"),
            statements,
            "{db}: {seen:#?}"
        );

        // A refusal: the span's outcome names the error, and a warning says why.
        let moved = Post {
            author_id: "grace".into(),
            ..first.clone()
        };
        assert!(matches!(
            db.upsert(&moved).await.map_err(Error::into_kind),
            Err(ErrorKind::FrozenFieldChanged { .. })
        ));
        let seen = capture.take();
        let upserts = spans(&seen, "idem.upsert");
        assert_eq!(
            upserts[0].field("outcome"),
            "ErrorKind::FrozenFieldChanged",
            "{db}"
        );
        let refused = seen.iter().find(|seen| seen.name == "refused");
        assert!(
            refused.is_some_and(|event| event.field("error").contains("author_id")
                && event.parent.as_deref() == Some("idem.upsert")),
            "{db}: {seen:#?}"
        );

        // A batch: one span for the call, its split an event in it.
        let batch: Vec<Post> = ["a", "b", "c"]
            .iter()
            .map(|slug| Post {
                slug: (*slug).into(),
                ..first.clone()
            })
            .collect();
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(report.count(Outcome::Inserted), 3, "{db}");
        let seen = capture.take();
        let batches = spans(&seen, "idem.upsert_many");
        assert_eq!(batches.len(), 1, "{db}: {seen:#?}");
        assert_eq!(batches[0].field("outcome"), report.to_string(), "{db}");
        assert!(
            seen.iter().any(|seen| seen.name == "batch split"
                && seen.field("documents") == "3"
                && seen.parent.as_deref() == Some("idem.upsert_many")),
            "{db}: {seen:#?}"
        );
        assert!(
            batches[0].field("round_trips").parse::<u32>().unwrap() >= 1,
            "{db}: {seen:#?}"
        );
    }
}

/// A batch's chunk is first looked up, and only the rows not stored unchanged are written: on
/// PostgreSQL by ids, keys, hashes and version keys (the rows' content is sent only for what
/// differs), on SQLite and MariaDB by reading the stored rows (an unchanged re-ingest takes no
/// write lock). An unchanged re-ingest is one lookup per chunk and no write; a first ingest pays
/// the lookup once (its first chunk finds nothing stored, and the later chunks go without); a
/// re-ingest with edits in one chunk writes that chunk only. Counted in the call's span, on both
/// PostgreSQL drivers, on SQLite and on MariaDB.
#[tokio::test]
async fn a_reingest_is_one_lookup_per_chunk_and_writes_only_what_differs() {
    let capture = Capture::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    for db in fresh_backends("tracing_lookup").await {
        if !db.is_sql() {
            continue;
        }
        db.ensure::<Post>().await;
        let db = db.with_batch_chunk(100).await;
        let mut docs: Vec<Post> = (0..300)
            .map(|n| Post {
                slug: format!("post-{n}"),
                ..post()
            })
            .collect();
        let round_trips = |report: &idem_core::BatchReport| {
            let seen = capture.take();
            let batches = spans(&seen, "idem.upsert_many");
            assert_eq!(batches[0].field("outcome"), report.to_string(), "{db}");
            batches[0].field("round_trips").to_owned()
        };
        let first = db.upsert_many(&docs).await.unwrap();
        assert_eq!(first.count(Outcome::Inserted), 300, "{db}");
        assert_eq!(round_trips(&first), "4", "{db}: one lookup, three writes");
        let again = db.upsert_many(&docs).await.unwrap();
        assert_eq!(again.count(Outcome::Unchanged), 300, "{db}");
        assert_eq!(
            round_trips(&again),
            "3",
            "{db}: one lookup per chunk, no write"
        );
        for doc in &mut docs[150..160] {
            doc.title = "Edited".into();
        }
        let edited = db.upsert_many(&docs).await.unwrap();
        assert_eq!(
            (
                edited.count(Outcome::Unchanged),
                edited.count(Outcome::Updated)
            ),
            (290, 10),
            "{db}"
        );
        // MariaDB's upsert returns no rows: the locking read after it tells what it wrote.
        match db.is_mysql() {
            true => assert_eq!(
                round_trips(&edited),
                "5",
                "{db}: three lookups, one write and its read"
            ),
            false => assert_eq!(round_trips(&edited), "4", "{db}: three lookups, one write"),
        }
    }
}

/// An audit and an adoption are one span each, whose outcome sums up their report.
#[tokio::test]
async fn audit_and_adopt_are_spans_with_their_reports() {
    let capture = Capture::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    for db in fresh_backends("tracing_adopt").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        capture.take();
        let (audit, adopt) = match &db {
            Db::Mongo { store, .. } => (
                store.audit::<Post>().await.unwrap(),
                store.adopt::<Post>(AdoptOptions::default()).await.unwrap(),
            ),
            Db::Postgres { store, client, .. } => (
                store.audit::<Post, _>(client).await.unwrap(),
                store.adopt::<Post, _>(client).await.unwrap(),
            ),
            Db::Sqlite {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                (
                    store.audit::<Post>(&mut connection).await.unwrap(),
                    store.adopt::<Post>(&mut connection).await.unwrap(),
                )
            }
            Db::Mysql {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                (
                    store.audit::<Post>(&mut connection).await.unwrap(),
                    store.adopt::<Post>(&mut connection).await.unwrap(),
                )
            }
        };
        assert!(audit.is_clean() && adopt.is_complete(), "{db}");
        let seen = capture.take();
        let audits = spans(&seen, "idem.audit");
        assert_eq!(audits.len(), 1, "{db}: {seen:#?}");
        assert_eq!(audits[0].field("collection"), "posts", "{db}");
        assert_eq!(audits[0].field("outcome"), "1 scanned, clean", "{db}");
        let adopts = spans(&seen, "idem.adopt");
        assert_eq!(adopts.len(), 1, "{db}: {seen:#?}");
        assert_eq!(
            adopts[0].field("outcome"),
            "0 moved, 0 could not be moved",
            "{db}"
        );
    }
}

/// A read by natural key shows the key it looks up as `key`, and as `id` the id of the document
/// it found: none when nothing is stored under the key.
#[tokio::test]
async fn a_find_shows_its_key_and_the_id_it_found() {
    let capture = Capture::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    for db in fresh_backends("tracing_find").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let missing = Post {
            slug: "not-stored".into(),
            ..post()
        };
        capture.take();
        for (doc, found) in [(post(), true), (missing, false)] {
            let read = db.find::<Post>(doc.natural_key()).await.unwrap();
            assert_eq!(read.is_some(), found, "{db}");
            let seen = capture.take();
            let finds = spans(&seen, "idem.find");
            assert_eq!(finds.len(), 1, "{db}: {seen:#?}");
            assert_eq!(finds[0].field("collection"), "posts", "{db}");
            assert_eq!(finds[0].field("key"), doc.natural_key().to_string(), "{db}");
            let id = if found {
                doc.id().unwrap().to_string()
            } else {
                String::new()
            };
            assert_eq!(finds[0].field("id"), id, "{db}: {seen:#?}");
            let outcome = if found { "found" } else { "none" };
            assert_eq!(finds[0].field("outcome"), outcome, "{db}");
        }
    }
}
