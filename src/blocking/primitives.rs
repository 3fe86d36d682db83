//! The blocking mutex, read-write lock and semaphore: each the async builder of the same name,
//! whose entry points block.

use std::fmt;
use std::time::Duration;

use crate::blocking::{Background, Lock, same_as_async};
use crate::error::Error;

/// A distributed mutex for one name, or for several at once: [`redmutex::Mutex`](crate::Mutex)
/// whose [`lock()`](Mutex::lock) and [`try_lock()`](Mutex::try_lock) block.
///
/// Configuration only, no lock state: cheap to clone, `Send + Sync`. Its builder methods are
/// the async `Mutex`'s, with the same defaults and bounds (see its `# Default` table); an invalid
/// value is reported by the first operation as [`Error::Config`], before any I/O.
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
/// let mutex = redlock
///     .new_mutex("inventory:sku-42")
///     .with_expiry(Duration::from_secs(2))
///     .with_tries(10)
///     .with_fencing(true);
/// let lock = mutex.lock()?;
/// // ... sell the item, passing lock.token() with each write ...
/// lock.unlock()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Mutex {
    inner: crate::Mutex,
    background: Background,
}

same_as_async!(Mutex over Mutex {
    locking;
    set with_fencing(fencing: bool);
    set with_fair(fair: bool);
    get name -> &str;
    get names -> impl ExactSizeIterator<Item = &str>;
    get expiry -> Duration;
});

impl Mutex {
    pub(crate) fn new(inner: crate::Mutex, background: Background) -> Mutex {
        Mutex { inner, background }
    }

    /// Acquires the lock, blocking until it is held or the tries (or the
    /// [maximum wait](crate::Mutex::with_max_wait)) run out; as [`Mutex::lock`](crate::Mutex::lock).
    ///
    /// # Errors
    ///
    /// As the async `lock()`: the last attempt's [`Error::Taken`], [`Error::Expired`] or
    /// [`Error::NoQuorum`]; [`Error::WaitedOut`]; [`Error::Config`] before any I/O. And
    /// [`Error::InsideRuntime`] (nothing sent) on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let lock = redlock.new_mutex("job:rebuild-index").lock()?;
    /// assert!(lock.valid_until() > std::time::Instant::now());
    /// lock.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn lock(&self) -> Result<Lock, Error> {
        self.background
            .hold(&self.inner, |mutex| async move { mutex.lock().await })
    }

    /// Makes exactly one attempt to acquire the lock, as
    /// [`Mutex::try_lock`](crate::Mutex::try_lock).
    ///
    /// # Errors
    ///
    /// As [`lock()`](Mutex::lock), for the single attempt.
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
    /// let mutex = redlock.new_mutex("job:send-invoices");
    /// let first = mutex.try_lock()?;
    /// assert!(matches!(mutex.try_lock(), Err(Error::Taken { .. })));
    /// first.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn try_lock(&self) -> Result<Lock, Error> {
        self.background
            .hold(&self.inner, |mutex| async move { mutex.try_lock().await })
    }

    /// A handle on a lock that another handle acquired with `value`, as
    /// [`Mutex::adopt`](crate::Mutex::adopt). Does not block.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let mutex = redlock.new_mutex("job:export");
    /// let original = mutex.lock()?;
    /// let value = original.value().to_owned();
    /// // ... `value` travels to another process, which takes over:
    /// let adopted = mutex.adopt(value);
    /// adopted.extend()?;
    /// adopted.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn adopt(&self, value: impl Into<String>) -> Lock {
        self.background.own(self.inner.adopt(value))
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Mutex").field(&self.inner).finish()
    }
}

/// A read-write lock: [`redmutex::RwLock`](crate::RwLock) whose [`read()`](RwLock::read) and
/// [`write()`](RwLock::write) block. Any number of readers at once, or one writer.
///
/// Its builder methods are the async `RwLock`'s, with the same defaults and bounds.
///
/// # Examples
///
/// ```
/// use redmutex::Error;
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
///
/// let prices = redlock.new_rwlock("prices").with_expiry(Duration::from_secs(5));
/// let reader = prices.read()?;
/// assert!(matches!(prices.try_write(), Err(Error::Taken { .. })));
/// reader.unlock()?;
/// prices.write()?.unlock()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: crate::RwLock,
    background: Background,
}

same_as_async!(RwLock over RwLock {
    locking;
    set with_fencing(fencing: bool);
    get name -> &str;
    get expiry -> Duration;
});

