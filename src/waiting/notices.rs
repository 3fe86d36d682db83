//! Waiting with wake-up on release: the retry delay, cut short when release notices say the lock
//! is free (see `hub::line` for when a waiter is woken, and `hub` for where notices come from).
//!
//! # Marks
//!
//! A release publishes a notice only where a waiter marked the name (see
//! `engine::target::waiters_key`): the release's `DEL` takes the mark with the key (but see the
//! next paragraph), and tells by its count whether there was one, so that a release nobody waits
//! for costs its node nothing more than one more key in that `DEL`. Marks are shared: one
//! waiter's mark makes the release notify every client that listens. Every mark lives
//! [`MARK_TTL`], whoever sets it, so a mark set later never shortens one set earlier.
//!
//! A release whose holder waited for the lock (or that frees a failed attempt's keys) leaves the
//! mark where it found one, to live [`MARK_TTL`] from then, and says so by [`KEPT_MARK`] before
//! the value in its notice: under contention the waiters that hear it need not mark again, which
//! would otherwise cost each client's woken waiter a mark per node per hand-off. A holder that got
//! the name without waiting ends the chain: its release takes the mark, as every release did
//! before.
//!
//! A waiter marks the names in the same write as an attempt, before the attempt's command
//! (`Request::with_marks`), or in a write of their own while it waits. Its client counts the marks
//! as placed once every node answered that write (the latest such write, see
//! `hub::line::Line::marks_placed`), for every waiter of the name in the client: they are the same
//! keys whoever wrote them. From then on no waiter of the client sends any until they may be gone,
//! which it can tell, because a mark leaves a node in one of three ways only:
//!
//! 1. a release took it, and published a notice there without [`KEPT_MARK`]: such a notice of the
//!    name that arrived at or after the start of the marking write (late ones of a release
//!    already spent included) makes the next attempt mark again. A notice with it comes from a
//!    release that left the mark, to live [`MARK_TTL`] from then: the node has a mark that lives
//!    longer than the one the waiter counts on;
//! 2. a node lost it, with the notice (the listener was away: the client's listeners counted a
//!    reconnection since the marking write; or the node restarted or evicted keys, a lost notice);
//! 3. it expired: an attempt marks again when its marks would expire within a node timeout and
//!    [`MARK_SLACK`] of the end of the wait after it, and a longer wait marks again in the middle.
//!
//! The first attempt of a call sends no mark (most calls never wait): a call that has to wait
//! listens first (the nodes confirmed its subscription), then makes a marked attempt at once,
//! which closes the gap between its first attempt and its marks.
//!
//! # Why no release is missed
//!
//! Take a waiter W whose attempt A failed, and a release R on node n after A's command there
//! (the release of a key that A found on n, or of one set there later). Either A carried marks
//! (they reached n before A's command, so before R), or A sent none, and then its client's last
//! marks (W's or another waiter's of the client) were placed on n, had not expired (3), no
//! reconnection had been counted (2), and no notice of a release that took a mark had arrived
//! since their write began (1) when A began. Then, at R, n has a mark (a release between that
//! kept the mark left it there), and R notifies, or
//! a release R' took the mark off n between the marks and R, and published. R' was not heard
//! before A began, so its notice arrives after A began: that is what the line counts for the wait
//! after A (notices that arrive after the attempt began, see `hub::line`), as n's release, in
//! place of R. In both cases n counts for W as released: W is woken once a quorum of nodes did,
//! as it would be had every attempt marked. And once W has made an attempt after R', it marks
//! again (1). The line does not count R' for W in one case: R' had already woken a waiter of this
//! client (a woken waiter spends its release for the others). That waiter's next attempt marks
//! every node (1), after R' on every node whose notice of R' was among those that woke it; a
//! slower node is the gap below. Where notices are lost (2), the retry delay is the fallback, as
//! it always was.
//!
//! The gap is older than these rules, and they keep it as it was: a release R' whose notices
//! woke a waiter of this client spends its value for the line, so that its late notices do not
//! add up with the next release's. A late notice of R' from a slow node n, where R' took the
//! marks of the woken waiter's attempt (its command came to n before R'), is then not counted:
//! if the next holder's quorum has n and no more nodes than a quorum, its release wakes nobody
//! here, and waiters retry at their delay. The woken waiter and every other marks again with its
//! next attempt. A release R' that kept the marks leaves no such gap: n still has a mark.
//!
//! A mark left by a waiter that gave up costs at most one notice nobody hears: the first release
//! takes it.

