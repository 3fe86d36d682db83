//! The opt-in keep-alive: extends while asked to, reports a loss before the validity runs out, and
//! stops for good on unlock, on drop and at its limits.

use std::time::{Duration, Instant};

use redmutex::{Error, KeepAliveEnd};
use redmutex_testenv::Cluster;

use crate::support::{client, holders, present, within};

const EXPIRY: Duration = Duration::from_secs(1);

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

/// A 1.5 s lock over 5 nodes, renewed every 500 ms, whose extends wait 75 ms per node.
const BLIP_EXPIRY: Duration = Duration::from_millis(1500);

/// Pauses nodes 0 to 2 (a majority of 5) for `pause`, starting just before the renewal that
/// follows `last` is due, so that the pause covers it; returns when the pause began, once the
/// nodes are running again. Node 4, never paused, counts the attempts (each reaches every node):
/// a pause that no renewal met is tried again, so that the blip is ridden out, not missed.
async fn blip(cluster: &Cluster, last: Instant, pause: Duration) {
    let mut due = last + BLIP_EXPIRY / 3;
    for _ in 0..5 {
        tokio::time::sleep_until((due - Duration::from_millis(100)).into()).await;
        let attempts = cluster.node(4).calls("evalsha");
        for node in 0..3 {
            cluster.node(node).pause();
        }
        tokio::time::sleep(pause).await;
        let met = cluster.node(4).calls("evalsha") > attempts;
        for node in 0..3 {
            cluster.node(node).resume();
        }
        if met {
            return;
        }
        due += BLIP_EXPIRY / 3;
    }
    panic!("no renewal came while the nodes were paused");
}

#[tokio::test]
async fn a_short_pause_of_a_majority_is_ridden_out() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:blip").with_expiry(BLIP_EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let started = Instant::now();
    let keep = lock.keep_alive(BLIP_EXPIRY / 3);
    blip(&cluster, started, Duration::from_millis(250)).await;
    // Two more renewals after the blip, on every node.
    tokio::time::sleep(BLIP_EXPIRY * 2 / 3).await;
    assert!(keep.end().is_none(), "{:?}", keep.end());
    assert!(lock.valid_until() > Instant::now());
    assert_eq!(holders(&cluster, "keep:blip", lock.value()).len(), 5);
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_short_pause_of_a_majority_does_not_end_a_run() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:blip-run").with_expiry(BLIP_EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let started = Instant::now();
    let work = async {
        blip(&cluster, started, Duration::from_millis(250)).await;
        tokio::time::sleep(BLIP_EXPIRY * 2 / 3).await;
        "done"
    };
    assert_eq!(lock.run(work).await.expect("kept through the blip"), "done");
    assert!(present(&cluster, "keep:blip-run").is_empty());
}

/// A pause longer than the validity ends the keep-alive with the nodes' answers, before the
/// validity ends (retries stop once one more could not end in time).
#[tokio::test]
async fn a_pause_longer_than_the_validity_is_reported_before_it_ends() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("keep:long-pause")
        .with_expiry(BLIP_EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let keep = lock.keep_alive(BLIP_EXPIRY / 3);
    tokio::time::sleep(BLIP_EXPIRY / 6).await;
    for node in 0..3 {
        cluster.node(node).pause();
    }
    let end = keep.ended().await;
    let reported = Instant::now();
    for node in 0..3 {
        cluster.node(node).resume();
    }
    match &end {
        KeepAliveEnd::Lost(Error::NoQuorum {
            ok: 2, failures, ..
        }) => {
            let timed_out: Vec<usize> = failures.iter().map(|f| f.node).collect();
            assert_eq!(timed_out, [0, 1, 2]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        reported < lock.valid_until(),
        "reported {:?} after the validity ended",
        reported - lock.valid_until()
    );
}

/// The same pause under `run`: the work is dropped before the validity ends.
#[tokio::test]
async fn a_pause_longer_than_the_validity_drops_the_work_before_it_ends() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("keep:long-pause-run")
        .with_expiry(BLIP_EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let handle = lock.clone();
    let clock = crate::run::DropClock::default();
    let work = crate::run::endless(clock.guard());
    let run = tokio::time::timeout(BLIP_EXPIRY * 3, lock.run(work));
    let (result, ()) = tokio::join!(run, async {
        tokio::time::sleep(BLIP_EXPIRY / 6).await;
        for node in 0..3 {
            cluster.node(node).pause();
        }
    });
    for node in 0..3 {
        cluster.node(node).resume();
    }
    let result = result.expect("run returned");
    assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
    let dropped = clock.dropped().expect("dropped");
    assert!(dropped < handle.valid_until(), "dropped after the validity");
}

/// `report_before`: a holder that needs time to wind down under the lock hears of the loss that
/// long before the validity ends.
#[tokio::test]
async fn report_before_leaves_the_holder_its_margin() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("keep:margin").with_expiry(BLIP_EXPIRY);
    let lock = mutex.lock().await.expect("free lock");
    let margin = Duration::from_millis(400);
    let keep = lock.keep_alive(BLIP_EXPIRY / 3).report_before(margin);
    tokio::time::sleep(BLIP_EXPIRY / 6).await;
    for node in 0..3 {
        cluster.node(node).pause();
    }
    let end = keep.ended().await;
    let reported = Instant::now();
    for node in 0..3 {
        cluster.node(node).resume();
    }
    assert!(
        matches!(end, KeepAliveEnd::Lost(Error::NoQuorum { .. })),
        "{end:?}"
    );
    // This task reads the clock only after the keep-alive's report reached it, a scheduling delay
    // later on a loaded machine; a quarter of the margin allows for that and still tells the
    // margin apart from the default report time (25 ms before the end).
    let left = lock.valid_until().saturating_duration_since(reported);
    assert!(
        left >= margin - margin / 4,
        "reported {left:?} before the validity ended, {margin:?} asked"
    );
}
