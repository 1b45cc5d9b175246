//! `push`: an item appended once however often and however concurrently it is sent, items told
//! apart by their whole key, and an item without a usable key refused before anything is sent.

use idem_core::{Error, ErrorKind, Idempotent, Outcome, Pushed};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

use crate::support::{assert_db_sent_nothing, forget_commands};

/// A thread of comments, pushed once each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    topic: String,
    title: String,
    #[idem(push_by = "commentId")]
    comments: Vec<Comment>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    comment_id: String,
    text: String,
}

/// The texts of the stored thread's comments, in list order.
async fn comment_texts(db: &Db) -> Vec<serde_json::Value> {
    let stored = db.stored::<Thread>().await;
    stored[0]["comments"]
        .as_array()
        .unwrap_or_else(|| panic!("{db}: {stored:?}"))
        .iter()
        .map(|comment| comment["text"].clone())
        .collect()
}

/// A retried push never appends twice (an item with the same key is the same item, whatever
/// else it says), racing pushes of one item append it once, and an upsert neither overwrites
/// nor hashes the pushed list.
#[tokio::test]
async fn a_push_appends_once_however_often_and_however_concurrently_it_is_sent() {
    for db in fresh_backends("push").await {
        db.ensure::<Thread>().await;
        let thread = Thread {
            topic: "rust".into(),
            title: "Rust".into(),
            comments: Vec::new(),
        };
        let id = thread.id().unwrap();
        let comment = |n: usize| Comment {
            comment_id: format!("c{n}"),
            text: format!("comment {n}"),
        };
        assert!(
            matches!(
                db.push::<Thread, _>(id, "comments", &comment(0))
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::NotFound)
            ),
            "{db}"
        );
        assert_eq!(db.upsert(&thread).await.unwrap(), Outcome::Inserted, "{db}");
        assert!(
            comment_texts(&db).await.is_empty(),
            "{db}: the list starts empty"
        );
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &comment(0))
                .await
                .unwrap(),
            Pushed::Appended,
            "{db}"
        );
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &comment(0))
                .await
                .unwrap(),
            Pushed::AlreadyPresent,
            "{db}"
        );
        let edited = Comment {
            text: "edited".into(),
            ..comment(0)
        };
        assert_eq!(
            db.push::<Thread, _>(id, "comments", &edited).await.unwrap(),
            Pushed::AlreadyPresent,
            "{db}: the same key is the same comment"
        );
        assert_eq!(comment_texts(&db).await, ["comment 0"], "{db}");
        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                let mut appended = 0;
                for n in 1..5 {
                    if racer
                        .push::<Thread, _>(id, "comments", &comment(n))
                        .await
                        .unwrap()
                        == Pushed::Appended
                    {
                        appended += 1;
                    }
                }
                appended
            }));
        }
        let mut appended = 0;
        for racer in racers {
            appended += racer.await.unwrap();
        }
        assert_eq!(appended, 4, "{db}");
        // An upsert of the thread leaves the list alone, whatever list it carries: the list is
        // not content.
        assert_eq!(
            db.upsert(&thread).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let with_other_list = Thread {
            comments: vec![comment(7)],
            ..thread.clone()
        };
        assert_eq!(
            thread.content_hash().unwrap(),
            with_other_list.content_hash().unwrap(),
            "{db}"
        );
        assert_eq!(
            db.upsert(&with_other_list).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        // An edit keeps the pushed comments.
        let retitled = Thread {
            title: "Rust!".into(),
            ..with_other_list
        };
        assert_eq!(
            db.upsert(&retitled).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Thread>().await;
        assert_eq!(stored[0]["title"], "Rust!", "{db}");
        assert_eq!(comment_texts(&db).await.len(), 5, "{db}");
        assert!(
            matches!(
                db.push::<Thread, _>(id, "topic", &comment(9))
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::NotAPushedField { .. })
            ),
            "{db}"
        );
    }
}

