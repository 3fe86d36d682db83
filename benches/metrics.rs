//! What the `metrics` feature's recordings cost on their own, without Redis: the recordings of
//! one uncontended lock+unlock of a mutex on 5 nodes (`redmutex::internals::record_cycle`: the
//! acquire time, the attempt, the held gauge and time, a counter and a reply time per node
//! reply), first with no recorder installed (the facade's no-op recorder is current), then into
//! metrics-exporter-prometheus's recorder set up as doc/metrics.md sets it up (buckets for the
//! `_seconds` series), rendered every 10,000 cycles as a scrape drains what was recorded; and,
//! as the floor under any recording of these series, the exporter's own work for the same values
//! through handles registered up front.
//!
//! `cargo bench --bench metrics --features metrics`. With `METRICS_FILTER=name,...` the
//! Prometheus recorder sits behind metrics-util's `FilterLayer` dropping those series, as
//! doc/metrics.md says to do where recording must cost less (a process has one global recorder,
//! so each filter is a run of its own):
//! `METRICS_FILTER=redmutex_node_seconds cargo bench --bench metrics --features metrics`.
//!
//! Against a lock+unlock cycle's client CPU (the compare bench's `CPU us` column) this says what
//! share of it recording takes, a figure the wall-clock rows are too noisy to show;
//! benches/README.md has the numbers.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::{FilterLayer, Layer};
use redmutex::internals;

const NODES: usize = 5;

/// Cycles between two renders of the Prometheus recorder.
const SCRAPE_EVERY: u64 = 10_000;

fn recording(c: &mut Criterion) {
    let sent = Instant::now();
    // Before any recorder is installed: the facade's no-op recorder is current.
    c.bench_function("one cycle's recordings, 5 nodes, no recorder", |b| {
        b.iter(|| internals::record_cycle(black_box(NODES), sent))
    });

    let (prometheus, filter) = install();
    let name = match filter {
        None => "one cycle's recordings, 5 nodes, into Prometheus".to_owned(),
        Some(filter) => {
            format!("one cycle's recordings, 5 nodes, into Prometheus without {filter}")
        }
    };
    c.bench_function(&name, |b| {
        b.iter_custom(|cycles| scraped(prometheus, cycles, || internals::record_cycle(NODES, sent)))
    });
}

/// The floor: the exporter's own work for what one cycle records, in the series a cycle records
/// it into (12 histogram values: two into each node's reply times, one wait, one hold; 11 counts:
/// two into each node's requests, one attempt; the held gauge up and down), through handles
/// registered up front and values known in advance, so that none of redmutex's work (finding a
/// handle, reading the clock) is in it.
fn exporter_alone(c: &mut Criterion) {
    let (prometheus, _) = install();
    let nodes: Vec<_> = (0..NODES)
        .map(|node| {
            let node = node.to_string();
            (
                metrics::histogram!("floor_node_seconds", "node" => node.clone()),
                metrics::counter!("floor_node_requests_total", "node" => node),
            )
        })
        .collect();
    let (wait, hold) = (
        metrics::histogram!("floor_acquire_seconds"),
        metrics::histogram!("floor_held_seconds"),
    );
    let attempts = metrics::counter!("floor_attempts_total");
    let held = metrics::gauge!("floor_held");
    c.bench_function("the exporter alone, one cycle's values", |b| {
        b.iter_custom(|cycles| {
            scraped(prometheus, cycles, || {
                for (seconds, requests) in &nodes {
                    seconds.record(black_box(0.000_3));
                    requests.increment(1);
                }
                attempts.increment(1);
                held.increment(1.0);
                wait.record(black_box(0.000_6));
                for (seconds, requests) in &nodes {
                    seconds.record(black_box(0.000_3));
                    requests.increment(1);
                }
                hold.record(black_box(0.000_4));
                held.decrement(1.0);
            })
        })
    });
}

/// Installs the process's global recorder once (behind `METRICS_FILTER`'s filter, if set):
/// its handle, and the filter.
fn install() -> (&'static PrometheusHandle, Option<&'static str>) {
    static INSTALLED: OnceLock<(PrometheusHandle, Option<String>)> = OnceLock::new();
    let (handle, filter) = INSTALLED.get_or_init(|| {
        let buckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0];
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
            .expect("valid buckets")
            .build_recorder();
        let handle = recorder.handle();
        let filter = std::env::var("METRICS_FILTER").unwrap_or_default();
        let patterns: Vec<&str> = filter.split(',').filter(|name| !name.is_empty()).collect();
        if patterns.is_empty() {
            metrics::set_global_recorder(recorder).expect("the only recorder");
            (handle, None)
        } else {
            let layer = FilterLayer::from_patterns(patterns);
            metrics::set_global_recorder(layer.layer(recorder)).expect("the only recorder");
            (handle, Some(filter))
        }
    });
    (handle, filter.as_deref())
}

/// Runs `cycle` `cycles` times, rendering `prometheus` every [`SCRAPE_EVERY`] cycles (counted
/// across calls), and returns the time it took.
fn scraped(prometheus: &PrometheusHandle, cycles: u64, mut cycle: impl FnMut()) -> Duration {
    static DONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = Instant::now();
    for _ in 0..cycles {
        cycle();
        let done = DONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if done.is_multiple_of(SCRAPE_EVERY) {
            black_box(prometheus.render());
        }
    }
    start.elapsed()
}

criterion_group!(benches, recording, exporter_alone);
criterion_main!(benches);
