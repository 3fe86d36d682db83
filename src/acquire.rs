//! Acquiring a lock: attempts over all nodes, release of failed attempts, retries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::engine::fanout;
use crate::engine::quorum::{validity, whole_millis};
use crate::engine::request::{Delivery, Op, Request};
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::error::{Error, NodeErrorKind};
use crate::lock::{Lock, deadline};
use crate::mutex::Mutex;
use crate::waiting::{Resume, Waiting};

/// The release of a failed attempt.
enum Cleanup {
    /// Done; `confirmed` if every node answered it.
    Done { confirmed: bool },
    /// Running in the background (fail-fast); yields whether every node answered it.
    Background(JoinHandle<bool>),
}

impl Cleanup {
    /// Whether every node answered the release, once it is done.
    async fn confirmed(self) -> bool {
        match self {
            Cleanup::Done { confirmed } => confirmed,
            Cleanup::Background(task) => task.await.unwrap_or(false),
        }
    }
}

/// Makes up to `tries` attempts to acquire `mutex`, starting with `value`, waiting between them
/// as the mutex's settings say (see `waiting`).
pub(crate) async fn acquire(
    mutex: &Mutex,
    plan: &Plan,
    value: Arc<str>,
    tries: u32,
) -> Result<Lock, Error> {
    let mut guard = CancelGuard {
        mutex,
        plan,
        value,
        armed: true,
    };
    let mut waiting = Waiting::new(mutex, plan, tries);
    waiting.before_first_attempt().await;
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        let last = waiting.is_last(attempt, tries);
        let op = waiting.attempt_starts(started, &guard.value);
        let keeps = |tally: &Tally| waiting.replies(tally, started, last, op);
        let outcome = attempt_once(mutex, plan, op, &guard.value, started, keeps).await;
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
                waiting.acquired();
                return Ok(lock);
            }
            // Refusals (permissions, credentials) that leave no quorum fail every try alike.
            Err((error, _)) if last || error.is_refused_by_too_many() => {
                // Whatever the attempt set is released, or being released in the background.
                guard.armed = false;
                return Err(error);
            }
            Err((_, cleanup)) => cleanup,
        };
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
            let value = Arc::clone(&guard.value);
            return Ok(Lock::new(mutex.clone(), value, valid_until, None, None));
        }
        if !confirmed || waiting.fresh_values() {
            // A release that timed out is still queued; should the connection be re-made, it
            // could run after the next attempt's SET on the new connection and delete that key.
            // A fresh value makes such a late release harmless. It is still on its way, so the
            // old value needs no release of ours any more.
            guard.value = mutex.new_value()?;
        }
        attempt += 1;
    }
}

/// Milliseconds from now until `until` (0 if passed), for traces.
pub(crate) fn millis_left(until: Instant) -> u64 {
    whole_millis(until.saturating_duration_since(Instant::now()))
}

