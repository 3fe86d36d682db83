//! What `redmutex run` adds to a command's wall time: `redmutex run --no-wait NAME -- true`
//! against a bare `true`, on 5 local nodes, many runs interleaved.
//!
//! `cargo bench -p redmutex-cli --bench overhead` (runs: `BENCH_RUNS`, default 300). Also times
//! `redmutex --version` (the process start-up alone: no runtime, no connection) and
//! `redmutex status NAME` (start-up, connections and one inspection round), to show where the
//! added time goes. `BENCH_BASELINE=PATH` adds the same `run` with another `redmutex` binary (an
//! earlier build), interleaved with the rest, so that the two compare under one load.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redmutex_testenv::Cluster;

const BINARY: &str = env!("CARGO_BIN_EXE_redmutex");

struct Contender {
    label: String,
    program: String,
    args: &'static [&'static str],
    times: Vec<Duration>,
}

fn main() {
    // `cargo test --benches` runs this too: one quick round is enough there.
    let runs: usize = if std::env::args().any(|arg| arg == "--bench") {
        std::env::var("BENCH_RUNS")
            .ok()
            .and_then(|runs| runs.parse().ok())
            .unwrap_or(300)
    } else {
        3
    };
    let cluster = Cluster::start(5);
    let nodes = cluster.urls().join(",");
    let contender = |label: &str, program: &str, args: &'static [&'static str]| Contender {
        label: label.to_owned(),
        program: program.to_owned(),
        args,
        times: Vec::new(),
    };
    const RUN: &[&str] = &["run", "--no-wait", "bench", "--", "true"];
    let mut contenders = vec![
        contender("true", "true", &[]),
        contender("redmutex --version", BINARY, &["--version"]),
        contender("redmutex status bench", BINARY, &["status", "bench"]),
        contender("redmutex run --no-wait bench -- true", BINARY, RUN),
    ];
    let baseline = std::env::var("BENCH_BASELINE").ok();
    if let Some(path) = &baseline {
        contenders.push(contender("baseline run --no-wait bench -- true", path, RUN));
    }
    let time = |contender: &Contender| {
        let started = Instant::now();
        let status = Command::new(&contender.program)
            .args(contender.args)
            .env("REDMUTEX_NODES", &nodes)
            .stdout(Stdio::null())
            .status()
            .expect("starts");
        let took = started.elapsed();
        assert!(status.success(), "{}: {status}", contender.label);
        took
    };
    // Warm-up: page cache, the nodes' script caches.
    for contender in &contenders {
        for _ in 0..5 {
            time(contender);
        }
    }
    // Interleaved, so that every contender sees the same background load.
    for _ in 0..runs {
        for contender in &mut contenders {
            let took = time(contender);
            contender.times.push(took);
        }
    }
    println!(
        "{runs} runs each, interleaved, 5 local nodes ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if let Some(path) = &baseline {
        println!("baseline: {path}");
    }
    println!("{:40} {:>10} {:>10}", "", "median", "p95");
    let bare = summary(&mut contenders[0].times);
    for contender in &mut contenders {
        let (median, p95) = summary(&mut contender.times);
        println!(
            "{:40} {:>10} {:>10}",
            contender.label,
            millis(median),
            millis(p95)
        );
    }
    let (median, p95) = summary(&mut contenders[3].times);
    println!(
        "\nadded by `redmutex run`: {} at the median, {} at p95",
        millis(median.saturating_sub(bare.0)),
        millis(p95.saturating_sub(bare.1))
    );
    if baseline.is_some() {
        let (old_median, old_p95) = summary(&mut contenders[4].times);
        let added = median.saturating_sub(bare.0).as_secs_f64();
        let old_added = old_median.saturating_sub(bare.0).as_secs_f64();
        println!(
            "added by the baseline's `run`: {} at the median, {} at p95; this build adds {:.2}x \
             the baseline's median",
            millis(old_median.saturating_sub(bare.0)),
            millis(old_p95.saturating_sub(bare.1)),
            added / old_added
        );
    }
}

/// The median and the 95th percentile.
fn summary(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}
