//! A watcher of a name's notices: told of every release and hand-off, taking no waiter's turn.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use crate::waiting::hub::line::WaiterId;

use super::Hub;

/// Told of every notice on one name for as long as it lives (an election's `watch()`), beside
/// the waiters in line, whose wake-ups it never takes: a notice wakes the line's next waiter and
/// every watcher.
pub(crate) struct Watcher {
    pub(super) hub: Arc<Hub>,
    pub(super) name: Arc<str>,
    pub(super) id: WaiterId,
    pub(super) wake: Arc<Notify>,
}

impl Watcher {
    /// Resolves at the first notice on the name since the last call returned (or since the
    /// watcher was made): a notice that came in between left a permit, so none is missed.
    pub(crate) async fn changed(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.hub.state();
        state.wakers.remove(&self.id);
        if let Some(waiters) = state.names.get_mut(&*self.name) {
            waiters.watchers.retain(|&id| id != self.id);
            waiters.left(now);
        }
    }
}
