//! Short seeded chaos runs against each PostgreSQL server under test (`IDEM_POSTGRES_URIS`, or
//! `POSTGRES_URI`): through the fault-injecting PostgreSQL proxy, and without faults. Each
//! asserts that every invariant held and that the faults really happened, so it cannot pass
//! vacuously; the proxy's own tests show each fault doing what it says. The long run
//! (`long_run`, ignored here) is `scripts/chaos-pg`.

use std::time::{Duration, Instant};

use idem_tests::backends::postgres_servers;
use idem_tests::pg_chaos::{self, connect, connection_config, upstream_address, Config, Report};
use idem_tests::pg_proxy::{Faults, PostgresWire, Proxy, ProxyConfig};
use tokio_postgres::types::Type;

fn config(test: &str, label: &str, uri: &str, seed: u64, operations: usize) -> Config {
    let mut config = Config::new(label, uri);
    config.schema = format!(
        "idem_chaos_{test}_{}_{}",
        pg_chaos::identifier(label),
        std::process::id()
    );
    config.seed = seed;
    config.operations = operations;
    config
}

async fn run(config: Config) -> Report {
    let report = pg_chaos::run(&config)
        .await
        .unwrap_or_else(|e| panic!("the chaos run on {} sets up: {e}", config.label));
    println!("{report}\n");
    report.assert_sound(config.operations);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_nothing_is_duplicated_lost_resurrected_or_double_counted() {
    for (label, uri) in postgres_servers() {
        let report = run(config("proxy", &label, &uri, 21, 400)).await;
        assert!(report.faults.kill_connection > 0.0, "{report}");
        report.assert_faults_happened();
        assert!(
            report.findings.reconnects > 0,
            "connections were remade:\n{report}"
        );
        assert!(report.passed(), "{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_callers_observe_exactly_the_truth() {
    for (label, uri) in postgres_servers() {
        let mut config = config("no_faults", &label, &uri, 22, 400);
        config.faults = Faults::NONE;
        let report = run(config).await;
        let findings = &report.findings;
        assert_eq!(report.faults_injected(), 0, "{report}");
        assert_eq!(findings.retries, 0, "{report}");
        assert!(report.faults_seen.write_requests > 0, "{report}");
        assert!(
            report.observed_equals_truth(),
            "without faults every insert, award, credit and receipt is observed:\n{report}"
        );
        assert!(
            findings.true_inserted > 0
                && findings.true_awarded > 0
                && findings.true_applied > 0
                && findings.true_recorded > 0,
            "{report}"
        );
    }
}

/// The long run, on every server under test: `scripts/chaos-pg` runs it against a throwaway
/// PostgreSQL 18. Set by environment: `IDEM_PG_CHAOS_OPS` (default 50,000),
/// `IDEM_PG_CHAOS_SEED` (1), `IDEM_PG_CHAOS_CLIENTS` (16), `IDEM_PG_CHAOS_LOST_REPLY_RATE`
/// (0.3), `IDEM_PG_CHAOS_DROP_RATE` (0.05), `IDEM_PG_CHAOS_KILL_RATE` (0.05),
/// `IDEM_PG_CHAOS_MAX_ATTEMPTS` (50), `IDEM_PG_CHAOS_KEEP` (keep the schema when set).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the long run: scripts/chaos-pg"]
async fn long_run() {
    fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
        match std::env::var(name) {
            Ok(value) => value
                .parse()
                .unwrap_or_else(|_| panic!("{name}: cannot read {value:?}")),
            Err(_) => default,
        }
    }
    for (label, uri) in postgres_servers() {
        let mut config = Config::new(&label, &uri);
        config.operations = setting("IDEM_PG_CHAOS_OPS", 50_000);
        config.seed = setting("IDEM_PG_CHAOS_SEED", 1);
        config.clients = setting("IDEM_PG_CHAOS_CLIENTS", 16);
        config.faults = Faults {
            lost_ack: setting("IDEM_PG_CHAOS_LOST_REPLY_RATE", 0.3),
            drop_request: setting("IDEM_PG_CHAOS_DROP_RATE", 0.05),
            kill_connection: setting("IDEM_PG_CHAOS_KILL_RATE", 0.05),
        };
        config.max_attempts = setting("IDEM_PG_CHAOS_MAX_ATTEMPTS", 50);
        config.keep_schema = std::env::var_os("IDEM_PG_CHAOS_KEEP").is_some();
        let started = Instant::now();
        let report = pg_chaos::run(&config)
            .await
            .unwrap_or_else(|e| panic!("the chaos run on {label} sets up: {e}"));
        println!("{report}\n");
        println!(
            "long run on {label}: {} operations in {:.1} s",
            report.findings.operations,
            started.elapsed().as_secs_f64()
        );
        assert!(report.passed(), "the long run on {label} failed:\n{report}");
        assert_eq!(
            report.findings.operations, config.operations as u64,
            "{report}"
        );
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
