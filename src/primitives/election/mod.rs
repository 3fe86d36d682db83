//! Leader election: one leader among candidates, with a fencing epoch, a loss signal and a
//! record others can read. Assembled from the mutex (fenced, woken on release), the keep-alive
//! and one script of its own (`target`): a campaign is a `Mutex::lock` whose fencing raise also
//! writes who leads, and leadership is the held lock with its keep-alive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;

#[cfg(doc)]
use crate::Redlock;
use crate::engine::quorum::quorum;
use crate::error::{Error, NodeError};
use crate::nodes::Node;
use crate::nodes::probe::{each_node, eval};
use crate::primitives::keep_alive::{KeepAlive, KeepAliveEnd};
use crate::primitives::lock::Lock;
use crate::primitives::mutex::Mutex;
use crate::primitives::run;
use crate::waiting::hub::Watcher;
use crate::waiting::listeners::Listeners;

pub(crate) mod target;

use target::{ElectionTarget, READ_LEADER, check_identity, judge, read_seen, record_key};
pub(crate) use target::{SCRIPTS, SUFFIXES};

/// A leader election over one name ([`Redlock::new_election`]): configuration only.
///
/// Candidates [`campaign`](Election::campaign); the one that leads gets a [`Leadership`], which
/// renews itself in the background, carries a fencing [`epoch`](Leadership::epoch) greater than
/// every earlier leader's, and says when it is [`lost`](Leadership::lost). Anybody can read who
/// leads ([`leader`](Election::leader), [`watch`](Election::watch)).
///
/// Underneath, the election is a fenced mutex with wake-up on release over the name: the lock
/// value stays a secret of the leader; its public `identity` and its epoch are written to
/// `{<name>}:leader` in the same script that raises the fencing counter, so a campaign returns
/// only once a quorum of nodes names its candidate.
///
/// # Default
///
/// | setting | default | valid |
/// |---|---|---|
/// | [`with_expiry`](Election::with_expiry) (the lease) | 8 s | 1 ms to 365 days |
/// | [`with_renew_every`](Election::with_renew_every) | a third of the lease | more than zero, less than the lease |
/// | [`with_tries`](Election::with_tries) | `u32::MAX` (campaign until elected) | 1 to `u32::MAX` |
/// | [`with_max_wait`](Election::with_max_wait) | none | any |
/// | [`with_retry_delay`](Election::with_retry_delay) | random in 50..250 ms | any |
/// | [`with_drift_factor`](Election::with_drift_factor) | 0.01 | `[0, 1)` |
/// | [`with_timeout_factor`](Election::with_timeout_factor) | 0.05 | `(0, 1)` |
///
/// # Errors
///
/// Setters never fail: an invalid value is reported as [`Error::Config`] by the first
/// operation, before any I/O.
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
/// let election = redlock.new_election("scheduler").with_expiry(Duration::from_secs(2));
/// let leadership = election.campaign("host-a").await?;
/// let leader = election.leader().await?.expect("a leader");
/// assert_eq!((leader.identity.as_str(), leader.epoch), ("host-a", leadership.epoch()));
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../../doc/rustdoc-links.md")]
#[doc = include_str!("../../../doc/election.md")]
#[derive(Clone)]
pub struct Election {
    mutex: Mutex,
    renew_every: Option<Duration>,
    /// The client's release listeners: [`watch`](Election::watch) hears the name's notices.
    listeners: Arc<Listeners>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("mutex", &self.mutex)
            .field("renew_every", &self.renew_every)
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(nodes: Arc<[Node]>, listeners: Arc<Listeners>, name: Arc<str>) -> Self {
        // Checked for the name alone; each campaign brings its identity.
        let target = Arc::new(ElectionTarget::new(name, "-".into()));
        let mutex = Mutex::new(nodes, Arc::clone(&listeners), target).with_settings(|s| {
            s.fencing = true;
            s.wake_on_release = true;
            s.tries = Some(u32::MAX);
        });
        Election {
            mutex,
            renew_every: None,
            listeners,
        }
    }

