//! Wake-up on release (on by default; `Mutex::with_wake_on_release`), on real nodes.
//!
//! Waiters here have a retry delay of a minute (or ten seconds): a waiter that gets the lock
//! within the test's bounds was woken by the release, not by its delay.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redmutex::{Error, Lock, Mutex, Redlock};
use redmutex_testenv::{Cluster, Mode};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::support::{client, eventually, mark_waited, waiters_mark, within};

/// Longer than any test here may take: only a release notice ends this wait early.
const FALLBACK: Duration = Duration::from_secs(60);

fn waking(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.05)
        .with_retry_delay(FALLBACK)
        .with_tries(1000)
        .with_wake_on_release(true)
}

fn channel(name: &str) -> String {
    format!("redmutex:released:{name}")
}

/// SET commands each node received so far: one per node per attempt.
fn sets(cluster: &Cluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.calls("set"))
        .collect()
}

/// Waits until every node has `count` subscribers on the name's channel.
async fn subscribed(cluster: &Cluster, name: &str, count: i64) {
    let channel = channel(name);
    let what = format!("{count} subscriber(s) to {channel} on every node");
    eventually(&what, || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.subscribers(&channel) == count)
    })
    .await;
}

/// Waits until every node received `count` SETs: the holder's, and the first waiter's two
/// attempts (before and after subscribing), after which it only waits.
async fn tried(cluster: &Cluster, count: u64) {
    let what = format!("{count} attempts on every node");
    eventually(&what, || sets(cluster).iter().all(|&sets| sets == count)).await;
}

/// Starts a task that locks `mutex` and sends the lock, tagged with `id`.
fn waiter(mutex: &Mutex, id: usize, locks: &mpsc::UnboundedSender<(usize, Lock)>) {
    let (mutex, locks) = (mutex.clone(), locks.clone());
    tokio::spawn(async move {
        let lock = mutex.lock().await.expect("the waiter gets the lock");
        let _ = locks.send((id, lock));
    });
}

async fn next_holder(locks: &mut mpsc::UnboundedReceiver<(usize, Lock)>) -> (usize, Lock) {
    tokio::time::timeout(Duration::from_secs(20), locks.recv())
        .await
        .expect("a waiter was woken by the release (its retry delay is a minute)")
        .expect("waiters are running")
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = waking(&redlock, "wake:one");
    let held = mutex.lock().await.expect("free lock");
    let (sender, mut locks) = mpsc::unbounded_channel();
    waiter(&mutex, 0, &sender);
    subscribed(&cluster, "wake:one", 1).await;
    tried(&cluster, 3).await;
    held.unlock().await.expect("unlock");
    let (_, next) = next_holder(&mut locks).await;
    next.unlock().await.expect("unlock");
}

