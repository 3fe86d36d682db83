//! `with_replica_acks(n)`: a member counts a lock write only once `n` replicas of the master that
//! took it acknowledged it (`WAIT`, in one pipeline with the write, so that it runs where the write
//! ran, also after a redirection), on a Redis Cluster and on a standalone server with replicas; a member whose replicas do not answer fails with its own
//! error and a failed attempt releases its write; off by default, with no WAIT sent.
#![cfg(feature = "cluster")]

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Error, Mutex, NodeErrorKind, Redlock};
use redmutex_testenv::{Cluster, Node, RedisCluster};

/// A mutex with room for WAIT (its timeout is half the node timeout: 750 ms here, for a loaded
/// machine).
fn acked(redlock: &Redlock, name: &str, replicas: u32) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.05)
        .with_retry_delay(Duration::from_millis(10))
        .with_tries(2)
        .with_replica_acks(replicas)
}

/// What a replica of a cluster holds at `key` (`READONLY`, then `GET`).
fn replica_get(replica: &Node, key: &str) -> Option<String> {
    let mut connection = replica.connection();
    redis::cmd("READONLY")
        .query::<()>(&mut connection)
        .expect("READONLY");
    connection.get(key).expect("GET on the replica")
}

/// Makes `replica` a replica of the standalone `master`, and waits until the link is up.
fn replicate(master: &Node, replica: &Node) {
    let mut connection = replica.connection();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query::<()>(&mut connection)
        .expect("REPLICAOF");
    linked(replica);
}

/// Waits until `replica`'s link to its master is up: a replica still in its first sync
/// acknowledges nothing, and a loaded machine can take longer than WAIT's timeout for it.
fn linked(replica: &Node) {
    let mut connection = replica.connection();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut connection)
            .expect("INFO");
        if info
            .lines()
            .any(|line| line.trim() == "master_link_status:up")
        {
            return;
        }
        assert!(Instant::now() < deadline, "no replication link: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// With one ack asked for, a lock on a cluster member waits for the replica of the name's master:
/// the key (and, after an extend, its new expiry) is on the replica when the call returns. WAIT
/// goes to the master of the name's slot, once per lock write and never for an unlock; a mutex
/// without the setting sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_counts_once_its_replica_has_the_key() {
    let cluster = RedisCluster::start(3, 1);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let name = "replica-acks:on-the-replica";
    let master = cluster.master_of_key(name);
    let replica = cluster.replicas_of(master)[0];
    linked(replica);
    let waits = || master.calls("wait");

    let plain = acked(&redlock, name, 0).lock().await.expect("free");
    plain.extend().await.expect("extend");
    plain.unlock().await.expect("unlock");
    assert_eq!(waits(), 0, "no WAIT without the setting");

    let lock = acked(&redlock, name, 1).lock().await.expect("free");
    assert_eq!(waits(), 1, "one WAIT, on the name's master");
    assert_eq!(
        replica_get(replica, name).as_deref(),
        Some(lock.value()),
        "the replica acknowledged the key before the lock counted"
    );
    lock.extend().await.expect("extend");
    assert_eq!(waits(), 2, "an extension waits too");
    lock.unlock().await.expect("unlock");
    assert_eq!(waits(), 2, "an unlock does not");
    for other in cluster.masters() {
        if other.port() != master.port() {
            assert_eq!(other.calls("wait"), 0, "WAIT on {}", other.port());
        }
    }

    // A read-write lock and a semaphore wait the same way, on their names' masters (whose
    // replicas must be linked first: an unlinked replica acknowledges nothing, and the attempt is
    // made again, with a WAIT of its own).
    let rwlock = "replica-acks:rwlock";
    linked(cluster.replicas_of(cluster.master_of_key(rwlock))[0]);
    let writer = redlock
        .new_rwlock(rwlock)
        .with_replica_acks(1)
        .write()
        .await
        .expect("free");
    let owner = cluster.master_of_key(rwlock);
    let earlier = if owner.port() == master.port() { 2 } else { 0 };
    assert_eq!(owner.calls("wait"), earlier + 1);
    writer.unlock().await.expect("unlock");
    let semaphore = "replica-acks:semaphore";
    linked(cluster.replicas_of(cluster.master_of_key(semaphore))[0]);
    let before = cluster.master_of_key(semaphore).calls("wait");
    let permit = redlock
        .new_semaphore(semaphore, 2)
        .with_replica_acks(1)
        .acquire()
        .await
        .expect("free");
    let owner = cluster.master_of_key(semaphore);
    assert_eq!(owner.calls("wait"), before + 1);
    let mut connection = cluster.replicas_of(owner)[0].connection();
    redis::cmd("READONLY")
        .query::<()>(&mut connection)
        .expect("READONLY");
    let holders: i64 = redis::cmd("ZCOUNT")
        .arg(semaphore)
        .arg(0)
        .arg("+inf")
        .query(&mut connection)
        .expect("ZCOUNT on the replica");
    assert_eq!(holders, 1, "the replica has the permit");
    permit.unlock().await.expect("unlock");

    // A healthy cluster member with replicas passes the checks (replicas are a warning).
    let report = redlock.checkup().run().await;
    assert!(!report.has_failures(), "{:#?}", report.checks());
}

