//! The opt-in keep-alive: extends while asked to, reports a loss before the validity runs out, and
//! stops for good on unlock, on drop and at its limits.

use std::time::{Duration, Instant};

use redmutex::{Error, KeepAliveEnd};
use testenv::Cluster;

use crate::support::{client, holders, present, within};

const EXPIRY: Duration = Duration::from_millis(600);

#[tokio::test]
async fn keeps_a_lock_alive_across_five_expiries() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:alive").with_expiry(EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let keep = lock.keep_alive(EXPIRY / 3);
    tokio::time::sleep(EXPIRY * 5).await;
    assert!(keep.end().is_none(), "{:?}", keep.end());
    assert!(lock.valid_until() > Instant::now());
    assert_eq!(holders(&cluster, "keep:alive", lock.value()).len(), 3);
    lock.unlock().await.expect("unlock");
    assert!(matches!(keep.ended().await, KeepAliveEnd::Unlocked));
    // Never extended after unlock: nothing came back.
    tokio::time::sleep(EXPIRY / 2).await;
    assert!(present(&cluster, "keep:alive").is_empty());
}

#[tokio::test]
async fn losing_a_majority_is_reported_before_the_validity_ends() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:lost").with_expiry(EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let keep = lock.keep_alive(EXPIRY / 3);
    tokio::time::sleep(EXPIRY / 2).await;
    cluster.node(0).kill();
    cluster.node(1).kill();
    let end = keep.ended().await;
    let reported = Instant::now();
    assert!(
        matches!(end, KeepAliveEnd::Lost(Error::NoQuorum { .. })),
        "{end:?}"
    );
    assert!(
        reported < lock.valid_until(),
        "the loss came after the validity ended"
    );
}

#[tokio::test]
async fn dropping_the_handle_stops_extending() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:dropped").with_expiry(EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let keep = lock.keep_alive(EXPIRY / 3);
    tokio::time::sleep(EXPIRY).await;
    drop(keep);
    let pttl = cluster.node(0).pttl("keep:dropped");
    tokio::time::sleep(EXPIRY / 2).await;
    let later = cluster.node(0).pttl("keep:dropped");
    assert!(
        later < pttl,
        "PTTL went from {pttl} to {later}: still extended"
    );
    // The lock handle is still held: the key simply expires.
    within(EXPIRY * 2, "the key expires", || {
        present(&cluster, "keep:dropped").is_empty()
    })
    .await;
    drop(lock);
}

#[tokio::test]
async fn limits_stop_extending() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:limits").with_expiry(EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let start = Instant::now();
    let keep = lock
        .keep_alive(Duration::from_millis(100))
        .max_extensions(3);
    assert!(matches!(keep.ended().await, KeepAliveEnd::LimitReached));
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(start.elapsed() < EXPIRY, "{:?}", start.elapsed());

    let keep = lock
        .keep_alive(Duration::from_millis(100))
        .max_hold(Duration::from_millis(350));
    assert!(matches!(keep.ended().await, KeepAliveEnd::LimitReached));
    within(EXPIRY * 2, "the lock expires after the limit", || {
        present(&cluster, "keep:limits").is_empty()
    })
    .await;
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
}
