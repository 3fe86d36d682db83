//! `inspect` and `force_unlock` of a `Mutex`, a `RwLock` and a `Semaphore`, on real nodes.

use std::time::{Duration, Instant};

use redmutex::{Error, Holder, NodeAnswer, RwLock};
use redmutex_testenv::Cluster;

use crate::support::{client, quick, quick_semaphore, warm_up, within};

#[tokio::test]
async fn a_free_name_is_not_held() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let state = quick(&redlock, "inspect:free").inspect().await.unwrap();
    assert!(!state.is_held());
    assert_eq!(
        (state.ttl(), state.fingerprint(), state.holders()),
        (None, None, 0)
    );
    assert_eq!(state.nodes().len(), 3);
    for (index, node) in state.nodes().iter().enumerate() {
        assert_eq!(node.node, index);
        assert_eq!(
            node.address.as_deref(),
            Some(cluster.node(index).url().as_str())
        );
        assert!(matches!(node.answer, NodeAnswer::Free), "{node:?}");
    }
}

#[tokio::test]
async fn a_held_lock_shows_its_ttl_and_fingerprint_but_never_its_value() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "inspect:held");
    let lock = mutex.lock().await.unwrap();
    let state = mutex.inspect().await.unwrap();
    assert!(state.is_held());
    assert_eq!(state.holders(), 5);
    let ttl = state.ttl().unwrap();
    assert!(
        ttl <= Duration::from_secs(2) && ttl > Duration::from_secs(1),
        "{ttl:?}"
    );
    let fingerprint = state.fingerprint().unwrap();
    assert_eq!(fingerprint.len(), 12);
    assert!(fingerprint.bytes().all(|b| b.is_ascii_hexdigit()));
    // The value is a capability: it appears nowhere in the answer.
    let shown = format!("{state:?} {}", state.nodes()[0].answer);
    assert!(!shown.contains(lock.value()), "{shown}");
    // Another acquisition has another fingerprint.
    lock.unlock().await.unwrap();
    let again = mutex.lock().await.unwrap();
    let next = mutex.inspect().await.unwrap();
    assert_ne!(next.fingerprint(), Some(fingerprint));
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn held_means_a_quorum_of_one_value_and_ttl_the_smallest_of_its_holders() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "inspect:split");
    let name = mutex.name();
    // Two values on two nodes each: no quorum holds either.
    for (node, value) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        cluster
            .node(node)
            .set_px(name, value, Duration::from_secs(30));
    }
    let state = mutex.inspect().await.unwrap();
    assert!(!state.is_held());
    assert_eq!(state.ttl(), None);
    let fingerprints: Vec<Option<&str>> = state
        .nodes()
        .iter()
        .map(|node| match &node.answer {
            NodeAnswer::Held { fingerprint, .. } => Some(fingerprint.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fingerprints[0], fingerprints[1]);
    assert_ne!(fingerprints[0], fingerprints[2]);
    assert_eq!(fingerprints[4], None);

    // A third node with "a", with the shortest TTL of all its holders; "b" has a shorter one still.
    cluster.node(4).set_px(name, "a", Duration::from_secs(10));
    cluster.node(2).set_px(name, "b", Duration::from_secs(5));
    let state = mutex.inspect().await.unwrap();
    assert!(state.is_held());
    assert_eq!(state.holders(), 3);
    let ttl = state.ttl().unwrap();
    assert!(
        ttl <= Duration::from_secs(10) && ttl > Duration::from_secs(8),
        "{ttl:?}"
    );
}

#[tokio::test]
async fn inspect_needs_a_quorum_of_answers() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "inspect:down");
    warm_up(&mutex).await;
    let lock = mutex.lock().await.unwrap();
    cluster.node(0).kill();
    cluster.node(1).pause();
    // Two of five gone: the other three still tell.
    let state = mutex.inspect().await.unwrap();
    assert!(state.is_held());
    assert!(matches!(state.nodes()[1].answer, NodeAnswer::Failed(_)));
    cluster.node(2).kill();
    match mutex.inspect().await {
        Err(Error::NoQuorum {
            ok: 2,
            quorum: 3,
            failures,
            ..
        }) => assert_eq!(
            failures.iter().map(|f| f.node).collect::<Vec<_>>(),
            [0, 1, 2]
        ),
        other => panic!("{other:?}"),
    }
    cluster.node(1).resume();
    drop(lock);
}

