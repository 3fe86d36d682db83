//! redmutex's own connection to one node, for clients built from URLs or `redis::Client`s: made on
//! first use, re-made after any failure, and replaced when it goes silent while a fresh
//! connection to the same node answers.
//!
//! **Failures.** A connection whose I/O failed is dropped, and a new one is made at once in the
//! background. A connection that could not be made (refused, timed out, or its set-up refused:
//! wrong credentials, `maxclients` reached) is tried again on a later call, after a backoff that
//! doubles from 50 ms to 1 s. A call that comes during the backoff fails at once with the error of
//! the last attempt, so no call ever waits for the backoff: its own node timeout is the only bound
//! on it, and it reports why the node is out rather than a bare timeout.
//!
//! **Silence.** A half-open connection shows no error; `health` says how one is found out and
//! replaced, and why that is safe.
//!
//! **Why replacing needs that proof.** Each node's requests run in the order they were sent because
//! they share one connection (see `engine::fanout::Stragglers`): a SET already sent runs before the release
//! sent after it. A node that is merely stalled (SIGSTOP, a long script, a fork) also looks silent,
//! but it cannot answer a fresh connection either, so it keeps its connection, and when it resumes
//! it runs what was queued there, in order, before anything newer. And a suspect connection whose
//! `PING` is answered has run everything queued before that `PING`, so it is kept too. What is left
//! is a connection whose bytes do not reach the node while a fresh one's do: a flow that is dead
//! for good (the requests queued on it never run), or, rarely, one whose packets the network still
//! holds (TCP retransmitting after an outage that ended before the probe). Only in that last case
//! can a request of the old connection run after newer ones; `README.md` (Fail-fast) says what that
//! costs.
//!
//! **A cluster member.** A connection whose node answers `cluster_enabled:1` to `INFO cluster`
//! (asked in the round trip that asks its version), or a `MOVED` where `INFO` is refused, is made
//! again as the redis crate's cluster client over the whole cluster (see `cluster`), as is a
//! caller's `ClusterClient` from the start. That client keeps a connection per node of the
//! cluster, re-makes one after an I/O error, follows `MOVED` and `ASK` and refreshes its slot map,
//! so none of that is done here. What this file still gives it is what the crate lacks: the
//! set-up in the background with a backoff, calls that fail at once during the backoff (rather
//! than wait in the crate's retries), the version gate, and the probe of `health`, whose `PING`
//! goes to every master, on the suspect connection and on a fresh one: it finds out a cluster
//! that went silent as a whole (a dead path to it), with the same proof as above, since each of
//! the crate's node connections keeps its order. A single master that goes half-open while the
//! others answer is not found out (any reply resets the count of silent calls): its calls cost
//! their timeouts until TCP gives up on the flow, or until a failover's new owner is learned from
//! another command's `MOVED`. No response timeout of the crate's own would do better: it would
//! also drop the connection of a stalled master, whose queued requests must keep their order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::future::{FutureExt, Shared, join_all};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use super::Member;
use super::health::{Health, nanos_now, probe};
use super::member::MemberClient;
use super::script::Script;
use super::version::{
    Needs, ServerVersion, cluster_enabled, info_cluster, info_server, script_version,
};
use crate::error::NodeErrorKind;

/// Bound on making a connection: TCP (and TLS) handshake, the redis crate's set-up (AUTH, SELECT,
/// CLIENT SETINFO), our PING and the question of the node's version. Calls never wait this long
/// (their node timeout bounds them); it only decides when an attempt that hangs is given up, so
/// that a later call can start another.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The same bound on making a connection to a whole cluster: the seed node's, the cluster's map
/// of slots, a connection to each of its nodes (each bounded by [`CONNECT_TIMEOUT`], all at
/// once), its masters' versions and the scripts. A node that does not answer (a host gone, not
/// yet failed over) costs its own bound, not the cluster's.
pub(crate) const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a failed attempt to connect before the next one, doubled after each failure.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A connection to one node that remakes itself. Shared by every clone of its
/// [`NodeConnection`](crate::NodeConnection).
pub(crate) struct Reconnecting {
    client: MemberClient,
    /// The node's address for traces, without credentials.
    address: String,
    /// Loaded into the node's cache on every new connection.
    scripts: &'static [Script],
    slot: Mutex<Slot>,
    /// Whether the latest connection reaches a Redis Cluster: what [`member`](Self::member) reads
    /// on every call, without the slot's lock.
    cluster: AtomicBool,
    /// Whether [`cluster`](Self::cluster) is known: a connection was made, or the client is a
    /// cluster client.
    known: AtomicBool,
    /// A `MOVED` reply showed a cluster that `INFO` did not (refused): every connection from then
    /// on is made as a cluster's.
    moved: AtomicBool,
}

