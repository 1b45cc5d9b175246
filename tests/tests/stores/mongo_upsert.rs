//! `Store::upsert` against a real server: outcomes, round trips, guards, and the stored form.
//! (Racing upserts and a lost acknowledgement, the same on every backend: the contract suite's
//! `races.rs`.)

use idem_core::mongo::{Store, NATURAL_KEY_INDEX};
use idem_core::{Error, ErrorKind, Outcome};
use idem_tests::fixtures::{post, Post};
use idem_tests::{fresh_database, raw_documents, stored_documents};
use mongodb::bson::{doc, Document};

async fn indexed_store(test: &str) -> (Store, idem_tests::CommandLog) {
    let (database, log) = fresh_database(test).await;
    let store = Store::new(database);
    store
        .ensure_indexes::<Post>()
        .await
        .expect("creating the natural-key index");
    let _ = log.take();
    (store, log)
}

#[tokio::test]
async fn first_write_inserts_in_one_round_trip() {
    let (store, log) = indexed_store("insert_one_round_trip").await;
    assert_eq!(post().upsert(&store).await.unwrap(), Outcome::Inserted);
    let commands = log.take();
    assert_eq!(commands.names, ["findAndModify"]);
    assert_eq!(commands.documents_written, 1);
}

#[tokio::test]
async fn changed_content_updates_in_one_round_trip() {
    let (store, log) = indexed_store("update_one_round_trip").await;
    store.upsert(&post()).await.unwrap();
    let _ = log.take();
    let edited = Post {
        body: "First post, edited.".into(),
        ..post()
    };
    assert_eq!(store.upsert(&edited).await.unwrap(), Outcome::Updated);
    let commands = log.take();
    assert_eq!(commands.names, ["findAndModify"]);
    // A `findAndModify` reply does not say whether it replaced: the stored hash below does.
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get_str("body").unwrap(), "First post, edited.");
    assert_eq!(
        stored[0].get_str("sourceHash").unwrap(),
        edited.content_hash().unwrap().to_hex()
    );
}

