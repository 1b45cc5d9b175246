//! Short seeded chaos runs against the MariaDB server under test (`MYSQL_URI`): through the
//! fault-injecting MySQL wire proxy, and without faults. Each asserts that every invariant held
//! and that the faults really happened, so it cannot pass vacuously. The long run (`long_run`,
//! ignored here) is `scripts/chaos-mysql`.

use idem_tests::backends::mysql_server;
use idem_tests::mysql_chaos::{self, Config};
use idem_tests::mysql_proxy::Faults;

const LABEL: &str = "mariadb";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_nothing_is_duplicated_lost_resurrected_or_double_counted() {
    let config = Config::short("proxy", LABEL, &mysql_server(), 31, 1500);
    let report = config.checked(mysql_chaos::run(&config)).await;
    report.assert_through_proxy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_callers_observe_exactly_the_truth() {
    let mut config = Config::short("no_faults", LABEL, &mysql_server(), 32, 1000);
    config.faults = Faults::NONE;
    let report = config.checked(mysql_chaos::run(&config)).await;
    report.assert_without_faults();
}

/// The long run: `scripts/chaos-mysql` runs it against a throwaway MariaDB, set by the
/// environment variables [`Config::from_env`] reads, named `IDEM_MYSQL_CHAOS_OPS`, `_SEED`,
/// `_CLIENTS`, `_LOST_REPLY_RATE`, `_DROP_RATE`, `_KILL_RATE`, `_MAX_ATTEMPTS` and `_KEEP`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the long run: scripts/chaos-mysql"]
async fn long_run() {
    let config = Config::from_env("IDEM_MYSQL_CHAOS", LABEL, &mysql_server());
    config.long_run(mysql_chaos::run(&config)).await;
}
