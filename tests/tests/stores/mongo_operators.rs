//! MongoDB without update pipelines: a store told so (or that learns it from the server's
//! refusal of the first one) writes with operators only, in more round trips, and leaves
//! exactly what a store with pipelines leaves. The whole shared suite also runs on such a
//! store (`mongodb-operators` in `idem_tests::backends`); this file holds what only it has:
//! the commands sent, and the switch when a server refuses a pipeline.

use idem_core::mongo::Store;
use idem_core::{Applied, Change, Deletion, OpId, Outcome};
use idem_tests::fixtures::{account, entry, post, Account, Entry, Payment, Post};
use idem_tests::{fail_point_lock, fresh_database, refuse_next, stored_documents, CommandLog};
use mongodb::bson::{doc, Document};

/// MongoDB's `NotImplemented`, as FerretDB answers an update pipeline.
const NOT_IMPLEMENTED: i32 = 238;
/// MongoDB's `FailedToParse`, as MongoDB before 4.2 answers an update that is an array.
const FAILED_TO_PARSE: i32 = 9;

/// The stored documents of `collection`, without what differs between any two stores: the
/// write markers (random per write) and an event's id (random per event).
async fn stored_without_markers(store: &Store, collection: &str) -> Vec<Document> {
    stored_documents(store.database(), collection)
        .await
        .into_iter()
        .map(|mut stored| {
            stored.remove("idemWrite");
            if collection == "payments" {
                stored.remove("_id");
            }
            stored
        })
        .collect()
}

/// The outcome of each document of an `upsert_many` that refuses none.
async fn batch_outcomes(store: &Store, docs: &[Entry]) -> Vec<Outcome> {
    store
        .upsert_many(docs)
        .await
        .unwrap()
        .into_outcomes()
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// The text of each stored entry.
async fn entry_texts(store: &Store) -> Vec<String> {
    stored_documents(store.database(), "entries")
        .await
        .iter()
        .map(|stored| stored.get_str("text").unwrap().to_owned())
        .collect()
}

/// One sequence of every write primitive, with the outcomes it must give.
async fn write_everything(store: &Store) {
    let first = post();
    assert_eq!(store.upsert(&first).await.unwrap(), Outcome::Inserted);
    assert_eq!(store.upsert(&first).await.unwrap(), Outcome::Unchanged);
    let edited = Post {
        title: "Hello again".into(),
        ..first.clone()
    };
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
    let batch = [
        entry("e1", 1, "one"),
        entry("e2", 1, "two"),
        entry("e1", 2, "one, edited"),
        entry("e1", 1, "one"),
    ];
    let outcomes = batch_outcomes(store, &batch).await;
    assert_eq!(
        outcomes,
        [
            Outcome::Inserted,
            Outcome::Inserted,
            Outcome::Updated,
            Outcome::Stale
        ]
    );
    let deleted = Entry {
        deleted_at: Some(5),
        ..entry("e2", 1, "two")
    };
    assert_eq!(store.delete(&deleted).await.unwrap(), Deletion::Deleted);
    assert_eq!(
        store.upsert(&entry("e2", 2, "back")).await.unwrap(),
        Outcome::Deleted
    );
    // An effect field moved by `apply_once` stays as it moved when the document is replaced.
    let ada = account("ada");
    store.upsert(&ada).await.unwrap();
    let credit = OpId::new("credit-1");
    let applied = store
        .apply_once::<Account>(ada.id().unwrap(), &credit, &[Change::add("balance", 7)])
        .await
        .unwrap();
    assert_eq!(applied, Applied::Applied);
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 100,
    };
    assert_eq!(store.upsert(&payment).await.unwrap(), Outcome::Inserted);
    assert_eq!(store.upsert(&payment).await.unwrap(), Outcome::Unchanged);
}

#[tokio::test]
async fn without_update_pipelines_no_pipeline_is_sent_and_the_same_documents_are_stored() {
    let (with, with_log) = fresh_database("ops_same_with").await;
    let (without, without_log) = fresh_database("ops_same_without").await;
    let with = Store::new(with);
    let without = Store::new(without).with_update_pipelines(false);
    for (store, log) in [(&with, &with_log), (&without, &without_log)] {
        store.ensure_indexes::<Post>().await.unwrap();
        store.ensure_indexes::<Entry>().await.unwrap();
        store.ensure_indexes::<Account>().await.unwrap();
        store.ensure_indexes::<Payment>().await.unwrap();
        let _ = log.take();
        write_everything(store).await;
    }
    assert!(
        with_log.take().update_pipelines > 0,
        "the control sends pipelines"
    );
    assert_eq!(without_log.take().update_pipelines, 0);
    for collection in ["posts", "entries", "accounts", "payments"] {
        assert_eq!(
            stored_without_markers(&without, collection).await,
            stored_without_markers(&with, collection).await,
            "{collection}"
        );
    }
}

/// The round trips a single upsert takes without pipelines: a read, then an insert or a pinned
/// replacement, and nothing more when the document is unchanged.
#[tokio::test]
async fn a_single_upsert_without_pipelines_reads_then_writes_only_what_changed() {
    let (database, log) = fresh_database("ops_round_trips").await;
    let store = Store::new(database).with_update_pipelines(false);
    store.ensure_indexes::<Post>().await.unwrap();
    let names = |log: &CommandLog| log.take().names;
    let _ = log.take();
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
    assert_eq!(names(&log), ["find", "insert"]);
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Unchanged);
    assert_eq!(names(&log), ["find"]);
    let edited = Post {
        body: "Edited.".into(),
        ..post()
    };
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
    assert_eq!(names(&log), ["find", "update"]);
}