/// Four waiters in one client: the first tries, subscribes the name and tries once more; the
/// others queue behind it without trying. Each release then costs exactly one attempt (one SET
/// per node), the waiters get the lock in the order they came, and all of them share one
/// subscription per node.
#[tokio::test]
async fn each_release_wakes_one_waiter_in_line() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "wake:queue";
    let mutex = waking(&redlock, name);
    let mut lock = mutex.lock().await.expect("free lock");
    let (sender, mut locks) = mpsc::unbounded_channel();
    let mut expected = sets(&cluster);
    waiter(&mutex, 0, &sender);
    // A failed attempt, and one more once subscribed: a release just before the subscription
    // took effect would have gone unheard.
    expected.iter_mut().for_each(|sets| *sets += 2);
    eventually("the first waiter tried twice", || {
        sets(&cluster) == expected
    })
    .await;
    for id in 1..4 {
        waiter(&mutex, id, &sender);
        // Queued at once, with no attempt: give the task a moment to get in line.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        sets(&cluster),
        expected,
        "later waiters queue without trying"
    );
    subscribed(&cluster, name, 1).await;
    for id in 0..4 {
        lock.unlock().await.expect("unlock");
        let (woken, next) = next_holder(&mut locks).await;
        assert_eq!(woken, id, "first come, first served");
        expected.iter_mut().for_each(|sets| *sets += 1);
        // Let any other wake-up show itself.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sets(&cluster), expected, "one attempt per release");
        lock = next;
    }
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn the_listener_resubscribes_after_its_node_restarts() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "wake:restart";
    let mutex = waking(&redlock, name);
    let held = mutex.lock().await.expect("free lock");
    let (sender, mut locks) = mpsc::unbounded_channel();
    waiter(&mutex, 0, &sender);
    subscribed(&cluster, name, 1).await;
    tried(&cluster, 3).await;
    cluster.node(0).restart();
    subscribed(&cluster, name, 1).await;
    // Node 0 lost the key with the restart; the other two report the release, a quorum.
    held.unlock().await.expect("unlock on a quorum");
    let (_, next) = next_holder(&mut locks).await;
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_name_is_unsubscribed_some_seconds_after_its_last_waiter() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "wake:linger";
    let mutex = waking(&redlock, name);
    let held = mutex.lock().await.expect("free lock");
    let (sender, mut locks) = mpsc::unbounded_channel();
    waiter(&mutex, 0, &sender);
    subscribed(&cluster, name, 1).await;
    held.unlock().await.expect("unlock");
    let (_, next) = next_holder(&mut locks).await;
    next.unlock().await.expect("unlock");
    // Kept for 5 s after the last waiter left, dropped at the next sweep (every 5 s).
    let channel = channel(name);
    within(Duration::from_secs(20), "no subscribers left", || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.subscribers(&channel) == 0)
    })
    .await;
}

/// Without notices (the holder's mutex does not publish, or the waiter's client was built from
/// connections and has no listeners) a waiter still gets the lock, after its retry delay.
#[tokio::test]
async fn without_notices_waiters_fall_back_on_their_delay() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mut connections = Vec::new();
    for url in cluster.urls() {
        let client = redis::Client::open(url).expect("URL");
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        connections.push(connection);
    }
    let built = Redlock::new(connections).expect("connections");
    for (waiting_client, name, listens) in [
        (&redlock, "wake:fallback", true),
        (&built, "wake:fallback-built", false),
    ] {
        // The holder's mutex does not publish.
        let silent = redlock
            .new_mutex(name)
            .with_expiry(Duration::from_secs(30))
            .with_wake_on_release(false);
        let held = silent.lock().await.expect("free lock");
        let waiter = waiting_client
            .new_mutex(name)
            .with_wake_on_release(true)
            .with_retry_delay(Duration::from_millis(300))
            .with_tries(100);
        let task = tokio::spawn(async move { waiter.lock().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let channel = channel(name);
        let subscribers = usize::from(listens) as i64;
        for node in cluster.nodes() {
            assert_eq!(node.subscribers(&channel), subscribers, "{name}");
        }
        held.unlock().await.expect("unlock");
        let next = task.await.expect("task").expect("the waiter gets the lock");
        next.unlock().await.expect("unlock");
    }
}

/// With wake-up on release every attempt has a value of its own: a release notice names the
/// released value, so a value released twice (a failed attempt's cleanup, then the unlock of a
/// retry that won with it) would read as one release to waiters.
#[tokio::test]
async fn every_attempt_has_its_own_value() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let held = redlock
        .new_mutex("wake:values")
        .lock()
        .await
        .expect("free lock");
    let values = Arc::new(AtomicU64::new(0));
    let waiter = redlock
        .new_mutex("wake:values")
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_millis(10))
        .with_tries(4)
        .with_value_fn({
            let values = Arc::clone(&values);
            move || format!("value-{}", values.fetch_add(1, Ordering::SeqCst))
        });
    let error = waiter.lock().await.expect_err("held throughout");
    assert!(matches!(error, redmutex::Error::Taken { .. }), "{error}");
    assert_eq!(values.load(Ordering::SeqCst), 4, "one value per attempt");
    held.unlock().await.expect("unlock");
}

