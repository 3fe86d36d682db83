//! Waiting with wake-up on release: the retry delay, cut short when release notices say the lock
//! is free (see `line` for when a waiter is woken, and `hub` for where notices come from).

use std::time::{Duration, Instant};

use crate::hub::Place;
use crate::mutex::Mutex;
use crate::node;
use crate::settings::Plan;

/// One `lock()` call's waiting by release notices.
pub(crate) struct NoticeWait<'a> {
    mutex: &'a Mutex,
    plan: &'a Plan,
    /// This call's place in its client's line for the name, from its first wait on.
    place: Option<Place>,
    /// Whether the last wait ended with a wake-up, so the attempt after it tells the line how
    /// woken waiters fare.
    woken: bool,
}

impl<'a> NoticeWait<'a> {
    pub(crate) fn new(mutex: &'a Mutex, plan: &'a Plan) -> NoticeWait<'a> {
        NoticeWait {
            mutex,
            plan,
            place: None,
            woken: false,
        }
    }

    /// If others of this client already wait for the name, the lock is held, or is being handed
    /// to one of them: queue behind them rather than send an attempt bound to fail, and rather
    /// than barge ahead of them. The retry delay still bounds the wait.
    pub(crate) async fn before_first_attempt(&mut self) {
        let Some(hub) = self.mutex.redlock().running_hub() else {
            return;
        };
        if !hub.has_waiters(self.mutex.name_arc()) {
            return;
        }
        let (place, _) = hub.join(self.mutex.name_arc(), Instant::now());
        let delay = self.plan.retry_delay_after(1);
        self.woken = wait_in_line(self.mutex, self.plan, &place, delay).await;
        self.place = Some(place);
    }

    pub(crate) fn plan(&self) -> &'a Plan {
        self.plan
    }

    pub(crate) fn attempt_starts(&mut self, started: Instant) {
        if let Some(place) = &self.place {
            place.rearm(started);
        }
    }

    pub(crate) fn attempt_ended(&mut self, won: bool) {
        if let (Some(place), true) = (&self.place, self.woken) {
            place.woken_attempt(won);
        }
    }

    /// Waits for a wake-up or the retry delay after attempt `failed`, which began at `started`.
    ///
    /// The first wait of a call joins the line. If nobody of this client listened for the name
    /// yet, a release between the failed attempt and the subscription taking effect went unheard:
    /// one more attempt, once the nodes confirmed the subscription, covers that gap.
    pub(crate) async fn wait(&mut self, failed: u32, started: Instant) {
        // Drawn before any await: the thread-local generator must not live across it.
        let delay = self.plan.retry_delay_after(failed);
        self.woken = false;
        if self.place.is_none() {
            let Some(hub) = self.mutex.redlock().hub() else {
                // No listeners (connections the caller built): poll.
                tokio::time::sleep(delay).await;
                return;
            };
            let (place, subscribing) = hub.join(self.mutex.name_arc(), started);
            self.place = Some(place);
            if let Some(subscribing) = subscribing {
                subscribing.confirmed(self.plan.node_timeout).await;
                return;
            }
        }
        if let Some(place) = &self.place {
            self.woken = wait_in_line(self.mutex, self.plan, place, delay).await;
        }
    }

    /// The call got the lock: it leaves the line for good, keeping the wake-up it used.
    pub(crate) fn acquired(self) {
        if let Some(place) = self.place {
            place.done();
        }
    }
}

/// Waits for a wake-up by release notices, or `delay` at most; `true` if woken.
///
/// A woken waiter first pauses for its name's current spread (see `line`). A pause means that
/// woken waiters of several clients have been racing for the name: after it, one node is asked
/// whether the name is still free (one command, where an attempt costs one per node), and if
/// another client's waiter got there first, this one goes back to waiting.
async fn wait_in_line(mutex: &Mutex, plan: &Plan, place: &Place, delay: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return false,
            () = place.woken() => {}
        }
        let woken_at = Instant::now();
        let (pause, node) = place.pause();
        tracing::trace!(?pause, "woken by a release");
        // Even a zero sleep waits for the timer's next tick (1 ms).
        if pause.is_zero() {
            return true;
        }
        tokio::time::sleep(pause).await;
        let connection = mutex.redlock().nodes()[node].connection.clone();
        match node::in_use(connection, mutex.target(), plan.node_timeout).await {
            Some(true) => {
                tracing::trace!(node, "taken again before the attempt");
                place.wait_again(woken_at);
            }
            // Free, or no answer: the attempt will tell.
            _ => return true,
        }
    }
}
