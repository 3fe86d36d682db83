//! Dropping a `lock()` future at any point must not keep others out past the expiry.

use std::time::{Duration, Instant};

use redmutex_testenv::Cluster;

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

// Each `# Cancel safety` section of the public API, dropped where it speaks of. Most of them pause
// one node of three, so that the call is surely in flight (waiting for that node) when it is
// dropped, with an expiry long enough (30 s) that only a release can explain a key gone within
// a second.

/// The expiry of the locks below: far longer than the tests, so keys gone are keys released.
const LONG: Duration = Duration::from_secs(30);
/// When a call waiting for a paused node is dropped: its other nodes answered long before.
const CUT: Duration = Duration::from_millis(200);

/// The nodes among `nodes` (none of them paused) where `key` exists.
fn on(cluster: &redmutex_testenv::Cluster, nodes: &[usize], key: &str) -> Vec<usize> {
    nodes
        .iter()
        .copied()
        .filter(|&node| cluster.node(node).exists(key))
        .collect()
}

/// `Mutex::lock` and `Mutex::try_lock` dropped after their `SET`s reached two nodes, while they
/// wait for the third: what they set is released at once, the paused node's too once it runs
/// what was queued for it (its `SET`, then the release).
#[tokio::test]
async fn a_lock_dropped_after_its_sets_landed_is_released_at_once() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    for (round, one_attempt) in [(0, false), (1, true)] {
        let name = format!("cancel:landed:{round}");
        let mutex = quick(&redlock, &name).with_expiry(LONG);
        crate::support::warm_up(&mutex).await;
        cluster.node(2).pause();
        let dropped = if one_attempt {
            tokio::time::timeout(CUT, mutex.try_lock()).await.is_err()
        } else {
            tokio::time::timeout(CUT, mutex.lock()).await.is_err()
        };
        assert!(dropped, "{name}: the call did not wait for the paused node");
        within(
            Duration::from_secs(1),
            "released on the running nodes",
            || on(&cluster, &[0, 1], &name).is_empty(),
        )
        .await;
        cluster.node(2).resume();
        within(
            Duration::from_secs(2),
            "released on the resumed node",
            || on(&cluster, &[2], &name).is_empty(),
        )
        .await;
        next_locker_gets_in_at_once(&other, &name).await;
    }
}

/// `Lock::extend` dropped in flight: the lock stays held as it was, `valid_until` unchanged, and
/// the next extend and unlock work.
#[tokio::test]
async fn an_extend_dropped_in_flight_leaves_the_lock_held() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "cancel:extend";
    let lock = quick(&redlock, name)
        .with_expiry(LONG)
        .lock()
        .await
        .expect("free lock");
    let before = lock.valid_until();
    cluster.node(2).pause();
    assert!(tokio::time::timeout(CUT, lock.extend()).await.is_err());
    assert_eq!(lock.valid_until(), before);
    assert_eq!(on(&cluster, &[0, 1], name), [0, 1]);
    cluster.node(2).resume();
    lock.extend().await.expect("still held");
    assert!(lock.valid_until() > before);
    lock.unlock().await.expect("unlock");
    assert!(present(&cluster, name).is_empty());
}

/// `Lock::unlock` dropped in flight: released where it ran, no longer valid, and the last clone's
/// drop releases the rest.
#[tokio::test]
async fn an_unlock_dropped_in_flight_is_finished_by_the_drop() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    let name = "cancel:unlock";
    let lock = quick(&redlock, name)
        .with_expiry(LONG)
        .lock()
        .await
        .expect("free lock");
    cluster.node(2).pause();
    assert!(tokio::time::timeout(CUT, lock.unlock()).await.is_err());
    assert!(on(&cluster, &[0, 1], name).is_empty());
    assert!(lock.valid_until() <= Instant::now());
    drop(lock);
    cluster.node(2).resume();
    within(Duration::from_secs(2), "released everywhere", || {
        present(&cluster, name).is_empty()
    })
    .await;
    next_locker_gets_in_at_once(&other, name).await;
    // Dropped before it sent anything: the lock's drop releases it all.
    let lock = quick(&redlock, name)
        .with_expiry(LONG)
        .lock()
        .await
        .expect("free lock");
    drop(lock.unlock());
    assert_eq!(present(&cluster, name), [0, 1, 2]);
    drop(lock);
    within(Duration::from_secs(1), "released by the drop", || {
        present(&cluster, name).is_empty()
    })
    .await;
}