#[tokio::test]
async fn unchanged_content_writes_nothing_in_one_round_trip() {
    let (store, log) = indexed_store("unchanged").await;
    store.upsert(&post()).await.unwrap();
    let before = stored_documents(store.database(), "posts").await;
    let _ = log.take();
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Unchanged);
    let commands = log.take();
    assert_eq!(commands.names, ["findAndModify"], "{commands:?}");
    assert_eq!(commands.documents_written, 0, "{commands:?}");
    assert_eq!(stored_documents(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_volatile_change_alone_writes_nothing() {
    let (store, log) = indexed_store("volatile").await;
    store.upsert(&post()).await.unwrap();
    let before = stored_documents(store.database(), "posts").await;
    let _ = log.take();
    let refetched = Post {
        fetched_at: 1_800_000_000_000,
        ..post()
    };
    assert_eq!(store.upsert(&refetched).await.unwrap(), Outcome::Unchanged);
    assert_eq!(log.take().documents_written, 0);
    assert_eq!(stored_documents(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_changed_frozen_field_is_refused_and_the_stored_document_is_intact() {
    let (store, log) = indexed_store("frozen").await;
    store.upsert(&post()).await.unwrap();
    let before = stored_documents(store.database(), "posts").await;
    let _ = log.take();
    let reassigned = Post {
        author_id: "bob".into(),
        body: "Rewritten.".into(),
        ..post()
    };
    let error = store.upsert(&reassigned).await.unwrap_err();
    match error.kind() {
        ErrorKind::FrozenFieldChanged {
            stored_id,
            field,
            stored_name,
            stored,
            incoming,
        } => {
            assert_eq!(error.document().collection, "posts");
            assert_eq!(
                error.document().natural_key.to_string(),
                r#"{slug: "hello-world", lang: "en"}"#
            );
            assert_eq!(*stored_id, post().id().unwrap().to_string());
            assert_eq!(*field, "author_id");
            assert_eq!(*stored_name, "authorId");
            assert_eq!(stored, r#""ada""#);
            assert_eq!(incoming, r#""bob""#);
            // The message leads to the struct's field and to the stored document's.
            let message = error.to_string();
            assert!(
                message.contains("field `author_id` (stored as `authorId`)"),
                "{message}"
            );
        }
        other => panic!("expected FrozenFieldChanged, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("author_id") && message.contains("hello-world"),
        "{message}"
    );
    assert_eq!(log.take().documents_written, 0);
    assert_eq!(stored_documents(store.database(), "posts").await, before);
}

#[tokio::test]
async fn a_changed_timestamp_is_refused_because_it_would_orphan_the_document() {
    let (store, log) = indexed_store("orphan").await;
    store.upsert(&post()).await.unwrap();
    let before = stored_documents(store.database(), "posts").await;
    let _ = log.take();
    let moved = Post {
        published_at: 1_700_000_000_001,
        ..post()
    };
    assert_ne!(moved.id().unwrap(), post().id().unwrap());
    match store.upsert(&moved).await.unwrap_err().into_kind() {
        ErrorKind::FrozenFieldChanged {
            stored_id,
            field,
            stored,
            incoming,
            ..
        } => {
            assert_eq!(stored_id, post().id().unwrap().to_string());
            assert_eq!(field, "published_at");
            assert_eq!(stored, "1700000000000");
            assert_eq!(incoming, "1700000000001");
        }
        other => panic!("expected FrozenFieldChanged, got {other:?}"),
    }
    let commands = log.take();
    assert_eq!(commands.documents_written, 0, "{commands:?}");
    // The refused update, the read by `_id` that finds nothing, the read by natural key.
    assert_eq!(commands.round_trips(), 3, "{commands:?}");
    assert_eq!(stored_documents(store.database(), "posts").await, before);
}

#[tokio::test]
async fn stored_field_names_follow_serde() {
    let (store, _log) = indexed_store("serde_names").await;
    store.upsert(&post()).await.unwrap();
    let stored = stored_documents(store.database(), "posts").await;
    let names: Vec<&str> = stored[0].keys().map(String::as_str).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "_id",
            "authorId",
            "body",
            "fetchedAt",
            "idemFrozen",
            "idemWrite",
            "lang",
            "publishedAt",
            "slug",
            "sourceHash",
            "title"
        ]
    );
    assert_eq!(
        stored[0].get_str("_id").unwrap(),
        post().id().unwrap().to_string()
    );
    assert_eq!(stored[0].get_i64("publishedAt").unwrap(), 1_700_000_000_000);
    assert_eq!(
        stored[0].get_str("sourceHash").unwrap(),
        post().content_hash().unwrap().to_hex()
    );
    // The stored document reads back as the type, through the driver's own collection.
    let read: Post = store
        .collection::<Post>()
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, post());
}

#[tokio::test]
async fn ensure_indexes_creates_one_named_unique_index_and_is_idempotent() {
    let (store, _log) = indexed_store("indexes").await;
    store.ensure_indexes::<Post>().await.unwrap();
    Post::ensure_schema(&store).await.unwrap();
    let mut cursor = store
        .database()
        .collection::<Document>("posts")
        .list_indexes()
        .await
        .unwrap();
    let mut natural_key_indexes = Vec::new();
    while cursor.advance().await.unwrap() {
        let index = cursor.deserialize_current().unwrap();
        if index
            .options
            .as_ref()
            .and_then(|options| options.name.as_deref())
            == Some(NATURAL_KEY_INDEX)
        {
            natural_key_indexes.push(index);
        }
    }
    assert_eq!(natural_key_indexes.len(), 1);
    let index = &natural_key_indexes[0];
    assert_eq!(index.keys, doc! { "slug": 1, "lang": 1 });
    assert_eq!(index.options.as_ref().unwrap().unique, Some(true));
}

#[tokio::test]
async fn the_first_write_creates_a_missing_natural_key_index() {
    let (database, _log) = fresh_database("lazy_index").await;
    let store = Store::new(database);
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
    let names = store
        .database()
        .collection::<Document>("posts")
        .list_index_names()
        .await
        .unwrap();
    assert!(
        names.iter().any(|name| name == NATURAL_KEY_INDEX),
        "{names:?}"
    );
    // So a second store, racing with another timestamp, cannot fork the natural key.
    let other = Store::new(store.database().clone());
    let moved = Post {
        published_at: 1_600_000_000_000,
        ..post()
    };
    assert!(matches!(
        other.upsert(&moved).await.map_err(Error::into_kind),
        Err(ErrorKind::FrozenFieldChanged { .. })
    ));
    assert_eq!(stored_documents(store.database(), "posts").await.len(), 1);
}

/// `post()` as another tool stored it under the id idem derives: its fields, no content hash and
/// no digests, with `author_id` stored as `author`.
async fn store_without_idem(store: &Store, author: &str) -> Document {
    let mut stored = mongodb::bson::to_document(&post()).unwrap();
    stored.insert("_id", post().id().unwrap().to_string());
    stored.insert("title", "Written elsewhere");
    stored.insert("authorId", author);
    store
        .database()
        .collection::<Document>("posts")
        .insert_one(stored.clone())
        .await
        .unwrap();
    stored
}

#[tokio::test]
async fn a_document_another_tool_stored_is_compared_here_and_replaced_in_a_pinned_second_step() {
    let (store, log) = indexed_store("written_elsewhere").await;
    store_without_idem(&store, "ada").await;
    let _ = log.take();
    // The server guard cannot compare frozen values stored without digests, so it leaves the
    // document; compared here they are the same, and a second write pinned to what was read
    // replaces it.
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Updated);
    assert_eq!(log.take().names, ["findAndModify", "update"]);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].get_str("title").unwrap(), "Hello");
    assert!(stored[0].get_document("idemFrozen").is_ok());
    // From now on it is an idem document: one round trip, nothing written.
    let replaced = raw_documents(store.database(), "posts").await;
    let _ = log.take();
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Unchanged);
    assert_eq!(log.take().names, ["findAndModify"]);
    assert_eq!(raw_documents(store.database(), "posts").await, replaced);
}

#[tokio::test]
async fn a_changed_frozen_field_of_a_document_another_tool_stored_is_refused() {
    let (store, _log) = indexed_store("written_elsewhere_frozen").await;
    let before = store_without_idem(&store, "eve").await;
    match store.upsert(&post()).await.map_err(Error::into_kind) {
        Err(ErrorKind::FrozenFieldChanged {
            field,
            stored,
            incoming,
            ..
        }) => {
            assert_eq!(field, "author_id");
            assert_eq!((stored.as_str(), incoming.as_str()), ("\"eve\"", "\"ada\""));
        }
        other => panic!("expected FrozenFieldChanged, got {other:?}"),
    }
    assert_eq!(stored_documents(store.database(), "posts").await, [before]);
}
