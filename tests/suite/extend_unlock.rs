//! Extend and unlock: compare-and-act on our own value only.

use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind};
use redmutex_testenv::Cluster;

use crate::support::{client, eventually, holders, present, quick, within};

#[tokio::test]
async fn extend_moves_pttl_and_valid_until() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "extend:moves")
        .lock()
        .await
        .expect("free lock");
    let first_until = lock.valid_until();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pttl_before = cluster.node(0).pttl("extend:moves");
    assert!(pttl_before <= 1700, "PTTL {pttl_before} has decayed");

    let start = Instant::now();
    lock.extend().await.expect("extend a held lock");
    assert!(lock.valid_until() > first_until);
    assert!(lock.valid_until() <= start + Duration::from_millis(1980));
    for node in cluster.nodes() {
        let pttl = node.pttl("extend:moves");
        assert!(pttl > 1900, "PTTL {pttl} after extend");
    }
}

#[tokio::test]
async fn extend_after_expiry_fails_and_recreates_nothing() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "extend:late").with_expiry(Duration::from_millis(300));
    let lock = mutex.lock().await.expect("free lock");
    eventually("the keys expire", || {
        present(&cluster, "extend:late").is_empty()
    })
    .await;
    let until = lock.valid_until();
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    assert!(
        present(&cluster, "extend:late").is_empty(),
        "extend re-created a key"
    );
    assert_eq!(lock.valid_until(), until, "a failed extend moves nothing");
}

#[tokio::test]
async fn extend_and_unlock_never_touch_a_new_owner() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "extend:foreign").with_expiry(Duration::from_millis(300));
    let stale = mutex.lock().await.expect("free lock");
    eventually("the keys expire", || {
        present(&cluster, "extend:foreign").is_empty()
    })
    .await;
    let owner = quick(&redlock, "extend:foreign")
        .lock()
        .await
        .expect("expired lock is free");
    let pttls: Vec<i64> = cluster
        .nodes()
        .iter()
        .map(|n| n.pttl("extend:foreign"))
        .collect();

    assert!(matches!(stale.extend().await, Err(Error::Taken { nodes }) if nodes.len() == 5));
    assert!(matches!(stale.unlock().await, Err(Error::Taken { nodes }) if nodes.len() == 5));

    assert_eq!(holders(&cluster, "extend:foreign", owner.value()).len(), 5);
    for (node, before) in cluster.nodes().iter().zip(pttls) {
        assert!(
            node.pttl("extend:foreign") <= before,
            "the new owner's expiry was extended"
        );
    }
}

#[tokio::test]
async fn unlock_of_an_expired_lock_says_expired() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "unlock:expired").with_expiry(Duration::from_millis(300));
    let lock = mutex.lock().await.expect("free lock");
    eventually("the keys expire", || {
        present(&cluster, "unlock:expired").is_empty()
    })
    .await;
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
}

#[tokio::test]
async fn extend_with_a_minority_of_nodes_succeeds_and_with_a_majority_down_fails() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "extend:minority")
        .lock()
        .await
        .expect("free lock");
    cluster.node(0).kill();
    cluster.node(1).kill();
    lock.extend().await.expect("3 of 5 nodes suffice");

    cluster.node(2).kill();
    let until = lock.valid_until();
    match lock.extend().await {
        Err(Error::NoQuorum { ok, failures, .. }) => {
            assert_eq!(ok, 2);
            let nodes: Vec<usize> = failures.iter().map(|f| f.node).collect();
            assert_eq!(nodes, [0, 1, 2]);
            assert!(
                failures
                    .iter()
                    .all(|f| matches!(f.kind, NodeErrorKind::Redis(_)))
            );
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert_eq!(lock.valid_until(), until);
    // A failed extend does not release: the surviving nodes still hold our value.
    assert_eq!(holders(&cluster, "extend:minority", lock.value()), [3, 4]);
}

#[tokio::test]
async fn extend_of_a_minority_lock_fails() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "extend:lost")
        .lock()
        .await
        .expect("free lock");
    // Three nodes lost the key (as after restarts without persistence).
    for i in 0..3 {
        cluster.node(i).del("extend:lost");
    }
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    assert!(
        !cluster.node(0).exists("extend:lost"),
        "extend must not re-create keys"
    );
}

