//! Sixteen ways ordinary serde shapes and sequences once broke idem's promises, numbered 1 to 16:
//! one test per case, several where a case has several inputs, each run on every backend under
//! test (MongoDB, and each PostgreSQL server: see `idem_tests::backends`) unless its input only
//! exists on one, which its doc comment says. Each test asserts what the promise says must
//! happen: the outcome, or the exact refusal with its fields, and the stored document afterwards.
//! A refusal must leave the store exactly as it was, so every refusal compares the exact stored
//! state before and after ([`Db::raw`]: the bytes on MongoDB, each row's text and row version on
//! PostgreSQL).
//!
//! Inputs that the fix turns into compile errors have trybuild cases instead (see `ui.rs`):
//! `u64`, `u128`, `i128` and `usize` keys (case 11, `ui/types/key_*.rs`); `String`, float and
//! `Option` versions (cases 2 and 15, `ui/types/version_*.rs`); role fields stored under a name
//! with a `.` or a leading `$` (case 5), `hash_field = "_id"` and a field stored as
//! `idemAppliedOps` (case 9, `ui/names/`); key, timestamp and version fields with
//! `skip_serializing_if` (case 13, `ui/roles/*_with_skip_serializing_if.rs`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use idem_core::model::APPLIED_OPS_FIELD;
use idem_core::mongo::{Store, NATURAL_KEY_INDEX};
use idem_core::{Applied, Error, Id, Idempotent, OpId, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{entry, post, Entry, Payment, Post};
use idem_tests::{fresh_database, raw_documents as raw, stored_documents};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{self, doc, Document};
use mongodb::options::IndexOptions;
use mongodb::IndexModel;
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A MongoDB store on a fresh database of its own, for the cases whose input only MongoDB has.
async fn store(test: &str) -> Store {
    let (database, _log) = fresh_database(test).await;
    Store::new(database)
}

/// A stored MongoDB document without what idem adds itself (`_id`, the content hash, and its own
/// fields, whose names start with `idem`): after a write this is exactly what serde wrote.
fn user_fields(stored: &Document) -> Document {
    stored
        .iter()
        .filter(|(name, _)| *name != "_id" && *name != "sourceHash" && !name.starts_with("idem"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// What serde writes for `doc`, as BSON.
fn serialized<T: Serialize>(doc: &T) -> Document {
    bson::to_document(doc).expect("the document serializes")
}

/// Asserts that `T`'s one stored document is `doc` under its derived id, holding exactly what
/// serde writes for it besides idem's own fields. PostgreSQL has a column for every field, NULL
/// where serde wrote nothing, so nulls are left out of the comparison on every backend; MongoDB
/// stores only what is written, so there it is also checked field for field, nulls included: a
/// field serde leaves out must not linger even as a null.
async fn assert_stored_as_serde<T: Idempotent + Serialize>(db: &Db, doc: &T) {
    let mut stored = db.stored::<T>().await;
    assert_eq!(stored.len(), 1, "{db}: {stored:?}");
    let mut document = stored.remove(0);
    assert_eq!(
        document.remove("_id"),
        Some(Value::from(doc.id().unwrap().to_string())),
        "{db}: stored under its derived id"
    );
    assert_eq!(
        document,
        db.as_stored(doc),
        "{db}: the stored fields are what serde writes"
    );
    if let Db::Mongo { store, .. } = db {
        let documents = stored_documents(store.database(), T::MODEL.collection()).await;
        assert_eq!(user_fields(&documents[0]), serialized(doc), "{db}");
    }
}

/// The promise of `#[idem(version)]` for any version type: an identical retry is `Unchanged`, an
/// older replay is `Stale` and writes nothing, a newer edit is `Updated`. Never `Contention`, and
/// never an overwrite by the older copy.
async fn assert_replays_settle_by_version<T>(db: &Db, older: &T, current: &T, newer: &T)
where
    T: Idempotent + Serialize + Sync,
{
    db.ensure::<T>().await;
    assert_eq!(db.upsert(current).await.unwrap(), Outcome::Inserted, "{db}");
    let before = db.raw::<T>().await;
    assert_eq!(
        db.upsert(current).await.unwrap(),
        Outcome::Unchanged,
        "{db}: an identical retry"
    );
    assert_eq!(
        db.upsert(older).await.unwrap(),
        Outcome::Stale,
        "{db}: a replay of an older version"
    );
    assert_eq!(db.raw::<T>().await, before, "{db}: nothing written");
    assert_eq!(
        db.upsert(newer).await.unwrap(),
        Outcome::Updated,
        "{db}: a newer version"
    );
    // The newer version is what is stored now (compared through the store, not through the
    // stored form: the form a version is stored in is the store's to choose).
    assert_eq!(db.upsert(newer).await.unwrap(), Outcome::Unchanged, "{db}");
    assert_eq!(db.upsert(current).await.unwrap(), Outcome::Stale, "{db}");
}

/// Stores what serde writes for `doc` under an `_id` idem never assigns, as another tool would:
/// an ObjectId on MongoDB, a UUID on PostgreSQL; no content hash, digests or version key.
/// Returns that id as text. `T` has no flattened or pushed fields, and its table exists
/// ([`Db::ensure`]).
async fn write_under_foreign_id<T: Idempotent + Serialize>(db: &Db, doc: &T) -> String {
    let collection = T::MODEL.collection();
    match db {
        Db::Mongo { store, .. } => {
            let id = ObjectId::new();
            let mut document = doc! { "_id": id };
            document.extend(serialized(doc));
            store
                .database()
                .collection::<Document>(collection)
                .insert_one(document)
                .await
                .unwrap_or_else(|error| panic!("{db}: writing as another tool: {error}"));
            id.to_hex()
        }
        Db::Postgres { client, .. } => {
            let Ok(Value::Object(mut row)) = serde_json::to_value(doc) else {
                panic!("{db}: serde wrote no fields for a document of {collection}");
            };
            row.insert(APPLIED_OPS_FIELD.to_owned(), Value::Array(Vec::new()));
            let sql = format!(
                "INSERT INTO \"{collection}\" SELECT * FROM jsonb_populate_record(NULL::\"{collection}\", \
                 $1::text::jsonb || jsonb_build_object('_id', gen_random_uuid()::text)) \
                 RETURNING \"_id\""
            );
            client
                .query_one(&sql, &[&Value::Object(row).to_string()])
                .await
                .unwrap_or_else(|error| panic!("{db}: writing as another tool: {error}"))
                .get(0)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Lost update: a field serde leaves out must be removed from the stored document.

/// A profile whose nickname serde leaves out when unset, with free-form extra fields flattened in.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "profiles")]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[idem(key)]
    user_id: String,
    display_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    nickname: Option<String>,
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

fn profile(nickname: Option<&str>, extra: &[(&str, &str)]) -> Profile {
    Profile {
        user_id: "u1".into(),
        display_name: "Ada".into(),
        nickname: nickname.map(Into::into),
        extra: extra
            .iter()
            .map(|(name, value)| ((*name).into(), (*value).into()))
            .collect(),
    }
}

#[tokio::test]
async fn an_option_going_to_none_is_removed_from_the_stored_document() {
    for db in fresh_backends("p1_option_none").await {
        db.ensure::<Profile>().await;
        let with_nickname = profile(Some("countess"), &[]);
        assert_eq!(
            db.upsert(&with_nickname).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );

        let without = profile(None, &[]);
        assert_eq!(db.upsert(&without).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Profile>().await;
        assert_eq!(
            stored[0].get("nickname"),
            None,
            "{db}: serde no longer writes the nickname, so the write removes it"
        );
        assert_stored_as_serde(&db, &without).await;
        // And the stored hash describes what is stored: a retry is a retry.
        assert_eq!(
            db.upsert(&without).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

#[tokio::test]
async fn a_key_removed_from_a_flattened_map_is_removed_from_the_stored_document() {
    for db in fresh_backends("p1_flatten_removed").await {
        db.ensure::<Profile>().await;
        let both = profile(None, &[("color", "red"), ("size", "L")]);
        assert_eq!(db.upsert(&both).await.unwrap(), Outcome::Inserted, "{db}");

        let color_only = profile(None, &[("color", "red")]);
        assert_eq!(
            db.upsert(&color_only).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Profile>().await;
        assert_eq!(
            stored[0].get("size"),
            None,
            "{db}: the entry left the map, so the write removes it"
        );
        assert_stored_as_serde(&db, &color_only).await;
        assert_eq!(
            db.upsert(&color_only).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Stale versions: a version orders by its value, not by the text it is stored as. (`Option`
//    versions are compile errors: ui/types/version_option.rs.)

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    note_id: String,
    #[idem(version)]
    edited_at: chrono::DateTime<chrono::Utc>,
    text: String,
}

fn note(edited_at_ms: i64, text: &str) -> Note {
    Note {
        note_id: "n1".into(),
        edited_at: chrono::DateTime::from_timestamp_millis(edited_at_ms).unwrap(),
        text: text.into(),
    }
}

#[tokio::test]
async fn an_older_chrono_version_is_stale_even_when_its_text_sorts_after() {
    for db in fresh_backends("p2_chrono_version").await {
        // As RFC 3339 text, "…:00Z" sorts after "…:00.500Z", though it is half a second older.
        let current = note(1_700_000_000_500, "current");
        let older = note(1_700_000_000_000, "older");
        let newer = note(1_700_000_001_000, "newer");
        assert_replays_settle_by_version(&db, &older, &current, &newer).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Frozen bypass: a null inside a stored frozen list is a value, not "never written".

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "ballots")]
struct Ballot {
    #[idem(key)]
    ballot_id: String,
    #[idem(frozen)]
    answers: Vec<Option<String>>,
    note: String,
}

#[tokio::test]
async fn a_frozen_list_holding_a_null_cannot_be_overwritten() {
    for db in fresh_backends("p3_frozen_null_list").await {
        db.ensure::<Ballot>().await;
        let cast = Ballot {
            ballot_id: "b1".into(),
            answers: vec![Some("yes".into()), None],
            note: "cast".into(),
        };
        assert_eq!(db.upsert(&cast).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Ballot>().await;

        let rigged = Ballot {
            answers: vec![Some("no".into()), None],
            ..cast.clone()
        };
        match db.upsert(&rigged).await {
            Err(Error::FrozenFieldChanged {
                field,
                stored_id,
                stored,
                incoming,
                ..
            }) => {
                assert_eq!(field, "answers", "{db}");
                assert_eq!(
                    stored_id.to_string(),
                    cast.id().unwrap().to_string(),
                    "{db}"
                );
                assert!(stored.contains("yes"), "{db}: stored: {stored}");
                assert!(incoming.contains("no"), "{db}: incoming: {incoming}");
            }
            other => panic!("{db}: expected FrozenFieldChanged for `answers`, got {other:?}"),
        }
        assert_eq!(db.raw::<Ballot>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. False refusal: a map is the same value whatever order its entries come in.

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "listings")]
struct Listing {
    #[idem(key)]
    sku: String,
    #[idem(frozen)]
    attributes: HashMap<String, String>,
    price_cents: i64,
}

/// The same entries in a new `HashMap` that iterates (and so serializes) them in another order.
fn same_map_in_another_order(map: &HashMap<String, String>) -> HashMap<String, String> {
    let order = |map: &HashMap<String, String>| map.keys().cloned().collect::<Vec<_>>();
    (0..1000)
        .map(|_| map.clone().into_iter().collect::<HashMap<_, _>>())
        .find(|rebuilt| order(rebuilt) != order(map))
        .expect("a rebuilt HashMap of 12 entries iterates in another order within 1000 tries")
}

#[tokio::test]
async fn a_frozen_map_rebuilt_with_the_same_content_is_not_a_change() {
    for db in fresh_backends("p4_frozen_map").await {
        db.ensure::<Listing>().await;
        let listing = Listing {
            sku: "chair-1".into(),
            attributes: (0..12)
                .map(|n| (format!("attribute-{n}"), format!("value-{n}")))
                .collect(),
            price_cents: 4_900,
        };
        assert_eq!(
            db.upsert(&listing).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Listing>().await;

        // Re-ingested: the map is built anew, with the same content.
        let reingested = Listing {
            attributes: same_map_in_another_order(&listing.attributes),
            ..listing.clone()
        };
        assert_eq!(
            db.upsert(&reingested).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(db.raw::<Listing>().await, before, "{db}: nothing written");

        // An edit of another field goes through.
        let repriced = Listing {
            price_cents: 3_900,
            ..reingested
        };
        assert_eq!(
            db.upsert(&repriced).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Listing>().await;
        assert_eq!(stored[0]["price_cents"], 3_900, "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Known answers are not `Contention`. (Role fields stored under a name with a `.` are compile
//    errors: ui/names/role_field_with_dot.rs. Duplicates from other unique indexes: further
//    down.)

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "heartbeats")]
struct Heartbeat {
    #[idem(key)]
    device: String,
    #[idem(version)]
    seen_at: SystemTime,
    status: String,
}

fn heartbeat(seen_at_ms: u64, status: &str) -> Heartbeat {
    Heartbeat {
        device: "d1".into(),
        seen_at: SystemTime::UNIX_EPOCH + Duration::from_millis(seen_at_ms),
        status: status.into(),
    }
}

#[tokio::test]
async fn a_system_time_version_settles_every_replay_without_contention() {
    for db in fresh_backends("p5_system_time_version").await {
        assert_replays_settle_by_version(
            &db,
            &heartbeat(1_700_000_000_000, "older"),
            &heartbeat(1_700_000_001_000, "current"),
            &heartbeat(1_700_000_002_000, "newer"),
        )
        .await;
    }
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(version)]
    taken_at: time::OffsetDateTime,
    celsius: i64,
}

fn reading(taken_at_s: i64, celsius: i64) -> Reading {
    Reading {
        sensor: "s1".into(),
        taken_at: time::OffsetDateTime::from_unix_timestamp(taken_at_s).unwrap(),
        celsius,
    }
}

#[tokio::test]
async fn an_offset_date_time_version_settles_every_replay_without_contention() {
    for db in fresh_backends("p5_offset_date_time_version").await {
        assert_replays_settle_by_version(
            &db,
            &reading(1_700_000_000, 19),
            &reading(1_700_000_060, 20),
            &reading(1_700_000_120, 21),
        )
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Legacy data: a document another tool stored (under an id idem never derives, without a
//    hash) is reported as it is stored. (`record()` over a legacy event: further down, with the
//    `ForeignId` case.)

#[tokio::test]
async fn a_refusal_over_a_legacy_document_names_the_id_it_is_stored_under() {
    for db in fresh_backends("p6_legacy_frozen").await {
        db.ensure::<Post>().await;
        let legacy = Post {
            published_at: 1_600_000_000_000,
            fetched_at: 1_600_000_100_000,
            ..post()
        };
        let legacy_id = write_under_foreign_id(&db, &legacy).await;
        let before = db.raw::<Post>().await;

        // The same post with another publication time: a new id, so the stored one would be
        // orphaned.
        match db.upsert(&post()).await {
            Err(Error::FrozenFieldChanged {
                field,
                stored_id,
                stored,
                incoming,
                ..
            }) => {
                assert_eq!(field, "published_at", "{db}");
                assert_eq!(
                    stored_id.to_string(),
                    legacy_id,
                    "{db}: the id the document is stored under, not the incoming one"
                );
                assert!(stored.contains("1600000000000"), "{db}: stored: {stored}");
                assert!(
                    incoming.contains("1700000000000"),
                    "{db}: incoming: {incoming}"
                );
            }
            other => panic!("{db}: expected FrozenFieldChanged for `published_at`, got {other:?}"),
        }
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. An empty idempotency key is refused, as an empty key is.

#[tokio::test]
async fn an_empty_idempotency_key_is_refused_and_nothing_is_written() {
    for db in fresh_backends("p7_empty_idempotency_key").await {
        db.ensure::<Payment>().await;
        let blank = Payment {
            request_key: String::new(),
            amount_cents: 1_000,
        };
        let expect_empty_key = |result: Result<Outcome, Error>| match result {
            Err(Error::EmptyKey { field, .. }) => assert_eq!(field, "request_key", "{db}"),
            other => panic!("{db}: expected EmptyKey for `request_key`, got {other:?}"),
        };
        expect_empty_key(db.record(&blank).await.map(|recorded| recorded.outcome));
        // Another request without a key must not fold into the first one either.
        let other_blank = Payment {
            amount_cents: 2_000,
            ..blank.clone()
        };
        expect_empty_key(db.upsert(&other_blank).await);
        let report = db.upsert_many(&[blank]).await.unwrap();
        expect_empty_key(report.into_outcomes().remove(0));
        assert!(
            db.raw::<Payment>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. A batch gives each document exactly the outcome upserting them one by one, in order, gives.

/// The fixture post by another author: a frozen field changed, so refused once `post()` is stored.
fn post_by(author: &str) -> Post {
    Post {
        author_id: author.into(),
        ..post()
    }
}

fn retitled() -> Post {
    Post {
        title: "Hello again".into(),
        ..post()
    }
}

/// Asserts `result` is the refusal of a changed `author_id` whose incoming value is `author`'s.
fn assert_author_refused(db: &Db, result: &Result<Outcome, Error>, author: &str) {
    match result {
        Err(Error::FrozenFieldChanged {
            field,
            stored,
            incoming,
            ..
        }) => {
            assert_eq!(*field, "author_id", "{db}");
            assert!(stored.contains("ada"), "{db}: stored: {stored}");
            assert!(
                incoming.contains(author),
                "{db}: the refusal shows this document's own value {author:?}, not another \
                 copy's: incoming {incoming}"
            );
        }
        other => panic!("{db}: expected FrozenFieldChanged for `author_id`, got {other:?}"),
    }
}

#[tokio::test]
async fn a_valid_copy_in_a_batch_is_written_though_a_later_copy_is_refused() {
    for db in fresh_backends("p8_valid_then_invalid").await {
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        // One by one: the retitled post is Updated, then the other author is refused.
        let report = db.upsert_many(&[retitled(), post_by("bob")]).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(outcomes[0], Ok(Outcome::Updated)),
            "{db}: the valid copy: {:?}",
            outcomes[0]
        );
        assert_author_refused(&db, &outcomes[1], "bob");
        assert_stored_as_serde(&db, &retitled()).await;
    }
}

#[tokio::test]
async fn an_invalid_copy_in_a_batch_is_refused_though_a_later_copy_is_valid() {
    for db in fresh_backends("p8_invalid_then_valid").await {
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        // One by one: the other author is refused, then the retitled post is Updated.
        let report = db.upsert_many(&[post_by("bob"), retitled()]).await.unwrap();
        let outcomes = report.outcomes();
        assert_author_refused(&db, &outcomes[0], "bob");
        assert!(
            matches!(outcomes[1], Ok(Outcome::Updated)),
            "{db}: the valid copy: {:?}",
            outcomes[1]
        );
        assert_stored_as_serde(&db, &retitled()).await;
    }
}

#[tokio::test]
async fn each_refused_copy_in_a_batch_shows_its_own_value() {
    for db in fresh_backends("p8_each_own_value").await {
        db.ensure::<Post>().await;
        db.upsert(&post()).await.unwrap();
        let before = db.raw::<Post>().await;
        let report = db
            .upsert_many(&[post_by("bob"), post_by("carol")])
            .await
            .unwrap();
        assert_author_refused(&db, &report.outcomes()[0], "bob");
        assert_author_refused(&db, &report.outcomes()[1], "carol");
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
    }
}

#[tokio::test]
async fn equal_versions_in_a_batch_keep_the_first_copy_as_single_upserts_do() {
    for db in fresh_backends("p8_equal_versions").await {
        db.ensure::<Entry>().await;
        // One by one: the first is Inserted; the second, same version with other content, is
        // Stale.
        let batch = [entry("e1", 1, "first"), entry("e1", 1, "second")];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<Outcome> = report
            .outcomes()
            .iter()
            .map(|outcome| *outcome.as_ref().unwrap())
            .collect();
        assert_eq!(outcomes, [Outcome::Inserted, Outcome::Stale], "{db}");
        let stored = db.stored::<Entry>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["text"], "first", "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// 9. Reserved names: flattened entries further down, ui/names/ for the rest.

// ---------------------------------------------------------------------------------------------
// 10. The size check counts every byte of the stored form.

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Review {
    reviewer_id: String,
    verdict: String,
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "uploads")]
struct Upload {
    #[idem(key)]
    name: String,
    payload: String,
    #[idem(push_by = "reviewer_id")]
    reviews_from_the_moderation_team: Vec<Review>,
    #[idem(tombstone)]
    removed_at: Option<i64>,
}

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

fn small_upload(name: &str) -> Upload {
    Upload {
        name: name.into(),
        payload: "small".into(),
        reviews_from_the_moderation_team: Vec::new(),
        removed_at: None,
    }
}

/// MongoDB only: the limit is MongoDB's 16 MiB on a BSON document, and the bytes idem adds are
/// those of MongoDB's stored form. PostgreSQL's counterpart, a value its table cannot hold, is
/// the next test.
#[tokio::test]
async fn a_document_over_the_limit_only_with_the_bytes_idem_adds_is_too_large() {
    let store = store("p10_size_with_idem_bytes").await;
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

    let expect_too_large = |result: &Result<Outcome, Error>| match result {
        Err(Error::DocumentTooLarge { size, limit, .. }) => {
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

/// 4,000 characters that do not compress: hex digits of a hash chain.
fn incompressible_text() -> String {
    let mut text = String::new();
    let mut digest = blake3::hash(b"seed");
    while text.len() < 4_000 {
        text.push_str(&digest.to_hex());
        digest = blake3::hash(digest.as_bytes());
    }
    text.truncate(4_000);
    text
}

/// PostgreSQL only (MongoDB indexes keys of any length): a natural key longer than an entry of
/// the table's unique natural-key index can hold (a btree entry holds about 2.7 kB) cannot be
/// stored. The write fails with the server's error, not retryable, and nothing is written; in a
/// batch the document fails alone, as upserting the documents one by one would, and the others
/// are written (the statement the server refused goes again one row at a time).
#[tokio::test]
async fn a_natural_key_too_long_for_the_unique_index_fails_alone_with_nothing_written() {
    for db in fresh_backends("p10_key_too_long")
        .await
        .into_iter()
        .filter(Db::is_postgres)
    {
        db.ensure::<Upload>().await;
        let oversized = small_upload(&incompressible_text());
        let expect_too_long = |result: &Result<Outcome, Error>| match result {
            Err(error) => {
                assert_eq!(
                    error.as_backend().and_then(|backend| backend.code()),
                    Some("54000"),
                    "{db}: program_limit_exceeded: {error}"
                );
                assert!(!error.is_retryable(), "{db}: the same row fails every time");
            }
            other => panic!("{db}: expected the server's refusal, got {other:?}"),
        };
        expect_too_long(&db.upsert(&oversized).await);
        assert!(db.raw::<Upload>().await.is_empty(), "{db}: nothing written");

        let outcomes = match db
            .upsert_many(&[small_upload("a"), oversized, small_upload("b")])
            .await
        {
            Ok(report) => report.into_outcomes(),
            Err(error) => panic!(
                "{db}: one row the table cannot hold failed the whole batch, where upserting \
                 one by one fails it alone: {error}"
            ),
        };
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        expect_too_long(&outcomes[1]);
        assert!(
            matches!(outcomes[2], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert_eq!(db.stored::<Upload>().await.len(), 2, "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// 11. Key types that cannot be written are compile errors: ui/types/key_{u64,u128,i128,usize}.rs.

// ---------------------------------------------------------------------------------------------
// 12. `insert_new` refuses a member whose id-feeding timestamp moved, as `upsert` does.

#[derive(Debug, Clone, PartialEq, Serialize, Idempotent)]
#[idem(collection = "badges")]
struct Badge {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
    #[idem(timestamp)]
    earned_at: i64,
}

fn badge(earned_at: i64) -> Badge {
    Badge {
        user: "ada".into(),
        badge: "first-post".into(),
        earned_at,
    }
}

/// Asserts `result` refuses the moved `earned_at` of the badge stored under `stored_as`.
fn assert_moved_timestamp_refused<T: std::fmt::Debug>(
    db: &Db,
    result: Result<T, Error>,
    stored_as: &Badge,
) {
    match result {
        Err(Error::FrozenFieldChanged {
            field, stored_id, ..
        }) => {
            assert_eq!(field, "earned_at", "{db}");
            assert_eq!(
                stored_id.to_string(),
                stored_as.id().unwrap().to_string(),
                "{db}"
            );
        }
        other => panic!("{db}: expected FrozenFieldChanged for `earned_at`, got {other:?}"),
    }
}

#[tokio::test]
async fn insert_new_refuses_a_member_whose_timestamp_moved_as_upsert_does() {
    for db in fresh_backends("p12_insert_new_moved").await {
        db.ensure::<Badge>().await;
        let earned = badge(1_700_000_000_000);
        let earned_now = std::slice::from_ref(&earned);
        assert_eq!(
            db.insert_new(earned_now).await.unwrap().inserted(),
            earned_now,
            "{db}"
        );
        let before = db.raw::<Badge>().await;

        // Same key, another time: another id, so inserting it would leave two documents for one
        // key.
        let moved = badge(1_700_000_555_000);
        assert_ne!(moved.id().unwrap(), earned.id().unwrap());
        assert_moved_timestamp_refused(&db, db.upsert(&moved).await, &earned);
        let report = db.insert_new(&[moved]).await.unwrap();
        assert_moved_timestamp_refused(&db, report.results()[0].clone(), &earned);
        assert_eq!(db.raw::<Badge>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// 13. A frozen `Option` that serde leaves out while `None` is a field never written. (Key,
//     timestamp and version fields with `skip_serializing_if` are compile errors.)

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "tickets")]
struct Ticket {
    #[idem(key)]
    ticket_id: String,
    title: String,
    #[idem(frozen)]
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_by: Option<String>,
}

fn ticket(closed_by: Option<&str>) -> Ticket {
    Ticket {
        ticket_id: "t1".into(),
        title: "Printer on fire".into(),
        closed_by: closed_by.map(Into::into),
    }
}

#[tokio::test]
async fn a_frozen_option_left_out_while_none_is_written_once_then_frozen() {
    for db in fresh_backends("p13_frozen_skipped_option").await {
        db.ensure::<Ticket>().await;
        assert_eq!(
            db.upsert(&ticket(None)).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_stored_as_serde(&db, &ticket(None)).await;

        // Never written, so it may be set once…
        assert_eq!(
            db.upsert(&ticket(Some("ada"))).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let before = db.raw::<Ticket>().await;
        // …and never changed afterwards.
        match db.upsert(&ticket(Some("bob"))).await {
            Err(Error::FrozenFieldChanged { field, .. }) => {
                assert_eq!(field, "closed_by", "{db}")
            }
            other => panic!("{db}: expected FrozenFieldChanged for `closed_by`, got {other:?}"),
        }
        assert_eq!(db.raw::<Ticket>().await, before, "{db}: nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// 14. Operation-owned fields: further down (`#[idem(effect)]`, `Error::NotAnEffectField`).

// ---------------------------------------------------------------------------------------------
// 15. `String` versions are compile errors: ui/types/version_string.rs.

// ---------------------------------------------------------------------------------------------
// 16. An event's op ids derive from its idempotency key.

#[test]
fn an_event_op_id_derives_from_its_idempotency_key_and_purpose() {
    let payment = |key: &str, amount_cents| Payment {
        request_key: key.into(),
        amount_cents,
    };
    let credit = payment("req-1", 1_000)
        .op_id("credit")
        .expect("an event has op ids: the README's webhook-credits-an-account flow");
    assert_eq!(credit, payment("req-1", 1_000).op_id("credit").unwrap());
    // The key names the request: the same key is the same request, whatever its payload says.
    assert_eq!(credit, payment("req-1", 2_000).op_id("credit").unwrap());
    assert_ne!(credit, payment("req-1", 1_000).op_id("refund").unwrap());
    assert_ne!(credit, payment("req-2", 1_000).op_id("credit").unwrap());
}

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

// -----------------------------------------------------------------------------------------
// 5. A duplicate key from any index but the natural key is a refusal naming it.

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

fn assert_unique_index_conflict(result: &Result<Outcome, Error>, expected_index: &str) {
    match result {
        Err(error @ Error::UniqueIndexConflict { index, .. }) => {
            assert_eq!(index, expected_index);
            assert!(
                !error.is_retryable(),
                "the same write meets the same index every time"
            );
        }
        other => panic!("expected UniqueIndexConflict on {expected_index}, got {other:?}"),
    }
}

/// MongoDB only: the application's unique index is created through the MongoDB driver.
/// PostgreSQL's counterpart, a unique constraint added to the table, is
/// `another_unique_constraint_is_a_refusal_naming_it_and_spares_the_rest_of_a_batch` in
/// `postgres.rs`.
#[tokio::test]
async fn a_duplicate_on_another_unique_index_is_a_refusal_naming_that_index() {
    let store = store("p5_unique_email").await;
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

/// A natural-key index left by an older key set is found by the check before the first write,
/// which names it and its keys: no write is attempted, so none is refused one by one.
///
/// MongoDB only: the stale index is MongoDB's `NATURAL_KEY_INDEX`, created through the driver.
/// PostgreSQL's counterpart, a table without a unique constraint on exactly the natural key, is
/// `a_table_that_does_not_match_the_model_is_refused_before_any_write` in `postgres.rs`.
#[tokio::test]
async fn a_stale_natural_key_index_is_refused_before_any_write_naming_it() {
    let store = store("p5_stale_natural_key").await;
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
            Err(error @ Error::SchemaMismatch { .. }) => {
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

// -----------------------------------------------------------------------------------------
// 6. `record()` over an event another tool stored reports the id it is stored under, whether
//    the payload stored is the one recorded or another.

#[tokio::test]
async fn recording_an_event_stored_by_another_tool_reports_its_foreign_id() {
    for db in fresh_backends("p6_legacy_event").await {
        db.ensure::<Payment>().await;
        let payment = |amount_cents| Payment {
            request_key: "req-1".into(),
            amount_cents,
        };
        let legacy_id = write_under_foreign_id(&db, &payment(1_000)).await;
        let before = db.raw::<Payment>().await;

        let expect_foreign_id = |result: Result<Outcome, Error>| match result {
            Err(Error::ForeignId { stored_id, .. }) => assert_eq!(stored_id, legacy_id, "{db}"),
            other => panic!("{db}: expected ForeignId {legacy_id}, got {other:?}"),
        };
        for amount_cents in [1_000, 2_000] {
            expect_foreign_id(
                db.record(&payment(amount_cents))
                    .await
                    .map(|recorded| recorded.outcome),
            );
            expect_foreign_id(db.upsert(&payment(amount_cents)).await);
        }
        assert_eq!(db.raw::<Payment>().await, before, "{db}: nothing written");
    }
}

// -----------------------------------------------------------------------------------------
// 9. A flattened entry under a name idem writes is refused, and nothing is written.

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "labelled")]
struct Labelled {
    #[idem(key)]
    slug: String,
    #[serde(flatten)]
    labels: BTreeMap<String, String>,
}

/// Stores a document, then the same with a flattened entry named `reserved`: refused, single
/// or in a batch, with the stored state untouched.
async fn assert_reserved_entry_refused(test: &str, reserved: &str) {
    for db in fresh_backends(test).await {
        db.ensure::<Labelled>().await;
        let labelled = |entries: &[&str]| Labelled {
            slug: "hello".into(),
            labels: entries
                .iter()
                .map(|name| ((*name).to_owned(), "x".to_owned()))
                .collect(),
        };
        assert_eq!(
            db.upsert(&labelled(&["color"])).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Labelled>().await;

        let with_reserved = labelled(&["color", reserved]);
        let expect_reserved = |result: &Result<Outcome, Error>| match result {
            Err(Error::ReservedName { stored_name, .. }) => {
                assert_eq!(stored_name, reserved, "{db}")
            }
            other => panic!("{db}: expected ReservedName {reserved:?}, got {other:?}"),
        };
        expect_reserved(&db.upsert(&with_reserved).await);
        let report = db
            .upsert_many(std::slice::from_ref(&with_reserved))
            .await
            .unwrap();
        expect_reserved(&report.outcomes()[0]);
        assert_eq!(db.raw::<Labelled>().await, before, "{db}: nothing written");
    }
}

#[tokio::test]
async fn a_flattened_entry_named_like_the_hash_field_is_refused() {
    assert_reserved_entry_refused("p9_flattened_hash_field", "sourceHash").await;
}

#[tokio::test]
async fn a_flattened_id_entry_is_refused() {
    assert_reserved_entry_refused("p9_flattened_id", "_id").await;
}

#[tokio::test]
async fn a_flattened_entry_in_idems_namespace_is_refused() {
    assert_reserved_entry_refused("p9_flattened_idem_name", APPLIED_OPS_FIELD).await;
}

// -----------------------------------------------------------------------------------------
// 14. Fields that operations change are owned by `apply_once`.

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "ledgers")]
struct Ledger {
    #[idem(key)]
    account_id: String,
    owner: String,
    #[idem(effect)]
    balance: i64,
}

fn ledger(owner: &str) -> Ledger {
    Ledger {
        account_id: "acct-1".into(),
        owner: owner.into(),
        balance: 0,
    }
}

/// The stored balance of the one ledger.
async fn stored_balance(db: &Db) -> i64 {
    let stored = db.stored::<Ledger>().await;
    stored[0]["balance"]
        .as_i64()
        .unwrap_or_else(|| panic!("{db}: {stored:?}"))
}

#[tokio::test]
async fn an_upsert_never_undoes_an_apply_once_effect() {
    for db in fresh_backends("p14_effect_kept").await {
        db.ensure::<Ledger>().await;
        assert_eq!(
            db.upsert(&ledger("Ada")).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let id = ledger("Ada").id().unwrap();
        let credit = OpId::from("payment-1:credit");
        assert_eq!(
            db.credit_once::<Ledger>(id, &credit, "balance", 500)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );

        // The owner is renamed; the document in hand still says balance 0.
        let renamed = ledger("Ada Lovelace");
        assert_eq!(db.upsert(&renamed).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Ledger>().await;
        assert_eq!(stored[0]["owner"], "Ada Lovelace", "{db}");
        assert_eq!(stored_balance(&db).await, 500, "{db}: the credit stands");
        // The balance is not content: the renamed account with any balance is a retry.
        let with_other_balance = Ledger {
            balance: 7,
            ..renamed.clone()
        };
        assert_eq!(
            db.upsert(&with_other_balance).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(
            db.credit_once::<Ledger>(id, &credit, "balance", 500)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        assert_eq!(stored_balance(&db).await, 500, "{db}");
    }
}

/// An update `apply_once` is asked to make: a numeric credit, or a field set to a text.
enum Update {
    Add(&'static str, i64),
    Set(&'static str, &'static str),
}

/// Applies `update` to the ledger `id` once per `op`: `Change::add` or `Change::set`, the same
/// on every backend.
async fn apply(db: &Db, id: Id, op: &OpId, update: Update) -> Result<Applied, Error> {
    match update {
        Update::Add(field, amount) => db.credit_once::<Ledger>(id, op, field, amount).await,
        Update::Set(field, value) => {
            let changes = [idem_core::Change::set(field, &value)];
            match db {
                Db::Mongo { store, .. } => store.apply_once::<Ledger>(id, op, &changes).await,
                Db::Postgres { store, client, .. } => {
                    store
                        .apply_once::<Ledger, _>(client, id, op, &changes)
                        .await
                }
            }
        }
    }
}

/// Applies `update` under a fresh op id: refused as touching `path`, nothing written (the op id
/// is not recorded either, so the same op id applies a correct update afterwards).
async fn assert_not_an_effect_field(test: &str, update: fn() -> Update, path: &str) {
    for db in fresh_backends(test).await {
        db.ensure::<Ledger>().await;
        db.upsert(&ledger("Ada")).await.unwrap();
        let id = ledger("Ada").id().unwrap();
        let before = db.raw::<Ledger>().await;
        let op = OpId::from("op-1");
        match apply(&db, id, &op, update()).await {
            Err(Error::NotAnEffectField { path: refused, .. }) => {
                assert_eq!(refused, path, "{db}")
            }
            other => panic!("{db}: expected NotAnEffectField {path:?}, got {other:?}"),
        }
        assert_eq!(db.raw::<Ledger>().await, before, "{db}: nothing written");
        assert_eq!(
            db.credit_once::<Ledger>(id, &op, "balance", 5)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(stored_balance(&db).await, 5, "{db}");
    }
}

#[tokio::test]
async fn apply_once_refuses_a_field_the_type_does_not_have() {
    // A typo would otherwise create a new field and leave the balance as it was.
    assert_not_an_effect_field("p14_typo", || Update::Add("balnce", 5), "balnce").await;
}

/// MongoDB only: `$rename` is a MongoDB update operator (`apply_update_once`); a `Change` names
/// the one field it changes, refused unless it is an effect field (the other cases here).
#[tokio::test]
async fn apply_once_refuses_renaming_an_effect_field_out_of_the_effect_fields() {
    // The balance would move to a field the next upsert overwrites or drops.
    let store = store("p14_rename").await;
    store.upsert(&ledger("Ada")).await.unwrap();
    let id = ledger("Ada").id().unwrap();
    let before = raw(store.database(), "ledgers").await;
    let op = OpId::from("op-1");
    let rename = doc! { "$rename": { "balance": "owner" } };
    match store.apply_update_once::<Ledger>(id, &op, rename).await {
        Err(Error::NotAnEffectField { path, .. }) => assert_eq!(path, "owner"),
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

#[tokio::test]
async fn apply_once_refuses_a_field_that_upserts_own() {
    // The next upsert would overwrite it: only effect fields belong to operations.
    assert_not_an_effect_field("p14_upserted_field", || Update::Set("owner", "x"), "owner").await;
}
