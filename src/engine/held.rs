//! A held lock, as the engine keeps it: its value, token and validity, the calls of its value
//! still in flight, and the extend and release every primitive's lock shares. The public
//! [`Lock`](crate::Lock) is a shared handle on one.

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use crate::engine::fanout::{self, Stragglers};
use crate::engine::metrics::{self, End, Hold, Lost};
use crate::engine::quorum::{deadline, validity, whole_millis};
use crate::engine::request::{Delivery, Op, Request};
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::value::check_value;
use crate::error::{Error, NodeError};
use crate::nodes::Node;

/// A lock held on a quorum of nodes. Dropped without a release, it releases in the background on
/// the current tokio runtime, or the one it was told (best effort, never blocking).
pub(crate) struct Held {
    resource: Resource,
    value: Arc<str>,
    /// The fencing token, when the primitive has fencing on.
    token: Option<u64>,
    /// Its `lock()` call had to wait for it: others likely wait too, so its release keeps the
    /// waiters' marks (see `Plan::release_op`).
    waited: bool,
    state: std::sync::Mutex<State>,
    /// Held by an extend from its request to the take-back of its repairs: extends of one lock
    /// (a keep-alive's and a clone's) run one at a time, so that one's take-back never deletes
    /// a repaired key that another counted as ours.
    extending: tokio::sync::Mutex<()>,
}

struct State {
    valid_until: Instant,
    unlocked: bool,
    /// Calls of this lock's value still in flight (fail-fast): of the acquire, or of an unlock
    /// that failed. Cancelled before the next extend or release.
    stragglers: Option<Stragglers>,
    /// Counted as held (metrics) until it ends, once, by whichever path ends it.
    hold: Hold,
    /// The runtime a drop releases on, when not the current one (the blocking API's).
    release_on: Option<tokio::runtime::Handle>,
    /// The nodes that did not hold our value at the last successful acquire or extend, with why
    /// (see `Lock::failing_nodes`).
    failing: Vec<NodeError>,
    /// Left to expire on the nodes (see `Lock::leave`): no release when dropped.
    left: bool,
}

impl Held {
    pub(crate) fn new(
        resource: Resource,
        value: Arc<str>,
        valid_until: Instant,
        stragglers: Option<Stragglers>,
        token: Option<u64>,
        failing: Vec<NodeError>,
    ) -> Held {
        let hold = Hold::start(&resource.labels());
        Held {
            resource,
            value,
            token,
            waited: false,
            state: std::sync::Mutex::new(State {
                valid_until,
                unlocked: false,
                stragglers,
                hold,
                release_on: None,
                failing,
                left: false,
            }),
            extending: tokio::sync::Mutex::new(()),
        }
    }

