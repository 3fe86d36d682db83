//! Acquiring a lock: attempts over all nodes, release of failed attempts, retries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::error::Error;
use crate::fanout;
use crate::lock::{Lock, deadline};
use crate::mutex::Mutex;
use crate::node::{self, Delivery, Op, Request};
use crate::quorum::{Tally, validity, whole_millis};
use crate::settings::Plan;
use crate::wake::Watch;

/// The release of a failed attempt.
enum Cleanup {
    /// Done; `confirmed` if every node answered it.
    Done { confirmed: bool },
    /// Running in the background (fail-fast); yields whether every node answered it.
    Background(JoinHandle<bool>),
}

/// Makes up to `tries` attempts to acquire `mutex`, starting with `value`.
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
    // With wake-up on release: this call's place in line, from its first failed attempt on.
    let mut watch: Option<Watch> = None;
    // Whether the wait before this attempt ended with a wake-up.
    let mut woken = false;
    if plan.wake_on_release
        && tries > 1
        && let Some(hub) = mutex.redlock().running_hub()
        && hub.has_waiters(mutex.name_arc())
    {
        // Others of this client already wait for the name: the lock is held, or is being handed
        // to one of them. Queue behind them rather than send an attempt bound to fail, and
        // rather than barge ahead of them. No try is spent; the retry delay still bounds the wait.
        let (joined, _) = hub.watch(mutex.name_arc(), Instant::now());
        woken = Box::pin(wait_in_line(
            mutex,
            plan,
            &joined,
            plan.retry_delay_after(1),
        ))
        .await;
        watch = Some(joined);
    }
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        if let Some(watch) = &watch {
            watch.rearm(started);
        }
        let outcome = attempt_once(mutex, plan, &guard.value, started).await;
        if let (Some(watch), true) = (&watch, woken) {
            watch.woken_attempt(outcome.is_ok());
        }
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
                if let Some(watch) = watch {
                    watch.done();
                }
                return Ok(lock);
            }
            // Refusals (permissions, credentials) that leave no quorum fail every try alike.
            Err((error, _)) if attempt >= tries || error.is_refused_by_too_many() => {
                // Whatever the attempt set is released, or being released in the background.
                guard.armed = false;
                // Dropped, not done: a wake-up that came during this last attempt passes on to
                // the next waiter in line.
                drop(watch);
                return Err(error);
            }
            Err((_, cleanup)) => cleanup,
        };
        // Computed before the await: the thread-local generator must not live across it.
        let delay = plan.retry_delay_after(attempt);
        let mut retry_now = false;
        if watch.is_none()
            && plan.wake_on_release
            && let Some(hub) = mutex.redlock().hub()
        {
            let (joined, subscribing) = hub.watch(mutex.name_arc(), started);
            watch = Some(joined);
            if let Some(subscribing) = subscribing {
                // Nobody listened for this name: a release between the failed attempt and the
                // subscription taking effect went unheard. One more attempt, once the nodes
                // confirmed, covers that gap.
                Box::pin(subscribing.confirmed(plan.node_timeout)).await;
                retry_now = true;
            }
        }
        let pause = async {
            match &watch {
                _ if retry_now => false,
                Some(watch) => Box::pin(wait_in_line(mutex, plan, watch, delay)).await,
                None => {
                    tokio::time::sleep(delay).await;
                    false
                }
            }
        };
        // The next attempt reuses the value, so this attempt's release must be done before it
        // starts, or it could delete the next attempt's keys.
        let confirmed;
        (woken, confirmed) = match cleanup {
            Cleanup::Done { confirmed } => (pause.await, confirmed),
            Cleanup::Background(task) => {
                let (woken, confirmed) = futures::join!(pause, task);
                (woken, confirmed.unwrap_or(false))
            }
        };
        if !confirmed || plan.wake_on_release {
            // A release that timed out is still queued; should the connection be re-made, it
            // could run after the next attempt's SET on the new connection and delete that key.
            // A fresh value makes such a late release harmless. It is still on its way, so the
            // old value needs no release of ours any more.
            // With wake-up on release, a release notice names the released value, and waiters
            // treat a value as one release: the next attempt must not release the same value
            // again (see `wake`).
            guard.value = mutex.new_value()?;
        }
        attempt += 1;
    }
}

/// Waits for a wake-up by release notices, or `delay` at most; `true` if woken.
///
/// A woken waiter first pauses for its name's current spread (see `wake`). A pause means that
/// woken waiters of several clients have been racing for the name: after it, one node is asked
/// whether the name is still free (one command, where an attempt costs one per node), and if
/// another client's waiter got there first, this one goes back to waiting.
///
/// Boxed where it is awaited, as is the subscription's confirmation (a timer and the listeners'
/// replies): inline, they would grow every `lock()` future, waiting or not, by half (1.5 to
/// 2.3 KB).
async fn wait_in_line(mutex: &Mutex, plan: &Plan, watch: &Watch, delay: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return false,
            () = watch.woken() => {}
        }
        let woken_at = Instant::now();
        let (pause, node) = watch.pause();
        tracing::trace!(?pause, "woken by a release");
        // Even a zero sleep waits for the timer's next tick (1 ms).
        if pause.is_zero() {
            return true;
        }
        tokio::time::sleep(pause).await;
        let connection = mutex.redlock().nodes()[node].connection.clone();
        match node::exists(connection, mutex.name(), plan.node_timeout).await {
            Some(true) => {
                tracing::trace!(node, "taken again before the attempt");
                watch.wait_again(woken_at);
            }
            // Free, or no answer: the attempt will tell.
            _ => return true,
        }
    }
}

/// Milliseconds from now until `until` (0 if passed), for traces.
pub(crate) fn millis_left(until: Instant) -> u64 {
    whole_millis(until.saturating_duration_since(Instant::now()))
}

/// One attempt, begun at `start` (validity counts from it). On failure, the error and the release
/// of whatever the attempt set.
async fn attempt_once(
    mutex: &Mutex,
    plan: &Plan,
    value: &Arc<str>,
    start: Instant,
) -> Result<Lock, (Error, Cleanup)> {
    let nodes = mutex.redlock().nodes();
    let op = if plan.fencing {
        Op::AcquireFenced
    } else {
        Op::Acquire
    };
    let request = Request::new(op, mutex.name_arc(), value, plan.millis);
    let (mut tally, in_flight) = if plan.fail_fast {
        fanout::until_decided(nodes, request, plan.node_timeout, plan.shuffle_nodes).await
    } else {
        let tally = fanout::all(nodes, request, plan.node_timeout, plan.shuffle_nodes).await;
        (tally, None)
    };
    let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
    let token = tally.max_counter.saturating_add(1);
    // Filled only for fenced requests (see `Tally::track_nodes`).
    let counted = std::mem::take(&mut tally.ours_nodes);
    // Every node answered that another owner holds the name: the attempt set nothing anywhere.
    let set_nothing = tally.foreign.len() == nodes.len();
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
        Err(error) if set_nothing => Err((error, Cleanup::Done { confirmed: true })),
        Err(error) => {
            // No call of this attempt may land after its release.
            if let Some(stragglers) = stragglers {
                stragglers.cancel();
            }
            let release = fanout::release(
                Arc::clone(nodes),
                Arc::clone(mutex.name_arc()),
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
    let request = Request::new(Op::Raise(token), mutex.name_arc(), value, plan.millis);
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
                Arc::clone(self.mutex.name_arc()),
                Arc::clone(&self.value),
                self.plan,
            );
        }
    }
}
