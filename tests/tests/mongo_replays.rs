//! Replays against a real server: the stale guard, deletion markers, and batch upserts, alone
//! and under concurrency.

use std::sync::Arc;

use idem_core::mongo::Store;
use idem_core::{Error, Idempotent, Outcome};
use idem_tests::fixtures::{entry, Entry};
use idem_tests::{delay_next, fresh_database, stored_documents, CommandLog};
use mongodb::bson::doc;
use serde::Serialize;

async fn store(test: &str) -> (Store, CommandLog) {
    let (database, log) = fresh_database(test).await;
    let store = Store::new(database);
    store.ensure_indexes::<Entry>().await.unwrap();
    let _ = log.take();
    (store, log)
}

async fn stored(store: &Store) -> Vec<mongodb::bson::Document> {
    stored_documents(store.database(), "entries").await
}

#[tokio::test]
async fn only_a_strictly_newer_version_replaces_the_stored_document() {
    let (store, log) = store("versions").await;
    assert_eq!(
        store.upsert(&entry("e1", 2, "second")).await.unwrap(),
        Outcome::Inserted
    );
    let _ = log.take();
    let before = stored(&store).await;

    // An offline client pushes its older copy: refused as stale, nothing written.
    assert_eq!(
        store.upsert(&entry("e1", 1, "first")).await.unwrap(),
        Outcome::Stale
    );
    // The same version with the same content is a plain retry.
    assert_eq!(
        store.upsert(&entry("e1", 2, "second")).await.unwrap(),
        Outcome::Unchanged
    );
    // The same version with other content: two devices edited the same revision; the stored
    // one stands, and the client must rebase onto it.
    assert_eq!(
        store.upsert(&entry("e1", 2, "conflicting")).await.unwrap(),
        Outcome::Stale
    );
    assert_eq!(log.take().documents_written, 0);
    assert_eq!(stored(&store).await, before);

    assert_eq!(
        store.upsert(&entry("e1", 3, "third")).await.unwrap(),
        Outcome::Updated
    );
    let after = stored(&store).await;
    assert_eq!(after[0].get_i64("revision").unwrap(), 3);
    assert_eq!(after[0].get_str("text").unwrap(), "third");
}

#[tokio::test]
async fn a_deleted_document_is_never_resurrected_and_keeps_its_first_marker() {
    let (store, log) = store("tombstones").await;
    store.upsert(&entry("e1", 1, "hello")).await.unwrap();
    let deleted = Entry {
        deleted_at: Some(1_700_000_500_000),
        ..entry("e1", 1, "hello")
    };
    assert_eq!(store.delete(&deleted).await.unwrap(), Outcome::Deleted);
    let again = Entry {
        deleted_at: Some(1_700_000_900_000),
        ..deleted.clone()
    };
    assert_eq!(store.delete(&again).await.unwrap(), Outcome::Unchanged);
    assert_eq!(
        stored(&store).await[0].get_i64("deletedAt").unwrap(),
        1_700_000_500_000
    );
    let before = stored(&store).await;
    let _ = log.take();

    // Replays of the entry, even newer ones, do not bring it back.
    assert_eq!(
        store.upsert(&entry("e1", 1, "hello")).await.unwrap(),
        Outcome::Deleted
    );
    assert_eq!(
        store
            .upsert(&entry("e1", 5, "edited offline"))
            .await
            .unwrap(),
        Outcome::Deleted
    );
    assert_eq!(log.take().documents_written, 0);
    assert_eq!(stored(&store).await, before);
}

#[tokio::test]
async fn upserts_never_write_the_tombstone_and_deleting_needs_a_marker() {
    let (store, _log) = store("tombstone_route").await;
    let marked = Entry {
        deleted_at: Some(1),
        ..entry("e1", 1, "hello")
    };
    assert_eq!(store.upsert(&marked).await.unwrap(), Outcome::Inserted);
    let unmarked = |document: &mongodb::bson::Document| {
        matches!(
            document.get("deletedAt"),
            None | Some(mongodb::bson::Bson::Null)
        )
    };
    assert!(
        unmarked(&stored(&store).await[0]),
        "only the delete route writes the marker"
    );

    match store.delete(&entry("e1", 1, "hello")).await.unwrap_err() {
        Error::TombstoneNotSet { field, .. } => assert_eq!(field, "deleted_at"),
        other => panic!("expected TombstoneNotSet, got {other:?}"),
    }
    assert!(unmarked(&stored(&store).await[0]));
}

