//! An opt-in heartbeat that extends a lock while the holder works, rides out a blip of the nodes,
//! and says when the lock is lost, before its validity ends; when it renews, retries and gives up
//! is `renewal`.

mod renewal;

use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at};

use crate::engine::metrics::Lost;
use crate::engine::quorum::whole_millis;
use crate::error::Error;
use crate::primitives::lock::Lock;

pub(crate) use renewal::Renewal;

/// Why a [`KeepAlive`] stopped extending.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum KeepAliveEnd {
    /// The lock is lost (stop using the resource), with the error of the extend that said so:
    /// [`Error::Taken`] or [`Error::Expired`] at once, or the last [`Error::NoQuorum`] (each
    /// node's answer) once retries could no longer end before the validity.
    Lost(Error),
    /// The lock's validity was about to run out with an extend still unanswered (stop using the
    /// resource).
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
    report_before: Option<Duration>,
}

/// A running heartbeat for one [`Lock`], started by [`Lock::keep_alive`].
///
/// It calls [`Lock::extend`] every interval until the lock is unlocked, the lock is lost, a limit
/// is reached, or this handle is dropped (which stops it at once; the lock then expires at its
/// `valid_until` unless unlocked). Nothing is ever extended after [`Lock::unlock`].
///
/// # Riding out a blip
///
/// An extend that fails because too few nodes answered ([`Error::NoQuorum`]: a paused node, a
/// network hiccup, a restart) does not end it: it tries again after a short random delay
/// (between a twentieth and a tenth of the interval), for as long as another attempt can still
/// end before the lock's validity does. Each extend is bounded by the node timeout
/// (`expiry * timeout_factor`), so with the default interval (a third of the expiry) and timeout
/// factor it rides out an outage of most of two thirds of the expiry. An extend that finds the
/// lock taken or gone ([`Error::Taken`], [`Error::Expired`]) ends it at once: retrying cannot
/// bring such a lock back.
///
/// The loss is reported before the validity ends, never after: retries stop once one more could
/// not end 25 ms before [`valid_until`](Lock::valid_until) (or earlier, see
/// [`report_before`](KeepAlive::report_before)), and an extend still unanswered then is given up
/// on. A renewal that succeeds after retries moves `valid_until` by
/// what its own start allows (validity counts from the start of the attempt that succeeded), so
/// retrying never stretches the lock. While nodes fail, the interval runs from the start of the
/// last renewal that succeeded, and a renewal is never put off past the last moment from which
/// it can still end in time (an interval longer than the validity allows is shortened so).
///
/// Its extends repair the quorum as [`Lock::extend`] does: a node that lost the key gets it back
/// at the next renewal.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::KeepAliveEnd;
/// use std::time::Duration;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// Starts renewing `lock` every `every`, each extend bounded by `round_trip` (the node
    /// timeout).
    pub(crate) fn start(lock: Lock, every: Duration, round_trip: Duration) -> KeepAlive {
        let limits = Arc::new(StdMutex::new(Limits::default()));
        let (report, ended) = watch::channel(None);
        let renewal = Renewal::new(every, round_trip);
        let task = tokio::spawn(heartbeat(lock, renewal, Arc::clone(&limits), report));
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

    /// Reports a loss at least `margin` before the lock's validity ends, rather than 25 ms
    /// before: retries of a failed renewal stop once one more could not end by then. For a holder
    /// that needs time to wind down while it still holds the lock (a supervisor whose child
    /// process gets a grace period after SIGTERM), at the cost of that much less time to ride out
    /// a blip. Default: 25 ms (a smaller margin counts as that).
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
    /// let mutex = redlock.new_mutex("job:export").with_expiry(Duration::from_secs(6));
    /// let lock = mutex.lock().await?;
    /// // The job needs up to a second to stop cleanly once told: told a second early.
    /// let keep = lock
    ///     .keep_alive(mutex.expiry() / 3)
    ///     .report_before(Duration::from_secs(1));
    /// # lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn report_before(self, margin: Duration) -> Self {
        self.limits().report_before = Some(margin);
        self
    }

    /// Resolves when the keep-alive stops, with the reason; at once if it already has.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits; call it again to wait again (an end that came meanwhile is
    /// returned at once).
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

    /// Stops renewing, and returns once the renewal task is gone: no extend of it is sent
    /// after this, and one it sent is answered or dropped (so that an unlock that follows goes
    /// out after it on every connection).
    pub(crate) async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
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
    base: Renewal,
    limits: Arc<StdMutex<Limits>>,
    report: watch::Sender<Option<KeepAliveEnd>>,
) {
    let started = Instant::now();
    let mut extensions = 0u64;
    // The start of the last renewal that succeeded: the interval runs from there.
    let mut last = started;
    let end = 'beats: loop {
        let Limits {
            max_extensions,
            max_hold,
            report_before,
        } = *limits.lock().unwrap_or_else(PoisonError::into_inner);
        let renewal = Renewal {
            margin: report_before.map_or(base.margin, |margin| margin.max(base.margin)),
            ..base
        };
        if max_extensions.is_some_and(|max| extensions >= max)
            || max_hold.is_some_and(|max| started.elapsed() >= max)
        {
            break KeepAliveEnd::LimitReached;
        }
        let Some(due) = renewal.due(Instant::now(), last, lock.valid_until()) else {
            break lost_in_time(&lock, None);
        };
        sleep_until(due.into()).await;
        // One renewal, tried again while the nodes do not answer and time is left.
        let mut failure = None;
        loop {
            let start = Instant::now();
            // The loss must be reported before the validity ends: an extend still unanswered
            // then is given up on (dropped: see `Lock::extend`'s cancel safety).
            let report_by = renewal.report_by(lock.valid_until());
            match timeout_at(report_by.into(), lock.extend()).await {
                Ok(Ok(())) => {
                    extensions += 1;
                    last = start;
                    continue 'beats;
                }
                Ok(Err(Error::Unlocked)) => break 'beats KeepAliveEnd::Unlocked,
                // Too few nodes answered: they may in a moment.
                Ok(Err(error @ Error::NoQuorum { .. })) => {
                    let delay = renewal.retry_delay(&mut rand::rng());
                    match renewal.retry_at(Instant::now(), lock.valid_until(), delay) {
                        Some(at) => {
                            tracing::debug!(
                                name = lock.name(),
                                %error,
                                retry_in_ms = whole_millis(delay),
                                "renewal failed, retrying"
                            );
                            failure = Some(error);
                            sleep_until(at.into()).await;
                        }
                        None => break 'beats lost(&lock, error),
                    }
                }
                // Taken or gone: no retry brings it back. An extend that found the key gone or
                // taken counted the loss already.
                Ok(Err(error)) => break 'beats lost(&lock, error),
                Err(_) if lock.is_unlocked() => break 'beats KeepAliveEnd::Unlocked,
                Err(_) => break 'beats lost_in_time(&lock, failure),
            }
        }
    };
    tracing::debug!(name = lock.name(), ?end, extensions, "keep-alive ended");
    report.send_replace(Some(end));
}

/// The lock is lost: an extend failed, and no retry can help.
fn lost(lock: &Lock, error: Error) -> KeepAliveEnd {
    lock.lost(Lost::KeepAliveFailed);
    KeepAliveEnd::Lost(error)
}

/// The validity is about to end without a renewal: with the last failure, if there was one.
fn lost_in_time(lock: &Lock, failure: Option<Error>) -> KeepAliveEnd {
    lock.lost(Lost::KeepAliveTimedOut);
    failure.map_or(KeepAliveEnd::Expired, KeepAliveEnd::Lost)
}
