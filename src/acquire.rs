//! Acquiring a lock: attempts over all nodes, release of failed attempts, retries.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use crate::error::Error;
use crate::fanout::{self, Settle};
use crate::lock::{Lock, deadline};
use crate::mutex::Mutex;
use crate::node::{Delivery, Op, Request};
use crate::quorum::{Tally, validity};
use crate::settings::Plan;

/// Makes up to `tries` attempts to acquire `mutex` with `value`.
pub(crate) async fn acquire(
    mutex: &Mutex,
    plan: &Plan,
    value: Arc<str>,
    tries: u32,
) -> Result<Lock, Error> {
    let mut guard = CancelGuard {
        mutex,
        plan,
        value: &value,
        armed: true,
    };
    let mut attempt = 1;
    loop {
        let cleanup = match attempt_once(mutex, plan, &value).await {
            Ok(lock) => {
                guard.armed = false;
                return Ok(lock);
            }
            Err((error, _)) if attempt >= tries => {
                // Whatever the attempt set is released, or being released in the background.
                guard.armed = false;
                return Err(error);
            }
            Err((_, cleanup)) => cleanup,
        };
        // Computed before the await: the thread-local generator must not live across it.
        let delay = plan.retry_delay_after(attempt);
        // The next attempt reuses the value, so this attempt's release must be done before it
        // starts, or it could delete the next attempt's keys.
        let wait_cleanup = async {
            if let Some(cleanup) = cleanup {
                cleanup.await;
            }
        };
        futures::join!(tokio::time::sleep(delay), wait_cleanup);
        attempt += 1;
    }
}

/// One attempt. On failure, the release of whatever it set: done (`None`), or running in the
/// background in fail-fast mode.
async fn attempt_once(
    mutex: &Mutex,
    plan: &Plan,
    value: &Arc<str>,
) -> Result<Lock, (Error, Option<Settle>)> {
    let nodes = mutex.redlock().nodes();
    let request = Arc::new(Request::new(
        Op::Acquire,
        mutex.name_arc(),
        value,
        plan.millis,
    ));
    let start = Instant::now();
    let mut calls = fanout::fan_out(nodes, &request, plan.node_timeout, plan.shuffle_nodes);
    let mut tally = Tally::new(nodes.len());
    let mut answered = vec![false; nodes.len()];
    while let Some((node, reply)) = calls.next().await {
        answered[node] = true;
        tally.add(node, reply);
        if plan.fail_fast && tally.decided() {
            break;
        }
    }
    let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
    let pending = answered
        .iter()
        .enumerate()
        .filter(|(_, answered)| !**answered)
        .map(|(node, _)| node);
    tally.close(pending);
    // Calls still in flight keep going: after success the key lands on more nodes (a bare quorum
    // turns one node loss into two holders); after failure they are released with the rest.
    let in_flight = (!calls.is_empty()).then(|| fanout::settle_in_background(calls));

    match tally.judge_acquire(left) {
        Ok(left) => Ok(Lock::new(
            mutex.clone(),
            Arc::clone(value),
            deadline(start, left),
            in_flight,
        )),
        Err(error) => {
            let release = fanout::release(
                Arc::clone(nodes),
                Arc::clone(mutex.name_arc()),
                Arc::clone(value),
                plan.node_timeout,
                in_flight,
                Delivery::Inline,
            );
            if plan.fail_fast {
                let task = tokio::spawn(release);
                let done: Settle = futures::FutureExt::shared(futures::FutureExt::boxed(async {
                    let _ = task.await;
                }));
                Err((error, Some(done)))
            } else {
                release.await;
                Err((error, None))
            }
        }
    }
}

/// Releases `value` in the background if `acquire` is dropped before it returns.
///
/// Cancel safety of `lock()`: a dropped future must not leave keys behind for the full expiry when
/// it can help it. The value is never used again, so the late release cannot hit a later holder.
struct CancelGuard<'a> {
    mutex: &'a Mutex,
    plan: &'a Plan,
    value: &'a Arc<str>,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            fanout::spawn_release(
                Arc::clone(self.mutex.redlock().nodes()),
                Arc::clone(self.mutex.name_arc()),
                Arc::clone(self.value),
                self.plan.node_timeout,
                None,
            );
        }
    }
}
