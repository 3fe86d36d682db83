//! Acquiring: quorum, validity, retries, and what a failed attempt leaves behind.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock};
use redmutex_testenv::{Cluster, Mode};

use crate::support;
use crate::support::{client, holders, present, quick};

#[tokio::test]
async fn lock_sets_the_value_on_every_node_with_the_expiry() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "acquire:basic");
    let before = Instant::now();
    let lock = mutex.lock().await.expect("free lock");

    assert_eq!(
        holders(&cluster, "acquire:basic", lock.value()),
        [0, 1, 2, 3, 4]
    );
    for node in cluster.nodes() {
        let pttl = node.pttl("acquire:basic");
        assert!((1..=2000).contains(&pttl), "PTTL {pttl}");
    }
    // validity <= start + expiry - drift (1 % of 2 s = 20 ms)
    assert!(lock.valid_until() <= before + Duration::from_millis(1980));
    assert!(lock.valid_until() > Instant::now());
    assert_eq!(lock.name(), "acquire:basic");
}

#[tokio::test]
async fn expiry_is_sent_in_whole_milliseconds_rounded_down() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("acquire:millis")
        .with_expiry(Duration::from_micros(1_500_900));
    let _lock = mutex.try_lock().await.expect("free lock");
    for node in cluster.nodes() {
        let pttl = node.pttl("acquire:millis");
        assert!((1400..=1500).contains(&pttl), "PTTL {pttl} for 1500.9 ms");
    }
}

#[tokio::test]
async fn a_held_name_is_taken_for_everyone_else() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let other_client = client(&cluster).await;
    let first = quick(&redlock, "acquire:twice")
        .lock()
        .await
        .expect("free lock");

    match quick(&other_client, "acquire:twice").try_lock().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2, 3, 4]),
        other => panic!("expected Taken, got {other:?}"),
    }
    // lock() retries, then returns the last attempt's error.
    assert!(matches!(
        quick(&other_client, "acquire:twice").lock().await,
        Err(Error::Taken { .. })
    ));
    assert_eq!(holders(&cluster, "acquire:twice", first.value()).len(), 5);
}

/// Every subset of pre-taken nodes, for every cluster size up to 5: success exactly when the free
/// nodes form a quorum, and a failure leaves no key of ours anywhere.
#[tokio::test]
async fn every_subset_of_taken_nodes() {
    for n in 1..=5usize {
        let cluster = Cluster::start(n);
        let redlock = client(&cluster).await;
        let quorum = n / 2 + 1;
        assert_eq!(redlock.quorum(), quorum);
        for mask in 0u32..(1 << n) {
            let name = format!("acquire:mask:{n}:{mask}");
            let taken: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            for &i in &taken {
                cluster
                    .node(i)
                    .set_px(&name, "someone-else", Duration::from_secs(10));
            }
            let free = n - taken.len();
            let result = quick(&redlock, &name).with_tries(1).lock().await;
            match result {
                Ok(lock) => {
                    assert!(
                        free >= quorum,
                        "n={n} mask={mask:b}: locked with {free} free"
                    );
                    let mine = holders(&cluster, &name, lock.value());
                    let expected: Vec<usize> = (0..n).filter(|i| !taken.contains(i)).collect();
                    assert_eq!(mine, expected, "n={n} mask={mask:b}");
                    lock.unlock().await.expect("unlock");
                }
                Err(error) => {
                    assert!(
                        free < quorum,
                        "n={n} mask={mask:b}: failed with {free} free: {error}"
                    );
                    if taken.len() >= quorum {
                        assert!(matches!(&error, Error::Taken { nodes } if *nodes == taken));
                    } else {
                        assert!(matches!(error, Error::NoQuorum { .. }), "{error:?}");
                    }
                    // Only the other owner's keys remain.
                    assert_eq!(present(&cluster, &name), taken, "n={n} mask={mask:b}");
                }
            }
            for &i in &taken {
                assert_eq!(cluster.node(i).get(&name).as_deref(), Some("someone-else"));
            }
        }
    }
}

#[tokio::test]
async fn no_validity_left_means_expired_and_released() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    // A 99.999 % drift allowance leaves 10 us of a 1 s expiry: less than any round trip, while
    // the node timeout (990 ms) is long enough for a loaded machine.
    let mutex = redlock
        .new_mutex("acquire:expired")
        .with_expiry(Duration::from_secs(1))
        .with_drift_factor(0.99999)
        .with_timeout_factor(0.99);
    assert!(matches!(mutex.try_lock().await, Err(Error::Expired)));
    assert!(present(&cluster, "acquire:expired").is_empty());
}

