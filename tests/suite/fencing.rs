//! Fencing tokens: strictly increasing across holders, even when failed attempts left some nodes'
//! counters ahead, and enforced by the protected resource.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock, fenced_set};
use redmutex_testenv::{Cluster, Mode};

use crate::support;
use crate::support::{AHEAD, client, contended};

/// A URL where nothing listens: a node this client cannot reach (one side of a partition).
const UNREACHABLE: &str = "redis://127.0.0.1:1/";
/// Another: two members may not name one address.
const UNREACHABLE_TOO: &str = "redis://127.0.0.1:2/";

fn counter(cluster: &Cluster, node: usize, name: &str) -> u64 {
    cluster
        .node(node)
        .get(&support::beside(name, ":fence"))
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
    assert_eq!(cluster.node(0).pttl("{fencing:sequence}:fence"), -1);
    assert_eq!(counter(&cluster, 0, "fencing:sequence"), last);

    let plain = redlock
        .new_mutex("fencing:off")
        .lock()
        .await
        .expect("free lock");
    assert_eq!(plain.token(), None);
    assert!(!cluster.node(0).exists("{fencing:off}:fence"));
}

/// The counterexample to "the maximum of the counters on the acquiring quorum": node 0's counter
/// is ahead (failed partial attempts inflated it, here beyond every node's clock). Client A sees
/// nodes 0, 1, 2 and gets a token above it; client B sees nodes 2, 3, 4, whose counters know
/// nothing of node 0's. Without the raise round, B would get a token from their counters and
/// clocks, below A's. With it, node 2 carries A's token into B's quorum.
#[tokio::test]
async fn an_inflated_counter_never_yields_a_smaller_later_token() {
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let a = [&urls[0], &urls[1], &urls[2], UNREACHABLE, UNREACHABLE_TOO];
    let b = [UNREACHABLE, UNREACHABLE_TOO, &urls[2], &urls[3], &urls[4]];
    let a = Redlock::connect(a.iter().map(|u| u.to_string()))
        .await
        .expect("URLs parse");
    let b = Redlock::connect(b.iter().map(|u| u.to_string()))
        .await
        .expect("URLs parse");
    let name = "fencing:inflated";
    cluster
        .node(0)
        .set(&support::beside(name, ":fence"), &(AHEAD + 100).to_string());

    let lock_a = a
        .new_mutex(name)
        .with_fencing(true)
        .lock()
        .await
        .expect("A gets 0, 1, 2");
    let token_a = lock_a.token().expect("fencing is on");
    assert_eq!(token_a, AHEAD + 101);
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
    assert_eq!(counter(&cluster, 0, name), AHEAD + 101);
    assert_eq!(counter(&cluster, 1, name), AHEAD + 101);
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

/// Only the nodes whose counters went into the token count for its raise. Node 2's counter is far
/// ahead (of every node's clock too), and its acquire reply comes too late to be counted: its proxy
/// holds its traffic until the
/// raise round has begun. Node 1 is counted, but loses the key before its raise arrives (as a node
/// restarted without persistence would): its proxy lets the acquire through and holds the raise
/// sent right after it. So the raise succeeds on node 0, and on node 2, where the acquire has
/// landed by then. Counting node 2 would hand out a token on a raise quorum that includes a node
/// whose counter (far above that token) never went into it: the way two holders end up with one token (the
/// `FencedRaiseOnAll` counterexample of tests/models/fencing.rs). Node 0 alone is no quorum.
///
/// Nothing races the client: node 2 gets nothing before the test lets it, node 1's proxy counts
/// requests rather than time, and the test acts only once node 0's counter shows that the raise
/// round has begun.
#[tokio::test]
async fn a_raise_counts_only_the_nodes_counted_into_the_token() {
    let name = "fencing:raise-counted";
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    // The client's warm-up loads every script into every node; its requests must not use up the
    // count of node 1's proxy.
    let scripts = redmutex::internals::SCRIPTS as u64;
    support::eventually("the warm-up is over", || {
        cluster
            .nodes()
            .iter()
            .all(|n| n.calls("script|load") == scripts)
    })
    .await;
    cluster
        .node(2)
        .set(&support::beside(name, ":fence"), &(AHEAD + 100).to_string());
    proxies.set_mode(&[1], Mode::HoldAfter(1));
    proxies.set_mode(&[2], Mode::Blackhole);

    let mutex = redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.25) // 5 s per node: the test waits for no timeout
        .with_fencing(true)
        .with_fail_fast(true)
        .with_tries(1);
    let attempt = tokio::spawn(async move { mutex.try_lock().await });
    // Node 0 took the raise: the token was chosen from nodes 0 and 1 alone, below node 2's counter.
    support::eventually("node 0 took the raise", || counter(&cluster, 0, name) > 0).await;
    assert!(counter(&cluster, 0, name) < AHEAD);
    cluster.node(1).del(name);
    proxies.set_mode(&[1, 2], Mode::Pass);

    match attempt.await.expect("no panic") {
        Err(Error::NoQuorum { ok, failures, .. }) => {
            assert_eq!(ok, 1);
            let kinds: Vec<(usize, bool)> = failures
                .iter()
                .map(|f| (f.node, matches!(f.kind, NodeErrorKind::NotCounted)))
                .collect();
            assert_eq!(kinds, [(1, false), (2, true)], "{failures:?}");
            assert!(matches!(failures[0].kind, NodeErrorKind::Missing));
        }
        Ok(lock) => panic!(
            "handed out token {:?} on a raise quorum with node 2, whose counter ({}) was not counted",
            lock.token(),
            counter(&cluster, 2, name)
        ),
        Err(other) => panic!("expected NoQuorum, got {other:?}"),
    }
}

