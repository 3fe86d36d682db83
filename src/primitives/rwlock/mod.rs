//! A distributed read-write lock: configuration for its two sides, each a mutex over the same name
//! with a target of its own (`target`: the readers' and the writer's keys and commands; the
//! scripts are the `.lua` files here).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::delay::RetryDelay;
use crate::engine::settings::{Plan, Settings};
use crate::error::Error;
use crate::nodes::Node;
use crate::primitives::lock::Lock;
use crate::primitives::mutex::Mutex;
use crate::waiting::listeners::Listeners;

pub(crate) mod target;

pub(crate) use target::{NEEDS, ReadTarget, SCRIPTS, SUFFIXES, WriteTarget, mark_key, readers_key};

/// A distributed read-write lock for one resource name: any number of readers at once, or one
/// writer. Configuration only, no lock state; cheap to clone, `Send + Sync`.
///
/// [`read()`](RwLock::read) and [`write()`](RwLock::write) (and their `try_` forms) return the
/// crate's [`Lock`]: `extend()`, `unlock()`, `valid_until()`, `keep_alive()` and release on drop
/// work as for a [`Mutex`], with the same quorum, validity and errors. Settings are the
/// [`Mutex`]'s, with the same defaults, and apply to both sides.
///
/// # Keys
///
/// On every node, for the name `x`:
///
/// - `x` holds the writer's value while a writer holds, exactly as for a [`Mutex`]; so a `Mutex`
///   (or a multi-name mutex) on `x` behaves as a writer, excluding readers and excluded by them.
/// - While readers hold, `x` holds the marker `redmutex:readers` (no lock value can be it), so
///   that the `SET NX` of a writer or a `Mutex` fails. Its expiry is the latest reader's, so when
///   the last reader's entry expires, the marker goes too.
/// - `{x}:readers` is a sorted set of the readers' values, each scored by when it expires on the
///   node's own clock (Redis `TIME`). An expired entry counts for nothing, so a crashed reader
///   blocks writers no longer than its expiry; expired entries are swept whenever a writer finds
///   the marker and whenever a reader comes or goes while others hold, so the entries of readers that
///   vanished without a release do not pile up while readers keep overlapping.
/// - `{x}:writer-waiting` is the mark of a writer that found readers (see below).
/// - `{x}:fence` is the fencing counter, as for a `Mutex`.
///
/// The keys beside `x` carry its Redis Cluster hash slot: a name with a hash tag of its own keeps
/// it (`{shop}:prices::readers`), and a name with a `}` but no tag, which can have no keys beside
/// it, is refused with [`Error::Config`] (see [keys and notice
/// channels](crate::guide::keys)). Names ending in `:fence`, `:readers` or `:writer-waiting` are
/// refused too, for every primitive, so no name is ever another name's auxiliary key.
///
/// # Writers are not starved
///
/// A write attempt that finds live readers on a node leaves (or renews) a mark there, and new
/// readers are refused on a node with a mark, while readers that hold may go on, extend and
/// unlock. So once a writer waits, no new reader gets in on the nodes it marked, and the writer
/// (or another writer) gets in at its first attempt after the readers that held have left: each
/// within its expiry, unless it extends (a reader that keeps extending keeps holding, and keeps
/// the writer out). The mark lives three node timeouts plus the longest retry delay, at most the
/// expiry (1.45 s with the defaults), long enough to last from one attempt of a waiting writer to
/// its next; each attempt renews it, and any writer's successful attempt removes it (while a
/// writer holds, readers are refused anyway, and a writer still waiting marks again at its next
/// attempt). A writer that gives up
/// (its tries are spent, its call is cancelled, or a single [`try_write`](RwLock::try_write))
/// leaves its mark to expire, which keeps new readers out that long. With a custom retry delay
/// ([`with_retry_delay_fn`](RwLock::with_retry_delay_fn)) the longest delay is unknown, and the
/// mark lives as long as the expiry. A `Mutex` on the name leaves no mark: under a steady stream
/// of readers it may wait indefinitely.
///
/// # Fencing
///
/// [`with_fencing(true)`](RwLock::with_fencing) gives write locks a token, from the same counter
/// as a `Mutex` on the name; read locks get none ([`Lock::token`] is `None`): readers do not
/// exclude each other, so there is nothing for a token to order.
///
/// # Wake-up on release
///
/// On by default ([`with_wake_on_release`](RwLock::with_wake_on_release)): a writer's release
/// and the last reader's release (the one that frees the name) publish a release notice for the
/// name where a waiting reader or writer marked it, and waiting readers and writers wake on it.
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
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = Redlock::connect(cluster.urls()).await?;
/// let prices = redlock.new_rwlock("prices").with_expiry(Duration::from_secs(5));
///
/// let first = prices.read().await?;
/// let second = prices.read().await?;
/// // A writer waits for the readers.
/// assert!(matches!(prices.try_write().await, Err(Error::Taken { .. })));
/// first.unlock().await?;
/// second.unlock().await?;
///
/// let writer = prices.write().await?;
/// // ... rewrite the prices ...
/// writer.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../../doc/rustdoc-links.md")]
#[doc = include_str!("../../../doc/rwlock.md")]
#[derive(Clone)]
pub struct RwLock {
    read: Mutex,
    write: Mutex,
}