#[tokio::test]
async fn retries_are_bounded_and_numbered_from_one() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let _held = quick(&redlock, "acquire:retries")
        .lock()
        .await
        .expect("free lock");

    let seen = Arc::new(StdMutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let mutex = quick(&redlock, "acquire:retries")
        .with_tries(4)
        .with_retry_delay_fn(move |attempt| {
            record.lock().expect("not poisoned").push(attempt);
            Duration::from_millis(1)
        });
    assert!(matches!(mutex.lock().await, Err(Error::Taken { .. })));
    assert_eq!(*seen.lock().expect("not poisoned"), [1, 2, 3]);
}

#[tokio::test]
async fn lock_waits_for_a_release() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let held = quick(&redlock, "acquire:wait")
        .lock()
        .await
        .expect("free lock");
    let waiter = {
        let mutex = quick(&redlock, "acquire:wait").with_tries(200);
        tokio::spawn(async move { mutex.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.unlock().await.expect("unlock");
    let lock = waiter
        .await
        .expect("no panic")
        .expect("acquired after release");
    assert_eq!(holders(&cluster, "acquire:wait", lock.value()).len(), 3);
}

#[tokio::test]
async fn fail_fast_locks_and_reports_the_same_errors() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    // A 5 s node timeout: on a loaded machine a slow node must still get the key.
    let mutex = quick(&redlock, "acquire:fast")
        .with_expiry(Duration::from_secs(20))
        .with_fail_fast(true);
    let lock = mutex.lock().await.expect("free lock");
    // Calls still in flight after the quorum finish in the background: the key lands everywhere.
    support::eventually("the key is on all 5 nodes", || {
        holders(&cluster, "acquire:fast", lock.value()).len() == 5
    })
    .await;
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    lock.unlock().await.expect("unlock");
    // A fail-fast unlock returns at the quorum too; the other nodes are released just after.
    support::eventually("no node holds the key", || {
        present(&cluster, "acquire:fast").is_empty()
    })
    .await;
}

#[tokio::test]
async fn fail_fast_failure_releases_everything() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    for i in [0, 1] {
        cluster
            .node(i)
            .set_px("acquire:fast-fail", "other", Duration::from_secs(10));
    }
    cluster.node(2).pause();
    let result = quick(&redlock, "acquire:fast-fail")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005)
        .with_fail_fast(true)
        .try_lock()
        .await;
    assert!(matches!(result, Err(Error::NoQuorum { .. })), "{result:?}");
    cluster.node(2).resume();
    support::within(
        Duration::from_secs(3),
        "only the other owner's keys remain",
        || present(&cluster, "acquire:fast-fail") == [0, 1],
    )
    .await;
}

#[tokio::test]
async fn value_fn_and_shuffle_are_used() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "acquire:custom")
        .with_shuffle_nodes(true)
        .with_value_fn(|| "fixed-for-test".to_owned());
    let lock = mutex.lock().await.expect("free lock");
    assert_eq!(lock.value(), "fixed-for-test");
    assert_eq!(
        holders(&cluster, "acquire:custom", "fixed-for-test").len(),
        5
    );
}

#[tokio::test]
async fn node_errors_keep_index_and_reason() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    // A key of another type counts as taken (SET NX only checks existence); a killed node is an error.
    redis::cmd("HSET")
        .arg("acquire:typed")
        .arg("f")
        .arg("v")
        .exec(&mut cluster.node(0).connection())
        .expect("HSET");
    cluster.node(1).kill();
    let result = quick(&redlock, "acquire:typed").try_lock().await;
    let Err(Error::NoQuorum {
        ok,
        quorum,
        total,
        failures,
    }) = result
    else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert_eq!((ok, quorum, total), (1, 2, 3));
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0].node, 0);
    assert!(
        matches!(failures[0].kind, NodeErrorKind::Taken),
        "{:?}",
        failures[0]
    );
    assert_eq!(failures[1].node, 1);
    assert!(
        matches!(failures[1].kind, NodeErrorKind::Redis(_)),
        "{:?}",
        failures[1]
    );
    // Unlock through a later lock works on the surviving node: nothing of ours is left.
    assert!(!cluster.node(2).exists("acquire:typed"));
}

