//! The behaviour every backend shares, written once and run against each server under test
//! (MongoDB, PostgreSQL 15, PostgreSQL 18): outcomes, refusals that write nothing, versions,
//! tombstones, batches that agree with single upserts, derived sets, pushes and racing writers.

use idem_core::{Applied, Error, Idempotent, OpId, Outcome, Pushed};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{entry, post, Entry, Post};
use serde::{Deserialize, Serialize};

/// Each outcome of a single upsert, and what it leaves stored.
#[tokio::test]
async fn a_single_upsert_inserts_then_settles_unchanged_updates_and_ignores_volatile_fields() {
    for db in fresh_backends("single").await {
        db.ensure::<Post>().await;
        let first = post();
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Post>().await;
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Unchanged, "{db}");
        let refetched = Post {
            fetched_at: first.fetched_at + 1,
            ..first.clone()
        };
        assert_eq!(
            db.upsert(&refetched).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        let edited = Post {
            title: "Hello again".into(),
            ..first.clone()
        };
        assert_eq!(db.upsert(&edited).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Post>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["title"], "Hello again", "{db}");
        assert_eq!(stored[0]["_id"], first.id().unwrap().to_string(), "{db}");
    }
}

/// A changed frozen field and a moved timestamp are refused, naming the field, with nothing
/// written.
#[tokio::test]
async fn a_changed_frozen_field_or_timestamp_is_refused_and_nothing_is_written() {
    for db in fresh_backends("frozen").await {
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let before = db.raw::<Post>().await;
        let other_author = Post {
            author_id: "grace".into(),
            ..post()
        };
        match db.upsert(&other_author).await {
            Err(Error::FrozenFieldChanged {
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
        match db.upsert(&moved).await {
            Err(Error::FrozenFieldChanged { field, .. }) => {
                assert_eq!(field, "published_at", "{db}")
            }
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        let report = db.upsert_many(&[other_author, moved]).await.unwrap();
        assert_eq!(report.refused(), 2, "{db}: {report}");
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
    }
}

/// Versions: only a strictly newer one replaces; a deleted entry stays deleted.
#[tokio::test]
async fn versions_order_replays_and_tombstones_never_come_back() {
    for db in fresh_backends("versions").await {
        db.ensure::<Entry>().await;
        assert_eq!(
            db.upsert(&entry("e1", 2, "two")).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_eq!(
            db.upsert(&entry("e1", 1, "one")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        assert_eq!(
            db.upsert(&entry("e1", 2, "two")).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(
            db.upsert(&entry("e1", 2, "other")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        assert_eq!(
            db.upsert(&entry("e1", 10, "ten")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let mut deleted = entry("e1", 10, "ten");
        deleted.deleted_at = Some(1_800_000_000_000);
        assert_eq!(db.delete(&deleted).await.unwrap(), Outcome::Deleted, "{db}");
        assert_eq!(
            db.delete(&deleted).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let before = db.raw::<Entry>().await;
        assert_eq!(
            db.upsert(&entry("e1", 11, "eleven")).await.unwrap(),
            Outcome::Deleted,
            "{db}"
        );
        assert_eq!(
            db.raw::<Entry>().await,
            before,
            "{db}: a tombstone is never written over"
        );
        // Deleted before it was ever stored: a replay of its creation does not bring it back.
        let mut early = entry("e2", 1, "x");
        early.deleted_at = Some(1);
        assert_eq!(db.delete(&early).await.unwrap(), Outcome::Deleted, "{db}");
        assert_eq!(
            db.upsert(&entry("e2", 1, "x")).await.unwrap(),
            Outcome::Deleted,
            "{db}"
        );
        let id = entry("e3", 1, "x").id().unwrap();
        assert!(
            matches!(
                db.delete_by_id::<Entry, _>(id, &5_i64).await,
                Err(Error::NotFound { .. })
            ),
            "{db}"
        );
        db.upsert(&entry("e3", 1, "x")).await.unwrap();
        assert_eq!(
            db.delete_by_id::<Entry, _>(id, &5_i64).await.unwrap(),
            Outcome::Deleted,
            "{db}"
        );
        assert_eq!(
            db.delete_by_id::<Entry, _>(id, &6_i64).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let stored = db.stored::<Entry>().await;
        let e3 = stored.iter().find(|doc| doc["entryId"] == "e3").unwrap();
        assert_eq!(e3["deletedAt"], 5, "{db}: the first marker stays");
    }
}

/// A batch answers each document as upserting them one by one, in order, would.
#[tokio::test]
async fn a_batch_agrees_with_single_upserts_in_input_order() {
    for db in fresh_backends("batch").await {
        db.ensure::<Entry>().await;
        db.upsert(&entry("a", 5, "five")).await.unwrap();
        let batch = [
            entry("a", 4, "old"),
            entry("b", 1, "new"),
            entry("a", 6, "six"),
            entry("b", 1, "new"),
            entry("a", 6, "six, again"),
            entry("c", 1, "c"),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<Outcome> = report
            .outcomes()
            .iter()
            .map(|outcome| *outcome.as_ref().unwrap())
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Stale,
                Outcome::Inserted,
                Outcome::Updated,
                Outcome::Unchanged,
                Outcome::Stale,
                Outcome::Inserted
            ],
            "{db}"
        );
        let before = db.raw::<Entry>().await;
        let again = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            again.count(Outcome::Inserted) + again.count(Outcome::Updated),
            0,
            "{db}"
        );
        assert_eq!(
            db.raw::<Entry>().await,
            before,
            "{db}: a replayed batch writes nothing"
        );
        let texts: Vec<_> = db
            .stored::<Entry>()
            .await
            .iter()
            .map(|doc| doc["text"].clone())
            .collect();
        assert_eq!(texts.len(), 3, "{db}");
        assert!(texts.contains(&"six".into()), "{db}: {texts:?}");
    }
}

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

/// Racing callers with overlapping sets each get a disjoint share; together, every member once.
#[tokio::test]
async fn insert_new_returns_each_member_to_exactly_one_of_racing_callers() {
    for db in fresh_backends("insert_new").await {
        db.ensure::<Award>().await;
        let set: Vec<Award> = (0..12).map(|n| award(&format!("b{n}"))).collect();
        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            let set = set.clone();
            racers.push(tokio::spawn(async move {
                racer.insert_new(&set).await.unwrap()
            }));
        }
        let mut returned = Vec::new();
        for racer in racers {
            returned.extend(racer.await.unwrap());
        }
        returned.sort_by(|a, b| a.badge.cmp(&b.badge));
        let mut expected = set.clone();
        expected.sort_by(|a, b| a.badge.cmp(&b.badge));
        assert_eq!(returned, expected, "{db}: every member exactly once");
        assert!(db.insert_new(&set).await.unwrap().is_empty(), "{db}");
        assert_eq!(db.stored::<Award>().await.len(), 12, "{db}");
    }
}

/// Racing first writes of the same documents: exactly one `Inserted` each, and one document.
#[tokio::test]
async fn racing_first_writes_insert_each_document_once() {
    for db in fresh_backends("race").await {
        db.ensure::<Post>().await;
        let mut racers = Vec::new();
        for racer_index in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in 0..6 {
                    let doc = Post {
                        slug: format!("post-{n}"),
                        // Half the racers write other content: Updated, not Inserted.
                        title: format!("title {}", racer_index % 2),
                        ..post()
                    };
                    outcomes.push(racer.upsert(&doc).await.unwrap());
                }
                outcomes
            }));
        }
        let mut inserted = [0; 6];
        for racer in racers {
            for (n, outcome) in racer.await.unwrap().into_iter().enumerate() {
                if outcome == Outcome::Inserted {
                    inserted[n] += 1;
                }
            }
        }
        assert_eq!(inserted, [1; 6], "{db}");
        assert_eq!(db.stored::<Post>().await.len(), 6, "{db}");
    }
}

/// A thread of comments, pushed once each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    topic: String,
    #[idem(push_by = "commentId")]
    comments: Vec<Comment>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    comment_id: String,
    text: String,
}

/// A retried push never appends twice, racing pushes of one item append it once, and an
/// upsert never touches the pushed list.
#[tokio::test]
async fn a_push_appends_once_however_often_and_however_concurrently_it_is_sent() {
    for db in fresh_backends("push").await {
        db.ensure::<Thread>().await;
        let thread = Thread {
            topic: "rust".into(),
            comments: Vec::new(),
        };
        let id = thread.id().unwrap();
        let comment = |n: usize| Comment {
            comment_id: format!("c{n}"),
            text: format!("comment {n}"),
        };
        assert!(
            matches!(
                db.push::<Thread, _>(id, "comments", &comment(0)).await,
                Err(Error::NotFound { .. })
            ),
            "{db}"
        );
        assert_eq!(db.upsert(&thread).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &comment(0))
                .await
                .unwrap(),
            Pushed::Appended,
            "{db}"
        );
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &comment(0))
                .await
                .unwrap(),
            Pushed::AlreadyPresent,
            "{db}"
        );
        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                let mut appended = 0;
                for n in 1..5 {
                    if racer
                        .push::<Thread, _>(id, "comments", &comment(n))
                        .await
                        .unwrap()
                        == Pushed::Appended
                    {
                        appended += 1;
                    }
                }
                appended
            }));
        }
        let mut appended = 0;
        for racer in racers {
            appended += racer.await.unwrap();
        }
        assert_eq!(appended, 4, "{db}");
        // An upsert of the thread leaves the list alone.
        assert_eq!(
            db.upsert(&thread).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let stored = db.stored::<Thread>().await;
        assert_eq!(stored[0]["comments"].as_array().unwrap().len(), 5, "{db}");
        assert!(
            matches!(
                db.push::<Thread, _>(id, "topic", &comment(9)).await,
                Err(Error::NotAPushedField { .. })
            ),
            "{db}"
        );
    }
}

