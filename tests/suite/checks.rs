//! Node checks (`Redlock::checkup`), against real nodes set up as operators get them wrong.

use std::time::Duration;

use redmutex::{CheckKind, CheckReport, CheckStatus, Redlock};
use redmutex_testenv::Cluster;

use crate::support::eventually;

/// The status and reason of one node's check.
fn check(report: &CheckReport, node: usize, kind: CheckKind) -> (CheckStatus, String) {
    let found = report
        .checks()
        .iter()
        .find(|c| c.node == node && c.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} check for node {node}: {report:#?}"));
    (found.status, found.reason.clone())
}

async fn checkup(urls: Vec<String>) -> CheckReport {
    let redlock = Redlock::connect(urls).await.unwrap();
    redlock.checkup().run().await
}

/// Runs a command on a node with its own connection.
fn command(cluster: &Cluster, node: usize, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query(&mut cluster.node(node).connection()).unwrap();
}

#[tokio::test]
async fn healthy_nodes_pass_and_only_persistence_warns() {
    let cluster = Cluster::start(3);
    let report = checkup(cluster.urls()).await;
    assert!(!report.has_failures(), "{report:#?}");
    assert_eq!(report.checks().len(), 3 * 7);
    assert_eq!((report.sound_nodes(), report.quorum()), (3, 2));
    for c in report.checks() {
        assert_eq!(
            c.address.as_deref(),
            Some(cluster.node(c.node).url().as_str())
        );
        // testenv's nodes run without persistence, as a cache would.
        let expected = match c.kind {
            CheckKind::Persistence => CheckStatus::Warn,
            _ => CheckStatus::Pass,
        };
        assert_eq!(c.status, expected, "{c:?}");
    }
    let (_, reason) = check(&report, 0, CheckKind::Persistence);
    assert!(reason.contains("appendonly no"), "{reason}");
    // The scratch key of the permissions round is gone again.
    assert!(cluster.nodes().iter().all(|node| node.dbsize() == 0));
}

#[tokio::test]
async fn appendfsync_always_passes_persistence() {
    let cluster = Cluster::start(1);
    command(&cluster, 0, &["CONFIG", "SET", "appendonly", "yes"]);
    command(&cluster, 0, &["CONFIG", "SET", "appendfsync", "always"]);
    let report = checkup(cluster.urls()).await;
    assert_eq!(
        check(&report, 0, CheckKind::Persistence).0,
        CheckStatus::Pass
    );
    command(&cluster, 0, &["CONFIG", "SET", "appendfsync", "everysec"]);
    let report = checkup(cluster.urls()).await;
    let (status, reason) = check(&report, 0, CheckKind::Persistence);
    assert_eq!(status, CheckStatus::Warn);
    assert!(reason.contains("everysec"), "{reason}");
}

#[tokio::test]
async fn the_same_server_listed_twice_fails() {
    let cluster = Cluster::start(2);
    let mut urls = cluster.urls();
    // The same server under a second name.
    urls.push(urls[0].replace("127.0.0.1", "localhost"));
    let report = checkup(urls).await;
    assert!(report.has_failures());
    let (status, reason) = check(&report, 0, CheckKind::Distinct);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.contains("same server as node 2"), "{reason}");
    let (status, reason) = check(&report, 2, CheckKind::Distinct);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.contains("same server as node 0"), "{reason}");
    assert_eq!(check(&report, 1, CheckKind::Distinct).0, CheckStatus::Pass);
    assert_eq!(report.sound_nodes(), 1);
}

#[tokio::test]
async fn a_replica_of_another_listed_node_fails_and_so_does_its_master() {
    let cluster = Cluster::start(3);
    let master = cluster.node(0).port().to_string();
    command(&cluster, 2, &["REPLICAOF", "127.0.0.1", &master]);
    eventually("the master lists its replica", || {
        let mut connection = cluster.node(0).connection();
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut connection)
            .unwrap();
        info.contains("slave0:")
    })
    .await;
    let report = checkup(cluster.urls()).await;
    assert!(report.has_failures());
    let (status, reason) = check(&report, 2, CheckKind::Independent);
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        reason.contains(&format!("replica of 127.0.0.1:{master} (node 0)")),
        "{reason}"
    );
    let (status, reason) = check(&report, 0, CheckKind::Independent);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.contains("replicates with node 2"), "{reason}");
    assert_eq!(
        check(&report, 1, CheckKind::Independent).0,
        CheckStatus::Pass
    );
    // A replica is read-only: the lock round fails there too, naming the command.
    let (status, reason) = check(&report, 2, CheckKind::Permissions);
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        reason.starts_with("SET NX PX refused") && reason.contains("read only"),
        "{reason}"
    );
}

#[tokio::test]
async fn maxmemory_with_an_evicting_policy_fails() {
    let cluster = Cluster::start(3);
    command(
        &cluster,
        1,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            "100mb",
            "maxmemory-policy",
            "allkeys-lru",
        ],
    );
    command(
        &cluster,
        2,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            "100mb",
            "maxmemory-policy",
            "noeviction",
        ],
    );
    let report = checkup(cluster.urls()).await;
    let (status, reason) = check(&report, 1, CheckKind::Eviction);
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        reason.contains("100mb") && reason.contains("allkeys-lru"),
        "{reason}"
    );
    assert_eq!(check(&report, 0, CheckKind::Eviction).0, CheckStatus::Pass);
    assert_eq!(check(&report, 2, CheckKind::Eviction).0, CheckStatus::Pass);
    assert_eq!(report.sound_nodes(), 2);
}

