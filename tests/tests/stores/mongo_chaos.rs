//! Short seeded chaos runs against the server in `MONGODB_URI`: through the fault-injecting proxy,
//! with the server's `failCommand` fail point, and without faults. Each asserts that every
//! invariant held and that the faults really happened, so it cannot pass vacuously. The full run
//! (10,000 operations, 30% lost acknowledgements) is `scripts/chaos`.

use std::time::Duration;

use idem_tests::chaos::{self, client_options, upstream_address, Config, Mode, Report};
use idem_tests::proxy::{Faults, MongoWire, Proxy, ProxyConfig};
use idem_tests::{fail_point_lock, server_uri};
use mongodb::bson::{doc, Document};
use mongodb::Client;

fn config(test: &str, mode: Mode, seed: u64, operations: usize) -> Config {
    let mut config = Config::new(server_uri(), mode);
    config.database = format!("idem_chaos_{test}_{}", std::process::id());
    config.seed = seed;
    config.operations = operations;
    config
}

async fn run(config: Config) -> Report {
    let report = chaos::run(&config).await.expect("the chaos run sets up");
    println!("{report}");
    report.assert_sound(config.operations);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_nothing_is_duplicated_lost_or_double_counted() {
    // Each fault costs a client the driver's ~0.5 s wait for its server monitor: keep it short.
    let report = run(config("proxy", Mode::Proxy, 11, 240)).await;
    assert!(report.faults.kill_connection > 0.0, "{report}");
    report.assert_faults_happened();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fail_point_nothing_is_duplicated_lost_or_double_counted() {
    // The server keeps one configuration of the fail point: another test of this binary arming
    // it meanwhile would replace the run's, and the run would undo the other's.
    let _fail_point = fail_point_lock().lock().await;
    let mut config = config("failpoint", Mode::FailPoint, 12, 1000);
    // Each dropped request costs the same ~0.5 s as through the proxy; lost acks cost nothing.
    config.faults.drop_request = 0.02;
    let report = run(config).await;
    report.assert_faults_happened();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_callers_observe_exactly_the_truth() {
    let mut config = config("no_faults", Mode::Proxy, 13, 400);
    config.faults = Faults::NONE;
    let report = run(config).await;
    assert_eq!(report.faults_injected(), 0, "{report}");
    assert!(
        report.observed_equals_truth(),
        "without faults every insert, award and credit is observed:\n{report}"
    );
    let findings = &report.findings;
    assert!(findings.true_inserted > 0 && findings.true_awarded > 0 && findings.true_applied > 0);
}

/// A client of the server through `proxy`.
async fn client_through(proxy: &Proxy) -> Client {
    let options = client_options(&server_uri(), Some("idem-proxy-test"), Some(proxy.addr()))
        .await
        .unwrap();
    Client::with_options(options).unwrap()
}

async fn start_proxy(faults: Faults) -> Proxy {
    let options = client_options(&server_uri(), None, None).await.unwrap();
    let upstream = upstream_address(&options).unwrap();
    Proxy::start(&upstream, MongoWire, ProxyConfig::new(5, faults))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_loses_acknowledgements_of_writes_that_landed() {
    let proxy = start_proxy(Faults {
        lost_ack: 1.0,
        ..Faults::NONE
    })
    .await;
    let client = client_through(&proxy).await;
    let name = format!("idem_proxy_lost_ack_{}", std::process::id());
    let collection = client.database(&name).collection::<Document>("things");
    // Reads pass: the driver connects and finds nothing.
    assert_eq!(collection.count_documents(doc! {}).await.unwrap(), 0);
    let error = collection
        .insert_one(doc! { "_id": 1 })
        .await
        .expect_err("the acknowledgement is lost");
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Io(_)),
        "{error}"
    );
    let stats = proxy.stats();
    assert_eq!((stats.replies_dropped, stats.requests_dropped), (1, 0));
    // It landed all the same.
    let direct = Client::with_uri_str(server_uri()).await.unwrap();
    let stored = direct.database(&name).collection::<Document>("things");
    assert_eq!(stored.count_documents(doc! {}).await.unwrap(), 1);
    direct.database(&name).drop().await.unwrap();
    let stats = proxy.shutdown().await;
    assert!(stats.requests_forwarded >= 2, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_drops_requests_before_the_server_sees_them() {
    let proxy = start_proxy(Faults {
        drop_request: 1.0,
        ..Faults::NONE
    })
    .await;
    let client = client_through(&proxy).await;
    let name = format!("idem_proxy_drop_{}", std::process::id());
    let collection = client.database(&name).collection::<Document>("things");
    let error = collection
        .insert_one(doc! { "_id": 1 })
        .await
        .expect_err("the request is dropped");
    assert!(
        matches!(*error.kind, mongodb::error::ErrorKind::Io(_)),
        "{error}"
    );
    assert_eq!(proxy.stats().requests_dropped, 1);
    let direct = Client::with_uri_str(server_uri()).await.unwrap();
    let stored = direct.database(&name).collection::<Document>("things");
    assert_eq!(stored.count_documents(doc! {}).await.unwrap(), 0);
    // With faults off the same write goes through (after the driver's monitor recheck).
    proxy.set_faults_enabled(false);
    tokio::time::timeout(
        Duration::from_secs(10),
        collection.insert_one(doc! { "_id": 1 }),
    )
    .await
    .expect("in time")
    .unwrap();
    assert_eq!(stored.count_documents(doc! {}).await.unwrap(), 1);
    direct.database(&name).drop().await.unwrap();
}