use std::time::{Duration, Instant};

use crate::engine::metrics;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::engine::target::mark_commands;
use crate::nodes::probe::{each_node, in_use, send};
use crate::waiting::hub::Place;
use crate::waiting::hub::line::Marks;
use crate::waiting::listeners::Listeners;

use super::wait::until;

/// How long every waiter's mark lives.
///
/// Long enough that a waiter polling at the default retry delay (50-250 ms) marks once in about
/// 60 attempts, not with each of them; no longer, because a mark outlives the waiters that set it
/// by up to that much: it costs the node a key, and the first release after them one notice.
/// Twice the time a name stays subscribed after its last waiter (`hub::LINGER`): a mark left
/// that long after its waiter has no listener left to reach.
pub(crate) const MARK_TTL: Duration = Duration::from_secs(10);

/// Before the value in a release notice, where the release left the waiters' mark in place
/// (`release_keep.lua`): never the first character of a lock value (base64url), nor
/// of a fair hand-off's notice (`fair::scripts::GRANT_MARK`).
pub(crate) const KEPT_MARK: u8 = b'+';

/// How long before they expire a waiter's marks are set again, beyond the node timeout: the time
/// the write may take to reach the nodes on a loaded machine.
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
    /// The retry delay after the current attempt, drawn as it starts.
    delay: Duration,
    /// The marks the current attempt sends, if it sends any.
    marking: Option<Marks>,
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
            marking: None,
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
    /// live, if it sends any: none before the call waits (an attempt that succeeds needs none) nor
    /// with the `last` attempt (nobody waits after it), and otherwise only where the client's marks
    /// may be gone (see the module's doc).
    pub(crate) fn attempt_starts(
        &mut self,
        attempt: u32,
        started: Instant,
        last: bool,
    ) -> Option<Duration> {
        for place in &self.places {
            place.rearm(started);
        }
        self.marking = None;
        if last {
            return None;
        }
        self.delay = self.plan.retry_delay_after(attempt);
        if self.places.is_empty() {
            return None;
        }
        let wait_ends = until(self.delay, self.deadline).into_std();
        if !self.mark_due(wait_ends) {
            return None;
        }
        self.marking = Some(Marks {
            sent: started,
            connects: self.connects(),
        });
        Some(MARK_TTL)
    }

    /// The replies of the current attempt: its marks count as placed if every node answered.
    pub(crate) fn replies(&mut self, tally: &Tally) {
        if let Some(marking) = self.marking.take().filter(|_| tally.unconfirmed() == 0) {
            self.placed(marking);
        }
    }

    /// Every node answered a write of marks of every name of the lock.
    fn placed(&self, marks: Marks) {
        for place in &self.places {
            place.marks_placed(marks);
        }
    }

    /// The marks of every name of the lock that its client placed, while none may be gone (the
    /// oldest write of them, if they were written apart), or `None`.
    fn marks(&self) -> Option<Marks> {
        oldest(self.places.iter().map(Place::marks))
    }

    /// When the client's marks of every name of the lock must be written again before they
    /// expire, whether or not some may be gone already (those are written again by the next
    /// attempt; a wait must not outlast the others), if they were ever placed.
    fn refresh(&self) -> Option<tokio::time::Instant> {
        let marks = oldest(self.places.iter().map(Place::last_marks))?;
        Some(tokio::time::Instant::from(self.refresh_at(marks)))
    }

    /// Whether the client's marks may be gone, or expire, before `wait_ends` and a node timeout
    /// (see the module's doc).
    fn mark_due(&self, wait_ends: Instant) -> bool {
        self.marks()
            .is_none_or(|marks| self.refresh_at(marks) < wait_ends)
    }

    /// When marks written at `marked` must be written again: a node timeout and the slack before
    /// they expire.
    fn refresh_at(&self, marked: Marks) -> Instant {
        marked.sent + MARK_TTL.saturating_sub(self.plan.node_timeout + MARK_SLACK)
    }

    /// The client's listener connections so far.
    fn connects(&self) -> u64 {
        self.places.first().map_or(0, Place::connects)
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

    /// The call got the lock: it leaves the lines for good, keeping the wake-up it used. Returns
    /// whether it had joined them (it waited).
    pub(crate) fn acquired(self) -> bool {
        if self.woken.is_some() {
            metrics::handoff(metrics::Handoff::Wake);
        }
        let waited = !self.places.is_empty();
        for place in self.places {
            place.done();
        }
        waited
    }
}