#[tokio::test]
async fn unreachable_nodes_fail_and_their_other_checks_are_skipped() {
    let cluster = Cluster::start(3);
    cluster.node(1).kill();
    cluster.node(2).pause();
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    let report = redlock
        .checkup()
        .with_timeout(Duration::from_millis(300))
        .run()
        .await;
    cluster.node(2).resume();
    for node in [1, 2] {
        assert_eq!(
            check(&report, node, CheckKind::Reachable).0,
            CheckStatus::Fail
        );
        assert_eq!(
            check(&report, node, CheckKind::Eviction).0,
            CheckStatus::Skip
        );
    }
    let (_, reason) = check(&report, 2, CheckKind::Reachable);
    assert!(reason.contains("timed out"), "{reason}");
    assert_eq!(check(&report, 0, CheckKind::Reachable).0, CheckStatus::Pass);
    assert_eq!(report.sound_nodes(), 1);
}

/// A user with the given ACL rules on every node, and URLs that log in as that user.
fn restricted(cluster: &Cluster, rules: &[&str]) -> Vec<String> {
    for node in 0..cluster.len() {
        let mut args = vec!["ACL", "SETUSER", "ops", "reset", "on", ">s3cret"];
        args.extend_from_slice(rules);
        command(cluster, node, &args);
    }
    cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", "redis://ops:s3cret@"))
        .collect()
}

#[tokio::test]
async fn missing_permissions_show_up_by_command() {
    let cluster = Cluster::start(1);
    // Everything but scripts.
    let urls = restricted(&cluster, &["~*", "&*", "+@all", "-eval", "-evalsha"]);
    let report = checkup(urls).await;
    let (status, reason) = check(&report, 0, CheckKind::Permissions);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.starts_with("the extend script refused"), "{reason}");
    assert!(
        reason.contains("no permissions to run the 'evalsha'"),
        "{reason}"
    );
    assert!(!reason.contains("s3cret"));
    assert_eq!(check(&report, 0, CheckKind::Reachable).0, CheckStatus::Pass);

    // Keys outside the scratch prefix's pattern.
    let urls = restricted(&cluster, &["~locks:*", "&*", "+@all"]);
    let report = checkup(urls.clone()).await;
    let (status, reason) = check(&report, 0, CheckKind::Permissions);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.starts_with("SET NX PX refused"), "{reason}");
    // ... which a scratch prefix inside the pattern fixes.
    let redlock = Redlock::connect(urls).await.unwrap();
    let report = redlock
        .checkup()
        .with_scratch_prefix("locks:check:")
        .run()
        .await;
    assert_eq!(
        check(&report, 0, CheckKind::Permissions).0,
        CheckStatus::Pass
    );

    // No PUBLISH: plain locks work, wake-up on release does not.
    let urls = restricted(&cluster, &["~*", "&*", "+@all", "-publish"]);
    let report = checkup(urls).await;
    let (status, reason) = check(&report, 0, CheckKind::Permissions);
    assert_eq!(status, CheckStatus::Warn, "{reason}");
    assert!(reason.contains("PUBLISH"), "{reason}");
    assert!(
        cluster.node(0).dbsize() == 0,
        "the scratch key was released"
    );
}

#[tokio::test]
async fn refused_questions_are_warnings_with_the_reason() {
    let cluster = Cluster::start(1);
    // With appendonly on, appendfsync matters, and only CONFIG GET tells it.
    command(&cluster, 0, &["CONFIG", "SET", "appendonly", "yes"]);
    // As on managed services: no CONFIG, no INFO.
    let urls = restricted(&cluster, &["~*", "&*", "+@all", "-config"]);
    let report = checkup(urls).await;
    let (status, reason) = check(&report, 0, CheckKind::Persistence);
    assert_eq!(status, CheckStatus::Warn);
    assert!(reason.contains("CONFIG GET refused"), "{reason}");
    assert!(!report.has_failures(), "{report:#?}");

    let urls = restricted(&cluster, &["~*", "&*", "+@all", "-info"]);
    let report = checkup(urls).await;
    for kind in [
        CheckKind::Distinct,
        CheckKind::Independent,
        CheckKind::Eviction,
        CheckKind::Persistence,
    ] {
        let (status, reason) = check(&report, 0, kind);
        assert_eq!(status, CheckStatus::Warn, "{kind}");
        assert!(
            reason.contains("INFO refused") && reason.contains("'info'"),
            "{reason}"
        );
    }
    // Redis 7 names its version to scripts, which the user may run.
    let (status, reason) = check(&report, 0, CheckKind::Version);
    assert_eq!(status, CheckStatus::Pass, "{reason}");
    assert!(reason.starts_with("Redis 7."), "{reason}");
    assert!(!report.has_failures(), "{report:#?}");
}
