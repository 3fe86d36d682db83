//! Read-write locks (`Redlock::new_rwlock`) on real nodes: readers together, writers alone,
//! writers not starved, crashed readers expire, faults checked by the history checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redmutex::{Error, Lock, NodeErrorKind, Redlock, RwLock};
use redmutex_testenv::Cluster;

use crate::support;
use crate::support::history::History;
use crate::support::{client, eventually, present, within};

/// A read-write lock for tests that must finish in seconds: 2 s expiry, a generous 500 ms node
/// timeout, 20 ms between attempts.
fn quick(redlock: &Redlock, name: &str) -> RwLock {
    redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(20))
        .with_tries(3)
}

/// For heavy use: jittered retries of 0.5 to 5 ms, and tries enough that only a real failure
/// ends a call.
fn contended(redlock: &Redlock, name: &str) -> RwLock {
    redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_tries(100_000)
        .with_retry_delay_fn(|_| Duration::from_micros(500 + rand::random_range(0..4500)))
}

fn readers_key(name: &str) -> String {
    support::beside(name, ":readers")
}

fn mark_key(name: &str) -> String {
    support::beside(name, ":writer-waiting")
}

/// Live reader entries of `name` on node `i`.
fn readers(cluster: &Cluster, i: usize, name: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(readers_key(name))
        .query(&mut cluster.node(i).connection())
        .expect("ZCARD")
}

#[test]
fn the_checker_lets_readers_overlap_and_nothing_else() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let history = History::new();
    history.record_shared("r1", at(0), at(50), at(100));
    history.record_shared("r2", at(10), at(60), at(100));
    history.record("w1", at(60), at(70), at(100));
    assert!(history.overlaps().is_empty());
    history.record_shared("r3", at(65), at(80), at(100));
    history.record("w2", at(75), at(90), at(100));
    let overlaps = history.overlaps();
    let pairs: Vec<(&str, &str)> = overlaps
        .iter()
        .map(|(a, b)| (a.holder.as_str(), b.holder.as_str()))
        .collect();
    assert_eq!(pairs, [("w1", "r3"), ("r3", "w2")]);
}

#[tokio::test]
async fn eight_readers_hold_together() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let rwlock = quick(&redlock, "rw:together");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let rwlock = rwlock.clone();
        tasks.push(tokio::spawn(async move {
            let lock = rwlock.read().await.expect("readers do not exclude readers");
            let from = Instant::now();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let until = Instant::now().min(lock.valid_until());
            lock.unlock().await.expect("unlock");
            (from, until)
        }));
    }
    let mut held = Vec::new();
    for task in tasks {
        held.push(task.await.expect("task"));
    }
    let latest_start = held.iter().map(|h| h.0).max().expect("8 readers");
    let earliest_end = held.iter().map(|h| h.1).min().expect("8 readers");
    assert!(
        latest_start < earliest_end,
        "all 8 held at once for {:?}",
        earliest_end.saturating_duration_since(latest_start)
    );
    // The last reader's release freed the name on every node.
    assert!(present(&cluster, "rw:together").is_empty());
    assert!(present(&cluster, &readers_key("rw:together")).is_empty());
}

