//! The blocking election: campaign, lead, and learn of a loss, on the caller's thread.

use std::fmt;
use std::time::{Duration, Instant};

use crate::blocking::lock::under;
use crate::blocking::{Background, Lease, same_as_async};
use crate::error::Error;
use crate::primitives::election::{LeaderInfo, LeadershipEnd};

/// A leader election: [`redmutex::Election`](crate::Election) whose
/// [`campaign`](Election::campaign) and [`leader`](Election::leader) block.
///
/// Its builder methods are the async `Election`'s, with the same defaults and bounds.
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
/// let election = redlock.new_election("scheduler").with_expiry(Duration::from_secs(2));
/// let leadership = election.campaign("host-a")?; // blocks while another leads
/// let leader = election.leader()?.expect("a leader");
/// assert_eq!((leader.identity.as_str(), leader.epoch), ("host-a", leadership.epoch()));
/// leadership.resign()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    background: Background,
}

same_as_async!(Election over Election {
    waiting;
    set with_expiry(lease: Duration);
    set with_renew_every(every: Duration);
    get name -> &str;
    get expiry -> Duration;
    get renew_every -> Duration;
});

impl Election {
    pub(crate) fn new(inner: crate::Election, background: Background) -> Election {
        Election { inner, background }
    }

    /// Campaigns until this candidate leads, blocking, as
    /// [`Election::campaign`](crate::Election::campaign); the leadership then renews its lease
    /// on redmutex's runtime while it lives.
    ///
    /// # Errors
    ///
    /// As the async `campaign`; [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let election = redlock.new_election("indexer");
    /// let first = election.campaign("pod-1")?;
    /// first.resign()?;
    /// let second = election.campaign("pod-2")?;
    /// assert!(second.epoch() > 0);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn campaign(&self, identity: impl Into<String>) -> Result<Leadership, Error> {
        let (election, identity) = (self.inner.clone(), identity.into());
        let inner = self
            .background
            .call(async move { election.campaign(identity).await })?;
        self.background.resign_on_drop(&inner);
        Ok(Leadership {
            inner,
            background: self.background,
        })
    }

    /// Who leads, read from every node at once, blocking, as
    /// [`Election::leader`](crate::Election::leader).
    ///
    /// # Errors
    ///
    /// As the async `leader`; [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// assert!(redlock.new_election("indexer").leader()?.is_none());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn leader(&self) -> Result<Option<LeaderInfo>, Error> {
        let election = self.inner.clone();
        self.background.call(async move { election.leader().await })
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Election").field(&self.inner).finish()
    }
}

/// Leading an election ([`Election::campaign`]): [`redmutex::Leadership`](crate::Leadership),
/// renewing its lease on redmutex's runtime while it lives, whose [`lost`](Leadership::lost),
/// [`resign`](Leadership::resign) and [`run`](Leadership::run) block. Dropping it stops renewing
/// and resigns in the background.
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
/// let election = redlock.new_election("billing").with_expiry(Duration::from_secs(1));
/// let leadership = election.campaign("worker-3")?;
/// std::thread::sleep(Duration::from_secs(2)); // twice the lease, renewed meanwhile
/// assert!(leadership.is_leading());
/// leadership.resign()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug)]
pub struct Leadership {
    inner: crate::Leadership,
    background: Background,
}

impl Leadership {
    /// The epoch, this term's fencing token, as [`Leadership::epoch`](crate::Leadership::epoch).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let election = redlock.new_election("e");
    /// let first = election.campaign("a")?.epoch(); // dropped: resigns in the background
    /// let second = election.campaign("b")?.epoch();
    /// assert!(second > first);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    /// The identity this leader campaigned with.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// assert_eq!(redlock.new_election("e").campaign("a")?.identity(), "a");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn identity(&self) -> &str {
        self.inner.identity()
    }

    /// Until when this leader may act as one, as
    /// [`Leadership::valid_until`](crate::Leadership::valid_until).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let leadership = redlock.new_election("e").campaign("a")?;
    /// assert!(leadership.valid_until() > std::time::Instant::now());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.inner.valid_until()
    }

    /// Why the leadership ended, if it has, without waiting, as
    /// [`Leadership::end`](crate::Leadership::end).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// assert!(redlock.new_election("e").campaign("a")?.end().is_none());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn end(&self) -> Option<LeadershipEnd> {
        self.inner.end()
    }

    /// Whether this candidate still leads; check it before each step of the leader's work.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// assert!(redlock.new_election("e").campaign("a")?.is_leading());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn is_leading(&self) -> bool {
        self.inner.is_leading()
    }

    /// Blocks until the leadership ends, and says why, as
    /// [`Leadership::lost`](crate::Leadership::lost): for a thread that watches while others
    /// work.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::LeadershipEnd;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    ///
    /// let election = redlock.new_election("e").with_expiry(Duration::from_millis(600));
    /// let leadership = election.campaign("a")?;
    /// for node in 0..3 {
    ///     cluster.node(node).del("e"); // an operator breaks the lock
    /// }
    /// assert!(matches!(leadership.lost()?, LeadershipEnd::Lost(_)));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn lost(&self) -> Result<LeadershipEnd, Error> {
        self.background.block_on(self.inner.lost())
    }

    /// Resigns, blocking: stops renewing and releases the lease on every node, as
    /// [`Leadership::resign`](crate::Leadership::resign).
    ///
    /// # Errors
    ///
    /// As the async `resign`; [`Error::InsideRuntime`] on a thread of a tokio runtime (the
    /// leadership is then dropped, which resigns in the background).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let election = redlock.new_election("e");
    /// election.campaign("a")?.resign()?;
    /// assert!(election.leader()?.is_none());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn resign(self) -> Result<(), Error> {
        let Leadership { inner, background } = self;
        background.call(async move { inner.resign().await })
    }

    /// Runs `work` on this thread while leading, and resigns when it returns: the blocking
    /// [`Leadership::run`](crate::Leadership::run), told of a loss as the work of
    /// [`Lock::run`](crate::blocking::Lock::run) is, through the [`Lease`] it is given (whose
    /// token is the epoch).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the leadership was lost while `work` ran (its output discarded);
    /// [`Error::InsideRuntime`] on a thread of a tokio runtime (`work` never called; the
    /// leadership is dropped, which resigns in the background).
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
    /// let election = redlock.new_election("scheduler").with_expiry(Duration::from_millis(600));
    /// let rounds = election.campaign("host-a")?.run(|lease| {
    ///     let mut rounds = 0;
    ///     while lease.is_held() && rounds < 3 {
    ///         std::thread::sleep(Duration::from_millis(400)); // a round, writes carry the epoch
    ///         rounds += 1;
    ///     }
    ///     rounds
    /// })?;
    /// assert_eq!(rounds, 3);
    /// assert!(election.leader()?.is_none(), "resigned when done");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn run<T>(self, work: impl FnOnce(&Lease<'_>) -> T) -> Result<T, Error> {
        let (lock, keep) = self.inner.into_parts();
        under(self.background, lock, keep, work)
    }
}
