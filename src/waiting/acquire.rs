//! Acquiring with retries: a loop of "attempt, then wait" (one attempt is the engine's, see
//! `engine::attempt`; the waiting between attempts is `wait`'s).

use std::sync::Arc;
use std::time::Instant;

use crate::engine::attempt::{attempt_once, millis_left};
use crate::engine::delay::FOREVER;
use crate::engine::fanout;
use crate::engine::held::Held;
use crate::engine::metrics;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::error::Error;
use crate::waiting::listeners::Listeners;
use crate::waiting::{Resume, Waiting};

/// Makes up to `tries` attempts to acquire `resource`, starting with `value`, waiting between
/// them as its settings say (see `wait`); `listeners` are its client's, for waiting by release
/// notices. With a maximum wait, no attempt starts after it ran out (waits end at it, and the
/// attempt that starts then is the last one), and an attempt that ends after it is the last one
/// too: whichever of the tries and the maximum wait runs out first ends the call.
pub(crate) async fn acquire(
    resource: &Resource,
    listeners: &Listeners,
    plan: &Plan,
    value: Arc<str>,
    tries: u32,
) -> Result<Held, Error> {
    let call = metrics::Acquiring::start(&resource.labels());
    let acquired = attempts(resource, listeners, plan, value, tries).await;
    call.returned(&acquired);
    acquired
}

async fn attempts(
    resource: &Resource,
    listeners: &Listeners,
    plan: &Plan,
    value: Arc<str>,
    tries: u32,
) -> Result<Held, Error> {
    let mut guard = CancelGuard {
        resource,
        plan,
        value,
        armed: true,
    };
    let began = Instant::now();
    // A single attempt (`try_lock()`) has no wait to bound.
    let deadline = plan
        .max_wait
        .filter(|_| tries > 1)
        .map(|wait| began + wait.min(FOREVER));
    let out_of_time = || deadline.is_some_and(|deadline| Instant::now() >= deadline);
    let mut waiting = Waiting::new(resource, listeners, plan, tries, deadline);
    waiting.before_first_attempt().await;
    let mut attempt = 1;
    // Counts the call as waiting from its first failed attempt until it returns or is dropped.
    let mut waiter = None;
    loop {
        let started = Instant::now();
        let last = waiting.is_last(attempt, tries) || out_of_time();
        let (op, marks) = waiting.attempt_starts(attempt, started, last, &guard.value);
        let keeps = |tally: &Tally| waiting.replies(tally, started, last, op);
        let sent = (op, marks);
        let outcome = attempt_once(resource, plan, sent, &guard.value, started, keeps).await;
        waiting.attempt_ended(outcome.is_ok());
        match &outcome {
            Ok(lock) => tracing::debug!(
                attempt,
                valid_for_ms = millis_left(lock.valid_until()),
                token = lock.token(),
                "acquired"
            ),
            Err((error, _)) => tracing::debug!(attempt, %error, "attempt failed"),
        }
        let cleanup = match outcome {
            Ok(lock) => {
                guard.armed = false;
                if waiting.acquired() {
                    return Ok(lock.after_waiting());
                }
                return Ok(lock);
            }
            // Refusals (permissions, credentials) that leave no quorum fail every try alike.
            Err((error, _)) if last || out_of_time() || error.is_refused_by_too_many() => {
                // Whatever the attempt set is released, or being released in the background.
                guard.armed = false;
                if out_of_time() && !error.is_refused_by_too_many() {
                    let waited = began.elapsed();
                    tracing::debug!(attempt, ?waited, "the maximum wait ran out");
                    return Err(Error::WaitedOut {
                        waited,
                        last: Box::new(error),
                    });
                }
                return Err(error);
            }
            Err((_, cleanup)) => cleanup,
        };
        waiter.get_or_insert_with(|| metrics::Waiter::enter(&resource.labels()));
        // The next attempt reuses the value, so this attempt's release must be done before it
        // starts, or it could delete the next attempt's keys.
        let (resume, confirmed) =
            futures::join!(waiting.wait(attempt, started), cleanup.confirmed());
        if let Resume::Granted(valid_until) = resume {
            tracing::debug!(
                attempt,
                valid_for_ms = millis_left(valid_until),
                "handed over in line"
            );
            guard.armed = false;
            waiting.acquired();
            metrics::handoff(metrics::Handoff::Fair);
            let value = Arc::clone(&guard.value);
            return Ok(Held::new(
                resource.clone(),
                value,
                valid_until,
                None,
                None,
                Vec::new(),
            ));
        }
        if !confirmed || waiting.fresh_values() {
            // A release that timed out is still queued; should the connection be re-made, it
            // could run after the next attempt's SET on the new connection and delete that key.
            // A fresh value makes such a late release harmless. It is still on its way, so the
            // old value needs no release of ours any more.
            guard.value = resource.new_value()?;
        }
        attempt += 1;
    }
}

/// Releases the current value in the background if `acquire` is dropped before it returns.
///
/// Cancel safety of `lock()`: a dropped future must not leave keys behind for the full expiry when
/// it can help it. The value is never used again, so the late release cannot hit a later holder.
struct CancelGuard<'a> {
    resource: &'a Resource,
    plan: &'a Plan,
    value: Arc<str>,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            fanout::spawn_release(
                None,
                Arc::clone(self.resource.nodes()),
                Arc::clone(self.resource.target()),
                Arc::clone(&self.value),
                (self.plan, self.plan.release_op(true)),
            );
        }
    }
}
