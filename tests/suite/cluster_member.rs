//! A Redis Cluster as one member of the quorum: found from any node's URL or given as a
//! `ClusterClient`, beside standalone members, through resharding, failover and a whole cluster
//! lost. Fencing, readers, semaphores, fair waiting and wake-on-release by the library's own
//! notices need the cluster key layout (tests of their own).
//!
//! These run with the `cluster` feature (on by default). Without it (`cargo test --test suite
//! --no-default-features cluster_member::`), the one test left checks that a cluster member is
//! refused with an error that names the feature.
#![cfg_attr(not(feature = "cluster"), allow(unused_imports, dead_code))]

use std::collections::HashSet;
use std::time::{Duration, Instant};

#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
#[cfg(not(feature = "cluster"))]
use redmutex::NodeErrorKind;
use redmutex::{CheckKind, CheckStatus, Error, MemberClient, Mutex, Redlock};
use redmutex_testenv::{Cluster, RedisCluster, key_slot};

use crate::support::capture::Capture;
use crate::support::{increments_under_lock, within};

/// A mutex that holds long enough for a topology change, with quick retries.
fn patient(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.02)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
}

/// Without the `cluster` feature a cluster node is refused, naming the feature, before anything
/// is sent: never a `MOVED` loop.
#[cfg(not(feature = "cluster"))]
#[tokio::test]
async fn without_the_feature_a_cluster_member_is_refused_naming_it() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let error = patient(&redlock, "cluster-member:no-feature")
        .with_tries(1_000)
        .lock()
        .await
        .expect_err("a cluster member needs the feature");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("{error}");
    };
    assert!(
        matches!(failures[0].kind, NodeErrorKind::ClusterFeatureOff),
        "{error}"
    );
    assert!(error.to_string().contains("`cluster` feature"), "{error}");
    assert_eq!(cluster.dbsize(), 0, "nothing was sent");
}

/// The first symptom: with one node's URL, every name whose slot another master serves
/// failed with `Moved: ...`. Now the cluster is one member, and names on every shard lock,
/// extend and unlock, leaving no key behind.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_stands_for_the_whole_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = Redlock::connect([cluster.nodes()[1].url()])
        .await
        .expect("a URL");
    assert_eq!(redlock.len(), 1);
    assert_eq!(redlock.quorum(), 1);
    let mut locks = Vec::new();
    let mut shards = HashSet::new();
    for i in 0..200 {
        let name = format!("cluster-member:spread:{i}");
        let lock = patient(&redlock, &name)
            .lock()
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        let owner = cluster.master_of_key(&name);
        assert_eq!(owner.get(&name).as_deref(), Some(lock.value()), "{name}");
        shards.insert(owner.port());
        locks.push(lock);
    }
    assert_eq!(shards.len(), 3, "200 names reach every master");
    for lock in &locks {
        lock.extend().await.expect("extend");
        assert!(cluster.pttl(lock.name()) > 25_000, "{}", lock.name());
    }
    for lock in locks {
        lock.unlock().await.expect("unlock");
    }
    assert_eq!(cluster.dbsize(), 0, "nothing is left behind");
}

/// A cluster client the caller built is a member too, beside standalone nodes' clients.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_cluster_client_is_one_member() {
    let standalone = Cluster::start(2);
    let cluster = RedisCluster::start(3, 0);
    let members: Vec<MemberClient> = vec![
        redis::Client::open(standalone.urls()[0].as_str())
            .expect("a URL")
            .into(),
        ClusterClient::new(cluster.urls())
            .expect("a cluster client")
            .into(),
        redis::Client::open(standalone.urls()[1].as_str())
            .expect("a URL")
            .into(),
    ];
    let redlock = Redlock::from_clients(members).await.expect("three members");
    assert_eq!(redlock.len(), 3);
    for i in 0..30 {
        let name = format!("cluster-member:client:{i}");
        let lock = patient(&redlock, &name).lock().await.expect("lock");
        assert_eq!(cluster.get(&name).as_deref(), Some(lock.value()));
        assert_eq!(standalone.node(1).get(&name).as_deref(), Some(lock.value()));
        lock.unlock().await.expect("unlock");
        assert!(!cluster.exists(&name));
    }
    // With the standalone members down, the cluster alone is no quorum: it counts once.
    standalone.node(0).kill();
    standalone.node(1).kill();
    let error = patient(&redlock, "cluster-member:client:alone")
        .try_lock()
        .await
        .expect_err("one member of three");
    let Error::NoQuorum { ok, quorum, .. } = error else {
        panic!("{error}");
    };
    assert_eq!((ok, quorum), (1, 2));
}

