//! Traces: spans and events for acquire, extend and release, with the name, attempt numbers and
//! per-node outcomes, never the lock value or a password.

use std::time::Duration;

use redmutex::Redlock;
use redmutex_testenv::Cluster;
use tracing::Level;

use crate::support;
use crate::support::capture::Capture;

#[tokio::test]
async fn operations_are_traced_without_secrets() {
    let cluster = Cluster::start(3);
    let password = "s3cret-for-tracing";
    for node in cluster.nodes() {
        node.config_set("requirepass", password);
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("redis://", &format!("redis://:{password}@")))
        .collect();

    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(Level::TRACE)
        .with_writer({
            let capture = capture.clone();
            move || capture.clone()
        })
        .finish();
    let _guard = support::capture::set_default(subscriber);

    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    let mutex = redlock
        .new_mutex("traced:job")
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(2);
    let lock = mutex.lock().await.expect("free lock");
    let failed = mutex.lock().await.expect_err("held");
    lock.extend().await.expect("extend");
    lock.unlock().await.expect("unlock");

    // Wake-up on release: the listeners log in with the same password, and never show it.
    let waking = mutex
        .clone()
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(3);
    let held = waking.lock().await.expect("free lock");
    let waiter = tokio::spawn({
        let waking = waking.clone();
        async move { waking.lock().await }
    });
    // Connected, and the waiter's two attempts (before and after subscribing) failed: it waits.
    let listening = || {
        let text = capture.text();
        text.matches("release listener connected").count() == 3
            && text.matches("attempt failed").count() == 4
    };
    let connected = async {
        while !listening() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), connected)
        .await
        .expect("the listeners log in with the URL's password, and the waiter waits");
    held.unlock().await.expect("unlock");
    let woken = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, long before the retry delay")
        .expect("task")
        .expect("the waiter gets the lock");
    woken.unlock().await.expect("unlock");

    let text = capture.text();
    for expected in [
        "redmutex.lock",
        "name=traced:job",
        "attempt=1",
        "attempt=2",
        "acquired",
        "attempt failed",
        "node replied",
        "latency_us",
        "extended",
        "unlocked",
        "release listener connected",
        "woken by a release",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(text.contains(&failed.to_string()), "the error is traced");
    assert!(
        !text.contains(lock.value()),
        "the lock value leaked:\n{text}"
    );
    assert!(!text.contains(password), "the password leaked:\n{text}");
}

/// tracing caches, per callsite, whether any subscriber wants it, decided where it is first
/// reached: a callsite that another test's thread reached first must still reach this thread's
/// subscriber (see `support::capture::set_default`).
#[test]
fn a_callsite_first_reached_on_another_thread_reaches_this_threads_subscriber() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(Level::TRACE)
        .with_writer({
            let capture = capture.clone();
            move || capture.clone()
        })
        .finish();
    let _guard = support::capture::set_default(subscriber);

    std::thread::spawn(|| reach("on-another-thread"))
        .join()
        .expect("no panic");
    reach("on-the-test-thread");

    let text = capture.text();
    assert!(text.contains("on-the-test-thread"), "lost:\n{text}");
    assert!(!text.contains("on-another-thread"), "{text}");
}

fn reach(place: &str) {
    tracing::info!(place, "reached the callsite");
}
