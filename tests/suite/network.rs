//! Network faults between client and nodes, through testenv's TCP proxies: partitions (blackhole),
//! latency (delay) and resets.

use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock};
use redmutex_testenv::{Cluster, Mode, Proxies};

use crate::support::{cleared_within, holders, warm_up};

async fn through(proxies: &Proxies) -> Redlock {
    Redlock::connect(proxies.urls()).await.expect("URLs parse")
}

#[tokio::test]
async fn one_blackholed_node_costs_at_most_one_timeout_per_call() {
    let cluster = Cluster::start(5);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    // 20 s x 0.005 = 100 ms per node.
    let mutex = redlock
        .new_mutex("network:blackhole-one")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005);
    warm_up(&mutex).await;
    proxies.set_mode(&[1], Mode::Blackhole);

    let start = Instant::now();
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    let locked = start.elapsed();
    let start = Instant::now();
    lock.unlock().await.expect("4 of 5 suffice");
    let unlocked = start.elapsed();
    assert!(locked < Duration::from_millis(1000), "lock took {locked:?}");
    assert!(
        unlocked < Duration::from_millis(1000),
        "unlock took {unlocked:?}"
    );

    // The partition heals: the held SET and release reach node 1 in order; nothing is left.
    proxies.set_mode(&[1], Mode::Pass);
    cleared_within(Duration::from_secs(3), &cluster, "network:blackhole-one").await;
}

#[tokio::test]
async fn a_blackholed_majority_fails_in_bounded_time_and_heals_clean() {
    let cluster = Cluster::start(5);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    let mutex = redlock
        .new_mutex("network:blackhole-three")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005)
        .with_tries(3)
        .with_retry_delay(Duration::from_millis(10));
    warm_up(&mutex).await;
    proxies.set_mode(&[0, 2, 4], Mode::Blackhole);

    let start = Instant::now();
    let result = mutex.lock().await;
    let elapsed = start.elapsed();
    // 3 tries x (100 ms SET + 100 ms release + 10 ms delay) = 630 ms.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let Err(Error::NoQuorum { ok, failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert_eq!(ok, 2);
    for failure in &failures {
        assert!(
            matches!(failure.kind, NodeErrorKind::Timeout(_)),
            "{failure:?}"
        );
    }
    proxies.set_mode(&[0, 2, 4], Mode::Pass);
    cleared_within(Duration::from_secs(3), &cluster, "network:blackhole-three").await;
}

/// Replies so slow that no validity is left: the attempt fails and releases, never returning a lock
/// that has already expired.
#[tokio::test]
async fn replies_slower_than_the_validity_fail_and_release() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    // 2 s expiry, 1 s drift allowance: a round trip over 1 s leaves nothing.
    let mutex = redlock
        .new_mutex("network:slow")
        .with_expiry(Duration::from_secs(2))
        .with_drift_factor(0.5)
        .with_timeout_factor(0.9);
    warm_up(&mutex).await;
    proxies.set_mode(&[0, 1, 2], Mode::Delay(Duration::from_millis(550)));
    let sent = Instant::now();
    let result = mutex.try_lock().await;
    assert!(matches!(result, Err(Error::Expired)), "{result:?}");
    // The SETs landed at about +550 ms and expire at about +2550 ms; the release got there first.
    proxies.set_mode(&[0, 1, 2], Mode::Pass);
    cleared_within(Duration::from_secs(1), &cluster, "network:slow").await;
    assert!(
        sent.elapsed() < Duration::from_millis(2500),
        "{:?}",
        sent.elapsed()
    );
}

/// Validity small but positive: `valid_until` accounts for the slow round trip and the drift.
#[tokio::test]
async fn slow_replies_shorten_the_validity() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    let mutex = redlock
        .new_mutex("network:short-validity")
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.5);
    warm_up(&mutex).await;
    proxies.set_mode(&[0, 1, 2], Mode::Delay(Duration::from_millis(300)));
    let start = Instant::now();
    let lock = mutex
        .try_lock()
        .await
        .expect("a 600 ms round trip leaves validity");
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    // start + expiry - elapsed - drift (20 ms)
    let bound = start + Duration::from_secs(2) - Duration::from_millis(600 + 20);
    assert!(lock.valid_until() <= bound, "valid_until past the bound");
    assert!(lock.valid_until() > Instant::now());
}

#[tokio::test]
async fn reset_connections_are_node_errors_and_recover() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    let mutex = redlock
        .new_mutex("network:reset")
        .with_expiry(Duration::from_secs(2))
        .with_tries(1);
    warm_up(&mutex).await;
    proxies.set_mode(&[0, 1], Mode::Reset);
    let result = mutex.lock().await;
    let Err(Error::NoQuorum { failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert!(
        failures
            .iter()
            .all(|f| matches!(f.kind, NodeErrorKind::Redis(_))),
        "{failures:?}"
    );
    proxies.set_mode(&[0, 1], Mode::Pass);
    // The connections are re-made on demand once the network is back: soon a lock lands on
    // every node. (The first one may land on a quorum only, while one connection is still being
    // re-made.)
    let mut everywhere = false;
    for _ in 0..50 {
        if let Ok(lock) = mutex.lock().await {
            everywhere = holders(&cluster, "network:reset", lock.value()).len() == 3;
            lock.unlock().await.expect("unlock");
            if everywhere {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        everywhere,
        "the lock lands on every node again after the resets"
    );
}

/// Extend with a minority of nodes cut off succeeds; with a majority cut off it fails with each
/// node's timeout, and the lock is not released.
#[tokio::test]
async fn extend_across_partitions() {
    let cluster = Cluster::start(5);
    let proxies = cluster.proxies();
    let redlock = through(&proxies).await;
    let mutex = redlock
        .new_mutex("network:extend")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005);
    let lock = mutex.lock().await.expect("free lock");
    proxies.set_mode(&[3, 4], Mode::Blackhole);
    lock.extend().await.expect("3 of 5 suffice");
    proxies.set_mode(&[2], Mode::Blackhole);
    let until = lock.valid_until();
    let result = lock.extend().await;
    let Err(Error::NoQuorum { ok, failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert_eq!(ok, 2);
    let timed_out: Vec<usize> = failures
        .iter()
        .filter(|f| matches!(f.kind, NodeErrorKind::Timeout(_)))
        .map(|f| f.node)
        .collect();
    assert_eq!(timed_out, [2, 3, 4]);
    assert_eq!(lock.valid_until(), until);
    proxies.set_mode(&[2, 3, 4], Mode::Pass);
    assert_eq!(holders(&cluster, "network:extend", lock.value()).len(), 5);
}
