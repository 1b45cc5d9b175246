//! Short seeded chaos runs against each PostgreSQL server under test (`IDEM_POSTGRES_URIS`, or
//! `POSTGRES_URI`): through the fault-injecting PostgreSQL proxy, and without faults. Each
//! asserts that every invariant held and that the faults really happened, so it cannot pass
//! vacuously; the proxy's own tests show each fault doing what it says. The long run
//! (`long_run`, ignored here) is `scripts/chaos-pg`.

use std::time::{Duration, Instant};

use idem_tests::backends::postgres_servers;
use idem_tests::pg_chaos::{self, connect, connection_config, upstream_address, Config};
use idem_tests::pg_proxy::{Faults, PostgresWire, Proxy, ProxyConfig};
use tokio_postgres::types::Type;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_nothing_is_duplicated_lost_resurrected_or_double_counted() {
    for (label, uri) in postgres_servers() {
        let config = Config::short("proxy", &label, &uri, 21, 400);
        let report = config.checked(pg_chaos::run(&config)).await;
        report.assert_through_proxy();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_callers_observe_exactly_the_truth() {
    for (label, uri) in postgres_servers() {
        let mut config = Config::short("no_faults", &label, &uri, 22, 400);
        config.faults = Faults::NONE;
        let report = config.checked(pg_chaos::run(&config)).await;
        report.assert_without_faults();
    }
}

/// The long run, on every server under test: `scripts/chaos-pg` runs it against a throwaway
/// PostgreSQL 18. Set by environment ([`Config::from_env`]): `IDEM_PG_CHAOS_OPS` (default
/// 50,000), `IDEM_PG_CHAOS_SEED` (1), `IDEM_PG_CHAOS_CLIENTS` (16),
/// `IDEM_PG_CHAOS_LOST_REPLY_RATE` (0.3), `IDEM_PG_CHAOS_DROP_RATE` (0.05),
/// `IDEM_PG_CHAOS_KILL_RATE` (0.05), `IDEM_PG_CHAOS_MAX_ATTEMPTS` (50), `IDEM_PG_CHAOS_KEEP`
/// (keep the schema when set).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the long run: scripts/chaos-pg"]
async fn long_run() {
    for (label, uri) in postgres_servers() {
        let config = Config::from_env("IDEM_PG_CHAOS", &label, &uri);
        config.long_run(pg_chaos::run(&config)).await;
    }
}

// ------------------------------------------------------------------------------------------------
// The proxy itself

/// A fresh schema with a table `things (id int primary key)` on the server at `uri`, a direct
/// client of it, and a proxy in front of the server with `faults`.
async fn proxied(test: &str, uri: &str, faults: Faults) -> (String, tokio_postgres::Client, Proxy) {
    let base: tokio_postgres::Config = uri.parse().unwrap();
    let schema = format!("idem_pg_proxy_{test}_{}", std::process::id());
    let direct = connect(&connection_config(&base, "public", None))
        .await
        .unwrap();
    direct
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.things (id int PRIMARY KEY)"
        ))
        .await
        .unwrap();
    let upstream = upstream_address(&base).unwrap();
    let proxy = Proxy::start(&upstream, PostgresWire, ProxyConfig::new(5, faults))
        .await
        .unwrap();
    (schema, direct, proxy)
}

async fn through(uri: &str, schema: &str, proxy: &Proxy) -> tokio_postgres::Client {
    let base: tokio_postgres::Config = uri.parse().unwrap();
    connect(&connection_config(&base, schema, Some(proxy.addr())))
        .await
        .expect("startup and authentication pass the proxy")
}

async fn count(direct: &tokio_postgres::Client, schema: &str) -> i64 {
    direct
        .query_one(&format!("SELECT count(*) FROM {schema}.things"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_loses_replies_of_writes_that_landed() {
    for (_, uri) in postgres_servers() {
        let faults = Faults {
            lost_ack: 1.0,
            ..Faults::NONE
        };
        let (schema, direct, proxy) = proxied("lost", &uri, faults).await;
        let client = through(&uri, &schema, &proxy).await;
        // Reads pass, prepared or not.
        assert_eq!(count(&client, &schema).await, 0);
        let read = client
            .query_typed("SELECT $1::text", &[(&"read", Type::TEXT)])
            .await
            .unwrap();
        assert_eq!(read.len(), 1);
        // A write through a prepared (named) statement: the batch binding it is faulted.
        let error = client
            .execute("INSERT INTO things VALUES (1)", &[])
            .await
            .expect_err("the reply is lost");
        assert!(
            idem_core::postgres::driver_error(error).is_retryable(),
            "a lost reply is worth retrying"
        );
        assert!(client.is_closed());
        assert_eq!(count(&direct, &schema).await, 1, "the write landed");
        // The same through the unnamed statement idem writes with.
        let client = through(&uri, &schema, &proxy).await;
        let sql =
            "WITH incoming AS (SELECT $1::int AS id) INSERT INTO things SELECT id FROM incoming";
        client
            .query_typed(sql, &[(&2, Type::INT4)])
            .await
            .expect_err("the reply is lost");
        assert_eq!(count(&direct, &schema).await, 2, "the write landed");
        let stats = proxy.shutdown().await;
        assert_eq!(
            (
                stats.write_requests,
                stats.replies_dropped,
                stats.requests_dropped
            ),
            (2, 2, 0),
            "{stats:?}"
        );
        direct
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_drops_requests_before_the_server_sees_them() {
    for (_, uri) in postgres_servers() {
        let faults = Faults {
            drop_request: 1.0,
            ..Faults::NONE
        };
        let (schema, direct, proxy) = proxied("drop", &uri, faults).await;
        let client = through(&uri, &schema, &proxy).await;
        let error = client
            .execute("UPDATE things SET id = 5", &[])
            .await
            .expect_err("the request is dropped");
        assert!(idem_core::postgres::driver_error(error).is_retryable());
        let client = through(&uri, &schema, &proxy).await;
        client
            .execute("INSERT INTO things VALUES (1)", &[])
            .await
            .expect_err("the request is dropped");
        assert_eq!(count(&direct, &schema).await, 0, "nothing was written");
        assert_eq!(proxy.stats().requests_dropped, 2);
        // With faults off the same write goes through, on a new connection.
        proxy.set_faults_enabled(false);
        let client = through(&uri, &schema, &proxy).await;
        client
            .execute("INSERT INTO things VALUES (1)", &[])
            .await
            .unwrap();
        assert_eq!(count(&direct, &schema).await, 1);
        direct
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_kills_connections_racing_the_server() {
    for (label, uri) in postgres_servers() {
        let faults = Faults {
            kill_connection: 1.0,
            ..Faults::NONE
        };
        let (schema, direct, proxy) = proxied("kill", &uri, faults).await;
        let mut landed = 0;
        for id in 0..5 {
            let client = through(&uri, &schema, &proxy).await;
            let started = Instant::now();
            let error = client
                .execute("INSERT INTO things VALUES ($1)", &[&id])
                .await
                .expect_err("the connection is reset");
            assert!(started.elapsed() < Duration::from_secs(5));
            assert!(idem_core::postgres::driver_error(error).is_retryable());
            assert!(client.is_closed());
            // The server may or may not have run it: wait for its backend to settle.
            tokio::time::sleep(Duration::from_millis(50)).await;
            landed = count(&direct, &schema).await;
        }
        assert!((0..=5).contains(&landed));
        println!("{label}: {landed} of 5 writes whose connection was reset landed");
        let stats = proxy.shutdown().await;
        assert_eq!(stats.connections_killed, 5, "{stats:?}");
        direct
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }
}
