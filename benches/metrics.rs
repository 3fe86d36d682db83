//! What the `metrics` feature's recordings cost on their own, without Redis: the recordings of
//! one uncontended lock+unlock of a mutex on 5 nodes (`redmutex::internals::record_cycle`: the
//! acquire time, the attempt, the held gauge and time, a counter and a reply time per node
//! reply), first with no recorder installed (the facade's no-op recorder is current), then into
//! metrics-exporter-prometheus's recorder set up as doc/metrics.md sets it up (buckets for the
//! `_seconds` series), rendered every 10,000 cycles as a scrape drains what was recorded.
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

use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use metrics_util::layers::{FilterLayer, Layer};
use redmutex::internals;

const NODES: usize = 5;

/// Cycles between two renders of the Prometheus recorder.
const SCRAPE_EVERY: u64 = 10_000;

fn recording(c: &mut Criterion) {
    let sent = Instant::now();
    c.bench_function("one cycle's recordings, 5 nodes, no recorder", |b| {
        b.iter(|| internals::record_cycle(black_box(NODES), sent))
    });

    let buckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0];
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
        .expect("valid buckets")
        .build_recorder();
    let prometheus = recorder.handle();
    let filter = std::env::var("METRICS_FILTER").unwrap_or_default();
    let patterns: Vec<&str> = filter.split(',').filter(|name| !name.is_empty()).collect();
    let name = if patterns.is_empty() {
        metrics::set_global_recorder(recorder).expect("the only recorder");
        "one cycle's recordings, 5 nodes, into Prometheus".to_owned()
    } else {
        let layer = FilterLayer::from_patterns(patterns.iter().copied());
        metrics::set_global_recorder(layer.layer(recorder)).expect("the only recorder");
        format!("one cycle's recordings, 5 nodes, into Prometheus without {filter}")
    };
    let cycles = Cell::new(0u64);
    c.bench_function(&name, |b| {
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for _ in 0..iterations {
                internals::record_cycle(black_box(NODES), sent);
                cycles.set(cycles.get() + 1);
                if cycles.get().is_multiple_of(SCRAPE_EVERY) {
                    black_box(prometheus.render());
                }
            }
            start.elapsed()
        })
    });
}

criterion_group!(benches, recording);
criterion_main!(benches);