/// Two standalone servers and one cluster: 16 tasks on 4 clients make 25 non-atomic increments
/// each under one name; a lost update would show as a count below 400.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_deployment_keeps_increments_exact() {
    let standalone = Cluster::start(2);
    let cluster = RedisCluster::start(3, 0);
    let counter = Cluster::start(1);
    let urls = [
        standalone.urls()[0].clone(),
        cluster.seed_url(),
        standalone.urls()[1].clone(),
    ];
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Redlock::connect(&urls).await.expect("URLs"));
    }
    let count = increments_under_lock(&clients, "cluster-member:counter", &counter).await;
    assert_eq!(count, "400");
    assert!(!cluster.exists("cluster-member:counter"));
}

/// Three clusters, three members: one whole cluster lost still leaves a quorum; two lost is
/// `NoQuorum`, well within a bound, naming both.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_clusters_are_lost_as_members() {
    let clusters: Vec<RedisCluster> = (0..3).map(|_| RedisCluster::start(3, 0)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::seed_url).collect();
    let redlock = Redlock::connect(&urls).await.expect("URLs");
    assert_eq!(redlock.len(), 3);
    let mutex = patient(&redlock, "cluster-member:lost").with_expiry(Duration::from_secs(5));
    mutex
        .lock()
        .await
        .expect("all up")
        .unlock()
        .await
        .expect("unlock");

    clusters[1].kill_all();
    let lock = mutex
        .lock()
        .await
        .expect("two clusters of three are a quorum");
    assert!(clusters[0].exists("cluster-member:lost"));
    lock.unlock().await.expect("unlock on the two left");

    clusters[2].kill_all();
    let started = Instant::now();
    let tried = tokio::time::timeout(Duration::from_secs(30), mutex.lock()).await;
    let error = tried
        .expect("a lost quorum is reported, not waited out")
        .expect_err("one cluster of three");
    let Error::NoQuorum { ok, failures, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*ok, 1, "{error}");
    let failed: Vec<usize> = failures.iter().map(|failure| failure.node).collect();
    assert_eq!(failed, [1, 2], "{error}");
    assert!(
        !clusters[0].exists("cluster-member:lost"),
        "the attempt's key is released"
    );
    eprintln!("two clusters lost: NoQuorum after {:?}", started.elapsed());
}

/// `CLUSTER FAILOVER` to the replica of a held lock's master: the cluster client follows, and
/// the lock is extended and unlocked on the new master within seconds.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed() {
    let cluster = RedisCluster::start(3, 1);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let name = "cluster-member:failover";
    let lock = patient(&redlock, name).lock().await.expect("lock");
    let master = cluster.master_of_key(name);
    let replica = cluster.replicas_of(master)[0];
    cluster.failover(replica);
    assert_eq!(cluster.master_of_key(name).port(), replica.port());
    // The old master answers MOVED now; the first calls may meet the client's refresh.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut extended = lock.extend().await;
    while let Err(error) = &extended {
        assert!(
            Instant::now() < deadline,
            "no extend after the failover: {error}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        extended = lock.extend().await;
    }
    assert!(replica.pttl(name) > 25_000);
    lock.unlock().await.expect("unlock on the new master");
    assert!(!cluster.exists(name));
}

