//! The blocking API (the `blocking` feature) through the contract tests of the async one:
//! exclusion between threads, release on drop without a runtime of the caller's, extend and
//! unlock after expiry, a majority of nodes stopped, a keep-alive that renews while the caller's
//! thread is busy, a loss told to the work of `run`, and calls made inside a tokio runtime. Every
//! test but the last runs on plain threads: no runtime of the test's own.
#![cfg(feature = "blocking")]

// Its own binary, built only with the feature (see tests/suite/main.rs).
#[path = "suite/support/mod.rs"]
#[allow(dead_code)] // it uses a few of the suite's helpers
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redmutex::blocking::{Lock, Mutex, Redlock};
use redmutex::{Error, KeepAliveEnd, LeadershipEnd};
use redmutex_testenv::Cluster;
use support::present;

fn client(cluster: &Cluster) -> Redlock {
    Redlock::connect(cluster.urls()).expect("valid URLs connect")
}

/// A mutex that gives up quickly and retries often, as the suite's `quick`.
fn quick(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(2))
        .with_retry_delay(Duration::from_millis(5))
}

/// Polls `condition` for up to `limit`, on this thread.
fn within(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Redlock>();
    shared::<Mutex>();
    shared::<Lock>();
    shared::<redmutex::blocking::RwLock>();
    shared::<redmutex::blocking::Semaphore>();
    shared::<redmutex::blocking::Election>();
    shared::<redmutex::blocking::Leadership>();
    shared::<redmutex::blocking::KeepAlive>();
}

/// Eight threads, one client, one name: never two inside at once, and every round gets in.
#[test]
fn eight_threads_exclude_each_other() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let inside = Arc::new(AtomicUsize::new(0));
    let (overlaps, entries) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    const ROUNDS: usize = 10;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let mutex = quick(&redlock, "blocking:exclusion").with_tries(u32::MAX);
            let (inside, overlaps, entries) = (inside.clone(), overlaps.clone(), entries.clone());
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let lock = mutex.lock().expect("acquired in time");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    // Counted rather than asserted here, so that an overlap is what fails.
                    if lock.unlock().is_ok() {
                        entries.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no panic");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert_eq!(
        entries.load(Ordering::SeqCst),
        8 * ROUNDS,
        "a release failed"
    );
}

/// A lock dropped on a plain thread is released on every node at once, well before its expiry.
#[test]
fn drop_releases_without_a_runtime_of_the_callers() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let mutex = redlock.new_mutex("blocking:drop"); // an 8 s expiry
    let lock = mutex.lock().expect("free lock");
    let clone = lock.clone();
    drop(lock);
    assert_eq!(
        present(&cluster, "blocking:drop"),
        [0, 1, 2],
        "a clone still holds"
    );
    drop(clone);
    within(Duration::from_secs(2), "the drop released", || {
        present(&cluster, "blocking:drop").is_empty()
    });
    mutex
        .try_lock()
        .expect("free again")
        .unlock()
        .expect("released");
}

#[test]
fn extend_and_unlock_after_expiry_fail_and_recreate_nothing() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let mutex = quick(&redlock, "blocking:late").with_expiry(Duration::from_millis(300));
    let lock = mutex.lock().expect("free lock");
    within(Duration::from_secs(5), "the keys expire", || {
        present(&cluster, "blocking:late").is_empty()
    });
    let until = lock.valid_until();
    assert!(matches!(lock.extend(), Err(Error::Expired)));
    assert_eq!(lock.valid_until(), until, "a failed extend moves nothing");
    assert!(matches!(lock.unlock(), Err(Error::Expired)));
    assert!(
        present(&cluster, "blocking:late").is_empty(),
        "a key came back"
    );

    // A new owner's lock is never touched by the stale handle.
    let stale = mutex.lock().expect("free lock");
    within(Duration::from_secs(5), "the keys expire", || {
        present(&cluster, "blocking:late").is_empty()
    });
    let owner = mutex
        .with_expiry(Duration::from_secs(5))
        .lock()
        .expect("free lock");
    assert!(matches!(stale.extend(), Err(Error::Taken { .. })));
    assert!(matches!(stale.unlock(), Err(Error::Taken { .. })));
    assert_eq!(present(&cluster, "blocking:late"), [0, 1, 2]);
    owner.unlock().expect("the owner's lock is intact");
}

/// With three of five nodes paused nothing is acquired or extended (each node's timeout is
/// reported); once they resume, both work again.
#[test]
fn a_majority_of_nodes_stopped() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster);
    let mutex = quick(&redlock, "blocking:majority").with_tries(2);
    let held = mutex.lock().expect("all nodes up");
    for node in 0..3 {
        cluster.node(node).pause();
    }
    match held.extend() {
        Err(Error::NoQuorum {
            ok: 2, failures, ..
        }) => assert_eq!(failures.len(), 3),
        other => panic!("expected no quorum, got {other:?}"),
    }
    let other = quick(&redlock, "blocking:majority:2").with_tries(2);
    assert!(matches!(other.lock(), Err(Error::NoQuorum { ok: 2, .. })));
    for node in 0..3 {
        cluster.node(node).resume();
    }
    held.extend().expect("the nodes answer again");
    held.unlock().expect("released");
    other.lock().expect("acquired").unlock().expect("released");
}