#[tokio::test]
async fn force_unlock_frees_another_holders_lock_and_its_extend_then_fails() {
    let cluster = Cluster::start(5);
    let holder = client(&cluster).await;
    let operator = client(&cluster).await;
    let name = "inspect:force";
    let held = quick(&holder, name).lock().await.unwrap();
    // Held on three nodes only: the count says where a key was deleted.
    cluster.node(0).del(name);
    cluster.node(1).del(name);
    let mutex = quick(&operator, name);
    assert_eq!(mutex.force_unlock().await.unwrap(), 3);
    assert!(cluster.nodes().iter().all(|node| !node.exists(name)));
    assert!(!mutex.inspect().await.unwrap().is_held());
    assert!(matches!(held.extend().await, Err(Error::Expired)));
    assert!(matches!(held.unlock().await, Err(Error::Expired)));
    // Nothing left to delete.
    assert_eq!(mutex.force_unlock().await.unwrap(), 0);
    // Someone else gets the lock at once.
    let next = mutex.try_lock().await.unwrap();
    next.unlock().await.unwrap();
}

/// A forced release of a name that readers hold removes the readers too. Were their set left
/// behind, a reader arriving afterwards would set the marker again, and a forced-out reader could
/// then extend as if nothing had happened.
#[tokio::test]
async fn force_unlock_of_a_name_readers_hold_removes_every_reader() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:read-held";
    let rwlock = redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(10))
        .with_tries(1);
    let forced = rwlock.read().await.unwrap();
    assert_eq!(quick(&redlock, name).force_unlock().await.unwrap(), 3);
    for node in cluster.nodes() {
        assert!(!node.exists(name) && !node.exists("{inspect:read-held}:readers"));
    }
    let later = rwlock.read().await.unwrap();
    assert!(matches!(forced.extend().await, Err(Error::Expired)));
    later.unlock().await.unwrap();
    assert!(matches!(forced.unlock().await, Err(Error::Expired)));
    // The name is free: the forced-out reader's entry keeps no marker alive.
    let writer = rwlock.try_write().await.unwrap();
    writer.unlock().await.unwrap();
}

/// A mutex over several names breaks the lock on all of them, and inspects none: a lock state is
/// one name's.
#[tokio::test]
async fn force_unlock_of_a_multi_name_mutex_deletes_every_name() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["inspect:multi:a", "inspect:multi:b"];
    let transfer = redlock
        .new_multi_mutex(names)
        .with_expiry(Duration::from_secs(10));
    let held = transfer.lock().await.unwrap();
    assert_eq!(transfer.force_unlock().await.unwrap(), 3);
    for node in cluster.nodes() {
        assert!(names.iter().all(|name| !node.exists(name)));
    }
    assert!(matches!(held.extend().await, Err(Error::Expired)));
    let Err(Error::Config { field, .. }) = transfer.inspect().await else {
        panic!("inspect takes one name");
    };
    assert_eq!(field, "names");
    for name in names {
        assert!(!quick(&redlock, name).inspect().await.unwrap().is_held());
    }
}

#[tokio::test]
async fn force_unlock_leaves_the_fencing_counter_alone() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "inspect:fenced").with_fencing(true);
    let first = mutex.lock().await.unwrap();
    let token = first.token().unwrap();
    let counters: Vec<Option<String>> = cluster
        .nodes()
        .iter()
        .map(|node| node.get("{inspect:fenced}:fence"))
        .collect();
    assert_eq!(mutex.force_unlock().await.unwrap(), 3);
    for (node, counter) in cluster.nodes().iter().zip(&counters) {
        assert_eq!(&node.get("{inspect:fenced}:fence"), counter);
    }
    let second = mutex.lock().await.unwrap();
    assert!(second.token().unwrap() > token);
    second.unlock().await.unwrap();
}

#[tokio::test]
async fn force_unlock_publishes_a_release_notice_only_with_wake_on_release() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let plain = quick(&redlock, "inspect:notice").with_wake_on_release(false);
    let _held = plain.lock().await.unwrap();
    plain.force_unlock().await.unwrap();
    assert!(
        cluster
            .nodes()
            .iter()
            .all(|node| node.calls("publish") == 0)
    );
    let _held = plain.lock().await.unwrap();
    plain
        .with_wake_on_release(true)
        .force_unlock()
        .await
        .unwrap();
    assert!(
        cluster
            .nodes()
            .iter()
            .all(|node| node.calls("publish") == 1)
    );
}