/// One attempt sending `op`, begun at `start` (validity counts from it). On failure, the error and
/// the release of whatever the attempt set, unless `keeps` (shown the replies) says it stays.
async fn attempt_once(
    mutex: &Mutex,
    plan: &Plan,
    op: Op,
    value: &Arc<str>,
    start: Instant,
    keeps: impl FnOnce(&Tally) -> bool,
) -> Result<Lock, (Error, Cleanup)> {
    let nodes = mutex.redlock().nodes();
    let round = matches!(op, Op::Round { .. });
    let request = Request::new(op, mutex.target(), value, plan.millis);
    // A fair round needs every node's answer: where it stands in line is part of the outcome.
    let (mut tally, in_flight) = if plan.fail_fast && !round {
        fanout::until_decided(nodes, request, plan.node_timeout, plan.shuffle_nodes).await
    } else {
        let tally = fanout::all(nodes, request, plan.node_timeout, plan.shuffle_nodes).await;
        (tally, None)
    };
    let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
    let keep = keeps(&tally);
    let token = tally.max_counter.saturating_add(1);
    // Filled only for fenced requests (see `Tally::track_nodes`).
    let counted = std::mem::take(&mut tally.ours_nodes);
    // Every node answered that another owner holds the name: the attempt set nothing anywhere.
    // (A fair round that failed set our place in line wherever it was answered, and a fair entry
    // that found a line took the key there.)
    let set_nothing = !round
        && tally.failures.len() == nodes.len()
        && tally
            .failures
            .iter()
            .all(|f| matches!(f.kind, NodeErrorKind::Taken));
    let judged = tally.judge_acquire(left);
    // Fail-fast leaves the calls still in flight running after success: the key lands on more
    // nodes (a bare quorum turns one node loss into two holders). After failure they are dropped,
    // which stops them (see `Stragglers`), and released with the rest.
    let stragglers = match &judged {
        Ok(_) => in_flight.map(fanout::InFlight::finish_in_background),
        Err(_) => None,
    };
    let verdict = match judged {
        Ok(_) if plan.fencing => raise(mutex, plan, value, start, token, &counted).await,
        other => other.map(|left| (left, None)),
    };

    match verdict {
        Ok((left, token)) => Ok(Lock::new(
            mutex.clone(),
            Arc::clone(value),
            deadline(start, left),
            stragglers,
            token,
        )),
        // The common failure under contention: no release to send.
        Err(error) if set_nothing || keep => Err((error, Cleanup::Done { confirmed: true })),
        Err(error) => {
            // No call of this attempt may land after its release.
            if let Some(stragglers) = stragglers {
                stragglers.cancel();
            }
            let release = fanout::release(
                Arc::clone(nodes),
                Arc::clone(mutex.target()),
                Arc::clone(value),
                plan,
                Delivery::Inline,
            );
            let confirmed = |tally: Tally| tally.unconfirmed() == 0;
            if plan.fail_fast {
                let task = tokio::spawn(async move { confirmed(release.await) });
                Err((error, Cleanup::Background(task)))
            } else {
                let confirmed = confirmed(release.await);
                Err((error, Cleanup::Done { confirmed }))
            }
        }
    }
}

/// The second round of a fenced acquire: raise the counter to `token` on a quorum, where our value
/// still holds the lock, before the token is handed out.
///
/// Why a quorum must be raised (the naive maximum over the acquiring quorum is not monotonic: a
/// failed partial attempt can inflate one node's counter, and a later holder whose quorum misses
/// that node would get a smaller token): let holder H1 get token t1 after raising on quorum R1,
/// and H2 acquire later on quorum A2. Two quorums share a node n. On n, H1's raise ran while H1's
/// value held the lock, and H2's acquire ran while the lock was free, so after H1's value left n,
/// hence after the raise: H2 read a counter of at least t1 on n and picks t2 >= t1 + 1. Counters
/// only grow and never expire, so this holds as long as nodes keep their data.
async fn raise(
    mutex: &Mutex,
    plan: &Plan,
    value: &Arc<str>,
    start: Instant,
    token: u64,
    counted: &[usize],
) -> Result<(Duration, Option<u64>), Error> {
    let nodes = mutex.redlock().nodes();
    let request = Request::new(Op::Raise(token), mutex.target(), value, plan.millis);
    let tally = fanout::all(nodes, request, plan.node_timeout, plan.shuffle_nodes).await;
    // Only raises on the nodes whose counters went into the token count. A node whose acquire
    // reply came too late to be counted may hold our value and accept the raise; counting it lets
    // two holders end up with one token (found by the model check in tests/model_fencing.rs).
    // The raise round counts against the validity too.
    let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
    let left = tally.judge_raise(counted, left)?;
    Ok((left, Some(token)))
}

/// Releases the current value in the background if `acquire` is dropped before it returns.
///
/// Cancel safety of `lock()`: a dropped future must not leave keys behind for the full expiry when
/// it can help it. The value is never used again, so the late release cannot hit a later holder.
struct CancelGuard<'a> {
    mutex: &'a Mutex,
    plan: &'a Plan,
    value: Arc<str>,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            fanout::spawn_release(
                Arc::clone(self.mutex.redlock().nodes()),
                Arc::clone(self.mutex.target()),
                Arc::clone(&self.value),
                self.plan,
            );
        }
    }
}