/// A held lock's slot migrated to another master: extended and unlocked there, and the name
/// locked again on its new owner.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_slot_is_followed() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let name = "cluster-member:migrated";
    let mutex = patient(&redlock, name);
    let lock = mutex.lock().await.expect("lock");
    let owner = cluster.master_of_key(name);
    let to = cluster
        .masters()
        .into_iter()
        .find(|master| master.port() != owner.port())
        .expect("another master");
    cluster.migrate_slot(key_slot(name), to);
    assert_eq!(to.get(name).as_deref(), Some(lock.value()));
    lock.extend().await.expect("extend after the move");
    assert!(to.pttl(name) > 25_000);
    lock.unlock().await.expect("unlock after the move");
    assert!(!to.exists(name));
    let again = mutex.lock().await.expect("locked again");
    assert_eq!(to.get(name).as_deref(), Some(again.value()));
    again.unlock().await.expect("unlock");
}

/// The release listener of a cluster member subscribes to each name's sharded channel on the
/// master of its slot, and again on the new master after the slot moved: a waiter hears a
/// notice published there long before its retry delay. (The library's own release scripts
/// publish on a cluster with the cluster key layout; here the notice is published by hand.)
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_hears_sharded_notices_through_a_resharding() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let name = "cluster-member:heard";
    let channel = format!("redmutex:released:{{{name}}}");
    let holder = patient(&redlock, name);
    let waiter = patient(&redlock, name)
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(5);

    // A notice the listener must hear: the lock is gone, and its value is published.
    let release = |value: &str| {
        cluster.del(name);
        let mut publish = redis::cmd("SPUBLISH");
        publish.arg(&channel).arg(value);
        let _: i64 = cluster.query_key(&channel, &publish);
    };
    for round in ["before", "after"] {
        let held = holder.lock().await.expect("the holder locks");
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.lock().await })
        };
        within(Duration::from_secs(10), "the listener subscribed", || {
            cluster.shard_subscribers(&channel) == 1
        })
        .await;
        release(held.value());
        let woken = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .unwrap_or_else(|_| panic!("{round} the move: no wake-up before the retry delay"))
            .expect("the waiter's task");
        woken
            .expect("the waiter locks")
            .unlock()
            .await
            .expect("unlock");
        if round == "before" {
            let owner = cluster.master_of_key(&channel);
            let to = cluster
                .masters()
                .into_iter()
                .find(|master| master.port() != owner.port())
                .expect("another master");
            cluster.migrate_slot(key_slot(&channel), to);
        }
    }
}

