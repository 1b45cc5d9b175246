//! The behaviour every backend shares, written once and run against each server under test
//! (MongoDB, PostgreSQL 15, PostgreSQL 18): outcomes, refusals that write nothing, versions,
//! tombstones, batches that agree with single upserts, derived sets, pushes, operations, events
//! and racing writers. What only one backend has (MongoDB's commands and round trips, fail
//! points; PostgreSQL's table and transactions) is in `mongo_*.rs` and `postgres.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use idem_core::{Applied, Error, Idempotent, OpId, Outcome, Pushed};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{account, entry, post, Entry, Payment, Post};
use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;

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

/// A line for `racers` racers to wait in together before they race: they connect one after
/// another, and would otherwise start one after another.
fn line_up(racers: usize) -> Arc<Barrier> {
    Arc::new(Barrier::new(racers))
}

/// The stored document of entry `entry_id`.
async fn stored_entry(db: &Db, entry_id: &str) -> serde_json::Map<String, serde_json::Value> {
    db.stored::<Entry>()
        .await
        .into_iter()
        .find(|doc| doc["entryId"] == entry_id)
        .unwrap_or_else(|| panic!("{db}: no entry {entry_id}"))
}

/// Versions: only a strictly newer one replaces; a deleted entry stays deleted, with its first
/// marker.
#[tokio::test]
async fn versions_order_replays_and_tombstones_never_come_back() {
    for db in fresh_backends("versions").await {
        db.ensure::<Entry>().await;
        assert_eq!(
            db.upsert(&entry("e1", 2, "two")).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Entry>().await;
        // An offline client pushes its older copy: stale.
        assert_eq!(
            db.upsert(&entry("e1", 1, "one")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        // The same version with the same content is a plain retry.
        assert_eq!(
            db.upsert(&entry("e1", 2, "two")).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        // The same version with other content: two devices edited the same revision; the
        // stored one stands, and the client must rebase onto it.
        assert_eq!(
            db.upsert(&entry("e1", 2, "other")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        assert_eq!(
            db.raw::<Entry>().await,
            before,
            "{db}: a replay that is not newer writes nothing"
        );
        assert_eq!(
            db.upsert(&entry("e1", 10, "ten")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let e1 = stored_entry(&db, "e1").await;
        assert_eq!(
            (&e1["revision"], &e1["text"]),
            (&10.into(), &"ten".into()),
            "{db}"
        );
        let mut deleted = entry("e1", 10, "ten");
        deleted.deleted_at = Some(1_800_000_000_000);
        assert_eq!(db.delete(&deleted).await.unwrap(), Outcome::Deleted, "{db}");
        let again = Entry {
            deleted_at: Some(1_900_000_000_000),
            ..deleted.clone()
        };
        assert_eq!(db.delete(&again).await.unwrap(), Outcome::Unchanged, "{db}");
        assert_eq!(
            stored_entry(&db, "e1").await["deletedAt"],
            1_800_000_000_000_i64,
            "{db}: the first marker stays"
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
        assert_eq!(
            stored_entry(&db, "e2").await["deletedAt"],
            1,
            "{db}: stored deleted"
        );
        let id = entry("e3", 1, "x").id().unwrap();
        assert!(
            matches!(
                db.delete_by_id::<Entry, _>(id, &5_i64).await,
                Err(Error::NotFound { document }) if document.id == Some(id)
            ),
            "{db}: the missing document is named"
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
        let e3 = stored_entry(&db, "e3").await;
        assert_eq!(e3["deletedAt"], 5, "{db}: the first marker stays");
        assert_eq!(db.stored::<Entry>().await.len(), 3, "{db}");
    }
}

/// Only the delete route writes the tombstone: an upsert of a marked document stores it
/// unmarked, and a delete without a marker is refused.
#[tokio::test]
async fn upserts_never_write_the_tombstone_and_deleting_needs_a_marker() {
    for db in fresh_backends("tombstone_route").await {
        db.ensure::<Entry>().await;
        let marked = Entry {
            deleted_at: Some(1),
            ..entry("e1", 1, "hello")
        };
        assert_eq!(db.upsert(&marked).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(
            stored_entry(&db, "e1").await.get("deletedAt"),
            None,
            "{db}: only the delete route writes the marker"
        );
        let before = db.raw::<Entry>().await;
        match db.delete(&entry("e1", 1, "hello")).await {
            Err(Error::TombstoneNotSet { field, .. }) => assert_eq!(field, "deleted_at", "{db}"),
            other => panic!("{db}: expected TombstoneNotSet, got {other:?}"),
        }
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");
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
        // The second b is identical to the first: not sent, it shares its fate.
        assert_eq!(report.collapsed(), 1, "{db}");
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

        // The same documents upserted one by one, in order, in an empty store, give the same
        // outcomes and leave the same documents.
        let batched = db.stored::<Entry>().await;
        let alone = db.reset::<Entry>().await;
        alone.upsert(&entry("a", 5, "five")).await.unwrap();
        let mut one_by_one = Vec::new();
        for doc in &batch {
            one_by_one.push(alone.upsert(doc).await.unwrap());
        }
        assert_eq!(outcomes, one_by_one, "{db}");
        assert_eq!(alone.stored::<Entry>().await, batched, "{db}");
    }
}

/// A refused document (a moved timestamp, an empty key) is refused alone: the rest of its batch
/// is written.
#[tokio::test]
async fn a_refused_document_does_not_stop_the_rest_of_its_batch() {
    for db in fresh_backends("batch_refusal").await {
        db.ensure::<Entry>().await;
        db.upsert(&entry("moved", 1, "x")).await.unwrap();
        let moved = Entry {
            created_at: 1_600_000_000_000,
            ..entry("moved", 2, "x")
        };
        let batch = [
            entry("a", 1, "a"),
            moved,
            entry("b", 1, "b"),
            entry("", 1, ""),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                &outcomes[1],
                Err(Error::FrozenFieldChanged {
                    field: "created_at",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[1]
        );
        assert!(
            matches!(outcomes[2], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert!(
            matches!(
                &outcomes[3],
                Err(Error::EmptyKey {
                    field: "entry_id",
                    ..
                })
            ),
            "{db}: {:?}",
            outcomes[3]
        );
        assert_eq!(report.refused(), 2, "{db}");
        assert_eq!(db.stored::<Entry>().await.len(), 3, "{db}");
    }
}

/// Copies left out of a batch (identical to one sent) get the outcome of the copy that was
/// sent, a refusal included.
#[tokio::test]
async fn collapsed_copies_share_the_fate_of_the_copy_that_was_sent() {
    for db in fresh_backends("batch_collapse_fate").await {
        db.ensure::<Entry>().await;
        db.upsert(&entry("gone", 1, "x")).await.unwrap();
        let gone = Entry {
            deleted_at: Some(1),
            ..entry("gone", 1, "x")
        };
        db.delete(&gone).await.unwrap();
        db.upsert(&entry("moved", 1, "x")).await.unwrap();
        let moved = Entry {
            created_at: 1,
            ..entry("moved", 2, "y")
        };
        let batch = [
            entry("gone", 1, "x"),
            entry("gone", 1, "x"),
            moved.clone(),
            moved,
        ];
        let before = db.raw::<Entry>().await;
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        for (index, outcome) in outcomes.iter().enumerate().take(2) {
            assert!(
                matches!(outcome, Ok(Outcome::Deleted)),
                "{db}: {index}: {outcome:?}"
            );
        }
        for (index, outcome) in outcomes.iter().enumerate().skip(2) {
            assert!(
                matches!(
                    outcome,
                    Err(Error::FrozenFieldChanged {
                        field: "created_at",
                        ..
                    })
                ),
                "{db}: {index}: {outcome:?}"
            );
        }
        assert_eq!(report.collapsed(), 2, "{db}");
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");
    }
}

/// Eight clients replay the same 50 entries at their own revision, in batches, at once: the
/// newest revision wins everywhere, whatever the interleaving, and nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_replaying_overlapping_batches_converge_on_the_newest_versions() {
    for db in fresh_backends("batch_race").await {
        db.ensure::<Entry>().await;
        let line = line_up(8);
        let mut clients = Vec::new();
        for client in 0..8 {
            let racer = db.another().await;
            let line = line.clone();
            clients.push(tokio::spawn(async move {
                let batch: Vec<Entry> = (0..50)
                    .map(|i| entry(&format!("e{i}"), client, &format!("rev {client}")))
                    .collect();
                line.wait().await;
                racer.upsert_many(&batch).await
            }));
        }
        for client in clients {
            let report = client
                .await
                .unwrap()
                .unwrap_or_else(|error| panic!("{db}: a batch call failed: {error}"));
            assert_eq!(report.refused(), 0, "{db}: {report}");
        }
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 50, "{db}");
        for doc in stored {
            assert_eq!(
                (&doc["revision"], &doc["text"]),
                (&7.into(), &"rev 7".into()),
                "{db}"
            );
        }
    }
}

/// Sixteen upserts of one entry, each at its own revision, at once: each is inserted, updated
/// or stale, and the newest revision is what stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_stale_and_fresh_single_upserts_never_lose_the_newest() {
    for db in fresh_backends("version_race").await {
        db.ensure::<Entry>().await;
        let line = line_up(16);
        let mut racers = Vec::new();
        for revision in 0..16 {
            let racer = db.another().await;
            let line = line.clone();
            racers.push(tokio::spawn(async move {
                line.wait().await;
                racer
                    .upsert(&entry("e1", revision, &format!("r{revision}")))
                    .await
            }));
        }
        for racer in racers {
            let outcome = racer
                .await
                .unwrap()
                .unwrap_or_else(|error| panic!("{db}: an upsert failed: {error}"));
            assert!(
                matches!(
                    outcome,
                    Outcome::Inserted | Outcome::Updated | Outcome::Stale
                ),
                "{db}: {outcome:?}"
            );
        }
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["revision"], 15, "{db}");
    }
}

/// Eight racing deletes of one stored entry, beside eight racing newer upserts of it: exactly one
/// delete marks it and its marker stays; each upsert lands before it or finds it deleted. Eight
/// racing deletes of an entry never stored store it deleted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_deletes_mark_a_document_once_and_keep_the_winners_marker() {
    for db in fresh_backends("delete_race").await {
        db.ensure::<Entry>().await;
        db.upsert(&entry("stored", 1, "x")).await.unwrap();
        for entry_id in ["stored", "never-stored"] {
            let with_upserts = entry_id == "stored";
            let line = line_up(if with_upserts { 16 } else { 8 });
            let mut deletes = Vec::new();
            let mut upserts = Vec::new();
            for n in 0..8_i64 {
                let racer = db.another().await;
                let waiting = line.clone();
                deletes.push(tokio::spawn(async move {
                    let marked = Entry {
                        deleted_at: Some(100 + n),
                        ..entry(entry_id, 1, "x")
                    };
                    waiting.wait().await;
                    (100 + n, racer.delete(&marked).await)
                }));
                if with_upserts {
                    let racer = db.another().await;
                    let waiting = line.clone();
                    upserts.push(tokio::spawn(async move {
                        waiting.wait().await;
                        racer.upsert(&entry(entry_id, 2 + n, "newer")).await
                    }));
                }
            }
            let mut winners = Vec::new();
            for delete in deletes {
                let (marker, outcome) = delete.await.unwrap();
                match outcome {
                    Ok(Outcome::Deleted) => winners.push(marker),
                    Ok(Outcome::Unchanged) => {}
                    other => panic!("{db}: {entry_id}: a racing delete: {other:?}"),
                }
            }
            for upsert in upserts {
                let outcome = upsert.await.unwrap();
                assert!(
                    matches!(
                        outcome,
                        Ok(Outcome::Updated | Outcome::Stale | Outcome::Deleted)
                    ),
                    "{db}: {entry_id}: a racing upsert: {outcome:?}"
                );
            }
            assert_eq!(winners.len(), 1, "{db}: {entry_id}: {winners:?}");
            assert_eq!(
                stored_entry(&db, entry_id).await["deletedAt"],
                winners[0],
                "{db}: {entry_id}: the marker of the delete that marked it"
            );
            assert_eq!(
                db.upsert(&entry(entry_id, 99, "later")).await.unwrap(),
                Outcome::Deleted,
                "{db}: {entry_id}"
            );
        }
        assert_eq!(db.stored::<Entry>().await.len(), 2, "{db}");
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

/// Racing first writes of the same documents: exactly one `Inserted` each, and one document.
/// The racers line up before each document, so that every first write is raced.
///
/// On PostgreSQL, two first writes of one row can pass the server's natural-key conflict check at
/// once; the later then meets the primary key on `_id`, which is not the statement's conflict
/// target, and must go again rather than report the lost race as a refusal. Before that was so,
/// this test failed in nearly every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_first_writes_insert_each_document_once() {
    const DOCUMENTS: usize = 12;
    const RACERS: usize = 8;
    for db in fresh_backends("race").await {
        db.ensure::<Post>().await;
        let line = line_up(RACERS);
        let mut racers = Vec::new();
        for racer_index in 0..RACERS {
            let racer = db.another().await;
            let line = line.clone();
            racers.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in 0..DOCUMENTS {
                    let doc = Post {
                        slug: format!("post-{n}"),
                        // Half the racers write other content: Updated, not Inserted.
                        title: format!("title {}", racer_index % 2),
                        ..post()
                    };
                    line.wait().await;
                    outcomes.push(racer.upsert(&doc).await);
                }
                outcomes
            }));
        }
        let mut inserted = [0; DOCUMENTS];
        for racer in racers {
            for (n, outcome) in racer.await.unwrap().into_iter().enumerate() {
                match outcome {
                    Ok(Outcome::Inserted) => inserted[n] += 1,
                    Ok(_) => {}
                    Err(error) => panic!("{db}: a racing first write of post-{n}: {error:?}"),
                }
            }
        }
        assert_eq!(inserted, [1; DOCUMENTS], "{db}");
        assert_eq!(db.stored::<Post>().await.len(), DOCUMENTS, "{db}");
    }
}

/// A thread of comments, pushed once each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    topic: String,
    title: String,
    #[idem(push_by = "commentId")]
    comments: Vec<Comment>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    comment_id: String,
    text: String,
}

/// The texts of the stored thread's comments, in list order.
async fn comment_texts(db: &Db) -> Vec<serde_json::Value> {
    let stored = db.stored::<Thread>().await;
    stored[0]["comments"]
        .as_array()
        .unwrap_or_else(|| panic!("{db}: {stored:?}"))
        .iter()
        .map(|comment| comment["text"].clone())
        .collect()
}

/// A retried push never appends twice (an item with the same key is the same item, whatever
/// else it says), racing pushes of one item append it once, and an upsert neither overwrites
/// nor hashes the pushed list.
#[tokio::test]
async fn a_push_appends_once_however_often_and_however_concurrently_it_is_sent() {
    for db in fresh_backends("push").await {
        db.ensure::<Thread>().await;
        let thread = Thread {
            topic: "rust".into(),
            title: "Rust".into(),
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
        assert!(
            comment_texts(&db).await.is_empty(),
            "{db}: the list starts empty"
        );
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
        let edited = Comment {
            text: "edited".into(),
            ..comment(0)
        };
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &edited).await.unwrap(),
            Pushed::AlreadyPresent,
            "{db}: the same key is the same comment"
        );
        assert_eq!(comment_texts(&db).await, ["comment 0"], "{db}");
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
        // An upsert of the thread leaves the list alone, whatever list it carries: the list is
        // not content.
        assert_eq!(
            db.upsert(&thread).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let with_other_list = Thread {
            comments: vec![comment(7)],
            ..thread.clone()
        };
        assert_eq!(
            thread.content_hash().unwrap(),
            with_other_list.content_hash().unwrap(),
            "{db}"
        );
        assert_eq!(
            db.upsert(&with_other_list).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        // An edit keeps the pushed comments.
        let retitled = Thread {
            title: "Rust!".into(),
            ..with_other_list
        };
        assert_eq!(
            db.upsert(&retitled).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Thread>().await;
        assert_eq!(stored[0]["title"], "Rust!", "{db}");
        assert_eq!(comment_texts(&db).await.len(), 5, "{db}");
        assert!(
            matches!(
                db.push::<Thread, _>(id, "topic", &comment(9)).await,
                Err(Error::NotAPushedField { .. })
            ),
            "{db}"
        );
    }
}

/// A schedule whose slots are told apart by a composite key: a struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "schedules")]
struct Schedule {
    #[idem(key)]
    room: String,
    #[idem(push_by = "at")]
    slots: Vec<Slot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Slot {
    at: SlotKey,
    booked_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SlotKey {
    day: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hour: Option<u32>,
    seats: Vec<u32>,
}

/// Items are the same item when their keys are equal, not when one key holds the other: a
/// composite key that is a part of a stored one (fewer fields, fewer list entries) is another
/// item, and is appended.
#[tokio::test]
async fn a_composite_item_key_is_compared_whole() {
    let slot = |day: &str, hour: Option<u32>, seats: &[u32], who: &str| Slot {
        at: SlotKey {
            day: day.into(),
            hour,
            seats: seats.to_vec(),
        },
        booked_by: who.into(),
    };
    for db in fresh_backends("composite_push").await {
        db.ensure::<Schedule>().await;
        let schedule = Schedule {
            room: "blue".into(),
            slots: Vec::new(),
        };
        db.upsert(&schedule).await.unwrap();
        let id = schedule.id().unwrap();
        let pushes = [
            (slot("mon", Some(9), &[1, 2], "ada"), Pushed::Appended),
            (slot("mon", Some(9), &[1, 2], "bob"), Pushed::AlreadyPresent),
            (slot("mon", None, &[1, 2], "cy"), Pushed::Appended),
            (slot("mon", Some(9), &[1], "di"), Pushed::Appended),
            (slot("mon", Some(9), &[], "ed"), Pushed::Appended),
            (slot("mon", Some(9), &[1], "fay"), Pushed::AlreadyPresent),
        ];
        for (item, expected) in &pushes {
            assert_eq!(
                db.push::<Schedule, _>(id, "slots", item).await.unwrap(),
                *expected,
                "{db}: {item:?}"
            );
        }
        let stored = db.get::<Schedule>(id).await.unwrap().unwrap();
        let booked: Vec<&str> = stored.slots.iter().map(|s| s.booked_by.as_str()).collect();
        assert_eq!(booked, ["ada", "cy", "di", "ed"], "{db}");
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
        assert_eq!(
            db.stored::<Charge>().await[0]["_id"],
            first.id.to_string(),
            "{db}: stored under the id it was recorded with"
        );
        match db.record(&charge("req-1", 900)).await {
            Err(Error::IdempotencyKeyReused {
                field, stored_id, ..
            }) => {
                assert_eq!(field, "request_key", "{db}");
                assert_eq!(stored_id, first.id, "{db}");
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
        assert_ne!(recorded[0].id, first.id, "{db}: another key, another event");
        assert_eq!(db.stored::<Charge>().await.len(), 2, "{db}");
    }
}

/// A store remembers the latest `with_op_window` op ids of a document: a retry within the
/// window is recognised; one past it applies again (the documented limit).
#[tokio::test]
async fn a_document_remembers_only_its_latest_op_window() {
    for db in fresh_backends("op_window").await {
        db.ensure::<Wallet>().await;
        let db = db.with_op_window(3).await;
        let ada = wallet("ada", "Ada");
        db.upsert(&ada).await.unwrap();
        let id = ada.id().unwrap();
        let credit = |n: usize| {
            let db = &db;
            async move {
                db.credit_once::<Wallet>(id, &OpId::new(format!("op-{n}")), "balance", 1)
                    .await
                    .unwrap()
            }
        };
        for n in 0..5 {
            assert_eq!(credit(n).await, Applied::Applied, "{db}: op-{n}");
        }
        for n in 2..5 {
            assert_eq!(credit(n).await, Applied::AlreadyApplied, "{db}: op-{n}");
        }
        assert_eq!(balance(&db, "ada").await, 5, "{db}");
        assert_eq!(
            credit(1).await,
            Applied::Applied,
            "{db}: op-1 is past the window of 3"
        );
        assert_eq!(balance(&db, "ada").await, 6, "{db}");
    }
}

/// Op ids derive from the triggering document and the operation's purpose.
#[test]
fn op_ids_derive_from_the_triggering_document() {
    let ada = account("ada");
    assert_eq!(ada.op_id("points").unwrap(), ada.op_id("points").unwrap());
    assert_ne!(ada.op_id("points").unwrap(), ada.op_id("streak").unwrap());
    assert_ne!(
        ada.op_id("points").unwrap(),
        account("bob").op_id("points").unwrap()
    );
}

/// An event's id is the one `record` gives it, never derived.
#[test]
fn an_event_has_no_derived_id() {
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 1,
    };
    assert!(matches!(payment.id(), Err(Error::NoDerivedId { .. })));
}

// ---------------------------------------------------------------------------------------------
// Typed reads

/// A card read back exactly as it was written: a key serde stores as a 32-bit integer, an
/// optional field serde omits and one it stores as null, an infinite score, a list, and a
/// tombstone; `deny_unknown_fields`, so any field of idem's own left in the read would fail it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "cards")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Card {
    #[idem(key)]
    handle: String,
    #[idem(key)]
    shard: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    bio: Option<String>,
    nickname: Option<String>,
    score: f64,
    tags: Vec<String>,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
}

/// A type whose unknown fields serde keeps in a flattened map, with a field stored under the
/// name a query gives its table (`t`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "labels")]
struct Label {
    #[idem(key)]
    name: String,
    reading: f64,
    #[serde(rename = "t")]
    tally: i32,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, String>,
}

/// `get` by id and the generated `find` by natural key return what was written, as the type;
/// `None` for what is not stored; a deleted document with its tombstone set.
#[tokio::test]
async fn a_document_reads_back_as_its_type_by_id_and_by_natural_key() {
    let card = Card {
        handle: "ada".into(),
        shard: 7,
        bio: None,
        nickname: None,
        score: f64::INFINITY,
        tags: vec!["first".into(), "second".into()],
        deleted_at: None,
    };
    let label = Label {
        name: "sensor".into(),
        reading: f64::NAN,
        tally: 3,
        extra: [("unit".to_owned(), "kPa".to_owned())].into(),
    };
    for db in fresh_backends("typed_reads").await {
        db.ensure::<Card>().await;
        db.ensure::<Label>().await;
        db.upsert(&card).await.unwrap();
        db.upsert(&label).await.unwrap();
        let id = card.id().unwrap();

        assert_eq!(
            db.get::<Card>(id).await.unwrap(),
            Some(card.clone()),
            "{db}"
        );
        assert_eq!(
            db.find::<Card>(card.natural_key()).await.unwrap(),
            Some(card.clone()),
            "{db}"
        );
        // The generated lookup, with the key values in declaration order.
        let found = match &db {
            Db::Mongo { store, .. } => Card::find(store, "ada", 7).await,
            Db::Postgres { store, client, .. } => Card::find(&store.on(client), "ada", 7).await,
        };
        assert_eq!(found.unwrap(), Some(card.clone()), "{db}");

        let other = Card {
            shard: 8,
            ..card.clone()
        };
        assert_eq!(
            db.get::<Card>(other.id().unwrap()).await.unwrap(),
            None,
            "{db}"
        );
        assert_eq!(
            db.find::<Card>(other.natural_key()).await.unwrap(),
            None,
            "{db}"
        );

        let read = db.get::<Label>(label.id().unwrap()).await.unwrap();
        let read = read.unwrap_or_else(|| panic!("{db}: the label is stored"));
        assert!(read.reading.is_nan(), "{db}: {read:?}");
        assert_eq!(read.extra, label.extra, "{db}: the flattened entries");
        assert_eq!(read.tally, 3, "{db}");

        let deleted = Card {
            deleted_at: Some(1_700_000_000_000),
            ..card.clone()
        };
        assert_eq!(db.delete(&deleted).await.unwrap(), Outcome::Deleted, "{db}");
        assert_eq!(db.get::<Card>(id).await.unwrap(), Some(deleted), "{db}");
    }
}

/// A reading whose fields serialize as null without being `Option`s, beside fields serde may
/// leave out and read back with their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "nullable_readings")]
struct NullableReading {
    #[idem(key)]
    sensor: String,
    /// Any JSON, null included; serde has no default for a missing one.
    meta: serde_json::Value,
    /// A unit struct: stored as null.
    marker: (),
    /// Left out when empty, read back empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    /// Always written; read back with its default when a row has no value.
    #[serde(default)]
    labels: Vec<String>,
}

/// A field stored as null that is not an `Option` reads back as null, not as missing; one serde
/// left out reads back as its default. Then the same row written with values reads back with them.
#[tokio::test]
async fn a_stored_null_reads_back_as_null_and_a_left_out_field_as_its_default() {
    let reading = NullableReading {
        sensor: "s-1".into(),
        meta: serde_json::Value::Null,
        marker: (),
        notes: Vec::new(),
        labels: Vec::new(),
    };
    let filled = NullableReading {
        meta: serde_json::json!({ "unit": "kPa", "scale": null }),
        notes: vec!["calibrated".into()],
        labels: vec!["roof".into()],
        ..reading.clone()
    };
    for db in fresh_backends("nullable_reads").await {
        db.ensure::<NullableReading>().await;
        let id = reading.id().unwrap();
        assert_eq!(
            db.upsert(&reading).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(reading.clone()),
            "{db}"
        );
        assert_eq!(
            db.find::<NullableReading>(reading.natural_key())
                .await
                .unwrap(),
            Some(reading.clone()),
            "{db}"
        );
        assert_eq!(db.upsert(&filled).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(filled.clone()),
            "{db}"
        );
        assert_eq!(db.upsert(&reading).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(
            db.get::<NullableReading>(id).await.unwrap(),
            Some(reading.clone()),
            "{db}"
        );
    }
}

/// A type serde defaults as a whole, whose default differs from what is written: `None` and an
/// empty list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "retry_policies")]
#[serde(default)]
struct RetryPolicy {
    #[idem(key)]
    name: String,
    retries: Option<u32>,
    backoff_ms: Vec<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            name: String::new(),
            retries: Some(3),
            backoff_ms: vec![100, 200],
        }
    }
}

/// What was written reads back, not serde's default: a `None` stored as null stays `None`.
#[tokio::test]
async fn a_written_none_reads_back_as_none_where_the_default_is_some() {
    let policy = RetryPolicy {
        name: "no-retries".into(),
        retries: None,
        backoff_ms: Vec::new(),
    };
    for db in fresh_backends("defaulted_reads").await {
        db.ensure::<RetryPolicy>().await;
        db.upsert(&policy).await.unwrap();
        assert_eq!(
            db.get::<RetryPolicy>(policy.id().unwrap()).await.unwrap(),
            Some(policy.clone()),
            "{db}"
        );
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
            match &outcomes[1] {
                // The stored timestamp reads as the incoming one: the ids differ all the same.
                Err(Error::FrozenFieldChanged { field, .. }) => refused.push(*field),
                other => panic!("{db} {how}: expected the second id refused, got {other:?}"),
            }
        }
        assert_eq!(
            refused[0], refused[1],
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
        match &inserted.results()[1] {
            Err(Error::FrozenFieldChanged { field, .. }) => {
                assert_eq!(*field, refused[0], "{db}: as one by one")
            }
            other => panic!("{db} insert_new: expected the second id refused, got {other:?}"),
        }
        let stored = members_db.stored::<Tick>().await;
        assert_eq!(stored.len(), 1, "{db}: {stored:?}");
        assert_eq!(stored[0]["_id"], first.id().unwrap().to_string(), "{db}");
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Calibration {
    gain: f64,
    offset: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(timestamp)]
    at: i64,
    #[idem(frozen)]
    calibration: Calibration,
    value: i64,
}

/// Numbers another tool stored are the values they are: a timestamp mongosh or Node.js stored
/// as the double `1700000000000.0`, a frozen `1.0` that jsonb or an int64 keeps as `1`. The
/// document is replaced, not refused as a change of a frozen field, and is idem's afterwards.
#[tokio::test]
async fn numbers_another_tool_stored_compare_by_value() {
    for db in fresh_backends("foreign_numbers").await {
        db.ensure::<Reading>().await;
        let reading = Reading {
            sensor: "s1".into(),
            at: 1_700_000_000_000,
            calibration: Calibration {
                gain: 1.0,
                offset: 0.0,
            },
            value: 7,
        };
        let id = reading.id().unwrap().to_string();
        let mut foreign = serde_json::Map::new();
        foreign.insert("sensor".into(), "s1".into());
        // A timestamp column holds integers on PostgreSQL; MongoDB keeps what the tool sent.
        let at = match db.is_postgres() {
            true => serde_json::json!(1_700_000_000_000_i64),
            false => serde_json::json!(1_700_000_000_000.0),
        };
        foreign.insert("at".into(), at);
        foreign.insert(
            "calibration".into(),
            serde_json::json!({"gain": 1, "offset": 0}),
        );
        foreign.insert("value".into(), serde_json::json!(6));
        db.write_json_as_another_tool::<Reading>(&id, foreign).await;

        assert_eq!(db.upsert(&reading).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(
            db.upsert(&reading).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let stored = db.stored::<Reading>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["value"], 7, "{db}");
        let other_gain = Reading {
            calibration: Calibration {
                gain: 2.0,
                offset: 0.0,
            },
            ..reading.clone()
        };
        match db.upsert(&other_gain).await {
            Err(Error::FrozenFieldChanged {
                field: "calibration",
                ..
            }) => {}
            other => panic!("{db}: a changed frozen value must still be refused: {other:?}"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "purses")]
struct Purse {
    #[idem(key)]
    owner: String,
    label: String,
    #[idem(effect)]
    points: Option<i64>,
}

/// An effect field is written when its document is inserted and never again: once another
/// route removed it, no upsert brings it back, whatever the stored document holds.
#[tokio::test]
async fn an_upsert_never_writes_back_an_effect_field_that_was_removed() {
    for db in fresh_backends("effect_removed").await {
        db.ensure::<Purse>().await;
        let wallet = Purse {
            owner: "ada".into(),
            label: "first".into(),
            points: Some(10),
        };
        assert_eq!(db.upsert(&wallet).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(db.stored::<Purse>().await[0]["points"], 10, "{db}");
        db.clear_field::<Purse>("points").await;
        let relabelled = Purse {
            label: "second".into(),
            ..wallet.clone()
        };
        assert_eq!(
            db.upsert(&relabelled).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Purse>().await;
        assert_eq!(stored[0]["label"], "second", "{db}");
        assert!(
            !stored[0].contains_key("points"),
            "{db}: the removed effect field came back: {stored:?}"
        );
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

/// A write that collides with another unique index (one the application made on `email`) is a
/// refusal naming that index, on the single and the batch path, when it inserts and when it
/// updates: never `Contention`, which says retrying helps. Nothing is written.
#[tokio::test]
async fn a_second_unique_index_is_a_refusal_naming_it_on_every_path() {
    for db in fresh_backends("second_unique").await {
        db.ensure::<Member>().await;
        db.create_unique_index::<Member>("members_email", "email")
            .await;
        let member = |handle: &str, email: &str| Member {
            handle: handle.into(),
            email: email.into(),
        };
        db.upsert(&member("ada", "a@x")).await.unwrap();
        db.upsert(&member("bob", "b@x")).await.unwrap();
        let before = db.raw::<Member>().await;
        let colliding_update = member("bob", "a@x");
        let colliding_insert = member("cy", "a@x");
        for doc in [&colliding_update, &colliding_insert] {
            let single = db.upsert(doc).await;
            let batch = db
                .upsert_many(&[doc.clone(), member("dee", "d@x")])
                .await
                .unwrap();
            for (how, outcome) in [("single", &single), ("batch", &batch.outcomes()[0])] {
                match outcome {
                    Err(Error::UniqueIndexConflict { index, .. }) => {
                        assert!(index.contains("members_email"), "{db} {how}: {index}")
                    }
                    other => panic!(
                        "{db} {how} {}: expected a refusal naming members_email, got {other:?}",
                        doc.handle
                    ),
                }
            }
            assert_eq!(
                batch.outcomes()[1].as_ref().ok(),
                Some(&Outcome::Inserted),
                "{db}"
            );
            db.run_raw(
                r#"DELETE FROM "members" WHERE "handle" = 'dee'"#,
                mongodb::bson::doc! { "delete": "members", "deletes": [{ "q": { "handle": "dee" }, "limit": 0 }] },
            )
            .await;
        }
        assert_eq!(db.raw::<Member>().await, before, "{db}: nothing written");
    }
}

/// A document stored without idem's version order key (by another tool, or by idem before the
/// type gained its `#[idem(version)]`) is ordered by its version field all the same: an older
/// replay is `Stale` and changes nothing, a newer one replaces it (in a second step pinned to
/// what was read), and the document is idem's from then on.
#[tokio::test]
async fn a_stale_replay_never_overwrites_a_newer_document_stored_without_an_order_key() {
    for db in fresh_backends("foreign_versions").await {
        db.ensure::<Entry>().await;
        for how in ["another tool", "idem before versions"] {
            let db = db.reset::<Entry>().await;
            let newer = entry("e1", 10, "ten");
            match how {
                "another tool" => db.write_as_another_tool(&newer).await,
                _ => {
                    db.upsert(&newer).await.unwrap();
                    db.clear_field::<Entry>("idemVersion").await;
                }
            }
            if how == "another tool" {
                // The same version, and no content hash to tell a retry from an edit: the
                // write completes the document, which is idem's from then on.
                assert_eq!(db.upsert(&newer).await.unwrap(), Outcome::Updated, "{db}");
                assert_eq!(db.upsert(&newer).await.unwrap(), Outcome::Unchanged, "{db}");
                db.write_as_another_tool(&newer).await;
            }
            let before = db.raw::<Entry>().await;
            let stale = entry("e1", 5, "five");
            assert_eq!(
                db.upsert(&stale).await.unwrap(),
                Outcome::Stale,
                "{db} {how}"
            );
            let report = db.upsert_many(std::slice::from_ref(&stale)).await.unwrap();
            assert_eq!(
                report.outcomes()[0].as_ref().ok(),
                Some(&Outcome::Stale),
                "{db} {how}"
            );
            assert_eq!(
                db.raw::<Entry>().await,
                before,
                "{db} {how}: nothing written"
            );

            let fresh = entry("e1", 11, "eleven");
            assert_eq!(
                db.upsert(&fresh).await.unwrap(),
                Outcome::Updated,
                "{db} {how}"
            );
            assert_eq!(
                db.upsert(&fresh).await.unwrap(),
                Outcome::Unchanged,
                "{db} {how}"
            );
            assert_eq!(
                db.upsert(&stale).await.unwrap(),
                Outcome::Stale,
                "{db} {how}"
            );
            let stored = db.stored::<Entry>().await;
            assert_eq!(stored.len(), 1, "{db} {how}");
            assert_eq!(stored[0]["revision"], 11, "{db} {how}");
            assert_eq!(stored[0]["text"], "eleven", "{db} {how}");
        }
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
                match outcome {
                    Err(Error::FrozenFieldChanged { field: refused, .. }) => {
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
                db.upsert(&reissued).await,
                Err(Error::FrozenFieldChanged {
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
                db.upsert(&changed).await,
                Err(Error::FrozenFieldChanged { field: "meta", .. })
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
        match db.record(&invite("r2", "a@x")).await {
            Err(Error::UniqueIndexConflict { index, .. }) => {
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

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    slug: String,
    #[idem(version)]
    revision: i64,
    text: String,
}

/// A type with a version but neither a timestamp nor a frozen field (no digests) orders a
/// document stored without its order key as any other; and a document of idem's whose content
/// hash was removed, met at its own version, is `Stale` at once, not retried until
/// `Contention` (the guard and the judgement agree).
#[tokio::test]
async fn versions_order_documents_without_an_order_key_or_a_hash_for_types_without_digests() {
    for db in fresh_backends("note_versions").await {
        db.ensure::<Note>().await;
        let note = |revision: i64, text: &str| Note {
            slug: "n".into(),
            revision,
            text: text.into(),
        };
        db.write_as_another_tool(&note(10, "ten")).await;
        assert_eq!(
            db.upsert(&note(5, "five")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        assert_eq!(
            db.upsert(&note(11, "eleven")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            db.upsert(&note(11, "eleven")).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        db.clear_field::<Note>("sourceHash").await;
        assert_eq!(
            db.upsert(&note(11, "eleven")).await.unwrap(),
            Outcome::Stale,
            "{db}"
        );
        assert_eq!(
            db.upsert(&note(12, "twelve")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(db.stored::<Note>().await[0]["text"], "twelve", "{db}");
    }
}