    /// The lease: how long the nodes keep a leader that stopped renewing. Default 8 s. A crashed
    /// leader is replaced after at most this long (and a retry delay); see
    /// [`Mutex::with_expiry`] for the bounds.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_expiry(Duration::from_secs(4));
    /// assert_eq!(election.expiry(), Duration::from_secs(4));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_expiry(mut self, lease: Duration) -> Self {
        self.mutex = self.mutex.with_settings(|s| s.expiry = lease);
        self
    }

    /// How often a leader renews its lease. Default: a third of the lease. Must be more than zero
    /// and less than the lease ([`Error::Config`] from [`campaign`](Election::campaign)
    /// otherwise): a renewal that does not succeed before the lease ends loses the leadership.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_renew_every(Duration::from_secs(1));
    /// assert_eq!(election.renew_every(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How long a [campaign](Election::campaign) may wait to lead, in all; then
    /// [`Error::WaitedOut`]. Default: no maximum (a campaign goes on until elected, see
    /// [`with_tries`](Election::with_tries), which stays a bound too: whichever runs out first
    /// ends it). See [`Mutex::with_max_wait`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_max_wait(Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.mutex = self.mutex.with_max_wait(wait);
        self
    }

    /// How many attempts a campaign makes before it gives up with the last attempt's error.
    /// Default `u32::MAX`: in effect, until elected. See [`Mutex::with_tries`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_tries(1); // one attempt: try to lead
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_tries(mut self, tries: u32) -> Self {
        self.mutex = self.mutex.with_settings(|s| s.tries = Some(tries));
        self
    }

    /// The delay between a standby's attempts when no release notice wakes it earlier (a leader
    /// that resigns wakes standbys at once; one that crashed is found by these attempts once
    /// its lease ran out). See [`Mutex::with_retry_delay`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_retry_delay(Duration::from_millis(100));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.mutex = self.mutex.with_retry_delay(delay);
        self
    }

    /// The delay after attempt number `n`, computed. See [`Mutex::with_retry_delay_fn`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock
    ///     .new_election("cron")
    ///     .with_retry_delay_fn(|n| Duration::from_millis(50 * u64::from(n.min(10))));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_retry_delay_fn<F>(mut self, delay: F) -> Self
    where
        F: Fn(u32) -> Duration + Send + Sync + 'static,
    {
        self.mutex = self.mutex.with_retry_delay_fn(delay);
        self
    }

    /// The allowance for clock drift, as a fraction of the lease. See
    /// [`Mutex::with_drift_factor`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_drift_factor(0.02);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_drift_factor(mut self, factor: f64) -> Self {
        self.mutex = self.mutex.with_drift_factor(factor);
        self
    }

    /// The per-node timeout, as a fraction of the lease. See [`Mutex::with_timeout_factor`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_timeout_factor(0.1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_timeout_factor(mut self, factor: f64) -> Self {
        self.mutex = self.mutex.with_timeout_factor(factor);
        self
    }

    /// Returns from a campaign or a renewal as soon as its outcome is decided, without waiting
    /// for the farthest members. See [`Mutex::with_fail_fast`].
    ///
    /// # Default
    ///
    /// `false`: every member's reply is awaited (up to the node timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("cron").with_fail_fast(true);
    /// let leadership = election.campaign("host-a").await?;
    /// assert_eq!(leadership.identity(), "host-a");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_fail_fast(mut self, fail_fast: bool) -> Self {
        self.mutex = self.mutex.with_fail_fast(fail_fast);
        self
    }

    /// The election's name: the key of its lock on every node.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_election("cron").name(), "cron");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The lease as configured.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.new_election("cron").expiry(), std::time::Duration::from_secs(8));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expiry(&self) -> Duration {
        self.mutex.expiry()
    }

    /// The renewal period: as set, or a third of the lease.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let election = redlock.new_election("cron").with_expiry(Duration::from_secs(3));
    /// assert_eq!(election.renew_every(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn renew_every(&self) -> Duration {
        self.renew_every.unwrap_or(self.expiry() / 3)
    }

    /// The renewal period, checked against the lease.
    fn checked_renew_every(&self) -> Result<Duration, Error> {
        let every = self.renew_every();
        if every.is_zero() || every >= self.expiry() {
            return Err(Error::config(
                "renew_every",
                format!(
                    "must be more than zero and less than the lease ({:?}), got {every:?}",
                    self.expiry()
                ),
            ));
        }
        Ok(every)
    }

    /// Campaigns until this candidate leads, and returns its leadership.
    ///
    /// Each attempt is a fenced acquisition of the election's lock; its second round raises the
    /// fencing counter to the new epoch and writes `identity` and the epoch to the leader's record
    /// in the same script, on a quorum, before this returns. While another leads, the candidate
    /// waits for a release notice (a resignation wakes it at once), or its retry delay (a leader
    /// that crashed is replaced once its lease ran out). `identity` is public: anybody reading
    /// [`leader`](Election::leader) sees it; the lock's value stays secret.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] (before any I/O) for invalid settings or an empty identity; after
    /// [`with_tries`](Election::with_tries) attempts, the last one's error; once the
    /// [maximum wait](Election::with_max_wait) ran out, [`Error::WaitedOut`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point (while another leads, or with its acquisition or its
    /// fencing raise in flight) releases whatever it may have acquired, in the background, so
    /// that another candidate is elected at once rather than after the lease.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("indexer");
    /// let first = election.campaign("pod-1").await?;
    /// first.resign().await?;
    /// let second = election.campaign("pod-2").await?;
    /// assert!(second.epoch() > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self, identity: impl Into<String>) -> Result<Leadership, Error> {
        let identity: Arc<str> = identity.into().into();
        check_identity(&identity)?;
        let renew_every = self.checked_renew_every()?;
        let target = Arc::new(ElectionTarget::new(
            Arc::clone(self.mutex.resource().target().first()),
            Arc::clone(&identity),
        ));
        let lock = self.mutex.clone().with_target(target).lock().await?;
        let Some(epoch) = lock.token() else {
            // Not reached: every election is fenced.
            return Err(Error::config(
                "fencing",
                "an election's lock must be fenced",
            ));
        };
        let keep = lock.keep_alive(renew_every);
        Ok(Leadership {
            lock,
            keep,
            identity,
            epoch,
        })
    }

    /// Who leads, read from every node at once: the leader a quorum of nodes names, or `None`.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered to tell; [`Error::Config`] for invalid
    /// settings.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, and a dropped reading changes nothing on the nodes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("indexer");
    /// assert!(election.leader().await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, Error> {
        let plan = self.mutex.plan()?;
        let nodes = self.mutex.resource().nodes();
        let name = self.name();
        let record = record_key(name);
        let keys = [name, record.as_str()];
        let keys = &keys[..];
        let started = Instant::now();
        let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
            read_seen(eval(&mut connection, &READ_LEADER, keys, &[]).await?)
        })
        .await;
        let leader = judge(answers, quorum(nodes.len()), started.elapsed())
            .map_err(|error| error.name_nodes(&|node| crate::nodes::address(nodes, node)))?;
        Ok(leader.map(|(epoch, identity, time_left)| LeaderInfo {
            identity,
            epoch,
            time_left,
        }))
    }

    /// A stream of who leads: the first reading at once, then each change (a new leader, or
    /// none). It reads again when a release notice on the name arrives (a leader resigned, or its
    /// lease was released), shortly after that to catch the next leader's election, and every
    /// [`renew_every`](Election::renew_every) in any case, so a missed notice (a client made with
    /// [`Redlock::new`], which has no listeners, or a crashed leader, which sends none) only
    /// delays an update by one period. Errors are passed on, and the stream goes on reading; the
    /// first reading after an error is passed on whatever it says.
    ///
    /// # Cancel safety
    ///
    /// The stream's `next()` is cancel safe: a reading dropped halfway (in a `tokio::select!`
    /// that took another branch) stays in the stream and goes on at the next call, so no change
    /// is missed. Dropping the stream stops reading and leaves the name's notices.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use futures::StreamExt;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("indexer").with_expiry(Duration::from_secs(1));
    /// let mut watch = Box::pin(election.watch());
    /// assert!(watch.next().await.expect("a first reading")?.is_none());
    /// let leadership = election.campaign("pod-1").await?;
    /// let leader = watch.next().await.expect("a change")?.expect("a leader");
    /// assert_eq!(leader.epoch, leadership.epoch());
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self) -> impl Stream<Item = Result<Option<LeaderInfo>, Error>> + Send + 'static {
        let election = self.clone();
        let every = self.renew_every().max(Duration::from_millis(1));
        let follow_up = FOLLOW_UP.min(every);
        let watching = Watching {
            election,
            watcher: None,
            last: None,
            wait: None,
        };
        futures::stream::unfold(watching, move |mut watching| async move {
            loop {
                match watching.wait {
                    // Listening before the first reading: a change after it is heard.
                    None => watching.listen().await,
                    Some(wait) => watching.notice_or(wait).await,
                }
                let noticed = watching.wait == Some(Duration::ZERO);
                watching.wait = Some(every);
                match watching.election.leader().await {
                    Err(error) => {
                        watching.last = None;
                        return Some((Err(error), watching));
                    }
                    Ok(leader) => {
                        let key = leader.as_ref().map(|l| (l.epoch, l.identity.clone()));
                        if key.is_none() && noticed {
                            // Released a moment ago: the next leader is likely elected within
                            // milliseconds, and sends no notice of its own.
                            watching.wait = Some(follow_up);
                        }
                        if watching.last.as_ref() != Some(&key) {
                            watching.last = Some(key);
                            return Some((Ok(leader), watching));
                        }
                    }
                }
            }
        })
    }
}

