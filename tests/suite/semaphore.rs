//! The counting semaphore on healthy nodes: permits, expiry, extend and release, the nodes' keys,
//! wake-up on release, and the errors of a misused name.

use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock};
use redmutex_testenv::Cluster;

use crate::support::{cleared_within, client, quick, quick_semaphore, within};

/// How many holders each node lists for `name` (expired ones included until swept). Holders are
/// scored by their expiry; the permit count's member (the empty string) by minus the count.
fn entries(cluster: &Cluster, name: &str) -> Vec<i64> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            redis::cmd("ZCOUNT")
                .arg(name)
                .arg(0)
                .arg("+inf")
                .query(&mut node.connection())
                .expect("ZCOUNT")
        })
        .collect()
}

/// The values listed as holders of `name` on node `i`.
fn listed(cluster: &Cluster, i: usize, name: &str) -> Vec<String> {
    redis::cmd("ZRANGEBYSCORE")
        .arg(name)
        .arg(0)
        .arg("+inf")
        .query(&mut cluster.node(i).connection())
        .expect("ZRANGEBYSCORE")
}

/// The permit count node `i` keeps for `name`.
fn agreed(cluster: &Cluster, i: usize, name: &str) -> Option<i64> {
    let score: Option<i64> = redis::cmd("ZSCORE")
        .arg(name)
        .arg("")
        .query(&mut cluster.node(i).connection())
        .expect("ZSCORE");
    score.map(|score| -score)
}

#[tokio::test]
async fn p_permits_are_held_together_and_the_next_is_taken_until_one_is_back() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let semaphore = quick_semaphore(&redlock, "semaphore:three", 3);
    assert_eq!((semaphore.permits(), semaphore.quorum()), (3, 4));

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(semaphore.try_acquire().await.expect("a permit is free"));
    }
    // Every node admitted every holder, and no more than 3.
    assert_eq!(entries(&cluster, "semaphore:three"), [3; 5]);
    match semaphore.try_acquire().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2, 3, 4]),
        other => panic!("expected Taken, got {other:?}"),
    }
    // The failed attempt set nothing anywhere.
    assert_eq!(entries(&cluster, "semaphore:three"), [3; 5]);

    let back = held.remove(1);
    back.unlock().await.expect("a held permit is given back");
    let fourth = semaphore
        .try_acquire()
        .await
        .expect("one permit is free again");
    assert!(fourth.valid_until() > Instant::now());
    assert_eq!(fourth.name(), "semaphore:three");
    assert_eq!(fourth.token(), None);
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Taken { .. })
    ));
    for lock in held.into_iter().chain([fourth]) {
        lock.unlock().await.expect("unlock");
    }
}