/// One task per mutex, each making `rounds` non-atomic increments under the lock; returns the
/// count. Bounded well below the waiters' retry delay of a minute: finishing in time means every
/// hand-off was a wake-up.
async fn increments(mutexes: Vec<Mutex>, rounds: usize) -> u64 {
    let counter = Arc::new(AtomicU64::new(0));
    let tasks = mutexes.into_iter().map(|mutex| {
        let counter = Arc::clone(&counter);
        tokio::spawn(async move {
            for _ in 0..rounds {
                let lock = mutex.lock().await.expect("lock");
                // Not atomic on purpose: only the lock keeps increments apart.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                lock.unlock().await.expect("unlock");
            }
        })
    });
    let all = futures::future::join_all(tasks);
    let results = tokio::time::timeout(Duration::from_secs(50), all)
        .await
        .expect("every hand-off was a wake-up (the retry delay is a minute)");
    for result in results {
        result.expect("task");
    }
    counter.load(Ordering::SeqCst)
}

/// Eight tasks in one client: the count is exact, and every hand-off was a wake-up.
#[tokio::test]
async fn contending_tasks_hand_the_lock_on_by_wake_ups() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = waking(&redlock, "wake:contention");
    let count = increments(vec![mutex; 8], 20).await;
    assert_eq!(count, 160);
}

/// Four clients with two tasks each: every client wakes one waiter per release, so woken waiters
/// of different clients race; the count stays exact and no release goes unheard.
#[tokio::test]
async fn waiters_of_several_clients_race_without_losing_wake_ups() {
    let cluster = Cluster::start(5);
    let mut mutexes = Vec::new();
    for _ in 0..4 {
        let redlock = client(&cluster).await;
        let mutex = waking(&redlock, "wake:clients");
        mutexes.extend([mutex.clone(), mutex]);
    }
    let count = increments(mutexes, 15).await;
    assert_eq!(count, 120);
}

/// Listeners open only when somebody has to wait: an uncontended lock of a waking mutex uses the
/// client's one connection per node and nothing more.
#[tokio::test]
async fn uncontended_locks_open_no_listeners() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = waking(&redlock, "wake:uncontended");
    for _ in 0..3 {
        let lock = mutex.lock().await.expect("free lock");
        lock.unlock().await.expect("unlock");
    }
    for node in cluster.nodes() {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut node.connection())
            .expect("INFO");
        let clients = info
            .lines()
            .find_map(|line| line.strip_prefix("connected_clients:"))
            .map(str::trim);
        // The client's connection, and this inspection's own.
        assert_eq!(clients, Some("2"), "{info}");
    }
}