#[tokio::test]
async fn a_writer_waits_for_readers_then_excludes_new_readers() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "rw:waits";
    let rwlock = quick(&redlock, name).with_expiry(Duration::from_secs(10));
    let first = rwlock.read().await.expect("free");
    let second = rwlock.read().await.expect("readers share");
    for node in 0..5 {
        assert_eq!(readers(&cluster, node, name), 2);
        assert_eq!(
            cluster.node(node).get(name).as_deref(),
            Some("redmutex:readers")
        );
    }
    let writer = {
        let rwlock = rwlock.clone().with_tries(1000);
        tokio::spawn(async move { rwlock.write().await })
    };
    eventually("the writer marked every node", || {
        present(&cluster, &mark_key(name)).len() == 5
    })
    .await;
    // The mark keeps new readers out while the readers that hold stay.
    assert!(matches!(rwlock.try_read().await, Err(Error::Taken { .. })));
    first.unlock().await.expect("unlock");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "one reader still holds");
    second
        .extend()
        .await
        .expect("a reader that holds may extend");
    second.unlock().await.expect("unlock");
    let writer = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer gets in once the readers left")
        .expect("task")
        .expect("locked");
    assert!(
        present(&cluster, &mark_key(name)).is_empty(),
        "mark removed"
    );
    assert_eq!(
        support::holders(&cluster, name, writer.value()),
        [0, 1, 2, 3, 4]
    );
    assert!(matches!(rwlock.try_read().await, Err(Error::Taken { .. })));
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    writer.unlock().await.expect("unlock");
    rwlock
        .try_read()
        .await
        .expect("free again")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn a_mutex_on_the_name_is_a_writer() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "rw:mutex";
    let rwlock = quick(&redlock, name);
    let mutex = support::quick(&redlock, name);
    let multi = redlock.new_multi_mutex(["rw:other", name]).with_tries(1);
    let held = mutex.lock().await.expect("free");
    assert!(matches!(rwlock.try_read().await, Err(Error::Taken { .. })));
    held.unlock().await.expect("unlock");

    let reader = rwlock.read().await.expect("free");
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    assert!(matches!(multi.try_lock().await, Err(Error::Taken { .. })));
    // The refused mutexes left the readers as they were.
    for node in 0..3 {
        assert_eq!(readers(&cluster, node, name), 1);
    }
    assert!(present(&cluster, "rw:other").is_empty());
    reader.extend().await.expect("the reader still holds");
    reader.unlock().await.expect("unlock");
    mutex
        .try_lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn read_locks_extend_and_release_their_own_entries() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "rw:entries";
    let short = quick(&redlock, name).with_expiry(Duration::from_secs(2));
    let long = quick(&redlock, name).with_expiry(Duration::from_secs(10));
    let brief = short.read().await.expect("free");
    let lasting = long.read().await.expect("readers share");
    // The marker lives as long as the latest reader.
    assert!(cluster.node(0).pttl(name) > 9000);
    lasting.unlock().await.expect("unlock");
    // ... and is shortened when that reader leaves.
    let pttl = cluster.node(0).pttl(name);
    assert!((1..=2000).contains(&pttl), "PTTL {pttl}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    brief.extend().await.expect("extend");
    assert!(cluster.node(0).pttl(name) > 1900);
    assert!(cluster.node(0).pttl(&readers_key(name)) > 1900);
    // An entry lost on a quorum: the lock has expired.
    for node in [0, 1] {
        let _: i64 = redis::cmd("ZREM")
            .arg(readers_key(name))
            .arg(brief.value())
            .query(&mut cluster.node(node).connection())
            .expect("ZREM");
    }
    assert!(matches!(brief.extend().await, Err(Error::Expired)));
    assert!(matches!(brief.unlock().await, Err(Error::Expired)));
    // The last entry (node 2) went with the unlock, and the markers with no live reader left.
    within(Duration::from_secs(1), "the name is free", || {
        present(&cluster, name).is_empty()
    })
    .await;
    assert!(present(&cluster, &readers_key(name)).is_empty());
}

/// A reader that crashed (its handle neither unlocked nor dropped) holds writers out until its
/// entry expires, and no longer.
#[tokio::test]
async fn a_crashed_readers_entry_expires() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "rw:crashed";
    let crashed = quick(&redlock, name).with_expiry(Duration::from_secs(1));
    let reader = crashed.read().await.expect("free");
    let crashed_at = Instant::now();
    // A crash: nothing is released.
    std::mem::forget(reader);
    let other = quick(&redlock, name)
        .with_expiry(Duration::from_secs(10))
        .read()
        .await
        .expect("readers share");
    other.unlock().await.expect("unlock");
    let writer = quick(&redlock, name).with_tries(500);
    assert!(matches!(writer.try_write().await, Err(Error::Taken { .. })));
    let lock = writer.write().await.expect("the crashed entry expires");
    let waited = crashed_at.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // Where the writer got in, no reader is left. (A node whose release of `other` timed out on a
    // loaded machine still holds that entry, and the writer got in on the others.)
    let held = support::holders(&cluster, name, lock.value());
    assert!(held.len() >= 3, "{held:?}");
    let readers = present(&cluster, &readers_key(name));
    assert!(
        held.iter().all(|node| !readers.contains(node)),
        "{readers:?}"
    );
    lock.unlock().await.expect("unlock");
}

