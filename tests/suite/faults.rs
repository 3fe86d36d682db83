//! Killed, paused and restarted nodes: the lock works with a majority, fails in bounded time
//! without one, and leaves nothing behind.

use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind};
use redmutex_testenv::Cluster;

use crate::support::{cleared_within, client, holders, present, quick, warm_up};

#[tokio::test]
async fn two_of_five_killed_still_locks() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    cluster.node(1).kill();
    cluster.node(3).kill();
    let lock = quick(&redlock, "faults:two-down")
        .lock()
        .await
        .expect("3 of 5 suffice");
    assert_eq!(
        holders(&cluster, "faults:two-down", lock.value()),
        [0, 2, 4]
    );
    lock.unlock().await.expect("3 of 5 suffice for unlock too");
    assert!(present(&cluster, "faults:two-down").is_empty());
}

#[tokio::test]
async fn three_of_five_killed_fails_quickly_and_leaves_nothing() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    for i in [0, 2, 4] {
        cluster.node(i).kill();
    }
    let start = Instant::now();
    let result = quick(&redlock, "faults:three-down").lock().await;
    // Refused connections fail at once: 3 tries x 5 ms delay, with a wide margin.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    match result {
        Err(Error::NoQuorum { ok, failures, .. }) => {
            assert_eq!(ok, 2);
            let nodes: Vec<usize> = failures.iter().map(|f| f.node).collect();
            assert_eq!(nodes, [0, 2, 4]);
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(
        present(&cluster, "faults:three-down").is_empty(),
        "survivors hold no keys"
    );
}

#[tokio::test]
async fn a_paused_node_costs_at_most_one_timeout() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    // Warm the connections so the pause hits an established connection.
    warm_up(&quick(&redlock, "faults:warm")).await;
    cluster.node(2).pause();
    // 100 ms per node; a 20 s expiry so that only a release, not expiry, clears the keys below.
    let mutex = quick(&redlock, "faults:one-paused")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005);
    let start = Instant::now();
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    let locked_in = start.elapsed();
    lock.unlock().await.expect("unlock");
    let total = start.elapsed();
    assert!(
        locked_in < Duration::from_millis(1000),
        "lock took {locked_in:?}"
    );
    assert!(
        total < Duration::from_millis(2000),
        "lock+unlock took {total:?}"
    );
    cluster.node(2).resume();
    // The paused node processes the queued SET and then the queued release, in order.
    cleared_within(Duration::from_secs(3), &cluster, "faults:one-paused").await;
}

/// Two paused nodes: a concurrent fan-out waits for one timeout, a sequential one would wait two.
#[tokio::test]
async fn fan_out_is_concurrent() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    warm_up(&quick(&redlock, "faults:warm")).await;
    cluster.node(0).pause();
    cluster.node(4).pause();
    // 10 s expiry x 0.1 = 1 s per node.
    let mutex = redlock
        .new_mutex("faults:concurrent")
        .with_expiry(Duration::from_secs(10))
        .with_timeout_factor(0.1);
    let start = Instant::now();
    let lock = mutex.try_lock().await.expect("3 of 5 suffice");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(990),
        "waited for the paused nodes: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1800),
        "sequential fan-out? {elapsed:?}"
    );
    // valid_until accounts for the time spent.
    assert!(lock.valid_until() <= start + Duration::from_secs(10) - elapsed);
    cluster.node(0).resume();
    cluster.node(4).resume();
}

#[tokio::test]
async fn three_of_five_paused_fails_in_bounded_time_and_cleans_up() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    warm_up(&quick(&redlock, "faults:warm")).await;
    for i in [1, 2, 3] {
        cluster.node(i).pause();
    }
    let start = Instant::now();
    // 100 ms per node; a 20 s expiry so that only a release, not expiry, clears the keys below.
    let result = quick(&redlock, "faults:three-paused")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005)
        .lock()
        .await;
    let elapsed = start.elapsed();
    // 3 tries x (100 ms SET + 100 ms release + 5 ms delay) = 615 ms; no hang.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let Err(Error::NoQuorum { failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert!(
        failures.iter().all(
            |f| matches!(f.kind, NodeErrorKind::Timeout(t) if t == Duration::from_millis(100))
        )
    );
    for i in [1, 2, 3] {
        cluster.node(i).resume();
    }
    // Released on the nodes that timed out too: their SETs landed on resume, then the releases.
    cleared_within(Duration::from_secs(3), &cluster, "faults:three-paused").await;
}