/// How soon [`Election::watch`] reads again after a release notice found no leader.
const FOLLOW_UP: Duration = Duration::from_millis(50);

/// The state of one [`Election::watch`] stream.
struct Watching {
    election: Election,
    /// The name's notices, once the listeners run (none on a client without them).
    watcher: Option<Watcher>,
    /// The last reading passed on (`None` before the first and after an error, so that the next
    /// reading is news).
    last: Option<Option<(u64, String)>>,
    /// How long the next reading waits for a notice; `None` for the first, which reads at once.
    /// Set to zero when a notice cut the wait short.
    wait: Option<Duration>,
}

impl Watching {
    /// Starts hearing the name's notices, once the listeners confirmed the subscription (or a
    /// period passed: until then, changes are read every period only).
    async fn listen(&mut self) {
        if self.watcher.is_some() {
            return;
        }
        let Some(hub) = self.election.listeners.hub() else {
            return;
        };
        let name: Arc<str> = Arc::from(self.election.name());
        let (watcher, subscribing) = hub.watch(&name);
        self.watcher = Some(watcher);
        if let Some(subscribing) = subscribing {
            subscribing.confirmed(self.election.renew_every()).await;
        }
    }

    /// Waits `wait`, or less if a notice on the name arrives first.
    async fn notice_or(&mut self, wait: Duration) {
        self.listen().await;
        let Some(watcher) = &self.watcher else {
            tokio::time::sleep(wait).await;
            return;
        };
        tokio::select! {
            () = watcher.changed() => self.wait = Some(Duration::ZERO),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Who leads an election, as a quorum of nodes recorded it ([`Election::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The identity the leader campaigned with.
    pub identity: String,
    /// The leader's epoch (its fencing token).
    pub epoch: u64,
    /// How long a quorum of nodes still holds the leader's lease, from the reading's end; the
    /// leader renews it well before.
    pub time_left: Duration,
}

/// Why a [`Leadership`] ended ([`Leadership::lost`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeadershipEnd {
    /// A renewal failed: the lease may be taken by another (stop acting as leader). Carries the
    /// error.
    Lost(Error),
    /// The lease ran out before a renewal succeeded (stop acting as leader).
    Expired,
    /// The leadership was resigned.
    Resigned,
}

/// Leading an election ([`Election::campaign`]): renews its lease in the background while it
/// lives, and says when it is lost.
///
/// Act as leader only while [`is_leading`](Leadership::is_leading) holds, around the work with
/// [`lost`](Leadership::lost), and write to shared resources with [`epoch`](Leadership::epoch) as
/// a fencing token, so that a leader that was paused past its lease is refused there. Dropping it
/// stops renewing and resigns in the background (best effort; the lease expires otherwise).
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
/// let election = redlock.new_election("billing").with_expiry(Duration::from_secs(1));
/// let leadership = election.campaign("worker-3").await?;
/// tokio::select! {
///     end = leadership.lost() => panic!("lost: {end:?}"),
///     () = tokio::time::sleep(Duration::from_secs(2)) => {} // work, twice the lease
/// }
/// assert!(leadership.is_leading());
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Leadership {
    lock: Lock,
    keep: KeepAlive,
    identity: Arc<str>,
    epoch: u64,
}

impl Leadership {
    /// The epoch: the fencing token of this term, greater than every earlier leader's. Pass it
    /// with every write to a resource that remembers the highest it accepted (see
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
    /// let election = redlock.new_election("e");
    /// let first = election.campaign("a").await?.epoch();
    /// let second = election.campaign("b").await?.epoch(); // after the first was dropped
    /// assert!(second > first);
    /// # Ok(())
    /// # }
    /// ```
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The fingerprint of this term's lock value, as `redmutex status` shows the holder's (see
    /// [`Lock::fingerprint`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// let state = redlock.new_mutex("e").inspect().await?;
    /// assert_eq!(state.fingerprint(), Some(leadership.fingerprint().as_str()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fingerprint(&self) -> String {
        self.lock.fingerprint()
    }

    /// The members that did not hold this term's lease at its last successful campaign or
    /// renewal, with why (see [`Lock::failing_nodes`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// assert!(leadership.failing_nodes().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn failing_nodes(&self) -> Vec<NodeError> {
        self.lock.failing_nodes()
    }

    /// The identity this leader campaigned with.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// assert_eq!(leadership.identity(), "a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Until when this leader may act as one, on this process's monotonic clock: the lease's
    /// validity after the last successful renewal.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// assert!(leadership.valid_until() > std::time::Instant::now());
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    /// Why the leadership ended, if it has; checked without waiting, on the clock too, so a
    /// leader that was paused past its lease sees it ended at its first look, before the renewal
    /// task had a chance to run.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// assert!(leadership.end().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn end(&self) -> Option<LeadershipEnd> {
        if let Some(end) = self.keep.end() {
            return Some(ended(end));
        }
        (Instant::now() >= self.lock.valid_until()).then_some(LeadershipEnd::Expired)
    }

    /// Whether this candidate still leads: [`end`](Leadership::end) is `None`. Check it before
    /// each step of the leader's work.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("e").campaign("a").await?;
    /// assert!(leadership.is_leading());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_leading(&self) -> bool {
        self.end().is_none()
    }

    /// Resolves when the leadership ends, with the reason: a renewal failed, or the lease ran out
    /// without one (at the latest at [`valid_until`](Leadership::valid_until)). At once if it
    /// already has.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits; call it again to wait again (an end that came meanwhile is
    /// returned at once).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::LeadershipEnd;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("e").with_expiry(Duration::from_millis(600));
    /// let leadership = election.campaign("a").await?;
    /// for node in 0..3 {
    ///     cluster.node(node).del("e"); // an operator breaks the lock
    /// }
    /// let end = leadership.lost().await;
    /// assert!(matches!(end, LeadershipEnd::Lost(_)), "{end:?}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) -> LeadershipEnd {
        loop {
            if let Some(end) = self.end() {
                return end;
            }
            let until = self.lock.valid_until();
            tokio::select! {
                end = self.keep.ended() => return ended(end),
                // A renewal may have moved the deadline meanwhile: look again.
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// Resigns: stops renewing and releases the lease on every node, which wakes the waiting
    /// candidates at once.
    ///
    /// # Errors
    ///
    /// As [`Lock::unlock`]: [`Error::Expired`] or [`Error::Taken`] when the lease was lost
    /// already, [`Error::NoQuorum`].
    ///
    /// # Cancel safety
    ///
    /// Renewing stops at once. Dropping the future may leave the lease released on some nodes
    /// only; the lease goes with the future (`resign` takes the leadership), which releases the
    /// rest in the background, as dropping the leadership does.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let election = redlock.new_election("e");
    /// election.campaign("a").await?.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(self) -> Result<(), Error> {
        let Leadership { lock, keep, .. } = self;
        keep.stop().await;
        lock.unlock().await
    }

    /// Runs `work` while leading, and resigns when `work` is done; drops `work` once the
    /// leadership is lost, before the lease ends.
    ///
    /// As [`Lock::run`]: the leadership renews itself meanwhile (every
    /// [`renew_every`](Election::renew_every), riding out a blip of the nodes), `work` is polled
    /// in this task, and when the lease cannot be kept `work` is dropped at once, at the latest a
    /// few milliseconds before [`valid_until`](Leadership::valid_until), and `run` returns
    /// [`Error::Lost`] with the cause; the lease is released in the background. Nothing of `work`
    /// runs after `run` returns. Read the [`epoch`](Leadership::epoch) before the call and move
    /// it into `work`, which passes it with every write (see [`fenced_set`](crate::fenced_set)).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the leadership was lost while `work` ran (`work` dropped, or its
    /// output discarded if it completed after the lease's validity). When `work` completed while
    /// leading, its output is returned even if the resignation fails (the lease then expires).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` where it stands, stops renewing and resigns in the
    /// background, as dropping the leadership does.
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
    /// let election = redlock.new_election("scheduler").with_expiry(Duration::from_millis(600));
    /// let leadership = election.campaign("host-a").await?;
    /// let epoch = leadership.epoch(); // read before: run takes the leadership
    /// let runs = leadership
    ///     .run(async move {
    ///         for round in 1..=3 {
    ///             tokio::time::sleep(Duration::from_millis(400)).await; // a scheduler's round
    ///             println!("round {round} as leader of epoch {epoch}"); // writes carry `epoch`
    ///         }
    ///         3
    ///     })
    ///     .await?;
    /// assert_eq!(runs, 3);
    /// assert!(election.leader().await?.is_none(), "resigned when done");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<F: Future>(self, work: F) -> Result<F::Output, Error> {
        let (lock, keep) = self.into_parts();
        let outcome = run::under(&lock, &keep, work).await;
        keep.stop().await;
        let output = outcome?;
        // Whatever the release says, the work completed while leading.
        let _ = lock.unlock().await;
        Ok(output)
    }
}

impl Leadership {
    /// The lease and its keep-alive, for work run under them.
    pub(crate) fn into_parts(self) -> (Lock, KeepAlive) {
        (self.lock, self.keep)
    }

    /// Makes a drop resign on `runtime` (see `Held::release_on`).
    #[cfg(feature = "blocking")]
    pub(crate) fn release_on(&self, runtime: tokio::runtime::Handle) {
        self.lock.release_on(runtime);
    }
}

/// The keep-alive's end as the leadership's.
fn ended(end: KeepAliveEnd) -> LeadershipEnd {
    match end {
        KeepAliveEnd::Lost(error) => LeadershipEnd::Lost(error),
        KeepAliveEnd::Unlocked => LeadershipEnd::Resigned,
        // No limits are set on a leadership's keep-alive; were one reached, the lease would
        // still run out.
        _ => LeadershipEnd::Expired,
    }
}