/// Waits up to 2 s until every node received `count` SETs (no assertion): for the code under
/// test to be waiting, where a failure must show later, in what the test is about.
async fn settle(cluster: &Cluster, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && sets(cluster).iter().any(|&sets| sets < count) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The default on both sides, in two clients (two processes in real life): a waiter that set
/// nothing but a retry delay of 10 s gets the lock within a second of the unlock of a holder that
/// set nothing, so a release notice reached it. Its first attempt found the name held; it
/// subscribed, then marked the name in the same write as its second attempt, and the holder's
/// release found the mark.
#[tokio::test]
async fn a_default_waiter_is_woken_by_a_default_holders_unlock() {
    let cluster = Cluster::start(3);
    let (holding, waiting) = (client(&cluster).await, client(&cluster).await);
    let name = "wake:default";
    let held = holding.new_mutex(name).lock().await.expect("free lock");
    let waiter = waiting
        .new_mutex(name)
        .with_retry_delay(Duration::from_secs(10));
    let task = tokio::spawn(async move { waiter.lock().await });
    // The holder's SET, the waiter's first attempt and its marked one.
    settle(&cluster, 3).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let next = woken(
        task,
        Duration::from_secs(1),
        "the waiter's retry delay is 10 s: only a release notice hands it the lock within a second",
    )
    .await;
    assert!(released.elapsed() < Duration::from_secs(1));
    next.unlock().await.expect("unlock");
}

/// `with_wake_on_release(false)` opts out on both sides: the waiter neither listens nor marks
/// the name, a holder that opted out sends no notice even where a waiter marked the name, and the
/// waiter still gets the lock, by polling at its retry delay.
#[tokio::test]
async fn the_opt_out_polls() {
    let cluster = Cluster::start(3);
    let (holding, waiting) = (client(&cluster).await, client(&cluster).await);
    let name = "wake:opt-out";
    let polling = |redlock: &Redlock| {
        redlock
            .new_mutex(name)
            .with_wake_on_release(false)
            .with_retry_delay(Duration::from_millis(300))
            .with_tries(100)
    };
    let held = polling(&holding).lock().await.expect("free lock");
    let waiter = polling(&waiting);
    let task = tokio::spawn(async move { waiter.lock().await });
    // Three attempts: the first, and two polls.
    eventually("the waiter polled twice", || {
        sets(&cluster).iter().all(|&sets| sets >= 4)
    })
    .await;
    for node in cluster.nodes() {
        assert_eq!(
            node.subscribers(&channel(name)),
            0,
            "the waiter listens to nothing"
        );
        assert!(
            !node.exists(&waiters_mark(name)),
            "the waiter marks nothing"
        );
    }
    // A waiter of another mutex marked the name: a holder that opted out sends no notice.
    mark_waited(&cluster, name);
    held.unlock().await.expect("unlock");
    let next = task
        .await
        .expect("task")
        .expect("the waiter gets the lock by polling");
    for node in cluster.nodes() {
        assert_eq!(node.calls("publish"), 0, "the holder notified nobody");
    }
    next.unlock().await.expect("unlock");
}

/// A notice that never comes (here, the waiter's marks are lost before the release, as if a
/// node had evicted them, so the release sends none) costs a listening waiter its retry delay,
/// no more: it still gets the lock, by its next attempt.
#[tokio::test]
async fn a_lost_notice_ends_in_a_retry() {
    let cluster = Cluster::start(3);
    let (holding, waiting) = (client(&cluster).await, client(&cluster).await);
    let name = "wake:lost";
    let held = holding.new_mutex(name).lock().await.expect("free lock");
    let waiter = waiting
        .new_mutex(name)
        .with_retry_delay(Duration::from_secs(1))
        .with_tries(100);
    let task = tokio::spawn(async move { waiter.lock().await });
    subscribed(&cluster, name, 1).await;
    eventually("the waiter marked the name", || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.exists(&waiters_mark(name)))
    })
    .await;
    for node in cluster.nodes() {
        node.del(&waiters_mark(name));
    }
    held.unlock().await.expect("unlock");
    let next = woken(
        task,
        Duration::from_secs(10),
        "the waiter retried after its delay of 1 s",
    )
    .await;
    for node in cluster.nodes() {
        assert_eq!(node.calls("publish"), 0, "no notice went out");
    }
    next.unlock().await.expect("unlock");
}

/// Two clients of `cluster`, and `name` taken through the first for `expiry`: the second, to
/// wait with, and the lock.
async fn held_by_another(cluster: &Cluster, name: &str, expiry: Duration) -> (Redlock, Lock) {
    let (holding, waiting) = (client(cluster).await, client(cluster).await);
    let held = holding
        .new_mutex(name)
        .with_expiry(expiry)
        .lock()
        .await
        .expect("free lock");
    (waiting, held)
}

/// The lock of the waiter `task`, which must come within `within` (`why` says what that shows).
async fn woken(task: JoinHandle<Result<Lock, Error>>, within: Duration, why: &str) -> Lock {
    tokio::time::timeout(within, task)
        .await
        .expect(why)
        .expect("task")
        .expect("the waiter gets the lock")
}