/// `Lock::run` dropped from outside: the work is dropped with it, the renewals stop, and the lock
/// is released in the background.
#[tokio::test]
async fn a_run_dropped_from_outside_drops_the_work_and_the_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "cancel:run";
    let expiry = Duration::from_secs(3);
    let lock = quick(&redlock, name)
        .with_expiry(expiry)
        .lock()
        .await
        .expect("free lock");
    let clock = crate::run::DropClock::default();
    let work = crate::run::endless(clock.guard());
    // Past the first renewal (a third of the expiry).
    let cut = expiry / 2;
    assert!(tokio::time::timeout(cut, lock.run(work)).await.is_err());
    let after = Instant::now();
    assert!(clock.dropped().is_some_and(|dropped| dropped <= after));
    within(Duration::from_millis(500), "the lock is released", || {
        present(&cluster, name).is_empty()
    })
    .await;
    // No renewal after: none would find the key, and none is sent.
    let extends = cluster.node(0).calls("evalsha");
    tokio::time::sleep(expiry / 2).await;
    assert_eq!(cluster.node(0).calls("evalsha"), extends);
}

/// `RwLock::read`/`try_read`/`write`/`try_write` and `Semaphore::acquire`/`try_acquire` dropped
/// in flight: what they took is given back at once.
#[tokio::test]
async fn reads_writes_and_permits_dropped_in_flight_are_given_back() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for round in 0..6 {
        let name = format!("cancel:rw-sem:{round}");
        let rwlock = redlock
            .new_rwlock(name.as_str())
            .with_expiry(LONG)
            .with_timeout_factor(0.05);
        let semaphore = redlock
            .new_semaphore(name.as_str(), 2)
            .with_expiry(LONG)
            .with_timeout_factor(0.05);
        // Warm the connections (and the scripts) before the pause.
        rwlock
            .read()
            .await
            .expect("read")
            .unlock()
            .await
            .expect("unlock");
        cluster.node(2).pause();
        let dropped = match round {
            0 => tokio::time::timeout(CUT, rwlock.read()).await.is_err(),
            1 => tokio::time::timeout(CUT, rwlock.try_read()).await.is_err(),
            2 => tokio::time::timeout(CUT, rwlock.write()).await.is_err(),
            3 => tokio::time::timeout(CUT, rwlock.try_write()).await.is_err(),
            4 => tokio::time::timeout(CUT, semaphore.acquire())
                .await
                .is_err(),
            _ => tokio::time::timeout(CUT, semaphore.try_acquire())
                .await
                .is_err(),
        };
        assert!(dropped, "{name}: the call did not wait for the paused node");
        within(
            Duration::from_secs(1),
            "given back on the running nodes",
            || on(&cluster, &[0, 1], &name).is_empty(),
        )
        .await;
        cluster.node(2).resume();
        within(
            Duration::from_secs(2),
            "given back on the resumed node",
            || on(&cluster, &[2], &name).is_empty(),
        )
        .await;
    }
}

