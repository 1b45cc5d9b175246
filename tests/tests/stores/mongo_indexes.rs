//! The indexes a MongoDB store meets, and the writes that meet them: a unique index on the
//! natural key under another name serves as the natural-key index; one that lets a natural key
//! be stored twice (partial, sparse) or compares keys otherwise than idem (a collation) is
//! refused before any write; another unique index refuses the events and members that collide
//! in it, naming it. Also what MongoDB must answer as PostgreSQL does: `delete_by_id` refuses a
//! null marker, `insert_new` reports each member (inserted, stored already, refused), and a push
//! starts a list another tool left null.

use idem_core::mongo::{Store, NATURAL_KEY_INDEX};
use idem_core::{Deletion, Error, ErrorKind, Idempotent, Insertion, Outcome, Pushed};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{entry, post, Entry, Post};
use idem_tests::{
    delay_next, fail_point_lock, fresh_database, monitored_client, raw_documents, stored_documents,
};
use mongodb::bson::{doc, Document};
use mongodb::options::{Collation, IndexOptions};
use mongodb::IndexModel;
use serde::{Deserialize, Serialize};

async fn index(store: &Store, collection: &str, keys: Document, options: IndexOptions) {
    store
        .database()
        .collection::<Document>(collection)
        .create_index(IndexModel::builder().keys(keys).options(options).build())
        .await
        .unwrap();
}

async fn index_names(store: &Store, collection: &str) -> Vec<String> {
    store
        .database()
        .collection::<Document>(collection)
        .list_index_names()
        .await
        .unwrap()
}

/// Index options naming the index `name`, unique if `unique`.
fn named(name: &str, unique: bool) -> IndexOptions {
    let mut options = IndexOptions::default();
    options.name = Some(name.to_owned());
    options.unique = unique.then_some(true);
    options
}

fn moved_post() -> Post {
    Post {
        published_at: 1_600_000_000_000,
        ..post()
    }
}

/// A unique index on exactly the natural key, under another name (created by a migration, or by
/// hand before idem), gives the guarantee idem's own would: the store uses it, creates no second
/// one, and refuses a changed id through it. The server would not build idem's beside one with
/// the same keys (`IndexOptionsConflict`), which refused every write.
#[tokio::test]
async fn a_unique_index_on_the_natural_key_under_another_name_serves_as_it() {
    // The same keys, and the same fields in another order and direction: unique together alike.
    for (test, keys) in [
        ("ix_other_name", doc! { "slug": 1, "lang": 1 }),
        ("ix_other_order", doc! { "lang": -1, "slug": 1.0 }),
    ] {
        let (database, log) = fresh_database(test).await;
        let store = Store::new(database);
        index(&store, "posts", keys.clone(), named("posts_by_key", true)).await;
        store.ensure_indexes::<Post>().await.unwrap();

        let writer = Store::new(store.database().clone());
        let _ = log.take();
        assert_eq!(writer.upsert(&post()).await.unwrap(), Outcome::Inserted);
        assert_eq!(log.take().names, ["listIndexes", "findAndModify"], "{keys}");
        assert!(
            matches!(
                writer.upsert(&moved_post()).await.map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged { .. })
            ),
            "{keys}"
        );
        let report = Store::new(store.database().clone())
            .insert_new(&[moved_post(), post()])
            .await
            .unwrap();
        assert!(
            matches!(
                report.results()[0].as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged { .. })
            ),
            "{keys}: {:?}",
            report.results()
        );
        assert!(matches!(report.results()[1], Ok(Insertion::AlreadyStored)));
        let mut names = index_names(&store, "posts").await;
        names.sort();
        assert_eq!(names, ["_id_", "posts_by_key"], "{keys}");
        assert_eq!(stored_documents(store.database(), "posts").await.len(), 1);
    }
}