enum Slot {
    /// No connection: none was needed yet, or the last one was lost or could not be made.
    Idle {
        /// Why the last attempt failed, and until when calls get that error instead of a new
        /// attempt.
        failed: Option<(RedisError, Instant)>,
        /// The pause after the next failed attempt.
        backoff: Duration,
    },
    /// An attempt in progress, shared by every call waiting for it.
    Connecting(Pending),
    Ready(Live),
}

/// The outcome of an attempt to connect, made by a task of its own and awaited by any number of
/// calls. Only the task polls the attempt: a runtime that shuts down drops it (and a call on
/// another runtime never polls I/O or timers of the dead one), which reads as [`abandoned`].
type Pending = Shared<oneshot::Receiver<RedisResult<Live>>>;

/// A connection that was made, and how it has been answering.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) link: Link,
    pub(super) health: Arc<Health>,
    /// What the node said of its version when this connection was made (for a cluster, its
    /// oldest master).
    version: ServerVersion,
}

/// What a connection that was made talks through.
#[derive(Clone)]
pub(super) enum Link {
    /// One standalone server.
    Node(MultiplexedConnection),
    /// A whole Redis Cluster, through the redis crate's cluster client.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Live {
    pub(super) fn new(link: Link, version: ServerVersion) -> Live {
        Live {
            link,
            health: Arc::new(Health::default()),
            version,
        }
    }

    fn member(&self) -> Member {
        match self.link {
            Link::Node(_) => Member::Standalone,
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => Member::Cluster,
        }
    }
}

