//! A held lock: the caller's proof of ownership, a shared handle on the engine's held record.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(doc)]
use crate::Mutex;
use crate::engine::held::Held;
use crate::engine::metrics::Lost;
use crate::error::{Error, NodeError};
use crate::primitives::keep_alive::{KeepAlive, Renewal};
use crate::primitives::run;

/// A lock held on a quorum of nodes: of a [`Mutex`] (over one name or several), or one side of an
/// [`RwLock`](crate::RwLock).
///
/// Clones share one state: a heartbeat task can hold a clone and [`extend`](Lock::extend) while the
/// owner works, and [`unlock`](Lock::unlock) through any clone ends the lock for all of them.
///
/// Dropping the last clone without unlocking releases the lock in the background on the current
/// tokio runtime (best effort, never blocking); without a runtime the keys simply expire.
///
/// The lock is safe to rely on only until [`valid_until`](Lock::valid_until). Nothing extends it
/// automatically.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::{Duration, Instant};
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// let mutex = redlock.new_mutex("job:compact").with_expiry(Duration::from_secs(2));
/// let lock = mutex.lock().await?;
///
/// // A heartbeat keeps the lock while the owner works.
/// let heartbeat = {
///     let lock = lock.clone();
///     tokio::spawn(async move {
///         loop {
///             tokio::time::sleep(Duration::from_millis(500)).await;
///             if lock.extend().await.is_err() {
///                 break; // lost (or unlocked): the owner must stop using the resource
///             }
///         }
///     })
/// };
/// tokio::time::sleep(Duration::from_millis(1200)).await; // the work
/// assert!(lock.valid_until() > Instant::now());
/// lock.unlock().await?;
/// heartbeat.await.expect("heartbeat ends after unlock");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lock {
    held: Arc<Held>,
}

impl Lock {
    pub(crate) fn new(held: Held) -> Self {
        Lock {
            held: Arc::new(held),
        }
    }

    /// The moment until which the lock is safe to rely on, on this process's monotonic clock:
    /// start of the last successful acquire or extend + expiry - its duration - drift.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::{Duration, Instant};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let before = Instant::now();
    /// let lock = redlock.new_mutex("job:a").with_expiry(Duration::from_secs(5)).lock().await?;
    /// // At most expiry minus the 1 % drift allowance.
    /// assert!(lock.valid_until() <= before + Duration::from_millis(4950));
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// The lock value: the secret that proves ownership on the nodes. Hand it to another process
    /// to let it [`adopt`](Mutex::adopt) the lock; do not log it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:b").lock().await?;
    /// assert_eq!(lock.value().len(), 22); // 16 random bytes, base64url
    /// # Ok(())
    /// # }
    /// ```
    pub fn value(&self) -> &str {
        self.held.value()
    }

