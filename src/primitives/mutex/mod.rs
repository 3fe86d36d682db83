//! A named distributed mutex, over one name or several: configuration, and the entry points that
//! acquire it. Its keys, commands and scripts (`*.lua` here) are `target`'s; a multi-name mutex is
//! a `Mutex` over `multi`'s target.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

#[cfg(doc)]
use crate::Redlock;
use crate::engine::delay::RetryDelay;
use crate::engine::held::Held;
use crate::engine::resource::Resource;
use crate::engine::settings::{Plan, Settings};
use crate::engine::target::Target;
use crate::error::Error;
use crate::nodes::Node;
use crate::primitives::lock::Lock;
use crate::waiting::acquire::acquire;
use crate::waiting::listeners::Listeners;

pub(crate) mod target;

pub(crate) use target::{
    EXTEND, MutexTarget, NEEDS, RELEASE, RELEASE_NOTIFY, SCRIPTS, SUFFIXES, counter_key,
    legacy_counter_key,
};

/// A distributed mutex for one resource name ([`Redlock::new_mutex`]), or for several names taken
/// all at once ([`Redlock::new_multi_mutex`]): configuration only, no lock state.
///
/// Cheap to clone, `Send + Sync`; make one per resource (or per call) from a shared
/// [`Redlock`]. Each successful [`lock()`](Mutex::lock) returns a [`Lock`], the proof of ownership.
///
/// # Default
///
/// | setting | default | valid |
/// |---|---|---|
/// | [`with_expiry`](Mutex::with_expiry) | 8 s | 1 ms to 365 days |
/// | [`with_tries`](Mutex::with_tries) | 32 (none with a maximum wait) | 1 to `u32::MAX` |
/// | [`with_max_wait`](Mutex::with_max_wait) | none | any |
/// | [`with_retry_delay`](Mutex::with_retry_delay) | random in 50..250 ms | any, `Duration::MAX` waits for ever |
/// | [`with_drift_factor`](Mutex::with_drift_factor) | 0.01 | `[0, 1)` |
/// | [`with_timeout_factor`](Mutex::with_timeout_factor) | 0.05 (400 ms per node at 8 s expiry) | `(0, 1)` |
/// | [`with_fail_fast`](Mutex::with_fail_fast) | false | |
/// | [`with_shuffle_nodes`](Mutex::with_shuffle_nodes) | false | |
/// | [`with_value_fn`](Mutex::with_value_fn) | 16 random bytes (CSPRNG), base64url | not empty, no NUL, not starting with `+` |
/// | [`with_fencing`](Mutex::with_fencing) | false | |
/// | [`with_wake_on_release`](Mutex::with_wake_on_release) | true | |
/// | [`with_fair`](Mutex::with_fair) | false | one name, no fencing |
///
/// # Errors
///
/// Setters never fail: an invalid value (say a drift factor of 1.5, or NaN) is reported as
/// [`Error::Config`] by the first operation, before any I/O, naming the setting and its bounds.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::Redlock;
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = Redlock::connect(cluster.urls()).await?;
/// let mutex = redlock
///     .new_mutex("inventory:sku-42")
///     .with_expiry(Duration::from_secs(2))
///     .with_tries(10);
///
/// let lock = mutex.lock().await?;
/// // ... sell the item, finishing well before lock.valid_until() ...
/// lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../../doc/rustdoc-links.md")]
#[doc = include_str!("../../../doc/acquiring.md")]
#[derive(Clone)]
pub struct Mutex {
    /// The client's release listeners, for waiting by release notices.
    listeners: Arc<Listeners>,
    /// The nodes, the target and the settings: shared by the mutex's clones and its locks;
    /// setters make their own copy.
    resource: Resource,
}

impl Mutex {
    /// A mutex over `target` on `nodes`, with default settings.
    pub(crate) fn new(
        nodes: Arc<[Node]>,
        listeners: Arc<Listeners>,
        target: Arc<dyn Target>,
    ) -> Self {
        Mutex {
            listeners,
            resource: Resource::new(nodes, target),
        }
    }

    /// Applies `change` to the settings and checks them again.
    pub(crate) fn with_settings(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        self.resource = self.resource.with_settings(change);
        self
    }

