//! Cases whose input exists on MongoDB only: its 16 MiB limit on a BSON document (PostgreSQL
//! has none; its counterpart, a value a table cannot hold, is in `postgres_only.rs`), unique
//! indexes made through the MongoDB driver (PostgreSQL's unique constraints and table check are
//! in `postgres.rs` and `pg_schema.rs`), and `$rename`, a MongoDB update operator (a PostgreSQL
//! `Change` names the one column it changes), and an integer above `i64::MAX`, which BSON cannot
//! hold (run on every backend, showing the SQL stores keeping it). The others use
//! `idem_core::mongo::Store` directly.

use idem_core::mongo::{Store, NATURAL_KEY_INDEX};
use idem_core::{Applied, Error, ErrorKind, Idempotent, OpId, Outcome};
use idem_tests::{fresh_database, raw_documents as raw, stored_documents, CommandLog};
use mongodb::bson::{self, doc, Document};
use mongodb::options::IndexOptions;
use mongodb::IndexModel;
use serde::Serialize;

use crate::support::{
    assert_nothing_sent, ledger, oversized_post, scored_post, serialized, small_upload, text_key,
    Ledger, ScoredPost, Upload,
};

/// A MongoDB store on a fresh database of its own, for the cases only MongoDB has.
async fn store(test: &str) -> (Store, CommandLog) {
    let (database, log) = fresh_database(test).await;
    (Store::new(database), log)
}

// ---------------------------------------------------------------------------------------------
// Size

/// MongoDB's limit on a stored document.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// What an upsert sets today: serde's document without the pushed list and the tombstone (owned
/// by their routes), with the content hash.
fn upserted_fields(upload: &Upload) -> Document {
    let mut body = serialized(upload);
    body.remove("reviews_from_the_moderation_team");
    body.remove("removed_at");
    body.insert("sourceHash", upload.content_hash().unwrap().to_hex());
    body
}

fn bson_len(document: &Document) -> usize {
    bson::to_vec(document).unwrap().len()
}

/// Promise catalogue case 10, the size check counts every byte of the stored form: a document over
/// the limit only with the bytes idem adds is too large.
///
/// MongoDB only: the limit is MongoDB's 16 MiB on a BSON document, and the bytes idem adds are
/// those of MongoDB's stored form. PostgreSQL's counterpart, a value its table cannot hold, is
/// `a_natural_key_too_long_for_the_unique_index_fails_alone_with_nothing_written` in
/// `postgres_only.rs`.
#[tokio::test]
async fn a_document_over_the_limit_only_with_the_bytes_idem_adds_is_too_large() {
    let (store, _log) = store("p10_size_with_idem_bytes").await;
    let mut upload = Upload {
        name: "big.bin".into(),
        payload: String::new(),
        reviews_from_the_moderation_team: Vec::new(),
        removed_at: None,
    };
    // Fill the payload until the fields an upsert sets, with 40 bytes of room for the `_id`, are
    // exactly at the limit: the stored form also holds the empty pushed list, and is over it.
    let room = MAX_DOCUMENT_BYTES - 40 - bson_len(&upserted_fields(&upload));
    upload.payload = "x".repeat(room);
    assert_eq!(bson_len(&upserted_fields(&upload)) + 40, MAX_DOCUMENT_BYTES);
    let mut stored_form = doc! { "_id": upload.id().unwrap().to_string() };
    stored_form.extend(upserted_fields(&upload));
    stored_form.insert(
        "reviews_from_the_moderation_team",
        bson::Bson::Array(Vec::new()),
    );
    assert!(bson_len(&stored_form) > MAX_DOCUMENT_BYTES);

    let expect_too_large =
        |result: &Result<Outcome, Error>| match result.as_ref().map_err(Error::kind) {
            Err(ErrorKind::DocumentTooLarge { size, limit, .. }) => {
                assert_eq!(*limit, MAX_DOCUMENT_BYTES);
                assert!(size > limit, "size {size}");
            }
            other => panic!("expected DocumentTooLarge, got {other:?}"),
        };
    expect_too_large(&store.upsert(&upload).await);
    assert!(raw(store.database(), "uploads").await.is_empty());

    // In a batch it is refused alone, as upserting the documents one by one would refuse it.
    let report = store
        .upsert_many(&[small_upload("a"), upload, small_upload("b")])
        .await
        .unwrap();
    let outcomes = report.outcomes();
    assert!(matches!(outcomes[0], Ok(Outcome::Inserted)), "{outcomes:?}");
    expect_too_large(&outcomes[1]);
    assert!(matches!(outcomes[2], Ok(Outcome::Inserted)), "{outcomes:?}");
    assert_eq!(stored_documents(store.database(), "uploads").await.len(), 2);
}