/// What a call sends: one command, or several pipelined.
#[derive(Clone, Copy)]
pub(crate) enum Packed<'a> {
    One(&'a Cmd),
    Pipeline(&'a Pipeline),
}

/// What a call gets to send on.
enum Current {
    Ready(Live),
    Pending(Pending),
    Failed(RedisError),
}

impl Reconnecting {
    /// Makes nothing yet: the first call connects.
    pub(crate) fn new(client: MemberClient, scripts: &'static [Script]) -> Reconnecting {
        Reconnecting {
            address: client.address(),
            cluster: AtomicBool::new(client.is_cluster()),
            known: AtomicBool::new(client.is_cluster()),
            client,
            scripts,
            slot: Mutex::new(Slot::Idle {
                failed: None,
                backoff: BACKOFF_MIN,
            }),
            moved: AtomicBool::new(false),
        }
    }

    /// What the client connects to: a caller's cluster client, or the node of a URL or a
    /// `redis::Client`.
    pub(crate) fn client(&self) -> &MemberClient {
        &self.client
    }

    /// What kind of member the latest connection reached; a standalone server until one was made.
    // Requests read it to pick their form; in this layer only the cluster listener does.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn member(&self) -> Member {
        if self.cluster.load(Ordering::Relaxed) {
            Member::Cluster
        } else {
            Member::Standalone
        }
    }

    /// Sends one command, connecting first if needed. Unbounded, like the redis crate's own
    /// calls: the fan-out races it against the node timeout.
    ///
    /// Cancel safety: dropping the call before the connection is ready never sends the command
    /// (the attempt to connect goes on in its own task); dropping it after hands the command to
    /// the connection or not, as for a `MultiplexedConnection`.
    pub(crate) async fn send(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        self.sending(Packed::One(cmd), |_| Ok(()), |error| error)
            .await
    }

    /// Sends one command or a pipeline (whose replies come as an array) of a primitive that
    /// `needs` a version, as [`send`](Self::send) does, unless the connection's node runs one too
    /// old: then nothing is sent (see `version`).
    pub(crate) async fn send_for(
        self: &Arc<Self>,
        needs: &'static Needs,
        packed: Packed<'_>,
    ) -> Result<Value, NodeErrorKind> {
        self.sending(packed, |version| version.allows(needs), node_error)
            .await
    }

    /// The version of the node, as its current connection learned it (connecting first if
    /// needed).
    pub(crate) async fn version(self: &Arc<Self>) -> RedisResult<ServerVersion> {
        Ok(self.live().await?.version)
    }

    /// The connection to the whole cluster if the current connection reaches one (connecting
    /// first if needed).
    #[cfg(feature = "cluster")]
    pub(crate) async fn cluster(
        self: &Arc<Self>,
    ) -> RedisResult<Option<redis::cluster_async::ClusterConnection>> {
        Ok(match self.live().await?.link {
            Link::Cluster(connection) => Some(connection),
            Link::Node(_) => None,
        })
    }

    async fn live(self: &Arc<Self>) -> RedisResult<Live> {
        match self.current() {
            Current::Ready(live) => Ok(live),
            Current::Pending(pending) => pending.await.unwrap_or_else(|_| Err(abandoned())),
            Current::Failed(error) => Err(error),
        }
    }

    /// Sends `packed` on the current connection if `gate` lets its node's version through; one
    /// body for calls with and without a gate, so that neither pays an async layer more.
    async fn sending<E>(
        self: &Arc<Self>,
        packed: Packed<'_>,
        gate: impl FnOnce(ServerVersion) -> Result<(), E>,
        error: fn(RedisError) -> E,
    ) -> Result<Value, E> {
        let mut live = match self.current() {
            Current::Ready(live) => live,
            Current::Pending(pending) => pending
                .await
                .unwrap_or_else(|_| Err(abandoned()))
                .map_err(error)?,
            Current::Failed(failed) => return Err(error(failed)),
        };
        gate(live.version)?;
        if live.health.sent(nanos_now) {
            self.probe(&live);
        }
        let reply = match (&mut live.link, packed) {
            (Link::Node(connection), Packed::One(cmd)) => connection.send_packed_command(cmd).await,
            (Link::Node(connection), Packed::Pipeline(pipeline)) => connection
                .send_packed_commands(pipeline, 0, pipeline.len())
                .await
                .map(Value::Array),
            #[cfg(feature = "cluster")]
            (Link::Cluster(connection), packed) => cluster_send(connection, packed).await,
        };
        match &reply {
            Err(failed) if failed.is_unrecoverable_error() => self.lost(&live, failed),
            Ok(reply) if matches!(live.link, Link::Node(_)) && redirected(reply) => {
                return Err(error(self.moved(&live)));
            }
            _ => live.health.answered(),
        }
        reply.map_err(error)
    }

    /// Starts connecting if there is no connection and no backoff in force; for the warm-up.
    pub(crate) async fn connect(self: &Arc<Self>) -> RedisResult<()> {
        match self.current() {
            Current::Ready(_) => Ok(()),
            Current::Pending(pending) => {
                pending.await.unwrap_or_else(|_| Err(abandoned())).map(drop)
            }
            Current::Failed(error) => Err(error),
        }
    }

    /// [`member`](Self::member) once a connection was made (or the client is a cluster
    /// client); `None` before.
    pub(crate) fn known_member(&self) -> Option<Member> {
        self.known.load(Ordering::Acquire).then(|| self.member())
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Every change of the slot is one assignment, so a panic elsewhere cannot leave it torn.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(self: &Arc<Self>) -> Current {
        let mut slot = self.slot();
        let backoff = match &*slot {
            Slot::Ready(live) => return Current::Ready(live.clone()),
            Slot::Connecting(pending) => return Current::Pending(pending.clone()),
            Slot::Idle {
                failed: Some((error, retry_at)),
                ..
            } if Instant::now() < *retry_at => return Current::Failed(error.clone()),
            Slot::Idle { backoff, .. } => *backoff,
        };
        let Some(connecting) = self.connecting(backoff) else {
            return Current::Failed(no_runtime());
        };
        let pending = connecting.pending.clone();
        *slot = Slot::Connecting(pending.clone());
        drop(slot);
        connecting.start();
        Current::Pending(pending)
    }

    /// An attempt to connect, not started yet; `None` outside a tokio runtime. See [`Connecting`].
    fn connecting(
        self: &Arc<Self>,
        backoff: Duration,
    ) -> Option<Connecting<impl Future<Output = ()> + Send + 'static>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (report, pending) = oneshot::channel();
        let mut attempt = Attempt {
            this: Arc::downgrade(self),
            settled: false,
        };
        let (client, scripts) = (self.client.clone(), self.scripts);
        let moved = self.moved.load(Ordering::Relaxed);
        let task = async move {
            let outcome = open(&client, scripts, moved).await;
            attempt.settle(&outcome, backoff);
            let _ = report.send(outcome);
        };
        Some(Connecting {
            runtime,
            task,
            pending: pending.shared(),
        })
    }

    fn settle(&self, outcome: Option<&RedisResult<Live>>, backoff: Duration) {
        let mut slot = self.slot();
        // Only an attempt in progress can settle, and there is one at most.
        if !matches!(*slot, Slot::Connecting(_)) {
            return;
        }
        let Some(outcome) = outcome else {
            // Abandoned (its runtime shut down): the next call starts another at once.
            *slot = Slot::Idle {
                failed: None,
                backoff,
            };
            return;
        };
        *slot = match outcome {
            Ok(live) => {
                tracing::debug!(node = %self.address, member = ?live.member(), "node connection made");
                self.cluster
                    .store(live.member() == Member::Cluster, Ordering::Relaxed);
                self.known.store(true, Ordering::Release);
                Slot::Ready(live.clone())
            }
            Err(error) => {
                tracing::debug!(node = %self.address, %error, ?backoff, "node connection failed");
                Slot::Idle {
                    failed: Some((error.clone(), Instant::now() + jittered(backoff))),
                    backoff: (backoff * 2).min(BACKOFF_MAX),
                }
            }
        };
    }

    /// The connection `live` failed: it is dropped, and a new one is made at once.
    pub(super) fn lost(self: &Arc<Self>, live: &Live, error: &RedisError) {
        let mut slot = self.slot();
        if matches!(&*slot, Slot::Ready(current) if current.is(live)) {
            tracing::debug!(node = %self.address, %error, "node connection lost, reconnecting");
            let Some(connecting) = self.connecting(BACKOFF_MIN) else {
                *slot = Slot::Idle {
                    failed: None,
                    backoff: BACKOFF_MIN,
                };
                return;
            };
            *slot = Slot::Connecting(connecting.pending.clone());
            drop(slot);
            connecting.start();
        }
    }

    /// A standalone connection `live` had a reply that only a cluster node gives (`MOVED`, `ASK`):
    /// its node runs Redis Cluster although `INFO` did not say (refused). The connection is
    /// dropped and the next one made as a cluster's (see `cluster`); the call that met the
    /// redirection gets the error to report.
    fn moved(self: &Arc<Self>, live: &Live) -> RedisError {
        self.moved.store(true, Ordering::Relaxed);
        let error = cluster_node_error();
        tracing::debug!(node = %self.address, "a redirection: the node runs Redis Cluster");
        self.lost(live, &error);
        error
    }

    /// Starts a probe of the suspect connection `live`, unless one runs or ran a moment ago.
    fn probe(self: &Arc<Self>, live: &Live) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if live.health.start_probe(nanos_now()) {
            runtime.spawn(probe(
                Arc::downgrade(self),
                self.client.clone(),
                self.scripts,
                self.moved.load(Ordering::Relaxed),
                live.clone(),
            ));
        }
    }

    /// The probe found `old` silent while `fresh` answered.
    pub(super) fn replace(&self, old: &Live, fresh: Live) {
        let mut slot = self.slot();
        if matches!(&*slot, Slot::Ready(current) if current.is(old)) {
            tracing::debug!(
                node = %self.address,
                "node connection went silent while a new one answered: replaced"
            );
            self.cluster
                .store(fresh.member() == Member::Cluster, Ordering::Relaxed);
            *slot = Slot::Ready(fresh);
        }
    }
}

