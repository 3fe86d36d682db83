//! Helpers shared by the integration tests.

pub mod capture;
pub mod history;

use std::time::Duration;

use redmutex::{Mutex, Redlock, Semaphore};
use redmutex_testenv::Cluster;

/// The key `suffix` (`":fence"`, `":readers"`, ...) beside `name` on the nodes, in the name's
/// Redis Cluster slot: `{order:42}:fence` for a name without a hash tag, `{user:1}:cart::fence`
/// for one with a tag, which it keeps (see the guide's *Keys and notice channels*). Restated here
/// rather than taken from the crate, so that a change of layout fails the tests.
pub fn beside(name: &str, suffix: &str) -> String {
    let tagged = name
        .find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|close| close > 0);
    if tagged {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}{suffix}")
    }
}

/// A fencing counter ahead of every node's clock: 4 * 10^15 microseconds since 1970 is in 2096.
/// Tokens are at least the clock of the nodes that hand them out, in microseconds; a test that
/// sets a counter by hand to see the counter decide the token sets one above this.
pub const AHEAD: u64 = 4_000_000_000_000_000;

/// The wall clock in microseconds since 1970, as a node's `TIME` reads it on this machine.
pub fn micros_now() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_micros()).expect("before 2554")
}

/// The key of the mark a waiter leaves for `name` on a standalone server: the name followed by
/// `:waiters` (a release notifies only where it finds one; see the guide's *Waiting*). Restated
/// here, as [`beside`] is.
pub fn waiters_mark(name: &str) -> String {
    format!("{name}:waiters")
}

/// Marks `name` as waited for on every running node of `cluster`, as a waiter's attempt does,
/// for a minute: the next release of the name there sends a notice.
pub fn mark_waited(cluster: &Cluster, name: &str) {
    for node in cluster.nodes().iter().filter(|node| node.is_running()) {
        node.set_px(&waiters_mark(name), "1", Duration::from_secs(60));
    }
}

/// A client over every node of `cluster`.
pub async fn client(cluster: &Cluster) -> Redlock {
    Redlock::connect(cluster.urls())
        .await
        .expect("valid URLs connect")
}

/// A mutex with a short expiry (2 s) and quick retries, for tests that must finish in seconds. The
/// node timeout is 500 ms, generous on purpose: a loaded test machine must not turn a healthy node's
/// slow reply into a failure. Tests about timeouts set their own.
pub fn quick(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
}

/// A semaphore of `permits` permits with the settings of [`quick`].
pub fn quick_semaphore(redlock: &Redlock, name: &str, permits: u32) -> Semaphore {
    redlock
        .new_semaphore(name, permits)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
}

/// A mutex for heavy contention: a 2 s expiry, a generous 500 ms node timeout, jittered retries of
/// 0.5 to 5 ms, and tries enough that only a real failure ends `lock()`.
pub fn contended(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_tries(100_000)
        .with_retry_delay_fn(|_| Duration::from_micros(500 + rand::random_range(0..4500)))
}

/// A multi-name mutex with the settings of [`contended`].
pub fn contended_multi(redlock: &Redlock, names: &[String]) -> Mutex {
    redlock
        .new_multi_mutex(names.iter().cloned())
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_tries(100_000)
        .with_retry_delay_fn(|_| Duration::from_micros(500 + rand::random_range(0..4500)))
}

/// One lock and unlock of `mutex`, so that connections are open and scripts loaded before a fault.
pub async fn warm_up(mutex: &Mutex) {
    let lock = mutex.lock().await.expect("warm-up lock");
    lock.unlock().await.expect("warm-up unlock");
}

/// Waits up to `limit` until no running node has `name`: for releases that must beat the expiry.
pub async fn cleared_within(limit: Duration, cluster: &Cluster, name: &str) {
    let what = format!("no node holds {name}");
    within(limit, &what, || present(cluster, name).is_empty()).await;
}

/// The running nodes (indices) where `name` holds `value`.
pub fn holders(cluster: &Cluster, name: &str, value: &str) -> Vec<usize> {
    (0..cluster.len())
        .filter(|&i| cluster.node(i).is_running())
        .filter(|&i| cluster.node(i).get(name).as_deref() == Some(value))
        .collect()
}

/// The running nodes (indices) where `name` exists at all.
pub fn present(cluster: &Cluster, name: &str) -> Vec<usize> {
    (0..cluster.len())
        .filter(|&i| cluster.node(i).is_running())
        .filter(|&i| cluster.node(i).exists(name))
        .collect()
}

/// Waits (up to 5 s) until `condition` holds; background releases take a moment.
pub async fn eventually(what: &str, condition: impl FnMut() -> bool) {
    within(Duration::from_secs(5), what, condition).await;
}

/// Waits up to `limit` until `condition` holds. Tests of releases use a limit well below the lock's
/// expiry, so that keys expiring on their own cannot pass for a release.
pub async fn within(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// 16 tasks, on `clients` in turn, each make 25 non-atomic increments (GET, yield, SET) of
/// `count` on `counter` under `name`'s lock; returns the count, 400 unless an update was lost.
pub async fn increments_under_lock(clients: &[Redlock], name: &str, counter: &Cluster) -> String {
    let mut tasks = Vec::new();
    for task in 0..16 {
        let mutex = contended(&clients[task % clients.len()], name);
        let url = counter.node(0).url();
        tasks.push(tokio::spawn(async move {
            let mut store = redis::Client::open(url)
                .expect("valid URL")
                .get_multiplexed_async_connection()
                .await
                .expect("the counter's node is up");
            for _ in 0..25 {
                let lock = mutex.lock().await.expect("lock under contention");
                let value: Option<u64> = redis::AsyncCommands::get(&mut store, "count")
                    .await
                    .expect("GET");
                tokio::task::yield_now().await; // widen the race window
                let _: () = redis::AsyncCommands::set(&mut store, "count", value.unwrap_or(0) + 1)
                    .await
                    .expect("SET");
                lock.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task finished");
    }
    counter.node(0).get("count").unwrap_or_default()
}