/// `Election::campaign` dropped in flight lets another candidate lead at once; so does
/// `Leadership::resign` dropped in flight (the leadership goes with the future).
#[tokio::test]
async fn campaigns_and_resignations_dropped_in_flight_let_another_lead() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    let election = |redlock: &redmutex::Redlock| {
        redlock
            .new_election("cancel:lead")
            .with_expiry(LONG)
            .with_retry_delay(Duration::from_millis(20))
    };
    let first = election(&redlock).campaign("a").await.expect("elected");
    first.resign().await.expect("resign");
    cluster.node(2).pause();
    assert!(
        tokio::time::timeout(CUT, election(&redlock).campaign("a"))
            .await
            .is_err()
    );
    cluster.node(2).resume();
    let second = tokio::time::timeout(Duration::from_secs(2), election(&other).campaign("b"))
        .await
        .expect("elected at once, not after the lease")
        .expect("elected");
    cluster.node(2).pause();
    assert!(tokio::time::timeout(CUT, second.resign()).await.is_err());
    cluster.node(2).resume();
    let third = tokio::time::timeout(Duration::from_secs(2), election(&redlock).campaign("c"))
        .await
        .expect("elected at once, not after the lease")
        .expect("elected");
    third.resign().await.expect("resign");
}

/// `Leadership::lost` and `KeepAlive::ended` cut short, then awaited again: the end comes.
#[tokio::test]
async fn waiting_for_an_end_can_be_cut_and_taken_up_again() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let leadership = redlock
        .new_election("cancel:lost")
        .with_expiry(Duration::from_millis(600))
        .campaign("a")
        .await
        .expect("elected");
    let lock = quick(&redlock, "cancel:ended")
        .with_expiry(Duration::from_millis(600))
        .lock()
        .await
        .expect("free lock");
    let keep = lock.keep_alive(Duration::from_millis(200));
    assert!(tokio::time::timeout(CUT, leadership.lost()).await.is_err());
    assert!(tokio::time::timeout(CUT, keep.ended()).await.is_err());
    for node in 0..3 {
        cluster.node(node).del("cancel:lost");
        cluster.node(node).del("cancel:ended");
    }
    let lost = tokio::time::timeout(Duration::from_secs(2), leadership.lost()).await;
    assert!(
        matches!(lost, Ok(redmutex::LeadershipEnd::Lost(_))),
        "{lost:?}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(2), keep.ended()).await;
    assert!(
        matches!(ended, Ok(redmutex::KeepAliveEnd::Lost(_))),
        "{ended:?}"
    );
}

/// `Election::leader` and the three `inspect`s dropped halfway change nothing on the nodes.
#[tokio::test]
async fn readings_dropped_halfway_change_nothing() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let election = redlock.new_election("cancel:read-lead").with_expiry(LONG);
    let leadership = election.campaign("a").await.expect("elected");
    let mutex = quick(&redlock, "cancel:read-mutex").with_expiry(LONG);
    let lock = mutex.lock().await.expect("free lock");
    let rwlock = redlock.new_rwlock("cancel:read-rw").with_expiry(LONG);
    let reader = rwlock.read().await.expect("free name");
    let semaphore = redlock
        .new_semaphore("cancel:read-sem", 2)
        .with_expiry(LONG);
    let permit = semaphore.acquire().await.expect("a free permit");
    let keys = [
        "cancel:read-lead",
        "cancel:read-mutex",
        "cancel:read-rw",
        "cancel:read-sem",
    ];
    let snapshot = |cluster: &Cluster| -> Vec<Option<String>> {
        keys.iter()
            .flat_map(|key| (0..2).map(move |node| (node, *key)))
            .map(|(node, key)| match key {
                "cancel:read-sem" => cluster.node(node).exists(key).then(String::new),
                key => cluster.node(node).get(key),
            })
            .collect()
    };
    let before = snapshot(&cluster);
    cluster.node(2).pause();
    assert!(tokio::time::timeout(CUT, election.leader()).await.is_err());
    assert!(tokio::time::timeout(CUT, mutex.inspect()).await.is_err());
    assert!(tokio::time::timeout(CUT, rwlock.inspect()).await.is_err());
    assert!(
        tokio::time::timeout(CUT, semaphore.inspect())
            .await
            .is_err()
    );
    assert_eq!(snapshot(&cluster), before);
    cluster.node(2).resume();
    let leader = election.leader().await.expect("read").expect("a leader");
    assert_eq!(leader.epoch, leadership.epoch());
    assert!(mutex.inspect().await.expect("read").is_held());
    lock.unlock().await.expect("still held");
    reader.unlock().await.expect("still held");
    permit.unlock().await.expect("still held");
    leadership.resign().await.expect("still leading");
}

