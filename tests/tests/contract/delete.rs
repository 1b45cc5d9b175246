//! `delete` and `delete_by_id`: only the delete route writes the tombstone, a delete needs its
//! marker, and racing deletes mark a document once, keeping the marker of the one that did.
//! (A tombstone never written over, and the first marker kept: `versions.rs`.)

use idem_core::{Deletion, Error, ErrorKind, Outcome};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{entry, Entry};

use crate::support::{assert_db_sent_nothing, forget_commands, line_up, stored_entry};

/// Only the delete route writes the tombstone: an upsert of a marked document stores it
/// unmarked, and a delete without a marker is refused.
#[tokio::test]
async fn upserts_never_write_the_tombstone_and_deleting_needs_a_marker() {
    for db in fresh_backends("tombstone_route").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        let marked = Entry {
            deleted_at: Some(1),
            ..entry("e1", 1, "hello")
        };
        assert_eq!(db.upsert(&marked).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(
            stored_entry(&db, "e1").await.get("deletedAt"),
            None,
            "{db}: only the delete route writes the marker"
        );
        let before = db.raw::<Entry>().await;
        match db
            .delete(&entry("e1", 1, "hello"))
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::TombstoneNotSet { field, .. }) => {
                assert_eq!(field, "deleted_at", "{db}")
            }
            other => panic!("{db}: expected TombstoneNotSet, got {other:?}"),
        }
        assert_eq!(db.raw::<Entry>().await, before, "{db}: nothing written");
    }
}

/// Eight racing deletes of one stored entry, beside eight racing newer upserts of it: exactly one
/// delete marks it and its marker stays; each upsert lands before it or finds it deleted. Eight
/// racing deletes of an entry never stored store it deleted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_deletes_mark_a_document_once_and_keep_the_winners_marker() {
    for db in fresh_backends("delete_race").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        db.upsert(&entry("stored", 1, "x")).await.unwrap();
        for entry_id in ["stored", "never-stored"] {
            let with_upserts = entry_id == "stored";
            let line = line_up(if with_upserts { 16 } else { 8 });
            let mut deletes = Vec::new();
            let mut upserts = Vec::new();
            for n in 0..8_i64 {
                let racer = db.another().await;
                let waiting = line.clone();
                deletes.push(tokio::spawn(async move {
                    let marked = Entry {
                        deleted_at: Some(100 + n),
                        ..entry(entry_id, 1, "x")
                    };
                    waiting.wait().await;
                    (100 + n, racer.delete(&marked).await)
                }));
                if with_upserts {
                    let racer = db.another().await;
                    let waiting = line.clone();
                    upserts.push(tokio::spawn(async move {
                        waiting.wait().await;
                        racer.upsert(&entry(entry_id, 2 + n, "newer")).await
                    }));
                }
            }
            let winners = markers_that_deleted(deletes, &format!("{db}: {entry_id}")).await;
            for upsert in upserts {
                let outcome = upsert.await.unwrap();
                assert!(
                    matches!(
                        outcome,
                        Ok(Outcome::Updated | Outcome::Stale | Outcome::Deleted)
                    ),
                    "{db}: {entry_id}: a racing upsert: {outcome:?}"
                );
            }
            assert_eq!(winners.len(), 1, "{db}: {entry_id}: {winners:?}");
            assert_eq!(
                stored_entry(&db, entry_id).await["deletedAt"],
                winners[0],
                "{db}: {entry_id}: the marker of the delete that marked it"
            );
            assert_eq!(
                db.upsert(&entry(entry_id, 99, "later")).await.unwrap(),
                Outcome::Deleted,
                "{db}: {entry_id}"
            );
        }
        assert_eq!(db.stored::<Entry>().await.len(), 2, "{db}");
    }
}

/// Eight racing `delete_by_id`s of one live entry, five rounds: exactly one marks it, every other
/// finds it deleted (never "not found": the document is there the whole time), and the marker
/// of the one that marked it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_deletes_by_id_mark_a_live_document_once() {
    for db in fresh_backends("delete_by_id_race").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        for round in 0..5 {
            let entry_id = format!("live-{round}");
            let live = entry(&entry_id, 1, "x");
            db.upsert(&live).await.unwrap();
            let id = live.id().unwrap();
            let line = line_up(8);
            let mut deletes = Vec::new();
            for n in 0..8_i64 {
                let racer = db.another().await;
                let waiting = line.clone();
                deletes.push(tokio::spawn(async move {
                    waiting.wait().await;
                    (n, racer.delete_by_id::<Entry, _>(id, &n).await)
                }));
            }
            let winners = markers_that_deleted(deletes, &format!("{db}: round {round}")).await;
            assert_eq!(winners.len(), 1, "{db}: round {round}: {winners:?}");
            assert_eq!(
                stored_entry(&db, &entry_id).await["deletedAt"],
                winners[0],
                "{db}: round {round}: the marker of the delete that marked it"
            );
        }
    }
}

/// The markers of the racing deletes that marked the document: every other one must have found
/// it deleted already; anything else fails the test, named by `context`.
async fn markers_that_deleted(
    deletes: Vec<tokio::task::JoinHandle<(i64, Result<Deletion, Error>)>>,
    context: &str,
) -> Vec<i64> {
    let mut winners = Vec::new();
    for delete in deletes {
        let (marker, outcome) = delete.await.unwrap();
        match outcome {
            Ok(Deletion::Deleted) => winners.push(marker),
            Ok(Deletion::AlreadyDeleted) => {}
            other => panic!("{context}: a racing delete: {other:?}"),
        }
    }
    winners
}

/// A deletion marker the tombstone field does not hold is refused the same way on every store,
/// naming the field, before anything is sent, the document left live (MongoDB stored a string,
/// a float or a map in an `i64` tombstone, where PostgreSQL failed on the server and SQLite
/// refused); a null marker is `TombstoneNotSet` everywhere.
#[tokio::test]
async fn a_deletion_marker_the_tombstone_cannot_hold_is_refused_on_every_store() {
    let refused = [
        (serde_json::json!("x"), "a string"),
        (serde_json::json!(5.5), "a float"),
        (serde_json::json!(5.0), "a float"),
        (serde_json::json!(true), "a boolean"),
        (serde_json::json!({"a": 1}), "a list or a map"),
        (serde_json::json!(u64::MAX), "an integer beyond i64's range"),
    ];
    for db in fresh_backends("marker_kinds").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        let live = entry("e1", 1, "t");
        db.upsert(&live).await.unwrap();
        let id = live.id().unwrap();
        for (marker, kind) in &refused {
            forget_commands(&db);
            let error = db.delete_by_id::<Entry, _>(id, marker).await.unwrap_err();
            let shown = error.to_string();
            assert!(
                matches!(error.kind(), ErrorKind::Serialize { .. })
                    && shown.contains(&format!(
                        "the deletion marker is {kind}, where `deleted_at`"
                    )),
                "{db}: {marker}: {shown}"
            );
            if db.command_log().is_some() {
                assert_db_sent_nothing(&db);
            }
        }
        assert!(
            matches!(
                db.delete_by_id::<Entry, _>(id, &serde_json::Value::Null)
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::TombstoneNotSet {
                    field: "deleted_at"
                })
            ),
            "{db}"
        );
        assert_eq!(
            db.get::<Entry>(id).await.unwrap(),
            Some(live.clone()),
            "{db}: live"
        );
        assert_eq!(
            db.delete_by_id::<Entry, _>(id, &7).await.unwrap(),
            Deletion::Deleted,
            "{db}"
        );
    }
}
