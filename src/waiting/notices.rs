//! Waiting with wake-up on release: the retry delay, cut short when release notices say the lock
//! is free (see `hub::line` for when a waiter is woken, and `hub` for where notices come from).
//!
//! A release publishes a notice only where a waiter marked the name (see
//! `engine::target::waiters_key`): the release's `DEL` takes the mark with the key, and tells by
//! its count whether there was one, so that a release nobody waits for costs its node nothing
//! more than one more key in that `DEL`. A waiter marks the name in the same write as each of its
//! attempts, before the attempt's own command (`Request::with_marks`). So when the attempt finds
//! the name taken, the mark is on the node before the holder's release can run: the release sees
//! it, and notifies. The first attempt of a call sends no mark (most calls never wait): a call
//! that has to wait listens first, then makes a marked attempt at once, which closes the gap
//! between its first attempt and its mark.
//!
//! A release takes the mark with it, so one mark serves one release; every waiter woken by that
//! release marks again with its attempt, winner and losers alike. A mark outlives the wait it was
//! made for (the retry delay, and a node timeout), so that a waiter that polls keeps one in place,
//! and a mark left by a waiter that gave up costs at most one notice nobody hears.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::metrics;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::target::mark_commands;
use crate::nodes::probe::{each_node, in_use, send};
use crate::waiting::hub::Place;
use crate::waiting::listeners::Listeners;

use super::wait::until;

/// How much longer than its wait a waiter's mark lives: the time its next attempt may take to
/// reach the nodes beyond the node timeout, on a loaded machine.
const MARK_SLACK: Duration = Duration::from_millis(100);

/// One `lock()` call's waiting by release notices.
pub(crate) struct NoticeWait<'a> {
    resource: &'a Resource,
    listeners: &'a Listeners,
    plan: &'a Plan,
    /// No attempt starts after this (the maximum wait).
    deadline: Option<Instant>,
    /// This call's places in its client's lines, one per name of the lock (in the order of
    /// `Target::names`), from its first wait on. A release of any name wakes the call: for a
    /// multi-name lock, the one name that was held may be the one released.
    places: Vec<Place>,
    /// The place whose wake-up ended the last wait, so the attempt after it tells that line how
    /// woken waiters fare.
    woken: Option<usize>,
    /// The retry delay after the current attempt, drawn as it starts: its mark must outlive it.
    delay: Duration,
}

impl<'a> NoticeWait<'a> {
    pub(crate) fn new(
        resource: &'a Resource,
        listeners: &'a Listeners,
        plan: &'a Plan,
        deadline: Option<Instant>,
    ) -> NoticeWait<'a> {
        NoticeWait {
            resource,
            listeners,
            plan,
            deadline,
            places: Vec::new(),
            woken: None,
            delay: Duration::ZERO,
        }
    }

    /// If others of this client already wait for a name of the lock, it is held, or is being
    /// handed to one of them: queue behind them rather than send an attempt bound to fail, and
    /// rather than barge ahead of them. Their attempts keep the name marked. The retry delay
    /// still bounds the wait.
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
        self.woken = wait_in_line(self, delay).await;
    }

    pub(crate) fn plan(&self) -> &'a Plan {
        self.plan
    }

    /// Attempt number `attempt` begins at `started`; returns how long the marks sent with it
    /// live: none before the call waits (an attempt that succeeds needs none) nor with the `last`
    /// attempt (nobody waits after it), and otherwise for longer than the wait after it, so that
    /// a waiter that polls keeps the name marked.
    pub(crate) fn attempt_starts(
        &mut self,
        attempt: u32,
        started: Instant,
        last: bool,
    ) -> Option<Duration> {
        for place in &self.places {
            place.rearm(started);
        }
        if last {
            return None;
        }
        // Drawn here, not after the await of the attempt: the mark sent now must outlive it.
        self.delay = self.plan.retry_delay_after(attempt);
        if self.places.is_empty() {
            return None;
        }
        let wait = until(self.delay, self.deadline).duration_since(started.into());
        Some(wait + self.plan.node_timeout + MARK_SLACK)
    }

    pub(crate) fn attempt_ended(&mut self, won: bool) {
        if let Some(place) = self.woken.and_then(|index| self.places.get(index)) {
            place.woken_attempt(won);
        }
    }

    /// Waits for a wake-up or the retry delay after attempt `failed`, which began at `started`.
    ///
    /// The first wait of a call joins the lines and returns once the nodes confirmed the
    /// subscriptions (where this client had to subscribe): the next attempt then marks the name,
    /// and a release between the failed attempt and the marks is covered by that attempt.
    pub(crate) async fn wait(&mut self, _failed: u32, started: Instant) {
        self.woken = None;
        if self.places.is_empty() {
            let Some(hub) = self.listeners.hub() else {
                // No listeners (connections the caller built): poll, unmarked.
                tokio::time::sleep_until(until(self.delay, self.deadline)).await;
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
            }
            return;
        }
        self.woken = wait_in_line(self, self.delay).await;
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

/// Waits for a wake-up by release notices in any of `wait`'s places, or `delay` at most (and no
/// later than its deadline); the index of the place woken, if any.
///
/// A woken waiter first pauses for its name's current spread (see `hub::line`). A pause means that
/// woken waiters of several clients have been racing for the name: after it, one node is asked
/// whether the name is still free (one command, where an attempt costs one per node), and if
/// another client's waiter got there first, this one goes back to waiting. Readers skip that
/// look: the name's key is there while readers hold, and a reader may still get in.
async fn wait_in_line(wait: &NoticeWait<'_>, delay: Duration) -> Option<usize> {
    let (resource, plan, places) = (wait.resource, wait.plan, &wait.places);
    let deadline = until(delay, wait.deadline);
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
                // The release spent the marks, and whoever took the name may not have marked it
                // (a first attempt does not): mark it again, or its release would be silent.
                mark(wait, name, deadline.into_std()).await;
                place.wait_again(woken_at);
            }
            // Free, or no answer: the attempt will tell.
            _ => return Some(index),
        }
    }
}

/// Marks `name` as waited for on every node until a node timeout (and the slack) after `until`,
/// without an attempt (see `wait_in_line`). Bounded by the node timeout; a node that does not
/// answer in time costs only its notice.
async fn mark(wait: &NoticeWait<'_>, name: &Arc<str>, until: Instant) {
    let ttl = until.saturating_duration_since(Instant::now()) + wait.plan.node_timeout + MARK_SLACK;
    let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let names = std::slice::from_ref(name);
    each_node(
        wait.resource.nodes(),
        wait.plan.node_timeout,
        |_, mut connection| {
            let marks = mark_commands(names, connection.member(), millis);
            async move {
                for cmd in &marks {
                    send(&mut connection, cmd).await?;
                }
                Ok(())
            }
        },
    )
    .await;
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
