//! Fencing tokens: strictly increasing across holders, even when failed attempts left some nodes'
//! counters ahead, and enforced by the protected resource.

mod support;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Redlock, fenced_set};
use support::{client, contended};
use testenv::Cluster;

/// A URL where nothing listens: a node this client cannot reach (one side of a partition).
const UNREACHABLE: &str = "redis://127.0.0.1:1/";

fn counter(cluster: &Cluster, node: usize, name: &str) -> u64 {
    cluster
        .node(node)
        .get(&format!("{name}:fence"))
        .map_or(0, |c| c.parse().expect("a number"))
}

#[tokio::test]
async fn tokens_increase_from_holder_to_holder() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("fencing:sequence").with_fencing(true);
    let mut last = 0;
    for round in 0..10 {
        if round == 5 {
            cluster.node(1).kill(); // a minority down changes nothing
        }
        let lock = mutex.lock().await.expect("free lock");
        let token = lock.token().expect("fencing is on");
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        lock.unlock().await.expect("unlock");
    }
    // The counter lives beside the lock key, never expires and outlives unlock.
    assert!(!cluster.node(0).exists("fencing:sequence"));
    assert_eq!(cluster.node(0).pttl("fencing:sequence:fence"), -1);
    assert_eq!(counter(&cluster, 0, "fencing:sequence"), last);

    let plain = redlock
        .new_mutex("fencing:off")
        .lock()
        .await
        .expect("free lock");
    assert_eq!(plain.token(), None);
    assert!(!cluster.node(0).exists("fencing:off:fence"));
}

/// The counterexample to "the maximum of the counters on the acquiring quorum": node 0's counter
/// is ahead (failed partial attempts inflated it). Client A sees nodes 0, 1, 2 and gets a token
/// above it; client B sees nodes 2, 3, 4, whose counters know nothing of node 0's. Without the raise
/// round, B would get token 1, below A's. With it, node 2 carries A's token into B's quorum.
#[tokio::test]
async fn an_inflated_counter_never_yields_a_smaller_later_token() {
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let a = [&urls[0], &urls[1], &urls[2], UNREACHABLE, UNREACHABLE];
    let b = [UNREACHABLE, UNREACHABLE, &urls[2], &urls[3], &urls[4]];
    let a = Redlock::connect(a.iter().map(|u| u.to_string()))
        .await
        .expect("URLs parse");
    let b = Redlock::connect(b.iter().map(|u| u.to_string()))
        .await
        .expect("URLs parse");
    let name = "fencing:inflated";
    cluster.node(0).set(&format!("{name}:fence"), "100");

    let lock_a = a
        .new_mutex(name)
        .with_fencing(true)
        .lock()
        .await
        .expect("A gets 0, 1, 2");
    let token_a = lock_a.token().expect("fencing is on");
    assert_eq!(token_a, 101);
    lock_a.unlock().await.expect("unlock");

    let lock_b = b
        .new_mutex(name)
        .with_fencing(true)
        .lock()
        .await
        .expect("B gets 2, 3, 4");
    let token_b = lock_b.token().expect("fencing is on");
    assert!(token_b > token_a, "B got {token_b} after A's {token_a}");
    // What carried A's token into B's quorum: the raise round wrote it to A's whole quorum.
    assert_eq!(counter(&cluster, 0, name), 101);
    assert_eq!(counter(&cluster, 1, name), 101);
}

/// A holder paused past its validity wakes up and writes with its old token: the resource refuses
/// it, and keeps the newer holder's write.
#[tokio::test]
async fn a_stale_holder_is_refused_by_the_resource() {
    let cluster = Cluster::start(3);
    let store = Cluster::start(1);
    let mut resource = redis::Client::open(store.node(0).url())
        .expect("valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("store is up");
    let first = client(&cluster).await;
    let second = client(&cluster).await;
    let mutex = |redlock: &Redlock| {
        redlock
            .new_mutex("fencing:stale")
            .with_fencing(true)
            .with_expiry(Duration::from_millis(300))
            .with_retry_delay(Duration::from_millis(20))
            .with_tries(100)
    };
    let stale = mutex(&first).lock().await.expect("free lock");
    // The first holder "pauses" past its expiry (a GC pause, a swap storm, SIGSTOP).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(stale.valid_until() < Instant::now());

    let fresh = mutex(&second)
        .lock()
        .await
        .expect("the expired lock is free");
    let fresh_token = fresh.token().expect("fencing is on");
    assert!(
        fenced_set(&mut resource, "account", "fresh", fresh_token)
            .await
            .expect("write")
    );

    let stale_token = stale.token().expect("fencing is on");
    assert!(stale_token < fresh_token);
    assert!(
        !fenced_set(&mut resource, "account", "stale", stale_token)
            .await
            .expect("write")
    );
    assert_eq!(store.node(0).get("account").as_deref(), Some("fresh"));
}

/// 10 clients x 10 acquisitions on one name, with a node paused for a while: tokens, in the order
/// the locks were acquired, strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_under_contention_and_faults() {
    let cluster = Arc::new(Cluster::start(5));
    let acquired = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let redlock = client(&cluster).await;
        let acquired = Arc::clone(&acquired);
        tasks.push(tokio::spawn(async move {
            let mutex = contended(&redlock, "fencing:contended").with_fencing(true);
            for _ in 0..10 {
                let lock = mutex.lock().await.expect("lock under contention");
                let at = Instant::now();
                let token = lock.token().expect("fencing is on");
                acquired.lock().expect("not poisoned").push((at, token));
                tokio::task::yield_now().await;
                lock.unlock().await.expect("unlock");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.node(3).pause();
    // Shorter than the node timeout (500 ms): unlocks of locks on a bare quorum that includes
    // node 3 wait for it instead of failing.
    tokio::time::sleep(Duration::from_millis(250)).await;
    cluster.node(3).resume();
    for task in tasks {
        task.await.expect("task finished");
    }
    let mut acquired = acquired.lock().expect("not poisoned").clone();
    assert_eq!(acquired.len(), 100);
    acquired.sort_by_key(|(at, _)| *at);
    for pair in acquired.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "token {} then {}",
            pair[0].1,
            pair[1].1
        );
    }
}
