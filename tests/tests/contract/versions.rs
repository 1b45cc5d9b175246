//! Versions: only a strictly newer version replaces what is stored; a replay of an older one,
//! or of the same one with other content, is `Stale` and writes nothing, and an identical retry
//! is `Unchanged`. A version orders by its value, whatever its type and however it is stored;
//! never `Contention`. (Documents stored without idem's order key: `foreign.rs`.)

use std::time::{Duration, SystemTime};

use idem_core::{Deletion, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{entry, Entry};
use serde::Serialize;

use crate::support::stored_entry;

/// Versions: only a strictly newer one replaces; a deleted entry stays deleted, with its first
/// marker.
#[tokio::test]
async fn versions_order_replays_and_tombstones_never_come_back() {
    for db in fresh_backends("versions").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
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
        assert_eq!(
            db.delete(&deleted).await.unwrap(),
            Deletion::Deleted,
            "{db}"
        );
        let again = Entry {
            deleted_at: Some(1_900_000_000_000),
            ..deleted.clone()
        };
        assert_eq!(
            db.delete(&again).await.unwrap(),
            Deletion::AlreadyDeleted,
            "{db}"
        );
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
        assert_eq!(db.delete(&early).await.unwrap(), Deletion::Deleted, "{db}");
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
                Err(error)
                    if matches!(error.kind(), ErrorKind::NotFound)
                        && error.document().id == Some(id)
            ),
            "{db}: the missing document is named"
        );
        db.upsert(&entry("e3", 1, "x")).await.unwrap();
        assert_eq!(
            db.delete_by_id::<Entry, _>(id, &5_i64).await.unwrap(),
            Deletion::Deleted,
            "{db}"
        );
        assert_eq!(
            db.delete_by_id::<Entry, _>(id, &6_i64).await.unwrap(),
            Deletion::AlreadyDeleted,
            "{db}"
        );
        let e3 = stored_entry(&db, "e3").await;
        assert_eq!(e3["deletedAt"], 5, "{db}: the first marker stays");
        assert_eq!(db.stored::<Entry>().await.len(), 3, "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// Every ordered version type

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

/// Promise catalogue case 2, stale versions: a version orders by its value, not by the text it
/// is stored as. (`String`, float and `Option` versions are compile errors, cases 2 and 15:
/// ui/types/version_*.rs.)
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

/// Promise catalogue case 5, known answers are not `Contention`: every replay of a `SystemTime`
/// version settles. (Role fields stored under a name with a `.` are compile errors:
/// ui/names/role_field_with_dot.rs.)
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

/// Promise catalogue case 5: every replay of a `time::OffsetDateTime` version settles.
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