#[tokio::test]
async fn force_unlock_wakes_a_waiter_at_once() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let waiter = client(&cluster).await;
    let waking = |redlock: &redmutex::Redlock| {
        redlock
            .new_mutex("inspect:wake")
            .with_expiry(Duration::from_secs(30))
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(10)
            .with_wake_on_release(true)
    };
    let _stuck = waking(&holder).lock().await.unwrap();
    let mutex = waking(&waiter);
    let waiting = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    // The waiter has tried twice (before and after subscribing) and now waits for a notice.
    within(Duration::from_secs(5), "the waiter waits", || {
        cluster.nodes().iter().all(|node| node.calls("set") == 3)
    })
    .await;
    let forced = Instant::now();
    assert_eq!(mutex.force_unlock().await.unwrap(), 3);
    let lock = waiting.await.unwrap().unwrap();
    // Far below the minute-long retry delay: the notice woke it.
    assert!(forced.elapsed() < Duration::from_secs(20));
    lock.unlock().await.unwrap();
}

#[tokio::test]
async fn force_unlock_without_a_quorum_says_so() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "inspect:force-down");
    warm_up(&mutex).await;
    let _held = mutex.lock().await.unwrap();
    cluster.node(1).kill();
    cluster.node(2).kill();
    assert!(matches!(
        mutex.force_unlock().await,
        Err(Error::NoQuorum { ok: 1, .. })
    ));
    // The node that answered did let go.
    assert!(!cluster.node(0).exists("inspect:force-down"));
}

#[tokio::test]
async fn invalid_settings_fail_before_any_io() {
    let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"])
        .await
        .unwrap();
    let mutex = redlock.new_mutex("");
    assert!(matches!(mutex.inspect().await, Err(Error::Config { .. })));
    assert!(matches!(
        mutex.force_unlock().await,
        Err(Error::Config { .. })
    ));
}

/// A read-write lock whose waiting writer's mark lives as long as the expiry (30 s): with a custom
/// retry delay the longest delay is unknown. One attempt per call.
fn long_marks(redlock: &redmutex::Redlock, name: &str) -> RwLock {
    redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.02)
        .with_retry_delay_fn(|_| Duration::from_millis(5))
        .with_tries(1)
}

/// A writer that found readers left its mark, which refuses new readers for as long as it lives.
/// A forced release frees the name for readers at once: the mark goes with the readers.
#[tokio::test]
async fn force_unlock_removes_a_waiting_writers_mark() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:marked";
    let mark = "{inspect:marked}:writer-waiting";
    let rwlock = long_marks(&redlock, name);
    let _stuck = rwlock.read().await.unwrap();
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    for node in cluster.nodes() {
        // Far from expiring on its own.
        assert!(node.pttl(mark) > 20_000, "{}", node.pttl(mark));
    }
    let state = rwlock.inspect().await.unwrap();
    assert!(
        state.nodes().iter().all(|node| node
            .writer_waiting
            .is_some_and(|ttl| ttl > Duration::from_secs(20))),
        "{state:?}"
    );

    // The operator's tool is a plain mutex over the name.
    assert_eq!(quick(&redlock, name).force_unlock().await.unwrap(), 3);
    for node in cluster.nodes() {
        assert!(!node.exists(mark), "the mark outlived a forced release");
        assert!(!node.exists(name) && !node.exists("{inspect:marked}:readers"));
    }
    let reader = rwlock.try_read().await.unwrap();
    reader.unlock().await.unwrap();

    // A mark alone (its writer gave up, the readers left) is something to delete too.
    let reader = rwlock.read().await.unwrap();
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    reader.unlock().await.unwrap();
    assert!(cluster.nodes().iter().all(|node| node.exists(mark)));
    assert!(!rwlock.inspect().await.unwrap().is_held());
    assert_eq!(rwlock.force_unlock().await.unwrap(), 3);
    assert!(cluster.nodes().iter().all(|node| !node.exists(mark)));
    rwlock.try_read().await.unwrap().unlock().await.unwrap();
}

