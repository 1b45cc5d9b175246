//! One public API: code written once against [`idem_core::Backend`] (the trait both
//! `mongo::Store` and `postgres::Session` implement, and the derive's generated methods take)
//! runs unchanged on every backend, with the same outcomes from every primitive.

use idem_core::{Applied, Backend, Change, Deletion, Idempotent, Insertion, OpId, Outcome, Pushed};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{entry, post, Entry, Payment, Post};
use serde::{Deserialize, Serialize};

/// A board whose pinned notes are pushed and whose score only operations move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "boards")]
struct Board {
    #[idem(key)]
    name: String,
    #[idem(push_by = "note_id")]
    pinned: Vec<Note>,
    #[idem(effect)]
    score: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Note {
    note_id: String,
    text: String,
}

/// Every primitive once, through nothing but the trait.
async fn every_primitive<B: Backend>(idem: &B, label: &str) {
    idem.ensure_schema::<Post>().await.unwrap();
    idem.ensure_schema::<Entry>().await.unwrap();
    idem.ensure_schema::<Board>().await.unwrap();
    idem.ensure_schema::<Payment>().await.unwrap();
    // The generated methods take the same value.
    Post::ensure_schema(idem).await.unwrap();
    assert_eq!(
        post().upsert(idem).await.unwrap(),
        Outcome::Inserted,
        "{label}"
    );
    assert_eq!(
        idem.upsert(&post()).await.unwrap(),
        Outcome::Unchanged,
        "{label}"
    );
    let report = idem
        .upsert_many(&[entry("e1", 1, "one"), entry("e2", 1, "two")])
        .await
        .unwrap();
    assert_eq!(report.outcomes().len(), 2, "{label}");
    let deleted = Entry {
        deleted_at: Some(9),
        ..entry("e1", 1, "one")
    };
    assert_eq!(
        idem.delete(&deleted).await.unwrap(),
        Deletion::Deleted,
        "{label}"
    );
    let e2 = entry("e2", 1, "two").id().unwrap();
    assert_eq!(
        idem.delete_by_id::<Entry, _>(e2, &10_i64).await.unwrap(),
        Deletion::Deleted,
        "{label}"
    );
    assert_eq!(
        idem.delete_by_id::<Entry, _>(e2, &11_i64).await.unwrap(),
        Deletion::AlreadyDeleted,
        "{label}"
    );
    let new = [entry("e3", 1, "three")];
    let report = idem.insert_new(&new).await.unwrap();
    assert_eq!(
        report.results()[0].as_ref().ok(),
        Some(&Insertion::Inserted),
        "{label}"
    );
    let board = Board {
        name: "main".into(),
        pinned: Vec::new(),
        score: 0,
    };
    idem.upsert(&board).await.unwrap();
    let note = Note {
        note_id: "n1".into(),
        text: "hello".into(),
    };
    let id = board.id().unwrap();
    assert_eq!(
        idem.push::<Board, _>(id, "pinned", &note).await.unwrap(),
        Pushed::Appended,
        "{label}"
    );
    assert_eq!(
        board.push_pinned(idem, &note).await.unwrap(),
        Pushed::AlreadyPresent,
        "{label}"
    );
    let op = OpId::new("bonus");
    assert_eq!(
        idem.apply_once::<Board>(id, &op, &[Change::add("score", 3)])
            .await
            .unwrap(),
        Applied::Applied,
        "{label}"
    );
    let payment = Payment {
        request_key: "r1".into(),
        amount_cents: 5,
    };
    let recorded = idem.record(&payment).await.unwrap();
    assert_eq!(recorded.outcome, Outcome::Inserted, "{label}");
    let read: Board = idem.get(id).await.unwrap().expect("stored");
    assert_eq!((read.pinned, read.score), (vec![note], 3), "{label}");
    let found: Option<Post> = idem.find(post().natural_key()).await.unwrap();
    assert_eq!(found, Some(post()), "{label}");
}

#[tokio::test]
async fn code_written_against_the_backend_trait_runs_on_every_store() {
    for db in fresh_backends("one_api").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let label = db.to_string();
        match &db {
            Db::Mongo { store, .. } => every_primitive(store, &label).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => idem_tests::through_postgres!(sqlx, client, |c| every_primitive(
                &store.on(c),
                &label
            )
            .await),
            Db::Sqlite {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                every_primitive(&store.on(&mut connection), &label).await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                every_primitive(&store.on(&mut connection), &label).await
            }
        }
    }
}
