//! The chaos run from the command line: concurrent clients writing through idem while
//! acknowledgements are lost, then the stored state checked against an independent model. See
//! `idem_tests::chaos` for what it does.
//!
//! ```text
//! eval "$(scripts/test-server start)"
//! cargo run --release -p idem-tests --bin chaos -- --seed 1 --clients 8 --ops 10000 \
//!     --lost-ack-rate 0.3 --drop-rate 0.05 --kill-rate 0.05 --mode proxy
//! ```
//!
//! Exit status: 0 when every invariant holds; 1 when one does not (or what callers observed
//! exceeds the truth); 2 on a usage error or a run that could not be set up.

use std::process::ExitCode;

use idem_tests::chaos::{self, Config, Mode};

const USAGE: &str = "\
usage: chaos [--mode proxy|failpoint] [--seed N] [--clients N] [--ops N]
             [--lost-ack-rate R] [--drop-rate R] [--kill-rate R]
             [--max-attempts N] [--database NAME] [--keep]

Runs the chaos run against the server in MONGODB_URI and prints its report.
Defaults: --mode proxy --seed 1 --clients 8 --ops 10000 --lost-ack-rate 0.3 --drop-rate 0.05
--kill-rate 0.05 (0 in failpoint mode, where killed connections are not available)
--max-attempts 50 --database idem_chaos_<mode>_<pid> (dropped at the start, and at the end
of a passing run unless --keep).";

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag}: cannot read {value:?}"))
}

fn config(uri: String) -> Result<Option<Config>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The mode first: it sets the defaults the other flags override.
    let mut mode = Mode::Proxy;
    let mut iter = args.iter().cloned();
    while let Some(arg) = iter.next() {
        if arg == "--mode" {
            mode = parse("--mode", iter.next())?;
        }
    }
    let mut config = Config::new(uri, mode);
    let mut database = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--mode" => {
                args.next();
            }
            "--seed" => config.seed = parse(&arg, args.next())?,
            "--clients" => config.clients = parse(&arg, args.next())?,
            "--ops" => config.operations = parse(&arg, args.next())?,
            "--lost-ack-rate" => config.faults.lost_ack = parse(&arg, args.next())?,
            "--drop-rate" => config.faults.drop_request = parse(&arg, args.next())?,
            "--kill-rate" => config.faults.kill_connection = parse(&arg, args.next())?,
            "--max-attempts" => config.max_attempts = parse(&arg, args.next())?,
            "--database" => database = Some(parse(&arg, args.next())?),
            "--keep" => config.keep_database = true,
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    if let Some(database) = database {
        config.database = database;
    }
    Ok(Some(config))
}

#[tokio::main]
async fn main() -> ExitCode {
    let Ok(uri) = std::env::var("MONGODB_URI") else {
        eprintln!(
            "chaos: MONGODB_URI is not set: point it at a MongoDB-compatible server, for example \
             `eval \"$(scripts/test-server start)\"`"
        );
        return ExitCode::from(2);
    };
    let config = match config(uri) {
        Ok(Some(config)) => config,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("chaos: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "chaos: {} mode, seed {}, {} clients, {} operations on database {}",
        config.mode, config.seed, config.clients, config.operations, config.database
    );
    match chaos::run(&config).await {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(message) => {
            eprintln!("chaos: {message}");
            ExitCode::from(2)
        }
    }
}