/// A schedule whose slots are told apart by a composite key: a struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "schedules")]
struct Schedule {
    #[idem(key)]
    room: String,
    #[idem(push_by = "at")]
    slots: Vec<Slot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Slot {
    at: SlotKey,
    booked_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SlotKey {
    day: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hour: Option<u32>,
    seats: Vec<u32>,
}

/// Items are the same item when their keys are equal, not when one key holds the other: a
/// composite key that is a part of a stored one (fewer fields, fewer list entries) is another
/// item, and is appended.
#[tokio::test]
async fn a_composite_item_key_is_compared_whole() {
    let slot = |day: &str, hour: Option<u32>, seats: &[u32], who: &str| Slot {
        at: SlotKey {
            day: day.into(),
            hour,
            seats: seats.to_vec(),
        },
        booked_by: who.into(),
    };
    for db in fresh_backends("composite_push").await {
        db.ensure::<Schedule>().await;
        let schedule = Schedule {
            room: "blue".into(),
            slots: Vec::new(),
        };
        db.upsert(&schedule).await.unwrap();
        let id = schedule.id().unwrap();
        let pushes = [
            (slot("mon", Some(9), &[1, 2], "ada"), Pushed::Appended),
            (slot("mon", Some(9), &[1, 2], "bob"), Pushed::AlreadyPresent),
            (slot("mon", None, &[1, 2], "cy"), Pushed::Appended),
            (slot("mon", Some(9), &[1], "di"), Pushed::Appended),
            (slot("mon", Some(9), &[], "ed"), Pushed::Appended),
            (slot("mon", Some(9), &[1], "fay"), Pushed::AlreadyPresent),
        ];
        for (item, expected) in &pushes {
            assert_eq!(
                db.push::<Schedule, _>(id, "slots", item).await.unwrap(),
                *expected,
                "{db}: {item:?}"
            );
        }
        let stored = db.get::<Schedule>(id).await.unwrap().unwrap();
        let booked: Vec<&str> = stored.slots.iter().map(|s| s.booked_by.as_str()).collect();
        assert_eq!(booked, ["ada", "cy", "di", "ed"], "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// Items without their key

/// A comment whose key serde leaves out when it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LooseComment {
    #[serde(skip_serializing_if = "Option::is_none")]
    comment_id: Option<String>,
    text: String,
}

/// A thread whose comments are pushed by a key they may lack.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct LooseThread {
    #[idem(key)]
    slug: String,
    title: String,
    #[idem(push_by = "comment_id")]
    comments: Vec<LooseComment>,
}

/// `thread.push_comments(…)`, the generated method, on `db`'s backend.
async fn push_comment(
    db: &Db,
    thread: &LooseThread,
    comment: &LooseComment,
) -> Result<Pushed, Error> {
    match db {
        Db::Mongo { store, .. } => thread.push_comments(store, comment).await,
        Db::Postgres {
            store,
            client,
            sqlx,
            ..
        } => idem_tests::through_postgres!(sqlx, client, |c| {
            thread.push_comments(&store.on(c), comment).await
        }),
        Db::Sqlite {
            store, connection, ..
        } => {
            let mut connection = connection.lock().await;
            thread
                .push_comments(&store.on(&mut connection), comment)
                .await
        }
        Db::Mysql {
            store, connection, ..
        } => {
            let mut connection = connection.lock().await;
            thread
                .push_comments(&store.on(&mut connection), comment)
                .await
        }
    }
}

/// A comment as another client's type writes it: camelCase.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RenamedComment {
    comment_id: String,
    text: String,
}

/// A comment keyed by a list.
#[derive(Serialize)]
struct ListKeyComment {
    comment_id: Vec<String>,
    text: String,
}

/// A comment whose missing key serde writes as null.
#[derive(Serialize)]
struct NullKeyComment {
    comment_id: Option<String>,
    text: String,
}

#[tokio::test]
async fn pushing_an_item_without_its_key_is_refused() {
    for db in fresh_backends("item_without_key").await {
        db.ensure::<LooseThread>().await;
        let thread = LooseThread {
            slug: "launch".into(),
            title: "Launch".into(),
            comments: Vec::new(),
        };
        db.upsert(&thread).await.unwrap();
        let before = db.raw::<LooseThread>().await;
        forget_commands(&db);

        let anonymous = LooseComment {
            comment_id: None,
            text: "who am I?".into(),
        };
        match push_comment(&db, &thread, &anonymous).await {
            Err(error) => match error.kind() {
                ErrorKind::ItemWithoutKey {
                    field,
                    item_key,
                    written,
                } => {
                    assert_eq!(*field, "comments", "{db}");
                    assert_eq!(*item_key, "comment_id", "{db}");
                    assert_eq!(*written, ["text"], "{db}: what the item writes instead");
                    assert_eq!(error.document().id, Some(thread.id().unwrap()), "{db}");
                }
                _ => panic!("{db}: expected ItemWithoutKey, got {error:?}"),
            },
            other => panic!("{db}: expected ItemWithoutKey, got {other:?}"),
        }
        // An item type whose `rename_all` the list's `push_by` does not spell: the error shows
        // the name it writes the key under.
        let renamed = RenamedComment {
            comment_id: "c1".into(),
            text: "hello".into(),
        };
        let error = db
            .push::<LooseThread, _>(thread.id().unwrap(), "comments", &renamed)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains(
                "has no `comment_id` field to tell it apart; it writes `commentId`, `text`"
            ),
            "{db}: {error}"
        );
        // A key serde writes as null is no key: two such items would fold into one, the
        // second answered `AlreadyPresent` and lost.
        let null_key = NullKeyComment {
            comment_id: None,
            text: "who am I?".into(),
        };
        let error = db
            .push::<LooseThread, _>(thread.id().unwrap(), "comments", &null_key)
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("has no `comment_id` field to tell it apart; it writes `text`"),
            "{db}: {error}"
        );
        // A key that is a list: MongoDB would match it element by element, so `["c1"]` would
        // pass for any stored item holding "c1" among its keys.
        let listed = ListKeyComment {
            comment_id: vec!["c1".into(), "c2".into()],
            text: "two at once".into(),
        };
        let error = db
            .push::<LooseThread, _>(thread.id().unwrap(), "comments", &listed)
            .await
            .unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::Serialize { .. })
                && error
                    .to_string()
                    .contains("has a list under its key `comment_id`"),
            "{db}: {error}"
        );
        // An item that is not a document at all has no key either.
        assert!(
            matches!(
                db.push::<LooseThread, _>(thread.id().unwrap(), "comments", &"just text")
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::ItemWithoutKey { .. })
            ),
            "{db}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(
            db.raw::<LooseThread>().await,
            before,
            "{db}: nothing written"
        );
    }
}