#[tokio::test]
async fn a_client_from_own_connections_locks_too() {
    let cluster = Cluster::start(3);
    let mut connections = Vec::new();
    for url in cluster.urls() {
        let client = redis::Client::open(url).expect("valid URL");
        // Without the driver's own timeouts, as the docs require.
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None);
        connections.push(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("node is up"),
        );
    }
    let redlock = Redlock::new(connections).expect("three connections");
    let lock = quick(&redlock, "acquire:own")
        .lock()
        .await
        .expect("free lock");
    assert_eq!(holders(&cluster, "acquire:own", lock.value()).len(), 3);
    lock.unlock().await.expect("unlock");
}

/// Validity is measured from the start of the attempt that succeeded, not from the first one.
#[tokio::test]
async fn validity_counts_from_the_successful_attempt() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let held = quick(&redlock, "acquire:late")
        .lock()
        .await
        .expect("free lock");
    let waiter = {
        let mutex = quick(&redlock, "acquire:late")
            .with_expiry(Duration::from_secs(1))
            .with_tries(1000);
        tokio::spawn(async move { mutex.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    held.unlock().await.expect("unlock");
    let lock = waiter
        .await
        .expect("no panic")
        .expect("acquired after release");
    let acquired = Instant::now();
    // Measured from the first attempt, 600 ms ago, less than 400 ms would be left.
    assert!(
        lock.valid_until() > acquired + Duration::from_millis(900),
        "{:?} left",
        lock.valid_until() - acquired
    );
}

/// Every attempt of one polling `lock()` call uses the same value: the value function runs once
/// per call. (A call woken by release notices takes a value per attempt: see
/// `wake::every_attempt_has_its_own_value`.)
#[tokio::test]
async fn retries_reuse_the_value() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let _held = quick(&redlock, "acquire:same-value")
        .lock()
        .await
        .expect("free lock");
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let mutex = quick(&redlock, "acquire:same-value")
        .with_wake_on_release(false)
        .with_tries(5)
        .with_value_fn(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            redmutex_value()
        });
    assert!(mutex.lock().await.is_err());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(mutex.try_lock().await.is_err());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

fn redmutex_value() -> String {
    format!("test-{}", rand::random::<u64>())
}

/// The environment of `lock_values_differ_between_processes` when it runs as a child: the node to
/// lock on, and the name.
const CHILD_URL: &str = "REDMUTEX_TEST_VALUES_URL";
const CHILD_NAME: &str = "REDMUTEX_TEST_VALUES_NAME";

/// Lock values are unique across processes, not only within one. Values that repeat another
/// process's (from a counter, or a generator seeded the same way in every process) let two holders
/// share a lock: when one's lock has expired and the other holds the name, the first one's unlock
/// deletes the other's key. The test binary runs this test again in two child processes at once,
/// each of which locks a few times and prints the values.
#[tokio::test]
async fn lock_values_differ_between_processes() {
    if let (Ok(url), Ok(name)) = (std::env::var(CHILD_URL), std::env::var(CHILD_NAME)) {
        let redlock = Redlock::connect([url]).await.expect("URL parses");
        let mutex = quick(&redlock, &name);
        for _ in 0..3 {
            let lock = mutex.lock().await.expect("free lock");
            println!("lock value: {}", lock.value());
            lock.unlock().await.expect("unlock");
        }
        return;
    }
    let cluster = Cluster::start(1);
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let children: Vec<_> = (0..2)
        .map(|child| {
            std::process::Command::new(&test_binary)
                .args(["--exact", "acquire::lock_values_differ_between_processes"])
                .args(["--nocapture", "--test-threads=1"])
                .env(CHILD_URL, cluster.node(0).url())
                .env(CHILD_NAME, format!("acquire:values:{child}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("the test binary runs")
        })
        .collect();
    let values: Vec<Vec<String>> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the child ends");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "child failed: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            // The harness prints the test's name on the line of the first value.
            stdout
                .lines()
                .filter_map(|line| line.split_once("lock value: "))
                .map(|(_, value)| value.to_owned())
                .collect()
        })
        .collect();
    assert_eq!(values[0].len(), 3, "{values:?}");
    assert_eq!(values[1].len(), 3, "{values:?}");
    for value in &values[0] {
        assert!(!values[1].contains(value), "both processes made {value}");
    }
}

/// Empties `node`'s script cache, as a restart does.
fn flush_scripts(node: &redmutex_testenv::Node) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut node.connection())
        .expect("SCRIPT FLUSH");
}

