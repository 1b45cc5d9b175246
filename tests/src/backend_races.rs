//! What the racing and lost-acknowledgement cases need on every backend: an upsert whose
//! acknowledgement is lost after the write landed (MongoDB's `failCommand` fail point, or the
//! PostgreSQL or MySQL wire proxy), and the content hash a document is stored with.

use idem_core::sqlx::ConnectOptions;
use idem_core::{Error, Id, Idempotent, Outcome};
use serde::Serialize;

use crate::backends::Db;
use crate::mysql_proxy::MysqlWire;
use crate::pg_proxy::{Faults, PostgresWire, Proxy, ProxyConfig};
use crate::{clear_fail_point, fail_point_lock, lose_next_acknowledgements, pg_chaos};

impl Db {
    /// Upserts `doc` once with its acknowledgement lost: the server applies the write, and the
    /// caller gets an error instead of its outcome. MongoDB: the `failCommand` fail point answers
    /// the next `findAndModify` of this store's client with a write-concern error. PostgreSQL: the
    /// write goes over a connection of its own through the wire proxy, which drops the reply
    /// once the statement has committed and closes the connection; the store is this one, so
    /// what it learned (the checked table) carries over. MariaDB: the same, through the MySQL
    /// wire proxy. Panics unless exactly that fault happened, so a case built on it cannot pass
    /// without it.
    pub async fn upsert_with_lost_acknowledgement<T: Idempotent + Serialize + Sync>(
        &self,
        doc: &T,
    ) -> Result<Outcome, Error> {
        match self {
            Db::Mongo { store, .. } => {
                // The one write of an upsert that inserts: an insert without update pipelines.
                let write = match store.uses_update_pipelines() {
                    true => "findAndModify",
                    false => "insert",
                };
                let _fail_point = fail_point_lock().lock().await;
                lose_next_acknowledgements(store.database(), &[write], 1).await;
                let outcome = store.upsert(doc).await;
                clear_fail_point(store.database().client()).await;
                outcome
            }
            Db::Postgres {
                uri,
                schema,
                store,
                sqlx,
                ..
            } => {
                let base: tokio_postgres::Config = uri
                    .parse()
                    .unwrap_or_else(|error| panic!("{self}: the server URI: {error}"));
                let upstream = pg_chaos::upstream_address(&base)
                    .unwrap_or_else(|error| panic!("{self}: {error}"));
                let faults = Faults {
                    lost_ack: 1.0,
                    ..Faults::NONE
                };
                let proxy = Proxy::start(&upstream, PostgresWire, ProxyConfig::new(1, faults))
                    .await
                    .unwrap_or_else(|error| panic!("{self}: starting the proxy: {error}"));
                let outcome = match sqlx {
                    None => {
                        let through_proxy =
                            pg_chaos::connection_config(&base, schema, Some(proxy.addr()));
                        let client =
                            pg_chaos::connect(&through_proxy)
                                .await
                                .unwrap_or_else(|error| {
                                    panic!("{self}: connecting through the proxy: {error}")
                                });
                        store.upsert(&client, doc).await
                    }
                    Some(_) => {
                        let options: idem_core::sqlx::postgres::PgConnectOptions =
                            uri.parse().expect("POSTGRES_URI parses");
                        let mut connection = options
                            .host(&proxy.addr().ip().to_string())
                            .port(proxy.addr().port())
                            .options([("search_path", schema.as_str())])
                            .connect()
                            .await
                            .unwrap_or_else(|error| {
                                panic!("{self}: connecting through the proxy: {error}")
                            });
                        store.upsert(&mut connection, doc).await
                    }
                };
                let stats = proxy.shutdown().await;
                assert_eq!(
                    (stats.write_requests, stats.replies_dropped),
                    (1, 1),
                    "{self}: one write, its reply lost: {stats:?}"
                );
                outcome
            }
            Db::Sqlite { .. } => panic!(
                "{self}: an embedded database answers in the caller's process: no \
                 acknowledgement to lose (the case runs on fresh_server_backends)"
            ),
            Db::Mysql {
                uri,
                database,
                store,
                ..
            } => {
                let options: idem_core::sqlx::mysql::MySqlConnectOptions =
                    uri.parse().expect("MYSQL_URI parses");
                let upstream = format!("{}:{}", options.get_host(), options.get_port());
                let faults = Faults {
                    lost_ack: 1.0,
                    ..Faults::NONE
                };
                let proxy = Proxy::start(&upstream, MysqlWire, ProxyConfig::new(1, faults))
                    .await
                    .unwrap_or_else(|error| panic!("{self}: starting the proxy: {error}"));
                // Unencrypted, so that the proxy reads the statements.
                let mut connection = options
                    .host(&proxy.addr().ip().to_string())
                    .port(proxy.addr().port())
                    .database(database)
                    .ssl_mode(idem_core::sqlx::mysql::MySqlSslMode::Disabled)
                    .connect()
                    .await
                    .unwrap_or_else(|error| {
                        panic!("{self}: connecting through the proxy: {error}")
                    });
                let outcome = store.upsert(&mut connection, doc).await;
                let stats = proxy.shutdown().await;
                assert_eq!(
                    (stats.write_requests, stats.replies_dropped),
                    (1, 1),
                    "{self}: one write, its reply lost: {stats:?}"
                );
                outcome
            }
        }
    }

    /// The content hash the document `id` of `T` is stored with (`None` when it is stored
    /// without one), as the backend holds it: MongoDB's field, a SQL column's bytes as hex.
    pub async fn stored_content_hash<T: Idempotent>(&self, id: Id) -> Option<String> {
        let model = &T::MODEL;
        let (collection, hash) = (model.collection(), model.hash_field());
        let id = id.to_string();
        match self {
            Db::Mongo { store, .. } => store
                .database()
                .collection::<mongodb::bson::Document>(collection)
                .find_one(mongodb::bson::doc! { "_id": &id })
                .await
                .unwrap_or_else(|error| panic!("{self}: reading {id} back: {error}"))
                .unwrap_or_else(|| panic!("{self}: no document {id} in {collection}"))
                .get_str(hash)
                .ok()
                .map(str::to_owned),
            Db::Postgres { client, .. } => {
                // Its bytes, as the hex text idem reads them as.
                let sql = format!(
                    "SELECT encode(\"{hash}\", 'hex') FROM \"{collection}\" WHERE \"_id\" = $1"
                );
                client
                    .query_opt(&sql, &[&id])
                    .await
                    .unwrap_or_else(|error| panic!("{self}: reading {id} back: {error}"))
                    .unwrap_or_else(|| panic!("{self}: no row {id} in {collection}"))
                    .get(0)
            }
            Db::Sqlite { connection, .. } => {
                crate::sqlite_rows::stored_content_hash::<T>(&mut *connection.lock().await, &id)
                    .await
            }
            Db::Mysql { connection, .. } => {
                crate::mysql_rows::stored_content_hash::<T>(&mut *connection.lock().await, &id)
                    .await
            }
        }
    }
}
