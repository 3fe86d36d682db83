//! How a `lock()` call passes the time between its attempts: the one interface between acquiring
//! (`acquire`) and the ways of waiting.
//!
//! Acquiring is a loop of "attempt, then wait". Each way of waiting sees the same five moments of
//! that loop: before the first attempt, the start and the end of each attempt, the wait after a
//! failed one, and the end of the call (with the lock or without). What it does in between is its
//! own business: sleep the retry delay, or listen for release notices.

mod notices;

use std::time::Instant;

use crate::mutex::Mutex;
use crate::settings::Plan;

use notices::NoticeWait;

/// The way one `lock()` call waits, chosen from the mutex's settings.
pub(crate) enum Waiting<'a> {
    /// The retry delay, and nothing else.
    Sleep { plan: &'a Plan },
    /// The retry delay, cut short by release notices (`with_wake_on_release`).
    Notices(NoticeWait<'a>),
}

impl<'a> Waiting<'a> {
    /// The way `mutex` waits, for a call that makes up to `tries` attempts.
    pub(crate) fn new(mutex: &'a Mutex, plan: &'a Plan, tries: u32) -> Waiting<'a> {
        // One attempt has nothing to wait for.
        if plan.wake_on_release && tries > 1 {
            Waiting::Notices(NoticeWait::new(mutex, plan))
        } else {
            Waiting::Sleep { plan }
        }
    }

    /// Called before the first attempt; may wait.
    pub(crate) async fn before_first_attempt(&mut self) {
        if let Waiting::Notices(notices) = self {
            // Boxed, as every wait below: inline, the waiting paths would grow every `lock()`
            // future, waiting or not.
            Box::pin(notices.before_first_attempt()).await;
        }
    }

    /// An attempt begins at `started`.
    pub(crate) fn attempt_starts(&mut self, started: Instant) {
        if let Waiting::Notices(notices) = self {
            notices.attempt_starts(started);
        }
    }

    /// The attempt ended; `won` if it got the lock.
    pub(crate) fn attempt_ended(&mut self, won: bool) {
        if let Waiting::Notices(notices) = self {
            notices.attempt_ended(won);
        }
    }

    /// Waits after failed attempt number `failed` (1-based), which began at `started`, until the
    /// next attempt is due.
    pub(crate) async fn wait(&mut self, failed: u32, started: Instant) {
        match self {
            Waiting::Sleep { plan } => {
                // Drawn before the await: the thread-local generator must not live across it.
                let delay = plan.retry_delay_after(failed);
                tokio::time::sleep(delay).await;
            }
            Waiting::Notices(notices) => Box::pin(notices.wait(failed, started)).await,
        }
    }

    /// Whether each attempt needs a value of its own (the next attempt would otherwise reuse the
    /// value of the failed one).
    pub(crate) fn fresh_values(&self) -> bool {
        // A release notice names the released value, and waiters treat a value as one release:
        // a retry must not release the same value again (see `line`).
        matches!(self, Waiting::Notices(_))
    }

    /// The call got the lock. Dropping a `Waiting` without this means the call ended without it
    /// (failed, or cancelled).
    pub(crate) fn acquired(self) {
        if let Waiting::Notices(notices) = self {
            notices.acquired();
        }
    }
}