/// A server that refuses the first pipeline (FerretDB's `NotImplemented`, armed here with a
/// fail point) gets the same write again with operators, and none after: the call answers as if
/// nothing happened.
#[tokio::test]
async fn a_refused_update_pipeline_switches_the_store_to_operators_for_good() {
    let (database, log) = fresh_database("ops_learned_single").await;
    let store = Store::new(database.clone());
    store.ensure_indexes::<Post>().await.unwrap();
    let _fail_point = fail_point_lock().lock().await;
    refuse_next(&database, "findAndModify", NOT_IMPLEMENTED).await;
    let _ = log.take();
    assert!(store.uses_update_pipelines());
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
    assert!(!store.uses_update_pipelines());
    let clone = store.clone();
    assert!(
        !clone.uses_update_pipelines(),
        "clones share what was learned"
    );
    let edited = Post {
        title: "Edited".into(),
        ..post()
    };
    assert_eq!(clone.upsert(&edited).await.unwrap(), Outcome::Updated);
    let commands = log.take();
    assert_eq!(commands.update_pipelines, 1, "{:?}", commands.names);
    assert_eq!(
        commands.names,
        ["findAndModify", "insert", "find", "update"]
    );
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get_str("title").unwrap(), "Edited");
}

/// A request over the rate the service grants (Azure Cosmos DB for MongoDB's 16500, armed here
/// with a fail point) ran nothing: the write is reported retryable, the store keeps its update
/// pipelines, and the same call made again answers as if the first had not been refused.
#[tokio::test]
async fn a_throttled_write_is_retryable_and_converges_when_made_again() {
    const REQUEST_RATE_TOO_LARGE: i32 = 16500;
    let (database, _log) = fresh_database("throttled").await;
    let store = Store::new(database.clone());
    store.ensure_indexes::<Post>().await.unwrap();
    let _fail_point = fail_point_lock().lock().await;
    refuse_next(&database, "findAndModify", REQUEST_RATE_TOO_LARGE).await;
    let refused = store.upsert(&post()).await.unwrap_err();
    assert!(refused.is_retryable(), "{refused:?}");
    assert!(stored_documents(store.database(), "posts").await.is_empty());
    assert!(store.uses_update_pipelines());
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Unchanged);
}

/// The same for a batch whose `update` command MongoDB before 4.2 refuses (`FailedToParse`):
/// every document of it is written with operators, and its report is the one it would give.
#[tokio::test]
async fn a_batch_whose_update_pipelines_are_refused_is_written_with_operators() {
    let (database, log) = fresh_database("ops_learned_batch").await;
    let store = Store::new(database.clone());
    store.ensure_indexes::<Entry>().await.unwrap();
    store.upsert_many(&[entry("e0", 1, "zero")]).await.unwrap();
    let _fail_point = fail_point_lock().lock().await;
    refuse_next(&database, "update", FAILED_TO_PARSE).await;
    let _ = log.take();
    let batch = [
        entry("e0", 2, "zero, edited"),
        entry("e1", 1, "one"),
        entry("e2", 1, "two"),
    ];
    let outcomes = batch_outcomes(&store, &batch).await;
    assert_eq!(
        outcomes,
        [Outcome::Updated, Outcome::Inserted, Outcome::Inserted]
    );
    assert!(!store.uses_update_pipelines());
    let texts = entry_texts(&store).await;
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(texts.iter().any(|text| text == "zero, edited"), "{texts:?}");
    // The refused command's three statements, and none after.
    assert_eq!(log.take().update_pipelines, 3);
}

/// A batch whose first pipeline is the pinned step over a document another tool stored (no
/// digests, so the server guard cannot judge it) learns the refusal there, and settles every
/// document with operators.
#[tokio::test]
async fn a_refused_pinned_step_over_another_tools_document_switches_the_batch() {
    let (database, log) = fresh_database("ops_learned_pinned").await;
    let store = Store::new(database.clone());
    store.ensure_indexes::<Entry>().await.unwrap();
    let foreign = entry("e0", 1, "zero");
    database
        .collection::<Document>("entries")
        .insert_one(doc! {
            "_id": foreign.id().unwrap().to_string(),
            "userId": "u1",
            "entryId": "e0",
            "createdAt": foreign.created_at,
            "revision": 1_i64,
            "text": "zero",
        })
        .await
        .unwrap();
    let _fail_point = fail_point_lock().lock().await;
    refuse_next(&database, "update", NOT_IMPLEMENTED).await;
    let outcomes = batch_outcomes(
        &store,
        &[entry("e0", 2, "zero, edited"), entry("e1", 1, "one")],
    )
    .await;
    assert_eq!(outcomes, [Outcome::Updated, Outcome::Inserted]);
    assert!(!store.uses_update_pipelines(), "{:?}", log.take().names);
    let texts = entry_texts(&store).await;
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts.iter().any(|text| text == "zero, edited"), "{texts:?}");
}