/// Releases `held`; the waiter `task` must have the lock within `within` (`why` says what that
/// shows), and lets it go.
async fn handed_over(
    held: Lock,
    task: JoinHandle<Result<Lock, Error>>,
    within: Duration,
    why: &str,
) {
    held.unlock().await.expect("unlock");
    woken(task, within, why)
        .await
        .unlock()
        .await
        .expect("unlock");
}

/// PSETEX commands (the waiters' marks) each node received so far.
fn marks_sent(cluster: &Cluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.calls("psetex"))
        .collect()
}

/// A waiter that polls at a short retry delay behind a long holder marks the name once, when it
/// starts to wait, not with each of its attempts: nothing took the marks off the nodes, and they
/// live longer than the wait so far.
#[tokio::test]
async fn a_polling_waiter_marks_the_name_once_not_with_each_attempt() {
    let cluster = Cluster::start(3);
    let name = "wake:poll-marks";
    let (waiting, held) = held_by_another(&cluster, name, Duration::from_secs(30)).await;
    let waiter = waiting
        .new_mutex(name)
        .with_retry_delay(Duration::from_millis(20))
        .with_tries(100_000);
    let task = tokio::spawn(async move { waiter.lock().await });
    // The holder's SET and 40 attempts of the waiter.
    eventually("the waiter made 40 attempts", || {
        sets(&cluster).iter().all(|&sets| sets > 40)
    })
    .await;
    let marks = marks_sent(&cluster);
    assert!(
        marks.iter().all(|&marks| (1..=2).contains(&marks)),
        "marks sent per node over 40 attempts: {marks:?}"
    );
    held.unlock().await.expect("unlock");
    let next = task.await.expect("task").expect("the waiter gets the lock");
    next.unlock().await.expect("unlock");
}

/// Publishes a release notice of `name` on `node`, after taking the waiters' mark off it, as the
/// release of a key there would (of another value than the holder's: the holder keeps the name).
fn released_elsewhere(node: &redmutex_testenv::Node, name: &str, value: &str) {
    node.del(&waiters_mark(name));
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel(name))
        .arg(value)
        .query(&mut node.connection())
        .expect("PUBLISH");
}

/// A release that took the waiters' mark off some nodes and woke nobody (too few nodes) makes the
/// waiter's next attempt mark again: without that, marks taken off two nodes before one attempt
/// and off a third before the next leave three of five nodes silent, and the holder's release
/// wakes nobody (two notices of five).
#[tokio::test]
async fn marks_taken_by_a_release_that_woke_nobody_are_set_again() {
    let cluster = Cluster::start(5);
    let name = "wake:spent-marks";
    let (waiting, held) = held_by_another(&cluster, name, Duration::from_secs(30)).await;
    let delay = Duration::from_secs(3);
    let waiter = waiting.new_mutex(name).with_retry_delay(delay);
    let task = tokio::spawn(async move { waiter.lock().await });
    // The holder's SET, the waiter's first attempt and its marked one.
    tried(&cluster, 3).await;
    subscribed(&cluster, name, 1).await;
    for node in &cluster.nodes()[..2] {
        released_elsewhere(node, name, "elsewhere-1");
    }
    tried(&cluster, 4).await;
    released_elsewhere(cluster.node(2), name, "elsewhere-2");
    tried(&cluster, 5).await;
    assert_eq!(marked(&cluster, name), [true; 5], "every node marked again");
    handed_over(
        held,
        task,
        delay / 2,
        "woken by the release, not by the retry delay of 3 s",
    )
    .await;
}

/// A wait longer than the marks live keeps the name marked: a waiter whose retry delay is a minute
/// is woken by a release that comes after the marks of its attempt would have expired.
#[tokio::test]
async fn a_long_wait_marks_the_name_again_before_the_marks_expire() {
    let cluster = Cluster::start(3);
    let name = "wake:long-wait";
    let (waiting, held) = held_by_another(&cluster, name, Duration::from_secs(60)).await;
    let waiter = waiting.new_mutex(name).with_retry_delay(FALLBACK);
    let task = tokio::spawn(async move { waiter.lock().await });
    eventually("the waiter's marked attempt", || {
        sets(&cluster).iter().all(|&sets| sets == 3)
    })
    .await;
    renewed_then_handed_over(&cluster, name, held, task).await;
}