/// 5 nodes, 2 permits: a holder needs 4. Two holders that each missed a different node fill only
/// the 3 nodes they share, yet leave a newcomer 2 free nodes, too few: that is `Taken`, not a
/// failure of the nodes.
#[tokio::test]
async fn a_full_semaphore_is_taken_though_its_holders_fill_only_some_nodes() {
    const UNREACHABLE: &str = "redis://127.0.0.1:1/";
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let missing = |node: usize| {
        let mut urls = urls.clone();
        urls[node] = UNREACHABLE.to_owned();
        urls
    };
    let name = "semaphore:spread";
    let mut held = Vec::new();
    for node in [0, 4] {
        let redlock = Redlock::connect(missing(node)).await.expect("URLs parse");
        let semaphore = quick_semaphore(&redlock, name, 2);
        held.push(semaphore.acquire().await.expect("4 of 5 nodes admit it"));
    }
    assert_eq!(entries(&cluster, name), [1, 2, 2, 2, 1]);

    let redlock = client(&cluster).await;
    match quick_semaphore(&redlock, name, 2).try_acquire().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [1, 2, 3]),
        other => panic!("expected Taken, got {other:?}"),
    }
    // Its admissions on nodes 0 and 4 were given back.
    assert_eq!(entries(&cluster, name), [1, 2, 2, 2, 1]);
    for lock in held {
        lock.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn the_name_outlives_its_latest_holder_and_goes_with_the_last() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:key";
    let short = quick_semaphore(&redlock, name, 2);
    let long = short.clone().with_expiry(Duration::from_secs(20));

    // The name expires when its latest holder does (its score), or later; never earlier.
    let expiry_and_scores = |i: usize| {
        let mut con = cluster.node(i).connection();
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(name)
            .query(&mut con)
            .expect("PEXPIRETIME");
        let scores: Vec<(String, i64)> = redis::cmd("ZRANGEBYSCORE")
            .arg(name)
            .arg(0)
            .arg("+inf")
            .arg("WITHSCORES")
            .query(&mut con)
            .expect("ZRANGEBYSCORE");
        (at, scores)
    };
    let brief = short.acquire().await.expect("first permit");
    for i in 0..cluster.len() {
        let (at, scores) = expiry_and_scores(i);
        assert_eq!(scores.len(), 1);
        assert_eq!(at, scores[0].1, "set with the first holder");
        assert_eq!(agreed(&cluster, i, name), Some(2));
    }
    let lasting = long.acquire().await.expect("second permit");
    let lasting_until = |i: usize| {
        let (at, scores) = expiry_and_scores(i);
        let score = scores
            .iter()
            .find(|(v, _)| v == lasting.value())
            .expect("held");
        assert_eq!(at, score.1, "moved out to the later holder");
        at
    };
    let until: Vec<i64> = (0..cluster.len()).map(lasting_until).collect();
    lasting.unlock().await.expect("unlock");
    for (i, &until) in until.iter().enumerate() {
        let (at, scores) = expiry_and_scores(i);
        assert_eq!(scores.len(), 1);
        assert!(at >= scores[0].1, "never before a live holder");
        assert_eq!(at, until, "only ever moved outwards");
    }
    // The last holder gives its permit back: nothing is left behind.
    brief.unlock().await.expect("unlock");
    for node in cluster.nodes() {
        assert_eq!(node.dbsize(), 0);
    }

    // Holders that never give their permits back: the name goes with the latest expiry.
    let crashed = short
        .clone()
        .with_expiry(Duration::from_millis(300))
        .acquire()
        .await
        .expect("permit");
    std::mem::forget(crashed);
    within(Duration::from_secs(2), "the name expired", || {
        cluster.nodes().iter().all(|node| node.dbsize() == 0)
    })
    .await;
}

/// A sorted set these scripts did not make (no count member, expired entries, no expiry): the
/// first permit sweeps it and gives the name an expiry, as for a new one.
#[tokio::test]
async fn a_foreign_set_of_expired_entries_is_taken_over_with_an_expiry() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:foreign";
    for node in cluster.nodes() {
        let _: i64 = redis::cmd("ZADD")
            .arg(name)
            .arg(1)
            .arg("a")
            .arg(2)
            .arg("b")
            .query(&mut node.connection())
            .expect("ZADD");
    }
    let semaphore = quick_semaphore(&redlock, name, 2);
    let first = semaphore
        .acquire()
        .await
        .expect("both entries expired long ago");
    let second = semaphore.acquire().await.expect("permit");
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert!((1..=2000).contains(&node.pttl(name)), "node {i}");
        assert_eq!(agreed(&cluster, i, name), Some(2));
        assert_eq!(listed(&cluster, i, name).len(), 2);
    }
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_crashed_holders_permit_comes_back_after_its_expiry() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:crash";
    let semaphore = quick_semaphore(&redlock, name, 2).with_expiry(Duration::from_secs(1));
    let stays = semaphore
        .clone()
        .with_expiry(Duration::from_secs(20))
        .acquire()
        .await
        .expect("first permit");
    // The holder crashes: nothing releases its permit.
    let crashed = semaphore.acquire().await.expect("second permit");
    let crashed_value = crashed.value().to_owned();
    let crashed_until = crashed.valid_until();
    std::mem::forget(crashed);
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Taken { .. })
    ));

    let wait = crashed_until.saturating_duration_since(Instant::now()) + Duration::from_millis(100);
    tokio::time::sleep(wait).await;
    let next = semaphore
        .try_acquire()
        .await
        .expect("the crashed holder's permit came back");
    // Swept on every node by the acquire that took its place.
    for i in 0..cluster.len() {
        let values = listed(&cluster, i, name);
        assert!(!values.contains(&crashed_value), "node {i}: {values:?}");
        assert_eq!(values.len(), 2, "node {i}");
    }
    next.unlock().await.expect("unlock");
    stays.unlock().await.expect("unlock");
}

