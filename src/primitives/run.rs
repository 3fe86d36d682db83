//! Work under a lease: what [`Lock::run`](crate::Lock::run) and
//! [`Leadership::run`](crate::Leadership::run) share. The caller's future is polled here, in the
//! caller's task, beside the lease's keep-alive (a task of its own, so that renewals go on while
//! the work keeps its thread busy between two awaits), and dropped once the lease cannot be kept.
//!
//! The work is dropped at the first of: the keep-alive ends (the lock was found taken or gone, or
//! the nodes did not answer in time: see `keep_alive::renewal`, which reports a loss a few
//! milliseconds before the validity ends), or the validity is about to end by this task's own
//! timer (a keep-alive starved of its thread still loses no time here). Either way before the
//! lease's validity ends, as far as timers fire on time. Dropped, not detached: nothing of the
//! work runs after `under` returns.

use std::future::Future;
use std::pin::pin;
use std::time::Instant;

use tokio::time::sleep_until;

use crate::engine::metrics::Lost;
use crate::error::Error;
use crate::primitives::keep_alive::{KeepAlive, KeepAliveEnd, Renewal};
use crate::primitives::lock::Lock;

/// Polls `work` while `keep` renews `lock`: its output if it completed while the lock was valid,
/// else [`Error::Lost`] with the cause, `work` dropped.
pub(crate) async fn under<F: Future>(
    lock: &Lock,
    keep: &KeepAlive,
    work: F,
) -> Result<F::Output, Error> {
    let mut work = pin!(work);
    loop {
        let drop_by = Renewal::drop_by(lock.valid_until());
        tokio::select! {
            // The work first: one that completed while the lock was valid counts, even if the
            // keep-alive has just given up (it does so before the validity ends).
            biased;
            output = &mut work => {
                // A poll that ran past the validity (work that held its thread, or a process
                // paused) did not complete under the lock.
                if Instant::now() < lock.valid_until() {
                    return Ok(output);
                }
                lock.lost(Lost::KeepAliveTimedOut);
                return Err(lost(Error::Expired));
            }
            end = keep.ended() => return Err(lost(cause(end))),
            () = sleep_until(drop_by.into()) => {
                // A renewal may have moved the validity while this timer ran: look again.
                if Renewal::drop_by(lock.valid_until()) <= Instant::now() {
                    lock.lost(Lost::KeepAliveTimedOut);
                    return Err(lost(Error::Expired));
                }
            }
        }
    }
}

/// Whether work that held its thread throughout (the blocking API's `run`, which cannot drop
/// it) and has just returned completed under the lease: the keep-alive reported no loss while
/// it ran, and the validity has not ended.
#[cfg(feature = "blocking")]
pub(crate) fn returned_under(lock: &Lock, keep: &KeepAlive) -> Result<(), Error> {
    if let Some(end) = keep.end() {
        return Err(lost(cause(end)));
    }
    if Instant::now() < lock.valid_until() {
        return Ok(());
    }
    lock.lost(Lost::KeepAliveTimedOut);
    Err(lost(Error::Expired))
}

/// Why work under the lease must stop, if it must: the keep-alive ended, or the validity is
/// about to end by the clock (the moment `under` would drop the work). Read by work that polls.
#[cfg(feature = "blocking")]
pub(crate) fn stop_reason(lock: &Lock, keep: &KeepAlive) -> Option<Error> {
    if let Some(end) = keep.end() {
        return Some(cause(end));
    }
    (Instant::now() >= Renewal::drop_by(lock.valid_until())).then_some(Error::Expired)
}

/// The loss, with its cause.
pub(crate) fn lost(cause: Error) -> Error {
    Error::Lost {
        cause: Box::new(cause),
    }
}

/// Why the keep-alive stopped, as the cause of a loss.
fn cause(end: KeepAliveEnd) -> Error {
    match end {
        KeepAliveEnd::Lost(error) => error,
        KeepAliveEnd::Unlocked => Error::Unlocked,
        // No limits are set on the keep-alive of a run; were one reached, the validity would
        // run out.
        KeepAliveEnd::Expired | KeepAliveEnd::LimitReached => Error::Expired,
    }
}