#[tokio::test]
async fn deleting_before_the_creation_arrives_stores_it_deleted() {
    let (store, _log) = store("delete_first").await;
    let deleted = Entry {
        deleted_at: Some(7),
        ..entry("e9", 1, "never seen")
    };
    assert_eq!(store.delete(&deleted).await.unwrap(), Outcome::Deleted);
    assert_eq!(
        store.upsert(&entry("e9", 1, "never seen")).await.unwrap(),
        Outcome::Deleted
    );
    let documents = stored(&store).await;
    assert_eq!(documents.len(), 1);
    assert_eq!(documents[0].get_i64("deletedAt").unwrap(), 7);
}

#[tokio::test]
async fn delete_by_id_marks_once_and_names_a_missing_document() {
    let (store, _log) = store("delete_by_id").await;
    let stored_entry = entry("e1", 1, "hello");
    store.upsert(&stored_entry).await.unwrap();
    let id = stored_entry.id().unwrap();
    assert_eq!(
        store.delete_by_id::<Entry, _>(id, &11i64).await.unwrap(),
        Outcome::Deleted
    );
    assert_eq!(
        store.delete_by_id::<Entry, _>(id, &12i64).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(stored(&store).await[0].get_i64("deletedAt").unwrap(), 11);
    let missing = entry("nope", 1, "").id().unwrap();
    assert!(matches!(
        store.delete_by_id::<Entry, _>(missing, &1i64).await,
        Err(Error::NotFound { document }) if document.id == Some(missing)
    ));
}

#[tokio::test]
async fn a_batch_with_duplicates_agrees_with_upserting_one_by_one() {
    let (batched, _log) = store("batch_collapse").await;
    let batch = vec![
        entry("a", 3, "a3"),
        entry("b", 1, "b1"),
        entry("a", 2, "a2"), // older than a3: Stale
        entry("b", 1, "b1"), // identical to the previous b: not sent, Unchanged
        entry("c", 1, "c1"),
        entry("c", 1, "c1'"), // same version, other content: the first stays, Stale
    ];
    let report = batched.upsert_many(&batch).await.unwrap();
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
            Outcome::Stale,
            Outcome::Unchanged,
            Outcome::Inserted,
            Outcome::Stale
        ]
    );
    assert_eq!(report.collapsed(), 1);

    // The same documents upserted one by one, in order, give the same outcomes and state.
    let (alone, _log) = store("batch_collapse_one_by_one").await;
    let mut one_by_one = Vec::new();
    for doc in &batch {
        one_by_one.push(alone.upsert(doc).await.unwrap());
    }
    assert_eq!(outcomes, one_by_one);
    for store in [&batched, &alone] {
        let mut texts: Vec<String> = stored(store)
            .await
            .iter()
            .map(|d| d.get_str("text").unwrap().to_owned())
            .collect();
        texts.sort();
        assert_eq!(texts, ["a3", "b1", "c1"]);
    }
}

#[tokio::test]
async fn re_ingesting_an_unchanged_batch_reads_once_and_writes_nothing() {
    let (store, log) = store("batch_unchanged").await;
    let batch: Vec<Entry> = (0..idem_core::mongo::DEFAULT_BATCH_CHUNK)
        .map(|i| entry(&format!("e{i}"), 1, "same"))
        .collect();
    let first = store.upsert_many(&batch).await.unwrap();
    assert_eq!(first.count(Outcome::Inserted), 250);
    let commands = log.take();
    assert_eq!(
        commands.names,
        ["hello", "find", "update"],
        "one read and one write for the chunk"
    );
    assert_eq!(commands.documents_written, 250);

    let second = store.upsert_many(&batch).await.unwrap();
    assert_eq!(second.count(Outcome::Unchanged), 250);
    let commands = log.take();
    assert_eq!(commands.names, ["find"]);
    assert_eq!(commands.documents_written, 0);
}