    /// The fingerprint of this lock's value, as [`inspect`](Mutex::inspect) and `redmutex status`
    /// show the holder's ([`LockState::fingerprint`](crate::LockState::fingerprint)): the first
    /// 12 hex digits of the value's SHA-1. Safe to log, unlike the value; a process that logs its
    /// own links what `status` shows to itself.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("job:fingerprinted");
    /// let lock = mutex.lock().await?;
    /// let state = mutex.inspect().await?;
    /// assert_eq!(state.fingerprint(), Some(lock.fingerprint().as_str()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fingerprint(&self) -> String {
        crate::engine::value::fingerprint(self.value())
    }

    /// The members that did not hold this lock at its last successful acquire or extension, with
    /// why: down, too slow, refusing (a wrong password, a missing permission), or holding
    /// something else. Empty when every member holds it. A lock held by a bare quorum is one
    /// failure from being lost: an application can warn about it, as `redmutex run` does.
    ///
    /// Members not awaited under [`with_fail_fast`](Mutex::with_fail_fast) are not listed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(2);
    /// # let mut urls = cluster.urls();
    /// # urls.push("redis://127.0.0.1:1/".to_owned());
    /// // Two members up, one where nothing listens.
    /// let redlock = redmutex::Redlock::connect(urls).await?;
    /// let lock = redlock.new_mutex("job:degraded").lock().await?;
    /// let failing = lock.failing_nodes();
    /// assert_eq!(failing.len(), 1);
    /// println!("{}", failing[0]); // redis://127.0.0.1:1/: Connection refused ...
    /// # Ok(())
    /// # }
    /// ```
    pub fn failing_nodes(&self) -> Vec<NodeError> {
        self.held.failing()
    }

    /// Lets go of the lock without releasing it: the nodes keep it until it expires, so nobody
    /// takes it before, and no handle of it sends a release when dropped (an explicit
    /// [`unlock`](Lock::unlock) of a clone still releases it). For a lock that must stay taken
    /// for a while after the work is done, without anyone renewing it: a cron job that runs on
    /// several hosts whose clocks are a second apart, and must run once per period however short
    /// it is, leaves its lock (taken with an expiry of at least the period's slack) instead of
    /// releasing it.
    ///
    /// The key expires on each node an expiry after the last extension that reached it (at the
    /// latest); [`valid_until`](Lock::valid_until) is when this process may no longer count on
    /// it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    ///
    /// let mutex = redlock.new_mutex("cron:hourly").with_expiry(Duration::from_secs(60));
    /// let lock = mutex.lock().await?;
    /// // ... the job, done in 200 ms ...
    /// lock.leave();
    /// // Another host whose cron fires a second later finds it taken.
    /// assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn leave(self) {
        self.held.leave();
    }

    /// The fencing token of this acquisition: `Some` when the mutex has
    /// [`with_fencing(true)`](Mutex::with_fencing), `None` otherwise (and for adopted handles, whose
    /// token is the original holder's to pass on).
    ///
    /// Tokens of one name strictly increase from one holder to the next, as long as the nodes keep
    /// their data or, where one lost its counter, their clocks agree (see
    /// [`with_fencing`](Mutex::with_fencing)). Pass the token with every write to the protected
    /// resource, and let the resource refuse a token lower than one it has already seen (see
    /// [`fenced_set`](crate::fenced_set)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("ledger").with_fencing(true);
    /// let first = mutex.lock().await?;
    /// let t1 = first.token().expect("fencing is on");
    /// first.unlock().await?;
    /// let second = mutex.lock().await?;
    /// assert!(second.token().expect("fencing is on") > t1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.held.token()
    }

    /// The resource name; for a multi-name lock, the first of its [`names`](Lock::names).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:c").lock().await?;
    /// assert_eq!(lock.name(), "job:c");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.held.resource().name()
    }

    /// Every name the lock covers: one for a lock of a [`Mutex`] over one name.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:c").lock().await?;
    /// let names: Vec<&str> = lock.names().collect();
    /// assert_eq!(names, ["job:c"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.held
            .resource()
            .target()
            .names()
            .iter()
            .map(|name| &**name)
    }

    /// Resets the expiry to the mutex's expiry on every node where the key still holds this lock's
    /// value (compare-and-PEXPIRE), and moves [`valid_until`](Lock::valid_until) on success. A
    /// multi-name lock counts a node only where every name still holds the value; a read lock
    /// renews its reader's entry where it is still live.
    ///
    /// Never called by the library on its own (but by [`run`](Lock::run) and
    /// [`keep_alive`](Lock::keep_alive)). Succeeds only on a quorum and only if validity is left
    /// after the round trip; a failure changes nothing (the lock is not released, `valid_until`
    /// stays). It never touches another owner's key.
    ///
    /// **Repair.** While the lock is valid, a node that lost the key (restarted without
    /// persistence, or a cluster member that failed over to a replica without it) gets it back:
    /// where the key is gone, the extend's script sets it again with this lock's value (`SET NX`,
    /// the expiry), as redsync's `WithSetNXOnExtend` does, so that the lock rests on as many nodes
    /// as it did, and one more failure does not lose it. Unlike that option, such a node does not
    /// count towards the quorum: the extend succeeds only where the compare-and-extend alone holds
    /// on a quorum, and when it does not, the keys it set again are deleted before it returns. So
    /// an expired lock is never re-created. A multi-name lock repairs a node where no name holds
    /// another value (every missing name is set again); a writer repairs as a mutex; a reader's
    /// entry and a semaphore permit are not repaired (putting one back is what their acquire
    /// decides). The safety argument is in `Held::extend` (`src/engine/held.rs`).
    ///
    /// With [`with_fail_fast(true)`](Mutex::with_fail_fast), it returns once the outcome is
    /// decided; after success the calls still in flight go on until the next extend or unlock
    /// stops them, after a failure they are stopped at once.
    ///
    /// # Errors
    ///
    /// [`Error::Taken`] (a quorum holds another owner's value), [`Error::Expired`] (on a quorum the key
    /// is gone or foreign, or no validity left), [`Error::NoQuorum`], [`Error::Unlocked`] (no I/O),
    /// [`Error::Config`] (no I/O).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the lock held as it was, with `valid_until`
    /// unchanged, possibly extended on some nodes, and possibly repaired on some (keys set while
    /// the lock was valid, which go with the unlock or expire); the next extend or unlock goes
    /// out after whatever of it was sent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:d").lock().await?;
    /// let before = lock.valid_until();
    /// tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// lock.extend().await?;
    /// assert!(lock.valid_until() > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self) -> Result<(), Error> {
        self.held.extend().await
    }

    /// Releases the lock on every node where the key still holds this lock's value
    /// (compare-and-delete). Nobody ever deletes a lock they do not hold. A multi-name lock
    /// deletes each name that holds its value, and counts a node only where all of them did; a
    /// read lock removes its reader's entry, and the last reader frees the name.
    ///
    /// Acquire calls of this lock still in flight (fail-fast) are stopped first: none of them can
    /// land after the release. After success, every clone's `extend` and `unlock` return
    /// [`Error::Unlocked`] without I/O.
    ///
    /// # Errors
    ///
    /// [`Error::Taken`] (a quorum holds another owner's value: this lock had expired and was taken),
    /// [`Error::Expired`] (on a quorum the key is gone or foreign), [`Error::NoQuorum`],
    /// [`Error::Unlocked`] (no I/O), [`Error::Config`] (no I/O). Whatever the error, every node that
    /// still held this lock's value and answered has released it. With
    /// [`with_fail_fast(true)`](Mutex::with_fail_fast), unlock returns once the outcome is decided,
    /// and the nodes it did not wait for are released in the background.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the lock released on the nodes that ran the release, and
    /// running on those it was still on its way to (a request already sent runs there). The
    /// handle is no longer valid ([`valid_until`](Lock::valid_until) ended when `unlock()`
    /// started), but not unlocked: call `unlock()` again, or drop the last clone, which releases
    /// the rest in the background.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:e").lock().await?;
    /// let clone = lock.clone();
    /// lock.unlock().await?;
    /// assert!(matches!(clone.unlock().await, Err(Error::Unlocked)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(&self) -> Result<(), Error> {
        self.held.release().await
    }

    /// Starts a heartbeat task that calls [`extend`](Lock::extend) every `interval` (a third of the
    /// expiry is a good choice) and reports when the lock is lost; see [`KeepAlive`](crate::KeepAlive).
    ///
    /// The library never extends on its own: this is the explicit, opt-in form of the heartbeat
    /// pattern. Must be called within a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("job:export");
    /// let lock = mutex.lock().await?;
    /// let keep = lock.keep_alive(mutex.expiry() / 3).max_extensions(100);
    /// // ... work, checking keep.end() or awaiting keep.ended() alongside ...
    /// lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep_alive(&self, interval: Duration) -> KeepAlive {
        KeepAlive::start(self.clone(), interval, self.round_trip())
    }

    /// Runs `work` while keeping the lock, and releases it when `work` is done; drops `work` if
    /// the lock cannot be kept, before its validity ends.
    ///
    /// This is the whole heartbeat pattern in one call: a [`KeepAlive`] renews the lock every
    /// third of the expiry (see [`run_renewing_every`](Lock::run_renewing_every) to choose),
    /// riding out a blip of the nodes, while `work` is polled in this task. When `work` completes
    /// while the lock is valid, the lock is unlocked and `work`'s output returned. When the lock
    /// is lost (taken, gone from a quorum, or too few nodes answer the renewals in time), `work` is
    /// dropped at once, at the latest a few milliseconds before [`valid_until`](Lock::valid_until),
    /// and `run` returns [`Error::Lost`] saying why; the lock is released in the background (what
    /// is left of it). Dropped, not detached: nothing of `work` runs after `run` returns. Tasks that
    /// `work` spawned are not part of it: keep them in a `tokio::task::JoinSet` that `work` owns,
    /// so that they are aborted with it.
    ///
    /// A lock handle adopted with [`Mutex::adopt`] (whose validity is over until an extend) or
    /// whose validity is nearly over is extended once before `work` starts.
    ///
    /// `work` is a future that yields now and then: a step that holds its thread (blocking I/O,
    /// a long computation without an await) cannot be dropped in the middle, and its result
    /// counts only if it came before `valid_until`. Run such steps with
    /// `tokio::task::spawn_blocking` and check [`valid_until`](Lock::valid_until) from them.
    ///
    /// **The fencing token, and the lock's other facts**, are read before the call, since `run`
    /// takes the lock: `let token = lock.token();`, then move `token` into `work`. For
    /// `valid_until` while it moves, keep a clone (`let handle = lock.clone();`) and read it from
    /// `work`; do not unlock through it (the lock is then no longer held, and `work` is dropped
    /// with [`Error::Lost`], cause [`Error::Unlocked`]).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock could not be kept (`work` dropped or, if it completed after the
    /// validity ended, its output discarded), or could not be renewed before `work` started;
    /// [`Error::Unlocked`] (no I/O, `work` never polled) when the lock was unlocked already;
    /// [`Error::Config`] (no I/O) for invalid settings. When `work` completed under the lock, the
    /// output is returned even if the unlock that follows fails (the lock then expires, or is
    /// released in the background).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` where it stands, stops the renewals, and releases the lock
    /// in the background on the current tokio runtime (once no other clone of it is left), as
    /// dropping a lock does; the keys expire on their own in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock
    ///     .new_mutex("report:nightly")
    ///     .with_expiry(Duration::from_millis(600))
    ///     .with_fencing(true);
    /// let lock = mutex.lock().await?;
    /// let token = lock.token().expect("fencing is on"); // read before: run takes the lock
    /// let report = lock
    ///     .run(async move {
    ///         tokio::time::sleep(Duration::from_millis(1500)).await; // 2.5 expiries of work
    ///         format!("written with token {token}") // each write carries the token
    ///     })
    ///     .await?;
    /// assert!(report.starts_with("written"));
    /// assert!(mutex.try_lock().await.is_ok(), "released when the work is done");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<F: Future>(self, work: F) -> Result<F::Output, Error> {
        let every = self.run_every()?;
        self.run_renewing_every(every, work).await
    }

    /// [`run`](Lock::run), renewing every `every` rather than every third of the expiry.
    ///
    /// A shorter period leaves more retries before a loss (each renewal that fails is tried again
    /// while one more can end before the validity), at the cost of one extend per period.
    ///
    /// # Errors
    ///
    /// As [`run`](Lock::run); [`Error::Config`] (no I/O) when `every` is zero, or not shorter than
    /// the expiry.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Lock::run).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("compaction").lock().await?; // an 8 s expiry
    /// let every = Duration::from_secs(1);
    /// lock.run_renewing_every(every, tokio::time::sleep(Duration::from_millis(50))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_renewing_every<F: Future>(
        self,
        every: Duration,
        work: F,
    ) -> Result<F::Output, Error> {
        let keep = self.start_run(every).await?;
        let outcome = run::under(&self, &keep, work).await;
        // No renewal may go out after the unlock (nor be left to repair what the unlock freed).
        keep.stop().await;
        let output = outcome?;
        // Whatever the unlock says, the work completed under the lock: a lock that was not
        // released everywhere expires, and this handle's drop releases what it can.
        let _ = self.unlock().await;
        Ok(output)
    }

    /// How often [`run`](Lock::run) renews: every third of the expiry.
    pub(crate) fn run_every(&self) -> Result<Duration, Error> {
        Ok(self.held.resource().plan()?.expiry / 3)
    }

    /// What a run does before its work starts: checks `every`, renews once when too little
    /// validity is left for the keep-alive to renew in time, and starts the keep-alive.
    pub(crate) async fn start_run(&self, every: Duration) -> Result<KeepAlive, Error> {
        let plan = self.held.resource().plan()?;
        if every.is_zero() || every >= plan.expiry {
            return Err(Error::config(
                "renew_every",
                format!(
                    "must be more than zero and less than the expiry ({:?}), got {every:?}",
                    plan.expiry
                ),
            ));
        }
        if self.is_unlocked() {
            return Err(Error::Unlocked);
        }
        let renewal = Renewal::new(every, plan.node_timeout);
        // Too little validity left for the keep-alive to renew in time (an adopted handle has
        // none): renewed once here, before the work starts.
        let now = Instant::now();
        if renewal.due(now, now, self.valid_until()).is_none() {
            self.extend().await.map_err(run::lost)?;
        }
        Ok(KeepAlive::start(self.clone(), every, plan.node_timeout))
    }

    /// How long one operation on the nodes may take: the node timeout.
    fn round_trip(&self) -> Duration {
        self.held
            .resource()
            .plan()
            .map_or(Duration::ZERO, |plan| plan.node_timeout)
    }

    /// Makes the drop of the last clone release on `runtime` (see `Held::release_on`).
    #[cfg(feature = "blocking")]
    pub(crate) fn release_on(&self, runtime: tokio::runtime::Handle) {
        self.held.release_on(runtime);
    }

    pub(crate) fn is_unlocked(&self) -> bool {
        self.held.is_unlocked()
    }

    /// Records that a keep-alive gave the lock up as lost (metrics).
    pub(crate) fn lost(&self, reason: Lost) {
        self.held.lost(reason);
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The value is a capability (it can unlock), so it stays out of logs.
        f.debug_struct("Lock")
            .field("name", &self.name())
            .field("valid_until", &self.held.valid_until())
            .field("unlocked", &self.held.is_unlocked())
            .finish_non_exhaustive()
    }
}
