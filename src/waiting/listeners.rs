//! The owner of a client's release-notice hub and of the listeners that feed it: both started on
//! first use, because most clients never need them.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::engine::quorum::quorum;
use crate::nodes::connection::NodeConnection;
use crate::nodes::listener;
use crate::waiting::hub::{Hub, SWEEP_EVERY, State};

/// The listeners of a client: started on first use, because most clients never need them.
pub(crate) struct Listeners {
    /// One per member, in member order, whose client each listener connects through (and whose
    /// connection tells whether it reaches a cluster); empty for connections the caller built.
    clients: Vec<NodeConnection>,
    hub: std::sync::Mutex<Option<Arc<Hub>>>,
    /// This client's id among the clients of a name's fair line: the nodes hand the lock to its
    /// waiters on its own channel (see `nodes::listener::grant_channel`). Random, so that
    /// clients never share one.
    client: u64,
}

impl Listeners {
    pub(crate) fn new(clients: Vec<NodeConnection>) -> Listeners {
        Listeners {
            clients,
            hub: std::sync::Mutex::new(None),
            client: rand::random(),
        }
    }

    /// This client's id in fair lines.
    pub(crate) fn client(&self) -> u64 {
        self.client
    }

    /// The hub if its listeners already run: for checks that must not open connections.
    pub(crate) fn running_hub(&self) -> Option<Arc<Hub>> {
        let slot = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().filter(|hub| hub.listening()).cloned()
    }

    /// The hub, with one listener task per node started on the first call, and again if the
    /// runtime that ran the listeners has shut down (a client can outlive a runtime). `None` when
    /// there are no clients to listen with, or no tokio runtime to run the listeners on.
    pub(crate) fn hub(&self) -> Option<Arc<Hub>> {
        if self.clients.is_empty() {
            return None;
        }
        let mut slot = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hub) = slot.as_ref().filter(|hub| hub.listening()) {
            return Some(Arc::clone(hub));
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let hub = {
            let mut receivers = Vec::new();
            let mut commands = Vec::new();
            for _ in &self.clients {
                let (sender, receiver) = mpsc::unbounded_channel();
                commands.push(sender);
                receivers.push(receiver);
            }
            let hub = Arc::new(Hub {
                quorum: quorum(self.clients.len()),
                nodes: self.clients.len(),
                state: std::sync::Mutex::new(State::default()),
                commands,
            });
            for (node, (client, commands)) in self.clients.iter().zip(receivers).enumerate() {
                let sink = Arc::downgrade(&hub);
                let ids = (node, self.client);
                listener::spawn(&runtime, ids, client.clone(), sink, commands, SWEEP_EVERY);
            }
            hub
        };
        *slot = Some(Arc::clone(&hub));
        Some(hub)
    }
}
