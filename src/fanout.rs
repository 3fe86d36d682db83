//! Sending one request to every node at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use rand::seq::SliceRandom;

use crate::error::NodeErrorKind;
use crate::node::{Delivery, Node, Op, Request, call};
use crate::quorum::Tally;
use crate::settings::Plan;

/// Resolves once node calls that outlived their operation (fail-fast) have finished.
///
/// Unlock and extend wait on it first, so no SET of the same value lands after them.
pub(crate) type Settle = Shared<BoxFuture<'static, ()>>;

/// Starts `request` on every node concurrently, each call bounded by `timeout`.
///
/// With `shuffle`, the calls are issued in a random order (node indices in replies are unchanged).
pub(crate) fn fan_out(
    nodes: &[Node],
    request: &Arc<Request>,
    timeout: Duration,
    shuffle: bool,
) -> FuturesUnordered<impl Future<Output = (usize, Result<(), NodeErrorKind>)> + Send + 'static> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    if shuffle {
        order.shuffle(&mut rand::rng());
    }
    order
        .into_iter()
        .map(|index| {
            call(
                nodes[index].connection.clone(),
                index,
                Arc::clone(request),
                timeout,
            )
        })
        .collect()
}

/// Sends `request` to every node and waits for every reply (each bounded by `timeout`).
pub(crate) async fn all(
    nodes: &[Node],
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> Tally {
    let mut calls = fan_out(nodes, &Arc::new(request), timeout, shuffle);
    let mut tally = Tally::new(nodes.len());
    while let Some((node, reply)) = calls.next().await {
        tally.add(node, reply);
    }
    tally.close([]);
    tally
}

/// Drives calls nobody waits for any more to completion in a background task.
pub(crate) fn settle_in_background<S>(calls: S) -> Settle
where
    S: futures::Stream + Send + Unpin + 'static,
{
    let task = tokio::spawn(calls.for_each(|_| async {}));
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
    let (timeout, millis) = (plan.node_timeout, plan.millis);
    async move {
        if let Some(settle) = settle {
            settle.await;
        }
        let request = Request::with_delivery(Op::Release, &name, &value, millis, delivery);
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
