//! How a `lock()` call passes the time between its attempts: the one interface between acquiring
//! (`acquire`) and the ways of waiting: plain sleeping (here), release notices (`notices`) and the
//! fair line (`fair`).
//!
//! Acquiring is a loop of "attempt, then wait". Each way of waiting sees the same moments of that
//! loop: before the first attempt, the start of each attempt (and which request it sends), the
//! replies of a failed one, the wait after it, and the end of the call (with the lock or
//! without). What it does in between is its own business: sleep the retry delay, listen for
//! release notices, or keep a place in the fair line across clients.

use std::time::{Duration, Instant};

use crate::engine::delay::FOREVER;
use crate::engine::request::Op;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;

use super::fair::FairWait;
use super::listeners::Listeners;
use super::notices::NoticeWait;

/// The way one `lock()` call waits, chosen from the mutex's settings.
pub(crate) enum Waiting<'a> {
    /// The retry delay, and nothing else.
    Sleep {
        plan: &'a Plan,
        deadline: Option<Instant>,
    },
    /// The retry delay, cut short by release notices (wake-up on release, the default).
    Notices(NoticeWait<'a>),
    /// A place in the line across clients (`with_fair`). Boxed: only fair calls pay for its
    /// size, not every `lock()` future.
    Fair(Box<FairWait<'a>>),
}

/// How a wait ended.
pub(crate) enum Resume {
    /// The next attempt is due.
    Attempt,
    /// The lock was handed to this call (fair waiting); it is valid until then.
    Granted(Instant),
}

impl<'a> Waiting<'a> {
    /// The way a call on `resource` waits, for a call that makes up to `tries` attempts and
    /// starts none after `deadline` (its maximum wait); `listeners` are its client's.
    pub(crate) fn new(
        resource: &'a Resource,
        listeners: &'a Listeners,
        plan: &'a Plan,
        tries: u32,
        deadline: Option<Instant>,
    ) -> Waiting<'a> {
        if plan.fair {
            let fair = FairWait::new(resource, listeners, plan, tries, deadline);
            Waiting::Fair(Box::new(fair))
        } else if plan.wake_on_release && tries > 1 {
            // One attempt has nothing to wait for.
            Waiting::Notices(NoticeWait::new(resource, listeners, plan, deadline))
        } else {
            Waiting::Sleep { plan, deadline }
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

    /// Whether the attempt about to begin, number `attempt` (1-based) of at most `tries`, is the
    /// last one.
    pub(crate) fn is_last(&mut self, attempt: u32, tries: u32) -> bool {
        match self {
            Waiting::Fair(fair) => fair.is_last(),
            _ => attempt >= tries,
        }
    }

    /// Attempt number `attempt` (1-based) with `value` begins at `started` (the `last` one if no
    /// attempt follows); returns what it sends to every node, and how long the waiters' marks
    /// sent before it live, if it sends them (see `Request::with_marks`).
    pub(crate) fn attempt_starts(
        &mut self,
        attempt: u32,
        started: Instant,
        last: bool,
        value: &str,
    ) -> (Op, Option<Duration>) {
        match self {
            Waiting::Sleep { plan, .. } => (acquire_op(plan), None),
            Waiting::Notices(notices) => {
                let marks = notices.attempt_starts(attempt, started, last);
                (acquire_op(notices.plan()), marks)
            }
            Waiting::Fair(fair) => {
                fair.attempt_starts(value);
                (fair.op(), None)
            }
        }
    }

    /// The replies of an attempt that sent `op`, before they are judged; `last` if no attempt
    /// follows. Returns
    /// whether what a failed attempt set stays (a fair waiter's place in line) rather than being
    /// released.
    pub(crate) fn replies(&mut self, tally: &Tally, started: Instant, last: bool, op: Op) -> bool {
        match self {
            Waiting::Fair(fair) => fair.observe(tally, started, last, op),
            Waiting::Notices(notices) => {
                notices.replies(tally);
                false
            }
            Waiting::Sleep { .. } => false,
        }
    }

    /// The attempt ended; `won` if it got the lock.
    pub(crate) fn attempt_ended(&mut self, won: bool) {
        if let Waiting::Notices(notices) = self {
            notices.attempt_ended(won);
        }
    }

    /// Waits after failed attempt number `failed` (1-based), which began at `started`, until the
    /// next attempt is due or the lock is handed over.
    pub(crate) async fn wait(&mut self, failed: u32, started: Instant) -> Resume {
        match self {
            Waiting::Sleep { plan, deadline } => {
                // Drawn before the await: the thread-local generator must not live across it.
                let delay = plan.retry_delay_after(failed);
                tokio::time::sleep_until(until(delay, *deadline)).await;
                Resume::Attempt
            }
            Waiting::Notices(notices) => {
                Box::pin(notices.wait(failed, started)).await;
                Resume::Attempt
            }
            Waiting::Fair(fair) => Box::pin(fair.wait()).await,
        }
    }

    /// Whether the next attempt needs a value of its own (it would otherwise reuse the value of
    /// the failed one).
    pub(crate) fn fresh_values(&self) -> bool {
        match self {
            Waiting::Sleep { .. } => false,
            // A release notice names the released value, and waiters treat a value as one
            // release: a retry must not release the same value again (see `hub::line`).
            Waiting::Notices(_) => true,
            // A waiter is known in line by its value; it keeps it while it waits. After a
            // retreat it joins anew with a fresh one: grant notices for the keys the retreat gave
            // back, kept by the hub or late, name the old value and so cannot count as hand-offs
            // of the new places.
            Waiting::Fair(fair) => fair.retreated(),
        }
    }

    /// The call got the lock; returns whether it waited in a line for release notices (then its
    /// release keeps the waiters' marks, see `waiting::notices`). Dropping a `Waiting` without
    /// this means the call ended without it (failed, or cancelled).
    pub(crate) fn acquired(self) -> bool {
        match self {
            Waiting::Notices(notices) => notices.acquired(),
            _ => false,
        }
    }
}

/// When a wait of `delay` from now ends, at `deadline` at the latest.
pub(super) fn until(delay: Duration, deadline: Option<Instant>) -> tokio::time::Instant {
    let now = Instant::now();
    let end = now + delay.min(FOREVER);
    tokio::time::Instant::from(deadline.map_or(end, |deadline| end.min(deadline.max(now))))
}

/// The request of a plain attempt.
fn acquire_op(plan: &Plan) -> Op {
    if plan.fencing {
        Op::AcquireFenced
    } else {
        Op::Acquire
    }
}
