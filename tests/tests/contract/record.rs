//! `record`: an event is recorded once under its idempotency key. Retries find its first id,
//! racing first writes agree on one; another payload under the key, an empty key, an event that
//! cannot be stored and a collision in another unique index are refused with nothing written.

use std::collections::BTreeMap;

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::Payment;
use serde::{Deserialize, Serialize};

use crate::support::{assert_db_sent_nothing, assert_nothing_written, forget_commands, text_key};

/// A request without a natural key, made idempotent by the key the client sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "charges")]
#[serde(rename_all = "camelCase")]
struct Charge {
    #[idem(idempotency_key)]
    request_key: String,
    amount_cents: i64,
}

fn charge(key: &str, amount_cents: i64) -> Charge {
    Charge {
        request_key: key.into(),
        amount_cents,
    }
}

/// An event is recorded once: retries find its first id, racing first writes agree on one id,
/// another payload under the key and an empty key are refused with nothing written.
#[tokio::test]
async fn an_event_is_recorded_once_under_its_idempotency_key() {
    for db in fresh_backends("record").await {
        // an event's id is random: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Charge>().await;
        let first = db.record(&charge("req-1", 500)).await.unwrap();
        assert_eq!(first.outcome, Outcome::Inserted, "{db}");
        let retry = db.record(&charge("req-1", 500)).await.unwrap();
        assert_eq!(
            retry,
            idem_core::Recorded::new(first.id, Outcome::Unchanged),
            "{db}"
        );
        assert_eq!(
            db.upsert(&charge("req-1", 500)).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let before = db.raw::<Charge>().await;
        assert_eq!(
            db.stored::<Charge>().await[0]["_id"],
            first.id.to_string(),
            "{db}: stored under the id it was recorded with"
        );
        match db
            .record(&charge("req-1", 900))
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::IdempotencyKeyReused {
                field, stored_id, ..
            }) => {
                assert_eq!(field, "request_key", "{db}");
                assert_eq!(stored_id, first.id, "{db}");
            }
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        assert!(
            matches!(
                db.record(&charge("", 1)).await.map_err(Error::into_kind),
                Err(ErrorKind::EmptyKey { .. })
            ),
            "{db}"
        );
        assert_eq!(db.raw::<Charge>().await, before, "{db}: nothing written");

        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                racer.record(&charge("req-2", 700)).await.unwrap()
            }));
        }
        let mut recorded = Vec::new();
        for racer in racers {
            recorded.push(racer.await.unwrap());
        }
        let inserted = recorded
            .iter()
            .filter(|r| r.outcome == Outcome::Inserted)
            .count();
        assert_eq!(inserted, 1, "{db}: {recorded:?}");
        assert!(
            recorded.iter().all(|r| r.id == recorded[0].id),
            "{db}: {recorded:?}"
        );
        assert_ne!(recorded[0].id, first.id, "{db}: another key, another event");
        assert_eq!(db.stored::<Charge>().await.len(), 2, "{db}");
    }
}

/// An event's id is the one `record` gives it, never derived.
#[test]
fn an_event_has_no_derived_id() {
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 1,
    };
    assert!(matches!(
        payment.id().map_err(Error::into_kind),
        Err(ErrorKind::NoDerivedId)
    ));
}