/// An attempt to connect, run by a task of its own so that it completes even when every call
/// waiting for it gave up. Its outcome settles the slot; a failure sets the next attempt its
/// backoff later. Made under the slot's lock, which then records it as the attempt in progress,
/// and started only once that lock is released: a runtime that is shutting down drops the task at
/// once, and its [`Attempt`] then settles the slot, which takes the lock.
struct Connecting<F> {
    runtime: tokio::runtime::Handle,
    task: F,
    pending: Pending,
}

impl<F: Future<Output = ()> + Send + 'static> Connecting<F> {
    fn start(self) {
        self.runtime.spawn(self.task);
    }
}

/// An attempt to connect, as its task sees it: settles the slot once, even when the task is
/// dropped before the attempt ends.
struct Attempt {
    this: Weak<Reconnecting>,
    settled: bool,
}

impl Attempt {
    fn settle(&mut self, outcome: &RedisResult<Live>, backoff: Duration) {
        self.settled = true;
        if let Some(this) = self.this.upgrade() {
            this.settle(Some(outcome), backoff);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.settled
            && let Some(this) = self.this.upgrade()
        {
            this.settle(None, BACKOFF_MIN);
        }
    }
}

/// Makes a connection and checks that the node serves it: the redis crate's set-up (AUTH and
/// SELECT as the client says), then one round trip that carries a PING, asks the node's version
/// (`INFO server`; a second round trip asks a script where `INFO` is refused, see `version`) and
/// whether it runs Redis Cluster (`INFO cluster`), and loads the scripts. A cluster node's
/// connection is then made again as the whole cluster's (see `cluster`), as is one after a
/// `MOVED` reply (`moved`). Bounded by [`CONNECT_TIMEOUT`], and [`CLUSTER_CONNECT_TIMEOUT`] for a
/// cluster. No timeouts of the driver's own on calls: the node timeout of each call is the only
/// bound (see [`NodeConnection`](crate::NodeConnection)).
pub(super) async fn open(
    client: &MemberClient,
    scripts: &[Script],
    moved: bool,
) -> RedisResult<Live> {
    // Without the `cluster` feature a node's client is the only kind.
    #[cfg_attr(
        not(feature = "cluster"),
        allow(clippy::infallible_destructuring_match)
    )]
    let client = match client {
        MemberClient::Node(client) => client,
        #[cfg(feature = "cluster")]
        MemberClient::Cluster(cluster) => {
            let opened = super::cluster::open(cluster, scripts);
            return bounded(CLUSTER_CONNECT_TIMEOUT, opened).await;
        }
    };
    if !moved {
        match bounded(CONNECT_TIMEOUT, open_node(client, scripts)).await? {
            Opened::Node(live) => return Ok(live),
            Opened::Cluster => {}
        }
    }
    bounded(CLUSTER_CONNECT_TIMEOUT, open_cluster_of(client, scripts)).await
}

