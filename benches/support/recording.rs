//! The recorder of the **redmutex metrics** contender (built with `--features metrics`): a
//! Prometheus recorder, installed for the whole process at that contender's first round and
//! switched on for its rounds only, so that every other row records nothing (rows before it run
//! with no recorder installed, rows after it with this one switched off). A thread renders it every
//! 5 s, as a scraper would make it. `BENCH_METRICS_FILTER=name,...` drops those series as
//! metrics-util's `FilterLayer` does (say, `redmutex_node_seconds`).
//!
//! The switch is in the handles, not in registering them: redmutex keeps the handles it
//! registered with the global recorder, so a handle registered during another row's round must
//! still record in this contender's rounds. Switched off, a recording still finds its kept
//! handle and stops there.

/// Whether the rounds that follow record (into Prometheus) or not (the facade's no-op).
pub fn record(on: bool) {
    #[cfg(feature = "metrics")]
    switched::record(on);
    #[cfg(not(feature = "metrics"))]
    let _ = on;
}

#[cfg(feature = "metrics")]
mod switched {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
        Recorder, SharedString, Unit,
    };
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
    use metrics_util::layers::{FilterLayer, Layer};

    static ON: AtomicBool = AtomicBool::new(false);
    static INSTALLED: OnceLock<()> = OnceLock::new();

    const BUCKETS: [f64; 14] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
    ];

    /// Installs the recorder the first time a round records: a run without the metrics
    /// contender installs none, so that its rows measure the library with no recorder at all
    /// (what `benches/instructions.sh` with `FEATURES='--features metrics'` compares).
    pub fn record(on: bool) {
        if on {
            INSTALLED.get_or_init(install);
        }
        ON.store(on, Ordering::SeqCst);
    }

    fn install() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .expect("valid buckets")
            .build_recorder();
        let handle = recorder.handle();
        let switched = Switched { inner: recorder };
        let filter = std::env::var("BENCH_METRICS_FILTER").unwrap_or_default();
        let patterns: Vec<&str> = filter.split(',').filter(|name| !name.is_empty()).collect();
        if patterns.is_empty() {
            metrics::set_global_recorder(switched).expect("the only recorder");
        } else {
            // Filtered series get the facade's no-op handles, as an application's FilterLayer
            // gives them (doc/metrics.md, *Recording less*), not switched ones.
            let filtered = FilterLayer::from_patterns(patterns).layer(switched);
            metrics::set_global_recorder(filtered).expect("the only recorder");
        }
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                std::hint::black_box(handle.render());
            }
        });
    }

    struct Switched {
        inner: PrometheusRecorder,
    }

    impl Recorder for Switched {
        fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_counter(key, unit, description);
        }

        fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_gauge(key, unit, description);
        }

        fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
            self.inner.describe_histogram(key, unit, description);
        }

        fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(Switch(self.inner.register_counter(key, metadata))))
        }

        fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(Switch(self.inner.register_gauge(key, metadata))))
        }

        fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Switch(
                self.inner.register_histogram(key, metadata),
            )))
        }
    }

    /// A Prometheus handle that records only while the switch is on.
    struct Switch<H>(H);

    fn on() -> bool {
        ON.load(Ordering::Relaxed)
    }

    impl CounterFn for Switch<Counter> {
        fn increment(&self, value: u64) {
            if on() {
                self.0.increment(value);
            }
        }

        fn absolute(&self, value: u64) {
            if on() {
                self.0.absolute(value);
            }
        }
    }

    impl GaugeFn for Switch<Gauge> {
        fn increment(&self, value: f64) {
            if on() {
                self.0.increment(value);
            }
        }

        fn decrement(&self, value: f64) {
            if on() {
                self.0.decrement(value);
            }
        }

        fn set(&self, value: f64) {
            if on() {
                self.0.set(value);
            }
        }
    }

    impl HistogramFn for Switch<Histogram> {
        fn record(&self, value: f64) {
            if on() {
                self.0.record(value);
            }
        }
    }
}