#[tokio::test]
async fn a_document_over_16_mib_is_refused_before_anything_is_sent() {
    let (store, log) = store("too_large").await;
    store.upsert(&scored_post("kept")).await.unwrap();
    let before = raw(store.database(), "posts").await;
    let _ = log.take();

    let error = store.upsert(&oversized_post("big")).await.unwrap_err();
    match error.kind() {
        ErrorKind::DocumentTooLarge { size, limit } => {
            assert_eq!(*limit, 16 * 1024 * 1024);
            assert!(size > limit, "{size} > {limit}");
            assert_eq!(
                error.document().natural_key.parts(),
                [text_key("slug", "big"), text_key("lang", "en")]
            );
        }
        _ => panic!("expected DocumentTooLarge, got {error:?}"),
    }
    assert_nothing_sent(&log);
    // An edit of a stored document that would grow it past the limit: refused the same way.
    assert!(matches!(
        store
            .upsert(&oversized_post("kept"))
            .await
            .map_err(Error::into_kind),
        Err(ErrorKind::DocumentTooLarge { .. })
    ));
    assert_nothing_sent(&log);
    assert_eq!(raw(store.database(), "posts").await, before);
}

/// The BSON size of `post` as stored: its fields, `_id`, the content hash, the digests of its
/// timestamp and frozen field (64 hex digits each), and the write marker (`i:` and a ULID).
/// Only the lengths of idem's values matter here, not the values.
fn stored_size(post: &ScoredPost) -> usize {
    let mut stored = bson::to_document(post).unwrap();
    stored.insert("_id", post.id().unwrap().to_string());
    stored.insert("sourceHash", post.content_hash().unwrap().to_hex());
    let digest = "0".repeat(64);
    stored.insert(
        "idemFrozen",
        doc! { "publishedAt": digest.as_str(), "authorId": digest.as_str() },
    );
    stored.insert("idemWrite", format!("i:{}", "0".repeat(26)));
    bson::to_vec(&stored).unwrap().len()
}

/// A post whose stored document is `size` bytes.
fn post_of_stored_size(slug: &str, size: usize) -> ScoredPost {
    let small = scored_post(slug);
    let overhead = stored_size(&small) - small.body.len();
    ScoredPost {
        body: "x".repeat(size - overhead),
        ..small
    }
}