/// Readers are shown as readers, how many, each counted when it holds on a majority; never as
/// one lock value (their marker's).
#[tokio::test]
async fn inspect_counts_the_readers_that_hold() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:reading";
    let rwlock = long_marks(&redlock, name);
    let first = rwlock.read().await.unwrap();
    let second = rwlock.read().await.unwrap();
    // The entry of a reader whose attempt landed on one node only does not count.
    let _: () = redis::cmd("ZADD")
        .arg("{inspect:reading}:readers")
        .arg(4_102_444_800_000_u64) // 2100-01-01 in milliseconds
        .arg("partial")
        .query(&mut cluster.node(0).connection())
        .expect("ZADD");
    for state in [
        rwlock.inspect().await.unwrap(),
        quick(&redlock, name).inspect().await.unwrap(),
    ] {
        assert!(
            matches!(state.holder(), Some(Holder::Readers { count: 2, .. })),
            "{state:?}"
        );
        assert_eq!(state.holder().map(Holder::kind), Some("readers"));
        assert_eq!((state.holders(), state.quorum()), (3, 2));
        assert_eq!(state.fingerprint(), None);
        let ttl = state.ttl().unwrap();
        assert!(
            ttl <= rwlock.expiry() && ttl > Duration::from_secs(20),
            "{ttl:?}"
        );
        let live: Vec<usize> = state
            .nodes()
            .iter()
            .map(|node| match &node.answer {
                NodeAnswer::Readers { readers, .. } => readers.len(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(live, [3, 2, 2]);
        let shown = format!("{state:?}");
        for value in [first.value(), second.value(), "partial"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }
    first.unlock().await.unwrap();
    second.unlock().await.unwrap();
    let writer = rwlock.write().await.unwrap();
    let state = rwlock.inspect().await.unwrap();
    assert!(
        matches!(state.holder(), Some(Holder::Exclusive { .. })),
        "{state:?}"
    );
    assert_eq!(state.holder().map(Holder::kind), Some("exclusive"));
    writer.unlock().await.unwrap();
}

/// A semaphore's name is a sorted set, which `GET` refuses: a plain inspection once read that as
/// an error on every node, hence no quorum. It is shown as the semaphore's: permits held of its
/// count, judged on its quorum.
#[tokio::test]
async fn inspect_shows_a_semaphores_permits_whoever_asks() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "inspect:permits";
    // A node timeout of 900 ms, for the paused node below.
    let semaphore = quick_semaphore(&redlock, name, 3)
        .with_expiry(Duration::from_secs(30))
        .with_timeout_factor(0.03);
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let by_mutex = quick(&redlock, name).inspect().await.unwrap();
    let by_semaphore = semaphore.inspect().await.unwrap();
    for state in [&by_mutex, &by_semaphore] {
        assert!(
            matches!(
                state.holder(),
                Some(Holder::Permits {
                    held: 2,
                    permits: 3,
                    ..
                })
            ),
            "{state:?}"
        );
        assert_eq!(state.holder().map(Holder::kind), Some("semaphore"));
        // 3 permits over 5 nodes: a holder holds on 4.
        assert_eq!((state.quorum(), state.holders()), (4, 5));
        assert!(state.ttl().is_some_and(|ttl| ttl > Duration::from_secs(20)));
        for node in state.nodes() {
            match &node.answer {
                NodeAnswer::Permits {
                    holders,
                    permits: Some(3),
                    ..
                } => assert_eq!(holders.len(), 2),
                other => panic!("{other:?}"),
            }
        }
        let shown = format!("{state:?}");
        assert!(!shown.contains(first.value()) && !shown.contains(second.value()));
    }

    // A holder needs 4 of 5 nodes: with 3 answers, one could hide on the other two.
    cluster.node(0).kill();
    cluster.node(1).pause();
    let by_mutex = quick(&redlock, name).with_timeout_factor(0.45);
    for result in [semaphore.inspect().await, by_mutex.inspect().await] {
        assert!(
            matches!(
                result,
                Err(Error::NoQuorum {
                    ok: 3,
                    quorum: 4,
                    ..
                })
            ),
            "{result:?}"
        );
    }
    cluster.node(1).resume();
}

#[tokio::test]
async fn a_semaphore_inspects_what_else_holds_its_name() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:not-permits";
    let semaphore = quick_semaphore(&redlock, name, 2);
    assert!(!semaphore.inspect().await.unwrap().is_held());
    let lock = quick(&redlock, name).lock().await.unwrap();
    let state = semaphore.inspect().await.unwrap();
    assert!(matches!(state.holder(), Some(Holder::Exclusive { .. })));
    lock.unlock().await.unwrap();
    // A key redmutex never writes, on a majority: no lock can be taken while it stands.
    for node in &cluster.nodes()[..2] {
        let _: () = redis::cmd("HSET")
            .arg(name)
            .arg("f")
            .arg("v")
            .query(&mut node.connection())
            .expect("HSET");
    }
    let state = quick(&redlock, name).inspect().await.unwrap();
    match state.holder() {
        Some(Holder::Foreign { kind, .. }) => assert_eq!(kind, "hash"),
        other => panic!("{other:?}"),
    }
    assert_eq!(state.ttl(), None);
    assert!(matches!(
        state.nodes()[0].answer,
        NodeAnswer::Foreign { ttl: None, .. }
    ));
    assert_eq!(quick(&redlock, name).force_unlock().await.unwrap(), 2);
}

#[tokio::test]
async fn semaphore_force_unlock_frees_every_permit() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:force-permits";
    let semaphore = quick_semaphore(&redlock, name, 2).with_expiry(Duration::from_secs(30));
    let held = [
        semaphore.acquire().await.unwrap(),
        semaphore.acquire().await.unwrap(),
    ];
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Taken { .. })
    ));
    assert_eq!(semaphore.force_unlock().await.unwrap(), 3);
    assert!(cluster.nodes().iter().all(|node| !node.exists(name)));
    assert!(!semaphore.inspect().await.unwrap().is_held());
    for permit in &held {
        assert!(matches!(permit.extend().await, Err(Error::Expired)));
    }
    // Both permits are free again; another count may even start afresh.
    let again = [
        semaphore.try_acquire().await.unwrap(),
        semaphore.try_acquire().await.unwrap(),
    ];
    for permit in again {
        permit.unlock().await.unwrap();
    }
    assert_eq!(semaphore.force_unlock().await.unwrap(), 0);
}

