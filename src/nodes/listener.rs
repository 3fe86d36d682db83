//! The release-notice listeners: one pub/sub connection per member, whose notices go to a
//! [`NoticeSink`] (the waiting layer's hub, which also owns the listeners: see
//! `waiting::listeners`).
//!
//! A standalone server's notices come by `PUBLISH` on `redmutex:released:<name>`; a Redis
//! Cluster's come by `SPUBLISH` on [`notice_channel`], in the name's slot (a classic `PUBLISH`
//! there would go to every node). The listener of a cluster member is one RESP3 cluster
//! connection (the redis crate's, whose pushes come to the listener) that `SSUBSCRIBE`s each
//! name's channel on the master of its slot, and keeps a map from channel to name. The crate
//! subscribes again after it re-made a node's connection; a master that lost the slot (a
//! resharding, a failover) unsubscribes the channel itself with a `sunsubscribe` push, upon which
//! the listener subscribes again, and the crate routes it to the slot's new owner. The listener
//! goes the way its member's connection went: a node that answered `cluster_enabled:1` is heard
//! as its cluster.
//!
//! A listener re-makes its connection after any failure, including a connection that could not be
//! set up (refused credentials, `maxclients`) and one that went half-open: a subscribed connection
//! receives nothing while no lock is released, so silence alone says nothing, and a `PING` every
//! [`PING_INTERVAL`] that must be answered within [`LISTENER_TIMEOUT`] notices a dead one within
//! the sum of the two. A release missed meanwhile costs its waiters at most their retry delay.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, oneshot};

use super::Member;
use super::connection::NodeConnection;
use super::member::MemberClient;

/// The pub/sub channel of a name's release notices is this prefix followed by the name (see
/// [`notice_channel`]). The scripts that publish are given the channel.
pub(crate) const NOTICE_PREFIX: &str = "redmutex:released:";

/// Bound on opening a listener connection and on each SUBSCRIBE, UNSUBSCRIBE or PING.
const LISTENER_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a listener checks its connection with a PING.
const PING_INTERVAL: Duration = Duration::from_secs(3);

/// Pause before reconnecting a lost listener, doubled after each failed try up to the maximum.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Where a node's listener delivers what it hears, and whom it asks what to listen for.
pub(crate) trait NoticeSink: Send + Sync + 'static {
    /// `node` published `payload` on a channel of `name` (its notices, or its grants to this
    /// client), heard at `at`.
    fn notice(&self, node: usize, name: &str, payload: &[u8], at: Instant);
    /// What to listen for after a listener (re)connected.
    fn topics(&self) -> Vec<Topic>;
    /// Called every `sweep_every` (see [`spawn`]) while the listener runs: time to forget names
    /// nobody waits on.
    fn sweep(&self);
}

/// Starts the listener of member `node` through the client of `connection` (redmutex's own) on
/// `runtime`, for the client `client` (whose grant channels it listens to, see
/// [`grant_channel`]): it delivers to `sink` for as long as the sink lives, and takes its orders
/// from `commands`.
pub(crate) fn spawn<S: NoticeSink>(
    runtime: &tokio::runtime::Handle,
    (node, client): (usize, u64),
    connection: NodeConnection,
    sink: Weak<S>,
    commands: mpsc::UnboundedReceiver<Command>,
    sweep_every: Duration,
) {
    let listener = Listener {
        node,
        client,
        connection,
        sink,
        commands,
        sweep_every,
    };
    runtime.spawn(listener.run());
}

/// What a listener listens to for a name (it knows the channel each comes on).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Topic {
    /// The name's release notices (and the grants of releases that name no client's channel).
    Notices(Arc<str>),
    /// The fair line's grants of the name to this client's waiters ([`grant_channel`]).
    Grants(Arc<str>),
}

impl Topic {
    /// The name the topic is about.
    pub(crate) fn name(&self) -> &Arc<str> {
        match self {
            Topic::Notices(name) | Topic::Grants(name) => name,
        }
    }

    /// The topic's channel on a member of kind `member`, for the client `client`; `None` where
    /// the name has no such channel (a name without a slot prefix on a cluster).
    fn channel(&self, member: Member, client: u64) -> Option<String> {
        match self {
            Topic::Notices(name) => notice_channel(name, member),
            Topic::Grants(name) => grant_channel(name, client),
        }
    }
}

/// What the listener of one node is asked to do.
pub(crate) enum Command {
    /// Subscribe to a topic; the sender, if any, is told once the node confirmed it.
    Subscribe(Topic, Option<oneshot::Sender<()>>),
    Unsubscribe(Topic),
}

/// The channels of grant notices addressed to one client start with this (see
/// [`grant_channel`]).
pub(crate) const GRANT_PREFIX: &str = "redmutex:granted:";

