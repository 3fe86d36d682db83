//! The blocking client: the async [`Redlock`](crate::Redlock), and the runtime that runs it.

use std::fmt;

use crate::blocking::{Background, Election, Mutex, RwLock, Semaphore};
use crate::error::Error;
use crate::nodes::member::MemberClient;

/// A client over N independent members, for threads without an async runtime: the blocking face
/// of [`redmutex::Redlock`](crate::Redlock), with the same constructors and methods.
///
/// Holds the async client (one multiplexed connection per member, re-made after any failure)
/// and redmutex's background runtime (see [the module](crate::blocking)). `Clone`, `Send` and
/// `Sync`: create one per process and share it between threads; a clone is two `Arc`s.
///
/// # Examples
///
/// ```
/// use redmutex::blocking::Redlock;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(5);
/// let urls = cluster.urls();
///
/// // e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", ...]
/// let redlock = Redlock::connect(urls)?;
/// assert_eq!((redlock.len(), redlock.quorum()), (5, 3));
///
/// let workers: Vec<_> = (0..4)
///     .map(|n| {
///         let redlock = redlock.clone();
///         std::thread::spawn(move || {
///             let lock = redlock.new_mutex(format!("shard:{n}")).lock()?;
///             lock.unlock()
///         })
///     })
///     .collect();
/// for worker in workers {
///     worker.join().expect("no panic")?;
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: crate::Redlock,
    background: Background,
}

impl Redlock {
    /// Connects to every node URL, as [`Redlock::connect`](crate::Redlock::connect) does (the
    /// same URLs, the same lazy connections), and starts redmutex's runtime if this is the
    /// process's first blocking client. Returns at once: connections are made in the background.
    ///
    /// # Errors
    ///
    /// As the async `connect`: [`Error::Config`] for no URL or one that does not parse (never
    /// with its password). [`Error::InsideRuntime`] on a thread of a tokio runtime;
    /// [`Error::RuntimeUnavailable`] if the runtime's threads could not start.
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::Error;
    /// use redmutex::blocking::Redlock;
    ///
    /// let error = Redlock::connect(["redis://:hunter2@127.0.0.1:6379", "not a url"]).unwrap_err();
    /// assert!(matches!(error, Error::Config { .. }));
    /// assert!(!error.to_string().contains("hunter2"));
    /// ```
    pub fn connect<I>(urls: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let background = Background::start()?;
        // Built in the runtime's context, so that the connections warm up on it.
        let inner = background.block_on(crate::Redlock::connect(urls))??;
        Ok(Redlock { inner, background })
    }

    /// A client over members reached through `clients`, one per member, in order, as
    /// [`Redlock::from_clients`](crate::Redlock::from_clients) builds it (TLS with a private CA,
    /// credentials outside a URL, a `redis::cluster::ClusterClient`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if there are no clients; [`Error::InsideRuntime`] and
    /// [`Error::RuntimeUnavailable`] as for [`connect`](Redlock::connect).
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::blocking::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let urls = cluster.urls();
    ///
    /// let clients = urls
    ///     .iter()
    ///     .map(|url| redis::Client::open(url.as_str()))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let redlock = Redlock::from_clients(clients)?;
    /// redlock.new_mutex("report:weekly").lock()?.unlock()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_clients<I>(clients: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: Into<MemberClient>,
    {
        let background = Background::start()?;
        let inner = background.block_on(crate::Redlock::from_clients(clients))??;
        Ok(Redlock { inner, background })
    }

    /// A [`Mutex`] for the resource `name`, with default settings, as
    /// [`Redlock::new_mutex`](crate::Redlock::new_mutex).
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
    /// let mutex = redlock.new_mutex("book:978-0-13-468599-1").with_expiry(Duration::from_secs(30));
    /// assert_eq!(mutex.name(), "book:978-0-13-468599-1");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new_mutex(&self, name: impl Into<String>) -> Mutex {
        Mutex::new(self.inner.new_mutex(name), self.background)
    }

    /// A [`Mutex`] over every name of `names` at once, as
    /// [`Redlock::new_multi_mutex`](crate::Redlock::new_multi_mutex): its locks take all of them
    /// or none.
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
    /// let transfer = redlock.new_multi_mutex(["account:1", "account:2"]);
    /// let lock = transfer.lock()?;
    /// assert_eq!(lock.names().collect::<Vec<_>>(), ["account:1", "account:2"]);
    /// assert!(matches!(redlock.new_mutex("account:2").try_lock(), Err(Error::Taken { .. })));
    /// lock.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new_multi_mutex<I>(&self, names: I) -> Mutex
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Mutex::new(self.inner.new_multi_mutex(names), self.background)
    }

    /// A read-write lock for the resource `name`, as
    /// [`Redlock::new_rwlock`](crate::Redlock::new_rwlock).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let config = redlock.new_rwlock("config:pricing");
    /// let reader = config.read()?;
    /// let another = config.read()?; // readers hold together
    /// reader.unlock()?;
    /// another.unlock()?;
    /// config.write()?.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new_rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self.inner.new_rwlock(name), self.background)
    }

    /// A [`Semaphore`] of `permits` permits for the resource `name`, as
    /// [`Redlock::new_semaphore`](crate::Redlock::new_semaphore).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let crawlers = redlock.new_semaphore("crawler:example.org", 3);
    /// assert_eq!((crawlers.permits(), crawlers.quorum()), (3, 3));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new_semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.inner.new_semaphore(name, permits), self.background)
    }

    /// An [`Election`] over `name`, as [`Redlock::new_election`](crate::Redlock::new_election).
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let leadership = redlock.new_election("scheduler").campaign("host-a")?;
    /// assert_eq!(leadership.identity(), "host-a");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new_election(&self, name: impl Into<String>) -> Election {
        Election::new(self.inner.new_election(name), self.background)
    }

    /// The number of members, as [`Redlock::len`](crate::Redlock::len).
    ///
    /// # Examples
    ///
    /// ```
    /// let redlock = redmutex::blocking::Redlock::connect(["redis://127.0.0.1:1/"])?;
    /// assert_eq!(redlock.len(), 1);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a Redlock always has at least one node
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// How many nodes must agree for a [`Mutex`], as [`Redlock::quorum`](crate::Redlock::quorum).
    ///
    /// # Examples
    ///
    /// ```
    /// let urls = ["redis://127.0.0.1:1/", "redis://127.0.0.1:2/", "redis://127.0.0.1:3/"];
    /// let redlock = redmutex::blocking::Redlock::connect(urls)?;
    /// assert_eq!(redlock.quorum(), 2);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// The async client underneath, sharing this one's connections: for what this module does
    /// not wrap ([`checkup`](crate::Redlock::checkup), inspection, an election's `watch`), run
    /// on a runtime of the caller's.
    ///
    /// # Examples
    ///
    /// ```
    /// let redlock = redmutex::blocking::Redlock::connect(["redis://127.0.0.1:1/"])?;
    /// let client: &redmutex::Redlock = redlock.as_async();
    /// assert_eq!(client.len(), 1);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn as_async(&self) -> &crate::Redlock {
        &self.inner
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Redlock").field(&self.inner).finish()
    }
}