    /// The same lock, whose `lock()` call had to wait for it.
    pub(crate) fn after_waiting(mut self) -> Held {
        self.waited = true;
        self
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    /// Makes a drop release on `runtime` rather than on the dropping thread's current runtime:
    /// for the blocking API's locks, whose callers have none (or one that may never run the
    /// release).
    #[cfg(feature = "blocking")]
    pub(crate) fn release_on(&self, runtime: tokio::runtime::Handle) {
        self.state().release_on = Some(runtime);
    }

    /// See `Lock::leave`.
    pub(crate) fn leave(&self) {
        self.state().left = true;
    }

    /// See `Lock::failing_nodes`.
    pub(crate) fn failing(&self) -> Vec<NodeError> {
        self.state().failing.clone()
    }

    pub(crate) fn value(&self) -> &str {
        &self.value
    }

    pub(crate) fn token(&self) -> Option<u64> {
        self.token
    }

    /// What the lock covers, and its settings.
    pub(crate) fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The first name, for traces.
    fn name(&self) -> &str {
        self.resource.name()
    }

    /// Compare-and-extend on every node; moves the validity on success (see `Lock::extend`).
    ///
    /// While the lock is still valid, the extend also repairs: where a node lost the key (a
    /// restart without persistence, a failed-over cluster member), its script sets the key again
    /// with our value, `NX`, for the expiry (`Op::ExtendAndRepair`), so that the lock rests on as
    /// many nodes as before, and one more failure does not lose it. Why that never lets a second
    /// holder in, nor brings back a lock that was lost:
    ///
    /// - A repaired node never counts towards this extend's verdict: it counts as one where the
    ///   key is gone. The verdict is the compare-and-extend's alone, as without repairs.
    /// - A repair is asked for only while `valid_until` has not passed: by the lock's own
    ///   guarantee nobody else holds it then, so our key set there is a key of the holder,
    ///   as one extended there would be. `SET NX` sets nothing where another value is (that node
    ///   answers "taken" as before); where nothing is, our key can only refuse others on that
    ///   node, and only while we hold a quorum anyway: from then on the node holds our value as
    ///   a node the extend reached does, and a later extend counts it as such.
    /// - If the verdict fails (the compare-and-extend holds on no quorum: the lock expired, was
    ///   taken, or too few nodes answered), every key the repair set is deleted again
    ///   (compare-and-delete of our value on those nodes alone) before this returns. So an extend
    ///   never re-creates a lock, even one sent late (a process paused between the check of
    ///   `valid_until` and the send). What a dropped extend, or a fail-fast extend's calls cut
    ///   off after a failed verdict, repaired stays until the unlock or its expiry: set while the
    ///   lock was valid, it is a key of the holder (above).
    ///
    /// Extends of one lock run one at a time: were they to overlap, one whose verdict failed could
    /// take back a key it repaired after another extend had counted that node as ours (the second
    /// saw our value there), leaving that one's quorum a node short.
    ///
    /// Readers and semaphore permits are not repaired (their targets send their plain extend):
    /// their entries live in a set shared with other holders, scored on the node's clock, and
    /// putting one back is what their acquire decides (a permit needs room among the permits,
    /// a reader needs no writer and no writer waiting), not a compare-and-set of one key.
    pub(crate) async fn extend(&self) -> Result<(), Error> {
        let plan = self.prepare()?;
        let _one_at_a_time = self.extending.lock().await;
        // A release of a failed unlock must not land after this extend.
        self.cancel_in_flight();
        let resource = &self.resource;
        let op = if Instant::now() < self.valid_until() {
            Op::ExtendAndRepair
        } else {
            Op::Extend
        };
        let request = Request::new(op, resource.target(), &self.value, plan.millis)
            .with_replica_acks(plan.replica_acks);
        let start = Instant::now();
        // Fail-fast: an extend that waited for the farthest node would cost what a lock that
        // waited for it does. The calls left in flight are cancelled before the next operation.
        let (mut tally, in_flight) = if plan.fail_fast {
            let (nodes, timeout) = (resource.nodes(), plan.node_timeout);
            fanout::extend_until_decided(nodes, request, timeout, plan.shuffle_nodes).await
        } else {
            let nodes = resource.nodes();
            let tally = fanout::all(nodes, request, plan.node_timeout, plan.shuffle_nodes).await;
            (tally, None)
        };
        let left = validity(plan.expiry, start.elapsed(), plan.drift_factor);
        let (ok, total) = (tally.ours, tally.total);
        let repaired = std::mem::take(&mut tally.repaired);
        let failing = if tally.holds() {
            tally.failing()
        } else {
            Vec::new()
        };
        let judged = tally.judge_extend(left);
        match &judged {
            Ok(left) => tracing::debug!(
                name = self.name(),
                ok,
                total,
                repaired = repaired.len(),
                valid_for_ms = whole_millis(*left),
                "extended"
            ),
            Err(error) => tracing::debug!(name = self.name(), ok, total, %error, "extend failed"),
        }
        let unlocked = {
            let mut state = self.state();
            // A clone unlocked while this extend was in flight: say so, rather than report the
            // keys that unlock deleted as an expired lock.
            if state.unlocked {
                if let Some(in_flight) = in_flight {
                    in_flight.cancel();
                }
                true
            } else {
                metrics::extension(&resource.labels(), &judged);
                match &judged {
                    Err(Error::Expired) => self.lost_with(&mut state, Lost::Expired),
                    Err(Error::Taken { .. }) => self.lost_with(&mut state, Lost::Taken),
                    _ => {}
                }
                // After success, the calls still in flight go on (the key lands on more nodes)
                // until an extend or unlock follows, which must come after them. After a failure
                // they are stopped now: nothing is to be gained by them.
                let previous = match (&judged, in_flight) {
                    (Ok(_), in_flight) => std::mem::replace(&mut state.stragglers, in_flight),
                    (Err(_), Some(in_flight)) => Some(in_flight),
                    (Err(_), None) => None,
                };
                if let Some(previous) = previous {
                    previous.cancel();
                }
                if let Ok(left) = &judged {
                    state.valid_until = deadline(start, *left);
                    state.failing = failing;
                }
                false
            }
        };
        if unlocked || judged.is_err() {
            // The extend does not hold (or the lock was let go meanwhile, and a repair may have
            // landed after the release): take back what it set.
            self.take_back(plan, &repaired).await;
        }
        if unlocked {
            return Err(Error::Unlocked);
        }
        judged.map(|_| ())
    }

    /// Deletes our value on the `repaired` nodes (compare-and-delete): the keys an extend set
    /// again, when the extend did not hold. On the same connections as the extend, after it, so
    /// the release runs after the repair on each node.
    async fn take_back(&self, plan: &Plan, repaired: &[usize]) {
        if repaired.is_empty() {
            return;
        }
        let all = self.resource.nodes();
        let nodes: Arc<[Node]> = repaired.iter().map(|&node| all[node].clone()).collect();
        let target = Arc::clone(self.resource.target());
        let tally = fanout::release(
            nodes,
            target,
            Arc::clone(&self.value),
            (plan, plan.release_op(self.waited)),
            Delivery::ByDigest,
        )
        .await;
        tracing::debug!(
            name = self.name(),
            repaired = repaired.len(),
            released = tally.ours,
            "took back the repairs of a failed extend"
        );
    }

    /// Compare-and-delete on every node (see `Lock::unlock`).
    pub(crate) async fn release(&self) -> Result<(), Error> {
        let plan = self.prepare()?;
        {
            let mut state = self.state();
            // From here on some nodes may have let go: whatever the outcome, this handle no longer
            // proves ownership, so its validity ends now.
            state.valid_until = state.valid_until.min(Instant::now());
        }
        // No SET of this lock may land after its release.
        self.cancel_in_flight();
        let resource = &self.resource;
        let (nodes, target, value) = (resource.nodes(), resource.target(), &self.value);
        let op = plan.release_op(self.waited);
        let (tally, in_flight) = if plan.fail_fast {
            fanout::release_until_decided(nodes, target, value, (plan, op)).await
        } else {
            let (nodes, target, value) = (Arc::clone(nodes), Arc::clone(target), Arc::clone(value));
            let delivery = Delivery::ByDigest;
            let tally = fanout::release(nodes, target, value, (plan, op), delivery).await;
            (tally, None)
        };
        let (ok, total) = (tally.ours, tally.total);
        let judged = tally.judge_release();
        match &judged {
            Ok(()) => tracing::debug!(name = self.name(), ok, total, "unlocked"),
            Err(error) => tracing::debug!(name = self.name(), ok, total, %error, "unlock failed"),
        }
        let mut state = self.state();
        // A clone unlocked while this call was in flight: the lock is released either way.
        if state.unlocked {
            return Err(Error::Unlocked);
        }
        if let Err(error) = judged {
            if matches!(error, Error::Expired) {
                state.hold.end(End::Expired);
            }
            // Not unlocked, so an extend or unlock may follow: the releases still in flight must
            // not land after it. (After success nothing of this value is sent again.)
            if let Some(previous) = std::mem::replace(&mut state.stragglers, in_flight) {
                previous.cancel();
            }
            return Err(error);
        }
        state.unlocked = true;
        state.hold.end(End::Unlocked);
        Ok(())
    }

    /// The lock is known lost while held (a keep-alive gave up): counted once, with the losses
    /// an extend found.
    pub(crate) fn lost(&self, reason: Lost) {
        self.lost_with(&mut self.state(), reason);
    }

    fn lost_with(&self, state: &mut State, reason: Lost) {
        metrics::lost(&self.resource.labels(), &mut state.hold, reason);
    }

    pub(crate) fn is_unlocked(&self) -> bool {
        self.state().unlocked
    }

    /// Stops the calls of this lock's value still in flight (fail-fast), so that none of them
    /// lands after the operation that follows (see `fanout::Stragglers`).
    fn cancel_in_flight(&self) {
        let stragglers = self.state().stragglers.take();
        if let Some(stragglers) = stragglers {
            stragglers.cancel();
        }
    }

    /// Checks everything that needs no I/O.
    fn prepare(&self) -> Result<&Plan, Error> {
        let plan = self.resource.plan()?;
        check_value(&self.value)?;
        if self.state().unlocked {
            return Err(Error::Unlocked);
        }
        Ok(plan)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain data updated in single assignments; a panic elsewhere cannot leave it
        // half-written, so a poisoned mutex is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        state.hold.drop_at(state.valid_until);
        if let Some(stragglers) = state.stragglers.take() {
            stragglers.cancel();
        }
        if state.unlocked || state.left || check_value(&self.value).is_err() {
            return;
        }
        let Ok(plan) = self.resource.plan() else {
            return;
        };
        fanout::spawn_release(
            state.release_on.take(),
            Arc::clone(self.resource.nodes()),
            Arc::clone(self.resource.target()),
            Arc::clone(&self.value),
            (plan, plan.release_op(self.waited)),
        );
    }
}