/// A unique index on the natural key created by another tool while the store builds its own
/// makes the server refuse idem's (`IndexOptionsConflict`): the store looks again and uses it.
#[tokio::test]
async fn a_natural_key_index_another_tool_creates_meanwhile_is_used() {
    let (database, log) = fresh_database("ix_racing_index").await;
    let store = Store::new(database);
    // The collection exists, so the listing finds it empty, then the build waits.
    store.database().create_collection("posts").await.unwrap();
    let _fail_point = fail_point_lock().lock().await;
    delay_next(store.database(), "createIndexes", 1_000).await;
    let (other_tool, _) = monitored_client().await;
    let posts = other_tool
        .database(store.database().name())
        .collection::<Document>("posts");
    let racing = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let keys = doc! { "slug": 1, "lang": 1 };
        // With the simple collation named, as idem names it: the test server builds an index
        // that differs from idem's only there beside it, where MongoDB treats them as one.
        let mut options = named("posts_by_key", true);
        options.collation = Some(Collation::builder().locale("simple").build());
        posts
            .create_index(IndexModel::builder().keys(keys).options(options).build())
            .await
            .unwrap();
    });
    let _ = log.take();
    store.ensure_indexes::<Post>().await.unwrap();
    racing.await.unwrap();
    // Refused by the server, then found by a second listing.
    assert_eq!(
        log.take().names,
        ["listIndexes", "createIndexes", "listIndexes"]
    );
    let mut names = index_names(&store, "posts").await;
    names.sort();
    assert_eq!(names, ["_id_", "posts_by_key"]);
    assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
}

/// The refusal of a natural-key index that cannot serve: a `SchemaMismatch` naming the index and
/// `what` is wrong with it, from `ensure_indexes` and from the first write, with nothing written.
async fn assert_refused(store: &Store, index: &str, what: &str) {
    let check = |result: Result<(), Error>| match result {
        Err(error) if matches!(error.kind(), ErrorKind::SchemaMismatch { .. }) => {
            let message = error.to_string();
            assert!(message.contains(index), "{message}");
            assert!(message.contains(what), "{message}");
            assert!(!error.is_retryable(), "{message}");
        }
        other => panic!("expected SchemaMismatch naming {index}, got {other:?}"),
    };
    check(store.ensure_indexes::<Post>().await);
    let writer = Store::new(store.database().clone());
    check(writer.upsert(&post()).await.map(|_| ()));
    check(writer.upsert(&post()).await.map(|_| ()));
    assert!(raw_documents(store.database(), "posts").await.is_empty());
}

/// A partial natural-key index leaves the documents outside its filter unchecked: two of them
/// could hold one natural key under two ids. Refused, as PostgreSQL refuses a partial unique
/// index.
#[tokio::test]
async fn a_partial_natural_key_index_is_refused_naming_it() {
    let (database, _log) = fresh_database("ix_partial").await;
    let store = Store::new(database);
    let mut options = named(NATURAL_KEY_INDEX, true);
    options.partial_filter_expression = Some(doc! { "lang": "fr" });
    index(&store, "posts", doc! { "slug": 1, "lang": 1 }, options).await;
    assert_refused(&store, NATURAL_KEY_INDEX, "partial").await;
}

/// A sparse natural-key index leaves out the documents missing every natural-key field.
#[tokio::test]
async fn a_sparse_natural_key_index_is_refused_naming_it() {
    let (database, _log) = fresh_database("ix_sparse").await;
    let store = Store::new(database);
    let mut options = named(NATURAL_KEY_INDEX, true);
    options.sparse = Some(true);
    index(&store, "posts", doc! { "slug": 1, "lang": 1 }, options).await;
    assert_refused(&store, NATURAL_KEY_INDEX, "sparse").await;
}

/// A natural-key index under a collation compares keys otherwise than idem: "Hello" and "hello"
/// collide in a case-insensitive one, and no read idem makes explains the collision.
#[tokio::test]
async fn a_natural_key_index_with_a_collation_is_refused_naming_it() {
    let (database, _log) = fresh_database("ix_collation").await;
    let store = Store::new(database);
    let collation = Collation::builder()
        .locale("en")
        .strength(mongodb::options::CollationStrength::Secondary)
        .build();
    let mut options = named(NATURAL_KEY_INDEX, true);
    options.collation = Some(collation);
    index(&store, "posts", doc! { "slug": 1, "lang": 1 }, options).await;
    assert_refused(&store, NATURAL_KEY_INDEX, "collation").await;
}

