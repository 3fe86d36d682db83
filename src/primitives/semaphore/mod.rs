//! A counting semaphore over the nodes: configuration, and the entry points that take a permit.
//!
//! A semaphore is a [`Mutex`] over another target (`target`: its key, its commands and its
//! quorum; the scripts are the `.lua` files here), and everything else (fan-out, tally, validity,
//! release of failed attempts, retries, waiting, the held [`Lock`]) is shared with the mutex.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use crate::Redlock;
use crate::engine::target::Target;
use crate::error::Error;
use crate::nodes::Node;
use crate::primitives::lock::Lock;
use crate::primitives::mutex::Mutex;
use crate::waiting::listeners::Listeners;

pub(crate) mod target;

pub(crate) use target::{ACQUIRE, NEEDS, PermitsTarget, SCRIPTS};

/// A distributed counting semaphore: at most `permits` holders of one name at once, across every
/// process and machine. Configuration only, no lock state.
///
/// Made by [`Redlock::new_semaphore`]. Each successful [`acquire()`](Semaphore::acquire) returns a
/// [`Lock`] for one permit, with [`extend()`](Lock::extend), [`unlock()`](Lock::unlock),
/// [`valid_until()`](Lock::valid_until), [`keep_alive()`](Lock::keep_alive) and release on drop, as
/// for a [`Mutex`].
///
/// A permit is held on [`quorum()`](Semaphore::quorum) nodes, `P * N / (P + 1) + 1` (rounded down
/// before adding one) for `P` permits over `N` nodes, more than a majority once `P >= 2`: each node
/// admits at most `P` live holders, and `P + 1` holders would need more entries than the nodes
/// admit. So fewer nodes may fail than for a mutex: `N - quorum()` (over 5 nodes: 2 for one
/// permit, 1 for 2 or 3 permits, none from 4 permits on). The section on its quorum below gives
/// the proof, its assumptions and the costs.
///
/// On every node the key `name` is a sorted set of the holders' lock values, each scored by when
/// it expires on that node's clock, and of the permit count (the member `""`, scored by minus the
/// count). It expires no earlier than its latest holder, and the last holder to give its permit
/// back deletes it. Semaphores need Redis 7.0 or later on every node. Every `Semaphore` of a name must use the same number of permits: a node
/// holding permits taken with another count refuses, with an error naming both counts, until
/// nobody holds it. A name is either a mutex's or a semaphore's: a [`Mutex`] finds a name held
/// by a semaphore taken ([`Error::Taken`]), and a semaphore is refused on a name a mutex holds,
/// with an error that says so.
///
/// # Default
///
/// As for a [`Mutex`]: expiry 8 s, 32 tries, a retry delay random in 50..250 ms, drift factor
/// 0.01, timeout factor 0.05, no fail-fast, wake-up on release, nodes in order, random values.
/// A semaphore hands out no fencing tokens ([`Lock::token`] is `None`): tokens order one holder
/// after the next, and a semaphore's holders hold side by side, so a resource could not tell a
/// stale holder by its smaller token. Nor does it wait in a fair line ([`Mutex::with_fair`]) yet:
/// the line hands one lock from holder to waiter, and permits would need a line of their own.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::{Error, Redlock};
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(5);
/// let redlock = Redlock::connect(cluster.urls()).await?;
/// // At most 2 calls to the payment provider at once, across all workers.
/// let payments = redlock
///     .new_semaphore("payments:provider-x", 2)
///     .with_expiry(Duration::from_secs(10));
/// assert_eq!(payments.quorum(), 4); // of 5 nodes: one may be down
///
/// let first = payments.acquire().await?;
/// let second = payments.acquire().await?;
/// assert!(matches!(payments.try_acquire().await, Err(Error::Taken { .. })));
/// first.unlock().await?;
/// let third = payments.try_acquire().await?;
/// # second.unlock().await?;
/// # third.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../../doc/rustdoc-links.md")]
#[doc = include_str!("../../../doc/semaphore.md")]
#[derive(Clone)]
pub struct Semaphore {
    /// A mutex over the semaphore's target: the engine, with the settings.
    mutex: Mutex,
    /// The same target, for its permits and quorum.
    target: Arc<PermitsTarget>,
}

impl Semaphore {
    pub(crate) fn new(
        nodes: Arc<[Node]>,
        listeners: Arc<Listeners>,
        name: String,
        permits: u32,
    ) -> Self {
        let target = Arc::new(PermitsTarget::new(name.into(), permits));
        Semaphore {
            mutex: Mutex::new(nodes, listeners, Arc::clone(&target) as Arc<dyn Target>),
            target,
        }
    }

