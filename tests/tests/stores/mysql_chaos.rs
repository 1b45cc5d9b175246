//! Short seeded chaos runs against the MariaDB server under test (`MYSQL_URI`): through the
//! fault-injecting MySQL wire proxy, and without faults. Each asserts that every invariant held
//! and that the faults really happened, so it cannot pass vacuously. The long run (`long_run`,
//! ignored here) is `scripts/chaos-mysql`.

use idem_tests::backends::mysql_server;
use idem_tests::mysql_chaos::{self, Config};
use idem_tests::mysql_proxy::Faults;

const LABEL: &str = "mariadb";

/// A short run of `test`, seeded `seed`, of `operations` operations, with the attempts a call
/// of `scripts/chaos-mysql` has (200, not the PostgreSQL runs' 50). Each attempt of a batch here
/// sends a `COMMIT` for each of its rounds, the rounds that landed before included, and each
/// meets the faults' 40% odds: a batch of six copies of one note passes an attempt 0.6⁶ ≈ 4.7%
/// of the time. Calls needing 10 to 33 attempts were common in runs of this size, and with 50
/// the run through the proxy failed on one such call in CI once and in 5 of about 70 runs here
/// (docs/RELIABILITY.md).
fn short(test: &str, seed: u64, operations: usize) -> Config {
    Config {
        max_attempts: 200,
        ..Config::short(test, LABEL, &mysql_server(), seed, operations)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_nothing_is_duplicated_lost_resurrected_or_double_counted() {
    let config = short("proxy", 31, 1000);
    (config.checked(mysql_chaos::run(&config)).await).assert_through_proxy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_faults_callers_observe_exactly_the_truth() {
    let config = Config {
        faults: Faults::NONE,
        ..short("no_faults", 32, 1000)
    };
    (config.checked(mysql_chaos::run(&config)).await).assert_without_faults();
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
