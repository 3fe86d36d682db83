//! The recorder of the **redmutex metrics** contender (built with `--features metrics`): a
//! Prometheus recorder, installed for the whole process once and switched on for that
//! contender's rounds only, so that every other row records nothing, as without a recorder. A
//! thread renders it every 5 s, as a scraper would make it.

/// Whether the rounds that follow record (into Prometheus) or not (the facade's no-op).
pub fn record(on: bool) {
    #[cfg(feature = "metrics")]
    switched::record(on);
    #[cfg(not(feature = "metrics"))]
    let _ = on;
}

#[cfg(feature = "metrics")]
mod switched {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

    static ON: AtomicBool = AtomicBool::new(false);
    static INSTALLED: OnceLock<()> = OnceLock::new();

    const BUCKETS: [f64; 14] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
    ];

    pub fn record(on: bool) {
        INSTALLED.get_or_init(install);
        ON.store(on, Ordering::SeqCst);
    }

    fn install() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .expect("valid buckets")
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(Switched { inner: recorder }).expect("the only recorder");
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
            if ON.load(Ordering::Relaxed) {
                self.inner.register_counter(key, metadata)
            } else {
                Counter::noop()
            }
        }

        fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
            if ON.load(Ordering::Relaxed) {
                self.inner.register_gauge(key, metadata)
            } else {
                Gauge::noop()
            }
        }

        fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
            if ON.load(Ordering::Relaxed) {
                self.inner.register_histogram(key, metadata)
            } else {
                Histogram::noop()
            }
        }
    }
}