/// The channel where the fair line hands `name`'s lock to waiters of the client `client` (see
/// `waiting::fair`): the prefix, the name's [`slot_prefix`](super::hash_tag::slot_prefix), a
/// colon and the client's id in hex, `redmutex:granted:{order:42}:00c0ffee00c0ffee`. In the name's
/// slot, so that a script on a cluster may `SPUBLISH` on it, and named alike on every kind of
/// member. `None` for a name without a slot prefix, which fair waiting refuses.
pub(crate) fn grant_channel(name: &str, client: u64) -> Option<String> {
    super::hash_tag::slot_prefix(name).map(|prefix| format!("{GRANT_PREFIX}{prefix}:{client:016x}"))
}

/// The channel of `name`'s notices on a standalone server.
pub(crate) fn channel(name: &str) -> String {
    format!("{NOTICE_PREFIX}{name}")
}

/// The channel of `name`'s notices on a member of kind `member`: [`channel`] on a standalone
/// server; on a cluster, the sharded channel in the name's slot, the prefix followed by the
/// name's [`slot_prefix`](super::hash_tag::slot_prefix) (`redmutex:released:{order:42}`), since a
/// script may `SPUBLISH` only on a channel of its keys' slot. `None` for a name that has no slot
/// prefix, on a cluster.
pub(crate) fn notice_channel(name: &str, member: Member) -> Option<String> {
    match member {
        Member::Standalone => Some(channel(name)),
        Member::Cluster => {
            super::hash_tag::slot_prefix(name).map(|p| format!("{NOTICE_PREFIX}{p}"))
        }
    }
}

/// The pub/sub connection to one member, run as a task for as long as its sink lives.
struct Listener<S> {
    node: usize,
    /// The client's id, which names its grant channels.
    client: u64,
    /// The member's connection: its client, and what kind of member it found.
    connection: NodeConnection,
    sink: Weak<S>,
    commands: mpsc::UnboundedReceiver<Command>,
    sweep_every: Duration,
}

/// Why a listener stopped serving.
enum Stop {
    /// The client was dropped (and its sink with it): the task ends.
    SinkGone,
    /// The connection was lost or could not be made; `served` if it had been working.
    Lost { served: bool },
    /// The member cannot carry notices to this client (a caller's cluster client without
    /// RESP3): the listener takes orders and confirms none, so its waiters poll.
    Deaf,
}

impl<S: NoticeSink> Listener<S> {
    async fn run(mut self) {
        let mut pause = RECONNECT_MIN;
        loop {
            match self.serve().await {
                Stop::SinkGone => return,
                Stop::Deaf => return self.deaf().await,
                Stop::Lost { served } => {
                    if served {
                        pause = RECONNECT_MIN;
                    }
                    tracing::debug!(node = self.node, ?pause, "release listener reconnecting");
                    // Commands are dropped while the node is away (their confirmations read as
                    // "not confirmed"), so a long outage does not pile them up: the
                    // subscriptions are made again from the sink's channels after reconnecting.
                    self.drain();
                    tokio::time::sleep(pause).await;
                    self.drain();
                    pause = (pause * 2).min(RECONNECT_MAX);
                }
            }
            if self.sink.strong_count() == 0 {
                return;
            }
        }
    }