/// Zeroes `node`'s command counts (`INFO commandstats`).
fn reset_stats(node: &redmutex_testenv::Node) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut node.connection())
        .expect("CONFIG RESETSTAT");
}

/// Scripts go out as EVALSHA; a node that lost its script cache gets EVAL once and then EVALSHA again.
#[tokio::test]
async fn scripts_are_sent_by_digest_with_a_noscript_fallback() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "acquire:scripts");
    // Let the client's background warm-up (which loads the scripts) finish before flushing them.
    let lock = mutex.lock().await.expect("free lock");
    lock.unlock().await.expect("unlock");
    for node in cluster.nodes() {
        flush_scripts(node);
        reset_stats(node);
    }
    for _ in 0..5 {
        let lock = mutex.lock().await.expect("free lock");
        lock.extend().await.expect("extend");
        lock.unlock().await.expect("unlock");
    }
    for node in cluster.nodes() {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut node.connection())
            .expect("INFO");
        let calls = |command: &str| -> u64 {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        // The first extend and the first unlock fell back to EVAL; everything after used EVALSHA.
        assert_eq!(calls("eval"), 2, "{stats}");
        assert_eq!(calls("evalsha"), 10, "{stats}");
        assert_eq!(calls("set"), 5, "{stats}");
    }
}

/// After `mutex` (of `name`, on 3 nodes) connected and loaded its scripts: `name` held by someone
/// else on nodes 1 and 2 for `ttl`, and node 0's scripts gone, so that an attempt takes node 0
/// alone and its release there needs the script in full.
async fn free_on_node_0_only(
    cluster: &Cluster,
    mutex: &redmutex::Mutex,
    name: &str,
    ttl: Duration,
) {
    let warm = mutex.lock().await.expect("free lock");
    warm.unlock().await.expect("unlock");
    for i in [1, 2] {
        cluster.node(i).set_px(name, "someone-else", ttl);
    }
    flush_scripts(cluster.node(0));
}

/// The release after a failed attempt goes by digest, as `unlock()`'s does: a node that lost its
/// scripts answers NOSCRIPT and gets the script in full, and our key there goes at once.
#[tokio::test]
async fn a_failed_attempts_release_goes_by_digest_with_a_noscript_fallback() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "acquire:cleanup-noscript";
    let mutex = quick(&redlock, name).with_tries(1);
    free_on_node_0_only(&cluster, &mutex, name, Duration::from_secs(10)).await;
    for node in cluster.nodes() {
        reset_stats(node);
    }
    let error = mutex.lock().await.expect_err("taken on 2 of 3");
    assert!(matches!(error, Error::Taken { .. }), "{error:?}");
    assert!(
        !cluster.node(0).exists(name),
        "our key on node 0 is released"
    );
    let node = cluster.node(0);
    assert_eq!(
        (node.calls("evalsha"), node.calls("eval")),
        (1, 1),
        "the digest, then the script in full"
    );
    for node in &cluster.nodes()[1..] {
        assert_eq!((node.calls("evalsha"), node.calls("eval")), (1, 0));
    }
}

/// A failed attempt's release that times out at a paused node that lost its scripts still frees
/// our key there once the node resumes, long before the key's expiry: no NOSCRIPT reply will be
/// read, so the script follows its digest in full on the same connection (`Request::follow_up`).
#[tokio::test]
async fn a_failed_attempts_release_reaches_a_paused_node_that_lost_its_scripts() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let name = "acquire:cleanup-paused";
    let mutex = redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.02) // 600 ms per node
        .with_tries(1);
    free_on_node_0_only(&cluster, &mutex, name, Duration::from_secs(30)).await;
    // Node 1 answers late (or not within the node timeout), so that node 0 can be paused between
    // our SET there and our release, half a second at least.
    proxies.set_mode(&[1], Mode::Delay(Duration::from_millis(500)));
    let attempt = tokio::spawn(async move { mutex.lock().await });
    support::within(Duration::from_secs(2), "our SET on node 0", || {
        cluster.node(0).exists(name)
    })
    .await;
    cluster.node(0).pause();
    attempt
        .await
        .expect("task")
        .expect_err("node 0 alone is ours");
    cluster.node(0).resume();
    support::within(
        Duration::from_secs(5),
        "our key on node 0 released, well before its 30 s expiry",
        || !cluster.node(0).exists(name),
    )
    .await;
}

#[test]
fn handles_are_thread_safe_values() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<redmutex::Lock>();
    assert_traits::<redmutex::Mutex>();
    assert_traits::<Redlock>();
    assert_traits::<Error>();
}