#[tokio::test]
async fn unlock_removes_every_key_and_ends_all_clones() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "unlock:clones")
        .lock()
        .await
        .expect("free lock");
    let clone = lock.clone();
    clone.unlock().await.expect("unlock");
    assert!(present(&cluster, "unlock:clones").is_empty());
    assert!(lock.valid_until() <= Instant::now());

    // No I/O after unlock: even with every node paused these return at once.
    for node in cluster.nodes() {
        node.pause();
    }
    assert!(matches!(lock.unlock().await, Err(Error::Unlocked)));
    assert!(matches!(lock.extend().await, Err(Error::Unlocked)));
    assert!(matches!(clone.extend().await, Err(Error::Unlocked)));
    for node in cluster.nodes() {
        node.resume();
    }
}

#[tokio::test]
async fn adopt_then_unlock_and_extend() {
    let cluster = Cluster::start(3);
    let owner = client(&cluster).await;
    let heir = client(&cluster).await;
    let lock = quick(&owner, "unlock:adopt")
        .lock()
        .await
        .expect("free lock");

    let adopted = quick(&heir, "unlock:adopt").adopt(lock.value());
    assert!(
        adopted.valid_until() <= Instant::now(),
        "not valid until extended"
    );
    adopted.extend().await.expect("adopted lock extends");
    assert!(adopted.valid_until() > Instant::now());
    adopted.unlock().await.expect("adopted lock unlocks");
    assert!(present(&cluster, "unlock:adopt").is_empty());

    // Adopting the wrong value changes nothing.
    let lock = quick(&owner, "unlock:adopt")
        .lock()
        .await
        .expect("free again");
    let imposter = quick(&heir, "unlock:adopt").adopt("not-the-value");
    assert!(matches!(imposter.unlock().await, Err(Error::Taken { .. })));
    assert_eq!(holders(&cluster, "unlock:adopt", lock.value()).len(), 3);
}

#[tokio::test]
async fn adopting_an_empty_value_is_a_config_error() {
    let cluster = Cluster::start(1);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "unlock:empty").adopt("");
    assert!(matches!(lock.unlock().await, Err(Error::Config { field, .. }) if field == "value"));
    assert!(matches!(lock.extend().await, Err(Error::Config { .. })));
}

#[tokio::test]
async fn dropping_the_last_clone_releases_in_the_background() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    // 30 s expiry: only the release, not expiry, can clear the keys in the time allowed below.
    let quick = |redlock, name| quick(redlock, name).with_expiry(Duration::from_secs(30));
    let lock = quick(&redlock, "unlock:drop")
        .lock()
        .await
        .expect("free lock");
    let clone = lock.clone();
    drop(lock);
    // One clone is still alive: nothing is released.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(present(&cluster, "unlock:drop").len(), 3);
    drop(clone);
    within(
        Duration::from_millis(1000),
        "the dropped lock is released",
        || present(&cluster, "unlock:drop").is_empty(),
    )
    .await;

    // An adopted handle is owned the same way.
    let lock = quick(&redlock, "unlock:drop")
        .lock()
        .await
        .expect("free again");
    let value = lock.value().to_owned();
    std::mem::forget(lock);
    drop(quick(&redlock, "unlock:drop").adopt(value));
    within(
        Duration::from_millis(1000),
        "the adopted lock is released",
        || present(&cluster, "unlock:drop").is_empty(),
    )
    .await;
}

#[test]
fn dropping_without_a_runtime_does_not_panic() {
    let cluster = Cluster::start(1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let lock = runtime.block_on(async {
        let redlock = client(&cluster).await;
        quick(&redlock, "unlock:no-runtime")
            .lock()
            .await
            .expect("free lock")
    });
    drop(runtime);
    drop(lock); // no runtime: the key is left to expire
    let pttl = cluster.node(0).pttl("unlock:no-runtime");
    assert!(pttl > 0 && pttl <= 2000, "PTTL {pttl}");
}

/// Extend recomputes validity: an extend that takes longer than the validity allows fails.
#[tokio::test]
async fn extend_without_validity_left_is_expired() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for node in cluster.nodes() {
        node.set_px("extend:slow", "our-value", Duration::from_secs(10));
    }
    // A 99.999 % drift allowance leaves 10 us of a 1 s expiry: less than any round trip, while
    // the node timeout (990 ms) is long enough for a loaded machine.
    let lock = redlock
        .new_mutex("extend:slow")
        .with_expiry(Duration::from_secs(1))
        .with_drift_factor(0.99999)
        .with_timeout_factor(0.99)
        .adopt("our-value");
    let until = lock.valid_until();
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    assert_eq!(lock.valid_until(), until);
}

