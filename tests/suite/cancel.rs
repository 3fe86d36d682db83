//! Dropping a `lock()` future at any point must not keep others out past the expiry.

use std::time::{Duration, Instant};

use testenv::Cluster;

use crate::support::{client, eventually, present, quick, within};

/// Cancels `lock()` after 0, 50, 100, ... microseconds, so the drop lands before the SETs are sent,
/// while they are in flight, during the release of a failed attempt and during the retry delay.
/// Each time a second locker must get in well within the expiry.
#[tokio::test]
async fn a_cancelled_lock_lets_the_next_locker_in() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    // Half of the rounds contend with a holder, so cancellation also hits retries and releases.
    for round in 0..40u64 {
        let name = format!("cancel:{round}");
        let holder = if round % 2 == 1 {
            Some(quick(&other, &name).lock().await.expect("free lock"))
        } else {
            None
        };
        // A 30 s expiry: the next locker can only get in quickly if the cancelled call released.
        let mutex = quick(&redlock, &name)
            .with_expiry(Duration::from_secs(30))
            .with_tries(100);
        let cut = Duration::from_micros(50 * (round / 2));
        let _ = tokio::time::timeout(cut, mutex.lock()).await;
        if let Some(holder) = holder {
            holder.unlock().await.expect("the holder still holds it");
        }
        next_locker_gets_in_at_once(&other, &name).await;
    }
}

/// Without any contention, a cancelled acquisition is released in the background at once, long
/// before its keys would expire.
#[tokio::test]
async fn a_cancelled_lock_is_released_in_the_background() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("cancel:background")
        .with_expiry(Duration::from_secs(60));
    let mut cancelled_in_flight = 0;
    for micros in (0..2000).step_by(20) {
        let result = tokio::time::timeout(Duration::from_micros(micros), mutex.lock()).await;
        match result {
            Ok(lock) => {
                lock.expect("free lock").unlock().await.expect("unlock");
            }
            Err(_) => {
                if !present(&cluster, "cancel:background").is_empty() {
                    cancelled_in_flight += 1;
                }
                eventually("the cancelled acquisition is released", || {
                    present(&cluster, "cancel:background").is_empty()
                })
                .await;
            }
        }
    }
    // Not required for the test to be meaningful on every machine, but report it.
    println!("{cancelled_in_flight} cancellations left keys that the guard then released");
}

/// 200 `lock()` calls, on a contended name, cancelled at random points: the next locker always gets
/// in within the expiry, and no key outlives its expiry.
#[tokio::test]
async fn random_cancellations_never_block_the_next_locker() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    for round in 0..200u64 {
        let name = format!("cancel:random:{round}");
        let holder = if rand::random_bool(0.5) {
            Some(quick(&other, &name).lock().await.expect("free lock"))
        } else {
            None
        };
        let mutex = quick(&redlock, &name)
            .with_expiry(Duration::from_secs(30))
            .with_tries(100)
            .with_fail_fast(round % 3 == 0);
        let cut = Duration::from_micros(rand::random_range(0..3000));
        let _ = tokio::time::timeout(cut, mutex.lock()).await;
        if let Some(holder) = holder {
            holder.unlock().await.expect("the holder still holds it");
        }
        // No key of the cancelled call may carry more than the expiry.
        // The cancelled call's keys are released (the holder's are gone too), long before they
        // would expire.
        within(
            Duration::from_secs(1),
            "the cancelled call is released",
            || present(&cluster, &name).is_empty(),
        )
        .await;
        next_locker_gets_in_at_once(&other, &name).await;
    }
}

/// Another client locks `name` well within the expiry (1 s against 30 s), then unlocks.
async fn next_locker_gets_in_at_once(other: &redmutex::Redlock, name: &str) {
    let start = Instant::now();
    let next = quick(other, name)
        .with_tries(400)
        .lock()
        .await
        .expect("the next locker gets in");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{name}: waited {:?}",
        start.elapsed()
    );
    next.unlock().await.expect("unlock");
}