/// Fail-fast returns once a quorum said OK, without waiting for a stalled node.
#[tokio::test]
async fn fail_fast_does_not_wait_for_a_stalled_node() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    // 1 s per node: waiting for the paused node would be obvious.
    let mutex = redlock
        .new_mutex("acquire:fast-stalled")
        .with_expiry(Duration::from_secs(20))
        .with_fail_fast(true)
        .with_tries(1);
    let warm = mutex.lock().await.expect("free lock");
    warm.unlock().await.expect("unlock");
    cluster.node(4).pause();
    let start = Instant::now();
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );

    // A failing fail-fast attempt names the node it did not wait for.
    let other = client(&cluster).await;
    let error = other
        .new_mutex("acquire:fast-stalled")
        .with_expiry(Duration::from_secs(20))
        .with_fail_fast(true)
        .try_lock()
        .await
        .expect_err("held");
    // Decided by the first three replies: the fourth node need not be waited for either.
    match error {
        Error::Taken { nodes } => assert!(nodes.len() >= 3 && !nodes.contains(&4), "{nodes:?}"),
        other => panic!("expected Taken, got {other:?}"),
    }
    cluster.node(4).resume();
    lock.unlock().await.expect("unlock");
}

/// A fail-fast unlock does not wait for a stalled node either. The SET still queued for that node
/// runs when it resumes, and the release queued behind it on the same connection runs after it, so
/// the key does not outlive the unlock.
#[tokio::test]
async fn fail_fast_unlock_does_not_wait_and_no_set_lands_after_it() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    // 1 s per node: waiting for the paused node would be obvious.
    let mutex = redlock
        .new_mutex("acquire:fast-unlock")
        .with_expiry(Duration::from_secs(20))
        .with_fail_fast(true)
        .with_tries(1);
    support::warm_up(&mutex).await;
    cluster.node(4).pause();
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    let start = Instant::now();
    lock.unlock().await.expect("released on 4 of 5");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    cluster.node(4).resume();
    // Well before the 20 s expiry: only the release can have removed node 4's key.
    support::within(Duration::from_secs(3), "no node holds the key", || {
        present(&cluster, "acquire:fast-unlock").is_empty()
    })
    .await;
    // A SET landing after the release would show up here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(present(&cluster, "acquire:fast-unlock").is_empty());
}

/// A fail-fast extend does not wait for a stalled node either: across zones, an extend that waited
/// for the farthest node would cost what a lock that waited for it does. Its call to that node is
/// stopped by the unlock that follows, and the release queued behind it still removes the key.
#[tokio::test]
async fn fail_fast_extend_does_not_wait_for_a_stalled_node() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    // A 10 s node timeout: waiting for the paused node cannot be mistaken for a slow machine.
    let mutex = redlock
        .new_mutex("acquire:fast-extend")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.5)
        .with_fail_fast(true)
        .with_tries(1);
    support::warm_up(&mutex).await;
    cluster.node(4).pause();
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    let start = Instant::now();
    lock.extend().await.expect("extended on 4 of 5");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the extend waited for the paused node: {:?}",
        start.elapsed()
    );
    lock.unlock().await.expect("released on 4 of 5");
    cluster.node(4).resume();
    // Well before the 20 s expiry: only the release can have removed node 4's key.
    support::within(Duration::from_secs(3), "no node holds the key", || {
        present(&cluster, "acquire:fast-extend").is_empty()
    })
    .await;
}

/// A retry must not race the release of the previous attempt: that release would delete the keys of
/// the next attempt if both used one value and the release came second.
#[tokio::test]
async fn a_retry_never_races_the_previous_release() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("acquire:race")
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.05) // 100 ms
        .with_fail_fast(true)
        .with_retry_delay(Duration::from_millis(60))
        .with_tries(5);
    let warm = mutex.lock().await.expect("free lock");
    warm.unlock().await.expect("unlock");
    cluster.node(4).pause();
    for i in 0..3 {
        cluster
            .node(i)
            .set_px("acquire:race", "other", Duration::from_millis(50));
    }
    let lock = mutex
        .lock()
        .await
        .expect("the foreign keys expire, the retry succeeds");
    // Node 4 is paused: look at the others only.
    let ours = || {
        (0..4)
            .filter(|&i| cluster.node(i).get("acquire:race").as_deref() == Some(lock.value()))
            .count()
    };
    assert!(ours() >= 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ours() >= 3, "a late release deleted the new keys");
    cluster.node(4).resume();
}