/// Past the marks' life of 10 s, the name is still marked on every node of `cluster`, by the
/// waiter `task`'s marked attempt and one renewal; then `held` is released, and the waiter, whose
/// retry delay is a minute, must be woken.
async fn renewed_then_handed_over(
    cluster: &Cluster,
    name: &str,
    held: Lock,
    task: JoinHandle<Result<Lock, Error>>,
) {
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(marked(cluster, name), [true; 3], "the name is still marked");
    assert_eq!(
        marks_sent(cluster),
        [2; 3],
        "the marked attempt's marks, and one renewal"
    );
    handed_over(
        held,
        task,
        Duration::from_secs(5),
        "woken by the release (the retry delay is a minute)",
    )
    .await;
}

/// The renewal of a long wait does not depend on the marks being in place when the wait begins: a
/// notice that a release took the mark off one node, arriving while the marked attempt still waits
/// for a slow node, leaves the wait with marks that may be gone, and they must still be written
/// again before the others expire.
#[tokio::test]
async fn a_long_wait_renews_marks_unsettled_during_its_attempt() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let name = "wake:long-wait-unsettled";
    let holding = client(&cluster).await;
    let held = holding
        .new_mutex(name)
        .with_expiry(Duration::from_secs(60))
        .lock()
        .await
        .expect("free lock");
    let waiting = Redlock::connect(proxies.urls())
        .await
        .expect("valid URLs connect");
    // Node 2 answers half a second late: the window in which the marked attempt is in flight.
    proxies.set_mode(&[2], Mode::Delay(Duration::from_millis(500)));
    let waiter = waiting
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.05)
        .with_retry_delay(FALLBACK);
    let task = tokio::spawn(async move { waiter.lock().await });
    eventually("the waiter's marked attempt reached node 0", || {
        cluster.node(0).calls("set") == 3
    })
    .await;
    released_elsewhere(cluster.node(0), name, "elsewhere");
    renewed_then_handed_over(&cluster, name, held, task).await;
}

/// After one of the client's listeners reconnected, the waiter marks the name again with its next
/// attempt: a release while the listener was away may have taken the mark there, and its notice
/// was lost with the connection.
#[tokio::test]
async fn marks_are_set_again_after_a_listener_reconnected() {
    let cluster = Cluster::start(3);
    let name = "wake:reconnected";
    let (waiting, held) = held_by_another(&cluster, name, Duration::from_secs(30)).await;
    let delay = Duration::from_secs(3);
    let waiter = waiting.new_mutex(name).with_retry_delay(delay);
    let task = tokio::spawn(async move { waiter.lock().await });
    // The holder's SET, the waiter's first attempt and its marked one.
    tried(&cluster, 3).await;
    subscribed(&cluster, name, 1).await;
    // The waiter's listener on node 0 goes (the holder's client listens to nothing), and while it
    // is away a release there takes the mark, unheard.
    let node = cluster.node(0);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut node.connection())
        .expect("CLIENT KILL");
    released_elsewhere(node, name, "unheard");
    subscribed(&cluster, name, 1).await;
    tried(&cluster, 4).await;
    for node in cluster.nodes() {
        assert!(node.exists(&waiters_mark(name)), "every node marked again");
    }
    handed_over(
        held,
        task,
        delay / 2,
        "woken by the release, not by the retry delay of 3 s",
    )
    .await;
}

/// The notices of `name` on `node`, as a listener hears them: messages wait in the socket, and
/// each is read within 5 s.
struct Overheard(redis::Connection);