/// A list whose items are free-form: their keys are whatever JSON another writer sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "feeds")]
struct Feed {
    #[idem(key)]
    name: String,
    #[idem(push_by = "key")]
    items: Vec<serde_json::Value>,
}

/// An item's key compares as the value it is, the same on every backend: one number however it
/// is written (`1` and `1.0`, `-0.0` and `0`, `2^53` as a float and as an integer), never equal to
/// a string or a boolean, and two floats apart in their last bit are two keys (where a key read
/// with 15 digits took `0.3` for `0.1 + 0.2` and dropped its push); a structured key by its
/// entries, numbers by value there too.
#[tokio::test]
async fn an_item_key_compares_by_value_on_every_backend() {
    let pushes = [
        (serde_json::json!(1), Pushed::Appended),
        (serde_json::json!(1.0), Pushed::AlreadyPresent),
        (serde_json::json!("1"), Pushed::Appended),
        (serde_json::json!(true), Pushed::Appended),
        (serde_json::json!(-0.0), Pushed::Appended),
        (serde_json::json!(0), Pushed::AlreadyPresent),
        (serde_json::json!(0.1 + 0.2), Pushed::Appended),
        (serde_json::json!(0.3), Pushed::Appended),
        (serde_json::json!(9_007_199_254_740_992.0), Pushed::Appended),
        (
            serde_json::json!(9_007_199_254_740_992_i64),
            Pushed::AlreadyPresent,
        ),
        (
            serde_json::json!(9_007_199_254_740_993_i64),
            Pushed::Appended,
        ),
        (
            serde_json::json!({"a": 1, "b": [1, null]}),
            Pushed::Appended,
        ),
        (
            serde_json::json!({"a": 1.0, "b": [1, null]}),
            Pushed::AlreadyPresent,
        ),
        (
            serde_json::json!({"a": 1, "b": [1, null], "c": null}),
            Pushed::Appended,
        ),
        (serde_json::json!({"x": 0.1 + 0.2}), Pushed::Appended),
        (serde_json::json!({"x": 0.3}), Pushed::Appended),
    ];
    for db in fresh_backends("push_key_values").await {
        db.ensure::<Feed>().await;
        let feed = Feed {
            name: "f".into(),
            items: Vec::new(),
        };
        db.upsert(&feed).await.unwrap();
        let id = feed.id().unwrap();
        let mut appended = Vec::new();
        for (n, (key, expected)) in pushes.iter().enumerate() {
            let item = serde_json::json!({ "key": key, "n": n });
            let pushed = db.push::<Feed, _>(id, "items", &item).await.unwrap();
            assert_eq!(pushed, *expected, "{db}: key {key}");
            if pushed == Pushed::Appended {
                appended.push(serde_json::json!(n));
            }
        }
        // Integers beyond `i64`, which BSON cannot hold: two keys where the SQL stores keep
        // them, not one double.
        if db.is_sql() {
            for (key, n) in [(u64::MAX, 90), (u64::MAX - 1, 91)] {
                let item = serde_json::json!({ "key": key, "n": n });
                let pushed = db.push::<Feed, _>(id, "items", &item).await.unwrap();
                assert_eq!(pushed, Pushed::Appended, "{db}: key {key}");
                appended.push(serde_json::json!(n));
            }
        }
        let stored = db.stored::<Feed>().await;
        let numbers: Vec<serde_json::Value> = stored[0]["items"]
            .as_array()
            .unwrap_or_else(|| panic!("{db}: {stored:?}"))
            .iter()
            .map(|item| item["n"].clone())
            .collect();
        assert_eq!(numbers, appended, "{db}: each appended once, in order");
    }
}

