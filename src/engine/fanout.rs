//! Sending one request to every node at once, all calls bounded by one deadline.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, join_all};
use rand::seq::SliceRandom;
use tokio::time::{sleep_until, timeout_at};

use crate::engine::metrics;
use crate::engine::request::{Delivery, Op, Request, call};
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::engine::target::Target;
use crate::error::{NodeErrorKind, name_failures};
use crate::nodes::connection::NodeConnection;
use crate::nodes::{Node, address};

/// One node's answer.
type Reply = Result<u64, NodeErrorKind>;

/// One node call of a fail-fast fan-out, whose calls may outlive it: boxed, owning its connection
/// and request, so a lock can keep it without naming its type.
type Call = BoxFuture<'static, Reply>;

/// The calls of one fail-fast request, one per node, polled together by whoever awaits them: no
/// task and no waker per call, and one timer for all of them.
struct Calls {
    /// The calls that have not answered yet, with their node index.
    pending: Vec<(usize, Call)>,
}

impl Calls {
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
fn fan_out(nodes: &[Node], request: &Arc<Request>, shuffle: bool) -> Calls {
    let mut pending: Vec<(usize, Call)> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let call: Call = Box::pin(call(node.connection.clone(), Arc::clone(request)));
            (index, call)
        })
        .collect();
    if shuffle {
        pending.shuffle(&mut rand::rng());
    }
    Calls { pending }
}

/// One node's part of a fan-out that waits for every reply: its connection, and its reply once in.
struct Slot {
    node: usize,
    connection: NodeConnection,
    reply: Option<Reply>,
}