/// Entries of `name`'s readers on node `i` whose time has passed on the node's clock: readers that
/// vanished without a release, not yet swept.
fn expired_entries(cluster: &Cluster, i: usize, name: &str) -> i64 {
    let mut connection = cluster.node(i).connection();
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut connection).expect("TIME");
    redis::cmd("ZCOUNT")
        .arg(readers_key(name))
        .arg("-inf")
        .arg(seconds * 1000 + micros / 1000)
        .query(&mut connection)
        .expect("ZCOUNT")
}

/// `count` readers that crash (nothing is released) and whose entries then expire on every node.
async fn vanish(cluster: &Cluster, rwlock: &RwLock, count: i64) {
    for _ in 0..count {
        std::mem::forget(rwlock.read().await.expect("readers share"));
    }
    eventually(
        "the vanished readers' entries expired on every node",
        || (0..cluster.len()).all(|i| expired_entries(cluster, i, rwlock.name()) == count),
    )
    .await;
}

/// Readers vanish while others keep the name read-locked (the marker never lapses) and no writer
/// comes: the next reader to come, and the next to leave, sweeps their entries on every node.
#[tokio::test]
async fn vanished_readers_are_swept_while_readers_overlap() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "rw:vanished";
    let lasting = quick(&redlock, name).with_expiry(Duration::from_secs(30));
    let brief = quick(&redlock, name)
        .with_expiry(Duration::from_millis(400))
        .with_timeout_factor(0.5);
    let keeper = lasting.read().await.expect("free");

    vanish(&cluster, &brief, 30).await;
    let newcomer = lasting.read().await.expect("readers share");
    for i in 0..cluster.len() {
        assert_eq!(
            expired_entries(&cluster, i, name),
            0,
            "node {i}: a reader's acquire left expired entries"
        );
        assert_eq!(readers(&cluster, i, name), 2, "node {i}: the live readers");
    }

    vanish(&cluster, &brief, 30).await;
    newcomer.unlock().await.expect("unlock");
    for i in 0..cluster.len() {
        assert_eq!(
            expired_entries(&cluster, i, name),
            0,
            "node {i}: a reader's release left expired entries"
        );
        assert_eq!(readers(&cluster, i, name), 1, "node {i}: the keeper");
    }

    keeper.unlock().await.expect("unlock");
    assert!(present(&cluster, name).is_empty());
    assert!(present(&cluster, &readers_key(name)).is_empty());
}