/// `Election::watch`: a reading cut short again and again (each shorter than one reading takes,
/// with a node paused) still completes: it goes on at each call rather than starting over.
#[tokio::test]
async fn a_watch_reading_cut_short_goes_on_at_the_next_call() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let election = redlock
        .new_election("cancel:watch")
        .with_expiry(Duration::from_secs(4))
        .with_timeout_factor(0.25);
    let leadership = election.campaign("a").await.expect("elected");
    let mut watch = Box::pin(election.watch());
    cluster.node(2).pause();
    let started = Instant::now();
    let mut cuts = 0;
    let reading = loop {
        // A reading waits a whole node timeout (1 s) for the paused node.
        match tokio::time::timeout(
            Duration::from_millis(50),
            futures::StreamExt::next(&mut watch),
        )
        .await
        {
            Ok(reading) => break reading,
            Err(_) => cuts += 1,
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never completed"
        );
    };
    cluster.node(2).resume();
    assert!(cuts >= 10, "{cuts} cuts");
    let leader = reading
        .expect("a reading")
        .expect("read")
        .expect("a leader");
    assert_eq!(leader.epoch, leadership.epoch());
    leadership.resign().await.expect("resign");
}

/// `force_unlock` dropped in flight (a mutex's, a read-write lock's, a semaphore's): the name is
/// free where it ran, and where it was on its way to once that node runs it.
#[tokio::test]
async fn a_force_unlock_dropped_in_flight_frees_where_it_went() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = quick(&redlock, "cancel:force-mutex").with_expiry(LONG);
    let rwlock = redlock.new_rwlock("cancel:force-rw").with_expiry(LONG);
    let semaphore = redlock
        .new_semaphore("cancel:force-sem", 2)
        .with_expiry(LONG);
    let _held = (
        mutex.lock().await.expect("free"),
        rwlock.write().await.expect("free"),
        semaphore.acquire().await.expect("free"),
    );
    cluster.node(2).pause();
    assert!(
        tokio::time::timeout(CUT, mutex.force_unlock())
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(CUT, rwlock.force_unlock())
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(CUT, semaphore.force_unlock())
            .await
            .is_err()
    );
    for name in ["cancel:force-mutex", "cancel:force-rw", "cancel:force-sem"] {
        assert!(on(&cluster, &[0, 1], name).is_empty(), "{name}");
    }
    cluster.node(2).resume();
    within(Duration::from_secs(2), "freed on the resumed node", || {
        on(&cluster, &[2], "cancel:force-mutex").is_empty()
            && on(&cluster, &[2], "cancel:force-rw").is_empty()
            && on(&cluster, &[2], "cancel:force-sem").is_empty()
    })
    .await;
}