/// An unlock that fails half-way still ends the handle's validity: some nodes may already have let
/// go, so another client can lock, and this one must not believe it still holds the lock.
#[tokio::test]
async fn a_failed_unlock_ends_validity() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let lock = quick(&redlock, "unlock:half")
        .with_expiry(Duration::from_secs(20))
        .lock()
        .await
        .expect("free lock");
    cluster.node(1).pause();
    cluster.node(2).pause();
    let result = lock.unlock().await;
    assert!(matches!(result, Err(Error::NoQuorum { .. })), "{result:?}");
    assert!(lock.valid_until() <= Instant::now());
    cluster.node(1).resume();
    cluster.node(2).resume();
    // The releases queued at the paused nodes ran on resume: nothing of ours is left, and a second
    // unlock (allowed: the first did not succeed) finds the keys gone.
    within(Duration::from_secs(2), "the queued releases ran", || {
        present(&cluster, "unlock:half").is_empty()
    })
    .await;
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
}

/// With the scripts gone from a node's cache (a restart), an unlock by digest to that node while it
/// stalls still releases the key when it resumes, through the follow-up sent behind it.
#[tokio::test]
async fn unlock_to_a_stalled_node_without_scripts_still_releases() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("unlock:noscript")
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.005); // 100 ms
    let warm = mutex.lock().await.expect("free lock");
    warm.unlock().await.expect("unlock");
    let lock = mutex.lock().await.expect("free lock");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut cluster.node(2).connection())
        .expect("SCRIPT FLUSH");
    cluster.node(2).pause();
    lock.unlock().await.expect("2 of 3 suffice");
    cluster.node(2).resume();
    within(Duration::from_secs(3), "the stalled node releases", || {
        !cluster.node(2).exists("unlock:noscript")
    })
    .await;
}

/// `extend()` after expiry, for every primitive, in one table: while someone else keeps the name
/// busy, the expired lock's `extend()` fails and changes nothing on any node (no key or entry
/// re-created or renewed, no expiry moved; expired entries may be swept). A new primitive gets the
/// check by adding its row.
mod after_expiry {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use redmutex::{Error, Lock, Redlock};
    use redmutex_testenv::{Cluster, Node};

    use crate::support::{client, eventually, quick, quick_semaphore};

    /// How long the expiring lock lives: short, so that the test waits for real expiry on the
    /// nodes' own clocks (entries of readers and permits are scores on the node's `TIME`, which no
    /// `PEXPIRE` can bring forward).
    const SHORT: Duration = Duration::from_millis(400);
    /// How long the one who keeps the name busy holds: the whole test.
    const LONG: Duration = Duration::from_secs(30);

    #[derive(Clone, Copy, Debug)]
    enum Primitive {
        Mutex,
        MultiName,
        Read,
        Write,
        Semaphore,
    }

    const ALL: [Primitive; 5] = [
        Primitive::Mutex,
        Primitive::MultiName,
        Primitive::Read,
        Primitive::Write,
        Primitive::Semaphore,
    ];

    impl Primitive {
        /// A lock of this primitive on `name` living `expiry`.
        async fn lock(self, redlock: &Redlock, name: &str, expiry: Duration) -> Lock {
            // A node timeout of half the expiry: a loaded machine must not fail the short lock.
            let mutex = |m: redmutex::Mutex| m.with_expiry(expiry).with_timeout_factor(0.5);
            let rwlock = || {
                redlock
                    .new_rwlock(name)
                    .with_expiry(expiry)
                    .with_timeout_factor(0.5)
                    .with_retry_delay(Duration::from_millis(5))
                    .with_tries(3)
            };
            let result = match self {
                Primitive::Mutex => mutex(quick(redlock, name)).lock().await,
                Primitive::MultiName => {
                    let names = [format!("{name}:a"), format!("{name}:b")];
                    mutex(
                        redlock
                            .new_multi_mutex(names)
                            .with_retry_delay(Duration::from_millis(5))
                            .with_tries(3),
                    )
                    .lock()
                    .await
                }
                Primitive::Read => rwlock().read().await,
                Primitive::Write => rwlock().write().await,
                Primitive::Semaphore => {
                    quick_semaphore(redlock, name, 2)
                        .with_expiry(expiry)
                        .with_timeout_factor(0.5)
                        .acquire()
                        .await
                }
            };
            result.unwrap_or_else(|e| panic!("{self:?}: lock {name}: {e:?}"))
        }