    /// How long the nodes keep the lock before dropping it on their own. Default 8 s.
    ///
    /// Sent in whole milliseconds (rounded down); must be between 1 ms and 365 days. Choose it longer
    /// than the critical section, or [`extend`](Lock::extend) while working.
    ///
    /// # Errors
    ///
    /// Outside those bounds (`Duration::MAX` included), every operation returns [`Error::Config`]
    /// naming them, before any I/O: locks are leases, not storage, and a lease of years is a
    /// mistake; the bound also keeps every `PX` a node takes, and every deadline, in range.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_expiry(Duration::from_secs(30));
    /// assert_eq!(mutex.expiry(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_expiry(self, expiry: Duration) -> Self {
        self.with_settings(|s| s.expiry = expiry)
    }

    /// How many attempts [`lock()`](Mutex::lock) makes before giving up. Default 32 (with a
    /// [maximum wait](Mutex::with_max_wait) and no tries set, no bound: the time bounds the
    /// wait); at least 1 ([`Error::Config`] otherwise). `u32::MAX` is valid, and in effect never
    /// gives up.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_tries(3);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_tries(self, tries: u32) -> Self {
        self.with_settings(|s| s.tries = Some(tries))
    }

    /// How long [`lock()`](Mutex::lock) may wait for the lock in all, from its call: it keeps
    /// trying, woken by release notices or else at its retry delay, until `wait` has passed,
    /// however many attempts that takes, and then fails with [`Error::WaitedOut`], which says how
    /// long it waited and, through the last attempt's error, who held the name. Default: no
    /// maximum, the tries alone bound the wait.
    ///
    /// The wait before an attempt ends at the deadline, and the attempt that starts then (or any
    /// attempt that is still on its way then) is the last one, so `lock()` returns within the
    /// maximum wait plus one attempt (a round trip to the nodes; at most the node timeout). A
    /// release before the deadline is taken at once, as without a maximum.
    ///
    /// **With [`with_tries`](Mutex::with_tries)**: setting a maximum wait lifts the default of
    /// 32 tries, so the wait is bounded by time alone; tries that were set stay a bound as well,
    /// and whichever runs out first ends the wait (tries that run out first end it with the last
    /// attempt's error, as without a maximum). [`try_lock`](Mutex::try_lock) makes one attempt
    /// whatever the maximum.
    ///
    /// **With `tokio::time::timeout`**: a caller's timeout around `lock()` bounds it too, but
    /// drops the future wherever it is: the attempt on its way is released in the background
    /// (see *Cancel safety* at [`lock`](Mutex::lock)), a release just before the end is never
    /// tried, and the error says nothing of the name (`Elapsed`). A maximum wait ends the call
    /// between attempts, makes one last attempt at the deadline, and says who held the name. Use
    /// the maximum wait for "wait at most 10 s", and a timeout for a bound on everything around
    /// it (a timeout shorter than the maximum wait simply wins).
    ///
    /// A fair waiter ([`with_fair`](Mutex::with_fair)) leaves the line at the deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    /// use std::time::{Duration, Instant};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let held = redlock.new_mutex("report").lock().await?;
    /// let waiter = redlock.new_mutex("report").with_max_wait(Duration::from_millis(200));
    /// let started = Instant::now();
    /// let Err(Error::WaitedOut { waited, last }) = waiter.lock().await else {
    ///     panic!("the lock is held throughout");
    /// };
    /// assert!(waited >= Duration::from_millis(200) && started.elapsed() < Duration::from_secs(2));
    /// assert!(matches!(*last, Error::Taken { .. }));
    /// held.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_max_wait(self, wait: Duration) -> Self {
        self.with_settings(|s| s.max_wait = Some(wait))
    }

    /// Waits exactly `delay` between attempts. Default: random in 50..250 ms, which spreads
    /// competing clients apart; a fixed delay suits tests and single-contender setups.
    ///
    /// Every delay is valid. `Duration::ZERO` tries again at once (each attempt still costs a
    /// round trip to every node). `Duration::MAX` waits for ever between attempts: with wake-up
    /// on release (the default) or [`with_fair`](Mutex::with_fair) only a release ends the wait
    /// (or the [maximum wait](Mutex::with_max_wait)), which suits a waiter that should never
    /// poll; with [`with_wake_on_release(false)`](Mutex::with_wake_on_release) `lock()` makes one
    /// attempt and then waits until it is cancelled (say by `tokio::time::timeout`) or its
    /// maximum wait ran out.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_retry_delay(Duration::from_millis(100));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay(self, delay: Duration) -> Self {
        self.with_settings(|s| s.retry_delay = RetryDelay::Fixed(delay))
    }

    /// Computes the delay from the number of the attempt that just failed (1, 2, ...), e.g. for
    /// exponential backoff. Replaces [`with_retry_delay`](Mutex::with_retry_delay). Any delay it
    /// returns is valid, as there.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock
    ///     .new_mutex("report")
    ///     .with_retry_delay_fn(|attempt| Duration::from_millis(10 << attempt.min(6)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay_fn<F>(self, delay: F) -> Self
    where
        F: Fn(u32) -> Duration + Send + Sync + 'static,
    {
        self.with_settings(|s| s.retry_delay = RetryDelay::Custom(Arc::new(delay)))
    }

    /// The allowance for clock drift between machines, as a fraction of the expiry: validity is
    /// `expiry - elapsed - expiry * drift_factor`. Default 0.01; must be in `[0, 1)` (NaN is not),
    /// or every operation returns [`Error::Config`] before any I/O.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_drift_factor(0.02);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_drift_factor(self, factor: f64) -> Self {
        self.with_settings(|s| s.drift_factor = factor)
    }

    /// The per-node timeout as a fraction of the expiry: no node call waits longer than
    /// `expiry * timeout_factor`, so one slow or paused node cannot stall a lock. Default 0.05; must
    /// be in `(0, 1)` (NaN is not), or every operation returns [`Error::Config`] before any I/O.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// // 2 s expiry, 100 ms per node.
    /// let mutex = redlock
    ///     .new_mutex("report")
    ///     .with_expiry(Duration::from_secs(2))
    ///     .with_timeout_factor(0.05);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_timeout_factor(self, factor: f64) -> Self {
        self.with_settings(|s| s.timeout_factor = factor)
    }

    /// Returns from an attempt as soon as its outcome is decided (a quorum said OK, or can no longer
    /// say so) instead of waiting for every node. Default false.
    ///
    /// Calls still in flight are not abandoned: after a success they finish in the background, so the
    /// lock lands on as many nodes as possible; after a failure they are released like the rest.
    /// [`Lock::extend`], [`Lock::unlock`] and dropping the lock stop those still in flight without
    /// waiting for them: requests already sent run first on their node's connection, the others
    /// are never sent. [`Lock::unlock`] and [`Lock::extend`] return once their outcome is decided
    /// too, and leave their own calls still in flight to finish the same way.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_fail_fast(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fail_fast(self, fail_fast: bool) -> Self {
        self.with_settings(|s| s.fail_fast = fail_fast)
    }

    /// Adds the label `use` (its value `label`) to this mutex's metrics (with the `metrics` feature; see
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
    /// let mutex = redlock.new_mutex("order:42").with_metrics_label("checkout");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_metrics_label(self, label: &'static str) -> Self {
        self.with_settings(|s| s.metrics_label = Some(label))
    }

    /// Hands out a fencing token with each acquisition ([`Lock::token`]). Default false.
    ///
    /// Costs one more concurrent round trip per acquisition: after a quorum said OK, the name's
    /// counter (key `{<name>}:fence` on every node, in the name's slot, never expiring, kept across
    /// unlocks; see [keys and notice channels](crate::guide::keys)) is raised to the new token on
    /// a quorum where this lock's value holds, and only then is the token handed out. That second
    /// round is what makes tokens strictly increase across holders even when failed partial
    /// attempts left some nodes' counters ahead (see [`fenced_set`](crate::fenced_set) for the
    /// proof). Each node reads its counter with its clock (`TIME`, in microseconds) as a floor, so
    /// a node that lost its counter (a restart without persistence, a failover that lost the last
    /// raise) still hands the next holder a larger token, as long as the nodes' clocks agree
    /// within the time between the two acquisitions. Tokens are microsecond timestamps or just
    /// above, exact up to 2^53 (Redis scripts count in doubles; the year 2255).
    ///
    /// # Counters stay
    ///
    /// A counter never expires, so every name that ever had a fenced holder keeps one small
    /// string key on every node: about its key's length plus 55 bytes (see `benches/README.md`),
    /// which matters for per-entity names (a lock per order or per user). redmutex never deletes
    /// counters. A deleted counter is a forgotten one: the next tokens start from the nodes'
    /// clocks, above the earlier ones as long as no token of the name was ever above the clocks
    /// (set by hand, or from a clock that ran ahead); otherwise a resource that remembers the
    /// highest token it accepted refuses the next holders until the clocks pass it. Delete only the
    /// counters of names that are done for good (`SCAN MATCH {order:*}:fence` once those orders
    /// are closed, say), or put the resource's highest token back into the counters before the
    /// name is used again.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("ledger").with_fencing(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fencing(self, fencing: bool) -> Self {
        self.with_settings(|s| s.fencing = fencing)
    }

    /// Wakes waiting [`lock`](Mutex::lock) calls when the lock is released, instead of leaving
    /// them to their retry delay. Default true: a waiter that set nothing is woken by the release
    /// of a holder that set nothing, in any process. `false` opts out on both sides: the mutex's
    /// `lock()` polls at its retry delay, and its releases notify nobody.
    ///
    /// A `lock()` that has to wait listens on one shared pub/sub connection per node, opened by
    /// the [`Redlock`] when first needed and subscribed per name only while someone waits on it
    /// (and a few seconds after), and marks the name as waited for when it starts to wait and
    /// again wherever the mark may be gone (a key beside the name that lives 10 s, see [keys and
    /// notice channels](crate::guide::keys)). A
    /// release (unlock, drop, the cleanup of a failed attempt) deletes the mark with the key, in
    /// the same script, and publishes a notice only where it found one: a release nobody waits
    /// for costs a node one more key in its `DEL` and sends nothing. A waiter retries as soon as
    /// a quorum of nodes reported a release since its last attempt began. Within one `Redlock`,
    /// one waiter per release is woken, first come first served, so a release does not set off
    /// every waiter at once; the others keep waiting for the next release. The retry delay stays
    /// as the fallback: a lost notice (a listener reconnecting, a node down, a lock that expired
    /// instead of being released) costs at most one delay. Every attempt of a waiting call uses a
    /// value of its own, since a notice names the released value. Needs a `Redlock` made by
    /// [`Redlock::connect`]; with connections the caller built ([`Redlock::new`]) there is
    /// nothing to open listeners with, and waiters poll (unmarked).
    ///
    /// **Older clients.** Releases of redmutex before this default never look for a mark: an
    /// older holder that did not set `with_wake_on_release(true)` notifies nobody (waiters poll),
    /// one that did notifies on every release. An older waiter never marks the name: it is woken
    /// by a release of this version only while a waiter of this version waits too, and otherwise
    /// polls, as it did with a holder that did not publish. Other Redlock libraries on the name
    /// notify nobody. Nothing of this touches exclusion: notices are hints. Fair waiters of both
    /// versions on one name still queue in order, but an older fair waiter does not mark the
    /// name: where none of this version stands in line, a release of this version hands it
    /// nothing, and it takes its turn at its next round. [`guide::waiting`](crate::guide::waiting)
    /// has the whole table.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::Redlock;
    /// use std::time::{Duration, Instant};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// // A long retry delay: only the release notice can wake the waiter early.
    /// let mutex = redlock
    ///     .new_mutex("printer")
    ///     .with_retry_delay(Duration::from_secs(60));
    /// let held = mutex.lock().await?;
    /// let waiter = tokio::spawn({
    ///     let mutex = mutex.clone();
    ///     async move { mutex.lock().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(200)).await; // the waiter is waiting now
    /// let released = Instant::now();
    /// held.unlock().await?;
    /// let next = waiter.await??;
    /// assert!(released.elapsed() < Duration::from_secs(30));
    /// next.unlock().await?;
    /// // Polling instead:
    /// let polling = redlock.new_mutex("printer").with_wake_on_release(false);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_wake_on_release(self, wake: bool) -> Self {
        self.with_settings(|s| s.wake_on_release = wake)
    }

    /// Serves waiting [`lock`](Mutex::lock) calls of every client in the order they began to
    /// wait, and hands the lock from each holder straight to the next. Default false. Implies
    /// [`with_wake_on_release(true)`](Mutex::with_wake_on_release), whatever was set. Set it on
    /// every `Mutex` of the name: a plain mutex on the name still excludes fair ones and is
    /// excluded by them, but does not wait in line, so it may take the lock ahead of the line
    /// whenever it finds it free.
    ///
    /// Every node keeps a line of waiters for the name, ordered by tickets that all nodes order the
    /// same way. A waiter joins with the attempt that finds the lock held (no extra round trip),
    /// and renews its place every third of the expiry; a release on a node hands the lock to the
    /// first live waiter in that node's line, and notifies only that waiter's client, which holds
    /// the lock once a quorum of nodes handed it over, without another round trip. A waiter that
    /// joined on a quorum of nodes is never overtaken by one that began to wait after it; a waiter
    /// that crashed is passed over once its place expires (one expiry). [`guide::waiting`](crate::guide::waiting)
    /// has the argument and the limits.
    ///
    /// A lock handed over in line is valid from the waiter's last renewal of its place, so its
    /// [`valid_until`](Lock::valid_until) may be up to a third of the expiry shorter than after a
    /// fresh acquisition; [`extend`](Lock::extend) as usual. `lock()` waits in line as long as it
    /// would otherwise spend in its retry delays (the sum of `tries - 1` delays; past the first
    /// thousand, each counts as their average, so a delay function is asked a thousand times at
    /// most), then leaves the line; [`try_lock`](Mutex::try_lock) never joins it. Fair waiting
    /// needs listeners, hence a [`Redlock::connect`](crate::Redlock::connect) client, and does not
    /// combine with fencing yet ([`Error::Config`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::Redlock;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// // Two processes in real life; two clients here.
    /// let (first, second) = (Redlock::connect(cluster.urls()).await?, Redlock::connect(cluster.urls()).await?);
    /// let mutex = |redlock: &Redlock| redlock.new_mutex("printer").with_fair(true);
    /// let held = mutex(&first).lock().await?;
    /// let waiter = tokio::spawn({
    ///     let mutex = mutex(&second);
    ///     async move { mutex.lock().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(100)).await; // the waiter is in line now
    /// held.unlock().await?; // hands the lock to the waiter
    /// let next = waiter.await??;
    /// next.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fair(self, fair: bool) -> Self {
        self.with_settings(|s| s.fair = fair)
    }

    /// Counts a member only once `replicas` replicas of the master that took a lock write
    /// acknowledged it. Default 0: off, and nothing more is sent.
    ///
    /// A master replicates asynchronously, so a replica promoted after its master failed may
    /// lack a lock key written just before (to Redlock, that member forgot the lock). With this
    /// set, each lock write that counts (an acquisition, an [`extend`](Lock::extend), and the
    /// raise of a fencing counter) is followed by `WAIT replicas timeout` in the same pipeline,
    /// which runs on whichever master ran the write (on a Redis Cluster, also one the write was
    /// redirected to: a master importing the slot after `ASK`, the owner the client learns from
    /// `MOVED`, a new master after a failover), and the member
    /// counts only if at least `replicas` replicas acknowledged it; otherwise it is a failed
    /// member ([`NodeErrorKind::Unreplicated`](crate::NodeErrorKind::Unreplicated), "0 of 1
    /// replicas acknowledged ...") and a failed attempt releases its write with the rest. WAIT's
    /// timeout is half the node timeout (`expiry * timeout_factor`), so that the write and the
    /// WAIT answer within it; an expiry whose node timeout leaves WAIT no whole millisecond is
    /// refused ([`Error::Config`]). Releases do not wait: a release a failover lost brings back a
    /// key nobody holds, which blocks the name on that member until it expires and never admits
    /// a second holder. A standalone server without replicas never counts with this set.
    ///
    /// What it does not do: WAIT makes no write synchronous. A failover may still promote a
    /// replica that did not acknowledge (one of more than `replicas`, or after a manual
    /// `CLUSTER FAILOVER TAKEOVER`), and a write acknowledged by a replica that then fails with
    /// its master is lost all the same; Redis documents WAIT as making such losses less likely,
    /// not impossible. Redlock's own answer to a member that forgot stays the quorum (and
    /// [fencing](Mutex::with_fencing)). While a WAIT waits, Redis holds back the connection's
    /// later commands, so a replica that stops answering slows this client's operations on that
    /// master by up to WAIT's timeout; the WAIT goes with every acquire, also one that finds the
    /// name taken (it then answers at once, unless a replica lags behind the connection's earlier
    /// writes). The user needs `+wait`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::RedisCluster::start(3, 1);
    /// // A Redis Cluster with one replica per master, as one member.
    /// let redlock = Redlock::connect([cluster.seed_url()]).await?;
    /// let mutex = redlock.new_mutex("ledger").with_replica_acks(1);
    /// let lock = mutex.lock().await?; // a replica of the key's master has the key
    /// lock.extend().await?; // and its new expiry
    /// lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_replica_acks(self, replicas: u32) -> Self {
        self.with_settings(|s| s.replica_acks = replicas)
    }

    /// Sends to the nodes in a random order on each operation. Default false. With concurrent
    /// fan-out this rarely matters; it spreads who-asked-first when many clients race.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let mutex = redlock.new_mutex("report").with_shuffle_nodes(true);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_shuffle_nodes(self, shuffle: bool) -> Self {
        self.with_settings(|s| s.shuffle_nodes = shuffle)
    }

    /// Generates the lock value for each acquisition. Default: 16 bytes from a CSPRNG, base64url.
    ///
    /// Every acquisition must get a value no other acquisition ever gets: two holders with one value
    /// can release each other's lock. An empty value, one with a NUL character and one that starts
    /// with `+` (the flag of a release notice that kept the waiters' mark) are rejected with
    /// [`Error::Config`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::time::{SystemTime, UNIX_EPOCH};
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    ///
    /// // Traceable values: who took the lock, unique across restarts (start time) and within the
    /// // process (sequence). A plain counter would repeat after a restart.
    /// let started = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |t| t.as_nanos());
    /// let mutex = redlock.new_mutex("report").with_value_fn(move || {
    ///     let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    ///     format!("worker-7:{}:{started}:{n}", std::process::id())
    /// });
    /// let lock = mutex.lock().await?;
    /// assert!(lock.value().starts_with("worker-7:"));
    /// # lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_value_fn<F>(self, value: F) -> Self
    where
        F: Fn() -> String + Send + Sync + 'static,
    {
        self.with_settings(|s| s.value_fn = Some(Arc::new(value)))
    }

    /// The resource name: the key used on every node. For a multi-name mutex, the first of its
    /// names (see [`names`](Mutex::names)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_mutex("report").name(), "report");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.resource.name()
    }

    /// Every name the mutex covers, without duplicates, in the order given: one for a mutex made
    /// by [`Redlock::new_mutex`], all of them for one made by [`Redlock::new_multi_mutex`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let transfer = redlock.new_multi_mutex(["account:7", "account:3", "account:7"]);
    /// let names: Vec<&str> = transfer.names().collect();
    /// assert_eq!(names, ["account:7", "account:3"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.resource.target().names().iter().map(|name| &**name)
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
    /// assert_eq!(redlock.new_mutex("report").expiry(), Duration::from_secs(8));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expiry(&self) -> Duration {
        self.resource.settings().expiry
    }

    /// Acquires the lock, retrying up to `tries` attempts (or for the
    /// [maximum wait](Mutex::with_max_wait)), woken by the holder's release or else at the retry
    /// delay between them.
    ///
    /// Each attempt sends `SET name value NX PX expiry` to every node at once (each call bounded by
    /// the node timeout) and succeeds when a quorum said OK and validity is left. A multi-name
    /// mutex sends one script per node instead, which sets every name or none. A failed attempt is
    /// released on every node, including those that erred or timed out, before the next one.
    /// Once a call has to wait, its attempts also mark the name as waited for, so that the
    /// holder's release notifies it (see [`with_wake_on_release`](Mutex::with_wake_on_release)).
    ///
    /// # Errors
    ///
    /// The last attempt's error: [`Error::Taken`], [`Error::Expired`] or [`Error::NoQuorum`];
    /// [`Error::WaitedOut`] (with that error) when the maximum wait ran out first;
    /// [`Error::Config`] (before any I/O) for invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point (before the `SET`s went out, while they are in flight and
    /// some nodes may hold the key already, during the release of a failed attempt, or during the
    /// retry delay) sends a release of whatever it may have set to every node at once, in the
    /// background on the current tokio runtime: a request already queued at a node runs there
    /// first, then the release, so the next locker gets in at once rather than after the expiry.
    /// Without a runtime, the keys expire on their own.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let lock = redlock.new_mutex("job:rebuild-index").lock().await?;
    /// assert!(lock.valid_until() > std::time::Instant::now());
    /// lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<Lock, Error> {
        let plan = self.plan()?;
        let value = self.new_value()?;
        let span = tracing::debug_span!("redmutex.lock", name = %self.name(), tries = plan.tries);
        self.acquire(plan, value, plan.tries, span).await
    }

    /// Makes exactly one attempt to acquire the lock.
    ///
    /// # Errors
    ///
    /// As [`lock()`](Mutex::lock), for the single attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`lock()`](Mutex::lock), for its one attempt: a `try_lock()` dropped after its `SET`s
    /// went out releases them in the background.
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
    /// let mutex = redlock.new_mutex("job:send-invoices");
    /// let first = mutex.try_lock().await?;
    /// assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    /// first.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<Lock, Error> {
        let plan = self.plan()?;
        let value = self.new_value()?;
        let span = tracing::debug_span!("redmutex.try_lock", name = %self.name());
        self.acquire(plan, value, 1, span).await
    }

    /// A handle on a lock that another handle (possibly in another process) acquired with `value`.
    ///
    /// This is ownership transfer: the returned handle can [`unlock`](Lock::unlock) at once and can
    /// [`extend`](Lock::extend); its [`valid_until`](Lock::valid_until) is the moment of adoption
    /// (already passed) until an extend succeeds. Dropping its last clone releases the lock like any
    /// other handle.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("job:export");
    /// let original = mutex.lock().await?;
    /// let value = original.value().to_owned();
    /// // ... `value` travels to another process, which takes over:
    /// let adopted = mutex.adopt(value);
    /// adopted.extend().await?;
    /// adopted.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn adopt(&self, value: impl Into<String>) -> Lock {
        let value: String = value.into();
        let held = Held::new(
            self.resource.clone(),
            value.into(),
            Instant::now(),
            None,
            None,
            Vec::new(),
        );
        Lock::new(held)
    }

    /// Makes up to `tries` attempts with `value` first, in `span`.
    pub(crate) async fn acquire(
        &self,
        plan: &Plan,
        value: Arc<str>,
        tries: u32,
        span: tracing::Span,
    ) -> Result<Lock, Error> {
        let acquire = acquire(&self.resource, &self.listeners, plan, value, tries);
        // Entering a disabled span on every poll still costs: skip it when nobody listens.
        let held = if span.is_disabled() {
            acquire.await
        } else {
            acquire.instrument(span).await
        };
        held.map(Lock::new)
    }

    /// The same settings over another target (a read-write lock's writer, whose mark depends on
    /// the settings).
    pub(crate) fn with_target(mut self, target: Arc<dyn Target>) -> Self {
        self.resource = self.resource.with_target(target);
        self
    }

    pub(crate) fn new_value(&self) -> Result<Arc<str>, Error> {
        self.resource.new_value()
    }

    /// The validated settings, or why they are invalid.
    pub(crate) fn plan(&self) -> Result<&Plan, Error> {
        self.resource.plan()
    }

    /// The nodes, the target and the settings.
    pub(crate) fn resource(&self) -> &Resource {
        &self.resource
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("target", self.resource.target())
            .field("settings", self.resource.settings())
            .field("nodes", &self.resource.nodes().len())
            .finish()
    }
}