/// `redmutex doctor`'s checks on a healthy cluster member pass, run on every master (a
/// master that may evict lock keys fails the member, named), and two URLs of one cluster fail
/// as not independent.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_run_on_every_master_and_find_a_cluster_listed_twice() {
    let cluster = RedisCluster::start(3, 0);
    let standalone = Cluster::start(1);
    let redlock = Redlock::connect([standalone.urls()[0].clone(), cluster.seed_url()])
        .await
        .expect("URLs");
    let report = redlock.checkup().run().await;
    let row = |node: usize, kind: CheckKind| {
        report
            .checks()
            .iter()
            .find(|check| check.node == node && check.kind == kind)
            .map(|check| (check.status, check.reason.clone()))
            .expect("a row per member and check")
    };
    for kind in [
        CheckKind::Reachable,
        CheckKind::Distinct,
        CheckKind::Independent,
        CheckKind::Eviction,
        CheckKind::Permissions,
        CheckKind::Version,
    ] {
        let (status, reason) = row(1, kind);
        assert_eq!(status, CheckStatus::Pass, "{kind}: {reason}");
    }
    assert!(
        row(1, CheckKind::Independent)
            .1
            .contains("Redis Cluster of 3 masters")
    );
    assert!(row(1, CheckKind::Eviction).1.contains("every master (3)"));
    assert!(
        row(1, CheckKind::Permissions)
            .1
            .contains("every master (3)")
    );
    assert_eq!(report.checks().len(), 2 * 7);
    assert!(!report.has_failures(), "{:#?}", report.checks());

    let evicting = cluster.masters()[2];
    evicting.config_set("maxmemory", "100mb");
    evicting.config_set("maxmemory-policy", "allkeys-lru");
    let report = redlock.checkup().run().await;
    let eviction = report
        .checks()
        .iter()
        .find(|check| check.node == 1 && check.kind == CheckKind::Eviction)
        .expect("an eviction row");
    assert_eq!(eviction.status, CheckStatus::Fail);
    let port = format!(":{}", evicting.port());
    assert!(
        eviction.reason.starts_with("1 of 3 masters") && eviction.reason.contains(&port),
        "{}",
        eviction.reason
    );

    let twice = Redlock::connect([cluster.nodes()[0].url(), cluster.nodes()[1].url()])
        .await
        .expect("URLs");
    let report = twice.checkup().run().await;
    for node in [0, 1] {
        let independent = report
            .checks()
            .iter()
            .find(|check| check.node == node && check.kind == CheckKind::Independent)
            .expect("an independent row");
        assert_eq!(independent.status, CheckStatus::Fail);
        assert!(
            independent
                .reason
                .contains("the same Redis Cluster as node"),
            "{}",
            independent.reason
        );
    }
    assert_eq!(report.sound_nodes(), 0);
}

/// Neither the client's `Debug`, nor its traces, nor its errors show a cluster member's
/// password (the cluster client's connection info holds it).
#[cfg(feature = "cluster")]
#[tokio::test]
async fn a_cluster_members_password_is_never_shown() {
    let cluster = RedisCluster::start(3, 0);
    for node in cluster.nodes() {
        node.acl_setuser("app", &["on", ">hunter2", "~*", "&*", "+@all"]);
    }
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer({
            let capture = capture.clone();
            move || capture.clone()
        })
        .finish();
    let _guard = crate::support::capture::set_default(subscriber);

    let url = format!(
        "redis://app:hunter2@127.0.0.1:{}/",
        cluster.nodes()[0].port()
    );
    let redlock = Redlock::connect([url.as_str()]).await.expect("a URL");
    let lock = patient(&redlock, "cluster-member:secret")
        .lock()
        .await
        .expect("lock");
    lock.unlock().await.expect("unlock");
    let client = MemberClient::from(redis::Client::open(url.as_str()).expect("a URL"));
    let cluster_client = MemberClient::from(ClusterClient::new([url.as_str()]).expect("a client"));
    cluster.kill_all();
    let error = patient(&redlock, "cluster-member:secret")
        .try_lock()
        .await
        .expect_err("the cluster is down");
    let traces = capture.text();
    assert!(traces.contains("Redis Cluster"), "{traces}");
    for shown in [
        format!("{redlock:?}"),
        format!("{client:?}"),
        format!("{cluster_client:?}"),
        error.to_string(),
        format!("{error:?}"),
        traces,
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

/// A cluster member given by several seed nodes (`url|url`) works while one seed is down: the
/// cluster client learns the cluster from another.
#[tokio::test]
async fn a_member_given_by_several_seeds_outlives_a_dead_seed() {
    let standalone = Cluster::start(2);
    let cluster = RedisCluster::start(3, 0);
    let seeds = format!("redis://127.0.0.1:1/|{}", cluster.urls()[1]);
    let mut urls = standalone.urls();
    urls.push(seeds);
    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    assert_eq!(redlock.len(), 3);
    let lock = redlock
        .new_mutex("seeds:job")
        .lock()
        .await
        .expect("every member answers");
    assert!(
        lock.failing_nodes().is_empty(),
        "{:?}",
        lock.failing_nodes()
    );
    lock.unlock().await.expect("unlock");
}