        /// Someone else keeping the name busy for the whole test: for readers and permits, a
        /// holder beside the expiring one, whose entry keeps the name's keys (and so the expired
        /// entry, unswept) alive; for the others, a holder that takes the name once it is free.
        async fn keeper(self, redlock: &Redlock, name: &str) -> Lock {
            match self {
                Primitive::Mutex | Primitive::Read | Primitive::Semaphore => {
                    self.lock(redlock, name, LONG).await
                }
                // One of the names, under a plain mutex.
                Primitive::MultiName => {
                    Primitive::Mutex
                        .lock(redlock, &format!("{name}:b"), LONG)
                        .await
                }
                // Readers: the name's key holds their marker.
                Primitive::Write => Primitive::Read.lock(redlock, name, LONG).await,
            }
        }

        /// Whether the keeper holds beside the expiring lock (joins before it expires).
        fn shares(self) -> bool {
            matches!(self, Primitive::Read | Primitive::Semaphore)
        }

        /// The error `extend()` must give: `Expired` where our entry is gone or expired beside
        /// another holder's, `Taken` where another owner's value (or the readers' marker) holds
        /// the key.
        fn refused(self, error: &Error) -> bool {
            match self {
                Primitive::Read | Primitive::Semaphore => matches!(error, Error::Expired),
                Primitive::Mutex | Primitive::MultiName | Primitive::Write => {
                    matches!(error, Error::Taken { .. })
                }
            }
        }
    }

    /// What a node holds under `prefix`: for each key, its content (a string's value, or a sorted
    /// set's members and scores) and its time to live in milliseconds (`None`: no expiry).
    type Keys = BTreeMap<String, (Content, Option<i64>)>;

    #[derive(Debug, PartialEq)]
    enum Content {
        String(String),
        Sorted(BTreeMap<String, String>),
    }

    /// Every key of the names under `prefix`: the names, and the keys beside them, which start
    /// with `{` and the name (see `support::beside`).
    fn keys(node: &Node, prefix: &str) -> Keys {
        let mut connection = node.connection();
        let mut names: Vec<String> = Vec::new();
        for pattern in [format!("{prefix}*"), format!("{{{prefix}*")] {
            let found: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query(&mut connection)
                .expect("KEYS");
            names.extend(found);
        }
        let mut keys = Keys::new();
        for key in names {
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query(&mut connection)
                .expect("TYPE");
            let content = match kind.as_str() {
                "string" => Content::String(node.get(&key).unwrap_or_default()),
                "zset" => {
                    let pairs: Vec<(String, String)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(&mut connection)
                        .expect("ZRANGE");
                    Content::Sorted(pairs.into_iter().collect())
                }
                // Gone between KEYS and TYPE (expired): as if never listed.
                "none" => continue,
                other => panic!("{key} is a {other}"),
            };
            let pttl = node.pttl(&key);
            if pttl == -2 {
                continue;
            }
            keys.insert(key, (content, (pttl >= 0).then_some(pttl)));
        }
        keys
    }

