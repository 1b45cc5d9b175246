//! The effect primitives against a real server: derived sets, unique pushes, operations applied
//! once, and events keyed by an idempotency key, alone and with eight racing tasks.

use std::collections::HashMap;
use std::sync::Arc;

use idem_core::mongo::{Store, APPLIED_OPS_FIELD};
use idem_core::{Applied, Error, Idempotent, OpId, Outcome, Pushed};
use idem_tests::fixtures::{account, Account, Payment};
use idem_tests::{fresh_database, stored_documents};
use mongodb::bson::doc;
use serde::{Deserialize, Serialize};

/// An award a rule derives from a user's history: the same inputs derive the same awards.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
struct Award {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
}

fn awards(user: &str, badges: impl IntoIterator<Item = u32>) -> Vec<Award> {
    badges
        .into_iter()
        .map(|n| Award {
            user: user.into(),
            badge: format!("badge-{n}"),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Comment {
    comment_id: String,
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

#[tokio::test]
async fn insert_new_returns_exactly_the_members_it_inserted() {
    let (database, log) = fresh_database("insert_new").await;
    let store = Store::new(database);
    store.ensure_indexes::<Award>().await.unwrap();
    let _ = log.take();
    assert_eq!(
        store.insert_new(&awards("ada", 0..3)).await.unwrap(),
        awards("ada", 0..3)
    );
    assert_eq!(log.take().names, ["insert"], "one round trip");
    // The rule runs again with one more award earned: only that one is new.
    assert_eq!(
        store.insert_new(&awards("ada", 0..4)).await.unwrap(),
        awards("ada", 3..4)
    );
    // Members stored already cost at most one read of their ids: none where the server reports
    // their duplicate on `_id`, one where it reports the natural-key index first (as the test
    // server does).
    let names = log.take().names;
    assert!(
        names == ["insert"] || names == ["insert", "find"],
        "{names:?}"
    );
    assert!(store
        .insert_new(&awards("ada", 0..4))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(stored_documents(store.database(), "awards").await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_callers_with_overlapping_sets_each_get_a_disjoint_share() {
    let (database, _log) = fresh_database("insert_new_race").await;
    let store = Arc::new(Store::new(database));
    store.ensure_indexes::<Award>().await.unwrap();
    let tasks: Vec<_> = (0..8u32)
        .map(|caller| {
            let store = Arc::clone(&store);
            // Caller k derives badges k..k+20: every badge is earned by several callers.
            tokio::spawn(async move { store.insert_new(&awards("ada", caller..caller + 20)).await })
        })
        .collect();
    let mut returned: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        for award in task.await.unwrap().unwrap() {
            *returned.entry(award.badge).or_default() += 1;
        }
    }
    assert_eq!(returned.len(), 27, "badges 0..27 all inserted");
    assert!(
        returned.values().all(|count| *count == 1),
        "each member returned by exactly one caller: {returned:?}"
    );
    assert_eq!(stored_documents(store.database(), "awards").await.len(), 27);
}

fn thread() -> Thread {
    Thread {
        slug: "launch".into(),
        title: "Launch day".into(),
        comments: Vec::new(),
    }
}

fn comment(id: &str, text: &str) -> Comment {
    Comment {
        comment_id: id.into(),
        text: text.into(),
    }
}

#[tokio::test]
async fn a_unique_push_appends_once_in_one_round_trip() {
    let (database, log) = fresh_database("push").await;
    let store = Store::new(database);
    store.upsert(&thread()).await.unwrap();
    let stored = stored_documents(store.database(), "threads").await;
    assert_eq!(
        stored[0].get_array("comments").unwrap().len(),
        0,
        "initialised empty on insert"
    );
    let _ = log.take();

    assert_eq!(
        thread()
            .push_comments(&store, &comment("c1", "first!"))
            .await
            .unwrap(),
        Pushed::Appended
    );
    assert_eq!(log.take().round_trips(), 1);
    assert_eq!(
        thread()
            .push_comments(&store, &comment("c1", "first!"))
            .await
            .unwrap(),
        Pushed::AlreadyPresent
    );
    // Same key, other text: still the same comment.
    assert_eq!(
        thread()
            .push_comments(&store, &comment("c1", "edited"))
            .await
            .unwrap(),
        Pushed::AlreadyPresent
    );
    assert_eq!(
        thread()
            .push_comments(&store, &comment("c2", "second"))
            .await
            .unwrap(),
        Pushed::Appended
    );

    let stored = stored_documents(store.database(), "threads").await;
    let texts: Vec<&str> = stored[0]
        .get_array("comments")
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().get_str("text").unwrap())
        .collect();
    assert_eq!(texts, ["first!", "second"]);
}

#[tokio::test]
async fn upserts_neither_overwrite_nor_hash_the_pushed_list() {
    let (database, _log) = fresh_database("push_owned").await;
    let store = Store::new(database);
    store.upsert(&thread()).await.unwrap();
    thread()
        .push_comments(&store, &comment("c1", "hi"))
        .await
        .unwrap();
    // A replay carrying a stale (empty) list, or another list, is not a change…
    let with_other_list = Thread {
        comments: vec![comment("x", "y")],
        ..thread()
    };
    assert_eq!(
        thread().content_hash().unwrap(),
        with_other_list.content_hash().unwrap()
    );
    assert_eq!(
        store.upsert(&with_other_list).await.unwrap(),
        Outcome::Unchanged
    );
    // …and an edit keeps the pushed comments.
    let retitled = Thread {
        title: "Launch day!".into(),
        ..thread()
    };
    assert_eq!(store.upsert(&retitled).await.unwrap(), Outcome::Updated);
    let stored = stored_documents(store.database(), "threads").await;
    assert_eq!(stored[0].get_array("comments").unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_pushes_of_one_item_append_it_once() {
    let (database, _log) = fresh_database("push_race").await;
    let store = Arc::new(Store::new(database));
    store.upsert(&thread()).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { thread().push_comments(&*store, &comment("c1", "hi")).await })
        })
        .collect();
    let mut appended = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() == Pushed::Appended {
            appended += 1;
        }
    }
    assert_eq!(appended, 1);
    let stored = stored_documents(store.database(), "threads").await;
    assert_eq!(stored[0].get_array("comments").unwrap().len(), 1);
}

#[tokio::test]
async fn pushing_to_a_missing_document_is_an_error() {
    let (database, _log) = fresh_database("push_missing").await;
    let store = Store::new(database);
    assert!(matches!(
        thread().push_comments(&store, &comment("c1", "hi")).await,
        Err(Error::NotFound { .. })
    ));
}

async fn balance(store: &Store, owner: &str) -> i64 {
    let id = account(owner).id().unwrap().to_string();
    let account = store
        .database()
        .collection::<mongodb::bson::Document>("accounts")
        .find_one(doc! { "_id": id })
        .await;
    account.unwrap().unwrap().get_i64("balance").unwrap_or(0)
}

#[tokio::test]
async fn an_operation_applies_once_however_often_it_is_retried() {
    let (database, _log) = fresh_database("apply_once").await;
    let store = Store::new(database);
    let ada = account("ada");
    store.upsert(&ada).await.unwrap();
    let op = OpId::from("payment-1:credit");
    let credit = doc! { "$inc": { "balance": 500i64 } };
    let id = ada.id().unwrap();
    assert_eq!(
        store
            .apply_once::<Account>(id, &op, credit.clone())
            .await
            .unwrap(),
        Applied::Applied
    );
    for _ in 0..3 {
        assert_eq!(
            store
                .apply_once::<Account>(id, &op, credit.clone())
                .await
                .unwrap(),
            Applied::AlreadyApplied
        );
    }
    assert_eq!(balance(&store, "ada").await, 500);
    // Upserting the account again leaves the balance and the applied ops alone.
    assert_eq!(store.upsert(&ada).await.unwrap(), Outcome::Unchanged);
    assert_eq!(balance(&store, "ada").await, 500);
}

#[tokio::test]
async fn a_transfer_retried_after_a_failure_between_its_steps_moves_the_money_once() {
    let (database, _log) = fresh_database("transfer").await;
    let store = Store::new(database);
    let (ada, bob) = (account("ada"), account("bob"));
    store.upsert(&ada).await.unwrap();
    store.upsert(&bob).await.unwrap();
    let transfer = OpId::from("transfer-42");
    let debit = doc! { "$inc": { "balance": -250i64 } };
    let credit = doc! { "$inc": { "balance": 250i64 } };
    // The first attempt debits ada, then the process dies before crediting bob.
    store
        .apply_once::<Account>(ada.id().unwrap(), &transfer, debit.clone())
        .await
        .unwrap();
    // The retry runs the whole transfer again.
    assert_eq!(
        store
            .apply_once::<Account>(ada.id().unwrap(), &transfer, debit)
            .await
            .unwrap(),
        Applied::AlreadyApplied
    );
    assert_eq!(
        store
            .apply_once::<Account>(bob.id().unwrap(), &transfer, credit)
            .await
            .unwrap(),
        Applied::Applied
    );
    assert_eq!(balance(&store, "ada").await, -250);
    assert_eq!(balance(&store, "bob").await, 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_applications_of_one_operation_apply_it_once() {
    let (database, _log) = fresh_database("apply_once_race").await;
    let store = Arc::new(Store::new(database));
    let ada = account("ada");
    store.upsert(&ada).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            let id = ada.id().unwrap();
            tokio::spawn(async move {
                store
                    .apply_once::<Account>(
                        id,
                        &OpId::from("op-1"),
                        doc! { "$inc": { "balance": 1i64 } },
                    )
                    .await
            })
        })
        .collect();
    let mut applied = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() == Applied::Applied {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    assert_eq!(balance(&store, "ada").await, 1);
}

#[tokio::test]
async fn a_document_remembers_only_its_latest_op_window() {
    let (database, _log) = fresh_database("op_window").await;
    let store = Store::new(database).with_op_window(3);
    let ada = account("ada");
    store.upsert(&ada).await.unwrap();
    let id = ada.id().unwrap();
    for n in 0..5 {
        let op = OpId::new(format!("op-{n}"));
        store
            .apply_once::<Account>(id, &op, doc! { "$inc": { "balance": 1i64 } })
            .await
            .unwrap();
    }
    let stored = stored_documents(store.database(), "accounts").await;
    let ops: Vec<&str> = stored[0]
        .get_array(APPLIED_OPS_FIELD)
        .unwrap()
        .iter()
        .map(|op| op.as_str().unwrap())
        .collect();
    assert_eq!(ops, ["op-2", "op-3", "op-4"]);
    // Within the window a retry is recognised; past it, it is not (the documented limit).
    assert_eq!(
        store
            .apply_once::<Account>(id, &OpId::from("op-4"), doc! {})
            .await
            .unwrap(),
        Applied::AlreadyApplied
    );
}

#[tokio::test]
async fn op_ids_derive_from_the_triggering_document() {
    let ada = account("ada");
    assert_eq!(ada.op_id("points").unwrap(), ada.op_id("points").unwrap());
    assert_ne!(ada.op_id("points").unwrap(), ada.op_id("streak").unwrap());
    assert_ne!(
        ada.op_id("points").unwrap(),
        account("bob").op_id("points").unwrap()
    );
}

#[tokio::test]
async fn an_event_is_recorded_once_per_idempotency_key() {
    let (database, log) = fresh_database("events").await;
    let store = Store::new(database);
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 1_000,
    };
    let first = store.record(&payment).await.unwrap();
    assert_eq!(first.outcome, Outcome::Inserted);
    let _ = log.take();
    let retry = store.record(&payment).await.unwrap();
    assert_eq!(
        retry,
        idem_core::Recorded::new(first.id, Outcome::Unchanged)
    );
    assert_eq!(log.take().round_trips(), 1);
    assert_eq!(store.upsert(&payment).await.unwrap(), Outcome::Unchanged);

    let before = stored_documents(store.database(), "payments").await;
    let reused = Payment {
        amount_cents: 9_999,
        ..payment.clone()
    };
    match store.record(&reused).await.unwrap_err() {
        Error::IdempotencyKeyReused {
            field, stored_id, ..
        } => {
            assert_eq!(field, "request_key");
            assert_eq!(stored_id, first.id);
        }
        other => panic!("expected IdempotencyKeyReused, got {other:?}"),
    }
    assert_eq!(stored_documents(store.database(), "payments").await, before);
    assert_eq!(before[0].get_str("_id").unwrap(), first.id.to_string());

    let other = store
        .record(&Payment {
            request_key: "req-2".into(),
            amount_cents: 1_000,
        })
        .await
        .unwrap();
    assert_eq!(other.outcome, Outcome::Inserted);
    assert_ne!(other.id, first.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_racing_retries_of_one_request_record_one_event() {
    let (database, _log) = fresh_database("events_race").await;
    let store = Arc::new(Store::new(database));
    store.ensure_indexes::<Payment>().await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .record(&Payment {
                        request_key: "req-1".into(),
                        amount_cents: 5,
                    })
                    .await
            })
        })
        .collect();
    let mut recorded = Vec::new();
    for task in tasks {
        recorded.push(task.await.unwrap().unwrap());
    }
    assert_eq!(
        recorded
            .iter()
            .filter(|r| r.outcome == Outcome::Inserted)
            .count(),
        1
    );
    assert!(recorded.iter().all(|r| r.id == recorded[0].id));
    assert_eq!(
        stored_documents(store.database(), "payments").await.len(),
        1
    );
}

#[test]
fn an_event_has_no_derived_id() {
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 1,
    };
    assert!(matches!(payment.id(), Err(Error::NoDerivedId { .. })));
}