/// The keep-alive runs on redmutex's runtime while the work holds the caller's thread, without
/// a single await: the lock outlives its expiry three times over, and is released at the end.
#[test]
fn run_renews_while_the_work_holds_the_thread() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let mutex = quick(&redlock, "blocking:run").with_expiry(Duration::from_millis(500));
    let lock = mutex.lock().expect("free lock");
    let first_until = lock.valid_until();
    let (moved, output) = {
        let watch = lock.clone();
        let output = lock
            .run(|lease| {
                thread::sleep(Duration::from_millis(1500)); // no check, no yield
                (lease.is_held(), lease.valid_until())
            })
            .expect("kept throughout");
        (watch, output)
    };
    assert!(output.0, "the lease was held when the work returned");
    assert!(
        output.1 > first_until + Duration::from_millis(900),
        "renewed meanwhile"
    );
    assert!(
        matches!(moved.unlock(), Err(Error::Unlocked)),
        "run unlocked"
    );
    assert!(present(&cluster, "blocking:run").is_empty());
}

/// A lock broken by an operator while the work runs: the lease says so, the work stops by
/// itself, and run reports the loss rather than the work's output.
#[test]
fn run_tells_the_work_of_a_loss() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let mutex = quick(&redlock, "blocking:lost").with_expiry(Duration::from_millis(600));
    let lock = mutex.lock().expect("free lock");
    let outcome = lock.run(|lease| {
        for node in 0..3 {
            cluster.node(node).del("blocking:lost");
        }
        let started = Instant::now();
        while lease.is_held() {
            assert!(started.elapsed() < Duration::from_secs(2), "never told");
            thread::sleep(Duration::from_millis(5));
        }
        assert!(
            Instant::now() < lease.valid_until(),
            "told before the validity ended"
        );
        lease.lost()
    });
    match outcome {
        Err(Error::Lost { cause }) => assert!(matches!(*cause, Error::Expired), "{cause:?}"),
        other => panic!("expected a loss, got {other:?}"),
    }
}

#[test]
fn keep_alive_and_leadership_end_are_waited_for_on_the_thread() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let lock = quick(&redlock, "blocking:keep")
        .with_expiry(Duration::from_millis(300))
        .lock();
    let lock = lock.expect("free lock");
    let keep = lock.keep_alive(Duration::from_millis(100));
    thread::sleep(Duration::from_millis(700));
    assert!(
        keep.end().is_none() && lock.valid_until() > Instant::now(),
        "renewed"
    );
    lock.unlock().expect("released");
    assert!(matches!(keep.ended(), Ok(KeepAliveEnd::Unlocked)));

    let election = redlock
        .new_election("blocking:lead")
        .with_expiry(Duration::from_millis(600));
    let leadership = election.campaign("a").expect("elected");
    let watcher = thread::spawn(move || leadership.lost());
    for node in 0..3 {
        cluster.node(node).del("blocking:lead");
    }
    let end = watcher.join().expect("no panic");
    assert!(matches!(end, Ok(LeadershipEnd::Lost(_))), "{end:?}");
}

/// Inside a tokio runtime every blocking call is refused at once, with nothing sent, and
/// nothing panics: not the calls, not the drop of a lock there (which releases in the
/// background); the building of handles works.
#[test]
fn calls_inside_a_tokio_runtime_are_refused() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let mutex = redlock.new_mutex("blocking:inside");
    let held = quick(&redlock, "blocking:inside:held")
        .lock()
        .expect("free lock");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let urls = cluster.urls();
    let (held, mutex) = runtime.block_on(async move {
        assert!(matches!(Redlock::connect(&urls), Err(Error::InsideRuntime)));
        assert!(matches!(mutex.lock(), Err(Error::InsideRuntime)));
        assert!(matches!(mutex.try_lock(), Err(Error::InsideRuntime)));
        assert!(matches!(held.extend(), Err(Error::InsideRuntime)));
        assert!(matches!(held.unlock(), Err(Error::InsideRuntime)));
        let again = mutex.clone().with_tries(1); // building is no call
        // spawn_blocking's threads carry the runtime too.
        let refused = tokio::task::spawn_blocking(move || again.lock().map(drop)).await;
        assert!(matches!(refused, Ok(Err(Error::InsideRuntime))));
        drop(held.clone());
        (held, mutex)
    });
    assert!(
        present(&cluster, "blocking:inside").is_empty(),
        "nothing was sent"
    );
    assert_eq!(
        present(&cluster, "blocking:inside:held"),
        [0, 1, 2],
        "still held"
    );
    runtime.block_on(async move { drop(held) });
    within(Duration::from_secs(1), "the drop released", || {
        present(&cluster, "blocking:inside:held").is_empty()
    });
    mutex
        .lock()
        .expect("outside the runtime")
        .unlock()
        .expect("released");
}
