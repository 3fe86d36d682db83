//! One attempt to acquire: the request on every node, its verdict, the fencing raise, and the
//! release of what a failed attempt set. Retrying and waiting between attempts are the waiting
//! layer's (`waiting::acquire`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::engine::fanout;
use crate::engine::held::Held;
use crate::engine::metrics;
use crate::engine::quorum::{deadline, validity, whole_millis};
use crate::engine::request::{Delivery, Op, Request};
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::error::{Error, NodeErrorKind};
use crate::nodes::Member;

/// The release of a failed attempt.
pub(crate) enum Cleanup {
    /// Done; `confirmed` if every node answered it.
    Done { confirmed: bool },
    /// Running in the background (fail-fast); yields whether every node answered it.
    Background(JoinHandle<bool>),
}

impl Cleanup {
    /// Whether every node answered the release, once it is done.
    pub(crate) async fn confirmed(self) -> bool {
        match self {
            Cleanup::Done { confirmed } => confirmed,
            Cleanup::Background(task) => task.await.unwrap_or(false),
        }
    }
}

/// Milliseconds from now until `until` (0 if passed), for traces.
pub(crate) fn millis_left(until: Instant) -> u64 {
    whole_millis(until.saturating_duration_since(Instant::now()))
}

/// One attempt sending `op`, begun at `start` (validity counts from it), after the waiters' marks
/// of the names where `marks` says how long they live (see `Request::with_marks`). On failure, the
/// error and the release of whatever the attempt set, unless `keeps` (shown the replies) says it
/// stays.
pub(crate) async fn attempt_once(
    resource: &Resource,
    plan: &Plan,
    (op, marks): (Op, Option<Duration>),
    value: &Arc<str>,
    start: Instant,
    keeps: impl FnOnce(&Tally) -> bool,
) -> Result<Held, (Error, Cleanup)> {
    let nodes = resource.nodes();
    let round = matches!(op, Op::Round { .. });
    // A failed attempt's keys are released keeping the waiters' marks: where there is one, others
    // wait, and its own call likely goes on waiting too (see `waiting::notices`).
    let request = Request::new(op, resource.target(), value, plan.millis)
        .with_replica_acks(plan.replica_acks)
        .with_release(plan.release_op(true))
        .with_marks(marks);
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
    // that found a line took the key there.) A Redis Cluster member's "taken" proves nothing: the
    // redis crate's cluster client sends a request again after an I/O error, and when the first
    // one ran and only its reply was lost, the second finds the name taken by our own value. Left
    // there, that value blocks the name until it expires, while nobody holds it
    // (`tests/suite/cluster_primitives.rs`,
    // `a_write_sent_again_after_a_reset_leaves_nothing_behind`). So a failed attempt with a
    // cluster member releases; a standalone server's connection sends nothing twice.
    let set_nothing = !round
        && tally.failures.len() == nodes.len()
        && tally.failures.iter().all(|f| {
            matches!(f.kind, NodeErrorKind::Taken)
                && nodes
                    .get(f.node)
                    .is_some_and(|node| node.connection.member() == Member::Standalone)
        });
    // Only a lock that holds keeps them (`Lock::failing_nodes`): a failed attempt clones nothing.
    let failing = if tally.holds() {
        tally.failing()
    } else {
        Vec::new()
    };
    let judged = tally.judge_acquire(left);
    // Fail-fast leaves the calls still in flight running after success: the key lands on more
    // nodes (a bare quorum turns one node loss into two holders). After failure they are dropped,
    // which stops them (see `Stragglers`), and released with the rest.
    let stragglers = match &judged {
        Ok(_) => in_flight.map(fanout::InFlight::finish_in_background),
        Err(_) => None,
    };
    let verdict = match judged {
        Ok(_) if plan.fencing => raise(resource, plan, value, start, token, &counted).await,
        other => other.map(|left| (left, None)),
    };

    metrics::attempt(&resource.labels(), &verdict);
    match verdict {
        Ok((left, token)) => {
            let held = Held::new(
                resource.clone(),
                Arc::clone(value),
                deadline(start, left),
                stragglers,
                token,
                failing,
            );
            Ok(held)
        }
        // The common failure under contention: no release to send.
        Err(error) if set_nothing || keep => Err((error, Cleanup::Done { confirmed: true })),
        Err(error) => {
            // No call of this attempt may land after its release.
            if let Some(stragglers) = stragglers {
                stragglers.cancel();
            }
            // By digest, as `unlock()` sends it: the call reads NOSCRIPT and falls back, and a
            // node that does not answer in time gets the script in full behind the digest
            // (`Request::follow_up`). In full every time, it cost a node a third more per lock
            // and release than the digest (the `default-inline` case of
            // benches/node_instructions.sh), on the path contention takes most.
            let release = fanout::release(
                Arc::clone(nodes),
                Arc::clone(resource.target()),
                Arc::clone(value),
                (plan, plan.release_op(true)),
                Delivery::ByDigest,
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
    resource: &Resource,
    plan: &Plan,
    value: &Arc<str>,
    start: Instant,
    token: u64,
    counted: &[usize],
) -> Result<(Duration, Option<u64>), Error> {
    let nodes = resource.nodes();
    let request = Request::new(Op::Raise(token), resource.target(), value, plan.millis)
        .with_replica_acks(plan.replica_acks);
    let tally = fanout::all(nodes, request, plan.node_timeout, plan.shuffle_nodes).await;
    // Only raises on the nodes whose counters went into the token count. A node whose acquire
    // reply came too late to be counted may hold our value and accept the raise; counting it lets
    // two holders end up with one token (found by the model check in tests/models/fencing.rs).
    // The raise round counts against the validity too.
    let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
    let left = tally.judge_raise(counted, left)?;
    Ok((left, Some(token)))
}