/// A node that lost its counter must not let a later holder repeat a token. Three nodes whose
/// counters stand at 5. The first holder reaches nodes 1 and 2 only (node 3 is cut off from it)
/// and raises them; its lock expires; node 1 then restarts empty (without persistence, after the
/// lock it held expired, as Redlock asks of a restart); the second holder reaches nodes 1 and 3
/// only. Quorum intersection no longer carries the first token (node 1 forgot it, node 3 never
/// saw it): `max(0, 5) + 1` would hand out the first holder's token again. The node's clock does:
/// each counter read is at least the node's time in microseconds, later than every token handed
/// out before.
#[tokio::test]
async fn a_node_that_lost_its_counter_never_repeats_a_token() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let name = "fencing:forgotten";
    for node in cluster.nodes() {
        node.set(&support::beside(name, ":fence"), "5");
    }
    let fenced = |redlock: &Redlock| {
        redlock
            .new_mutex(name)
            .with_fencing(true)
            .with_expiry(Duration::from_millis(500))
            .with_tries(1)
    };
    let first = Redlock::connect([urls[0].as_str(), urls[1].as_str(), UNREACHABLE])
        .await
        .expect("URLs parse");

    let held = fenced(&first).lock().await.expect("nodes 1 and 2");
    let first_token = held.token().expect("fencing is on");
    assert!(first_token > 5);
    for node in [0, 1] {
        assert_eq!(counter(&cluster, node, name), first_token);
    }
    assert_eq!(counter(&cluster, 2, name), 5, "node 3 never saw it");
    support::eventually("the first lock expired", || {
        cluster.nodes().iter().all(|node| !node.exists(name))
    })
    .await;
    cluster.node(0).restart();
    assert_eq!(counter(&cluster, 0, name), 0, "node 1 forgot its counter");
    let second = Redlock::connect([urls[0].as_str(), UNREACHABLE, urls[2].as_str()])
        .await
        .expect("URLs parse");

    let later = fenced(&second).lock().await.expect("nodes 1 and 3");
    let second_token = later.token().expect("fencing is on");
    assert!(
        second_token > first_token,
        "the second holder got token {second_token} after the first holder's {first_token}"
    );
    later.unlock().await.expect("unlock");
}