/// An account whose balance only operations move; the holder's name is the upsert's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "wallets")]
#[serde(rename_all = "camelCase")]
struct Wallet {
    #[idem(key)]
    owner: String,
    holder_name: String,
    #[idem(effect)]
    balance: i64,
}

fn wallet(owner: &str, holder_name: &str) -> Wallet {
    Wallet {
        owner: owner.into(),
        holder_name: holder_name.into(),
        balance: 0,
    }
}

async fn balance(db: &Db, owner: &str) -> i64 {
    let stored = db.stored::<Wallet>().await;
    let wallet = stored
        .iter()
        .find(|doc| doc["owner"] == owner)
        .unwrap_or_else(|| panic!("{db}: no wallet of {owner}"));
    wallet["balance"]
        .as_i64()
        .unwrap_or_else(|| panic!("{db}: {wallet:?}"))
}

/// An operation applies once however often it is retried or raced, an upsert never undoes it,
/// and an update of another field is refused with nothing written.
#[tokio::test]
async fn an_operation_applies_once_and_no_upsert_undoes_it() {
    for db in fresh_backends("apply_once").await {
        db.ensure::<Wallet>().await;
        let ada = wallet("ada", "Ada");
        let id = ada.id().unwrap();
        let credit = OpId::new("webhook-1");
        assert!(
            matches!(
                db.credit_once::<Wallet>(id, &credit, "balance", 100).await,
                Err(Error::NotFound { .. })
            ),
            "{db}"
        );
        assert_eq!(db.upsert(&ada).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(
            db.credit_once::<Wallet>(id, &credit, "balance", 100)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(
            db.credit_once::<Wallet>(id, &credit, "balance", 100)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        // The owner's name changes: the upsert writes it and leaves the balance alone.
        assert_eq!(
            db.upsert(&wallet("ada", "Ada L.")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(db.upsert(&ada).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(balance(&db, "ada").await, 100, "{db}");
        let before = db.raw::<Wallet>().await;
        match db
            .credit_once::<Wallet>(id, &OpId::new("typo"), "balanse", 1)
            .await
        {
            Err(Error::NotAnEffectField { path, .. }) => assert_eq!(path, "balanse", "{db}"),
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        assert!(
            matches!(
                db.credit_once::<Wallet>(id, &OpId::new("x"), "holderName", 1)
                    .await,
                Err(Error::NotAnEffectField { .. })
            ),
            "{db}"
        );
        assert_eq!(db.raw::<Wallet>().await, before, "{db}: nothing written");

        // 8 racers retry the same 10 operations: each applies once.
        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                let mut applied = 0;
                for n in 0..10 {
                    let op = OpId::new(format!("op-{n}"));
                    if racer
                        .credit_once::<Wallet>(id, &op, "balance", 10)
                        .await
                        .unwrap()
                        == Applied::Applied
                    {
                        applied += 1;
                    }
                }
                applied
            }));
        }
        let mut applied = 0;
        for racer in racers {
            applied += racer.await.unwrap();
        }
        assert_eq!(applied, 10, "{db}");
        assert_eq!(balance(&db, "ada").await, 200, "{db}");
    }
}

/// A transfer: the same op id debits one wallet and credits another; retried after a failure
/// between the steps, each step applies exactly once.
#[tokio::test]
async fn a_transfer_retried_whole_moves_the_money_exactly_once() {
    for db in fresh_backends("transfer").await {
        db.ensure::<Wallet>().await;
        let (from, to) = (wallet("ada", "Ada"), wallet("bob", "Bob"));
        db.upsert_many(&[from.clone(), to.clone()]).await.unwrap();
        let transfer = OpId::new("transfer-1");
        // The first attempt stops after the debit.
        db.credit_once::<Wallet>(from.id().unwrap(), &transfer, "balance", -30)
            .await
            .unwrap();
        for _ in 0..2 {
            db.credit_once::<Wallet>(from.id().unwrap(), &transfer, "balance", -30)
                .await
                .unwrap();
            db.credit_once::<Wallet>(to.id().unwrap(), &transfer, "balance", 30)
                .await
                .unwrap();
        }
        assert_eq!(balance(&db, "ada").await, -30, "{db}");
        assert_eq!(balance(&db, "bob").await, 30, "{db}");
    }
}

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
        match db.record(&charge("req-1", 900)).await {
            Err(Error::IdempotencyKeyReused { stored_id, .. }) => {
                assert_eq!(stored_id, first.id, "{db}")
            }
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        assert!(
            matches!(db.record(&charge("", 1)).await, Err(Error::EmptyKey { .. })),
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
        assert_eq!(db.stored::<Charge>().await.len(), 2, "{db}");
    }
}