#[tokio::test]
async fn the_largest_document_idem_accepts_is_one_the_server_stores() {
    let (store, log) = store("size_limit").await;
    // idem measures the whole document it stores, with the fields it adds: the largest it
    // sends is exactly the server's limit.
    let largest = 16 * 1024 * 1024;
    let at_limit = post_of_stored_size("at-limit", largest);
    assert_eq!(stored_size(&at_limit), largest);
    assert_eq!(store.upsert(&at_limit).await.unwrap(), Outcome::Inserted);
    let stored = stored_documents(store.database(), "posts").await;
    assert_eq!(bson::to_vec(&stored[0]).unwrap().len(), largest);
    let _ = log.take();

    // One byte more is refused before sending.
    let over = post_of_stored_size("over", largest + 1);
    assert!(matches!(
        store.upsert(&over).await.map_err(Error::into_kind),
        Err(ErrorKind::DocumentTooLarge { .. })
    ));
    assert_nothing_sent(&log);

    // In a batch, the same document is a chunk of its own, and stored.
    let report = store
        .upsert_many(&[
            scored_post("small"),
            post_of_stored_size("at-limit-2", largest),
            over,
        ])
        .await
        .unwrap();
    assert!(
        matches!(
            report.outcomes(),
            [Ok(Outcome::Inserted), Ok(Outcome::Inserted), Err(error)]
                if matches!(error.kind(), ErrorKind::DocumentTooLarge { .. })
        ),
        "{:?}",
        report.outcomes()
    );
    assert_eq!(stored_documents(store.database(), "posts").await.len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Integers BSON cannot hold

/// A counter whose count may exceed `i64::MAX`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "counters")]
struct Counter {
    #[idem(key)]
    name: String,
    count: u64,
}

/// A `u64` above `i64::MAX` is refused on MongoDB, whose BSON has no such integer, naming the
/// document and the field, nothing sent, the rest of its batch written; the SQL stores keep it
/// (in a JSON column) and read it back. Run on every backend.
#[tokio::test]
async fn an_integer_above_i64_max_is_stored_where_the_backend_can_hold_it_and_refused_elsewhere() {
    for db in idem_tests::backends::fresh_backends("u64_max").await {
        db.ensure::<Counter>().await;
        let huge = Counter {
            name: "huge".into(),
            count: u64::MAX,
        };
        let fine = Counter {
            name: "fine".into(),
            count: i64::MAX as u64,
        };
        crate::support::forget_commands(&db);
        let single = db.upsert(&huge).await;
        if let idem_tests::backends::Db::Mongo { .. } = &db {
            crate::support::assert_db_sent_nothing(&db);
        }
        let report = db.upsert_many(&[huge.clone(), fine.clone()]).await.unwrap();
        assert_eq!(
            report.outcomes()[1].as_ref().unwrap(),
            &Outcome::Inserted,
            "{db}"
        );
        match &db {
            idem_tests::backends::Db::Mongo { .. } => {
                for refused in [
                    single.unwrap_err(),
                    report.outcomes()[0].clone().unwrap_err(),
                ] {
                    assert!(
                        matches!(refused.kind(), ErrorKind::Serialize { .. }),
                        "{db}: {refused}"
                    );
                    let shown = refused.to_string();
                    assert!(
                        shown.contains("{name: \"huge\"}") && shown.contains("field count:"),
                        "{db}: {shown}"
                    );
                }
                assert_eq!(db.stored::<Counter>().await.len(), 1, "{db}: the fine one");
            }
            _ => {
                assert_eq!(single.unwrap(), Outcome::Inserted, "{db}");
                assert_eq!(
                    report.outcomes()[0].as_ref().unwrap(),
                    &Outcome::Unchanged,
                    "{db}"
                );
                let read = db.get::<Counter>(huge.id().unwrap()).await.unwrap();
                assert_eq!(read, Some(huge.clone()), "{db}: read back whole");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Unique indexes made through the driver

/// Creates a unique index named `name` on `keys` in `collection`, as an application (or an
/// older version of it) would.
async fn unique_index(store: &Store, collection: &str, keys: Document, name: &str) {
    let options = IndexOptions::builder()
        .name(name.to_owned())
        .unique(true)
        .build();
    store
        .database()
        .collection::<Document>(collection)
        .create_index(IndexModel::builder().keys(keys).options(options).build())
        .await
        .unwrap();
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

fn assert_unique_index_conflict(result: &Result<Outcome, Error>, expected_index: &str) {
    match result {
        Err(error) => match error.kind() {
            ErrorKind::UniqueIndexConflict { index, .. } => {
                assert_eq!(index, expected_index);
                assert!(
                    !error.is_retryable(),
                    "the same write meets the same index every time"
                );
            }
            _ => panic!("expected UniqueIndexConflict on {expected_index}, got {error:?}"),
        },
        other => panic!("expected UniqueIndexConflict on {expected_index}, got {other:?}"),
    }
}

/// Promise catalogue case 5: a duplicate key from any index but the natural key is a refusal
/// naming that index.
///
/// MongoDB only: the application's unique index is created through the MongoDB driver.
/// PostgreSQL's counterpart, a unique constraint added to the table, is
/// `another_unique_constraint_is_a_refusal_naming_it_and_spares_the_rest_of_a_batch` in
/// `postgres.rs`.
#[tokio::test]
async fn a_duplicate_on_another_unique_index_is_a_refusal_naming_that_index() {
    let (store, _log) = store("p5_unique_email").await;
    store.ensure_indexes::<Member>().await.unwrap();
    unique_index(&store, "members", doc! { "email": 1 }, "email_unique").await;
    let ada = Member {
        handle: "ada".into(),
        email: "ada@example.com".into(),
    };
    assert_eq!(store.upsert(&ada).await.unwrap(), Outcome::Inserted);
    let before = raw(store.database(), "members").await;

    // Another member with the same email: the application's index says no, every time.
    let impostor = Member {
        handle: "grace".into(),
        ..ada.clone()
    };
    assert_unique_index_conflict(&store.upsert(&impostor).await, "email_unique");
    let report = store
        .upsert_many(std::slice::from_ref(&impostor))
        .await
        .unwrap();
    assert_unique_index_conflict(&report.outcomes()[0], "email_unique");
    assert_eq!(raw(store.database(), "members").await, before);
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "seats")]
struct Seat {
    #[idem(key)]
    venue: String,
    #[idem(key)]
    seat: String,
    holder: String,
}

/// Promise catalogue case 5: a natural-key index left by an older key set is found by the check
/// before the first write, which names it and its keys: no write is attempted, so none is refused
/// one by one.
///
/// MongoDB only: the stale index is MongoDB's `NATURAL_KEY_INDEX`, created through the driver.
/// PostgreSQL's counterpart, a table without a unique constraint on exactly the natural key, is
/// `a_table_that_does_not_match_the_model_is_refused_before_any_write` in `postgres.rs`.
#[tokio::test]
async fn a_stale_natural_key_index_is_refused_before_any_write_naming_it() {
    let (store, _log) = store("p5_stale_natural_key").await;
    // Left by an older version of the type, whose only key was the venue.
    unique_index(&store, "seats", doc! { "venue": 1 }, NATURAL_KEY_INDEX).await;
    let seat = |seat: &str| Seat {
        venue: "hall".into(),
        seat: seat.into(),
        holder: "ada".into(),
    };
    let before = raw(store.database(), "seats").await;
    for attempt in [
        store.upsert(&seat("1a")).await,
        store.upsert(&seat("1b")).await,
    ] {
        match attempt {
            Err(error) if matches!(error.kind(), ErrorKind::SchemaMismatch { .. }) => {
                let message = error.to_string();
                assert!(message.contains(NATURAL_KEY_INDEX), "{message}");
                assert!(
                    message.contains("venue") && message.contains("seat"),
                    "{message}"
                );
                assert!(!error.is_retryable() && !error.is_refusal(), "{message}");
            }
            other => panic!("expected SchemaMismatch, got {other:?}"),
        }
    }
    assert_eq!(raw(store.database(), "seats").await, before);
}

// ---------------------------------------------------------------------------------------------
// Update operators

/// Promise catalogue case 14: `apply_once` refuses renaming an effect field out of the effect
/// fields.
///
/// MongoDB only: `$rename` is a MongoDB update operator (`apply_update_once`); a `Change` names
/// the one field it changes, refused unless it is an effect field (the other case-14 tests, in
/// `apply_once.rs`).
#[tokio::test]
async fn apply_once_refuses_renaming_an_effect_field_out_of_the_effect_fields() {
    // The balance would move to a field the next upsert overwrites or drops.
    let (store, _log) = store("p14_rename").await;
    store.upsert(&ledger("Ada")).await.unwrap();
    let id = ledger("Ada").id().unwrap();
    let before = raw(store.database(), "ledgers").await;
    let op = OpId::from("op-1");
    let rename = doc! { "$rename": { "balance": "owner" } };
    match store
        .apply_update_once::<Ledger>(id, &op, rename)
        .await
        .map_err(Error::into_kind)
    {
        Err(ErrorKind::NotAnEffectField { path, .. }) => assert_eq!(path, "owner"),
        other => panic!("expected NotAnEffectField \"owner\", got {other:?}"),
    }
    assert_eq!(raw(store.database(), "ledgers").await, before);
    assert_eq!(
        store
            .apply_update_once::<Ledger>(id, &op, doc! { "$inc": { "balance": 5_i64 } })
            .await
            .unwrap(),
        Applied::Applied
    );
    let stored = stored_documents(store.database(), "ledgers").await;
    assert_eq!(stored[0].get_i64("balance").unwrap(), 5);
}

/// A server's refusal reads as one line, its code and what the server said, not the driver's
/// dump of the raw reply in hex.
#[tokio::test]
async fn a_server_refusal_reads_as_its_code_and_message() {
    let (store, _log) = store("server_refusal_shown").await;
    store.upsert(&ledger("Ada")).await.unwrap();
    let id = ledger("Ada").id().unwrap();
    let refused = store
        .apply_update_once::<Ledger>(id, &OpId::from("op-1"), doc! { "$push": { "balance": 1 } })
        .await
        .unwrap_err();
    let shown = refused.to_string();
    assert!(
        matches!(refused.kind(), ErrorKind::Backend { .. })
            && shown.contains("MongoDB: the server refused the write (code ")
            && !shown.contains("RawDocumentBuf"),
        "{shown}"
    );
}