    /// Every channel the sink wants listened to on a member of kind `member`, with the name each
    /// is about; `None` once the sink is gone.
    fn subscribed(&self, member: Member) -> Option<HashMap<String, Arc<str>>> {
        let sink = self.sink.upgrade()?;
        let topics = sink.topics();
        Some(
            topics
                .iter()
                .filter_map(|topic| {
                    Some((
                        topic.channel(member, self.client)?,
                        Arc::clone(topic.name()),
                    ))
                })
                .collect(),
        )
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

    /// Takes orders without ever carrying them out, until the sink is gone.
    async fn deaf(mut self) {
        let mut sweep = tokio::time::interval(self.sweep_every);
        loop {
            tokio::select! {
                command = self.commands.recv() => {
                    if command.is_none() {
                        return;
                    }
                }
                _ = sweep.tick() => {
                    let Some(sink) = self.sink.upgrade() else {
                        return;
                    };
                    sink.sweep();
                }
            }
        }
    }

    /// Serves the member's notices until the connection is lost: as a standalone server's, or as
    /// a cluster's when the member's connection found one.
    async fn serve(&mut self) -> Stop {
        let Some(client) = self.connection.client().cloned() else {
            // Listeners are started for redmutex's own connections only.
            return Stop::Deaf;
        };
        match client {
            MemberClient::Node(client) => {
                #[cfg(feature = "cluster")]
                if self.reaches_cluster().await {
                    let (pushes, heard) = mpsc::unbounded_channel();
                    let connecting = async {
                        super::cluster::listening_client_of(&client, pushes)?
                            .get_async_connection_with_config(super::cluster::config())
                            .await
                    };
                    return self.serve_cluster(connecting, heard).await;
                }
                self.serve_node(&client).await
            }
            #[cfg(feature = "cluster")]
            MemberClient::Cluster(client) => {
                let (pushes, heard) = mpsc::unbounded_channel();
                let config = super::cluster::config().set_push_sender(pushes);
                let connecting = client.get_async_connection_with_config(config);
                self.serve_cluster(connecting, heard).await
            }
        }
    }

    /// Whether the member's connection reaches a cluster, once it is made (within the bound of
    /// opening a listener); a member whose connection cannot be made is taken as a standalone
    /// server, whose listener fails in turn and tries again.
    #[cfg(feature = "cluster")]
    async fn reaches_cluster(&mut self) -> bool {
        let made = tokio::time::timeout(LISTENER_TIMEOUT, self.connection.version()).await;
        matches!(made, Ok(Ok(_))) && self.connection.member() == super::Member::Cluster
    }

    async fn serve_node(&mut self, client: &redis::Client) -> Stop {
        let connected = tokio::time::timeout(LISTENER_TIMEOUT, client.get_async_pubsub());
        let Ok(Ok(pubsub)) = connected.await else {
            return Stop::Lost { served: false };
        };
        let (mut sink, mut stream) = pubsub.split();
        // Commands that came while connecting are covered by the snapshot of topics taken after
        // them: a topic to subscribe is in it, a topic to unsubscribe is not.
        let confirmations = self.drain();
        let Some(mut channels) = self.subscribed(Member::Standalone) else {
            return Stop::SinkGone;
        };
        let all: Vec<&String> = channels.keys().collect();
        if !all.is_empty() && !bounded(sink.subscribe(&all)).await {
            return Stop::Lost { served: false };
        }
        for confirm in confirmations {
            let _ = confirm.send(());
        }
        tracing::debug!(node = self.node, "release listener connected");
        let mut sweep = tokio::time::interval(self.sweep_every);
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else {
                        return Stop::Lost { served: true };
                    };
                    let Some(sink) = self.sink.upgrade() else {
                        return Stop::SinkGone;
                    };
                    if let Some(name) = channels.get(message.get_channel_name()) {
                        let payload = message.get_payload_bytes();
                        sink.notice(self.node, name, payload, Instant::now());
                    }
                }
                command = self.commands.recv() => {
                    let Some(command) = command else {
                        return Stop::SinkGone;
                    };
                    if !apply(&mut sink, &mut channels, self.client, command).await {
                        return Stop::Lost { served: true };
                    }
                }
                _ = sweep.tick() => {
                    let Some(sink) = self.sink.upgrade() else {
                        return Stop::SinkGone;
                    };
                    sink.sweep();
                }
                _ = ping.tick() => {
                    if !answers_ping(&mut sink).await {
                        tracing::debug!(node = self.node, "release listener unanswered PING");
                        return Stop::Lost { served: true };
                    }
                }
            }
        }
    }
}

/// Sends one command to a standalone server, and keeps `channels` (each subscribed channel's name)
/// up to date; `false` if the connection failed it.
async fn apply(
    sink: &mut PubSubSink,
    channels: &mut HashMap<String, Arc<str>>,
    client: u64,
    command: Command,
) -> bool {
    match command {
        Command::Subscribe(topic, confirm) => {
            let Some(channel) = topic.channel(Member::Standalone, client) else {
                return true;
            };
            let subscribed = bounded(sink.subscribe(&channel)).await;
            if let (true, Some(confirm)) = (subscribed, confirm) {
                let _ = confirm.send(());
            }
            channels.insert(channel, Arc::clone(topic.name()));
            subscribed
        }
        Command::Unsubscribe(topic) => {
            let Some(channel) = topic.channel(Member::Standalone, client) else {
                return true;
            };
            channels.remove(&channel);
            bounded(sink.unsubscribe(channel)).await
        }
    }
}

/// Whether the node answers a PING on the subscribed connection in time. An error reply (the
/// user may not PING) still came back over the connection, so it counts as an answer.
async fn answers_ping(sink: &mut PubSubSink) -> bool {
    match tokio::time::timeout(LISTENER_TIMEOUT, sink.ping::<redis::Value>()).await {
        Ok(Ok(_)) => true,
        Ok(Err(error)) => error.code().is_some(),
        Err(_) => false,
    }
}

