//! The release-notice listeners: one pub/sub connection per node, kept open for the hub.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, oneshot};

use crate::hub::{Hub, LINGER, State};
use crate::quorum::quorum;
use crate::scripts::NOTICE_PREFIX;

/// Bound on opening a listener connection and on each SUBSCRIBE or UNSUBSCRIBE.
const LISTENER_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause before reconnecting a lost listener, doubled after each failed try up to the maximum.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The listeners of a client: started on first use, because most clients never need them.
pub(crate) struct Listeners {
    /// One per node, in node order; empty for connections the caller built.
    clients: Vec<redis::Client>,
    hub: std::sync::Mutex<Option<Arc<Hub>>>,
}

impl Listeners {
    pub(crate) fn new(clients: Vec<redis::Client>) -> Listeners {
        Listeners {
            clients,
            hub: std::sync::Mutex::new(None),
        }
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
                let listener = Listener {
                    node,
                    client: client.clone(),
                    hub: Arc::downgrade(&hub),
                    commands,
                };
                runtime.spawn(listener.run());
            }
            hub
        };
        *slot = Some(Arc::clone(&hub));
        Some(hub)
    }
}

/// What the listener of one node is asked to do.
pub(crate) enum Command {
    /// Subscribe to a channel; the sender, if any, is told once the node confirmed it.
    Subscribe(String, Option<oneshot::Sender<()>>),
    Unsubscribe(String),
}

/// The pub/sub connection to one node, run as a task for as long as the hub lives.
struct Listener {
    node: usize,
    client: redis::Client,
    hub: Weak<Hub>,
    commands: mpsc::UnboundedReceiver<Command>,
}

/// Why a listener stopped serving.
enum Stop {
    /// The client was dropped: the task ends.
    HubGone,
    /// The connection was lost or could not be made; `served` if it had been working.
    Lost { served: bool },
}

impl Listener {
    async fn run(mut self) {
        let mut pause = RECONNECT_MIN;
        loop {
            match self.serve().await {
                Stop::HubGone => return,
                Stop::Lost { served } => {
                    if served {
                        pause = RECONNECT_MIN;
                    }
                    tracing::debug!(node = self.node, ?pause, "release listener reconnecting");
                    // Commands are dropped while the node is away (their confirmations read as
                    // "not confirmed"), so a long outage does not pile them up: the
                    // subscriptions are made again from the hub's names after reconnecting.
                    self.drain();
                    tokio::time::sleep(pause).await;
                    self.drain();
                    pause = (pause * 2).min(RECONNECT_MAX);
                }
            }
            if self.hub.strong_count() == 0 {
                return;
            }
        }
    }

    /// Takes every command waiting in the channel, returning the confirmations they asked for.
    fn drain(&mut self) -> Vec<oneshot::Sender<()>> {
        let mut confirmations = Vec::new();
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Subscribe(_, Some(confirm)) = command {
                confirmations.push(confirm);
            }
        }
        confirmations
    }

    async fn serve(&mut self) -> Stop {
        let connected = tokio::time::timeout(LISTENER_TIMEOUT, self.client.get_async_pubsub());
        let Ok(Ok(pubsub)) = connected.await else {
            return Stop::Lost { served: false };
        };
        let (mut sink, mut stream) = pubsub.split();
        // Commands that came while connecting are covered by the snapshot of names taken after
        // them: a name to subscribe is in it, a name to unsubscribe is not.
        let confirmations = self.drain();
        let Some(channels) = self.hub.upgrade().map(|hub| hub.channels()) else {
            return Stop::HubGone;
        };
        if !channels.is_empty() && !bounded(sink.subscribe(&channels)).await {
            return Stop::Lost { served: false };
        }
        for confirm in confirmations {
            let _ = confirm.send(());
        }
        tracing::debug!(node = self.node, "release listener connected");
        let mut sweep = tokio::time::interval(LINGER);
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else {
                        return Stop::Lost { served: true };
                    };
                    let Some(hub) = self.hub.upgrade() else {
                        return Stop::HubGone;
                    };
                    if let Some(name) = message.get_channel_name().strip_prefix(NOTICE_PREFIX) {
                        let release = message.get_payload_bytes();
                        hub.notice(self.node, name, release, Instant::now());
                    }
                }
                command = self.commands.recv() => {
                    let Some(command) = command else {
                        return Stop::HubGone;
                    };
                    if !apply(&mut sink, command).await {
                        return Stop::Lost { served: true };
                    }
                }
                _ = sweep.tick() => {
                    let Some(hub) = self.hub.upgrade() else {
                        return Stop::HubGone;
                    };
                    hub.sweep_now();
                }
            }
        }
    }
}

/// Sends one command to the node; `false` if the connection failed it.
async fn apply(sink: &mut PubSubSink, command: Command) -> bool {
    match command {
        Command::Subscribe(channel, confirm) => {
            let subscribed = bounded(sink.subscribe(&channel)).await;
            if let (true, Some(confirm)) = (subscribed, confirm) {
                let _ = confirm.send(());
            }
            subscribed
        }
        Command::Unsubscribe(channel) => bounded(sink.unsubscribe(&channel)).await,
    }
}

async fn bounded(call: impl Future<Output = redis::RedisResult<()>>) -> bool {
    matches!(
        tokio::time::timeout(LISTENER_TIMEOUT, call).await,
        Ok(Ok(()))
    )
}