/// 8 readers take turns without pause, so that some reader always holds; a writer still gets in
/// within a bound: the readers holding when it first marked the nodes leave within their hold.
#[tokio::test]
async fn a_writer_is_not_starved_by_readers_taking_turns() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "rw:starve";
    let rwlock = quick(&redlock, name).with_tries(100_000);
    let stop = Instant::now() + Duration::from_secs(8);
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for reader in 0..8u64 {
        let (rwlock, reads) = (rwlock.clone(), Arc::clone(&reads));
        tasks.push(tokio::spawn(async move {
            // Staggered starts: holds of 100 ms overlap, 12.5 ms apart.
            tokio::time::sleep(Duration::from_millis(reader * 12)).await;
            while Instant::now() < stop {
                let lock = rwlock.read().await.expect("readers get in");
                reads.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                lock.unlock().await.expect("unlock");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = reads.load(Ordering::Relaxed);
    assert!(before >= 8, "the readers run ({before} reads)");
    let asked = Instant::now();
    let writer = rwlock
        .clone()
        .with_tries(150) // 3 s of attempts at most
        .write()
        .await
        .expect("the writer gets in while readers take turns");
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    writer.unlock().await.expect("unlock");
    let after_writer = reads.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        reads.load(Ordering::Relaxed) > after_writer,
        "readers go on after the writer"
    );
    for task in tasks {
        task.await.expect("reader task");
    }
}

/// Readers and writers on one name under a fault: writers increment a counter with a
/// non-atomic read-modify-write, readers read it twice with a pause between (a writer in
/// between would change it); the history checker finds no writer overlapping anyone. Half the
/// writers are fenced, so that both the writer's plain entry and `write_acquire.lua` (which a
/// fenced writer runs) meet writers of both kinds.
async fn readers_and_writers_under(fault: impl FnOnce(&Cluster), heal: impl FnOnce(&Cluster)) {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "rw:faults";
    let rwlock = contended(&redlock, name);
    rwlock
        .write()
        .await
        .expect("warm-up")
        .unlock()
        .await
        .expect("unlock");
    let history = Arc::new(History::new());
    let counter = Arc::new(AtomicU64::new(0));
    let torn = Arc::new(AtomicU64::new(0));
    let (reads, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let fenced_writes = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for task in 0..8 {
        let writer = task < 4;
        let rwlock = rwlock.clone().with_fencing(task % 2 == 1);
        let (history, counter) = (Arc::clone(&history), Arc::clone(&counter));
        let (torn, reads, writes) = (Arc::clone(&torn), Arc::clone(&reads), Arc::clone(&writes));
        let fenced_writes = Arc::clone(&fenced_writes);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let lock: Lock = if writer {
                    rwlock.write().await
                } else {
                    rwlock.read().await
                }
                .expect("a quorum is up");
                let from = Instant::now();
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..3))).await;
                if writer {
                    counter.store(seen + 1, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::Relaxed);
                    if lock.token().is_some() {
                        fenced_writes.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    if counter.load(Ordering::SeqCst) != seen {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                let until = Instant::now();
                let holder = format!("task{task}:{}", lock.value());
                if writer {
                    history.record(&holder, from, until, lock.valid_until());
                } else {
                    history.record_shared(&holder, from, until, lock.valid_until());
                }
                // A node may be down: an unlock without a quorum leaves the rest to expire.
                let _ = lock.unlock().await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    fault(&cluster);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    heal(&cluster);
    for task in tasks {
        task.await.expect("task");
    }
    let (reads, writes) = (
        reads.load(Ordering::Relaxed),
        writes.load(Ordering::Relaxed),
    );
    println!("{reads} reads, {writes} writes, {} sections", history.len());
    let fenced_writes = fenced_writes.load(Ordering::Relaxed);
    assert!(reads > 0 && writes > 0, "{reads} reads, {writes} writes");
    assert!(
        fenced_writes > 0 && fenced_writes < writes,
        "{fenced_writes} of {writes} writes fenced: both entries ran"
    );
    assert_eq!(counter.load(Ordering::SeqCst), writes, "lost increments");
    assert_eq!(torn.load(Ordering::Relaxed), 0, "a reader saw a write");
    history.assert_exclusive();
}

#[tokio::test]
async fn readers_and_writers_under_a_killed_node() {
    readers_and_writers_under(|cluster| cluster.node(1).kill(), |_| {}).await;
}

#[tokio::test]
async fn readers_and_writers_under_a_paused_node() {
    readers_and_writers_under(
        |cluster| cluster.node(3).pause(),
        |cluster| cluster.node(3).resume(),
    )
    .await;
}

fn waking(redlock: &Redlock, name: &str) -> RwLock {
    redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(30))
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(100)
        .with_wake_on_release(true)
}

async fn subscribed(cluster: &Cluster, name: &str) {
    let channel = format!("redmutex:released:{name}");
    eventually("the waiter subscribed", || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.subscribers(&channel) == 1)
    })
    .await;
    // Its attempt after subscribing is done.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// The last reader's release wakes a waiting writer; the writer's release wakes waiting readers.
/// Their retry delay is a minute: only the release notice can end their wait within the test.
#[tokio::test]
async fn releases_wake_waiting_writers_and_readers() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let waiters = client(&cluster).await;
    let name = "rw:wake";
    let first = waking(&redlock, name).read().await.expect("free");
    let second = waking(&redlock, name).read().await.expect("readers share");
    let writer = {
        let rwlock = waking(&waiters, name);
        tokio::spawn(async move { rwlock.write().await })
    };
    subscribed(&cluster, name).await;
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    let writer = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the last reader's release woke the writer")
        .expect("task")
        .expect("locked");

    let reader = {
        let rwlock = waking(&redlock, name);
        tokio::spawn(async move { rwlock.read().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    writer.unlock().await.expect("unlock");
    let reader = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the writer's release woke the reader")
        .expect("task")
        .expect("locked");
    reader.unlock().await.expect("unlock");
}

/// Another program wrote a key of another type where the readers live, or at the name: a node
/// error with the server's complaint, no panic, nothing changed.
#[tokio::test]
async fn keys_of_another_type_are_node_errors() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "rw:wrongtype";
    for node in cluster.nodes() {
        node.set(&readers_key(name), "not a sorted set");
    }
    let error = quick(&redlock, name)
        .with_tries(1)
        .read()
        .await
        .expect_err("no node can take a reader");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(failures.len(), 3);
    for failure in failures {
        assert!(
            matches!(&failure.kind, NodeErrorKind::Redis(e) if e.to_string().contains("WRONGTYPE")),
            "{failure:?}"
        );
    }
    assert!(present(&cluster, name).is_empty());
    assert_eq!(
        cluster.node(0).get(&readers_key(name)).as_deref(),
        Some("not a sorted set")
    );

    // A hash at the name itself: readers and writers are refused, the hash stays.
    let name = "rw:hash";
    for node in cluster.nodes() {
        let _: () = redis::cmd("HSET")
            .arg(name)
            .arg("f")
            .arg("v")
            .query(&mut node.connection())
            .expect("HSET");
    }
    let rwlock = quick(&redlock, name).with_tries(1);
    for result in [rwlock.read().await, rwlock.write().await] {
        let Err(Error::NoQuorum { failures, .. }) = &result else {
            panic!("expected NoQuorum, got {result:?}");
        };
        assert!(
            failures
                .iter()
                .all(|f| matches!(&f.kind, NodeErrorKind::Redis(_))),
            "{failures:?}"
        );
    }
    assert!(
        present(&cluster, &readers_key(name)).is_empty(),
        "no entry left"
    );
    for node in cluster.nodes() {
        let kind: String = redis::cmd("TYPE")
            .arg(name)
            .query(&mut node.connection())
            .expect("TYPE");
        assert_eq!(kind, "hash");
    }
}

/// Calls of `command` (lower case, e.g. `evalsha`) that node `i` has served.
fn calls(cluster: &Cluster, i: usize, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut cluster.node(i).connection())
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

/// The writer's plain entry (`SET NX PX GET` and `EXISTS` on the mark) decides as the write
/// acquire script would, in each state it can find: a free name with a mark standing (taken, and
/// the mark removed, with no script), the readers' marker with no live reader left (the script
/// runs and takes the name), and live readers (the script runs and refuses, leaving the mark).
#[tokio::test]
async fn the_plain_write_entry_decides_as_the_script() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let name = "rw:plain";
    let rwlock = quick(&redlock, name).with_tries(1);

    // A free name where another writer's mark stands: the writer gets in and removes the mark,
    // as the script does, without running it.
    for node in cluster.nodes() {
        node.set_px(&mark_key(name), "another writer", Duration::from_secs(60));
    }
    let scripts = calls(&cluster, 0, "evalsha") + calls(&cluster, 0, "eval");
    let writer = rwlock.try_write().await.expect("a free name");
    assert_eq!(
        calls(&cluster, 0, "evalsha") + calls(&cluster, 0, "eval"),
        scripts,
        "a free name takes no script"
    );
    assert_eq!(
        support::holders(&cluster, name, writer.value()),
        [0, 1, 2, 3, 4]
    );
    assert!(
        present(&cluster, &mark_key(name)).is_empty(),
        "the writer that got in removed the mark"
    );
    writer.unlock().await.expect("unlock");

    // The readers' marker with no live reader (its entries expired; the marker outlived them):
    // the script sweeps and takes the name.
    for node in cluster.nodes() {
        node.set_px(name, "redmutex:readers", Duration::from_secs(60));
        let _: () = redis::cmd("ZADD")
            .arg(readers_key(name))
            .arg(1)
            .arg("a reader long gone")
            .query(&mut node.connection())
            .expect("ZADD");
    }
    let writer = rwlock
        .try_write()
        .await
        .expect("no live reader: the name is free for a writer");
    assert_eq!(
        support::holders(&cluster, name, writer.value()),
        [0, 1, 2, 3, 4]
    );
    writer.unlock().await.expect("unlock");

    // A live reader: the writer is refused and marks every node; the reader keeps its entry.
    let reader = quick(&redlock, name).read().await.expect("free");
    assert!(
        matches!(rwlock.try_write().await, Err(Error::Taken { .. })),
        "a writer must not get in while a reader holds"
    );
    assert_eq!(present(&cluster, &mark_key(name)).len(), 5, "marked");
    for node in 0..5 {
        assert_eq!(readers(&cluster, node, name), 1);
        assert_eq!(
            cluster.node(node).get(name).as_deref(),
            Some("redmutex:readers")
        );
    }
    reader.unlock().await.expect("unlock");
}
