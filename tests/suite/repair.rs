//! An extend repairs the quorum: a node that lost the key (restarted empty) gets it back with the
//! lock's value, for every primitive whose lock is one key per name; and an extend never brings
//! back a lock that expired, on any node.

use std::time::Duration;

use redmutex::{Error, Lock};
use redmutex_testenv::Cluster;

use crate::support::{client, holders, present, quick};

const EXPIRY: Duration = Duration::from_secs(2);

/// Extends `lock` until node `node` holds `name` with its value again: the first extend after the
/// restart may find the old connection broken (an error on that node alone), and the next goes
/// out on a new one. Every extend must succeed: the other nodes hold a quorum throughout.
async fn extend_until_repaired(cluster: &Cluster, lock: &Lock, name: &str, node: usize) {
    for _ in 0..100 {
        lock.extend().await.expect("the other nodes hold a quorum");
        if holders(cluster, name, lock.value()).contains(&node) {
            let pttl = cluster.node(node).pttl(name);
            assert!(
                pttl > 0 && pttl <= EXPIRY.as_millis() as i64,
                "{name}: repaired with PTTL {pttl}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name}: node {node} never got the key back");
}

#[tokio::test]
async fn a_node_restarted_empty_gets_the_key_back_on_extend() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for fail_fast in [false, true] {
        let name = format!("repair:mutex:{fail_fast}");
        let mutex = quick(&redlock, &name).with_fail_fast(fail_fast);
        let lock = mutex.lock().await.expect("free lock");
        let node = usize::from(fail_fast) + 1;
        cluster.node(node).restart();
        assert_eq!(holders(&cluster, &name, lock.value()).len(), 2);
        extend_until_repaired(&cluster, &lock, &name, node).await;
        lock.unlock().await.expect("unlock");
        assert!(
            present(&cluster, &name).is_empty(),
            "{name}: left after unlock"
        );
    }
}

/// Every primitive whose lock is a key per name holding the value: a multi-name lock (every
/// name on the restarted node) and a read-write lock's writer.
#[tokio::test]
async fn multi_name_locks_and_writers_are_repaired_too() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["repair:multi:a", "repair:multi:b"];
    let multi = redlock
        .new_multi_mutex(names)
        .with_expiry(EXPIRY)
        .lock()
        .await
        .expect("free names");
    let writer = redlock
        .new_rwlock("repair:write")
        .with_expiry(EXPIRY)
        .write()
        .await
        .expect("free name");
    cluster.node(0).restart();
    for name in names {
        extend_until_repaired(&cluster, &multi, name, 0).await;
    }
    assert_eq!(holders(&cluster, names[1], multi.value()), [0, 1, 2]);
    extend_until_repaired(&cluster, &writer, "repair:write", 0).await;
    multi.unlock().await.expect("unlock");
    writer.unlock().await.expect("unlock");
}

/// A multi-name lock that lost one of its names on a node gets that name back there, and the
/// names it kept are extended.
#[tokio::test]
async fn a_multi_name_lock_gets_back_the_name_a_node_lost() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["repair:part:a", "repair:part:b"];
    let lock = redlock
        .new_multi_mutex(names)
        .with_expiry(EXPIRY)
        .lock()
        .await
        .expect("free names");
    cluster.node(2).del(names[0]);
    lock.extend().await.expect("two nodes hold every name");
    for name in names {
        assert_eq!(holders(&cluster, name, lock.value()), [0, 1, 2], "{name}");
    }
    lock.unlock().await.expect("unlock");
}

/// A leader whose lease a node lost gets it back there at its next renewal.
#[tokio::test]
async fn a_leader_s_renewals_repair_its_lease() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let election = redlock
        .new_election("repair:lead")
        .with_expiry(Duration::from_millis(900));
    let leadership = election.campaign("a").await.expect("elected");
    cluster.node(1).restart();
    crate::support::within(
        Duration::from_secs(3),
        "the lease is back on node 1",
        || cluster.node(1).exists("repair:lead"),
    )
    .await;
    assert!(leadership.is_leading());
    assert_eq!(present(&cluster, "repair:lead"), [0, 1, 2]);
    leadership.resign().await.expect("resign");
}

/// A lock that is gone from a quorum (deleted on two nodes of three while its validity runs) is
/// not brought back: the extend fails, and the node it repaired holds nothing after it returns.
#[tokio::test]
async fn an_extend_that_fails_takes_its_repairs_back() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for (round, fail_fast) in [(0, false), (1, true)] {
        let name = format!("repair:taken-back:{round}");
        let lock = quick(&redlock, &name)
            .with_fail_fast(fail_fast)
            .lock()
            .await
            .expect("free lock");
        // Gone from nodes 0 and 1 (an operator, or two restarts), while the lock is valid.
        cluster.node(0).del(&name);
        cluster.node(1).del(&name);
        let sets: Vec<u64> = (0..3).map(|n| cluster.node(n).calls("set")).collect();
        match lock.extend().await {
            Err(Error::Expired) => {}
            other => panic!("{name}: {other:?}"),
        }
        // The script did set them again (so this test sees the take-back, not its absence)...
        let repaired = (0..2).all(|n| cluster.node(n).calls("set") > sets[n]);
        assert!(repaired, "{name}: nothing was repaired: {sets:?}");
        // ...and nothing but node 2's own key is left.
        assert_eq!(present(&cluster, &name), [2], "{name}");
        drop(lock);
    }
}

/// A lock whose validity ended is extended without repair: an expired lock is never set again,
/// even for the length of a round trip.
#[tokio::test]
async fn an_expired_lock_is_never_set_again() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "repair:expired";
    let lock = quick(&redlock, name)
        .with_expiry(Duration::from_millis(300))
        .lock()
        .await
        .expect("free lock");
    crate::support::within(Duration::from_secs(2), "the keys expire", || {
        present(&cluster, name).is_empty()
    })
    .await;
    let sets: Vec<u64> = (0..3).map(|n| cluster.node(n).calls("set")).collect();
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    let after: Vec<u64> = (0..3).map(|n| cluster.node(n).calls("set")).collect();
    assert_eq!(after, sets, "an extend past the validity set keys");
    assert!(present(&cluster, name).is_empty());
}
