//! Documents another tool wrote (or idem before the type had a version): without a content hash,
//! digests or version order key, under the id idem derives or one it never assigns. They are
//! compared by value, ordered by their version, refused naming the id they are stored under, and
//! idem's from the first write on.

use idem_core::model::APPLIED_OPS_FIELD;
use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{account, entry, post, Account, Entry, Payment, Post};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, Document};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::support::serialized;

/// Stores what serde writes for `doc` under an `_id` idem never assigns, as another tool would:
/// an ObjectId on MongoDB, a UUID on PostgreSQL, 32 hex digits on SQLite, `legacy-` and 19 hex
/// digits on MariaDB (whose id column holds 26 characters, a ULID's length); no content hash,
/// digests or version key.
/// Returns that id as text. `T` has no flattened or pushed fields, and its table exists
/// ([`Db::ensure`]).
pub(crate) async fn write_under_foreign_id<T: Idempotent + Serialize>(db: &Db, doc: &T) -> String {
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
        Db::Sqlite { connection, .. } => {
            let Ok(Value::Object(row)) = serde_json::to_value(doc) else {
                panic!("{db}: serde wrote no fields for a document of {collection}");
            };
            // A random id of another tool's form: 32 hex digits, not a ULID.
            let id = format!("{:032x}", rand_id());
            idem_tests::sqlite_rows::write_as_another_tool::<T>(
                &mut *connection.lock().await,
                &id,
                row,
            )
            .await;
            id
        }
        Db::Mysql { connection, .. } => {
            let Ok(Value::Object(row)) = serde_json::to_value(doc) else {
                panic!("{db}: serde wrote no fields for a document of {collection}");
            };
            // Another tool's id, as long as a ULID (the column's width) but no ULID: `-` is no
            // digit of one.
            let id = format!("legacy-{:019x}", rand_id() >> 52);
            idem_tests::mysql_rows::write_as_another_tool::<T>(
                &mut *connection.lock().await,
                &id,
                row,
            )
            .await;
            id
        }
    }
}

/// A random 128-bit number, as another tool's ids are.
fn rand_id() -> u128 {
    u128::from(ulid::Ulid::generate())
}

/// Promise catalogue case 6, legacy data: a document another tool stored (under an id idem
/// never derives, without a hash) is reported as it is stored: a refusal names the id it is stored
/// under.
#[tokio::test]
async fn a_refusal_over_a_legacy_document_names_the_id_it_is_stored_under() {
    for db in fresh_backends("p6_legacy_frozen").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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
        match db.upsert(&post()).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
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

/// Promise catalogue case 6: `record()` over an event another tool stored reports the id it is
/// stored under, whether the payload stored is the one recorded or another.
#[tokio::test]
async fn recording_an_event_stored_by_another_tool_reports_its_foreign_id() {
    for db in fresh_backends("p6_legacy_event").await {
        // an event's id is random: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Payment>().await;
        let payment = |amount_cents| Payment {
            request_key: "req-1".into(),
            amount_cents,
        };
        let legacy_id = write_under_foreign_id(&db, &payment(1_000)).await;
        let before = db.raw::<Payment>().await;

        let expect_foreign_id = |result: Result<Outcome, Error>| match result
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::ForeignId { stored_id, .. }) => assert_eq!(stored_id, legacy_id, "{db}"),
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

/// Sensor s1's reading: gain 1, offset 0, value 7.
fn reading() -> Reading {
    Reading {
        sensor: "s1".into(),
        at: 1_700_000_000_000,
        calibration: Calibration {
            gain: 1.0,
            offset: 0.0,
        },
        value: 7,
    }
}

/// Numbers another tool stored are the values they are: a timestamp mongosh or Node.js stored
/// as the double `1700000000000.0`, a frozen `1.0` that jsonb or an int64 keeps as `1`. The
/// document is replaced, not refused as a change of a frozen field, and is idem's afterwards.
#[tokio::test]
async fn numbers_another_tool_stored_compare_by_value() {
    for db in fresh_backends("foreign_numbers").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Reading>().await;
        let reading = reading();
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
        match db.upsert(&other_gain).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
                field: "calibration",
                ..
            }) => {}
            other => panic!("{db}: a changed frozen value must still be refused: {other:?}"),
        }
    }
}

/// A document stored without idem's version order key (by another tool, or by idem before the
/// type gained its `#[idem(version)]`) is ordered by its version field all the same: an older
/// replay is `Stale` and changes nothing, a newer one replaces it (in a second step pinned to
/// what was read), and the document is idem's from then on.
#[tokio::test]
async fn a_stale_replay_never_overwrites_a_newer_document_stored_without_an_order_key() {
    for db in fresh_backends("foreign_versions").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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

/// A document another tool stored with nothing but its id and natural key is a stored document,
/// not one being inserted, on every backend and by every path: a single upsert and a batch both
/// refuse to set its timestamp and frozen value (stored as missing), leaving it as it was; an
/// upsert of a type with neither is `Updated`, not `Inserted`, and leaves an effect field as
/// stored (missing), not at its incoming first value.
#[tokio::test]
async fn a_document_holding_only_its_id_and_key_is_stored_not_being_inserted() {
    for db in fresh_backends("foreign_bare").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Reading>().await;
        db.ensure::<Account>().await;
        let reading = reading();
        let mut bare = serde_json::Map::new();
        bare.insert("sensor".into(), "s1".into());
        db.write_json_as_another_tool::<Reading>(&reading.id().unwrap().to_string(), bare)
            .await;
        let before = db.raw::<Reading>().await;
        let single = db.upsert(&reading).await.map_err(Error::into_kind);
        let batch = db
            .upsert_many(std::slice::from_ref(&reading))
            .await
            .unwrap();
        let batch = batch.into_outcomes().into_iter().next().unwrap();
        for (path, outcome) in [
            ("upsert", single),
            ("upsert_many", batch.map_err(Error::into_kind)),
        ] {
            match outcome {
                Err(ErrorKind::FrozenFieldChanged {
                    field: "at",
                    stored,
                    ..
                }) if stored == "(missing)" => {}
                other => panic!("{db}, {path}: a bare document's timestamp set: {other:?}"),
            }
        }
        assert_eq!(db.raw::<Reading>().await, before, "{db}");

        let account = account("ann");
        let mut bare = serde_json::Map::new();
        bare.insert("owner".into(), "ann".into());
        db.write_json_as_another_tool::<Account>(&account.id().unwrap().to_string(), bare)
            .await;
        assert_eq!(db.upsert(&account).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Account>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert!(
            stored[0].get("balance").is_none_or(Value::is_null),
            "{db}: {stored:?}"
        );
    }
}