#[tokio::test]
async fn extend_renews_only_a_live_permit_and_never_recreates_one() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:extend";
    let semaphore = quick_semaphore(&redlock, name, 2);
    let lock = semaphore.acquire().await.expect("permit");
    let other = semaphore.acquire().await.expect("permit");
    let before = lock.valid_until();
    tokio::time::sleep(Duration::from_millis(20)).await;
    lock.extend().await.expect("a live permit is extended");
    assert!(lock.valid_until() > before);

    // The permit is gone from every node (as if it expired there): extend fails and puts it
    // nowhere back; the other holder is untouched.
    for node in cluster.nodes() {
        let removed: i64 = redis::cmd("ZREM")
            .arg(name)
            .arg(lock.value())
            .query(&mut node.connection())
            .expect("ZREM");
        assert_eq!(removed, 1);
    }
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
    for i in 0..cluster.len() {
        assert_eq!(listed(&cluster, i, name), [other.value().to_owned()]);
    }
    other.unlock().await.expect("unlock");
    cleared_within(Duration::from_secs(1), &cluster, name).await;
}

#[tokio::test]
async fn an_expired_permit_is_neither_extended_nor_released() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:expired";
    let semaphore = quick_semaphore(&redlock, name, 2);
    let lock = semaphore.acquire().await.expect("permit");
    let other = semaphore
        .clone()
        .with_expiry(Duration::from_secs(20))
        .acquire()
        .await
        .expect("permit");
    // The node's clock runs past the entry (the other holder keeps the keys alive): each node
    // still lists it, unswept, until a script looks. Scores are expiry times in milliseconds.
    for node in cluster.nodes() {
        let _: i64 = redis::cmd("ZADD")
            .arg(name)
            .arg("XX")
            .arg(1)
            .arg(lock.value())
            .query(&mut node.connection())
            .expect("ZADD");
    }
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    assert_eq!(
        entries(&cluster, name),
        [2; 3],
        "extend never sweeps others"
    );
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
    for i in 0..cluster.len() {
        assert_eq!(listed(&cluster, i, name), [other.value().to_owned()]);
    }
    other.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_permit_count_other_than_the_holders_is_refused_naming_both() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "semaphore:mismatch";
    let two = quick_semaphore(&redlock, name, 2);
    let three = quick_semaphore(&redlock, name, 3);
    let held = two.acquire().await.expect("permit");

    let error = three
        .try_acquire()
        .await
        .expect_err("the holders agreed on 2");
    let Error::NoQuorum { ok, failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(*ok, 0);
    assert_eq!(failures.len(), 3);
    for failure in failures {
        let NodeErrorKind::Redis(redis) = &failure.kind else {
            panic!("expected the node's error, got {failure}");
        };
        let message = redis.to_string();
        assert!(
            message.contains("held with 2 permits") && message.contains("asked with 3"),
            "{message}"
        );
    }
    assert!(error.to_string().contains("held with 2 permits"), "{error}");
    assert_eq!(entries(&cluster, name), [1; 3], "nothing was admitted");

    // Once nobody holds it, the count may change.
    held.unlock().await.expect("unlock");
    let now_three = three
        .acquire()
        .await
        .expect("an empty semaphore takes any count");
    for i in 0..cluster.len() {
        assert_eq!(agreed(&cluster, i, name), Some(3));
    }
    now_three.unlock().await.expect("unlock");

    // Holders that expired without giving their permits back stay listed until a script sweeps
    // them, but hold no count: it changes as soon as no live holder is left.
    let lasting = three
        .clone()
        .with_expiry(Duration::from_secs(20))
        .acquire()
        .await
        .expect("permit");
    let crashed = three
        .clone()
        .with_expiry(Duration::from_millis(200))
        .acquire()
        .await
        .expect("permit");
    let crashed_until = crashed.valid_until();
    std::mem::forget(crashed);
    lasting.unlock().await.expect("unlock");
    assert_eq!(
        entries(&cluster, name),
        [1; 3],
        "the crashed holder is still listed"
    );
    tokio::time::sleep(
        crashed_until.saturating_duration_since(Instant::now()) + Duration::from_millis(100),
    )
    .await;
    let two_again = two.try_acquire().await.expect("no live holder is left");
    assert_eq!(entries(&cluster, name), [1; 3], "swept, and one admitted");
    for i in 0..cluster.len() {
        assert_eq!(agreed(&cluster, i, name), Some(2));
    }
    two_again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn zero_permits_is_a_configuration_error_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let none = quick_semaphore(&redlock, "semaphore:zero", 0);
    assert_eq!(none.quorum(), 1);
    for result in [none.acquire().await, none.try_acquire().await] {
        match result {
            Err(Error::Config { field, rule }) => {
                assert_eq!(field, "permits");
                assert!(rule.contains("at least 1"), "{rule}");
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }
    for node in cluster.nodes() {
        assert_eq!(node.calls("evalsha") + node.calls("eval"), 0);
    }
}

#[tokio::test]
async fn a_name_is_a_mutexs_or_a_semaphores_and_each_says_so() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;

    // A semaphore on a name a mutex holds: every node says what the name holds.
    let mutex = quick(&redlock, "shared:by-mutex");
    let locked = mutex.lock().await.expect("mutex");
    let error = quick_semaphore(&redlock, "shared:by-mutex", 2)
        .try_acquire()
        .await
        .expect_err("the name is a mutex's");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(failures.len(), 3);
    for failure in failures {
        let message = failure.to_string();
        assert!(
            message.contains("holds a string") && message.contains("Mutex"),
            "{message}"
        );
    }
    // The mutex's lock is untouched, and unlocks normally.
    for node in cluster.nodes() {
        assert_eq!(node.get("shared:by-mutex").as_deref(), Some(locked.value()));
    }
    locked.unlock().await.expect("unlock");

    // A mutex on a name a semaphore holds finds it taken; the semaphore is untouched.
    let semaphore = quick_semaphore(&redlock, "shared:by-semaphore", 2);
    let permit = semaphore.acquire().await.expect("permit");
    let mutex = quick(&redlock, "shared:by-semaphore");
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    assert_eq!(entries(&cluster, "shared:by-semaphore"), [1; 3]);
    permit.extend().await.expect("still held");
    permit.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_given_back_permit_wakes_a_waiter() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    // A long retry delay: only the release notice can wake the waiter early.
    let semaphore = redlock
        .new_semaphore("semaphore:wake", 2)
        .with_expiry(Duration::from_secs(20))
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_secs(60));
    let first = semaphore.acquire().await.expect("permit");
    let second = semaphore.acquire().await.expect("permit");
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { semaphore.acquire().await }
    });
    // The waiter failed its first attempt and listens.
    let channel = "redmutex:released:semaphore:wake";
    within(Duration::from_secs(10), "the waiter listens", || {
        cluster.nodes().iter().all(|n| n.subscribers(channel) > 0)
    })
    .await;
    let released = Instant::now();
    first.unlock().await.expect("unlock");
    let third = waiter
        .await
        .expect("waiter finished")
        .expect("woken, it takes the permit");
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "{:?}",
        released.elapsed()
    );
    second.unlock().await.expect("unlock");
    third.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_dropped_permit_is_given_back_in_the_background() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let semaphore = quick_semaphore(&redlock, "semaphore:drop", 1);
    let lock = semaphore.acquire().await.expect("permit");
    drop(lock);
    // Well before the 2 s expiry.
    cleared_within(Duration::from_millis(1000), &cluster, "semaphore:drop").await;
    semaphore.try_acquire().await.expect("free again");
}