/// A fail-fast lock goes on setting its key on the nodes it did not wait for, after it returns:
/// otherwise the lock stays on a bare quorum, and one more lost node lets another client in.
///
/// Most calls that have not answered at the quorum were written to their connection already, so
/// the node runs them whatever the client does next. A call whose connection is still being made
/// has not sent its SET yet, and sends it only if it is kept going. Node 4's proxy holds the new
/// connection's first bytes (the client's CLIENT SETINFO, which the connection waits to see
/// answered), so its SET waits for the connection however quickly the machine runs; the proxy
/// lets it through well within the node timeout.
#[tokio::test]
async fn fail_fast_sets_the_key_on_a_node_still_connecting() {
    let cluster = Cluster::start(5);
    let proxies = cluster.proxies();
    proxies.set_mode(&[4], Mode::Blackhole);
    let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let mutex = redlock
        .new_mutex("acquire:fast-connecting")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.25) // 5 s per node
        .with_fail_fast(true)
        .with_tries(1);
    let lock = mutex.lock().await.expect("4 of 5 suffice");
    assert!(!cluster.node(4).exists("acquire:fast-connecting"));

    proxies.set_mode(&[4], Mode::Pass);
    support::within(Duration::from_secs(3), "node 4 holds the key too", || {
        holders(&cluster, "acquire:fast-connecting", lock.value()) == [0, 1, 2, 3, 4]
    })
    .await;
}

/// An unlock stops the acquire's calls still in flight: a SET sent after the release would leave a
/// key that nobody releases, and that keeps every other client out for the whole expiry.
///
/// `fail_fast_unlock_does_not_wait_and_no_set_lands_after_it` cannot tell whether they are stopped:
/// there the SET was written to the stalled node's connection before the unlock began, and the
/// release written behind it runs after it either way. Only a SET not handed to its connection yet
/// can come after the release: one waiting for the connection to be made (node 4's proxy holds its
/// set-up, as in `fail_fast_sets_the_key_on_a_node_still_connecting`). Which of the calls waiting
/// for a connection goes out first is then up to the redis crate: they are woken in the order of
/// their slots in its shared connect future (futures' `Shared`), and a new waiter takes the slot
/// freed last. So here a call to node 4 that began before the SET and timed out while both waited
/// (another mutex's, with a short node timeout) leaves a free slot below the SET's; the release
/// takes it and goes out first. The test's current-thread runtime runs woken tasks in the order
/// they were woken, so the order is certain; on a multi-thread runtime it would be chance.
#[tokio::test]
async fn unlock_stops_a_set_still_waiting_for_its_connection() {
    let name = "acquire:fast-unlock-connecting";
    let cluster = Cluster::start(5);
    // The release must find its script on node 4: a NOSCRIPT reply would send its fallback after
    // the SET, and that would delete the key all the same.
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(redmutex::internals::RELEASE_SCRIPT)
        .exec(&mut cluster.node(4).connection())
        .expect("SCRIPT LOAD");
    let proxies = cluster.proxies();
    proxies.set_mode(&[4], Mode::Blackhole);
    let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let mutex = redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.25) // 5 s per node
        .with_fail_fast(true)
        .with_tries(1);
    // Waits 100 ms for node 4, then drops its call.
    let other = redlock
        .new_mutex(format!("{name}:other"))
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005)
        .with_tries(1);
    // Polled in order: the other mutex's call to node 4 waits for the connection before the SET.
    let (_other, lock) = futures::join!(other.try_lock(), mutex.lock());
    let lock = lock.expect("4 of 5 suffice");
    lock.unlock().await.expect("released on 4 of 5");

    proxies.set_mode(&[4], Mode::Pass);
    support::within(Duration::from_secs(3), "node 4 ran the release", || {
        cluster.node(4).calls("evalsha") >= 1
    })
    .await;
    // Every call woken with the release has been handed to the connection by now; a request sent
    // now goes out after them, so once it is answered, a late SET would have landed.
    let barrier = quick(&redlock, &format!("{name}:barrier"))
        .try_lock()
        .await
        .expect("free lock");
    assert_eq!(
        holders(&cluster, &format!("{name}:barrier"), barrier.value()),
        [0, 1, 2, 3, 4]
    );
    assert!(
        present(&cluster, name).is_empty(),
        "a SET landed after the release"
    );
}