#[tokio::test]
async fn a_batch_writes_exactly_the_changed_documents() {
    let (store, log) = store("batch_changed").await;
    // One chunk of documents.
    let batch: Vec<Entry> = (0..250).map(|i| entry(&format!("e{i}"), 1, "v1")).collect();
    store.upsert_many(&batch).await.unwrap();
    let _ = log.take();
    let edited: Vec<Entry> = batch
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if i % 10 == 0 {
                Entry {
                    revision: 2,
                    text: "v2".into(),
                    ..e.clone()
                }
            } else {
                e.clone()
            }
        })
        .collect();
    let report = store.upsert_many(&edited).await.unwrap();
    assert_eq!(report.count(Outcome::Updated), 25);
    assert_eq!(report.count(Outcome::Unchanged), 225);
    let commands = log.take();
    assert_eq!(commands.names, ["find", "update"]);
    assert_eq!(commands.documents_written, 25);
}

#[tokio::test]
async fn a_refused_document_does_not_stop_the_rest_of_its_batch() {
    let (store, _log) = store("batch_refusal").await;
    store.upsert(&entry("moved", 1, "x")).await.unwrap();
    let moved = Entry {
        created_at: 1_600_000_000_000,
        ..entry("moved", 2, "x")
    };
    let batch = vec![
        entry("a", 1, "a"),
        moved,
        entry("b", 1, "b"),
        Entry {
            entry_id: String::new(),
            ..entry("", 1, "")
        },
    ];
    let report = store.upsert_many(&batch).await.unwrap();
    let outcomes = report.outcomes();
    assert!(matches!(outcomes[0], Ok(Outcome::Inserted)));
    assert!(
        matches!(
            &outcomes[1],
            Err(Error::FrozenFieldChanged {
                field: "created_at",
                ..
            })
        ),
        "{:?}",
        outcomes[1]
    );
    assert!(matches!(outcomes[2], Ok(Outcome::Inserted)));
    assert!(
        matches!(
            &outcomes[3],
            Err(Error::EmptyKey {
                field: "entry_id",
                ..
            })
        ),
        "{:?}",
        outcomes[3]
    );
    assert_eq!(report.refused(), 2);
    assert_eq!(stored(&store).await.len(), 3);
}

#[tokio::test]
async fn a_batch_is_read_and_written_once_per_chunk() {
    let (store, log) = store("batch_chunks").await;
    let hello = store
        .database()
        .run_command(doc! { "hello": 1 })
        .await
        .unwrap();
    let limit = hello
        .get_i32("maxWriteBatchSize")
        .map(|n| n as usize)
        .unwrap_or(100_000);
    assert!(limit >= 1_000, "maxWriteBatchSize {limit}");
    let _ = log.take();
    let batch: Vec<Entry> = (0..1_000)
        .map(|i| entry(&format!("e{i}"), 1, "x"))
        .collect();

    // The default chunk is 250 documents: four reads, four writes.
    assert_eq!(idem_core::mongo::DEFAULT_BATCH_CHUNK, 250);
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Inserted), 1_000);
    let mut expected = vec!["hello"];
    expected.extend(["find", "update"].repeat(4));
    assert_eq!(log.take().names, expected);

    // A chunk of 1,000: one read, and no write since nothing changed.
    let wide = store.clone().with_batch_chunk(1_000);
    let report = wide.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Unchanged), 1_000);
    assert_eq!(log.take().names, ["find"]);

    // The changed half of a chunk of 1,000 goes in one write.
    let edited: Vec<Entry> = (0..1_000)
        .map(|i| match i % 2 {
            0 => entry(&format!("e{i}"), 2, "y"),
            _ => entry(&format!("e{i}"), 1, "x"),
        })
        .collect();
    let report = wide.upsert_many(&edited).await.unwrap();
    assert_eq!(report.count(Outcome::Updated), 500);
    let commands = log.take();
    assert_eq!(commands.names, ["find", "update"]);
    assert_eq!(commands.documents_written, 500);

    // A chunk size of 0 means 1: e0 and e2 move to revision 3, e1 is as stored.
    let narrow = store.clone().with_batch_chunk(0);
    let three = [
        entry("e0", 3, "z"),
        entry("e1", 1, "x"),
        entry("e2", 3, "z"),
    ];
    let report = narrow.upsert_many(&three).await.unwrap();
    assert_eq!(report.count(Outcome::Updated), 2);
    assert_eq!(
        log.take().names,
        ["find", "update", "find", "find", "update"]
    );
}

