//! Immutability: a frozen field and an id-feeding timestamp never change once stored, on every
//! path (`upsert`, `upsert_many`, `insert_new`), and nothing is written when a change is refused.
//! What is the same value is not a change: a map rebuilt in another order, the same instant to
//! the nanosecond. A frozen null is a value; only an `Option` never written may be set once.

use std::collections::HashMap;
use std::time::Duration;

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{post, Post};
use serde::{Deserialize, Serialize};

use crate::support::{assert_db_wrote_nothing, assert_stored_as_serde, forget_commands, Meeting};

/// A changed frozen field and a moved timestamp are refused, naming the field, with nothing
/// written.
#[tokio::test]
async fn a_changed_frozen_field_or_timestamp_is_refused_and_nothing_is_written() {
    for db in fresh_backends("frozen").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let before = db.raw::<Post>().await;
        let other_author = Post {
            author_id: "grace".into(),
            ..post()
        };
        match db.upsert(&other_author).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
                field,
                stored,
                incoming,
                ..
            }) => {
                assert_eq!(field, "author_id", "{db}");
                assert!(stored.contains("ada"), "{db}: {stored}");
                assert!(incoming.contains("grace"), "{db}: {incoming}");
            }
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        let moved = Post {
            published_at: post().published_at + 1,
            ..post()
        };
        match db.upsert(&moved).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged { field, .. }) => {
                assert_eq!(field, "published_at", "{db}")
            }
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        let report = db.upsert_many(&[other_author, moved]).await.unwrap();
        assert_eq!(report.refused(), 2, "{db}: {report}");
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
    }
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "ballots")]
struct Ballot {
    #[idem(key)]
    ballot_id: String,
    #[idem(frozen)]
    answers: Vec<Option<String>>,
    note: String,
}

/// Promise catalogue case 3, frozen bypass: a null inside a stored frozen list is a value, not
/// "never written", so the list cannot be overwritten.
#[tokio::test]
async fn a_frozen_list_holding_a_null_cannot_be_overwritten() {
    for db in fresh_backends("p3_frozen_null_list").await {
        db.ensure::<Ballot>().await;
        let cast = Ballot {
            ballot_id: "b1".into(),
            answers: vec![Some("yes".into()), None],
            note: "cast".into(),
        };
        assert_eq!(db.upsert(&cast).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Ballot>().await;

        let rigged = Ballot {
            answers: vec![Some("no".into()), None],
            ..cast.clone()
        };
        match db.upsert(&rigged).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
                field,
                stored_id,
                stored,
                incoming,
                ..
            }) => {
                assert_eq!(field, "answers", "{db}");
                assert_eq!(
                    stored_id.to_string(),
                    cast.id().unwrap().to_string(),
                    "{db}"
                );
                assert!(stored.contains("yes"), "{db}: stored: {stored}");
                assert!(incoming.contains("no"), "{db}: incoming: {incoming}");
            }
            other => panic!("{db}: expected FrozenFieldChanged for `answers`, got {other:?}"),
        }
        assert_eq!(db.raw::<Ballot>().await, before, "{db}: nothing written");
    }
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "listings")]
struct Listing {
    #[idem(key)]
    sku: String,
    #[idem(frozen)]
    attributes: HashMap<String, String>,
    price_cents: i64,
}

/// The same entries in a new `HashMap` that iterates (and so serializes) them in another order.
fn same_map_in_another_order(map: &HashMap<String, String>) -> HashMap<String, String> {
    let order = |map: &HashMap<String, String>| map.keys().cloned().collect::<Vec<_>>();
    (0..1000)
        .map(|_| map.clone().into_iter().collect::<HashMap<_, _>>())
        .find(|rebuilt| order(rebuilt) != order(map))
        .expect("a rebuilt HashMap of 12 entries iterates in another order within 1000 tries")
}

