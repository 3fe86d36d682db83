//! The held lock of the blocking API, its keep-alive, and work run under it on the caller's
//! thread.

use std::fmt;
use std::time::{Duration, Instant};

use crate::blocking::{Background, refuse_inside_runtime, same_as_async};
use crate::error::Error;
use crate::primitives::keep_alive::KeepAliveEnd;
use crate::primitives::run;

/// A lock held on a quorum of nodes: [`redmutex::Lock`](crate::Lock) whose
/// [`extend`](Lock::extend) and [`unlock`](Lock::unlock) block.
///
/// Clones share one state, and every method takes `&self`: a thread can hold a clone and extend
/// while another works, and an unlock through any clone ends the lock for all of them.
/// `Send + Sync`.
///
/// Dropping the last clone without unlocking releases the lock in the background on redmutex's
/// runtime, without blocking and without a runtime of the caller's (see
/// [the module](crate::blocking#drop)).
///
/// The lock is safe to rely on only until [`valid_until`](Lock::valid_until). Nothing extends it
/// on its own: [`run`](Lock::run) or [`keep_alive`](Lock::keep_alive) do, when asked.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
///
/// let mutex = redlock.new_mutex("job:compact").with_expiry(Duration::from_secs(2));
/// let lock = mutex.lock()?;
/// // A heartbeat thread keeps the lock while this one works.
/// let heartbeat = std::thread::spawn({
///     let lock = lock.clone();
///     move || {
///         while lock.extend().is_ok() {
///             std::thread::sleep(Duration::from_millis(500));
///         }
///     }
/// });
/// std::thread::sleep(Duration::from_millis(1200)); // the work
/// lock.unlock()?; // the heartbeat's next extend fails: it stops
/// heartbeat.join().expect("no panic");
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Lock {
    inner: crate::Lock,
    background: Background,
}

impl Lock {
    /// A handle on `inner`, which must release on `background` (see `Background::own`).
    pub(crate) fn new(inner: crate::Lock, background: Background) -> Lock {
        Lock { inner, background }
    }