    /// The mutex over the semaphore's target, as inspection and forced release need.
    pub(crate) fn mutex(&self) -> &Mutex {
        &self.mutex
    }

    fn with(self, change: impl FnOnce(Mutex) -> Mutex) -> Self {
        Semaphore {
            mutex: change(self.mutex),
            target: self.target,
        }
    }

    /// How long the nodes keep a permit before dropping it on their own. Default 8 s.
    ///
    /// As [`Mutex::with_expiry`]: between 1 ms and 365 days, sent in whole milliseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_expiry(Duration::from_secs(30));
    /// assert_eq!(workers.expiry(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_expiry(self, expiry: Duration) -> Self {
        self.with(|m| m.with_expiry(expiry))
    }

    /// Adds the label `use` (its value `label`) to this semaphore's metrics (with the `metrics` feature; see
    /// [metrics](crate::guide::metrics)), so that one series per use can be graphed. The label is
    /// `'static` on purpose: a label per lock name or per request would grow the series without
    /// bound. Default none; without the feature it does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_metrics_label("renders");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_metrics_label(self, label: &'static str) -> Self {
        self.with(|m| m.with_metrics_label(label))
    }

    /// How long [`acquire()`](Semaphore::acquire) may wait for a permit in all, however many
    /// attempts that takes; then [`Error::WaitedOut`]. Default: no maximum. See
    /// [`Mutex::with_max_wait`], also for how it combines with the tries and with a caller's
    /// timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_max_wait(Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_max_wait(self, wait: Duration) -> Self {
        self.with(|m| m.with_max_wait(wait))
    }

    /// How many attempts [`acquire()`](Semaphore::acquire) makes before giving up. Default 32; at
    /// least 1.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_tries(3);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_tries(self, tries: u32) -> Self {
        self.with(|m| m.with_tries(tries))
    }

    /// Waits exactly `delay` between attempts. Default: random in 50..250 ms. Every delay is
    /// valid, `Duration::MAX` included; see [`Mutex::with_retry_delay`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock
    ///     .new_semaphore("workers", 4)
    ///     .with_retry_delay(Duration::from_millis(100));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay(self, delay: Duration) -> Self {
        self.with(|m| m.with_retry_delay(delay))
    }

    /// Computes the delay from the number of the attempt that just failed (1, 2, ...). Replaces
    /// [`with_retry_delay`](Semaphore::with_retry_delay). Default: random in 50..250 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock
    ///     .new_semaphore("workers", 4)
    ///     .with_retry_delay_fn(|attempt| Duration::from_millis(10 << attempt.min(6)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay_fn<F>(self, delay: F) -> Self
    where
        F: Fn(u32) -> Duration + Send + Sync + 'static,
    {
        self.with(|m| m.with_retry_delay_fn(delay))
    }

    /// The allowance for clock drift, as a fraction of the expiry (see
    /// [`Mutex::with_drift_factor`]). Default 0.01; must be in `[0, 1)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_drift_factor(0.02);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_drift_factor(self, factor: f64) -> Self {
        self.with(|m| m.with_drift_factor(factor))
    }

    /// The per-node timeout as a fraction of the expiry (see [`Mutex::with_timeout_factor`]).
    /// Default 0.05; must be in `(0, 1)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_timeout_factor(0.1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_timeout_factor(self, factor: f64) -> Self {
        self.with(|m| m.with_timeout_factor(factor))
    }

    /// Returns from an attempt as soon as its outcome is decided (see
    /// [`Mutex::with_fail_fast`]). Default false.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_fail_fast(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fail_fast(self, fail_fast: bool) -> Self {
        self.with(|m| m.with_fail_fast(fail_fast))
    }

    /// Counts a member only once `replicas` replicas of the master that took a permit (or its
    /// extension) acknowledged the write: see [`Mutex::with_replica_acks`]. Default 0: off.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_replica_acks(1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_replica_acks(self, replicas: u32) -> Self {
        self.with(|m| m.with_replica_acks(replicas))
    }

    /// Wakes waiting [`acquire`](Semaphore::acquire) calls when a permit is given back, instead of
    /// leaving them to their retry delay (see [`Mutex::with_wake_on_release`]). Default true;
    /// `false` opts out: its waiters poll, and its releases notify nobody.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_wake_on_release(false); // polls
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_wake_on_release(self, wake: bool) -> Self {
        self.with(|m| m.with_wake_on_release(wake))
    }

    /// Sends to the nodes in a random order on each operation. Default false.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let workers = redlock.new_semaphore("workers", 4).with_shuffle_nodes(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_shuffle_nodes(self, shuffle: bool) -> Self {
        self.with(|m| m.with_shuffle_nodes(shuffle))
    }

    /// Generates the value of each permit taken (see [`Mutex::with_value_fn`]): it must never
    /// repeat. Default: 16 bytes from a CSPRNG, base64url.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    /// let boot = std::process::id(); // in real code: something unique per process start
    /// let workers = redlock.new_semaphore("workers", 4).with_value_fn(move || {
    ///     format!("host-3:{boot}:{}", SEQUENCE.fetch_add(1, Ordering::Relaxed))
    /// });
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_value_fn<F>(self, value: F) -> Self
    where
        F: Fn() -> String + Send + Sync + 'static,
    {
        self.with(|m| m.with_value_fn(value))
    }

    /// The resource name: the key of the holders on every node.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_semaphore("workers", 4).name(), "workers");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The number of permits: how many may hold at once.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_semaphore("workers", 4).permits(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.target.permits()
    }

    /// How many nodes must admit a holder: `P * N / (P + 1) + 1` for `P` permits over `N` nodes
    /// (rounded down before adding one), the majority for one permit. Up to `N - quorum()` nodes
    /// may be down or unreachable; with more, acquiring fails with [`Error::NoQuorum`].
    ///
    /// | nodes | permits | quorum | nodes that may fail |
    /// |---|---|---|---|
    /// | 3 | 1 | 2 | 1 |
    /// | 3 | 2 or more | 3 | 0 |
    /// | 5 | 1 | 3 | 2 |
    /// | 5 | 2 or 3 | 4 | 1 |
    /// | 5 | 4 or more | 5 | 0 |
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let urls = (1..=5).map(|port| format!("redis://127.0.0.1:{port}/"));
    /// let redlock = redmutex::Redlock::connect(urls).await?;
    /// assert_eq!(redlock.new_semaphore("workers", 1).quorum(), 3);
    /// assert_eq!(redlock.new_semaphore("workers", 3).quorum(), 4);
    /// assert_eq!(redlock.new_semaphore("workers", 4).quorum(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.target.quorum(self.mutex.resource().nodes().len())
    }

    /// The expiry as configured.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_semaphore("workers", 4).expiry(), Duration::from_secs(8));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expiry(&self) -> Duration {
        self.mutex.expiry()
    }

    /// Takes a permit, retrying up to `tries` attempts with the retry delay between them.
    ///
    /// Each attempt runs the acquire script on every node at once (each call bounded by the node
    /// timeout): the node sweeps its expired holders and admits this one if fewer than `permits`
    /// remain. The attempt succeeds when [`quorum()`](Semaphore::quorum) nodes admitted it and
    /// validity is left; a failed attempt is given back on every node before the next one.
    ///
    /// # Errors
    ///
    /// The last attempt's error: [`Error::Taken`] when so many nodes are full that a quorum is out
    /// of reach (all permits are held), [`Error::Expired`], or [`Error::NoQuorum`] (nodes down,
    /// or refusing: a node holding the permits of another count, or the name of a mutex, says so
    /// in the listed node errors); [`Error::WaitedOut`] (with that error) when the maximum wait
    /// ran out first; [`Error::Config`] (before any I/O) for invalid settings or zero permits.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point (its requests in flight included) gives back whatever it
    /// may have taken, in the background on the current tokio runtime, so that the permit is free
    /// for the next holder at once; without a runtime, the entries expire on their own.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let permit = redlock.new_semaphore("exports", 3).acquire().await?;
    /// assert!(permit.valid_until() > std::time::Instant::now());
    /// // ... export, finishing well before permit.valid_until() ...
    /// permit.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<Lock, Error> {
        let plan = self.mutex.plan()?;
        let span = tracing::debug_span!(
            "redmutex.acquire",
            name = %self.name(),
            permits = self.permits(),
            tries = plan.tries
        );
        self.attempts(plan.tries, span).await
    }

    /// Makes exactly one attempt to take a permit.
    ///
    /// # Errors
    ///
    /// As [`acquire()`](Semaphore::acquire), for the single attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire()`](Semaphore::acquire), for its one attempt.
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
    /// let single = redlock.new_semaphore("reports", 1);
    /// let held = single.try_acquire().await?;
    /// assert!(matches!(single.try_acquire().await, Err(Error::Taken { .. })));
    /// held.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<Lock, Error> {
        let span = tracing::debug_span!(
            "redmutex.try_acquire",
            name = %self.name(),
            permits = self.permits()
        );
        self.attempts(1, span).await
    }

    async fn attempts(&self, tries: u32, span: tracing::Span) -> Result<Lock, Error> {
        let plan = self.mutex.plan()?;
        let value = self.mutex.new_value()?;
        self.mutex.acquire(plan, value, tries, span).await
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("mutex", &self.mutex)
            .finish()
    }
}