/// An index on exactly the natural key under another name that cannot serve (here: not unique)
/// is not taken for the natural-key index: idem's is created beside it (the test server builds
/// it), or the refusal names that index and what keeps it from serving (a server that will not
/// build a second index on the same keys).
#[tokio::test]
async fn an_index_on_the_natural_key_that_cannot_serve_is_not_used() {
    let (database, _log) = fresh_database("ix_not_unique").await;
    let store = Store::new(database);
    let keys = doc! { "slug": 1, "lang": 1 };
    index(&store, "posts", keys, named("posts_by_key", false)).await;
    match store.ensure_indexes::<Post>().await {
        Ok(()) => {
            let names = index_names(&store, "posts").await;
            assert!(
                names.iter().any(|name| name == NATURAL_KEY_INDEX),
                "{names:?}"
            );
            assert_eq!(store.upsert(&post()).await.unwrap(), Outcome::Inserted);
            assert!(matches!(
                store.upsert(&moved_post()).await.map_err(Error::into_kind),
                Err(ErrorKind::FrozenFieldChanged { .. })
            ));
        }
        Err(error) if matches!(error.kind(), ErrorKind::SchemaMismatch { .. }) => {
            let message = error.to_string();
            assert!(message.contains("posts_by_key is not unique"), "{message}");
        }
        Err(other) => panic!("expected the index built or SchemaMismatch, got {other:?}"),
    }
}

/// Deleting by id with a marker that serializes as null would store no marker: refused before
/// anything is sent, on every backend.
#[tokio::test]
async fn delete_by_id_with_a_null_marker_is_refused_before_anything_is_sent() {
    for db in fresh_backends("ix_null_marker").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Entry>().await;
        let stored = entry("e1", 1, "kept");
        assert_eq!(db.upsert(&stored).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Entry>().await;
        let id = stored.id().unwrap();
        if let Some(log) = db.command_log() {
            let _ = log.take();
        }
        let expect_refusal =
            |result: Result<Deletion, Error>| match result.map_err(Error::into_kind) {
                Err(ErrorKind::TombstoneNotSet { field, .. }) => {
                    assert_eq!(field, "deleted_at", "{db}")
                }
                other => panic!("{db}: expected TombstoneNotSet, got {other:?}"),
            };
        expect_refusal(db.delete_by_id::<Entry, _>(id, &None::<i64>).await);
        expect_refusal(db.delete_by_id::<Entry, _>(id, &()).await);
        if let Some(log) = db.command_log() {
            assert!(log.take().names.is_empty(), "{db}: sent nothing");
        }
        assert_eq!(db.raw::<Entry>().await, before, "{db}");
        assert_eq!(db.get::<Entry>(id).await.unwrap(), Some(stored), "{db}");
    }
}

/// An event (no natural key; an idempotency key) whose field collides in another unique index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "signups")]
struct Signup {
    #[idem(idempotency_key)]
    request: String,
    email: String,
}

/// `record` of an event colliding in another unique index is refused naming it, after one write
/// and one read: it was a loop until `Contention`, which says retrying is safe, so a retrying
/// caller never stopped.
#[tokio::test]
async fn record_refuses_an_event_colliding_in_another_unique_index_naming_it() {
    let (database, log) = fresh_database("ix_record_email").await;
    let store = Store::new(database);
    store.ensure_indexes::<Signup>().await.unwrap();
    let email = doc! { "email": 1 };
    index(&store, "signups", email, named("signups_email", true)).await;
    let signup = |request: &str| Signup {
        request: request.into(),
        email: "ada@example.com".into(),
    };
    let first = store.record(&signup("req-1")).await.unwrap();
    assert_eq!(first.outcome, Outcome::Inserted);
    let before = raw_documents(store.database(), "signups").await;
    let _ = log.take();
    match store.record(&signup("req-2")).await {
        Err(error) if matches!(error.kind(), ErrorKind::UniqueIndexConflict { .. }) => {
            let ErrorKind::UniqueIndexConflict { index, .. } = error.kind() else {
                unreachable!()
            };
            assert_eq!(index, "signups_email");
            assert!(!error.is_retryable(), "{error}");
        }
        other => panic!("expected UniqueIndexConflict, got {other:?}"),
    }
    // The server names the index: the refusal needs no read.
    assert_eq!(log.take().names, ["findAndModify"]);
    assert_eq!(raw_documents(store.database(), "signups").await, before);
    // The first event's retry still finds it.
    assert_eq!(
        store.record(&signup("req-1")).await.unwrap(),
        idem_core::Recorded::new(first.id, Outcome::Unchanged)
    );
}