impl RwLock {
    pub(crate) fn new(nodes: Arc<[Node]>, listeners: Arc<Listeners>, name: Arc<str>) -> RwLock {
        let read = ReadTarget::new(Arc::clone(&name));
        let read = Mutex::new(Arc::clone(&nodes), Arc::clone(&listeners), Arc::new(read));
        let write = Arc::new(WriteTarget::new(name, Duration::ZERO));
        let write = Mutex::new(nodes, listeners, write);
        RwLock { read, write }.with_mark()
    }

    /// Applies `change` to the settings of both sides.
    fn with_settings(self, change: impl Fn(&mut Settings)) -> Self {
        RwLock {
            read: self.read.with_settings(&change),
            write: self.write.with_settings(&change),
        }
        .with_mark()
    }

    /// The writer's side: a mutex over the name, as inspection and forced release need.
    pub(crate) fn writer(&self) -> &Mutex {
        &self.write
    }

    /// Sizes the writer's mark for the current settings.
    fn with_mark(mut self) -> Self {
        let mark = self.write.plan().map_or(Duration::ZERO, writer_mark);
        let name = Arc::clone(self.write.resource().name());
        self.write = self
            .write
            .with_target(Arc::new(WriteTarget::new(name, mark)));
        self
    }

    /// How long both sides' locks live on the nodes. Default 8 s; see [`Mutex::with_expiry`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_expiry(Duration::from_secs(30));
    /// assert_eq!(rwlock.expiry(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_expiry(self, expiry: Duration) -> Self {
        self.with_settings(|s| s.expiry = expiry)
    }

    /// Adds the label `use` (its value `label`) to this read-write lock (both sides)'s metrics (with the `metrics` feature; see
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
    /// let catalog = redlock.new_rwlock("catalog").with_metrics_label("catalog");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_metrics_label(self, label: &'static str) -> Self {
        self.with_settings(|s| s.metrics_label = Some(label))
    }

    /// How long [`read()`](RwLock::read) and [`write()`](RwLock::write) may wait in all, however
    /// many attempts that takes; then [`Error::WaitedOut`]. Default: no maximum. See
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
    /// let rwlock = redlock.new_rwlock("report").with_max_wait(Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_max_wait(self, wait: Duration) -> Self {
        self.with_settings(|s| s.max_wait = Some(wait))
    }

    /// How many attempts [`read()`](RwLock::read) and [`write()`](RwLock::write) make. Default 32;
    /// see [`Mutex::with_tries`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_tries(3);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_tries(self, tries: u32) -> Self {
        self.with_settings(|s| s.tries = Some(tries))
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
    /// let rwlock = redlock.new_rwlock("report").with_retry_delay(Duration::from_millis(20));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay(self, delay: Duration) -> Self {
        self.with_settings(|s| s.retry_delay = RetryDelay::Fixed(delay))
    }

    /// Computes the delay from the number of the attempt that just failed; see
    /// [`Mutex::with_retry_delay_fn`]. The writer's mark then lives as long as the expiry (see
    /// [*Writers are not starved*](RwLock#writers-are-not-starved)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock
    ///     .new_rwlock("report")
    ///     .with_retry_delay_fn(|attempt| Duration::from_millis(10 << attempt.min(6)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay_fn<F>(self, delay: F) -> Self
    where
        F: Fn(u32) -> Duration + Send + Sync + 'static,
    {
        let delay: crate::engine::delay::DelayFn = Arc::new(delay);
        self.with_settings(|s| s.retry_delay = RetryDelay::Custom(Arc::clone(&delay)))
    }

    /// The clock drift allowance, as a fraction of the expiry. Default 0.01; see
    /// [`Mutex::with_drift_factor`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_drift_factor(0.02);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_drift_factor(self, factor: f64) -> Self {
        self.with_settings(|s| s.drift_factor = factor)
    }

    /// The per-node timeout as a fraction of the expiry. Default 0.05; see
    /// [`Mutex::with_timeout_factor`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_timeout_factor(0.1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_timeout_factor(self, factor: f64) -> Self {
        self.with_settings(|s| s.timeout_factor = factor)
    }

    /// Returns from an attempt as soon as its outcome is decided. Default false; see
    /// [`Mutex::with_fail_fast`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_fail_fast(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fail_fast(self, fail_fast: bool) -> Self {
        self.with_settings(|s| s.fail_fast = fail_fast)
    }

    /// Hands out a fencing token with each write lock. Default false; see
    /// [`Mutex::with_fencing`]. Read locks get no token: readers do not exclude each other.
    ///
    /// Write tokens come from the name's counter, which a [`Mutex`] on the name with fencing
    /// shares, so they increase across both.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let ledger = redlock.new_rwlock("ledger").with_fencing(true);
    /// let writer = ledger.write().await?;
    /// assert!(writer.token().is_some());
    /// writer.unlock().await?;
    /// assert!(ledger.read().await?.token().is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fencing(mut self, fencing: bool) -> Self {
        self.write = self.write.with_fencing(fencing);
        self
    }

    /// Wakes waiting readers and writers when the name is released. Default true; `false` opts
    /// out (see [`Mutex::with_wake_on_release`]). The name is released by a writer's release,
    /// and by the release of the last reader.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_wake_on_release(false); // polls
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_wake_on_release(self, wake: bool) -> Self {
        self.with_settings(|s| s.wake_on_release = wake)
    }

    /// Counts a member only once `replicas` replicas of the master that took a read or write
    /// acquisition (or its extension) acknowledged the write: see [`Mutex::with_replica_acks`].
    /// Default 0: off.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_replica_acks(1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_replica_acks(self, replicas: u32) -> Self {
        self.with_settings(|s| s.replica_acks = replicas)
    }

    /// Sends to the nodes in a random order on each operation. Default false; see
    /// [`Mutex::with_shuffle_nodes`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let rwlock = redlock.new_rwlock("report").with_shuffle_nodes(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_shuffle_nodes(self, shuffle: bool) -> Self {
        self.with_settings(|s| s.shuffle_nodes = shuffle)
    }

    /// Generates the lock value of each acquisition, read or write. Default: 16 bytes from a
    /// CSPRNG, base64url; see [`Mutex::with_value_fn`]. Every acquisition must get a value of its
    /// own; an empty value, or the readers' marker `redmutex:readers`, is rejected with
    /// [`Error::Config`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    ///
    /// let rwlock = redlock.new_rwlock("report").with_value_fn(|| {
    ///     let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    ///     format!("worker-7:{}:{n}", std::process::id())
    /// });
    /// let reader = rwlock.read().await?;
    /// assert!(reader.value().starts_with("worker-7:"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_value_fn<F>(self, value: F) -> Self
    where
        F: Fn() -> String + Send + Sync + 'static,
    {
        let value: crate::engine::settings::ValueFn = Arc::new(value);
        self.with_settings(|s| s.value_fn = Some(Arc::clone(&value)))
    }

    /// The resource name: the key of the writer on every node.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_rwlock("report").name(), "report");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.write.name()
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
    /// assert_eq!(redlock.new_rwlock("report").expiry(), Duration::from_secs(8));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expiry(&self) -> Duration {
        self.write.expiry()
    }

    /// Acquires a read lock, retrying up to `tries` attempts with the retry delay between them.
    ///
    /// Each attempt runs one script per node, at once on every node: it adds this reader unless
    /// a writer (or a [`Mutex`] on the name) holds the name or a writer waits there, and where
    /// other readers hold it sweeps the expired ones. It succeeds on a quorum with validity left,
    /// as a [`Mutex`] does.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`]: [`Error::Taken`] when a quorum has a writer holding or waiting,
    /// [`Error::Expired`], [`Error::NoQuorum`], [`Error::Config`] before any I/O.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`]: a future dropped at any point (its requests in flight included)
    /// releases whatever it may have acquired, in the background, so that the next reader or
    /// writer gets in at once.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let reader = redlock.new_rwlock("catalog").read().await?;
    /// assert_eq!(reader.name(), "catalog");
    /// reader.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> Result<Lock, Error> {
        self.read.lock().await
    }

    /// Makes exactly one attempt to acquire a read lock.
    ///
    /// # Errors
    ///
    /// As [`read()`](RwLock::read), for the single attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`read()`](RwLock::read), for its one attempt.
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
    /// let catalog = redlock.new_rwlock("catalog");
    /// let writer = catalog.write().await?;
    /// assert!(matches!(catalog.try_read().await, Err(Error::Taken { .. })));
    /// writer.unlock().await?;
    /// catalog.try_read().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read(&self) -> Result<Lock, Error> {
        self.read.try_lock().await
    }

    /// Acquires the write lock, retrying up to `tries` attempts with the retry delay between them.
    ///
    /// Each attempt runs one script per node, at once on every node: it takes the name's key
    /// where it is free (no key, or no live reader left), and where live readers hold it leaves
    /// the writer's mark that keeps new readers out (see
    /// [*Writers are not starved*](RwLock#writers-are-not-starved)). It succeeds on a quorum with
    /// validity left, as a [`Mutex`] does.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`]: [`Error::Taken`] when a quorum has readers or another writer,
    /// [`Error::Expired`], [`Error::NoQuorum`], [`Error::Config`] before any I/O.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`]: a future dropped at any point releases whatever it may have acquired,
    /// in the background; a mark left by the cancelled call (which keeps new readers out) expires
    /// on its own.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let writer = redlock.new_rwlock("catalog").write().await?;
    /// writer.extend().await?;
    /// writer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self) -> Result<Lock, Error> {
        self.write.lock().await
    }

    /// Makes exactly one attempt to acquire the write lock. Where readers hold, it leaves its
    /// mark as [`write()`](RwLock::write) does, so a caller that retries `try_write` on its own
    /// schedule, within the mark's life, is not starved either.
    ///
    /// # Errors
    ///
    /// As [`write()`](RwLock::write), for the single attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`write()`](RwLock::write), for its one attempt.
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
    /// let catalog = redlock.new_rwlock("catalog");
    /// let writer = catalog.try_write().await?;
    /// assert!(matches!(catalog.try_write().await, Err(Error::Taken { .. })));
    /// writer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write(&self) -> Result<Lock, Error> {
        self.write.try_lock().await
    }

    /// A handle on a read lock that another handle (possibly in another process) acquired with
    /// `value`; see [`Mutex::adopt`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let catalog = redlock.new_rwlock("catalog");
    /// let original = catalog.read().await?;
    /// // ... the value travels to another process, which takes over:
    /// let adopted = catalog.adopt_read(original.value());
    /// adopted.extend().await?;
    /// adopted.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn adopt_read(&self, value: impl Into<String>) -> Lock {
        self.read.adopt(value)
    }

    /// A handle on the write lock that another handle (possibly in another process) acquired
    /// with `value`; see [`Mutex::adopt`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let catalog = redlock.new_rwlock("catalog");
    /// let original = catalog.write().await?;
    /// let adopted = catalog.adopt_write(original.value());
    /// adopted.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn adopt_write(&self, value: impl Into<String>) -> Lock {
        self.write.adopt(value)
    }
}