    /// The moment until which the lock is safe to rely on, as
    /// [`Lock::valid_until`](crate::Lock::valid_until).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let before = Instant::now();
    /// let lock = redlock.new_mutex("job:a").with_expiry(Duration::from_secs(5)).lock()?;
    /// assert!(lock.valid_until() <= before + Duration::from_millis(4950)); // minus the drift
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.inner.valid_until()
    }

    /// The lock value, the secret that proves ownership, as
    /// [`Lock::value`](crate::Lock::value): hand it to another process to
    /// [`adopt`](crate::blocking::Mutex::adopt) the lock; do not log it.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let lock = redlock.new_mutex("job:b").lock()?;
    /// assert_eq!(lock.value().len(), 22); // 16 random bytes, base64url
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn value(&self) -> &str {
        self.inner.value()
    }

    /// The fencing token of this acquisition, as [`Lock::token`](crate::Lock::token): `Some`
    /// with [`with_fencing(true)`](crate::blocking::Mutex::with_fencing).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let mutex = redlock.new_mutex("ledger").with_fencing(true);
    /// let first = mutex.lock()?;
    /// let t1 = first.token().expect("fencing is on");
    /// first.unlock()?;
    /// assert!(mutex.lock()?.token().expect("fencing is on") > t1);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.inner.token()
    }

    /// The resource name; for a multi-name lock, the first of its [`names`](Lock::names).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// assert_eq!(redlock.new_mutex("job:c").lock()?.name(), "job:c");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Every name the lock covers.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let lock = redlock.new_multi_mutex(["a", "b"]).lock()?;
    /// assert_eq!(lock.names().collect::<Vec<_>>(), ["a", "b"]);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.inner.names()
    }

    /// Resets the expiry on every node that still holds this lock's value, blocking, as
    /// [`Lock::extend`](crate::Lock::extend) (which says how it repairs a node that lost the
    /// key); moves [`valid_until`](Lock::valid_until) on success.
    ///
    /// # Errors
    ///
    /// As the async `extend`: [`Error::Taken`], [`Error::Expired`], [`Error::NoQuorum`],
    /// [`Error::Unlocked`], [`Error::Config`]; [`Error::InsideRuntime`] on a thread of a tokio
    /// runtime. A failure changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let lock = redlock.new_mutex("job:d").lock()?;
    /// let before = lock.valid_until();
    /// std::thread::sleep(std::time::Duration::from_millis(10));
    /// lock.extend()?;
    /// assert!(lock.valid_until() > before);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn extend(&self) -> Result<(), Error> {
        let lock = self.inner.clone();
        self.background.call(async move { lock.extend().await })
    }

    /// Releases the lock on every node that still holds this lock's value, blocking, as
    /// [`Lock::unlock`](crate::Lock::unlock). After success, every clone's `extend` and `unlock`
    /// return [`Error::Unlocked`] without I/O.
    ///
    /// # Errors
    ///
    /// As the async `unlock`: [`Error::Taken`], [`Error::Expired`], [`Error::NoQuorum`],
    /// [`Error::Unlocked`], [`Error::Config`]; [`Error::InsideRuntime`] on a thread of a tokio
    /// runtime (nothing released: the lock's drop releases it).
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::Error;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let lock = redlock.new_mutex("job:e").lock()?;
    /// let clone = lock.clone();
    /// lock.unlock()?;
    /// assert!(matches!(clone.unlock(), Err(Error::Unlocked)));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn unlock(&self) -> Result<(), Error> {
        let lock = self.inner.clone();
        self.background.call(async move { lock.unlock().await })
    }

    /// Starts a heartbeat that extends the lock every `interval` on redmutex's runtime, while
    /// this thread does what it likes, and reports when the lock is lost: see
    /// [`KeepAlive`](crate::KeepAlive) for how it rides out a blip of the nodes. Does not block,
    /// and works on any thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let mutex = redlock.new_mutex("job:export").with_expiry(Duration::from_millis(600));
    /// let lock = mutex.lock()?;
    /// let keep = lock.keep_alive(mutex.expiry() / 3).max_extensions(100);
    /// for _ in 0..10 {
    ///     assert!(keep.end().is_none(), "the lock is lost: stop");
    ///     std::thread::sleep(Duration::from_millis(100)); // a step of the work
    /// }
    /// lock.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn keep_alive(&self, interval: Duration) -> KeepAlive {
        let _entered = self.background.enter();
        KeepAlive {
            inner: self.inner.keep_alive(interval),
            background: self.background,
        }
    }

    /// Runs `work` on this thread while keeping the lock, and releases the lock when `work`
    /// returns: the blocking [`Lock::run`](crate::Lock::run).
    ///
    /// A [`KeepAlive`] renews the lock every third of the expiry on redmutex's runtime (see
    /// [`run_renewing_every`](Lock::run_renewing_every) to choose), riding out a blip of the
    /// nodes, while `work` runs here. Being a closure, `work` cannot be dropped midway as the
    /// async `run` drops its future: it is told instead, through the [`Lease`] it is given, and
    /// must stop by itself. [`Lease::is_held`] turns false as soon as the lock cannot be kept
    /// (taken, gone from a quorum, too few nodes answering the renewals in time), and at the
    /// latest a few milliseconds before [`Lease::valid_until`], the deadline it may also read;
    /// [`Lease::lost`] says why. Check it before each step, and before each write that the lock
    /// protects (with the [`token`](Lease::token), where the resource takes one).
    ///
    /// When `work` returns, its output counts only if the lock was kept throughout: the
    /// keep-alive reported no loss meanwhile and the validity has not ended. Then the lock is
    /// unlocked and the output returned. Otherwise the output is discarded, the lock released in
    /// the background (what is left of it), and `run` returns [`Error::Lost`] with the cause.
    ///
    /// A handle whose validity is nearly over (or adopted) is extended once before `work` starts.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock was not kept while `work` ran, or could not be renewed
    /// before it started; [`Error::Unlocked`] (no I/O, `work` never called) when the lock was
    /// unlocked already; [`Error::Config`] for invalid settings; [`Error::InsideRuntime`] (`work`
    /// never called) on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let mutex = redlock.new_mutex("report:nightly").with_expiry(Duration::from_millis(600));
    /// let written = mutex.lock()?.run(|lease| {
    ///     let mut rows = 0;
    ///     // 15 steps of 100 ms: 2.5 expiries, renewed meanwhile.
    ///     while lease.is_held() && rows < 15 {
    ///         std::thread::sleep(Duration::from_millis(100)); // write a row
    ///         rows += 1;
    ///     }
    ///     rows
    /// })?;
    /// assert_eq!(written, 15);
    /// assert!(mutex.try_lock().is_ok(), "released when the work is done");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn run<T>(self, work: impl FnOnce(&Lease<'_>) -> T) -> Result<T, Error> {
        let every = self.inner.run_every()?;
        self.run_renewing_every(every, work)
    }

    /// [`run`](Lock::run), renewing every `every` rather than every third of the expiry.
    ///
    /// # Errors
    ///
    /// As [`run`](Lock::run); [`Error::Config`] (no I/O) when `every` is zero, or not shorter
    /// than the expiry.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let lock = redlock.new_mutex("compaction").lock()?; // an 8 s expiry
    /// let done = lock.run_renewing_every(Duration::from_secs(1), |lease| lease.is_held())?;
    /// assert!(done);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn run_renewing_every<T>(
        self,
        every: Duration,
        work: impl FnOnce(&Lease<'_>) -> T,
    ) -> Result<T, Error> {
        let Lock { inner, background } = self;
        let keep = background.call({
            let lock = inner.clone();
            async move { lock.start_run(every).await }
        })?;
        under(background, inner, keep, work)
    }
}

