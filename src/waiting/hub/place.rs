//! A notice waiter's place in its client's line for a name (wake-up on release).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::waiting::hub::line::{Line, Marks, WaiterId};

use super::Hub;

/// One `lock()` call's place in its client's line for a name, from its first wait to its return.
///
/// Dropped without [`Place::done`] (the `lock()` call failed or was cancelled) after it was woken,
/// it passes the wake-up on to the next waiter, so a release is not lost on a waiter that left.
pub(crate) struct Place {
    pub(super) hub: Arc<Hub>,
    pub(super) name: Arc<str>,
    pub(super) id: WaiterId,
    pub(super) wake: Arc<Notify>,
    pub(super) done: bool,
}

impl Place {
    /// Runs `f` on this place's line under the hub's lock, and wakes whom it names.
    fn with_line(&self, f: impl FnOnce(&mut Line) -> Option<WaiterId>) {
        let mut state = self.hub.state();
        let woken = state
            .names
            .get_mut(&*self.name)
            .and_then(|waiters| f(&mut waiters.line));
        state.wake(woken);
    }

    /// Called as an attempt starts: only notices received from now on count, and a waiter that
    /// was woken goes to the back of the line.
    pub(crate) fn rearm(&self, since: Instant) {
        self.with_line(|line| {
            line.rearm(self.id, since);
            None
        });
    }

    /// Resolves once this waiter is woken by release notices.
    pub(crate) async fn woken(&self) {
        loop {
            if self.is_woken() {
                return;
            }
            // A wake-up before this point left a permit, so none is lost.
            self.wake.notified().await;
        }
    }

    pub(super) fn is_woken(&self) -> bool {
        let state = self.hub.state();
        state
            .names
            .get(&*self.name)
            .is_some_and(|waiters| waiters.line.is_woken(self.id))
    }

    /// For a woken waiter before its attempt: a random pause below the name's current spread,
    /// and the node that reported the release last (see `Line::pause`).
    pub(crate) fn pause(&self) -> (Duration, usize) {
        let fraction = rand::random::<f64>();
        let state = self.hub.state();
        state
            .names
            .get(&*self.name)
            .map_or((Duration::ZERO, 0), |waiters| waiters.line.pause(fraction))
    }

    /// A woken waiter found the lock taken again before its attempt: back to waiting, at its
    /// place in line, for releases after `since`.
    pub(crate) fn wait_again(&self, since: Instant) {
        self.with_line(|line| line.wait_again(self.id, since));
    }

    /// The marks of the name this client placed, while none may be gone (see `Line::marks`).
    pub(crate) fn marks(&self) -> Option<Marks> {
        let state = self.hub.state();
        let connects = state.connects;
        state
            .names
            .get(&*self.name)
            .and_then(|waiters| waiters.line.marks(connects))
    }

    /// The latest write of marks of the name this client placed (see `Line::last_marks`).
    pub(crate) fn last_marks(&self) -> Option<Marks> {
        let state = self.hub.state();
        state
            .names
            .get(&*self.name)
            .and_then(|waiters| waiters.line.last_marks())
    }

    /// Every node answered a write of marks of the name (see `Line::marks_placed`).
    pub(crate) fn marks_placed(&self, marks: Marks) {
        self.with_line(|line| {
            line.marks_placed(marks);
            None
        });
    }

    /// How many times the client's listeners (re)connected so far (see `State::connects`).
    pub(crate) fn connects(&self) -> u64 {
        self.hub.state().connects
    }

    /// Reports how the attempt after a wake-up went.
    pub(crate) fn woken_attempt(&self, won: bool) {
        self.with_line(|line| {
            line.woken_attempt(won);
            None
        });
    }

    /// Leaves the line for good: the `lock()` call got the lock.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.hub.state();
        state.wakers.remove(&self.id);
        let woken = state.names.get_mut(&*self.name).and_then(|waiters| {
            let woken = waiters.line.leave(self.id, self.done);
            waiters.left(now);
            woken
        });
        state.wake(woken);
    }
}
