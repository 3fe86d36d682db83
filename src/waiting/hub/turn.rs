//! A fair waiter's slot in its client's hub: the hand-offs notices reported for it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use crate::waiting::hub::line::WaiterId;

use super::{Grant, Handed, Hub, claim};

/// One fair `lock()` call's slot in its client's hub: the hand-offs the notices reported for it,
/// and the latest ticket they mentioned.
pub(crate) struct Turn {
    pub(super) hub: Arc<Hub>,
    pub(super) name: Arc<str>,
    pub(super) fingerprint: String,
    pub(super) id: WaiterId,
    pub(super) wake: Arc<Notify>,
}

impl Turn {
    /// The waiter's value changed (it joins the line anew): hand-offs to the old one no longer
    /// count.
    pub(crate) fn rename(&mut self, fingerprint: &str) {
        let mut state = self.hub.state();
        if let Some(waiters) = state.names.get_mut(&*self.name) {
            waiters.turns.remove(&self.fingerprint);
            let mut handed = Handed {
                id: self.id,
                nodes: Vec::new(),
                freed: false,
            };
            claim(&mut waiters.unclaimed, fingerprint, &mut handed);
            waiters.turns.insert(fingerprint.to_owned(), handed);
        }
        self.fingerprint = fingerprint.to_owned();
    }

    /// Resolves after a notice concerned this waiter (some may have come before: see
    /// [`take_news`](Turn::take_news)).
    pub(crate) async fn notified(&self) {
        self.wake.notified().await;
    }

    /// The hand-offs to us since the last call, and whether a node freed the lock.
    pub(crate) fn take_news(&self) -> (Vec<Grant>, bool) {
        let mut state = self.hub.state();
        let handed = state
            .names
            .get_mut(&*self.name)
            .and_then(|waiters| waiters.turns.get_mut(&self.fingerprint));
        match handed {
            Some(handed) => (
                std::mem::take(&mut handed.nodes),
                std::mem::take(&mut handed.freed),
            ),
            None => (Vec::new(), false),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.hub.state();
        state.wakers.remove(&self.id);
        if let Some(waiters) = state.names.get_mut(&*self.name) {
            waiters.turns.remove(&self.fingerprint);
            waiters.left(now);
        }
    }
}
