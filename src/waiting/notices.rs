//! Waiting with wake-up on release: the retry delay, cut short when release notices say the lock
//! is free (see `hub::line` for when a waiter is woken, and `hub` for where notices come from).

use std::time::{Duration, Instant};

use crate::engine::delay::FOREVER;
use crate::engine::metrics;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::nodes::probe::in_use;
use crate::waiting::hub::Place;
use crate::waiting::listeners::Listeners;

/// One `lock()` call's waiting by release notices.
pub(crate) struct NoticeWait<'a> {
    resource: &'a Resource,
    listeners: &'a Listeners,
    plan: &'a Plan,
    /// This call's places in its client's lines, one per name of the lock (in the order of
    /// `Target::names`), from its first wait on. A release of any name wakes the call: for a
    /// multi-name lock, the one name that was held may be the one released.
    places: Vec<Place>,
    /// The place whose wake-up ended the last wait, so the attempt after it tells that line how
    /// woken waiters fare.
    woken: Option<usize>,
}

impl<'a> NoticeWait<'a> {
    pub(crate) fn new(
        resource: &'a Resource,
        listeners: &'a Listeners,
        plan: &'a Plan,
    ) -> NoticeWait<'a> {
        NoticeWait {
            resource,
            listeners,
            plan,
            places: Vec::new(),
            woken: None,
        }
    }

    /// If others of this client already wait for a name of the lock, it is held, or is being
    /// handed to one of them: queue behind them rather than send an attempt bound to fail, and
    /// rather than barge ahead of them. The retry delay still bounds the wait.
    pub(crate) async fn before_first_attempt(&mut self) {
        let Some(hub) = self.listeners.running_hub() else {
            return;
        };
        let names = self.resource.target().names();
        if !names.iter().any(|name| hub.has_waiters(name)) {
            return;
        }
        let now = Instant::now();
        self.places = names.iter().map(|name| hub.join(name, now).0).collect();
        let delay = self.plan.retry_delay_after(1);
        self.woken = wait_in_line(self.resource, self.plan, &self.places, delay).await;
    }

    pub(crate) fn plan(&self) -> &'a Plan {
        self.plan
    }

    pub(crate) fn attempt_starts(&mut self, started: Instant) {
        for place in &self.places {
            place.rearm(started);
        }
    }

    pub(crate) fn attempt_ended(&mut self, won: bool) {
        if let Some(place) = self.woken.and_then(|index| self.places.get(index)) {
            place.woken_attempt(won);
        }
    }

    /// Waits for a wake-up or the retry delay after attempt `failed`, which began at `started`.
    ///
    /// The first wait of a call joins the lines. If nobody of this client listened for a name
    /// yet, a release between the failed attempt and the subscription taking effect went unheard:
    /// one more attempt, once the nodes confirmed the subscriptions, covers that gap.
    pub(crate) async fn wait(&mut self, failed: u32, started: Instant) {
        // Drawn before any await: the thread-local generator must not live across it.
        let delay = self.plan.retry_delay_after(failed);
        self.woken = None;
        if self.places.is_empty() {
            let Some(hub) = self.listeners.hub() else {
                // No listeners (connections the caller built): poll.
                tokio::time::sleep(delay).await;
                return;
            };
            let mut subscriptions = Vec::new();
            for name in self.resource.target().names() {
                let (place, subscribing) = hub.join(name, started);
                self.places.push(place);
                subscriptions.extend(subscribing);
            }
            if !subscriptions.is_empty() {
                let timeout = self.plan.node_timeout;
                futures::future::join_all(subscriptions.into_iter().map(|s| s.confirmed(timeout)))
                    .await;
                return;
            }
        }
        self.woken = wait_in_line(self.resource, self.plan, &self.places, delay).await;
    }

    /// The call got the lock: it leaves the lines for good, keeping the wake-up it used.
    pub(crate) fn acquired(self) {
        if self.woken.is_some() {
            metrics::handoff(metrics::Handoff::Wake);
        }
        for place in self.places {
            place.done();
        }
    }
}

/// Waits for a wake-up by release notices in any of `places`, or `delay` at most; the index of
/// the place woken, if any.
///
/// A woken waiter first pauses for its name's current spread (see `hub::line`). A pause means that
/// woken waiters of several clients have been racing for the name: after it, one node is asked
/// whether the name is still free (one command, where an attempt costs one per node), and if
/// another client's waiter got there first, this one goes back to waiting. Readers skip that
/// look: the name's key is there while readers hold, and a reader may still get in.
async fn wait_in_line(
    resource: &Resource,
    plan: &Plan,
    places: &[Place],
    delay: Duration,
) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + delay.min(FOREVER);
    loop {
        let index = tokio::select! {
            () = tokio::time::sleep_until(deadline) => return None,
            index = woken(places) => index,
        };
        let place = &places[index];
        let woken_at = Instant::now();
        let (pause, node) = place.pause();
        tracing::trace!(?pause, "woken by a release");
        // Even a zero sleep waits for the timer's next tick (1 ms). Readers skip the look: the
        // name's key is there while readers hold, and a reader may still get in.
        let name = &resource.target().names()[index];
        let Some(probe) = resource.target().probe(name).filter(|_| !pause.is_zero()) else {
            return Some(index);
        };
        tokio::time::sleep(pause).await;
        let connection = resource.nodes()[node].connection.clone();
        match in_use(connection, probe, plan.node_timeout).await {
            Some(true) => {
                tracing::trace!(node, "taken again before the attempt");
                place.wait_again(woken_at);
            }
            // Free, or no answer: the attempt will tell.
            _ => return Some(index),
        }
    }
}

/// Resolves once one of `places` is woken, with its index.
async fn woken(places: &[Place]) -> usize {
    match places {
        // Not reached (a lock has names); waiting for the delay is the right thing all the same.
        [] => std::future::pending().await,
        [place] => {
            place.woken().await;
            0
        }
        _ => {
            let wakes = places.iter().map(|place| Box::pin(place.woken()));
            futures::future::select_all(wakes).await.1
        }
    }
}
