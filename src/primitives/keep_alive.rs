//! An opt-in heartbeat that extends a lock while the holder works, and says when the lock is lost.

use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::engine::metrics::Lost;
use crate::error::Error;
use crate::primitives::lock::Lock;

/// Why a [`KeepAlive`] stopped extending.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum KeepAliveEnd {
    /// An extend failed: the lock may be lost (stop using the resource). Carries the error.
    Lost(Error),
    /// The lock's validity ran out before an extend succeeded (stop using the resource).
    Expired,
    /// The lock was unlocked; nothing was lost.
    Unlocked,
    /// `max_extensions` or `max_hold` was reached; the lock stays valid until its
    /// [`valid_until`](Lock::valid_until), then expires.
    LimitReached,
}

/// Bounds on a keep-alive, changeable while it runs.
#[derive(Debug, Default, Clone, Copy)]
struct Limits {
    max_extensions: Option<u64>,
    max_hold: Option<Duration>,
}

/// A running heartbeat for one [`Lock`], started by [`Lock::keep_alive`].
///
/// It calls [`Lock::extend`] every interval until the lock is unlocked, an extend fails, the
/// validity runs out, a limit is reached, or this handle is dropped (which stops it at once; the
/// lock then expires at its `valid_until` unless unlocked). Nothing is ever extended after
/// [`Lock::unlock`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let cluster = testenv::Cluster::start(3);
/// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// use redmutex::KeepAliveEnd;
/// use std::time::Duration;
///
/// let mutex = redlock.new_mutex("job:reindex").with_expiry(Duration::from_millis(600));
/// let lock = mutex.lock().await?;
/// let keep = lock.keep_alive(Duration::from_millis(200)).max_hold(Duration::from_secs(60));
///
/// let work = tokio::time::sleep(Duration::from_millis(1500)); // 2.5x the expiry
/// tokio::select! {
///     _ = work => {}
///     end = keep.ended() => panic!("lock lost while working: {end:?}"),
/// }
/// lock.unlock().await?;
/// assert!(matches!(keep.ended().await, KeepAliveEnd::Unlocked));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KeepAlive {
    limits: Arc<StdMutex<Limits>>,
    ended: watch::Receiver<Option<KeepAliveEnd>>,
    task: JoinHandle<()>,
}

impl KeepAlive {
    pub(crate) fn start(lock: Lock, interval: Duration) -> KeepAlive {
        let limits = Arc::new(StdMutex::new(Limits::default()));
        let (report, ended) = watch::channel(None);
        let task = tokio::spawn(heartbeat(lock, interval, Arc::clone(&limits), report));
        KeepAlive {
            limits,
            ended,
            task,
        }
    }

    /// Stops after `n` successful extensions. Default: no bound.
    #[must_use]
    pub fn max_extensions(self, n: u64) -> Self {
        self.limits().max_extensions = Some(n);
        self
    }

    /// Stops extending once the lock has been kept this long since the keep-alive started, so a
    /// stuck worker cannot hold the lock forever. Default: no bound.
    #[must_use]
    pub fn max_hold(self, hold: Duration) -> Self {
        self.limits().max_hold = Some(hold);
        self
    }

    /// Resolves when the keep-alive stops, with the reason; at once if it already has.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; call it again to wait again.
    pub async fn ended(&self) -> KeepAliveEnd {
        let mut ended = self.ended.clone();
        match ended.wait_for(Option::is_some).await {
            Ok(end) => end.clone().unwrap_or(KeepAliveEnd::Expired),
            // The task is gone without a word: it was aborted, or the runtime is shutting down.
            Err(_) => KeepAliveEnd::Expired,
        }
    }

    /// The reason it stopped, if it has.
    pub fn end(&self) -> Option<KeepAliveEnd> {
        self.ended.borrow().clone()
    }

    fn limits(&self) -> std::sync::MutexGuard<'_, Limits> {
        self.limits.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn heartbeat(
    lock: Lock,
    interval: Duration,
    limits: Arc<StdMutex<Limits>>,
    report: watch::Sender<Option<KeepAliveEnd>>,
) {
    let started = Instant::now();
    let mut extensions = 0u64;
    let end = loop {
        let Limits {
            max_extensions,
            max_hold,
        } = *limits.lock().unwrap_or_else(PoisonError::into_inner);
        if max_extensions.is_some_and(|max| extensions >= max)
            || max_hold.is_some_and(|max| started.elapsed() >= max)
        {
            break KeepAliveEnd::LimitReached;
        }
        // The extend must succeed before the validity runs out, or the lock is gone meanwhile.
        let deadline = lock.valid_until();
        let beat = async {
            tokio::time::sleep(interval).await;
            lock.extend().await
        };
        match tokio::time::timeout_at(deadline.into(), beat).await {
            Ok(Ok(())) => extensions += 1,
            Ok(Err(Error::Unlocked)) => break KeepAliveEnd::Unlocked,
            Ok(Err(error)) => {
                // An extend that found the key gone or taken counted the loss already.
                lock.lost(Lost::KeepAliveFailed);
                break KeepAliveEnd::Lost(error);
            }
            Err(_) if lock.is_unlocked() => break KeepAliveEnd::Unlocked,
            Err(_) => {
                lock.lost(Lost::KeepAliveTimedOut);
                break KeepAliveEnd::Expired;
            }
        }
    };
    report.send_replace(Some(end));
}