/// Sends `request` to every node and waits for every reply; a call still pending `timeout` after
/// the start counts as timed out (and a release by digest gets its follow-up, see
/// `Request::follow_up`).
///
/// Nothing here outlives the call, so the node calls borrow the request and their slot, and all
/// of them live in the one allocation of `join_all` (rather than a box each, as calls that may
/// outlive their fan-out need, see [`until_decided`]). Beyond 30 nodes `join_all` switches to a
/// `FuturesOrdered`, with an allocation per call; the order of issue and the timeout hold alike.
pub(crate) async fn all(
    nodes: &[Node],
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> Tally {
    let started = Instant::now();
    let replies = metrics::NodeReplies::sent(started);
    let mut slots: Vec<Slot> = nodes
        .iter()
        .enumerate()
        .map(|(node, n)| Slot {
            node,
            connection: n.connection.clone(),
            reply: None,
        })
        .collect();
    if shuffle {
        slots.shuffle(&mut rand::rng());
    }
    let (request, replies) = (&request, &replies);
    // Polled in slot order, so the requests are issued in that order.
    let calls = join_all(slots.iter_mut().map(|slot| async move {
        let reply = call(&mut slot.connection, request).await;
        trace_reply(request, replies, slot.node, &reply, started);
        slot.reply = Some(reply);
    }));
    // A timeout drops the calls still pending, which stops them (see `Stragglers`). Past the
    // deadline, a reply the task had no cooperative budget left to read counts as timed out: the
    // cautious side (one "ours" fewer), and only for a task that polls much else at once.
    let timed_out = timeout_at((started + timeout).into(), calls).await.is_err();
    debug_assert!(timed_out || slots.iter().all(|slot| slot.reply.is_some()));
    let mut tally = request.tally(nodes.len());
    tally.track_nodes = request.tracks_nodes();
    for slot in slots {
        let reply = match slot.reply {
            Some(reply) => reply,
            None => timed_out_reply(request, replies, slot.node, slot.connection, timeout),
        };
        tally.add(slot.node, reply);
    }
    tally.close([]);
    name_failures(&mut tally.failures, &|node| address(nodes, node));
    tally
}

/// The reply of a node whose call was dropped at the deadline: a release by digest gets its
/// follow-up on the node's connection.
fn timed_out_reply(
    request: &Request,
    replies: &metrics::NodeReplies,
    node: usize,
    connection: NodeConnection,
    timeout: Duration,
) -> Reply {
    request.follow_up(connection);
    tracing::trace!(op = request.op_name(), node, ?timeout, "node timed out");
    replies.timed_out(node);
    Err(NodeErrorKind::Timeout(timeout))
}

/// Traces and records a reply.
fn trace_reply(
    request: &Request,
    replies: &metrics::NodeReplies,
    node: usize,
    reply: &Reply,
    started: Instant,
) {
    replies.reply(node, reply);
    tracing::trace!(
        op = request.op_name(),
        node,
        ok = reply.is_ok(),
        error = reply.as_ref().err().map(tracing::field::display),
        latency_us = started.elapsed().as_micros() as u64,
        "node replied"
    );
}

/// Like [`all`], but returns as soon as the verdict cannot change (see `Tally::decided`). Nodes
/// still pending are marked as not awaited, and their calls are returned, still in flight.
pub(crate) async fn until_decided(
    nodes: &Arc<[Node]>,
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> (Tally, Option<InFlight>) {
    gather(nodes, request, timeout, shuffle, Tally::decided).await
}

/// Calls that outlived the verdict of their fan-out. Dropping them stops them: see [`Stragglers`]
/// for what that means for requests already sent.
pub(crate) struct InFlight {
    calls: Calls,
    /// The end of their node timeout.
    deadline: Instant,
    /// For the follow-ups of calls that time out.
    request: Arc<Request>,
    nodes: Arc<[Node]>,
}

impl InFlight {
    /// Goes on with the calls in a background task, until they answer or time out.
    pub(crate) fn finish_in_background(self) -> Stragglers {
        Stragglers::start(self)
    }

    /// Drops the calls still pending at the deadline; a release by digest gets its follow-up.
    fn time_out(self) {
        for (node, call) in self.calls.pending {
            drop(call);
            self.request.follow_up(self.nodes[node].connection.clone());
        }
    }
}

/// Sends `request` to every node and waits for the replies until they are all in, `timeout` has
/// passed, or `decided` says the verdict is known; returns the calls still pending in that case.
async fn gather(
    nodes: &Arc<[Node]>,
    request: Request,
    timeout: Duration,
    shuffle: bool,
    decided: fn(&Tally) -> bool,
) -> (Tally, Option<InFlight>) {
    let request = Arc::new(request);
    let started = Instant::now();
    let replies = metrics::NodeReplies::sent(started);
    let deadline = started + timeout;
    let mut timer = pin!(sleep_until(deadline.into()));
    let mut calls = fan_out(nodes, &request, shuffle);
    let mut tally = request.tally(nodes.len());
    tally.track_nodes = request.tracks_nodes();
    let timed_out = poll_fn(|cx| {
        // Each wake-up takes every reply that is in, even after the verdict is decided: those
        // cost nothing to take, and each is one call less to finish in the background.
        let record = |node, reply: Reply| {
            trace_reply(&request, &replies, node, &reply, started);
            tally.add(node, reply);
        };
        match calls.poll_replies(cx, record) {
            Poll::Ready(()) => Poll::Ready(false),
            Poll::Pending if decided(&tally) => Poll::Ready(false),
            Poll::Pending => timer.as_mut().poll(cx).map(|()| true),
        }
    })
    .await;
    if timed_out {
        // The calls still pending are dropped; a release by digest gets its follow-up.
        for (node, call) in calls.pending.drain(..) {
            drop(call);
            let connection = nodes[node].connection.clone();
            let reply = timed_out_reply(&request, &replies, node, connection, timeout);
            tally.add(node, reply);
        }
    }
    tally.close(calls.pending.iter().map(|(node, _)| *node));
    name_failures(&mut tally.failures, &|node| address(nodes, node));
    let in_flight = (!calls.pending.is_empty()).then(|| InFlight {
        calls,
        deadline,
        request,
        nodes: Arc::clone(nodes),
    });
    (tally, in_flight)
}

/// Calls that were still in flight when the verdict of their fan-out came (fail-fast), driven to
/// their replies (or to the node timeout) by a small background task: an acquire's, so the key
/// lands on as many nodes as possible, and an unlock's, so the key is released on as many.
///
/// Before the next operation on the same value (an acquire's release, or an extend or unlock after
/// a failed unlock), [`cancel`](Stragglers::cancel) takes the calls away from that task and drops
/// them. Nothing waits for them; the order is kept by the connections:
///
/// - Each node has one connection at a time (a `MultiplexedConnection`: redmutex's own, see
///   `reconnect`, or the caller's, or one held by a `ConnectionManager`), which hands requests to a
///   single writer task through a FIFO channel in the order they were handed in, and Redis
///   executes one connection's commands in the order received. A call
///   hands its request in while it is being polled (under the lock `cancel` takes), and is never
///   polled after `cancel`; so a request handed in at all was handed in before the next
///   operation's, and runs before it.
/// - A dropped call whose request was not handed in yet (waiting for the connection to be made, or
///   for room in the channel) never sends it; one handed in but not yet written is skipped by the
///   writer (its reply has nobody to go to). Neither can land late.
/// - No request is ever re-sent on a new connection. A connection is replaced after it failed (a
///   request caught in the failure ends with an error, and the next operation goes out on the new
///   connection, as after a call that ended with an error while it was awaited), or, for
///   redmutex's own, after it went silent while a fresh connection to the same node answered
///   `PING` and its own `PING` stayed unanswered. A node that is merely stalled (SIGSTOP, a long
///   script) cannot answer the fresh connection, so it keeps its connection and, when it resumes,
///   runs what was queued there in order (tests/suite/recovery.rs checks both; with the connection
///   replaced after a run of timeouts alone, its paused-node test finds a late SET's key left).
/// - What is left: a silent connection whose packets the network still holds (TCP retransmitting
///   after an outage that let a fresh connection through) may deliver them after its replacement,
///   so one of its requests may run after a newer one. The harm is bounded: a late SET leaves a key
///   with a value nobody holds on that one node until it expires (acquiring never counts a key
///   that exists, so no holder gains a node by it, and the node is out for that name for at most
///   one expiry); a late extend, raise or release acts only where its own value holds, which a
///   later operation of the same value either finds done or undoes.
///
/// The same holds for calls that time out: they are dropped while their requests may still be
/// queued, and whatever follows on that connection comes after them.
pub(crate) struct Stragglers {
    in_flight: Arc<std::sync::Mutex<Option<InFlight>>>,
}

impl Stragglers {
    fn start(in_flight: InFlight) -> Stragglers {
        let deadline = in_flight.deadline;
        let in_flight = Arc::new(std::sync::Mutex::new(Some(in_flight)));
        let shared = Arc::clone(&in_flight);
        tokio::spawn(async move {
            let mut timer = pin!(sleep_until(deadline.into()));
            poll_fn(|cx| {
                let mut slot = lock(&shared);
                let Some(pending) = slot.as_mut() else {
                    return Poll::Ready(()); // cancelled
                };
                if pending.calls.poll_replies(cx, |_, _| {}).is_ready() {
                    *slot = None;
                    return Poll::Ready(());
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        if let Some(pending) = slot.take() {
                            pending.time_out();
                        }
                        Poll::Ready(())
                    }
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
        });
        Stragglers { in_flight }
    }

    /// Drops the calls still in flight: after this, none of them can hand in its request. Merely
    /// dropping `Stragglers` lets them finish.
    pub(crate) fn cancel(self) {
        let in_flight = lock(&self.in_flight).take();
        drop(in_flight);
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Dropping or polling calls cannot leave the option half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Releases `value` on every node with `op` (one of `Plan::release_op`).
pub(crate) fn release(
    nodes: Arc<[Node]>,
    target: Arc<dyn Target>,
    value: Arc<str>,
    (plan, op): (&Plan, Op),
    delivery: Delivery,
) -> impl Future<Output = Tally> + Send + 'static {
    // The expiry travels with the request: it bounds how long a follow-up to a stalled node may
    // wait (after the expiry the key is gone anyway).
    let (timeout, millis) = (plan.node_timeout, plan.millis);
    async move {
        let request = Request::with_delivery(op, &target, &value, millis, delivery);
        all(&nodes, request, timeout, false).await
    }
}

/// Like [`release`] by digest, but returns as soon as the verdict cannot change (see
/// `Tally::release_decided`). The calls still in flight finish in the background.
pub(crate) async fn release_until_decided(
    nodes: &Arc<[Node]>,
    target: &Arc<dyn Target>,
    value: &Arc<str>,
    (plan, op): (&Plan, Op),
) -> (Tally, Option<Stragglers>) {
    let request = Request::with_delivery(op, target, value, plan.millis, Delivery::ByDigest);
    let decided = Tally::release_decided;
    let (tally, in_flight) = gather(nodes, request, plan.node_timeout, false, decided).await;
    (tally, in_flight.map(InFlight::finish_in_background))
}

/// Like [`all`] for an extend, but returns as soon as the verdict cannot change: an extend's
/// verdict reads like a release's (taken, extended, expired or no quorum), so it is decided when a
/// release's would be (`Tally::release_decided`). The calls still in flight finish in the
/// background.
pub(crate) async fn extend_until_decided(
    nodes: &Arc<[Node]>,
    request: Request,
    timeout: Duration,
    shuffle: bool,
) -> (Tally, Option<Stragglers>) {
    let decided = Tally::release_decided;
    let (tally, in_flight) = gather(nodes, request, timeout, shuffle, decided).await;
    (tally, in_flight.map(InFlight::finish_in_background))
}

/// Best-effort release in a background task: for handles dropped without `unlock()` and for
/// cancelled acquisitions. On `runtime` if given (see `Held::release_on`), else on the current
/// one; without either nothing is sent and the keys expire on their own.
pub(crate) fn spawn_release(
    runtime: Option<tokio::runtime::Handle>,
    nodes: Arc<[Node]>,
    target: Arc<dyn Target>,
    value: Arc<str>,
    (plan, op): (&Plan, Op),
) {
    if let Some(runtime) = runtime.or_else(|| tokio::runtime::Handle::try_current().ok()) {
        runtime.spawn(release(nodes, target, value, (plan, op), Delivery::Inline));
    }
}