/// `Checkup::run` cut at every point of its permissions round (replies delayed 20 ms each way,
/// so that cuts land between its lock and its unlock): whatever scratch key it leaves expires on
/// its own.
#[tokio::test]
async fn a_checkup_cut_anywhere_leaves_only_an_expiring_scratch_key() {
    let cluster = Cluster::start(1);
    let proxies = cluster.proxies();
    proxies.set_mode(
        &[0],
        redmutex_testenv::Mode::Delay(Duration::from_millis(20)),
    );
    let redlock = redmutex::Redlock::connect(proxies.urls())
        .await
        .expect("valid URLs");
    let checkup = redlock.checkup().with_scratch_prefix("cancel:scratch:");
    let mut left = 0;
    for millis in (0..400).step_by(10) {
        let _ = tokio::time::timeout(Duration::from_millis(millis), checkup.run()).await;
        let mut connection = cluster.node(0).connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("cancel:scratch:*")
            .query(&mut connection)
            .expect("KEYS");
        for key in keys {
            let pttl = cluster.node(0).pttl(&key);
            // -2: gone between KEYS and PTTL, deleted by the cut checkup's own unlock, which was
            // still on its delayed way to the node. A key without an expiry (-1) is the failure.
            if pttl == -2 {
                continue;
            }
            assert!(pttl > 0 && pttl <= 10_000, "{key}: PTTL {pttl}");
            cluster.node(0).del(&key);
            left += 1;
        }
    }
    assert!(left > 0, "no cut landed while the scratch key was set");
}

/// `fenced_set` dropped after it was sent: the write may still happen; the same call again is
/// accepted.
#[tokio::test]
async fn a_fenced_set_dropped_after_it_was_sent_may_still_apply() {
    let cluster = Cluster::start(1);
    let client = redis::Client::open(cluster.node(0).url()).expect("a URL");
    let mut store = client
        .get_multiplexed_async_connection()
        .await
        .expect("connected");
    assert!(
        redmutex::fenced_set(&mut store, "cancel:fenced", "warm", 1)
            .await
            .expect("written")
    );
    cluster.node(0).pause();
    let cut = tokio::time::timeout(
        CUT,
        redmutex::fenced_set(&mut store, "cancel:fenced", "v2", 2),
    );
    assert!(cut.await.is_err());
    cluster.node(0).resume();
    within(Duration::from_secs(2), "the dropped write applied", || {
        cluster.node(0).get("cancel:fenced").as_deref() == Some("v2")
    })
    .await;
    assert!(
        redmutex::fenced_set(&mut store, "cancel:fenced", "v2", 2)
            .await
            .expect("written"),
        "the same write again is accepted"
    );
}

/// `Redlock::connect` and `Redlock::from_clients` complete at their first poll, a node paused or
/// not; unpolled, they connect nowhere.
#[tokio::test]
async fn connecting_waits_for_no_node() {
    use futures::FutureExt;
    let cluster = Cluster::start(1);
    let before = cluster.node(0).clients().len();
    drop(redmutex::Redlock::connect(cluster.urls()));
    let clients = vec![redis::Client::open(cluster.node(0).url()).expect("a URL")];
    drop(redmutex::Redlock::from_clients(clients.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cluster.node(0).clients().len(), before);
    cluster.node(0).pause();
    let connected = redmutex::Redlock::connect(cluster.urls()).now_or_never();
    assert!(matches!(connected, Some(Ok(_))));
    let built = redmutex::Redlock::from_clients(clients).now_or_never();
    assert!(matches!(built, Some(Ok(_))));
    cluster.node(0).resume();
}

/// `Leadership::run` dropped from outside: the work is dropped with it, and the leadership is
/// resigned in the background, so another candidate leads at once.
#[tokio::test]
async fn a_leader_s_run_dropped_from_outside_resigns() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    let election = |redlock: &redmutex::Redlock| {
        redlock
            .new_election("cancel:lead-run")
            .with_expiry(LONG)
            .with_retry_delay(Duration::from_millis(20))
    };
    let leadership = election(&redlock).campaign("a").await.expect("elected");
    let clock = crate::run::DropClock::default();
    let work = crate::run::endless(clock.guard());
    assert!(
        tokio::time::timeout(CUT, leadership.run(work))
            .await
            .is_err()
    );
    assert!(clock.dropped().is_some());
    let next = tokio::time::timeout(Duration::from_secs(2), election(&other).campaign("b"))
        .await
        .expect("elected at once, not after the lease")
        .expect("elected");
    next.resign().await.expect("resign");
}