#[tokio::test]
async fn rwlock_force_unlock_frees_a_writer_and_readers() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "inspect:force-rw";
    let rwlock = long_marks(&redlock, name).with_wake_on_release(true);
    let publishes = || -> Vec<u64> { cluster.nodes().iter().map(|n| n.calls("publish")).collect() };
    let writer = rwlock.write().await.unwrap();
    assert_eq!(rwlock.force_unlock().await.unwrap(), 3);
    // One release notice per node for each forced release.
    assert_eq!(publishes(), [1, 1, 1]);
    // The writer's extend set its key again on every node, and took it back (with the notice
    // its settings ask for) when it found the lock gone everywhere.
    assert!(matches!(writer.extend().await, Err(Error::Expired)));
    assert!(cluster.nodes().iter().all(|node| !node.exists(name)));
    let readers = [rwlock.read().await.unwrap(), rwlock.read().await.unwrap()];
    let before = publishes();
    assert_eq!(rwlock.force_unlock().await.unwrap(), 3);
    let after = publishes();
    assert!(
        before.iter().zip(&after).all(|(b, a)| a - b == 1),
        "{before:?} {after:?}"
    );
    for reader in &readers {
        assert!(matches!(reader.extend().await, Err(Error::Expired)));
    }
    let writer = rwlock.try_write().await.unwrap();
    writer.unlock().await.unwrap();
}

/// A purge takes nothing from a holder: readers or a semaphore's holders refuse it as a lock
/// does, on every node; once free, the keys kept beside the name go.
#[tokio::test]
async fn purge_refuses_while_readers_or_permits_hold() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let reader = redlock.new_rwlock("purge:rw").read().await.expect("read");
    let purge = redlock.new_mutex("purge:rw");
    match purge.purge().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2]),
        other => panic!("expected the readers to refuse it, got {other:?}"),
    }
    reader.unlock().await.expect("unlock");
    purge.purge().await.expect("free now");
    let permit = redlock
        .new_semaphore("purge:sem", 2)
        .acquire()
        .await
        .expect("permit");
    assert!(matches!(
        redlock.new_mutex("purge:sem").purge().await,
        Err(Error::Taken { .. })
    ));
    permit.unlock().await.expect("unlock");
    assert_eq!(
        redlock.new_mutex("purge:sem").purge().await.expect("free"),
        0
    );
}