#[cfg(feature = "cluster")]
impl<S: NoticeSink> Listener<S> {
    /// Serves a cluster member's notices through the cluster connection `connecting` makes,
    /// whose pushes come on `heard` (see the module docs).
    async fn serve_cluster(
        &mut self,
        connecting: impl Future<Output = redis::RedisResult<redis::cluster_async::ClusterConnection>>,
        mut heard: mpsc::UnboundedReceiver<redis::PushInfo>,
    ) -> Stop {
        // As long as making the member's own connection may take (a node that does not answer
        // costs its own bound).
        let limit = super::reconnect::CLUSTER_CONNECT_TIMEOUT;
        let Ok(Ok(mut connection)) = tokio::time::timeout(limit, connecting).await else {
            return Stop::Lost { served: false };
        };
        // As for a standalone server: the snapshot taken after the commands covers them.
        let confirmations = self.drain();
        let Some(channels) = self.subscribed(Member::Cluster) else {
            return Stop::SinkGone;
        };
        // Each channel on the master of its slot, all at once.
        let subscribed = futures::future::join_all(channels.keys().map(|channel| {
            let mut connection = connection.clone();
            async move { ssubscribe(&mut connection, channel).await }
        }));
        if let Some(Err(stop)) = subscribed.await.into_iter().find(Result::is_err) {
            return stop;
        }
        let mut channels = channels;
        for confirm in confirmations {
            let _ = confirm.send(());
        }
        tracing::debug!(
            node = self.node,
            "release listener connected to a Redis Cluster"
        );
        let mut sweep = tokio::time::interval(self.sweep_every);
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                push = heard.recv() => {
                    let Some(push) = push else {
                        return Stop::Lost { served: true };
                    };
                    if push.kind == redis::PushKind::SUnsubscribe {
                        // The slot went to another master: subscribe again where it is now.
                        let channel = push.data.first().and_then(bulk_text);
                        if let Some(channel) = channel.filter(|c| channels.contains_key(c))
                            && let Err(stop) = ssubscribe(&mut connection, &channel).await
                        {
                            return stop;
                        }
                        continue;
                    }
                    let Some(message) = redis::Msg::from_push_info(push) else {
                        continue;
                    };
                    let Some(name) = channels.get(message.get_channel_name()) else {
                        continue;
                    };
                    let Some(sink) = self.sink.upgrade() else {
                        return Stop::SinkGone;
                    };
                    sink.notice(self.node, name, message.get_payload_bytes(), Instant::now());
                }
                command = self.commands.recv() => {
                    let Some(command) = command else {
                        return Stop::SinkGone;
                    };
                    match command {
                        Command::Subscribe(topic, confirm) => {
                            // A name without a slot prefix has no notices here: never confirmed.
                            let Some(channel) = topic.channel(Member::Cluster, self.client) else {
                                continue;
                            };
                            if let Err(stop) = ssubscribe(&mut connection, &channel).await {
                                return stop;
                            }
                            channels.insert(channel, Arc::clone(topic.name()));
                            if let Some(confirm) = confirm {
                                let _ = confirm.send(());
                            }
                        }
                        Command::Unsubscribe(topic) => {
                            let Some(channel) = topic.channel(Member::Cluster, self.client) else {
                                continue;
                            };
                            channels.remove(&channel);
                            if !bounded(connection.sunsubscribe(&channel)).await {
                                return Stop::Lost { served: true };
                            }
                        }
                    }
                }
                _ = sweep.tick() => {
                    let Some(sink) = self.sink.upgrade() else {
                        return Stop::SinkGone;
                    };
                    sink.sweep();
                }
                _ = ping.tick() => {
                    let answered = tokio::time::timeout(
                        LISTENER_TIMEOUT,
                        super::cluster::ping(connection.clone()),
                    );
                    if !matches!(answered.await, Ok(Ok(_))) {
                        tracing::debug!(node = self.node, "release listener: a master did not answer PING");
                        return Stop::Lost { served: true };
                    }
                }
            }
        }
    }
}

/// Subscribes a cluster connection to a sharded channel, on the master of its slot.
#[cfg(feature = "cluster")]
async fn ssubscribe(
    connection: &mut redis::cluster_async::ClusterConnection,
    channel: &str,
) -> Result<(), Stop> {
    match tokio::time::timeout(LISTENER_TIMEOUT, connection.ssubscribe(channel)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) if error.kind() == redis::ErrorKind::RESP3NotSupported => {
            tracing::warn!(
                "a Redis Cluster member's client speaks RESP2: its release notices cannot reach \
                 this client (build the ClusterClient with use_protocol(ProtocolVersion::RESP3)); \
                 its waiters poll instead"
            );
            Err(Stop::Deaf)
        }
        _ => Err(Stop::Lost { served: true }),
    }
}

#[cfg(feature = "cluster")]
fn bulk_text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    }
}

async fn bounded(call: impl Future<Output = redis::RedisResult<()>>) -> bool {
    matches!(
        tokio::time::timeout(LISTENER_TIMEOUT, call).await,
        Ok(Ok(()))
    )
}