/// Promise catalogue case 4, false refusal: a map is the same value whatever order its entries
/// come in.
#[tokio::test]
async fn a_frozen_map_rebuilt_with_the_same_content_is_not_a_change() {
    for db in fresh_backends("p4_frozen_map").await {
        db.ensure::<Listing>().await;
        let listing = Listing {
            sku: "chair-1".into(),
            attributes: (0..12)
                .map(|n| (format!("attribute-{n}"), format!("value-{n}")))
                .collect(),
            price_cents: 4_900,
        };
        assert_eq!(
            db.upsert(&listing).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Listing>().await;

        // Re-ingested: the map is built anew, with the same content.
        let reingested = Listing {
            attributes: same_map_in_another_order(&listing.attributes),
            ..listing.clone()
        };
        assert_eq!(
            db.upsert(&reingested).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(db.raw::<Listing>().await, before, "{db}: nothing written");

        // An edit of another field goes through.
        let repriced = Listing {
            price_cents: 3_900,
            ..reingested
        };
        assert_eq!(
            db.upsert(&repriced).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Listing>().await;
        assert_eq!(stored[0]["price_cents"], 3_900, "{db}");
    }
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "tickets")]
struct Ticket {
    #[idem(key)]
    ticket_id: String,
    title: String,
    #[idem(frozen)]
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_by: Option<String>,
}

fn ticket(closed_by: Option<&str>) -> Ticket {
    Ticket {
        ticket_id: "t1".into(),
        title: "Printer on fire".into(),
        closed_by: closed_by.map(Into::into),
    }
}

/// Promise catalogue case 13: a frozen `Option` that serde leaves out while `None` is a field
/// never written, so it may be set once, then never changed. (Key, timestamp and version fields
/// with `skip_serializing_if` are compile errors: ui/roles/*_with_skip_serializing_if.rs.)
#[tokio::test]
async fn a_frozen_option_left_out_while_none_is_written_once_then_frozen() {
    for db in fresh_backends("p13_frozen_skipped_option").await {
        db.ensure::<Ticket>().await;
        assert_eq!(
            db.upsert(&ticket(None)).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_stored_as_serde(&db, &ticket(None)).await;

        // Never written, so it may be set once…
        assert_eq!(
            db.upsert(&ticket(Some("ada"))).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let before = db.raw::<Ticket>().await;
        // …and never changed afterwards.
        match db
            .upsert(&ticket(Some("bob")))
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::FrozenFieldChanged { field, .. }) => {
                assert_eq!(field, "closed_by", "{db}")
            }
            other => panic!("{db}: expected FrozenFieldChanged for `closed_by`, got {other:?}"),
        }
        assert_eq!(db.raw::<Ticket>().await, before, "{db}: nothing written");
    }
}

/// A level that serializes as null when unset: an untagged enum's unit variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Level {
    Unset,
    Named(String),
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "badges")]
struct Badge {
    #[idem(key)]
    name: String,
    #[idem(frozen)]
    meta: serde_json::Value,
    #[idem(frozen)]
    level: Level,
    #[idem(frozen)]
    issuer: Option<String>,
    note: String,
}

/// A frozen value that serializes as null (`serde_json::Value::Null`, an untagged unit variant)
/// is a value like any other and may never change; only an `Option` left `None` is "never
/// written", which a later write may set once.
#[tokio::test]
async fn a_frozen_null_is_a_value_and_only_a_none_may_be_set_later() {
    for db in fresh_backends("frozen_nulls").await {
        db.ensure::<Badge>().await;
        let badge = Badge {
            name: "b".into(),
            meta: serde_json::Value::Null,
            level: Level::Unset,
            issuer: None,
            note: "first".into(),
        };
        assert_eq!(db.upsert(&badge).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(db.upsert(&badge).await.unwrap(), Outcome::Unchanged, "{db}");
        let before = db.raw::<Badge>().await;
        let changes = [
            (
                "meta",
                Badge {
                    meta: serde_json::json!("x"),
                    ..badge.clone()
                },
            ),
            (
                "level",
                Badge {
                    level: Level::Named("gold".into()),
                    ..badge.clone()
                },
            ),
        ];
        for (field, changed) in changes {
            for (how, outcome) in [
                ("single", db.upsert(&changed).await),
                (
                    "batch",
                    db.upsert_many(std::slice::from_ref(&changed))
                        .await
                        .unwrap()
                        .into_outcomes()
                        .remove(0),
                ),
            ] {
                match outcome.map_err(Error::into_kind) {
                    Err(ErrorKind::FrozenFieldChanged { field: refused, .. }) => {
                        assert_eq!(refused, field, "{db} {how}")
                    }
                    other => panic!("{db} {how}: a frozen null changed to a value: {other:?}"),
                }
            }
        }
        assert_eq!(db.raw::<Badge>().await, before, "{db}: nothing written");
        let issued = Badge {
            issuer: Some("guild".into()),
            note: "issued".into(),
            ..badge.clone()
        };
        assert_eq!(db.upsert(&issued).await.unwrap(), Outcome::Updated, "{db}");
        let reissued = Badge {
            issuer: Some("other".into()),
            ..issued.clone()
        };
        assert!(
            matches!(
                db.upsert(&reissued).await.map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "issuer",
                    ..
                })
            ),
            "{db}: once set, an optional frozen field stays"
        );

        // The same rule for a document another tool stored, without digests.
        let db = db.reset::<Badge>().await;
        db.write_as_another_tool(&badge).await;
        let changed = Badge {
            meta: serde_json::json!("x"),
            ..badge.clone()
        };
        assert!(
            matches!(
                db.upsert(&changed).await.map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged { field: "meta", .. })
            ),
            "{db}: another tool's frozen null changed to a value"
        );
        let renoted = Badge {
            note: "second".into(),
            ..badge.clone()
        };
        assert_eq!(db.upsert(&renoted).await.unwrap(), Outcome::Updated, "{db}");
    }
}