impl RwLock {
    pub(crate) fn new(inner: crate::RwLock, background: Background) -> RwLock {
        RwLock { inner, background }
    }

    /// Acquires a read lock, blocking, as [`RwLock::read`](crate::RwLock::read).
    ///
    /// # Errors
    ///
    /// As the async `read()`; [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let reader = redlock.new_rwlock("catalog").read()?;
    /// assert_eq!(reader.name(), "catalog");
    /// reader.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn read(&self) -> Result<Lock, Error> {
        self.background
            .hold(&self.inner, |rwlock| async move { rwlock.read().await })
    }

    /// One attempt at a read lock, as [`RwLock::try_read`](crate::RwLock::try_read).
    ///
    /// # Errors
    ///
    /// As [`read()`](RwLock::read), for the single attempt.
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
    /// let catalog = redlock.new_rwlock("catalog");
    /// let writer = catalog.write()?;
    /// assert!(matches!(catalog.try_read(), Err(Error::Taken { .. })));
    /// writer.unlock()?;
    /// catalog.try_read()?.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn try_read(&self) -> Result<Lock, Error> {
        self.background
            .hold(&self.inner, |rwlock| async move { rwlock.try_read().await })
    }

    /// Acquires the write lock, blocking, as [`RwLock::write`](crate::RwLock::write).
    ///
    /// # Errors
    ///
    /// As the async `write()`; [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let writer = redlock.new_rwlock("catalog").write()?;
    /// // ... rewrite the catalog ...
    /// writer.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn write(&self) -> Result<Lock, Error> {
        self.background
            .hold(&self.inner, |rwlock| async move { rwlock.write().await })
    }

    /// One attempt at the write lock, as [`RwLock::try_write`](crate::RwLock::try_write).
    ///
    /// # Errors
    ///
    /// As [`write()`](RwLock::write), for the single attempt.
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
    /// let catalog = redlock.new_rwlock("catalog");
    /// let reader = catalog.read()?;
    /// assert!(matches!(catalog.try_write(), Err(Error::Taken { .. })));
    /// reader.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn try_write(&self) -> Result<Lock, Error> {
        self.background.hold(
            &self.inner,
            |rwlock| async move { rwlock.try_write().await },
        )
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RwLock").field(&self.inner).finish()
    }
}

/// A semaphore: [`redmutex::Semaphore`](crate::Semaphore) whose [`acquire()`](Semaphore::acquire)
/// blocks. At most `permits` holders at once.
///
/// Its builder methods are the async `Semaphore`'s, with the same defaults and bounds.
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
/// let payments = redlock.new_semaphore("payments-api", 2);
/// let first = payments.acquire()?;
/// let second = payments.acquire()?;
/// assert!(matches!(payments.try_acquire(), Err(Error::Taken { .. })));
/// first.unlock()?;
/// second.unlock()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: crate::Semaphore,
    background: Background,
}

same_as_async!(Semaphore over Semaphore {
    locking;
    get name -> &str;
    get permits -> u32;
    get quorum -> usize;
    get expiry -> Duration;
});

impl Semaphore {
    pub(crate) fn new(inner: crate::Semaphore, background: Background) -> Semaphore {
        Semaphore { inner, background }
    }

    /// Acquires a permit, blocking, as [`Semaphore::acquire`](crate::Semaphore::acquire).
    ///
    /// # Errors
    ///
    /// As the async `acquire()`; [`Error::InsideRuntime`] on a thread of a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::blocking::Redlock::connect(cluster.urls())?;
    /// let permit = redlock.new_semaphore("crawler:example.org", 3).acquire()?;
    /// // ... crawl ...
    /// permit.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn acquire(&self) -> Result<Lock, Error> {
        self.background.hold(
            &self.inner,
            |semaphore| async move { semaphore.acquire().await },
        )
    }

    /// One attempt at a permit, as [`Semaphore::try_acquire`](crate::Semaphore::try_acquire).
    ///
    /// # Errors
    ///
    /// As [`acquire()`](Semaphore::acquire), for the single attempt.
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
    /// let only = redlock.new_semaphore("licence", 1);
    /// let held = only.try_acquire()?;
    /// assert!(matches!(only.try_acquire(), Err(Error::Taken { .. })));
    /// held.unlock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Lock, Error> {
        self.background.hold(&self.inner, |semaphore| async move {
            semaphore.try_acquire().await
        })
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Semaphore").field(&self.inner).finish()
    }
}
