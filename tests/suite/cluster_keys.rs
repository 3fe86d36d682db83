//! What each primitive sends to a Redis Cluster member: every key of a name in the name's slot,
//! notices by `SPUBLISH` on the name's sharded channel, multi-name locks within one slot, and no
//! read of the previous layout's counters (see the guide's *Keys and notice channels*).

use std::time::Duration;

use redmutex::{Error, NodeErrorKind, Redlock};
use redmutex_testenv::RedisCluster;

use crate::support::{AHEAD, beside};

async fn member(cluster: &RedisCluster) -> Redlock {
    Redlock::connect([cluster.seed_url()])
        .await
        .expect("a cluster member")
}

#[tokio::test]
async fn a_fenced_mutex_keeps_its_counter_on_the_name_master() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    for name in ["ckeys:order:42", "{ckeys:user:1}:cart"] {
        // The previous layout's counter is in another slot on a cluster, and never was: not read
        // (it would decide the token, ahead of the clock).
        cluster.set(&format!("{name}:fence"), &(AHEAD + 41).to_string());
        let lock = redlock
            .new_mutex(name)
            .with_fencing(true)
            .lock()
            .await
            .expect("free");
        let token = lock.token().expect("fenced");
        assert!(token < AHEAD, "{name}: {token}");
        let counter = beside(name, ":fence");
        assert_eq!(cluster.get(&counter), Some(token.to_string()));
        assert_eq!(
            cluster.master_of_key(&counter).port(),
            cluster.master_of_key(name).port()
        );
        lock.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn a_waiter_wakes_on_the_sharded_notice() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let waking = || {
        redlock
            .new_mutex("ckeys:wake")
            .with_expiry(Duration::from_secs(30))
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(100)
            .with_wake_on_release(true)
    };
    let holder = waking().lock().await.expect("free");
    let waiter = tokio::spawn({
        let waiter = waking();
        async move { waiter.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.unlock().await.expect("unlock");
    let lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the notice, not its minute-long delay")
        .expect("task")
        .expect("locked");
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_fair_line_hands_over_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let name = "{ckeys:queue}:head";
    let fair = || {
        redlock
            .new_mutex(name)
            .with_expiry(Duration::from_secs(30))
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(100)
            .with_fair(true)
    };
    let holder = fair().lock().await.expect("free");
    let waiter = tokio::spawn({
        let waiter = fair();
        async move { waiter.lock().await }
    });
    let line = beside(name, ":line");
    for _ in 0..200 {
        if cluster.query_key::<bool>(&line, redis::cmd("EXISTS").arg(&line)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.unlock().await.expect("unlock");
    let lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("handed the lock by the grant notice")
        .expect("task")
        .expect("locked");
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn readers_and_writers_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let rwlock = redlock.new_rwlock("ckeys:prices").with_tries(1);
    let reader = rwlock.read().await.expect("free");
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    reader.unlock().await.expect("unlock");
    let writer = rwlock
        .clone()
        .with_fencing(true)
        .write()
        .await
        .expect("free");
    writer.unlock().await.expect("unlock");
    assert_eq!(rwlock.force_unlock().await.expect("forced"), 0);
}

/// The writer's plain entry on a cluster member: its two commands go to the name's master in one
/// write, a mark there goes with the writer that gets in, and where a reader holds the script runs
/// after all and refuses.
#[tokio::test]
async fn a_plain_write_entry_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let name = "ckeys:stock";
    let mark = beside(name, ":writer-waiting");
    let rwlock = redlock.new_rwlock(name).with_tries(1);
    cluster.set_px(&mark, "another writer", Duration::from_secs(60));
    let writer = rwlock.try_write().await.expect("free");
    assert_eq!(cluster.get(name).as_deref(), Some(writer.value()));
    assert!(
        !cluster.exists(&mark),
        "the writer that got in removed the mark"
    );
    writer.unlock().await.expect("unlock");
    let reader = rwlock.read().await.expect("free");
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    assert!(cluster.exists(&mark), "the refused writer marked the name");
    reader.unlock().await.expect("unlock");
}

/// Names of one hash tag lock as one script on their shard; names in different slots are refused
/// by the member before anything is sent, with the hash-tag rule in the error.
#[tokio::test]
async fn a_multi_name_lock_stays_within_one_slot() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let together = ["{ckeys:acct}:from", "{ckeys:acct}:to"];
    let lock = redlock
        .new_multi_mutex(together)
        .with_fencing(true)
        .with_wake_on_release(true)
        .lock()
        .await
        .expect("one slot");
    lock.unlock().await.expect("unlock");

    let apart = ["ckeys:from", "ckeys:to"];
    assert_ne!(
        redmutex_testenv::key_slot(apart[0]),
        redmutex_testenv::key_slot(apart[1])
    );
    match redlock.new_multi_mutex(apart).with_tries(5).lock().await {
        Err(Error::NoQuorum { failures, .. }) => {
            assert!(matches!(failures[0].kind, NodeErrorKind::CrossSlot));
            assert!(failures[0].kind.to_string().contains("hash tag"));
        }
        other => panic!("expected the member's refusal, got {other:?}"),
    }
    for name in apart {
        assert_eq!(cluster.get(name), None, "nothing was sent");
    }
    // A forced release of names in several slots goes name by name.
    let held = redlock.new_mutex(apart[1]).lock().await.expect("free");
    let forced = redlock.new_multi_mutex(apart).force_unlock().await;
    assert_eq!(forced.expect("forced"), 1);
    assert!(matches!(held.extend().await, Err(Error::Expired)));
}

/// A multi-name lock's plain entry on a cluster member: the `MULTI`/`EXEC` goes to the names'
/// master in one write; where one name is taken, the member refuses and the names it set there
/// are gone before the attempt returns.
#[tokio::test]
async fn a_plain_multi_entry_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let names = ["{ckeys:plain}:a", "{ckeys:plain}:b", "{ckeys:plain}:c"];
    let multi = redlock.new_multi_mutex(names).with_tries(1);
    let lock = multi.try_lock().await.expect("free");
    for name in names {
        assert_eq!(cluster.get(name).as_deref(), Some(lock.value()));
    }
    lock.unlock().await.expect("unlock");
    cluster.set_px(names[1], "someone-else", Duration::from_secs(60));
    assert!(matches!(multi.try_lock().await, Err(Error::Taken { .. })));
    assert_eq!(cluster.get(names[0]), None, "the part set is released");
    assert_eq!(cluster.get(names[2]), None, "the part set is released");
    assert_eq!(cluster.get(names[1]).as_deref(), Some("someone-else"));
}