/// An award a rule derives from a user's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "awards")]
struct Award {
    #[idem(key)]
    user: String,
    #[idem(key)]
    badge: String,
}

fn award(badge: &str) -> Award {
    Award {
        user: "ada".into(),
        badge: badge.into(),
    }
}

/// A collection validator that refuses one member of an `insert_new` does not take the others
/// with it: the report holds the members it inserted, so their effects run, and the refusal of
/// the one it could not store; a retry reports the first stored already.
#[tokio::test]
async fn insert_new_reports_what_it_inserted_beside_a_member_the_server_refused() {
    let (database, _log) = fresh_database("ix_validator").await;
    database
        .create_collection("awards")
        .validator(doc! { "badge": { "$ne": "forbidden" } })
        .await
        .unwrap();
    let store = Store::new(database);
    let members = [award("first"), award("forbidden"), award("third")];
    let expect_refused = |result: &Result<Insertion, Error>| match result {
        Err(error) if matches!(error.kind(), ErrorKind::WriteRefused { code: 121, .. }) => {
            assert!(error.to_string().contains("forbidden"), "{error}");
        }
        other => panic!("expected the validator's refusal, got {other:?}"),
    };

    let report = store.insert_new(&members).await.unwrap();
    assert_eq!(report.inserted(), [award("first"), award("third")]);
    assert!(matches!(report.results()[0], Ok(Insertion::Inserted)));
    expect_refused(&report.results()[1]);
    assert!(matches!(report.results()[2], Ok(Insertion::Inserted)));
    assert_eq!(
        report.to_string(),
        "2 inserted, 0 stored already, 1 refused"
    );

    let retry = store.insert_new(&members).await.unwrap();
    assert!(retry.inserted().is_empty());
    assert!(matches!(retry.results()[0], Ok(Insertion::AlreadyStored)));
    expect_refused(&retry.results()[1]);
    assert!(matches!(retry.results()[2], Ok(Insertion::AlreadyStored)));
    assert_eq!(stored_documents(store.database(), "awards").await.len(), 2);
}

