//! Work under a lock or a leadership (`Lock::run`, `Leadership::run`): kept while the work runs,
//! released the moment it is done, and the work dropped (not left running) once the lock cannot be
//! kept, before the lock's validity ends.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Error, Lock};
use redmutex_testenv::Cluster;

use crate::support::{client, present};

/// Records when the future that owns it was dropped.
#[derive(Clone, Default)]
pub struct DropClock(Arc<StdMutex<Option<Instant>>>);

impl DropClock {
    /// A guard to move into the work: when the work is dropped, so is the guard.
    pub fn guard(&self) -> DropGuard {
        DropGuard(Arc::clone(&self.0))
    }

    /// When the guard was dropped, if it was.
    pub fn dropped(&self) -> Option<Instant> {
        *self.0.lock().unwrap()
    }
}

pub struct DropGuard(Arc<StdMutex<Option<Instant>>>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

/// Work that never ends on its own: only being dropped stops it.
pub async fn endless(guard: DropGuard) {
    let _guard = guard;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn run_keeps_the_lock_through_the_work_and_frees_it_at_once() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let rival = client(&cluster).await;
    let expiry = Duration::from_millis(600);
    let name = "run:kept";
    let lock = redlock
        .new_mutex(name)
        .with_expiry(expiry)
        .lock()
        .await
        .expect("free lock");
    let contender = rival.new_mutex(name).with_expiry(expiry);
    let work = async {
        // 3.5 expiries, a contender trying every 50 ms, refused every time.
        let until = Instant::now() + expiry * 7 / 2;
        let mut refusals = 0;
        while Instant::now() < until {
            match contender.try_lock().await {
                Err(Error::Taken { .. }) => refusals += 1,
                other => panic!("the contender was not refused: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        refusals
    };
    let refusals = lock.run(work).await.expect("kept through the work");
    assert!(refusals >= 20, "{refusals} tries");
    // Released before `run` returned, not left to expire.
    assert!(present(&cluster, name).is_empty());
    contender
        .try_lock()
        .await
        .expect("free the moment run returned");
}

/// The work's output comes back only if it came while the lock was valid; a lock already
/// unlocked runs nothing; a fenced lock's token is read before the call.
#[tokio::test]
async fn run_hands_back_the_output_and_refuses_an_unlocked_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("run:output").with_fencing(true);
    let lock = mutex.lock().await.expect("free lock");
    let token = lock.token().expect("fenced");
    let clone = lock.clone();
    assert_eq!(lock.run(async move { token }).await.expect("done"), token);
    assert!(
        matches!(clone.extend().await, Err(Error::Unlocked)),
        "unlocked when the work was done"
    );
    let unlocked = mutex.lock().await.expect("free lock");
    unlocked.clone().unlock().await.expect("unlock");
    let clock = DropClock::default();
    let guard = clock.guard();
    let ran = unlocked.run(async move { drop(guard) }).await;
    assert!(matches!(ran, Err(Error::Unlocked)), "{ran:?}");
}

/// Three nodes of five stopped while the work runs: the work is dropped, and `run` returns the
/// loss, no later than the stop plus the expiry (and before the lock's validity ends).
#[tokio::test]
async fn a_majority_stopped_drops_the_work_before_the_validity_ends() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let expiry = Duration::from_secs(1);
    let lock = redlock
        .new_mutex("run:stopped")
        .with_expiry(expiry)
        .lock()
        .await
        .expect("free lock");
    let handle = lock.clone();
    let clock = DropClock::default();
    let work = endless(clock.guard());
    let running = tokio::spawn(async move {
        let result = lock.run(work).await;
        (result, Instant::now())
    });
    tokio::time::sleep(expiry / 2).await;
    let stopped = Instant::now();
    for node in 0..3 {
        cluster.node(node).pause();
    }
    let (result, returned) = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("run returned")
        .expect("no panic");
    let dropped = clock.dropped().expect("the work was dropped");
    for node in 0..3 {
        cluster.node(node).resume();
    }
    match &result {
        // The keep-alive's report, with the nodes' answers; or, on a machine too loaded for it
        // to come first, the run's own timer at the end of the validity.
        Err(Error::Lost { cause }) => assert!(
            matches!(**cause, Error::NoQuorum { ok: 2, .. } | Error::Expired),
            "{cause}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(dropped <= returned);
    assert!(
        returned <= stopped + expiry,
        "returned {:?} after the stop",
        returned - stopped
    );
    assert!(dropped < handle.valid_until(), "dropped after the validity");
}

/// A clone that unlocks while the work runs ends the run: the work no longer runs under the lock.
#[tokio::test]
async fn unlocking_a_clone_drops_the_work() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let lock = redlock
        .new_mutex("run:unlocked")
        .with_expiry(Duration::from_millis(600))
        .lock()
        .await
        .expect("free lock");
    let clone: Lock = lock.clone();
    let clock = DropClock::default();
    let work = endless(clock.guard());
    let run = tokio::time::timeout(Duration::from_secs(5), lock.run(work));
    let (result, ()) = tokio::join!(run, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        clone.unlock().await.expect("unlock");
    });
    match result.expect("run returned") {
        Err(Error::Lost { cause }) => assert!(matches!(*cause, Error::Unlocked), "{cause}"),
        other => panic!("{other:?}"),
    }
    assert!(clock.dropped().is_some());
}

/// Every primitive's lock has `run`: a multi-name lock, both sides of a read-write lock and a
/// semaphore's permit are each kept through two expiries of work, and freed when it is done.
#[tokio::test]
async fn every_primitive_s_lock_runs_work() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let expiry = Duration::from_millis(600);
    let work = || tokio::time::sleep(expiry * 2);
    let multi = redlock
        .new_multi_mutex(["run:multi:a", "run:multi:b"])
        .with_expiry(expiry);
    multi
        .lock()
        .await
        .expect("free")
        .run(work())
        .await
        .expect("kept");
    let rwlock = redlock.new_rwlock("run:rw").with_expiry(expiry);
    rwlock
        .read()
        .await
        .expect("free")
        .run(work())
        .await
        .expect("kept");
    rwlock
        .write()
        .await
        .expect("free")
        .run(work())
        .await
        .expect("kept");
    let semaphore = redlock.new_semaphore("run:permits", 2).with_expiry(expiry);
    let permit = semaphore.acquire().await.expect("free");
    permit.run(work()).await.expect("kept");
    for name in ["run:multi:a", "run:multi:b", "run:rw", "run:permits"] {
        assert!(present(&cluster, name).is_empty(), "{name} left after run");
    }
}