/// `attempt`'s outcome, or a timeout's error after `limit`.
async fn bounded<T>(
    limit: Duration,
    attempt: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or_else(|_| Err(timed_out(limit)))
}

/// What a connection to a node found.
enum Opened {
    Node(Live),
    /// The node runs Redis Cluster: the connection is to be made as the cluster's.
    Cluster,
}

/// The connection to a node as a standalone server, unless it runs Redis Cluster.
async fn open_node(client: &Client, scripts: &[Script]) -> RedisResult<Opened> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    let connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let ping = redis::cmd("PING");
    let loads: Vec<Cmd> = scripts
        .iter()
        .map(|script| redis::cmd("SCRIPT").arg("LOAD").arg(script.text()).clone())
        .collect();
    let send = |cmd: &Cmd| {
        let mut connection = connection.clone();
        let cmd = cmd.clone();
        async move { connection.send_packed_command(&cmd).await }
    };
    let (info, cluster) = (info_server(), info_cluster());
    // Issued in this order on the one connection: the PING first, then INFO and the loads.
    let (pong, info, cluster, _) = futures::join!(
        send(&ping),
        send(&info),
        send(&cluster),
        join_all(loads.iter().map(send))
    );
    check_pong(pong?)?;
    if cluster_enabled(&cluster?) {
        return Ok(Opened::Cluster);
    }
    let version = match ServerVersion::from_info_reply(info?)? {
        Some(version) => version,
        None => ServerVersion::from_script_reply(send(&script_version()).await?)?,
    };
    tracing::debug!(node = %address_of(client), %version, "node version");
    Ok(Opened::Node(Live::new(Link::Node(connection), version)))
}

/// The connection to the whole cluster that `client`'s node belongs to; without the `cluster`
/// feature, the error that names it.
async fn open_cluster_of(client: &Client, scripts: &[Script]) -> RedisResult<Live> {
    #[cfg(feature = "cluster")]
    {
        let cluster = super::cluster::client_of(client)?;
        super::cluster::open(&cluster, scripts).await
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (client, scripts);
        Err(cluster_node_error())
    }
}

