//! The guide's "Code for every store": one function written against `idem_core::Backend` runs on
//! every store under test (MongoDB with and without update pipelines, PostgreSQL 15 and 18
//! through tokio-postgres and sqlx, SQLite), with the same outcomes. The function below is the
//! guide's, word for word: [`the_guide_shows_this_function`] fails when the two differ.

use idem_core::{Backend, Change, Error, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "entries")]
struct Entry {
    #[idem(key)]
    entry_id: String,
    user_id: String,
    text: String,
}

#[derive(Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
struct Account {
    #[idem(key)]
    user_id: String,
    #[idem(effect)]
    points: i64,
}

// guide: begin
/// Stores a device's push of journal entries and credits 10 points per entry, once, on any store.
async fn save_push<B: Backend>(db: &B, entries: &[Entry]) -> Result<usize, Error> {
    let report = db.upsert_many(entries).await?;
    for entry in entries {
        let account = Account {
            user_id: entry.user_id.clone(),
            points: 0,
        };
        db.upsert(&account).await?; // inserted once; only `apply_once` moves `points`
        let op = entry.op_id("points")?;
        db.apply_once::<Account>(account.id()?, &op, &[Change::add("points", 10)])
            .await?;
    }
    Ok(report.count(Outcome::Inserted))
}
// guide: end

fn entry(entry_id: &str, text: &str) -> Entry {
    Entry {
        entry_id: entry_id.into(),
        user_id: "u1".into(),
        text: text.into(),
    }
}

/// A push, its replay, and a push that edits one entry and adds another, through nothing but
/// the trait: the entries converge and each is credited once.
async fn pushes<B: Backend>(db: &B, label: &str) {
    db.ensure_schema::<Entry>().await.unwrap();
    db.ensure_schema::<Account>().await.unwrap();
    let first = [entry("e1", "one"), entry("e2", "two")];
    assert_eq!(save_push(db, &first).await.unwrap(), 2, "{label}");
    assert_eq!(save_push(db, &first).await.unwrap(), 0, "{label}: a replay");
    let second = [entry("e2", "two, edited"), entry("e3", "three")];
    assert_eq!(save_push(db, &second).await.unwrap(), 1, "{label}");
    let account = Account {
        user_id: "u1".into(),
        points: 0,
    };
    let stored: Account = db.get(account.id().unwrap()).await.unwrap().unwrap();
    assert_eq!(stored.points, 30, "{label}: 10 points per entry, once each");
    let edited: Entry = db
        .find(entry("e2", "").natural_key())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(edited.text, "two, edited", "{label}");
}

#[tokio::test]
async fn the_guides_generic_function_runs_on_every_store() {
    for db in fresh_backends("every_store").await {
        let label = db.to_string();
        match &db {
            Db::Mongo { store, .. } => pushes(store, &label).await,
            Db::Postgres {
                store,
                client,
                sqlx,
                ..
            } => {
                idem_tests::through_postgres!(sqlx, client, |c| pushes(&store.on(c), &label).await)
            }
            Db::Sqlite {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                pushes(&store.on(&mut connection), &label).await
            }
            Db::Mysql {
                store, connection, ..
            } => {
                let mut connection = connection.lock().await;
                pushes(&store.on(&mut connection), &label).await
            }
        }
    }
}

/// The function above, between its markers, is in docs/GUIDE.md as it is here.
#[test]
fn the_guide_shows_this_function() {
    let source = include_str!("every_store.rs");
    let (_, rest) = source.split_once("// guide: begin\n").unwrap();
    let (function, _) = rest.split_once("// guide: end\n").unwrap();
    let guide = include_str!("../../../docs/GUIDE.md");
    assert!(
        guide.contains(function),
        "docs/GUIDE.md (\"Code for every store\") must show save_push as it is here:\n{function}"
    );
}
