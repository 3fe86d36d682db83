//! The `metrics` feature: after a scripted sequence of acquisitions, contention, node failures,
//! extensions, losses and hand-offs, every series of doc/metrics.md is there with its labels and
//! plausible values, and no series carries a lock name; the example's endpoint answers over HTTP.
//!
//! Each test records into a recorder of its own, set for its thread only
//! (`metrics::set_default_local_recorder`): `#[tokio::test]` runs the test and every task it
//! spawns on that thread, and the other tests of this process record elsewhere.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redmutex::{Error, KeepAliveEnd};
use redmutex_testenv::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{self, client, eventually};

#[allow(dead_code)]
#[path = "../../examples/metrics.rs"]
mod example;

/// A series: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What a recorder took, added up over snapshots (a snapshot resets what it reads, so a gauge
/// read twice is the sum of the two readings).
#[derive(Default)]
struct Recorded {
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, Vec<f64>>,
}

impl Recorded {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            labels.sort();
            let series = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(series).or_default() += n,
                DebugValue::Gauge(g) => *self.gauges.entry(series).or_default() += g.0,
                DebugValue::Histogram(values) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(values.iter().map(|v| v.0)),
            }
        }
    }

    fn series(&self) -> impl Iterator<Item = &Series> {
        self.counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys())
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.gauges.get(&series(name, labels)).copied()
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> &[f64] {
        self.histograms
            .get(&series(name, labels))
            .map_or(&[], Vec::as_slice)
    }

    /// The sum of a counter over all series of `name` that carry `label`.
    fn counted_with(&self, name: &str, label: (&str, &str)) -> u64 {
        self.counters
            .iter()
            .filter(|((n, labels), _)| {
                n == name
                    && labels
                        .iter()
                        .any(|(k, v)| (k.as_str(), v.as_str()) == label)
            })
            .map(|(_, n)| n)
            .sum()
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

const EXPIRY: Duration = Duration::from_millis(900);

/// The sequence on three nodes: an acquisition, an extension and an unlock; a `Taken`; a
/// keep-alive whose lock is taken over; a drop without unlock; a fair hand-off; a wake-up on
/// release; the other primitives once; and, last, a `NoQuorum` with two of the three nodes killed.
#[tokio::test]
async fn a_scripted_sequence_records_every_series() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::default();
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let quick = |name: &str| support::quick(&redlock, name).with_metrics_label("checkout");

    // An acquisition, an extension, an unlock.
    let lock = quick("metrics:a").lock().await.expect("free lock");
    lock.extend().await.expect("extend a held lock");
    lock.unlock().await.expect("unlock");

    // Taken: another owner holds it.
    let held = quick("metrics:b").lock().await.expect("free lock");
    let taken = quick("metrics:b").try_lock().await;
    assert!(matches!(taken, Err(Error::Taken { .. })), "{taken:?}");
    // A call its caller gave up on: dropped while it waits out its retry delay.
    let patient = quick("metrics:b").with_retry_delay(Duration::from_secs(60));
    let given_up = tokio::time::timeout(Duration::from_millis(300), patient.lock()).await;
    assert!(given_up.is_err(), "{given_up:?}");
    held.unlock().await.expect("unlock");

    // A keep-alive whose lock another owner's value replaced on every node: lost, taken.
    let lock = redlock
        .new_mutex("metrics:c")
        .with_expiry(EXPIRY)
        .with_metrics_label("checkout")
        .lock()
        .await
        .expect("free lock");
    let keep = lock.keep_alive(EXPIRY / 3);
    for node in cluster.nodes() {
        node.set("metrics:c", "someone-else");
    }
    let end = keep.ended().await;
    assert!(
        matches!(end, KeepAliveEnd::Lost(Error::Taken { .. })),
        "{end:?}"
    );
    drop(lock);

    // A drop without unlock (the release goes out in the background).
    let lock = quick("metrics:d").lock().await.expect("free lock");
    drop(lock);
    eventually("the dropped lock is released", || {
        support::present(&cluster, "metrics:d").is_empty()
    })
    .await;

    // A fair hand-off: a waiter in line gets the lock from the holder's unlock.
    let fair = |redlock: &redmutex::Redlock| {
        redlock
            .new_mutex("metrics:e")
            .with_fair(true)
            .with_expiry(Duration::from_secs(2))
            .with_timeout_factor(0.25)
            .with_retry_delay(Duration::from_secs(10))
            .with_tries(3)
    };
    let holder = fair(&redlock).lock().await.expect("free lock");
    let other = client(&cluster).await;
    let waiter = tokio::spawn(async move { fair(&other).lock().await });
    let line = support::beside("metrics:e", ":line");
    // In line on every node, and listening there: a grant published before the waiter's
    // subscription is lost, and its next round would take the lock without a hand-off.
    eventually("the waiter stands in line and listens", || {
        (0..3).all(|node| {
            let mut connection = cluster.node(node).connection();
            let waiting: i64 = redis::cmd("ZCARD")
                .arg(&line)
                .query(&mut connection)
                .expect("ZCARD");
            let (_, listeners): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("redmutex:released:metrics:e")
                .query(&mut connection)
                .expect("PUBSUB NUMSUB");
            waiting == 1 && listeners >= 1
        })
    })
    .await;
    // Read while one call waits and one lock is held.
    recorded.take(&snapshotter);
    assert_eq!(
        recorded.gauge("redmutex_waiting", &[("primitive", "mutex")]),
        Some(1.0),
        "one call waits"
    );
    holder.unlock().await.expect("unlock");
    let handed = waiter.await.expect("no panic").expect("handed over");
    handed.unlock().await.expect("unlock");

    // A wake-up: a waiter woken by the holder's release notice acquires at once, long before
    // its retry delay.
    let woken = |redlock: &redmutex::Redlock| {
        redlock
            .new_mutex("metrics:w")
            .with_wake_on_release(true)
            .with_metrics_label("wake")
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(3)
    };
    let holder = woken(&redlock).lock().await.expect("free lock");
    let other = client(&cluster).await;
    let waiter = tokio::spawn(async move { woken(&other).lock().await });
    // Two attempts taken: the first before the waiter listened, the second once its
    // subscriptions were confirmed; it now waits for a notice.
    let taken = [
        ("primitive", "mutex"),
        ("outcome", "taken"),
        ("use", "wake"),
    ];
    eventually("the waiter failed twice and listens", || {
        recorded.take(&snapshotter);
        recorded.counter("redmutex_attempts_total", &taken) >= 2
    })
    .await;
    holder.unlock().await.expect("unlock");
    let handed = waiter
        .await
        .expect("no panic")
        .expect("woken by the release");
    handed.unlock().await.expect("unlock");

    // The other primitives, once each.
    let multi = redlock.new_multi_mutex(["metrics:m1", "metrics:m2"]);
    multi
        .lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
    let rwlock = redlock.new_rwlock("metrics:rw");
    rwlock
        .read()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
    rwlock
        .write()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
    let semaphore = redlock.new_semaphore("metrics:s", 2);
    semaphore
        .acquire()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");

    // NoQuorum: two of three nodes killed.
    cluster.node(1).kill();
    cluster.node(2).kill();
    let refused = quick("metrics:f").try_lock().await;
    assert!(
        matches!(refused, Err(Error::NoQuorum { .. })),
        "{refused:?}"
    );

    recorded.take(&snapshotter);
    let checkout = ("use", "checkout");
    let mutex = ("primitive", "mutex");
    for outcome in ["acquired", "taken", "no_quorum"] {
        assert!(
            recorded.counter(
                "redmutex_attempts_total",
                &[mutex, ("outcome", outcome), checkout]
            ) >= 1,
            "an attempt {outcome}"
        );
        let waited = recorded.histogram(
            "redmutex_acquire_seconds",
            &[mutex, ("outcome", outcome), checkout],
        );
        assert!(!waited.is_empty(), "an acquire {outcome}");
        assert!(waited.iter().all(|s| (0.0..30.0).contains(s)), "{waited:?}");
    }
    let given_up = recorded.histogram(
        "redmutex_acquire_seconds",
        &[mutex, ("outcome", "cancelled"), checkout],
    );
    assert_eq!(given_up.len(), 1, "the call given up on: {given_up:?}");
    for primitive in ["multi", "read", "write", "semaphore"] {
        assert!(
            recorded.counter(
                "redmutex_attempts_total",
                &[("primitive", primitive), ("outcome", "acquired")]
            ) >= 1,
            "{primitive} counted"
        );
        let held = recorded.histogram(
            "redmutex_held_seconds",
            &[("primitive", primitive), ("end", "unlocked")],
        );
        assert_eq!(held.len(), 1, "{primitive} held once");
    }
    assert_eq!(
        recorded.counter(
            "redmutex_extensions_total",
            &[mutex, ("outcome", "ok"), checkout]
        ),
        1,
        "the one extend"
    );
    assert!(
        recorded.counter(
            "redmutex_extensions_total",
            &[mutex, ("outcome", "taken"), checkout]
        ) >= 1,
        "the keep-alive's failed extend"
    );
    assert_eq!(
        recorded.counter(
            "redmutex_lost_total",
            &[mutex, ("reason", "taken"), checkout]
        ),
        1,
        "the keep-alive's lock, lost once"
    );
    for (end, count) in [("unlocked", 2), ("lost", 1), ("dropped", 1)] {
        let held = recorded.histogram("redmutex_held_seconds", &[mutex, ("end", end), checkout]);
        assert_eq!(held.len(), count, "held until {end}");
        assert!(held.iter().all(|s| (0.0..30.0).contains(s)), "{held:?}");
    }
    // Every hold ended and every wait ended: the gauges are back at zero.
    for primitive in ["mutex", "multi", "read", "write", "semaphore"] {
        for gauge in ["redmutex_held", "redmutex_waiting"] {
            for labels in [
                vec![("primitive", primitive)],
                vec![("primitive", primitive), checkout],
            ] {
                if let Some(value) = recorded.gauge(gauge, &labels) {
                    assert_eq!(value, 0.0, "{gauge} {labels:?}");
                }
            }
        }
    }
    assert!(
        recorded
            .gauge("redmutex_held", &[mutex, checkout])
            .is_some()
    );
    assert_eq!(
        recorded.counter("redmutex_handoffs_total", &[("mode", "fair")]),
        1,
        "the hand-off in line"
    );
    assert_eq!(
        recorded.counter("redmutex_handoffs_total", &[("mode", "wake")]),
        1,
        "the wake-up by the release notice"
    );
    for node in ["0", "1", "2"] {
        assert!(
            recorded.counter(
                "redmutex_node_requests_total",
                &[("node", node), ("outcome", "ok")]
            ) >= 10,
            "node {node} answered"
        );
        assert!(
            !recorded
                .histogram("redmutex_node_seconds", &[("node", node)])
                .is_empty()
        );
    }
    assert!(
        recorded.counted_with("redmutex_node_requests_total", ("outcome", "error"))
            + recorded.counted_with("redmutex_node_requests_total", ("outcome", "timeout"))
            >= 2,
        "the killed nodes failed"
    );
    // Lock names are never labels.
    for (name, labels) in recorded.series() {
        assert!(name.starts_with("redmutex_"), "{name}");
        for (key, value) in labels {
            assert!(
                [
                    "primitive",
                    "outcome",
                    "end",
                    "reason",
                    "use",
                    "node",
                    "mode"
                ]
                .contains(&key.as_str()),
                "{name}: label {key}"
            );
            assert!(!value.contains("metrics:"), "{name}: {key}={value}");
        }
    }
}

