//! The store with every timestamp type and with generic documents: what the derive accepts, the
//! server stores and reads back. (A sub-millisecond change of a timestamp, which keeps the id, is
//! refused on every backend: the contract suite's `contract/frozen.rs`.)

use idem_core::mongo::Store;
use idem_core::{Idempotent, Outcome};
use idem_tests::{fresh_database, stored_documents};
use serde::{Deserialize, Serialize};

macro_rules! timestamp_type_round_trip {
    ($test:ident, $ty:ty, $value:expr) => {
        #[tokio::test]
        async fn $test() {
            #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
            #[idem(collection = "events")]
            struct Event {
                #[idem(key)]
                name: String,
                #[idem(timestamp)]
                at: $ty,
            }
            let (database, _log) = fresh_database(stringify!($test)).await;
            let store = Store::new(database);
            let event = Event {
                name: "launch".into(),
                at: $value,
            };
            assert_eq!(event.upsert(&store).await.unwrap(), Outcome::Inserted);
            assert_eq!(event.upsert(&store).await.unwrap(), Outcome::Unchanged);
            let read = store
                .collection::<Event>()
                .find_one(Default::default())
                .await
                .unwrap();
            assert_eq!(read, Some(event.clone()));
            assert_eq!(event.id().unwrap().timestamp_ms(), 1_700_000_000_123);
        }
    };
}

timestamp_type_round_trip!(unix_millis_i64, i64, 1_700_000_000_123);
timestamp_type_round_trip!(unix_millis_u64, u64, 1_700_000_000_123);
timestamp_type_round_trip!(
    bson_date_time,
    idem_core::mongodb::bson::DateTime,
    idem_core::mongodb::bson::DateTime::from_millis(1_700_000_000_123)
);
timestamp_type_round_trip!(
    chrono_date_time,
    chrono::DateTime<chrono::Utc>,
    chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap()
);
timestamp_type_round_trip!(
    time_offset_date_time,
    time::OffsetDateTime,
    time::OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_000_000).unwrap()
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "envelopes")]
struct Envelope<K, P> {
    #[idem(key)]
    key: K,
    payload: P,
}

#[tokio::test]
async fn generic_documents_upsert_like_any_other() {
    let (database, _log) = fresh_database("generic").await;
    let store = Store::new(database);
    let first = Envelope {
        key: 42i64,
        payload: vec!["a".to_string()],
    };
    assert_eq!(first.upsert(&store).await.unwrap(), Outcome::Inserted);
    let second = Envelope {
        payload: vec!["a".to_string(), "b".to_string()],
        ..first.clone()
    };
    assert_eq!(second.upsert(&store).await.unwrap(), Outcome::Updated);
    assert_eq!(second.upsert(&store).await.unwrap(), Outcome::Unchanged);
    let stored = stored_documents(store.database(), "envelopes").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].get_str("_id").unwrap(),
        first.id().unwrap().to_string()
    );
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    id: String,
    body: String,
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "notes", hash_algorithm = "blake3")]
struct NoteWithBlake3 {
    #[idem(key)]
    id: String,
    body: String,
}

#[tokio::test]
async fn switching_the_hash_algorithm_rewrites_each_document_once() {
    let (database, log) = fresh_database("hash_algorithm_switch").await;
    let store = Store::new(database);
    let note = Note {
        id: "n1".into(),
        body: "text".into(),
    };
    assert_eq!(store.upsert(&note).await.unwrap(), Outcome::Inserted);
    let switched = NoteWithBlake3 {
        id: note.id.clone(),
        body: note.body.clone(),
    };
    assert_eq!(
        switched.id().unwrap(),
        note.id().unwrap(),
        "the id does not depend on the hash"
    );
    let _ = log.take();
    // The stored SHA-256 hash never equals a BLAKE3 one: one rewrite, never a wrong Unchanged.
    assert_eq!(store.upsert(&switched).await.unwrap(), Outcome::Updated);
    assert_eq!(store.upsert(&switched).await.unwrap(), Outcome::Unchanged);
    let stored = stored_documents(store.database(), "notes").await;
    assert!(stored[0]
        .get_str("sourceHash")
        .unwrap()
        .starts_with("blake3:"));
}