    /// The node's clock in milliseconds, as the scripts read it.
    fn now(node: &Node) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query(&mut node.connection())
            .expect("TIME");
        seconds * 1000 + micros / 1000
    }

    /// Whether `value` still holds anything live under `prefix` on `node`: a key holding it, or
    /// an entry scored later than the node's clock.
    fn lives(node: &Node, prefix: &str, value: &str) -> bool {
        let now = now(node);
        keys(node, prefix)
            .values()
            .any(|(content, _)| match content {
                Content::String(held) => held == value,
                Content::Sorted(entries) => entries
                    .get(value)
                    .is_some_and(|score| score.parse::<f64>().expect("score") > now as f64),
            })
    }

    /// `after` holds nothing that `before` did not, and `before` lost nothing but what expired or
    /// was swept: no key or entry added, no value or score changed, and every expiry moved by the
    /// time that passed (`elapsed`, measured around both readings), neither out nor in.
    fn unchanged(
        primitive: Primitive,
        node: usize,
        before: &Keys,
        after: &Keys,
        elapsed: Duration,
    ) {
        let elapsed = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
        for (key, (content, pttl)) in after {
            let Some((was, was_pttl)) = before.get(key) else {
                panic!("{primitive:?}: node {node}: extend created {key}: {content:?}");
            };
            match (was, content) {
                (Content::Sorted(was), Content::Sorted(now)) => {
                    for (member, score) in now {
                        assert_eq!(
                            was.get(member),
                            Some(score),
                            "{primitive:?}: node {node}: extend added or renewed {member} in {key}"
                        );
                    }
                }
                (was, now) => assert_eq!(was, now, "{primitive:?}: node {node}: {key} changed"),
            }
            let moved = match (was_pttl, pttl) {
                (None, None) => 0,
                (Some(was), Some(now)) => was - now,
                _ => i64::MIN,
            };
            // PTTL is read in whole milliseconds, on the node's wall clock.
            assert!(
                (0..=elapsed + 5).contains(&moved),
                "{primitive:?}: node {node}: extend moved {key}'s expiry ({was_pttl:?} -> {pttl:?} ms \
                 in {elapsed} ms)"
            );
        }
    }

    #[tokio::test]
    async fn extend_after_expiry_fails_and_recreates_nothing_for_every_primitive() {
        let cluster = Cluster::start(3);
        let redlock = client(&cluster).await;
        for primitive in ALL {
            let name = format!("expired:{primitive:?}");
            let keeper = if primitive.shares() {
                Some(primitive.keeper(&redlock, &name).await)
            } else {
                None
            };
            let lock = primitive.lock(&redlock, &name, SHORT).await;
            eventually(
                &format!("{primitive:?}: the lock expired on every node"),
                || {
                    cluster
                        .nodes()
                        .iter()
                        .all(|node| !lives(node, &name, lock.value()))
                },
            )
            .await;
            let keeper = match keeper {
                Some(keeper) => keeper,
                None => primitive.keeper(&redlock, &name).await,
            };
            let started = std::time::Instant::now();
            let before: Vec<Keys> = cluster.nodes().iter().map(|n| keys(n, &name)).collect();
            assert!(
                before.iter().all(|keys| !keys.is_empty()),
                "{primitive:?}: the keeper holds on every node: {before:?}"
            );

            let until = lock.valid_until();
            match lock.extend().await {
                Err(error) => assert!(
                    primitive.refused(&error),
                    "{primitive:?}: extend after expiry: {error:?}"
                ),
                Ok(()) => panic!("{primitive:?}: extend after expiry succeeded"),
            }
            assert_eq!(
                lock.valid_until(),
                until,
                "{primitive:?}: a failed extend moves nothing"
            );
            let after: Vec<Keys> = cluster.nodes().iter().map(|n| keys(n, &name)).collect();
            let elapsed = started.elapsed();
            for (node, (before, after)) in before.iter().zip(&after).enumerate() {
                unchanged(primitive, node, before, after, elapsed);
            }

            keeper
                .extend()
                .await
                .unwrap_or_else(|e| panic!("{primitive:?}: keeper: {e:?}"));
            keeper
                .unlock()
                .await
                .unwrap_or_else(|e| panic!("{primitive:?}: keeper: {e:?}"));
        }
    }
}

/// A lock left to expire is not released when its handles are dropped; an explicit unlock of a
/// clone still releases it.
#[tokio::test]
async fn a_left_lock_stays_until_it_expires() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("leave:stays")
        .with_expiry(Duration::from_secs(30));
    let lock = mutex.lock().await.expect("lock");
    let clone = lock.clone();
    lock.leave();
    drop(clone);
    // A dropped handle releases in a background task: give one the chance to run.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(present(&cluster, "leave:stays").len(), 3);
    assert!(cluster.node(0).pttl("leave:stays") > 20_000);
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));

    let lock = redlock
        .new_mutex("leave:unlocked")
        .lock()
        .await
        .expect("lock");
    let clone = lock.clone();
    lock.leave();
    clone
        .unlock()
        .await
        .expect("an explicit unlock still releases");
    assert!(present(&cluster, "leave:unlocked").is_empty());
}