impl Overheard {
    fn new(node: &redmutex_testenv::Node, name: &str) -> Overheard {
        let mut connection = node.connection();
        connection
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        // Not `as_pubsub`, whose guard unsubscribes when dropped.
        redis::cmd("SUBSCRIBE")
            .arg(channel(name))
            .exec(&mut connection)
            .expect("SUBSCRIBE");
        Overheard(connection)
    }

    /// The next notice's message.
    fn next(&mut self) -> String {
        let message = self.0.recv_response().expect("a notice");
        let redis::Value::Push { data, .. } = message else {
            let parts: Vec<String> = redis::from_redis_value(message).expect("a message");
            return parts.last().cloned().expect("a payload");
        };
        redis::from_redis_value(data.last().cloned().expect("a payload")).expect("text")
    }
}

/// Whether every node of `cluster` has `name`'s waiters' mark.
fn marked(cluster: &Cluster, name: &str) -> Vec<bool> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.exists(&waiters_mark(name)))
        .collect()
}

/// A holder that had to wait for the lock keeps the waiters' mark in its release (others likely
/// still wait) and says so by a `+` before the value in its notice; a holder that got the lock
/// without waiting takes the mark, and its notice is the value alone.
#[tokio::test]
async fn a_holder_that_waited_keeps_the_mark_in_its_release() {
    let cluster = Cluster::start(3);
    let name = "wake:kept-mark";
    let mut overheard = Overheard::new(cluster.node(0), name);
    let (waiting, held) = held_by_another(&cluster, name, Duration::from_secs(30)).await;
    let waiter = waiting
        .new_mutex(name)
        .with_retry_delay(Duration::from_secs(10));
    let task = tokio::spawn(async move { waiter.lock().await });
    // The holder's SET, the waiter's first attempt and its marked one.
    tried(&cluster, 3).await;
    let first = held.value().to_owned();
    held.unlock().await.expect("unlock");
    assert_eq!(overheard.next(), first, "it took the mark");
    let waited = woken(task, Duration::from_secs(5), "woken by the release").await;
    // The waiter's winning attempt marked again: the release it heard had taken its marks.
    assert_eq!(marked(&cluster, name), [true; 3]);
    // Shortened, so that only the release can give the marks their 10 s again.
    for node in cluster.nodes() {
        node.set_px(&waiters_mark(name), "1", Duration::from_secs(2));
    }
    let second = waited.value().to_owned();
    waited.unlock().await.expect("unlock");
    assert_eq!(overheard.next(), format!("+{second}"));
    assert_eq!(
        marked(&cluster, name),
        [true; 3],
        "the release kept the marks"
    );
    let ttl = cluster.node(1).pttl(&waiters_mark(name));
    assert!(
        ttl > 9_000,
        "kept for as long as a waiter's mark lives: {ttl} ms left"
    );
    // Nobody waits now: the next holder does not wait, and its release takes the mark.
    let third = waiting.new_mutex(name).lock().await.expect("free lock");
    let value = third.value().to_owned();
    third.unlock().await.expect("unlock");
    assert_eq!(overheard.next(), value);
    assert_eq!(marked(&cluster, name), [false; 3], "the chain ends");
}

/// The hand-offs of these tests: retry delays the marks outlive, so that no attempt marks to
/// cover its wait (see `a_long_wait_marks_the_name_again_before_the_marks_expire`); the hand-offs
/// must be much quicker.
const KEPT_DELAY: Duration = Duration::from_secs(5);