#[tokio::test]
async fn a_restarted_node_is_used_again() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    cluster.node(0).kill();
    let lock = quick(&redlock, "faults:restart")
        .lock()
        .await
        .expect("2 of 3");
    lock.unlock().await.expect("unlock");
    cluster.node(0).restart();
    // The connection to the restarted node is re-made on demand.
    let mut on_all = false;
    for _ in 0..20 {
        let lock = quick(&redlock, "faults:restart")
            .lock()
            .await
            .expect("lock");
        on_all = holders(&cluster, "faults:restart", lock.value()).len() == 3;
        lock.unlock().await.expect("unlock");
        if on_all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(on_all, "the restarted node never got the lock again");
}

#[tokio::test]
async fn a_node_down_at_start_up_is_not_an_error() {
    let cluster = Cluster::start(3);
    cluster.node(2).kill();
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "faults:down-at-start")
        .lock()
        .await
        .expect("2 of 3");
    assert_eq!(
        holders(&cluster, "faults:down-at-start", lock.value()),
        [0, 1]
    );
}

/// The redis crate's own response timeout (500 ms by default in `ConnectionManager`) must not cut a
/// node call shorter than redmutex's per-node timeout.
#[tokio::test]
async fn only_the_node_timeout_bounds_a_call() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    warm_up(&quick(&redlock, "faults:warm")).await;
    cluster.node(1).pause();
    // 30 s x 0.05 = 1.5 s per node.
    let mutex = redlock
        .new_mutex("faults:long-timeout")
        .with_expiry(Duration::from_secs(30))
        .with_tries(1);
    for node in [0, 2] {
        cluster
            .node(node)
            .set_px("faults:long-timeout", "other", Duration::from_secs(30));
    }
    let start = Instant::now();
    let result = mutex.lock().await;
    let elapsed = start.elapsed();
    let Err(Error::Taken { .. }) = &result else {
        panic!("expected Taken, got {result:?}");
    };
    assert!(
        elapsed >= Duration::from_millis(1490),
        "cut short: {elapsed:?}"
    );
    // And the paused node's failure is redmutex's own timeout, not a driver error.
    cluster.node(0).del("faults:long-timeout");
    let result = mutex.lock().await;
    let Err(Error::NoQuorum { failures, .. }) = &result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    let paused = failures
        .iter()
        .find(|f| f.node == 1)
        .expect("node 1 failed");
    assert!(
        matches!(paused.kind, NodeErrorKind::Timeout(t) if t == Duration::from_millis(1500)),
        "{paused:?}"
    );
    cluster.node(1).resume();
}

/// A lock says which members it does not hold on, by address and why, and forgets a member
/// once an extension finds it back.
#[tokio::test]
async fn a_lock_names_the_members_it_is_not_held_on() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    cluster.node(1).kill();
    let lock = quick(&redlock, "faults:failing")
        .lock()
        .await
        .expect("2 of 3");
    let failing = lock.failing_nodes();
    assert_eq!(failing.len(), 1, "{failing:?}");
    assert_eq!(failing[0].node, 1);
    assert_eq!(
        failing[0].address.as_deref(),
        Some(cluster.node(1).url().as_str())
    );
    assert!(
        matches!(failing[0].kind, NodeErrorKind::Redis(_)),
        "{failing:?}"
    );
    cluster.node(1).restart();
    // Once the connection is made again, an extension sets the key again there (a repair
    // counts as a failure once); the next finds our value on every member.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lock.failing_nodes().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", lock.failing_nodes());
        tokio::time::sleep(Duration::from_millis(50)).await;
        lock.extend().await.expect("extend");
    }
    lock.unlock().await.expect("unlock");
}
