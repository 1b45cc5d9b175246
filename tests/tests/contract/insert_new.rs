//! `insert_new`: a derived set inserted once, each member returned to exactly one of racing
//! callers, and a member whose id-feeding timestamp moved refused as `upsert` refuses it.

use std::collections::HashMap;

use idem_core::{Error, ErrorKind, Idempotent};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

use crate::support::line_up;

/// A user's award: derived from a rule, inserted once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
#[serde(rename_all = "camelCase")]
struct Award {
    #[idem(key)]
    user_id: String,
    #[idem(key)]
    badge: String,
    points: i64,
}

fn award(badge: &str) -> Award {
    Award {
        user_id: "u1".into(),
        badge: badge.into(),
        points: 10,
    }
}

/// The awards `badges` of user u1.
fn awards(badges: std::ops::Range<usize>) -> Vec<Award> {
    badges.map(|n| award(&format!("b{n}"))).collect()
}

/// Racing callers with overlapping sets each get a disjoint share; together, every member once.
/// Called again with one more member, only that one is new.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_new_returns_each_member_to_exactly_one_of_racing_callers() {
    for db in fresh_backends("insert_new").await {
        db.ensure::<Award>().await;
        let line = line_up(8);
        let mut racers = Vec::new();
        for caller in 0..8 {
            let racer = db.another().await;
            let line = line.clone();
            // Caller k derives badges k..k+12: every badge but the first and last few is
            // derived by several callers, some by all.
            racers.push(tokio::spawn(async move {
                line.wait().await;
                racer.insert_new(&awards(caller..caller + 12)).await
            }));
        }
        let mut returned: HashMap<String, usize> = HashMap::new();
        for racer in racers {
            let report = racer
                .await
                .unwrap()
                .unwrap_or_else(|error| panic!("{db}: a racing insert_new: {error:?}"));
            assert_eq!(report.refused(), 0, "{db}: {report}");
            for award in report.into_inserted() {
                *returned.entry(award.badge).or_default() += 1;
            }
        }
        assert_eq!(returned.len(), 19, "{db}: badges 0..19 all inserted");
        assert!(
            returned.values().all(|count| *count == 1),
            "{db}: each member returned to exactly one caller: {returned:?}"
        );
        assert!(
            db.insert_new(&awards(0..19))
                .await
                .unwrap()
                .inserted()
                .is_empty(),
            "{db}"
        );
        assert_eq!(
            db.insert_new(&awards(0..20)).await.unwrap().inserted(),
            awards(19..20),
            "{db}: only the new member"
        );
        assert_eq!(db.stored::<Award>().await.len(), 20, "{db}");
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Idempotent)]
#[idem(collection = "badges")]
struct Badge {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
    #[idem(timestamp)]
    earned_at: i64,
}

fn badge(earned_at: i64) -> Badge {
    Badge {
        user: "ada".into(),
        badge: "first-post".into(),
        earned_at,
    }
}

/// Asserts `result` refuses the moved `earned_at` of the badge stored under `stored_as`.
fn assert_moved_timestamp_refused<T: std::fmt::Debug>(
    db: &Db,
    result: Result<T, Error>,
    stored_as: &Badge,
) {
    match result.map_err(Error::into_kind) {
        Err(ErrorKind::FrozenFieldChanged {
            field, stored_id, ..
        }) => {
            assert_eq!(field, "earned_at", "{db}");
            assert_eq!(
                stored_id.to_string(),
                stored_as.id().unwrap().to_string(),
                "{db}"
            );
        }
        other => panic!("{db}: expected FrozenFieldChanged for `earned_at`, got {other:?}"),
    }
}

/// Promise catalogue case 12: `insert_new` refuses a member whose id-feeding timestamp moved, as
/// `upsert` does.
#[tokio::test]
async fn insert_new_refuses_a_member_whose_timestamp_moved_as_upsert_does() {
    for db in fresh_backends("p12_insert_new_moved").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Badge>().await;
        let earned = badge(1_700_000_000_000);
        let earned_now = std::slice::from_ref(&earned);
        assert_eq!(
            db.insert_new(earned_now).await.unwrap().inserted(),
            earned_now,
            "{db}"
        );
        let before = db.raw::<Badge>().await;

        // Same key, another time: another id, so inserting it would leave two documents for one
        // key.
        let moved = badge(1_700_000_555_000);
        assert_ne!(moved.id().unwrap(), earned.id().unwrap());
        assert_moved_timestamp_refused(&db, db.upsert(&moved).await, &earned);
        let report = db.insert_new(&[moved]).await.unwrap();
        assert_moved_timestamp_refused(&db, report.results()[0].clone(), &earned);
        assert_eq!(db.raw::<Badge>().await, before, "{db}: nothing written");
    }
}

/// A document another tool stored under a member's derived id, with another natural key, is not
/// that member: the member is refused naming the key field that differs, on every backend, the
/// other members are inserted, and the foreign document is left as it was.
#[tokio::test]
async fn a_member_whose_id_holds_another_natural_key_is_refused_not_taken_as_stored() {
    for db in fresh_backends("insert_new_foreign_id").await {
        db.ensure::<Award>().await;
        let member = award("b1");
        let mut foreign = serde_json::Map::new();
        foreign.insert("userId".into(), "someone-else".into());
        foreign.insert("badge".into(), "b1".into());
        foreign.insert("points".into(), 99.into());
        db.write_json_as_another_tool::<Award>(&member.id().unwrap().to_string(), foreign)
            .await;
        let before = db.raw::<Award>().await;
        let report = db.insert_new(&[member, award("b2")]).await.unwrap();
        match report.results()[0].as_ref().map_err(Error::kind) {
            Err(ErrorKind::FrozenFieldChanged { field, .. }) => {
                assert_eq!(*field, "user_id", "{db}")
            }
            other => panic!("{db}: the member is refused, not taken as stored: {other:?}"),
        }
        assert_eq!(report.inserted(), [award("b2")], "{db}");
        let after = db.raw::<Award>().await;
        assert_eq!(after.len(), 2, "{db}");
        assert!(
            after.contains(&before[0]),
            "{db}: the foreign document is intact"
        );
    }
}