/// How long a waiting writer's mark lives: from one attempt of the writer to its next, that is
/// its attempt and the release of a failed one (each bounded by the node timeout), the retry
/// delay, and one more node timeout for the next attempt's script to land; at most the expiry.
/// Without a known longest delay (a custom function), the expiry.
fn writer_mark(plan: &Plan) -> Duration {
    let Some(delay) = plan.retry_delay.longest() else {
        return plan.expiry;
    };
    plan.node_timeout
        .saturating_mul(3)
        .saturating_add(delay)
        .min(plan.expiry)
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("read", &self.read)
            .field("write", &self.write)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(settings: Settings) -> Plan {
        settings
            .plan(&WriteTarget::new("n".into(), Duration::ZERO))
            .expect("valid settings")
    }

    #[test]
    fn the_mark_bridges_the_gap_between_a_writers_attempts() {
        let ms = Duration::from_millis;
        // Defaults: 400 ms node timeout, delays up to 250 ms.
        assert_eq!(writer_mark(&plan(Settings::default())), ms(1450));
        let fixed = Settings {
            retry_delay: RetryDelay::Fixed(ms(5)),
            expiry: ms(2000),
            timeout_factor: 0.25,
            ..Settings::default()
        };
        assert_eq!(writer_mark(&plan(fixed)), ms(1505));
        let long = Settings {
            retry_delay: RetryDelay::Fixed(Duration::from_secs(60)),
            ..Settings::default()
        };
        assert_eq!(
            writer_mark(&plan(long)),
            ms(8000),
            "never beyond the expiry"
        );
        let custom = Settings {
            retry_delay: RetryDelay::Custom(Arc::new(|_| Duration::from_millis(1))),
            ..Settings::default()
        };
        assert_eq!(writer_mark(&plan(custom)), ms(8000));
    }
}