/// Runs `work` on this thread while `keep` renews `lock`, then ends the lease: released when the
/// work completed under it, else dropped (released in the background) with the loss.
pub(crate) fn under<T>(
    background: Background,
    lock: crate::Lock,
    keep: crate::KeepAlive,
    work: impl FnOnce(&Lease<'_>) -> T,
) -> Result<T, Error> {
    refuse_inside_runtime()?;
    let output = work(&Lease {
        lock: &lock,
        keep: &keep,
    });
    let verdict = run::returned_under(&lock, &keep);
    let kept = verdict.is_ok();
    // No renewal may go out after the unlock. Whatever the unlock says, the work completed
    // under the lock; what is not released expires. On a loss the lock is dropped there, which
    // releases what is left of it in the background.
    let _ = background.call(async move {
        keep.stop().await;
        if kept {
            let _ = lock.unlock().await;
        }
        Ok(())
    });
    verdict.map(|()| output)
}

/// What work run under a lock ([`Lock::run`]) or a leadership
/// ([`Leadership::run`](crate::blocking::Leadership::run)) sees of it: whether it still holds it,
/// until when, and its fencing token. `Sync`: the work may share it with threads it scopes.
///
/// # Examples
///
/// ```
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
/// let lock = redlock.new_mutex("ledger").with_fencing(true).lock()?;
/// lock.run(|lease| {
///     assert!(lease.is_held() && lease.lost().is_none());
///     assert!(lease.valid_until() > std::time::Instant::now());
///     assert!(lease.token().is_some()); // pass it with each write
/// })?;
/// # Ok::<(), redmutex::Error>(())
/// ```
pub struct Lease<'a> {
    lock: &'a crate::Lock,
    keep: &'a crate::KeepAlive,
}

impl Lease<'_> {
    /// Whether the work may go on: the lock is kept, and not about to end by the clock. False
    /// from the moment the keep-alive gives the lock up, and at the latest a few milliseconds
    /// before [`valid_until`](Lease::valid_until); never true again after that.
    pub fn is_held(&self) -> bool {
        self.lost().is_none()
    }

    /// Why the work must stop, once it must: the keep-alive's error ([`Error::Taken`],
    /// [`Error::Expired`], the last [`Error::NoQuorum`]), [`Error::Unlocked`] when a clone
    /// unlocked, or [`Error::Expired`] when the validity is about to end with no renewal.
    pub fn lost(&self) -> Option<Error> {
        run::stop_reason(self.lock, self.keep)
    }

    /// The deadline: until when the lock is safe to rely on, moved by each renewal.
    pub fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    /// The fencing token, with fencing on (a leadership's: its epoch).
    pub fn token(&self) -> Option<u64> {
        self.lock.token()
    }
}

impl fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", self.lock)
            .field("held", &self.is_held())
            .finish()
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

/// A running heartbeat for one [`Lock`], started by [`Lock::keep_alive`]: the async
/// [`KeepAlive`](crate::KeepAlive), renewing on redmutex's runtime, whose
/// [`ended`](KeepAlive::ended) blocks. Dropping it stops the renewals.
///
/// # Examples
///
/// ```
/// use redmutex::KeepAliveEnd;
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
///
/// let lock = redlock.new_mutex("job:reindex").with_expiry(Duration::from_millis(600)).lock()?;
/// let keep = lock.keep_alive(Duration::from_millis(200)).max_hold(Duration::from_secs(60));
/// std::thread::sleep(Duration::from_millis(1500)); // 2.5 expiries of work
/// assert!(keep.end().is_none());
/// lock.unlock()?;
/// assert!(matches!(keep.ended()?, KeepAliveEnd::Unlocked));
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug)]
pub struct KeepAlive {
    inner: crate::KeepAlive,
    background: Background,
}

same_as_async!(KeepAlive over KeepAlive {
    set max_extensions(n: u64);
    set max_hold(hold: Duration);
    set report_before(margin: Duration);
    get end -> Option<KeepAliveEnd>;
});

impl KeepAlive {
    /// Blocks until the keep-alive stops, and says why; at once if it already has.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::KeepAliveEnd;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let lock = redlock.new_mutex("job:limited").lock()?;
    /// let keep = lock.keep_alive(Duration::from_millis(50)).max_extensions(2);
    /// assert!(matches!(keep.ended()?, KeepAliveEnd::LimitReached));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn ended(&self) -> Result<KeepAliveEnd, Error> {
        self.background.block_on(self.inner.ended())
    }
}