/// `name` taken through `clients[0]` after waiting for it (a key that expires held it: no
/// release, no notice), so that its release keeps the marks. First every client's listeners
/// connect to every node: a listener that connects after its client's marks were placed (a waiter
/// needs a quorum of them) makes the next attempt mark again, rightly, as notices may have gone
/// unheard before it listened.
async fn held_after_waiting(cluster: &Cluster, name: &str, clients: &[Redlock]) -> Lock {
    let expiring = |name: &str, ttl| {
        for node in cluster.nodes() {
            node.set_px(name, "expires", ttl);
        }
    };
    for redlock in clients {
        expiring("wake:warm-up", Duration::from_millis(100));
        let warm_up = redlock
            .new_mutex("wake:warm-up")
            .with_retry_delay(Duration::from_millis(50));
        let lock = warm_up.lock().await.expect("the key expired");
        lock.unlock().await.expect("unlock");
    }
    let count = i64::try_from(clients.len()).expect("a few clients");
    subscribed(cluster, "wake:warm-up", count).await;
    expiring(name, Duration::from_millis(300));
    let polling = clients[0]
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_retry_delay(Duration::from_millis(50));
    polling.lock().await.expect("the key expired")
}

/// Waiters woken by releases that kept the marks make their next attempts without marks: the
/// nodes still have them. Two clients' waiters queue behind a holder that waited, marking the
/// name, and then get the lock one after the other without sending one mark more.
#[tokio::test]
async fn waiters_woken_by_releases_that_kept_the_marks_do_not_mark_again() {
    let cluster = Cluster::start(3);
    let name = "wake:no-re-mark";
    let clients = [
        client(&cluster).await,
        client(&cluster).await,
        client(&cluster).await,
    ];
    let held = held_after_waiting(&cluster, name, &clients).await;
    let marked_before_waiters = marks_sent(&cluster);
    let (locks, mut holders) = mpsc::unbounded_channel();
    for (id, redlock) in clients[1..].iter().enumerate() {
        let mutex = redlock.new_mutex(name).with_retry_delay(KEPT_DELAY);
        waiter(&mutex, id, &locks);
    }
    // Both waiters' marked attempts, after their subscriptions.
    let before: Vec<u64> = marked_before_waiters
        .iter()
        .map(|marks| marks + 2)
        .collect();
    eventually("both waiters marked the name", || {
        marks_sent(&cluster) == before
    })
    .await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let (_, winner) = next_holder(&mut holders).await;
    winner.unlock().await.expect("unlock");
    let (_, last) = next_holder(&mut holders).await;
    assert!(
        released.elapsed() < KEPT_DELAY / 2,
        "both woken by the releases, not by their retry delay"
    );
    assert_eq!(
        marks_sent(&cluster),
        before,
        "marks sent per node by waiters woken by releases that kept them"
    );
    last.unlock().await.expect("unlock");
}

/// The waiters of one client share its marks: a second `lock()` of the name in the client, which
/// queues behind the first, makes its attempt unmarked, as the client's marks are in place.
#[tokio::test]
async fn the_waiters_of_one_client_share_its_marks() {
    let cluster = Cluster::start(3);
    let name = "wake:shared-marks";
    let clients = [client(&cluster).await, client(&cluster).await];
    let held = held_after_waiting(&cluster, name, &clients).await;
    let marked_before_waiters = marks_sent(&cluster);
    let (locks, mut holders) = mpsc::unbounded_channel();
    let mutex = clients[1].new_mutex(name).with_retry_delay(KEPT_DELAY);
    waiter(&mutex, 0, &locks);
    let before: Vec<u64> = marked_before_waiters
        .iter()
        .map(|marks| marks + 1)
        .collect();
    eventually("the first waiter marked the name", || {
        marks_sent(&cluster) == before
    })
    .await;
    let sets_before = sets(&cluster);
    waiter(&mutex, 1, &locks);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        sets(&cluster),
        sets_before,
        "the second waiter queued behind"
    );
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let (first, lock) = next_holder(&mut holders).await;
    assert_eq!(first, 0, "served in the order they came");
    lock.unlock().await.expect("unlock");
    let (_, last) = next_holder(&mut holders).await;
    assert!(
        released.elapsed() < KEPT_DELAY / 2,
        "both woken by the releases, not by their retry delay"
    );
    assert_eq!(
        marks_sent(&cluster),
        before,
        "marks sent per node by the second waiter"
    );
    last.unlock().await.expect("unlock");
}