#[tokio::test]
async fn writes_that_exceed_one_command_are_split_by_size_after_one_read() {
    let (store, log) = store("batch_split").await;
    // 40 entries of 512 KiB: 20 MiB, more than the 16 MiB a command may carry.
    let big = "z".repeat(512 * 1024);
    let batch: Vec<Entry> = (0..40).map(|i| entry(&format!("e{i}"), 1, &big)).collect();
    let _ = log.take();
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Inserted), 40);
    let commands = log.take();
    assert_eq!(commands.names, ["hello", "find", "update", "update"]);
    assert_eq!(commands.documents_written, 40);
    assert_eq!(stored(&store).await.len(), 40);
}

#[tokio::test]
async fn a_conflict_in_the_second_write_command_is_told_to_its_own_document() {
    let (store, log) = store("batch_split_conflict").await;
    // e35 is stored; the batch brings it with another timestamp, so under another id. Its write
    // hits the natural-key index and must be refused by name, not mistaken for a neighbour.
    store.upsert(&entry("e35", 1, "x")).await.unwrap();
    let big = "y".repeat(512 * 1024);
    let mut batch: Vec<Entry> = (0..40).map(|i| entry(&format!("e{i}"), 1, &big)).collect();
    batch[35] = Entry {
        created_at: 1_600_000_000_000,
        ..entry("e35", 2, &big)
    };
    let _ = log.take();
    let report = store.upsert_many(&batch).await.unwrap();
    let outcomes = report.outcomes();
    for (index, outcome) in outcomes.iter().enumerate() {
        if index == 35 {
            assert!(
                matches!(
                    outcome,
                    Err(Error::FrozenFieldChanged {
                        field: "created_at",
                        ..
                    })
                ),
                "{outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Ok(Outcome::Inserted)),
                "{index}: {outcome:?}"
            );
        }
    }
    // One read; two commands, since 40 statements of 512 KiB exceed 16 MiB, the first holding
    // about 30; then the reads that tell the refusal: nothing under its id, the natural key
    // under another.
    let commands = log.take();
    assert_eq!(
        commands.names,
        ["hello", "find", "update", "update", "find", "find"],
        "{commands:?}"
    );
    assert_eq!(commands.documents_written, 39);
    let stored_e35 = stored(&store)
        .await
        .into_iter()
        .find(|document| document.get_str("entryId") == Ok("e35"))
        .unwrap();
    assert_eq!(stored_e35.get_str("text").unwrap(), "x");
}

/// A document with a large frozen field: its guard compares the field's digest, so a statement
/// carries the value once.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "sealed")]
struct Sealed {
    #[idem(key)]
    name: String,
    #[idem(frozen)]
    seal: String,
    body: String,
}