/// Promise catalogue case 7: an empty idempotency key is refused, as an empty key is, and
/// nothing is written.
#[tokio::test]
async fn an_empty_idempotency_key_is_refused_and_nothing_is_written() {
    for db in fresh_backends("p7_empty_idempotency_key").await {
        // an event's id is random: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Payment>().await;
        let blank = Payment {
            request_key: String::new(),
            amount_cents: 1_000,
        };
        let expect_empty_key =
            |result: Result<Outcome, Error>| match result.map_err(Error::into_kind) {
                Err(ErrorKind::EmptyKey { field, .. }) => assert_eq!(field, "request_key", "{db}"),
                other => panic!("{db}: expected EmptyKey for `request_key`, got {other:?}"),
            };
        expect_empty_key(db.record(&blank).await.map(|recorded| recorded.outcome));
        // Another request without a key must not fold into the first one either.
        let other_blank = Payment {
            amount_cents: 2_000,
            ..blank.clone()
        };
        expect_empty_key(db.upsert(&other_blank).await);
        let report = db.upsert_many(&[blank]).await.unwrap();
        expect_empty_key(report.into_outcomes().remove(0));
        assert!(
            db.raw::<Payment>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

#[tokio::test]
async fn an_idempotency_key_reused_with_another_payload_is_refused() {
    for db in fresh_backends("key_reused").await {
        // an event's id is random: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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
            Err(error) => match error.kind() {
                ErrorKind::IdempotencyKeyReused { field, stored_id } => {
                    assert_eq!(*field, "request_key", "{db}");
                    assert_eq!(*stored_id, first.id, "{db}");
                    assert_eq!(
                        error.document().natural_key.parts(),
                        [text_key("request_key", "req-1")],
                        "{db}"
                    );
                }
                _ => panic!("{db}: expected IdempotencyKeyReused, got {error:?}"),
            },
            other => panic!("{db}: expected IdempotencyKeyReused, got {other:?}"),
        }
        // Through `upsert` and `upsert_many`, which record events the same way.
        match db.upsert(&reused).await.map_err(Error::into_kind) {
            Err(ErrorKind::IdempotencyKeyReused { stored_id, .. }) => {
                assert_eq!(stored_id, first.id, "{db}")
            }
            other => panic!("{db}: expected IdempotencyKeyReused, got {other:?}"),
        }
        let report = db.upsert_many(&[reused, payment]).await.unwrap();
        assert!(
            matches!(
                report.outcomes(),
                [Err(error), Ok(Outcome::Unchanged)]
                    if matches!(error.kind(), ErrorKind::IdempotencyKeyReused { .. })
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
        // The SQL stores check the table before they prepare a row: the table must exist.
        if db.is_sql() {
            db.ensure::<TaggedEvent>().await;
        }
        let before = db.raw::<TaggedEvent>().await;
        forget_commands(&db);
        let event = TaggedEvent {
            request_key: "req-1".into(),
            tags: [("request_key".to_owned(), "other".to_owned())].into(),
        };
        match db.record(&event).await {
            Err(error) if matches!(error.kind(), ErrorKind::Serialize { .. }) => assert!(
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

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "invites")]
struct Invite {
    #[idem(idempotency_key)]
    request_key: String,
    email: String,
}

/// An event colliding in another unique index (one the application made on `email`) is a
/// refusal naming that index, never a retry until `Contention`; nothing is written, and the
/// events around it are recorded as ever.
#[tokio::test]
async fn recording_an_event_that_collides_in_another_unique_index_is_refused_naming_it() {
    for db in fresh_backends("record_second_unique").await {
        // An event's id is random: MongoDB without the natural-key index refuses it. A
        // partitioned table's unique indexes hold its partition columns, the natural key's:
        // none can collide apart from the natural key (docs/GUIDE.md, "Partitioned tables").
        if db.guards_by_id_alone() || db.is_partitioned() {
            continue;
        }
        db.ensure::<Invite>().await;
        db.create_unique_index::<Invite>("invites_email", "email")
            .await;
        let invite = |key: &str, email: &str| Invite {
            request_key: key.into(),
            email: email.into(),
        };
        let first = db.record(&invite("r1", "a@x")).await.unwrap();
        assert_eq!(first.outcome, Outcome::Inserted, "{db}");
        let before = db.raw::<Invite>().await;
        match db
            .record(&invite("r2", "a@x"))
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::UniqueIndexConflict { index, .. }) => {
                assert!(index.contains("invites_email"), "{db}: {index}")
            }
            other => panic!("{db}: expected a refusal naming invites_email, got {other:?}"),
        }
        assert_eq!(db.raw::<Invite>().await, before, "{db}: nothing written");
        let again = db.record(&invite("r1", "a@x")).await.unwrap();
        assert_eq!(
            (again.id, again.outcome),
            (first.id, Outcome::Unchanged),
            "{db}"
        );
    }
}