/// Sends on a cluster connection: one boxed future whichever `packed` is (the crate boxes its
/// calls anyway), so that the cluster adds one small state to the future of every call, a
/// standalone member's too.
#[cfg(feature = "cluster")]
#[inline(never)]
fn cluster_send<'a>(
    connection: &'a mut redis::cluster_async::ClusterConnection,
    packed: Packed<'a>,
) -> redis::RedisFuture<'a, Value> {
    use redis::aio::ConnectionLike;
    match packed {
        Packed::One(cmd) => connection.req_packed_command(cmd),
        Packed::Pipeline(pipeline) => Box::pin(async move {
            connection
                .req_packed_commands(pipeline, 0, pipeline.len())
                .await
                .map(Value::Array)
        }),
    }
}

/// Whether a standalone connection's reply is a cluster's redirection, alone or in a pipeline's
/// replies.
fn redirected(reply: &Value) -> bool {
    let redirection = |value: &Value| matches!(value, Value::ServerError(error) if matches!(error.code(), "MOVED" | "ASK"));
    match reply {
        Value::Array(replies) => replies.iter().any(redirection),
        reply => redirection(reply),
    }
}

/// What a node of a Redis Cluster answers when it was met through a standalone connection: with
/// the `cluster` feature, the call that met it fails while the connection is made again as the
/// cluster's; without it, every call does (see [`node_error`]).
const CLUSTER_NODE: &str = "a Redis Cluster node met through a standalone connection";

fn cluster_node_error() -> RedisError {
    #[cfg(feature = "cluster")]
    let detail = "connecting to the whole cluster as one member";
    #[cfg(not(feature = "cluster"))]
    let detail =
        "a cluster member needs redmutex's `cluster` feature (on by default; turned off here)";
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        CLUSTER_NODE,
        detail.to_owned(),
    ))
}

/// A call's error as the lock layer reports it: without the `cluster` feature, a cluster node's
/// is [`NodeErrorKind::ClusterFeatureOff`], a refusal.
pub(crate) fn node_error(error: RedisError) -> NodeErrorKind {
    #[cfg(not(feature = "cluster"))]
    if error.kind() == redis::ErrorKind::InvalidClientConfig
        && error.to_string().starts_with(CLUSTER_NODE)
    {
        return NodeErrorKind::ClusterFeatureOff;
    }
    NodeErrorKind::Redis(error)
}

/// Whether a PING's reply shows a connection the node serves. A node that refuses the PING for
/// lack of permission still serves the connection; any other error (`NOAUTH`, `LOADING`, `ERR max
/// number of clients reached`) means it does not, for now.
fn check_pong(reply: Value) -> RedisResult<()> {
    match reply {
        Value::ServerError(error) if error.code() != "NOPERM" => Err(error.into()),
        _ => Ok(()),
    }
}

/// A client's address for messages, e.g. `rediss://10.0.0.1:6380`: never its credentials.
pub(crate) fn address_of(client: &Client) -> String {
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}"),
        other => other.to_string(),
    }
}

/// The error of calls that waited for an attempt whose runtime shut down.
fn abandoned() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "connecting was abandoned: the runtime that ran it shut down",
    ))
}

fn no_runtime() -> RedisError {
    RedisError::from(std::io::Error::other("no tokio runtime to connect on"))
}

fn timed_out(after: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("connecting timed out after {after:?}"),
    ))
}

/// A random pause in `[backoff / 2, backoff]`, so that many clients that lost a node at once do
/// not come back in step.
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

