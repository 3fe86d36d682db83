//! Nodes come back on their own, whatever made them fail: a set-up the node refused (credentials
//! it did not know yet, `maxclients` reached), a connection that went half-open (testenv's proxy
//! strands it: silence, no error, while new connections pass), and a release listener whose
//! connection went half-open. A node that merely stalls (SIGSTOP) keeps its connection, so what was
//! queued on it runs in order when it resumes.

use std::time::{Duration, Instant};

use redmutex::{Error, Lock, Mutex, NodeErrorKind, Redlock};
use redmutex_testenv::{Cluster, Node};

use crate::support::{client, holders, warm_up, within};

/// How long a node may take to come back: the backoff between connection attempts (1 s at most),
/// or a run of silent calls (1 s) and a probe (2 s), with a wide margin for a loaded machine.
const COME_BACK: Duration = Duration::from_secs(15);

/// A mutex whose calls each cost at most 100 ms on a node that does not answer. It polls: a
/// waiter woken by releases would subscribe its name, and a subscription sent on a stranded
/// listener brings the listener back sooner than its PINGs do, before the data connections
/// (which `a_release_listener_on_a_half_open_connection_is_re_made` waits for in that order).
fn mutex(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
        .with_wake_on_release(false)
}

/// Locks and unlocks `mutex` until a lock lands on every node of `cluster` (within [`COME_BACK`]);
/// returns how many locks that took.
async fn until_everywhere(cluster: &Cluster, mutex: &Mutex) -> usize {
    let deadline = Instant::now() + COME_BACK;
    let mut locks = 0;
    loop {
        let lock = mutex.lock().await.expect("a quorum is always there");
        locks += 1;
        let on = holders(cluster, mutex.name(), lock.value());
        lock.unlock().await.expect("unlock");
        if on.len() == cluster.len() {
            return locks;
        }
        assert!(
            Instant::now() < deadline,
            "the lock still lands on nodes {on:?} only"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `redis://user:password@127.0.0.1:PORT/` for every node.
fn urls_as(cluster: &Cluster, user: &str, password: &str) -> Vec<String> {
    cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://{user}:{password}@")))
        .collect()
}

/// Every permission, for tests about connecting rather than permissions.
fn create_user(node: &Node, user: &str, password: &str) {
    let password = format!(">{password}");
    node.acl_setuser(user, &["on", &password, "~*", "&*", "+@all"]);
}

/// Node 2's error in an attempt on a name that node 0 holds already, so that the attempt fails
/// and lists it.
async fn node_2_error(cluster: &Cluster, mutex: &Mutex) -> NodeErrorKind {
    let node = cluster.node(0);
    node.set_px(mutex.name(), "someone-else", Duration::from_secs(5));
    let result = mutex.try_lock().await;
    node.del(mutex.name());
    match result {
        Err(Error::NoQuorum { failures, .. }) => {
            let failure = failures.into_iter().find(|f| f.node == 2);
            failure.expect("node 2 failed").kind
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

/// The ids of the node's connections that last ran a script: redmutex's own connections (not the
/// listeners', nor testenv's).
fn script_connections(node: &Node) -> Vec<u64> {
    node.clients()
        .into_iter()
        .filter(|client| client.last_command.starts_with("eval"))
        .map(|client| client.id)
        .collect()
}

#[tokio::test]
async fn a_node_that_refused_the_credentials_is_used_once_it_accepts_them() {
    let cluster = Cluster::start(3);
    let password = "late-user-s3cret";
    // The user exists on nodes 0 and 1; node 2 learns of it later, as when a deployment creates
    // users and starts clients at about the same time.
    for i in [0, 1] {
        create_user(cluster.node(i), "app", password);
    }
    let redlock = Redlock::connect(urls_as(&cluster, "app", password))
        .await
        .expect("URLs parse");
    let mutex = mutex(&redlock, "recovery:credentials");
    let lock = mutex.lock().await.expect("nodes 0 and 1 suffice");
    assert_eq!(holders(&cluster, mutex.name(), lock.value()), [0, 1]);
    lock.unlock().await.expect("unlock");

    let refused = node_2_error(&cluster, &mutex).await;
    assert!(refused.is_refusal(), "{refused}");
    assert!(!refused.to_string().contains(password), "{refused}");

    create_user(cluster.node(2), "app", password);
    until_everywhere(&cluster, &mutex).await;
}

#[tokio::test]
async fn a_node_at_maxclients_is_used_once_the_limit_is_raised() {
    let cluster = Cluster::start(3);
    let node = cluster.node(2);
    // This connection fills node 2, and is the one way left to raise the limit again.
    let mut admin = node.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("1")
        .exec(&mut admin)
        .expect("CONFIG SET maxclients");

    let redlock = client(&cluster).await;
    let mutex = mutex(&redlock, "recovery:maxclients");
    let lock = mutex.lock().await.expect("nodes 0 and 1 suffice");
    lock.unlock().await.expect("unlock");
    let refused = node_2_error(&cluster, &mutex).await;
    assert!(matches!(refused, NodeErrorKind::Redis(_)), "{refused}");

    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("10000")
        .exec(&mut admin)
        .expect("CONFIG SET maxclients");
    until_everywhere(&cluster, &mutex).await;
}

#[tokio::test]
async fn a_half_open_connection_is_replaced() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let mutex = mutex(&redlock, "recovery:half-open");
    warm_up(&mutex).await;
    let before = script_connections(cluster.node(0));
    assert_eq!(before.len(), 1);
    proxies.proxy(0).strand();

    // Calls to node 0 time out (100 ms each) and nothing else tells the client that its
    // connection is dead; locks keep working on nodes 1 and 2 meanwhile.
    let locks = until_everywhere(&cluster, &mutex).await;
    assert!(
        locks > 1,
        "the first lock after the strand cannot reach node 0"
    );
    // A new connection serves node 0. The stranded one is still there (the proxy keeps it open).
    let after = script_connections(cluster.node(0));
    assert!(after.contains(&before[0]), "{after:?}");
    assert!(after.iter().any(|id| !before.contains(id)), "{after:?}");
}

#[tokio::test]
async fn a_paused_node_keeps_its_connection_and_runs_its_queue_in_order() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = mutex(&redlock, "recovery:paused");
    warm_up(&mutex).await;
    let node = cluster.node(0);
    let before = script_connections(node);
    assert_eq!(before.len(), 1);

    // Many calls time out on the paused node, over far longer than a run of silent calls takes
    // to make the connection suspect: each probe finds that a fresh connection cannot be made
    // either, so the connection stays.
    node.pause();
    let paused_until = Instant::now() + Duration::from_secs(4);
    let mut cycles = 0;
    while Instant::now() < paused_until {
        let lock = mutex.lock().await.expect("nodes 1 and 2 suffice");
        lock.unlock().await.expect("nodes 1 and 2 suffice");
        cycles += 1;
    }
    node.resume();
    assert!(cycles >= 3, "{cycles} lock cycles");

    // Every SET queued on the connection ran before the release queued after it: nothing is
    // left, long before the 20 s expiry could clear anything.
    within(Duration::from_secs(3), "node 0 holds no key", || {
        !node.exists(mutex.name())
    })
    .await;
    let lock = mutex.lock().await.expect("lock");
    assert_eq!(holders(&cluster, mutex.name(), lock.value()), [0, 1, 2]);
    lock.unlock().await.expect("unlock");
    // The connection that served that lock is the one from before the pause.
    assert_eq!(script_connections(node), before);
}

#[tokio::test]
async fn a_release_listener_on_a_half_open_connection_is_re_made() {
    let cluster = Cluster::start(3);
    let holder_client = client(&cluster).await;
    let proxies = cluster.proxies();
    let waiter_client = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let name = "recovery:listener";
    let waking = |redlock: &Redlock| {
        redlock
            .new_mutex(name)
            .with_expiry(Duration::from_secs(30))
            .with_timeout_factor(0.01)
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(100)
            .with_wake_on_release(true)
    };
    let holder = waking(&holder_client).lock().await.expect("free");
    let waiter = {
        let mutex = waking(&waiter_client);
        tokio::spawn(async move { mutex.lock().await })
    };
    let channel = format!("redmutex:released:{name}");
    let subscribed = |count: i64| {
        let cluster = &cluster;
        let channel = &channel;
        move || {
            cluster
                .nodes()
                .iter()
                .all(|n| n.subscribers(channel) == count)
        }
    };
    within(
        Duration::from_secs(5),
        "the waiter subscribed",
        subscribed(1),
    )
    .await;

    // Everything of the waiter's client goes silent for good. Its listeners notice by their
    // PINGs and subscribe again on new connections (the stranded subscriptions stay on the
    // nodes, since the proxy keeps those connections open); its data connections are replaced
    // once calls go unanswered, which another mutex of the client keeps making.
    for i in 0..3 {
        proxies.proxy(i).strand();
    }
    let busy = {
        let mutex = mutex(&waiter_client, "recovery:listener-traffic");
        tokio::spawn(async move {
            loop {
                if let Ok(lock) = mutex.lock().await {
                    let _ = lock.unlock().await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    within(COME_BACK, "every listener subscribed again", subscribed(2)).await;
    let ready = until_everywhere(&cluster, &mutex(&waiter_client, "recovery:listener-probe")).await;
    assert!(ready >= 1);
    busy.abort();

    // Only a release notice can wake the waiter within the minute of its retry delay.
    holder.unlock().await.expect("unlock");
    let lock: Lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release notice, not by its retry delay")
        .expect("the task ran")
        .expect("the waiter gets the lock");
    lock.unlock().await.expect("unlock");
}

#[test]
fn a_client_outlives_the_runtimes_it_ran_on() {
    let cluster = Cluster::start(3);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    // The runtime that made the client ends at once, with the connection attempts it started.
    let redlock = runtime()
        .block_on(Redlock::connect(cluster.urls()))
        .expect("URLs parse");
    for round in 0..5 {
        // Each runtime ends with the connections made on it; the next one makes its own.
        runtime().block_on(async {
            let mutex = mutex(&redlock, "recovery:runtimes").with_tries(20);
            let lock = mutex
                .lock()
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            lock.unlock().await.expect("unlock");
        });
    }
}

#[test]
fn a_connection_attempt_cut_short_by_its_runtime_is_made_again() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let all = [0, 1, 2];
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    // The first attempts hang on the cut-off network when their runtime ends.
    proxies.set_mode(&all, redmutex_testenv::Mode::Blackhole);
    let redlock = runtime().block_on(async {
        let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
        tokio::time::sleep(Duration::from_millis(200)).await;
        redlock
    });
    proxies.set_mode(&all, redmutex_testenv::Mode::Pass);
    runtime().block_on(async {
        let mutex = mutex(&redlock, "recovery:abandoned").with_tries(20);
        let lock = mutex.lock().await.expect("connected on this runtime");
        lock.unlock().await.expect("unlock");
    });
}
