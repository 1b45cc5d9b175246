//! What the effect primitives cost on MongoDB, from the driver's command monitoring: the round
//! trips of a derived set, a unique push and a retried event. What they do, alone and racing, is
//! the same on every backend and tested on each in the contract suite (`contract/`).

use idem_core::mongo::Store;
use idem_core::{Idempotent, Outcome, Pushed};
use idem_tests::fixtures::Payment;
use idem_tests::{fresh_database, stored_documents};
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

/// One write command for the whole set (an `update` of `$setOnInsert` statements keyed by id and
/// natural key), and no read for the members stored already: each is matched and left alone.
#[tokio::test]
async fn insert_new_sends_one_write_and_no_read_for_members_stored_already() {
    let (database, log) = fresh_database("insert_new").await;
    let store = Store::new(database);
    store.ensure_indexes::<Award>().await.unwrap();
    let _ = log.take();
    assert_eq!(
        store
            .insert_new(&awards("ada", 0..3))
            .await
            .unwrap()
            .inserted(),
        awards("ada", 0..3)
    );
    assert_eq!(log.take().names, ["update"], "one round trip");
    // The rule runs again with one more award earned: only that one is new.
    assert_eq!(
        store
            .insert_new(&awards("ada", 0..4))
            .await
            .unwrap()
            .inserted(),
        awards("ada", 3..4)
    );
    // Members stored already are matched by their id and natural key: no duplicate, no read.
    assert_eq!(log.take().names, ["update"]);
    assert!(store
        .insert_new(&awards("ada", 0..4))
        .await
        .unwrap()
        .inserted()
        .is_empty());
    assert_eq!(stored_documents(store.database(), "awards").await.len(), 4);
    // A set larger than the store's chunk (the size of a batch's read) is still one command:
    // no read precedes an insert, and the command is split only by the server's limits.
    let _ = log.take();
    let set = awards("ada", 0..1_000);
    assert_eq!(store.insert_new(&set).await.unwrap().inserted(), &set[4..]);
    assert_eq!(
        log.take().names,
        ["update"],
        "one round trip for 1,000 members"
    );
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

/// A push through the derive's generated method that appends is one round trip (one telling
/// `AlreadyPresent` from `NotFound` reads as well).
#[tokio::test]
async fn a_unique_push_that_appends_is_one_round_trip() {
    let (database, log) = fresh_database("push").await;
    let store = Store::new(database);
    store.upsert(&thread()).await.unwrap();
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
}

/// A retried event is answered in one round trip: the write that finds its key stored returns
/// the stored event.
#[tokio::test]
async fn a_retried_record_is_one_round_trip() {
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
}
