//! The maximum wait (`with_max_wait`) on every primitive, on real nodes: `lock()` keeps trying
//! until its deadline whatever its tries, gives up within the deadline and one attempt, and takes
//! a release before the deadline at once.

use std::time::{Duration, Instant};

use redmutex::{Error, Lock};
use redmutex_testenv::Cluster;

use crate::support::client;

/// The maximum wait of the waiters here.
const MAX_WAIT: Duration = Duration::from_millis(800);

/// What giving up may take past the deadline: one attempt (a round trip to local nodes, well
/// under a millisecond), with a wide margin for a loaded machine; far below the waits that the
/// tries alone would give (a few ms, or a minute).
const ONE_ATTEMPT: Duration = Duration::from_millis(500);

/// Asserts that `result` gave up at the maximum wait (which began at `started`), with the last
/// attempt's error telling who held the name.
fn gave_up(result: Result<Lock, Error>, started: Instant, what: &str) {
    let elapsed = started.elapsed();
    match result {
        Err(Error::WaitedOut { waited, last }) => {
            assert!(waited >= MAX_WAIT, "{what}: waited {waited:?}");
            assert!(
                matches!(*last, Error::Taken { .. }),
                "{what}: the last attempt found the name held: {last}"
            );
        }
        other => panic!("{what}: expected the maximum wait to run out, got {other:?}"),
    }
    assert!(
        elapsed >= MAX_WAIT && elapsed < MAX_WAIT + ONE_ATTEMPT,
        "{what}: gave up after {elapsed:?}, for a maximum wait of {MAX_WAIT:?}"
    );
}

/// Neither the default tries (32 attempts 1 ms apart are over in a few milliseconds) nor a
/// million tries 50 ms apart decide when `lock()` gives up: the maximum wait does.
#[tokio::test]
async fn gives_up_at_the_deadline_whatever_its_tries() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "max-wait:tries";
    let _held = redlock.new_mutex(name).lock().await.expect("free lock");
    let quick = redlock
        .new_mutex(name)
        .with_retry_delay(Duration::from_millis(1))
        .with_max_wait(MAX_WAIT);
    let sets_before = cluster.node(0).calls("set");
    let started = Instant::now();
    gave_up(quick.lock().await, started, "default tries, 1 ms apart");
    let attempts = cluster.node(0).calls("set") - sets_before;
    assert!(
        attempts > 32,
        "kept trying past the default tries: {attempts} attempts"
    );

    let patient = redlock
        .new_mutex(name)
        .with_tries(1_000_000)
        .with_retry_delay(Duration::from_millis(50))
        .with_max_wait(MAX_WAIT);
    let started = Instant::now();
    gave_up(
        patient.lock().await,
        started,
        "a million tries, 50 ms apart",
    );

    // Tries set below what the time allows end the wait first, with the last attempt's error.
    let few = patient
        .clone()
        .with_tries(2)
        .with_max_wait(Duration::from_secs(60));
    let started = Instant::now();
    assert!(matches!(few.lock().await, Err(Error::Taken { .. })));
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A release before the deadline is taken at once: the waiter's retry delay (10 s) is longer
/// than its maximum wait, so only the release notice can hand it the lock in time.
#[tokio::test]
async fn takes_a_release_before_the_deadline_at_once() {
    let cluster = Cluster::start(3);
    let (holding, waiting) = (client(&cluster).await, client(&cluster).await);
    let name = "max-wait:released";
    let held = holding.new_mutex(name).lock().await.expect("free lock");
    let waiter = waiting
        .new_mutex(name)
        .with_retry_delay(Duration::from_secs(10))
        .with_max_wait(Duration::from_secs(5));
    let task = tokio::spawn(async move { waiter.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let next = task
        .await
        .expect("task")
        .expect("acquired before the maximum wait ran out");
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "acquired {:?} after the release",
        released.elapsed()
    );
    next.unlock().await.expect("unlock");
}

/// Every primitive takes a maximum wait: both sides of a read-write lock, a semaphore, a
/// multi-name lock, a fair mutex and an election's campaign each give up at it.
#[tokio::test]
async fn every_primitive_gives_up_at_its_maximum_wait() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;

    let rwlock = redlock.new_rwlock("max-wait:rw").with_max_wait(MAX_WAIT);
    let reader = rwlock.read().await.expect("free");
    let started = Instant::now();
    gave_up(
        rwlock.write().await,
        started,
        "a writer while a reader holds",
    );
    reader.unlock().await.expect("unlock");
    let writer = rwlock.write().await.expect("free");
    let started = Instant::now();
    gave_up(
        rwlock.read().await,
        started,
        "a reader while a writer holds",
    );
    writer.unlock().await.expect("unlock");

    let semaphore = redlock
        .new_semaphore("max-wait:semaphore", 1)
        .with_max_wait(MAX_WAIT);
    let permit = semaphore.acquire().await.expect("free");
    let started = Instant::now();
    gave_up(semaphore.acquire().await, started, "a semaphore");
    permit.unlock().await.expect("unlock");

    let _one = redlock.new_mutex("max-wait:b").lock().await.expect("free");
    let multi = redlock
        .new_multi_mutex(["max-wait:a", "max-wait:b"])
        .with_max_wait(MAX_WAIT);
    let started = Instant::now();
    gave_up(multi.lock().await, started, "a multi-name lock");

    let fair = redlock
        .new_mutex("max-wait:fair")
        .with_fair(true)
        .with_max_wait(MAX_WAIT);
    let first = fair.lock().await.expect("free");
    let started = Instant::now();
    gave_up(fair.lock().await, started, "a fair mutex");
    first.unlock().await.expect("unlock");

    let election = redlock
        .new_election("max-wait:election")
        .with_max_wait(MAX_WAIT);
    let leader = election.campaign("a").await.expect("nobody leads");
    let started = Instant::now();
    match election.campaign("b").await {
        Err(Error::WaitedOut { waited, last }) => {
            assert!(waited >= MAX_WAIT, "waited {waited:?}");
            assert!(matches!(*last, Error::Taken { .. }), "{last}");
        }
        other => panic!("expected the campaign to give up, got {other:?}"),
    }
    assert!(started.elapsed() < MAX_WAIT + ONE_ATTEMPT);
    leader.resign().await.expect("resign");
}