/// Waits for a wake-up by release notices in any of `wait`'s places, or `delay` at most (and no
/// later than its deadline); the index of the place woken, if any. Marks the names again where
/// the client's last marks would expire before the wait ends (see the module's doc), whether or not
/// some may be gone already.
///
/// A woken waiter first pauses for its name's current spread (see `hub::line`). A pause means that
/// woken waiters of several clients have been racing for the name: after it, one node is asked
/// whether the name is still free (one command, where an attempt costs one per node), and if
/// another client's waiter got there first, this one goes back to waiting. Readers skip that
/// look: the name's key is there while readers hold, and a reader may still get in.
async fn wait_in_line(wait: &mut NoticeWait<'_>, delay: Duration) -> Option<usize> {
    let deadline = until(delay, wait.deadline);
    loop {
        let refresh = wait.refresh().filter(|&refresh| refresh < deadline);
        let index = tokio::select! {
            () = tokio::time::sleep_until(refresh.unwrap_or(deadline)) => {
                if refresh.is_some() {
                    tracing::trace!("marking the name again before the marks expire");
                    mark(wait).await;
                    continue;
                }
                return None;
            }
            index = woken(&wait.places) => index,
        };
        let (resource, plan) = (wait.resource, wait.plan);
        let place = &wait.places[index];
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
                // A release that took the marks spent them, and whoever took the name may not
                // have marked it (a first attempt does not): mark it again, or its release would
                // be silent. A release that kept them left them for the next one.
                if wait.marks().is_none() {
                    mark(wait).await;
                }
                wait.places[index].wait_again(woken_at);
            }
            // Free, or no answer: the attempt will tell.
            _ => return Some(index),
        }
    }
}

/// Marks every name of the lock as waited for on every node, without an attempt (see
/// `wait_in_line`), and counts the marks as placed if every node answered. Bounded by the node
/// timeout; a node that does not answer in time costs only its notice, and the next attempt marks
/// again.
async fn mark(wait: &mut NoticeWait<'_>) {
    let marking = Marks {
        sent: Instant::now(),
        connects: wait.connects(),
    };
    let millis = u64::try_from(MARK_TTL.as_millis()).unwrap_or(u64::MAX);
    let names = wait.resource.target().names();
    let answers = each_node(
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
    if answers.iter().all(Result::is_ok) {
        wait.placed(marking);
    }
}

/// The write that began first of `marks`, or `None` if one is missing.
fn oldest(marks: impl Iterator<Item = Option<Marks>>) -> Option<Marks> {
    let mut oldest: Option<Marks> = None;
    for marks in marks {
        let marks = marks?;
        oldest = Some(oldest.map_or(marks, |oldest| {
            std::cmp::min_by_key(oldest, marks, |marks| marks.sent)
        }));
    }
    oldest
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