impl Live {
    pub(super) fn is(&self, other: &Live) -> bool {
        Arc::ptr_eq(&self.health, &other.health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pong_or_a_permission_error_is_a_served_connection() {
        let error = |text: &[u8]| redis::parse_redis_value(text).unwrap();
        assert!(check_pong(Value::SimpleString("PONG".into())).is_ok());
        assert!(check_pong(error(b"-NOPERM no permissions to run 'ping'\r\n")).is_ok());
        for refusal in [
            &b"-ERR max number of clients reached\r\n"[..],
            b"-NOAUTH Authentication required.\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
        ] {
            assert!(check_pong(error(refusal)).is_err());
        }
    }

    /// A URL of a cluster node: the whole cluster with the `cluster` feature, else an error that
    /// names it. `cargo test --lib --no-default-features -- nodes::reconnect` runs the other side.
    #[tokio::test]
    async fn a_cluster_node_stands_for_its_cluster_or_names_the_feature() {
        let cluster = redmutex_testenv::RedisCluster::start(1, 0);
        let client = MemberClient::Node(Client::open(cluster.seed_url()).expect("a URL"));
        let opened = open(&client, &[], false).await;
        #[cfg(feature = "cluster")]
        {
            let live = opened.unwrap_or_else(|error| panic!("the cluster connects: {error}"));
            assert_eq!(live.member(), Member::Cluster);
            assert!(
                matches!(live.version, ServerVersion::Redis(_)),
                "{}",
                live.version
            );
        }
        #[cfg(not(feature = "cluster"))]
        {
            let Err(error) = opened else {
                panic!("a cluster node is refused without the feature");
            };
            let error = node_error(error);
            assert!(matches!(error, NodeErrorKind::ClusterFeatureOff), "{error}");
            assert!(error.to_string().contains("`cluster` feature"), "{error}");
            assert!(error.is_refusal());
        }
    }

    /// A user who may not run `INFO`: the cluster shows in the first `MOVED`, after which the
    /// connection is made again as the cluster's (or, without the feature, every call is refused,
    /// never sent on to follow redirections).
    #[tokio::test]
    async fn a_moved_reply_shows_a_cluster_that_info_did_not() {
        let cluster = redmutex_testenv::RedisCluster::start(3, 0);
        for node in cluster.nodes() {
            node.acl_setuser("app", &["on", ">pw", "~*", "&*", "+@all", "-info"]);
        }
        let seed = cluster.nodes()[0].port();
        let url = format!("redis://app:pw@127.0.0.1:{seed}/");
        let this = Arc::new(Reconnecting::new(
            MemberClient::Node(Client::open(url).expect("a URL")),
            &[],
        ));
        let other = cluster.masters().into_iter().find(|m| m.port() != seed);
        let elsewhere = cluster.key_on(other.expect("another master"), "moved:");
        let mut set = Cmd::new();
        set.arg("SET").arg(&elsewhere).arg("v");
        let first = this.send(&set).await;
        assert_eq!(
            this.member(),
            Member::Standalone,
            "INFO is refused: {first:?}"
        );
        let Err(first) = first else {
            panic!("a MOVED is the call's error, never a success");
        };
        assert!(first.to_string().contains("Redis Cluster node"), "{first}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let next = this.send(&set).await;
            #[cfg(feature = "cluster")]
            if let Ok(reply) = &next {
                assert_eq!(*reply, Value::Okay);
                assert_eq!(this.member(), Member::Cluster);
                assert_eq!(cluster.get(&elsewhere).as_deref(), Some("v"));
                return;
            }
            #[cfg(not(feature = "cluster"))]
            if let Err(error) = &next
                && matches!(node_error(error.clone()), NodeErrorKind::ClusterFeatureOff)
            {
                assert!(!cluster.exists(&elsewhere));
                return;
            }
            assert!(Instant::now() < deadline, "still {next:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A connection wanted while its runtime shuts down (a task's destructor, run by the shutdown,
    /// that sends on it): the runtime refuses the connecting task and drops it at once, and its
    /// `Attempt` settles the slot. That must not happen under the slot's lock, which is not
    /// reentrant: the shutdown hung there, seen as a suite test that never ended.
    #[test]
    fn a_connection_wanted_while_the_runtime_shuts_down_does_not_hang_it() {
        struct SendsOnDrop(Arc<Reconnecting>);
        impl Drop for SendsOnDrop {
            fn drop(&mut self) {
                assert!(matches!(
                    self.0.current(),
                    Current::Pending(_) | Current::Failed(_)
                ));
            }
        }
        let this = Arc::new(Reconnecting::new(
            MemberClient::Node(Client::open("redis://127.0.0.1:1/").expect("a URL")),
            &[],
        ));
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let guard = SendsOnDrop(this);
            runtime.spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await
            });
            drop(runtime);
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the runtime shut down, rather than hang on the slot's lock");
    }

    #[test]
    fn backoff_is_jittered_below_its_value() {
        for _ in 0..100 {
            let pause = jittered(BACKOFF_MAX);
            assert!(pause >= BACKOFF_MAX / 2 && pause <= BACKOFF_MAX);
        }
    }
}