/// A list another tool stored as something else (a string, a number, an object) is refused the
/// same way on every store, naming the field, and left as it was (SQLite answered `Appended` and
/// appended nothing to a number or an object; PostgreSQL failed on the server); a null list is
/// an empty one.
#[tokio::test]
async fn a_push_to_a_list_stored_as_something_else_is_refused_on_every_store() {
    for db in fresh_backends("push_not_a_list").await {
        db.ensure::<Feed>().await;
        let cases = [
            serde_json::json!("x"),
            serde_json::json!(5),
            serde_json::json!({"a": 1}),
            serde_json::Value::Null,
            serde_json::json!(["bare", 7, null, { "key": 2 }]),
        ];
        for (n, stored) in cases.into_iter().enumerate() {
            let name = format!("f{n}");
            let id = Feed {
                name: name.clone(),
                items: Vec::new(),
            }
            .id()
            .unwrap();
            let mut entries = serde_json::Map::new();
            entries.insert("name".into(), name.clone().into());
            entries.insert("items".into(), stored.clone());
            db.write_json_as_another_tool::<Feed>(&id.to_string(), entries)
                .await;
            let item = serde_json::json!({ "key": 1 });
            let pushed = db.push::<Feed, _>(id, "items", &item).await;
            let after = db
                .stored::<Feed>()
                .await
                .into_iter()
                .find(|row| row["name"] == name)
                .map(|row| row["items"].clone());
            match stored {
                serde_json::Value::Null => {
                    assert_eq!(pushed.unwrap(), Pushed::Appended, "{db}");
                    assert_eq!(after, Some(serde_json::json!([item])), "{db}");
                }
                // A list holding items that are no objects: they hold no key.
                serde_json::Value::Array(mut items) => {
                    assert_eq!(pushed.unwrap(), Pushed::Appended, "{db}");
                    items.push(item);
                    assert_eq!(after, Some(serde_json::Value::Array(items)), "{db}");
                }
                stored => {
                    let error = pushed.unwrap_err();
                    let shown = error.to_string();
                    assert!(
                        matches!(error.kind(), ErrorKind::Deserialize { .. })
                            && shown.contains("`items` is stored as")
                            && shown.contains("not a list, so nothing can be pushed to it"),
                        "{db}: {stored}: {shown}"
                    );
                    assert_eq!(after, Some(stored), "{db}: left as it was");
                }
            }
        }
    }
}

/// A season: its rounds pushed once each, its standings set by operations; both hold maps keyed
/// by integers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "seasons")]
struct Season {
    #[idem(key)]
    league: String,
    #[idem(push_by = "round")]
    rounds: Vec<Round>,
    #[idem(effect)]
    standings: std::collections::BTreeMap<u32, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Round {
    round: u32,
    scorers: std::collections::BTreeMap<u32, String>,
}

/// A pushed item and an operation's set value holding a map keyed by integers are stored as an
/// upsert stores such a map, each key as text, on every store, and read back as their type
/// (MongoDB refused both, naming no field).
#[tokio::test]
async fn a_pushed_item_and_a_set_value_keep_a_map_with_integer_keys() {
    for db in fresh_backends("integer_keys_pushed_and_set").await {
        db.ensure::<Season>().await;
        let season = Season {
            league: "north".into(),
            rounds: Vec::new(),
            standings: [(1, "ada".to_owned())].into(),
        };
        db.upsert(&season).await.unwrap();
        let id = season.id().unwrap();
        let round = Round {
            round: 1,
            scorers: [(9, "ada".to_owned()), (10, "bob".to_owned())].into(),
        };
        for expected in [Pushed::Appended, Pushed::AlreadyPresent] {
            assert_eq!(
                db.push::<Season, _>(id, "rounds", &round).await.unwrap(),
                expected,
                "{db}"
            );
        }
        let standings: std::collections::BTreeMap<u32, String> =
            [(1, "bob".to_owned()), (2, "ada".to_owned())].into();
        let op = idem_core::OpId::new("round-1");
        let changes = [idem_core::Change::set("standings", &standings)];
        for expected in [
            idem_core::Applied::Applied,
            idem_core::Applied::AlreadyApplied,
        ] {
            assert_eq!(
                db.apply_once::<Season>(id, &op, &changes).await.unwrap(),
                expected,
                "{db}"
            );
        }
        let stored = db.stored::<Season>().await;
        assert_eq!(
            stored[0]["rounds"],
            serde_json::json!([{ "round": 1, "scorers": { "9": "ada", "10": "bob" } }]),
            "{db}"
        );
        assert_eq!(
            stored[0]["standings"],
            serde_json::json!({ "1": "bob", "2": "ada" }),
            "{db}"
        );
        assert_eq!(
            db.get::<Season>(id).await.unwrap(),
            Some(Season {
                rounds: vec![round.clone()],
                standings,
                ..season.clone()
            }),
            "{db}"
        );
    }
}