/// A member whose natural key is stored under another id (its timestamp moved) is refused in
/// the report, beside the members of the call inserted (and a copy of one, stored already), on
/// every backend; a retry reports them stored.
#[tokio::test]
async fn insert_new_reports_what_it_inserted_beside_a_member_whose_id_changed() {
    for db in fresh_backends("ix_insert_moved").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        assert_eq!(db.upsert(&post()).await.unwrap(), Outcome::Inserted, "{db}");
        let other = Post {
            slug: "second".into(),
            ..post()
        };
        let members = [moved_post(), other.clone(), other.clone()];
        let expect_refused =
            |result: &Result<Insertion, Error>| match result.as_ref().map_err(Error::kind) {
                Err(ErrorKind::FrozenFieldChanged { field, .. }) => {
                    assert_eq!(*field, "published_at", "{db}")
                }
                other => panic!("{db}: expected FrozenFieldChanged, got {other:?}"),
            };

        let report = db.insert_new(&members).await.unwrap();
        assert_eq!(report.inserted(), std::slice::from_ref(&other), "{db}");
        expect_refused(&report.results()[0]);
        assert!(
            matches!(report.results()[1], Ok(Insertion::Inserted)),
            "{db}"
        );
        assert!(
            matches!(report.results()[2], Ok(Insertion::AlreadyStored)),
            "{db}"
        );

        let retry = db.insert_new(&members).await.unwrap();
        assert!(retry.inserted().is_empty(), "{db}");
        expect_refused(&retry.results()[0]);
        assert_eq!(retry.count(Insertion::AlreadyStored), 2, "{db}");
        assert_eq!(db.stored::<Post>().await.len(), 2, "{db}");
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

fn member(handle: &str) -> Member {
    Member {
        handle: handle.into(),
        email: format!("{handle}@example.com"),
    }
}

/// A member that collides in another unique index is refused naming that index, at once: the
/// collision is permanent, so it is neither `Contention` nor retried.
#[tokio::test]
async fn insert_new_refuses_a_member_colliding_in_another_unique_index_naming_it() {
    let (database, log) = fresh_database("ix_insert_email").await;
    let store = Store::new(database);
    store.ensure_indexes::<Member>().await.unwrap();
    let email = doc! { "email": 1 };
    index(&store, "members", email, named("email_unique", true)).await;
    assert_eq!(
        store.upsert(&member("ada")).await.unwrap(),
        Outcome::Inserted
    );
    let impostor = Member {
        handle: "grace".into(),
        ..member("ada")
    };
    let before = raw_documents(store.database(), "members").await;
    let _ = log.take();
    let report = store.insert_new(&[impostor, member("bob")]).await.unwrap();
    match &report.results()[0] {
        Err(error) => match error.kind() {
            ErrorKind::UniqueIndexConflict { index, .. } => {
                assert_eq!(index, "email_unique");
                assert!(!error.is_retryable(), "{error}");
            }
            _ => panic!("expected UniqueIndexConflict, got {error:?}"),
        },
        other => panic!("expected UniqueIndexConflict, got {other:?}"),
    }
    assert_eq!(report.inserted(), [member("bob")]);
    // The write alone: the server names the index, and the collision is permanent (no read,
    // no retry).
    assert_eq!(log.take().names, ["update"]);
    assert_eq!(
        raw_documents(store.database(), "members").await.len(),
        before.len() + 1
    );
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Comment {
    comment_id: String,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "threads")]
struct Thread {
    #[idem(key)]
    slug: String,
    title: String,
    #[idem(push_by = "comment_id")]
    comments: Vec<Comment>,
}

fn thread() -> Thread {
    Thread {
        slug: "launch".into(),
        title: "Launch day".into(),
        comments: Vec::new(),
    }
}

fn comment(id: &str) -> Comment {
    Comment {
        comment_id: id.into(),
        text: format!("comment {id}"),
    }
}

/// A list another tool set to null, or removed, is an empty list: a push starts it, once. A
/// missing list costs nothing more; a null one two reads and the write that starts it.
#[tokio::test]
async fn a_push_onto_a_null_or_missing_list_starts_it() {
    let (database, log) = fresh_database("ix_push_null").await;
    let store = Store::new(database);
    let id = thread().id().unwrap();
    let threads = store.database().collection::<Document>("threads");
    for (other_tool, round_trips) in [
        (doc! { "$set": { "comments": null } }, 4),
        (doc! { "$unset": { "comments": "" } }, 1),
    ] {
        store.upsert(&thread()).await.unwrap();
        threads
            .update_one(doc! {}, other_tool.clone())
            .await
            .unwrap();
        let _ = log.take();
        let pushed = store
            .push::<Thread, _>(id, "comments", &comment("c1"))
            .await;
        assert_eq!(pushed.unwrap(), Pushed::Appended, "after {other_tool}");
        assert_eq!(log.take().round_trips(), round_trips, "after {other_tool}");
        let again = store
            .push::<Thread, _>(id, "comments", &comment("c1"))
            .await;
        assert_eq!(again.unwrap(), Pushed::AlreadyPresent, "after {other_tool}");
        let read: Thread = store.get(id).await.unwrap().unwrap();
        assert_eq!(read.comments, [comment("c1")], "after {other_tool}");
        threads.delete_many(doc! {}).await.unwrap();
    }
}

/// A list field another tool stored as something else cannot take a push: refused naming the
/// field, at once, and nothing is written.
#[tokio::test]
async fn a_push_onto_a_field_that_is_not_a_list_is_refused_naming_it() {
    let (database, _log) = fresh_database("ix_push_text").await;
    let store = Store::new(database);
    store.upsert(&thread()).await.unwrap();
    let threads = store.database().collection::<Document>("threads");
    let set_text = doc! { "$set": { "comments": "closed" } };
    threads.update_one(doc! {}, set_text).await.unwrap();
    let before = raw_documents(store.database(), "threads").await;
    let id = thread().id().unwrap();
    match store
        .push::<Thread, _>(id, "comments", &comment("c1"))
        .await
    {
        Err(error) if matches!(error.kind(), ErrorKind::Deserialize { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("`comments` is stored as String"),
                "{message}"
            );
        }
        other => panic!("expected Deserialize naming the field, got {other:?}"),
    }
    assert_eq!(raw_documents(store.database(), "threads").await, before);
}