/// A paused replica acknowledges nothing: the cluster member fails with an error that says so,
/// and its write is released; beside two standalone members (with replicas of their own), the
/// lock still gets its quorum from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_fails_its_member_but_not_the_quorum() {
    let cluster = RedisCluster::start(3, 1);
    let standalone = Cluster::start(4);
    replicate(standalone.node(0), standalone.node(2));
    replicate(standalone.node(1), standalone.node(3));
    let name = "replica-acks:paused";
    let master = cluster.master_of_key(name);
    let replica = cluster.replicas_of(master)[0];
    let alone = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let members = [
        standalone.node(0).url(),
        cluster.seed_url(),
        standalone.node(1).url(),
    ];
    let mixed = Redlock::connect(members).await.expect("URLs");
    // Connected (to every node of the cluster, replicas included) before the replica stops.
    for redlock in [&alone, &mixed] {
        let lock = acked(redlock, name, 0).lock().await.expect("free");
        lock.unlock().await.expect("unlock");
    }
    replica.pause();

    let error = acked(&alone, name, 1)
        .lock()
        .await
        .expect_err("the member's replica acknowledges nothing");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("{error}");
    };
    assert!(
        matches!(
            failures[0].kind,
            NodeErrorKind::Unreplicated {
                acknowledged: 0,
                wanted: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("0 of 1 replicas acknowledged"),
        "{error}"
    );
    assert!(
        !cluster.exists(name),
        "the failed attempt released its write"
    );

    let lock = acked(&mixed, name, 1)
        .lock()
        .await
        .expect("a quorum from the standalone members");
    for replica in [standalone.node(2), standalone.node(3)] {
        assert_eq!(replica.get(name).as_deref(), Some(lock.value()));
    }
    lock.unlock().await.expect("unlock");
    replica.resume();
}

/// A standalone server without replicas never counts with acks asked for.
#[tokio::test]
async fn a_standalone_server_without_replicas_never_counts() {
    let standalone = Cluster::start(1);
    let redlock = Redlock::connect(standalone.urls()).await.expect("a URL");
    let name = "replica-acks:no-replicas";
    let error = acked(&redlock, name, 1)
        .with_tries(1)
        .lock()
        .await
        .expect_err("nothing to acknowledge");
    assert!(
        error.to_string().contains("0 of 1 replicas acknowledged"),
        "{error}"
    );
    assert!(!standalone.node(0).exists(name), "released");
}

/// `CLUSTER FAILOVER` of the held lock's master: the key is on the new master, and extend and
/// unlock work there, the extension acknowledged by the old master (now its replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_an_acknowledged_lock() {
    let cluster = RedisCluster::start(3, 1);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let name = "replica-acks:failover";
    let lock = acked(&redlock, name, 1)
        .with_tries(3)
        .lock()
        .await
        .expect("free");
    let old = cluster.master_of_key(name);
    let new = cluster.replicas_of(old)[0];
    cluster.failover(new);
    assert_eq!(cluster.master_of_key(name).port(), new.port());
    assert_eq!(new.get(name).as_deref(), Some(lock.value()));
    let waits = new.calls("wait");
    let before = new.pttl(name);
    // The first calls may meet the cluster client's refresh after the failover.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut extended = lock.extend().await;
    while let Err(error) = &extended {
        assert!(Instant::now() < deadline, "no extend: {error}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        extended = lock.extend().await;
    }
    assert!(
        new.calls("wait") > waits,
        "the extension waited on the new master"
    );
    let pttl: i64 = {
        let mut connection = old.connection();
        redis::cmd("READONLY")
            .query::<()>(&mut connection)
            .expect("READONLY");
        connection.pttl(name).expect("PTTL on the old master")
    };
    assert!(
        pttl > before,
        "the old master has the new expiry: {pttl} > {before}"
    );
    lock.unlock().await.expect("unlock on the new master");
    assert!(!cluster.exists(name));
}

/// `ASKING` and `EXISTS` on `node`, which imports the slot of `key`: whether the key is there.
fn exists_importing(node: &Node, key: &str) -> bool {
    let mut connection = node.connection();
    redis::cmd("ASKING")
        .query::<()>(&mut connection)
        .expect("ASKING");
    connection.exists(key).expect("EXISTS after ASKING")
}

/// During a slot's migration, a new name's write is answered `ASK` by the source and lands on the
/// importing master: its acknowledgement must be the target's replica's, wherever the slot map
/// says the slot is. Here the target's replica stops: a name the target owns is refused, and so
/// must be a name of the migrating slot (whose key lands on the target), where a `WAIT` sent to
/// the slot's owner (the source, whose replica answers) would count it. An extension of a lock
/// that landed there before the replica stopped is refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_followed_an_ask_is_acknowledged_where_it_landed() {
    let cluster = RedisCluster::start(3, 1);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    let tag = "replica-acks:migrating";
    let slot = redmutex_testenv::key_slot(tag);
    let source = cluster.master_of_slot(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|master| master.port() != source.port())
        .expect("another master");
    let target_replica = cluster.replicas_of(target)[0];
    let owned = cluster.key_on(target, "replica-acks:owned:");
    // Connected to every master before anything stops.
    for name in [owned.as_str(), tag] {
        let lock = acked(&redlock, name, 1).lock().await.expect("free");
        lock.unlock().await.expect("unlock");
    }

    let migration = cluster.begin_migration(slot, target);
    let held_name = format!("{{{tag}}}:held");
    let held = acked(&redlock, &held_name, 1)
        .lock()
        .await
        .expect("both replicas answer");
    assert!(
        exists_importing(target, &held_name),
        "the key landed on the target"
    );
    target_replica.pause();

    let unreplicated = |error: &Error| error.to_string().contains("0 of 1 replicas acknowledged");
    let error = acked(&redlock, &owned, 1)
        .with_tries(1)
        .lock()
        .await
        .expect_err("the target's replica acknowledges nothing");
    assert!(unreplicated(&error), "{error}");

    let fresh = format!("{{{tag}}}:fresh");
    // Without notices: a notifying release names the waiters' mark as a second key, which the
    // importing master answers TRYAGAIN while the mark is not there (doc/limits.md), so the
    // failed attempt's release would only land once the migration ends.
    let quiet = acked(&redlock, &fresh, 1).with_wake_on_release(false);
    match quiet.with_tries(1).lock().await {
        Err(error) => assert!(unreplicated(&error), "{error}"),
        Ok(lock) => panic!(
            "locked with its key on the target ({}), whose replica acknowledged nothing: the \
             acknowledgement counted was another master's",
            exists_importing(target, lock.name())
        ),
    }
    assert!(
        !exists_importing(target, &fresh),
        "the failed attempt released its write"
    );
    match held.extend().await {
        Err(error) => assert!(unreplicated(&error), "{error}"),
        Ok(()) => panic!(
            "extended on the target, whose replica acknowledged nothing: the acknowledgement \
             counted was another master's"
        ),
    }
    target_replica.resume();
    drop(held);
    migration.finish();
}