/// The example's endpoint, scraped over HTTP while its workers contend: status 200, and the
/// series in Prometheus text.
#[tokio::test]
async fn the_example_serves_the_series_over_http() {
    let recorder = example::recorder().expect("buckets").build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("bound");
    let server = tokio::spawn(example::serve(listener, handle));
    let workers = tokio::spawn(example::contend(redlock, "metrics:http:".to_owned(), 4));

    let expected = [
        "redmutex_attempts_total{primitive=\"mutex\",outcome=\"acquired\",use=\"report\"}",
        "redmutex_attempts_total{primitive=\"mutex\",outcome=\"taken\"",
        "redmutex_acquire_seconds_bucket{primitive=\"mutex\",outcome=\"acquired\"",
        "redmutex_held_seconds_bucket{primitive=\"mutex\",end=\"unlocked\"",
        "redmutex_held{primitive=\"mutex\"",
        "redmutex_node_requests_total{node=\"2\",outcome=\"ok\"}",
        "redmutex_node_seconds_bucket{node=\"0\"",
    ];
    let mut last = String::new();
    for _ in 0..100 {
        last = scrape(address).await;
        if expected.iter().all(|series| last.contains(series)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.starts_with("HTTP/1.1 200 OK\r\n"), "{last}");
    for series in expected {
        assert!(last.contains(series), "{series} missing from:\n{last}");
    }
    assert!(!last.contains("metrics:http"), "a lock name in:\n{last}");
    workers.abort();
    server.abort();
}

/// `GET /metrics` at `address`: the whole response.
async fn scrape(address: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("the endpoint listens");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .expect("request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    response
}
