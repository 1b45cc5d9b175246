//! Racing writers of single upserts and batches, lined up at a barrier so that they really race:
//! identical first writes insert once, first writes under two ids of one natural key never fork
//! it, racing edits converge on one of them whole, the newest version always stays, and a write
//! whose acknowledgement was lost converges when it is retried. (Races of the other primitives
//! are beside their other cases: `delete.rs`, `insert_new.rs`, `push.rs`, `apply_once.rs`,
//! `record.rs`.)

use std::sync::Arc;

use idem_core::{Error, ErrorKind, Outcome};
use idem_tests::backends::{fresh_backends, fresh_server_backends, Db};
use idem_tests::fixtures::{entry, post, Entry, Post};

use crate::support::line_up;

/// Eight clients replay the same 50 entries at their own revision, in batches, at once: the
/// newest revision wins everywhere, whatever the interleaving, and nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_replaying_overlapping_batches_converge_on_the_newest_versions() {
    for db in fresh_backends("batch_race").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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

/// Sixteen racing upserts of one identical post: exactly one inserts it, every other finds it
/// unchanged, and one document is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_racing_identical_upserts_insert_exactly_once() {
    for db in fresh_backends("race_identical").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let line = line_up(16);
        let mut racers = Vec::new();
        for _ in 0..16 {
            let racer = db.another().await;
            let line = line.clone();
            racers.push(tokio::spawn(async move {
                line.wait().await;
                racer.upsert(&post()).await
            }));
        }
        let mut outcomes = Vec::new();
        for racer in racers {
            outcomes.push(
                racer
                    .await
                    .unwrap()
                    .unwrap_or_else(|error| panic!("{db}: every racing upsert succeeds: {error}")),
            );
        }
        assert_eq!(
            outcomes
                .iter()
                .filter(|outcome| **outcome == Outcome::Inserted)
                .count(),
            1,
            "{db}: {outcomes:?}"
        );
        assert!(
            outcomes
                .iter()
                .all(|outcome| matches!(outcome, Outcome::Inserted | Outcome::Unchanged)),
            "{db}: {outcomes:?}"
        );
        assert_eq!(db.stored::<Post>().await.len(), 1, "{db}");
    }
}

/// Sixteen racing first writes of one post, each with its own publication time and so its own
/// id: exactly one is inserted, every other is refused naming the moved timestamp, and one
/// document is stored. The natural key never forks into two documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_upserts_with_different_timestamps_never_fork() {
    for db in fresh_backends("race_fork").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let line = line_up(16);
        let mut racers = Vec::new();
        for attempt in 0..16 {
            let racer = db.another().await;
            let line = line.clone();
            let candidate = Post {
                published_at: 1_700_000_000_000 + attempt,
                ..post()
            };
            racers.push(tokio::spawn(async move {
                line.wait().await;
                racer.upsert(&candidate).await
            }));
        }
        let mut inserted = 0;
        for racer in racers {
            match racer.await.unwrap().map_err(Error::into_kind) {
                Ok(Outcome::Inserted) => inserted += 1,
                Err(ErrorKind::FrozenFieldChanged {
                    field: "published_at",
                    ..
                }) => {}
                other => panic!(
                    "{db}: expected Inserted or a refusal naming published_at, got {other:?}"
                ),
            }
        }
        assert_eq!(inserted, 1, "{db}");
        assert_eq!(db.stored::<Post>().await.len(), 1, "{db}");
    }
}

/// Eight rounds of sixteen racing edits, each round of a new post: exactly one racer inserts it,
/// and what is stored is one of the edits whole, with that edit's content hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_edits_of_one_document_converge_on_one_of_them() {
    for db in fresh_backends("race_edits").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let mut racers = Vec::new();
        for _ in 0..16 {
            racers.push(Arc::new(db.another().await));
        }
        // Several races, each on a new document: the first write of a document is where a server
        // may retry a racing insert as an update, and exactly one racer inserted it.
        for round in 0..8 {
            let slug = format!("race-{round}");
            let line = line_up(racers.len());
            let tasks: Vec<_> = racers
                .iter()
                .enumerate()
                .map(|(edit, racer)| {
                    let racer = Arc::clone(racer);
                    let line = line.clone();
                    let candidate = Post {
                        slug: slug.clone(),
                        body: format!("edit {edit}"),
                        ..post()
                    };
                    tokio::spawn(async move {
                        line.wait().await;
                        racer.upsert(&candidate).await
                    })
                })
                .collect();
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(
                    task.await.unwrap().unwrap_or_else(|error| {
                        panic!("{db}: every racing edit succeeds: {error}")
                    }),
                );
            }
            assert_eq!(
                outcomes
                    .iter()
                    .filter(|outcome| **outcome == Outcome::Inserted)
                    .count(),
                1,
                "{db}: round {round}: {outcomes:?}"
            );
            let stored: Vec<_> = db
                .stored::<Post>()
                .await
                .into_iter()
                .filter(|stored| stored["slug"] == slug.as_str())
                .collect();
            assert_eq!(stored.len(), 1, "{db}: round {round}: {stored:?}");
            let body = stored[0]["body"]
                .as_str()
                .unwrap_or_else(|| panic!("{db}: round {round}: {stored:?}"));
            let winner = Post {
                slug: slug.clone(),
                body: body.to_owned(),
                ..post()
            };
            assert_eq!(
                db.stored_content_hash::<Post>(winner.id().unwrap()).await,
                Some(winner.content_hash().unwrap().to_hex()),
                "{db}: round {round}: the stored hash is the stored edit's"
            );
        }
    }
}

/// A write whose acknowledgement is lost after it landed (MongoDB's fail point, or the
/// PostgreSQL wire proxy dropping the reply to a committed statement) is a retryable error; the
/// retry finds the document, writes nothing, and one document is stored under its derived id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_then_a_retry_converges_on_one_document() {
    for db in fresh_server_backends("lost_ack").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let first = db.upsert_with_lost_acknowledgement(&post()).await;
        let error = first.expect_err("the acknowledgement was lost");
        assert!(error.is_retryable(), "{db}: {error}");
        // MongoDB: the write concern failed, as the driver reports it for `findAndModify`, or
        // as idem reads it from the reply of a write command (an `insert` without pipelines).
        match (&db, error.kind()) {
            (Db::Mongo { .. }, ErrorKind::NotConfirmed { code, .. }) => {
                assert_eq!(*code, 64, "{db}")
            }
            (Db::Mongo { .. }, _) => {
                let driver_error = error.as_mongo().expect("a driver error, kept whole");
                assert!(
                    matches!(
                        driver_error.kind.as_ref(),
                        mongodb::error::ErrorKind::Write(
                            mongodb::error::WriteFailure::WriteConcernError(_)
                        )
                    ),
                    "{db}: {driver_error:?}"
                );
            }
            (Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. }, _) => {}
        }
        // The write landed before its acknowledgement was lost…
        assert_eq!(db.stored::<Post>().await.len(), 1, "{db}");
        let before = db.raw::<Post>().await;
        if let Some(log) = db.command_log() {
            let _ = log.take();
        }
        // …so the retry finds it and writes nothing.
        assert_eq!(
            db.upsert(&post()).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        if let Some(log) = db.command_log() {
            assert_eq!(log.take().documents_written, 0, "{db}");
        }
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        let stored = db.stored::<Post>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["_id"], post().id().unwrap().to_string(), "{db}");
    }
}