/// A timestamp serde writes at second precision while the id takes its milliseconds: two
/// documents one second apart share their content but not their id.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SecondsStamp(i64);

impl Serialize for SecondsStamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.0 / 1000)
    }
}

impl idem_core::IdTimestamp for SecondsStamp {
    fn unix_millis(&self) -> Result<u64, idem_core::TimestampProblem> {
        self.0.unix_millis()
    }

    fn describe(&self) -> String {
        self.0.describe()
    }
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "ticks")]
struct Tick {
    #[idem(key)]
    name: String,
    #[idem(timestamp)]
    at: SecondsStamp,
    note: String,
}

fn tick(at_ms: i64) -> Tick {
    Tick {
        name: "t".into(),
        at: SecondsStamp(at_ms),
        note: "same".into(),
    }
}

/// Two documents with one natural key, one content hash and two ids (the timestamp is stored at
/// second precision) are two writes, in a batch as one by one: the second moves the timestamp
/// and is refused. A batch collapses copies by id, never by natural key alone.
#[tokio::test]
async fn one_natural_key_under_two_ids_is_refused_in_a_batch_as_one_by_one() {
    for db in fresh_backends("two_ids_one_key").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Tick>().await;
        let (first, moved) = (tick(1_700_000_000_000), tick(1_700_000_000_400));
        assert_eq!(first.content_hash().unwrap(), moved.content_hash().unwrap());
        assert_ne!(first.id().unwrap(), moved.id().unwrap());
        let one_by_one = [db.upsert(&first).await, db.upsert(&moved).await];
        let single_db = db.reset::<Tick>().await;
        let report = single_db
            .upsert_many(&[first.clone(), moved.clone()])
            .await
            .unwrap();
        let mut refused = Vec::new();
        for (index, outcomes) in [&one_by_one[..], report.outcomes()].into_iter().enumerate() {
            let how = ["one by one", "in a batch"][index];
            assert_eq!(
                outcomes[0].as_ref().ok(),
                Some(&Outcome::Inserted),
                "{db} {how}"
            );
            match outcomes[1].as_ref().map_err(Error::kind) {
                // The stored timestamp reads as the incoming one: the ids differ all the same.
                Err(ErrorKind::IdChanged { derived_id, .. }) => refused.push(derived_id.clone()),
                other => panic!("{db} {how}: expected the second id refused, got {other:?}"),
            }
        }
        assert_eq!(
            refused,
            [
                moved.id().unwrap().to_string(),
                moved.id().unwrap().to_string()
            ],
            "{db}: the same refusal one by one and in a batch"
        );
        assert_eq!(report.collapsed(), 0, "{db}");
        // A derived set is no different: the second member is refused, not taken as stored.
        let members_db = single_db.reset::<Tick>().await;
        let inserted = members_db
            .insert_new(&[first.clone(), moved.clone()])
            .await
            .unwrap();
        assert_eq!(
            inserted.results()[0].as_ref().ok(),
            Some(&idem_core::Insertion::Inserted),
            "{db}"
        );
        match inserted.results()[1].as_ref().map_err(Error::kind) {
            Err(ErrorKind::IdChanged { derived_id, .. }) => {
                assert_eq!(*derived_id, refused[0], "{db}: as one by one")
            }
            other => panic!("{db} insert_new: expected the second id refused, got {other:?}"),
        }
        let stored = members_db.stored::<Tick>().await;
        assert_eq!(stored.len(), 1, "{db}: {stored:?}");
        assert_eq!(stored[0]["_id"], first.id().unwrap().to_string(), "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// Sub-millisecond timestamps

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
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Meeting>().await;
        db.upsert(&original).await.unwrap();
        let before = db.raw::<Meeting>().await;
        forget_commands(&db);

        match db.upsert(&nudged).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
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
                [outcome] if matches!(
                    outcome.as_ref().map_err(Error::kind),
                    Err(ErrorKind::FrozenFieldChanged {
                        field: "starts_at",
                        ..
                    })
                )
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
        match db.upsert(&nudged_deploy).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged { field, .. }) => assert_eq!(field, "at", "{db}"),
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
