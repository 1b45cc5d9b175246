//! Batch upserts on MongoDB as the server sees them: the commands a batch sends (one read and
//! one write per chunk, writes split by the size a command may carry), refusals told to their
//! own document across write commands, and a write that a fail point holds back while a newer
//! one lands. What replays and batches do (the stale guard, deletion markers, batches that agree
//! with single upserts, racing clients) is the same on every backend and tested on each in the
//! contract suite (`contract/`).

use idem_core::mongo::Store;
use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::fixtures::{entry, Entry};
use idem_tests::{delay_next, fail_point_lock, fresh_database, stored_documents, CommandLog};
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
                    outcome.as_ref().map_err(Error::kind),
                    Err(ErrorKind::FrozenFieldChanged {
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

#[tokio::test]
async fn a_batch_write_that_a_newer_write_overtakes_after_its_read_is_stale() {
    let (store, _log) = store("batch_overtaken").await;
    store.upsert(&entry("e1", 1, "first")).await.unwrap();
    // The batch reads e1 at revision 1 and sends revision 2, which the server holds back while
    // revision 3 is written: the guard then leaves the document, and the batch must say so.
    let _fail_point = fail_point_lock().lock().await;
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