#[tokio::test]
async fn a_frozen_value_is_sent_once_per_statement_not_repeated_in_its_guard() {
    let (database, log) = fresh_database("batch_statement_size").await;
    let store = Store::new(database);
    store.ensure_indexes::<Sealed>().await.unwrap();
    // 12 documents of 1.1 MiB (13.2 MiB): one command, as long as no statement repeats its
    // 1 MiB seal (in the guard as well as in the replacement it would be 25 MiB, two commands).
    let seal = "s".repeat(1 << 20);
    let batch: Vec<Sealed> = (0..12)
        .map(|i| Sealed {
            name: format!("n{i}"),
            seal: seal.clone(),
            body: "b".repeat(100 << 10),
        })
        .collect();
    let _ = log.take();
    let report = store.upsert_many(&batch).await.unwrap();
    assert_eq!(report.count(Outcome::Inserted), 12, "{report}");
    assert_eq!(log.take().names, ["hello", "find", "update"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_replaying_overlapping_batches_converge_on_the_newest_versions() {
    let (store, _log) = store("batch_race").await;
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..8)
        .map(|client| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                // Every client replays the same 50 entries at its own revision, so the newest
                // revision (7) must win everywhere, whatever the interleaving.
                let batch: Vec<Entry> = (0..50)
                    .map(|i| entry(&format!("e{i}"), client, &format!("rev {client}")))
                    .collect();
                store.upsert_many(&batch).await
            })
        })
        .collect();
    for task in tasks {
        let report = task.await.unwrap().expect("every batch call succeeds");
        assert_eq!(report.refused(), 0, "{report}");
    }
    let documents = stored(&store).await;
    assert_eq!(documents.len(), 50);
    for document in documents {
        assert_eq!(document.get_i64("revision").unwrap(), 7, "{document}");
        assert_eq!(document.get_str("text").unwrap(), "rev 7");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_stale_and_fresh_single_upserts_never_lose_the_newest() {
    let (store, _log) = store("version_race").await;
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..16)
        .map(|revision| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .upsert(&entry("e1", revision, &format!("r{revision}")))
                    .await
            })
        })
        .collect();
    for task in tasks {
        let outcome = task.await.unwrap().expect("every upsert succeeds");
        assert!(
            matches!(
                outcome,
                Outcome::Inserted | Outcome::Updated | Outcome::Stale
            ),
            "{outcome:?}"
        );
    }
    let documents = stored(&store).await;
    assert_eq!(documents.len(), 1);
    assert_eq!(documents[0].get_i64("revision").unwrap(), 15);
}

#[tokio::test]
async fn collapsed_copies_share_the_fate_of_the_copy_that_was_sent() {
    let (store, _log) = store("batch_collapse_fate").await;
    store.upsert(&entry("gone", 1, "x")).await.unwrap();
    store
        .delete(&Entry {
            deleted_at: Some(1),
            ..entry("gone", 1, "x")
        })
        .await
        .unwrap();
    store.upsert(&entry("moved", 1, "x")).await.unwrap();
    let moved = Entry {
        created_at: 1,
        ..entry("moved", 2, "y")
    };
    let batch = vec![
        entry("gone", 1, "x"),
        entry("gone", 1, "x"),
        moved.clone(),
        moved,
    ];
    let report = store.upsert_many(&batch).await.unwrap();
    let outcomes = report.outcomes();
    assert!(
        matches!(outcomes[0], Ok(Outcome::Deleted)),
        "{:?}",
        outcomes[0]
    );
    assert!(
        matches!(outcomes[1], Ok(Outcome::Deleted)),
        "{:?}",
        outcomes[1]
    );
    assert!(
        matches!(
            &outcomes[2],
            Err(Error::FrozenFieldChanged {
                field: "created_at",
                ..
            })
        ),
        "{:?}",
        outcomes[2]
    );
    assert!(
        matches!(
            &outcomes[3],
            Err(Error::FrozenFieldChanged {
                field: "created_at",
                ..
            })
        ),
        "{:?}",
        outcomes[3]
    );
    assert_eq!(report.collapsed(), 2);
}

#[tokio::test]
async fn a_batch_write_that_a_newer_write_overtakes_after_its_read_is_stale() {
    let (store, _log) = store("batch_overtaken").await;
    store.upsert(&entry("e1", 1, "first")).await.unwrap();
    // The batch reads e1 at revision 1 and sends revision 2, which the server holds back while
    // revision 3 is written: the guard then leaves the document, and the batch must say so.
    delay_next(store.database(), "update", 1_000).await;
    let batch_store = store.clone();
    let batch = tokio::spawn(async move {
        batch_store
            .upsert_many(&[entry("e1", 2, "second")])
            .await
            .unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        store.upsert(&entry("e1", 3, "third")).await.unwrap(),
        Outcome::Updated
    );
    let report = batch.await.unwrap();
    assert!(
        matches!(report.outcomes(), [Ok(Outcome::Stale)]),
        "{:?}",
        report.outcomes()
    );
    let stored = stored(&store).await;
    assert_eq!(stored[0].get_i64("revision").unwrap(), 3);
    assert_eq!(stored[0].get_str("text").unwrap(), "third");
}
