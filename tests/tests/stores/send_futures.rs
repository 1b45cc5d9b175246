//! Every public future of the SQL stores is `Send`, so that a call can be spawned on a
//! multi-threaded runtime (`tokio::spawn`, a web framework's handler): checked when this file
//! compiles. The futures are made and dropped, never polled.

use idem_core::sqlx::{MySqlConnection, SqliteConnection};
use idem_core::{Change, Id, Idempotent, NaturalKey, OpId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "send_posts")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(effect)]
    views: i64,
    #[idem(push_by = "name")]
    tags: Vec<Tag>,
    #[idem(tombstone)]
    deleted: Option<i64>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Tag {
    name: String,
}

fn send<F: std::future::Future + Send>(_: F) {}

/// Each method of `$store` (a store over sqlx) through `$connection`, and of its session.
macro_rules! every_future_is_send {
    ($store:expr, $connection:expr) => {{
        let store = $store;
        let connection = $connection;
        let post = Post {
            slug: "a".into(),
            views: 0,
            tags: Vec::new(),
            deleted: None,
        };
        let id = Id::from(ulid::Ulid::nil());
        let op = OpId::new("op");
        let key = NaturalKey::new(vec![("slug", idem_core::KeyValue::Text("a".into()))]);
        send(store.ensure_table::<Post>(connection));
        send(store.upsert(connection, &post));
        send(store.upsert_many(connection, std::slice::from_ref(&post)));
        send(store.delete(connection, &post));
        send(store.delete_by_id::<Post, _>(connection, id, &1_i64));
        send(store.insert_new(connection, std::slice::from_ref(&post)));
        send(store.apply_once::<Post>(connection, id, &op, &[Change::add("views", 1)]));
        send(store.push::<Post, _>(connection, id, "tags", &Tag { name: "x".into() }));
        send(store.get::<Post>(connection, id));
        send(store.find::<Post>(connection, &key));
        send(store.audit::<Post>(connection));
        send(store.audit_with_progress::<Post>(connection, |_| {}));
        send(store.audit_model(connection, &Post::MODEL, &[], |_| {}));
        send(store.adopt::<Post>(connection));
        send(store.adopt_model(connection, &Post::MODEL, &[], Default::default()));
        let session = store.on(connection);
        send(session.upsert(&post));
        send(session.upsert_many(std::slice::from_ref(&post)));
        send(session.get::<Post>(id));
    }};
}

#[allow(dead_code)]
fn sqlite(store: &idem_core::sqlite::Store, connection: &mut SqliteConnection) {
    every_future_is_send!(store, connection);
}

#[allow(dead_code)]
fn mysql(store: &idem_core::mysql::Store, connection: &mut MySqlConnection) {
    every_future_is_send!(store, connection);
}

/// Each method of the PostgreSQL store through `$client` (a tokio-postgres client or
/// transaction, or a sqlx connection), whose methods name the connection's type (`_`).
macro_rules! every_postgres_future_is_send {
    ($store:expr, $client:expr) => {{
        let store = $store;
        let post = Post {
            slug: "a".into(),
            views: 0,
            tags: Vec::new(),
            deleted: None,
        };
        let id = Id::from(ulid::Ulid::nil());
        let op = OpId::new("op");
        let key = NaturalKey::new(vec![("slug", idem_core::KeyValue::Text("a".into()))]);
        send(store.ensure_table::<Post, _>($client));
        send(store.upsert($client, &post));
        send(store.upsert_many($client, std::slice::from_ref(&post)));
        send(store.delete($client, &post));
        send(store.delete_by_id::<Post, _, _>($client, id, &1_i64));
        send(store.insert_new($client, std::slice::from_ref(&post)));
        send(store.apply_once::<Post, _>($client, id, &op, &[Change::add("views", 1)]));
        send(store.push::<Post, _, _>($client, id, "tags", &Tag { name: "x".into() }));
        send(store.get::<Post, _>($client, id));
        send(store.find::<Post, _>($client, &key));
        send(store.audit::<Post, _>($client));
        send(store.audit_with_progress::<Post, _>($client, |_| {}));
        send(store.audit_model($client, &Post::MODEL, &[], |_| {}));
        send(store.adopt::<Post, _>($client));
        send(store.adopt_model($client, &Post::MODEL, &[], Default::default()));
        let session = store.on($client);
        send(session.upsert(&post));
        send(session.upsert_many(std::slice::from_ref(&post)));
        send(session.get::<Post>(id));
    }};
}

#[allow(dead_code)]
fn postgres(
    store: &idem_core::postgres::Store,
    client: &idem_core::tokio_postgres::Client,
    transaction: &idem_core::tokio_postgres::Transaction<'_>,
    connection: &mut idem_core::sqlx::PgConnection,
) {
    every_postgres_future_is_send!(store, client);
    every_postgres_future_is_send!(store, transaction);
    every_postgres_future_is_send!(store, &mut *connection);
}
