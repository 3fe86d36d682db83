//! Sending one request to every node at once, all calls bounded by one deadline.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};
use rand::seq::SliceRandom;
use tokio::time::sleep_until;

use crate::error::NodeErrorKind;
use crate::node::{Delivery, Node, Op, Request, call};
use crate::quorum::Tally;
use crate::settings::Plan;

/// Resolves once node calls that outlived their operation (fail-fast) have finished.
///
/// Unlock and extend wait on it first, so no SET of the same value lands after them.
pub(crate) type Settle = Shared<BoxFuture<'static, ()>>;

/// One node's answer.
type Reply = Result<u64, NodeErrorKind>;

/// The calls of one request, one per node, polled together by whoever awaits them: no task and no
/// waker per call, and one timer for all of them.
struct Calls<F> {
    /// The calls that have not answered yet, with their node index.
    pending: Vec<(usize, Pin<Box<F>>)>,
}

impl<F: Future<Output = Reply>> Calls<F> {
    /// Polls every pending call once (there are as many as nodes, a handful), handing each reply
    /// to `reply`. Ready when every call has answered.
    fn poll_replies(
        &mut self,
        cx: &mut Context<'_>,
        mut reply: impl FnMut(usize, Reply),
    ) -> Poll<()> {
        let mut index = 0;
        while index < self.pending.len() {
            match self.pending[index].1.as_mut().poll(cx) {
                Poll::Ready(answer) => {
                    // The last call moves into `index`, and is polled next.
                    let (node, _) = self.pending.swap_remove(index);
                    reply(node, answer);
                }
                Poll::Pending => index += 1,
            }
        }
        if self.pending.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Starts `request` on every node (issued on first poll, in node order or, with `shuffle`, in a
/// random order; node indices in replies are unchanged).
fn fan_out(
    nodes: &[Node],
    request: &Arc<Request>,
    shuffle: bool,
) -> Calls<impl Future<Output = Reply> + Send + 'static> {
    let mut pending: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let (connection, request) = (node.connection.clone(), Arc::clone(request));
            (
                index,
                Box::pin(async move { call(connection, &request).await }),
            )
        })
        .collect();
    if shuffle {
        pending.shuffle(&mut rand::rng());
    }
    Calls { pending }
}

/// Sends `request` to every node and waits for every reply; a call still pending `timeout` after
/// the start counts as timed out (and a release by digest gets its follow-up, see
/// `Request::follow_up`).
pub(crate) async fn all(
    nodes: &[Node],
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> Tally {
    let (tally, _) = gather(nodes, request, timeout, shuffle, false).await;
    tally
}

/// Like [`all`], but returns as soon as the verdict cannot change (see `Tally::decided`). Nodes
/// still pending are marked as not awaited; their calls go on in the background until they answer
/// or the timeout passes, and the returned `Settle` resolves when they are done.
pub(crate) async fn until_decided(
    nodes: &[Node],
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> (Tally, Option<Settle>) {
    gather(nodes, request, timeout, shuffle, true).await
}

async fn gather(
    nodes: &[Node],
    request: Request,
    timeout: Duration,
    shuffle: bool,
    until_decided: bool,
) -> (Tally, Option<Settle>) {
    let request = Arc::new(request);
    let started = Instant::now();
    let deadline = started + timeout;
    let mut timer = pin!(sleep_until(deadline.into()));
    let mut calls = fan_out(nodes, &request, shuffle);
    let mut tally = Tally::new(nodes.len());
    tally.track_nodes = request.is_fenced();
    let timed_out = poll_fn(|cx| {
        // Each wake-up takes every reply that is in, even after the verdict is decided: those
        // cost nothing to take, and each is one call less to finish in the background.
        let record = |node, reply: Reply| {
            tracing::trace!(
                op = request.op_name(),
                node,
                ok = reply.is_ok(),
                error = reply.as_ref().err().map(tracing::field::display),
                latency_us = started.elapsed().as_micros() as u64,
                "node replied"
            );
            tally.add(node, reply);
        };
        match calls.poll_replies(cx, record) {
            Poll::Ready(()) => Poll::Ready(false),
            Poll::Pending if until_decided && tally.decided() => Poll::Ready(false),
            Poll::Pending => timer.as_mut().poll(cx).map(|()| true),
        }
    })
    .await;
    if timed_out {
        // The calls still pending are dropped; a release by digest gets its follow-up.
        for (node, call) in calls.pending.drain(..) {
            drop(call);
            request.follow_up(nodes[node].connection.clone());
            tracing::trace!(op = request.op_name(), node, ?timeout, "node timed out");
            tally.add(node, Err(NodeErrorKind::Timeout(timeout)));
        }
    }
    tally.close(calls.pending.iter().map(|(node, _)| *node));
    let settle = (!calls.pending.is_empty()).then(|| settle_in_background(calls, deadline));
    (tally, settle)
}

/// Drives calls nobody waits for any more to completion (or to `deadline`) in a background task.
fn settle_in_background<F>(mut calls: Calls<F>, deadline: Instant) -> Settle
where
    F: Future<Output = Reply> + Send + 'static,
{
    let task = tokio::spawn(async move {
        let mut timer = pin!(sleep_until(deadline.into()));
        poll_fn(|cx| match calls.poll_replies(cx, |_, _| {}) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => timer.as_mut().poll(cx),
        })
        .await;
    });
    async move {
        // A panicked or cancelled task has nothing left in flight either way.
        let _ = task.await;
    }
    .boxed()
    .shared()
}

/// Releases `value` on every node, after `settle` (calls of the same value still in flight).
pub(crate) fn release(
    nodes: Arc<[Node]>,
    name: Arc<str>,
    value: Arc<str>,
    plan: &Plan,
    settle: Option<Settle>,
    delivery: Delivery,
) -> impl Future<Output = Tally> + Send + 'static {
    // The expiry travels with the request: it bounds how long a follow-up to a stalled node may
    // wait (after the expiry the key is gone anyway).
    let (timeout, millis, notify) = (plan.node_timeout, plan.millis, plan.wake_on_release);
    async move {
        if let Some(settle) = settle {
            settle.await;
        }
        let request =
            Request::with_delivery(Op::Release { notify }, &name, &value, millis, delivery);
        all(&nodes, request, timeout, false).await
    }
}

/// Best-effort release in a background task: for handles dropped without `unlock()` and for
/// cancelled acquisitions. Without a tokio runtime nothing is sent and the keys expire on their own.
pub(crate) fn spawn_release(
    nodes: Arc<[Node]>,
    name: Arc<str>,
    value: Arc<str>,
    plan: &Plan,
    settle: Option<Settle>,
) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(release(nodes, name, value, plan, settle, Delivery::Inline));
    }
}
