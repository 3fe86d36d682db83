//! One server, one vote: two members that reach one server under different addresses (found by
//! `run_id` once connected) count once, and the other is named as the same server.

use std::time::Duration;

use redmutex::{Error, NodeError, NodeErrorKind, Redlock};
use redmutex_testenv::Cluster;
#[cfg(feature = "cluster")]
use redmutex_testenv::RedisCluster;

/// The one member of `failing` refused as another's server: its index and the entry it names.
fn same_server(failing: &[NodeError]) -> (usize, usize) {
    let refused: Vec<_> = failing
        .iter()
        .filter_map(|failure| match &failure.kind {
            NodeErrorKind::SameServer { entry, .. } => Some((failure.node, *entry)),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 1, "one alias refused: {failing:?}");
    refused[0]
}

/// `localhost` and `127.0.0.1` are one server: with a third member, that server alone would make
/// the quorum of 2. Counted once, the lock needs the third member, and fails without it.
#[tokio::test]
async fn two_names_of_one_server_count_once() {
    let cluster = Cluster::start(2);
    let (one, other) = (cluster.node(0).port(), cluster.node(1).port());
    let urls = [
        format!("redis://127.0.0.1:{one}"),
        format!("redis://localhost:{one}"),
        format!("redis://127.0.0.1:{other}"),
    ];
    let redlock = Redlock::connect(&urls).await.expect("distinct addresses");
    let mutex = redlock
        .new_mutex("same_server:names")
        .with_expiry(Duration::from_secs(2))
        .with_tries(1);
    let lock = mutex.lock().await.expect("two servers of three entries");
    let (refused, named) = same_server(&lock.failing_nodes());
    assert!(
        matches!((refused, named), (0, 2) | (1, 1)),
        "{refused}, {named}"
    );
    let reason = lock.failing_nodes()[0].to_string();
    assert!(
        reason.contains("the same server as member") && reason.contains("count twice"),
        "{reason}"
    );
    lock.unlock().await.expect("unlocked");

    cluster.node(1).kill();
    match mutex.lock().await {
        Err(Error::NoQuorum { failures, .. }) => {
            same_server(&failures);
        }
        other => panic!("one server is one vote of three, no quorum: {other:?}"),
    }
}

/// Two seeds of one Redis Cluster are one member twice: beside one standalone server, the
/// cluster alone would make the quorum.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_listed_twice_counts_once() {
    let cluster = RedisCluster::start(3, 0);
    let standalone = Cluster::start(1);
    let masters = cluster.masters();
    let urls = [
        standalone.urls()[0].clone(),
        masters[0].url(),
        masters[1].url(),
    ];
    let redlock = Redlock::connect(&urls).await.expect("distinct addresses");
    let mutex = redlock
        .new_mutex("{same_server}:cluster")
        .with_expiry(Duration::from_secs(2))
        .with_tries(1);
    let lock = mutex.lock().await.expect("two members of three entries");
    let (refused, _) = same_server(&lock.failing_nodes());
    assert!(refused == 1 || refused == 2, "{refused}");
    lock.unlock().await.expect("unlocked");

    standalone.node(0).kill();
    match mutex.lock().await {
        Err(Error::NoQuorum { failures, .. }) => {
            same_server(&failures);
        }
        other => panic!("one cluster is one vote of three, no quorum: {other:?}"),
    }
}
