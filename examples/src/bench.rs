//! What the benchmark examples (`bench_server`, `bench_postgres`, `bench_sqlite`, `bench_mysql`)
//! share: the rows the marker stores' benches write, the order of variants in a round, medians and spreads of per-round figures, durations as shown,
//! and how a table and its targets are printed and handed to `scripts/bench`.

use std::time::Duration;

use idem_core::Idempotent;
use serde::{Deserialize, Serialize};

/// One target of the benchmark and whether this run met it.
pub struct Target {
    /// `exact` (counts: a miss fails the run), `timed` (reported) or `info` (no verdict).
    pub kind: &'static str,
    pub met: bool,
    pub what: String,
    pub measured: String,
}

impl Target {
    /// An `exact` target when `exact`, else a `timed` one.
    pub fn new(exact: bool, met: bool, what: impl Into<String>, measured: String) -> Self {
        Target {
            kind: if exact { "exact" } else { "timed" },
            met,
            what: what.into(),
            measured,
        }
    }
}

/// Prints `lines` (the first is the header) as aligned columns, a rule under the header.
pub fn print_table(lines: &[Vec<String>]) {
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .map(|line| line[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (index, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
        if index == 0 {
            let rules: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            println!("{}", rules.join("  "));
        }
    }
}

/// Prints each target with its verdict.
pub fn print_targets(targets: &[Target]) {
    println!("targets:");
    for target in targets {
        let verdict = match (target.met, target.kind) {
            (_, "info") => "      ",
            (true, _) => "MET   ",
            (false, "exact") => "MISSED",
            (false, _) => "missed",
        };
        println!(
            "  {verdict} [{}] {}: {}",
            target.kind, target.what, target.measured
        );
    }
}

/// The targets, one tab-separated `target` line each, for `scripts/bench`.
pub fn targets_tsv(targets: &[Target]) -> String {
    let mut out = String::new();
    for target in targets {
        out.push_str(&format!(
            "target\t{}\t{}\t{}\t{}\n",
            target.kind,
            match (target.kind, target.met) {
                ("info", _) => "",
                (_, true) => "met",
                (_, false) => "missed",
            },
            target.what,
            target.measured
        ));
    }
    out
}

/// The order of the variants in `round`: forward, then backward, so no variant always runs
/// first.
pub fn order(variants: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..variants).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// Each round's ratio, or their range when there are many.
pub fn spread(ratios: &[f64]) -> String {
    if ratios.len() <= 7 {
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        return each.join(" ");
    }
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.2} .. {high:.2} ({} rounds)", ratios.len())
}

/// The median of `values`.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The median of `values`.
pub fn median_duration(values: impl Iterator<Item = Duration>) -> Duration {
    let seconds: Vec<f64> = values.map(|d| d.as_secs_f64()).collect();
    Duration::from_secs_f64(median(&seconds))
}

/// `duration` in its largest unit, three decimals.
pub fn fmt_duration(duration: Duration) -> String {
    let ns = duration.as_secs_f64() * 1e9;
    for (unit, scale) in [("s", 1e9), ("ms", 1e6), ("µs", 1e3)] {
        if ns >= scale {
            return format!("{:.3} {unit}", ns / scale);
        }
    }
    format!("{ns:.0} ns")
}

/// A post as an ingest writes it: the rows of the SQLite and MariaDB benches.
#[derive(Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct Post {
    #[idem(key)]
    pub slug: String,
    #[idem(key)]
    pub lang: String,
    #[idem(timestamp)]
    pub published_at: i64,
    pub title: String,
    pub body: String,
    pub score: f64,
}

/// Post `n` of a run, titled `{title} {n}`.
pub fn post(n: usize, title: &str) -> Post {
    Post {
        slug: format!("post-{n:06}"),
        lang: "en".into(),
        published_at: 1_700_000_000_000 + n as i64,
        title: format!("{title} {n}"),
        body: "A body of a few dozen bytes, as a short post has.".into(),
        score: n as f64 / 7.0,
    }
}
