//! The connection to one node, shared by every mutex and lock of a client.

use std::fmt;
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use futures::future::Either;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, RedisFuture, RedisResult, Value};

use super::Member;
use super::member::MemberClient;
pub(crate) use super::reconnect::Packed;
use super::reconnect::{Reconnecting, node_error};
use super::script::Script;
use super::servers::Seat;
use super::version::{Needs, ServerVersion, info_server, script_version};
use crate::error::NodeErrorKind;

/// A connection to one member of the quorum, shared by every mutex and lock of a
/// [`Redlock`](crate::Redlock).
///
/// [`Redlock::connect`](crate::Redlock::connect) and
/// [`Redlock::from_clients`](crate::Redlock::from_clients) make redmutex's own connections, which
/// come back by themselves after any failure and also serve wake-up on release: prefer those. This
/// type is for [`Redlock::new`](crate::Redlock::new), with connections the caller made: the redis
/// crate's [`ConnectionManager`] (reconnects after I/O errors, but never after a failed set-up
/// and never on a half-open connection) or a plain [`MultiplexedConnection`] (never reconnects) to
/// one standalone server, or, with the `cluster` feature, a
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection) to a whole Redis Cluster (made by
/// a `ClusterClient`; it follows the cluster's topology itself). Either way redmutex bounds every
/// call by its own per-node timeout, so build them **without** response and connect timeouts of
/// their own (`set_response_timeout(None)` and `set_connection_timeout(None)` on
/// `ConnectionManagerConfig` or `AsyncConnectionConfig`; no `response_timeout` on a
/// `ClusterClientBuilder`): the redis crate's defaults (500 ms, 1 s) would cut node calls short.
///
/// redmutex asks each node its version (`INFO server`) when it makes a connection, and refuses a
/// primitive on a node too old for it ([`NodeErrorKind::TooOld`]). A connection built by the
/// caller is asked once, on first use (or by the warm-up of [`Redlock::new`](crate::Redlock::new)),
/// and keeps that answer even if the node behind it is later upgraded.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use redmutex::{NodeConnection, Redlock};
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let mut connections = Vec::new();
/// for url in cluster.urls() {
///     let config = ConnectionManagerConfig::new()
///         .set_response_timeout(None)
///         .set_connection_timeout(None);
///     let manager = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
///     connections.push(NodeConnection::from(manager));
/// }
/// let redlock = Redlock::new(connections)?;
/// # let lock = redlock.new_mutex("doc:node-connection").lock().await?;
/// # lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// A whole Redis Cluster as one member, through a connection of the redis crate's cluster client:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redis::cluster::ClusterClient;
/// use redmutex::{NodeConnection, Redlock};
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::RedisCluster::start(3, 0);
/// let client = ClusterClient::new(cluster.urls())?; // no response timeout by default
/// let connection = client.get_async_connection().await?;
/// let redlock = Redlock::new([NodeConnection::from(connection)])?;
/// assert_eq!(redlock.len(), 1);
/// let lock = redlock.new_mutex("doc:cluster-connection").lock().await?;
/// lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct NodeConnection(Inner);

#[derive(Clone)]
struct Inner {
    connection: Connection,
    /// The scripts loaded into the node, and named in its errors: the client's (see
    /// [`NodeConnection::with_scripts`]).
    scripts: &'static [Script],
}

#[derive(Clone)]
enum Connection {
    /// redmutex's own (see `reconnect`), which learns the node's version each time it connects.
    Own(Arc<Reconnecting>),
    /// The caller's, with the node's version once learned (on first use).
    Manager(ConnectionManager, Learned),
    Multiplexed(MultiplexedConnection, Learned),
    /// The caller's connection to a whole Redis Cluster, with the version of its oldest master.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection, Learned),
}

/// The future of a call on a caller's cluster connection.
type Boxed<'a> = futures::future::BoxFuture<'a, Result<Value, NodeErrorKind>>;

/// A node's version, as a connection the caller built learned it, shared by its clones.
type Learned = Arc<OnceLock<ServerVersion>>;

impl From<ConnectionManager> for NodeConnection {
    fn from(manager: ConnectionManager) -> Self {
        NodeConnection::caller_built(Connection::Manager(manager, Learned::default()))
    }
}

impl From<MultiplexedConnection> for NodeConnection {
    fn from(connection: MultiplexedConnection) -> Self {
        NodeConnection::caller_built(Connection::Multiplexed(connection, Learned::default()))
    }
}

#[cfg(feature = "cluster")]
impl From<redis::cluster_async::ClusterConnection> for NodeConnection {
    fn from(connection: redis::cluster_async::ClusterConnection) -> Self {
        NodeConnection::caller_built(Connection::Cluster(connection, Learned::default()))
    }
}

impl fmt::Debug for NodeConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The redis crate's own Debug output may include connection details; show the kind only.
        match self.0.connection {
            Connection::Own(_) => f.write_str("NodeConnection(reconnecting)"),
            Connection::Manager(..) => f.write_str("NodeConnection(ConnectionManager)"),
            Connection::Multiplexed(..) => f.write_str("NodeConnection(MultiplexedConnection)"),
            #[cfg(feature = "cluster")]
            Connection::Cluster(..) => f.write_str("NodeConnection(ClusterConnection)"),
        }
    }
}

impl NodeConnection {
    /// redmutex's own connection through `client`, made on first use (see `reconnect`), which
    /// loads `scripts` into the node's cache each time it connects.
    /// `seat`, where it has one, is its place among the members of its `Redlock` (see
    /// `servers`).
    pub(crate) fn reconnecting(
        client: MemberClient,
        scripts: &'static [Script],
        seat: Option<Seat>,
    ) -> NodeConnection {
        NodeConnection(Inner {
            connection: Connection::Own(Arc::new(Reconnecting::new(client, scripts, seat))),
            scripts,
        })
    }

    /// A connection the caller built: it loads no scripts until a client gives it its own.
    fn caller_built(connection: Connection) -> NodeConnection {
        NodeConnection(Inner {
            connection,
            scripts: &[],
        })
    }

    /// The same connection, loading `scripts` (on [`warm_up`](Self::warm_up)) and naming them in
    /// errors.
    pub(crate) fn with_scripts(mut self, scripts: &'static [Script]) -> NodeConnection {
        self.0.scripts = scripts;
        self
    }

    /// What kind of member this connection reaches, as far as it knows: a connection that has
    /// not yet learned it counts as a standalone server. redmutex's own connection learns it when
    /// it is made (a request's call waits for that, see [`learn_member`](Self::learn_member)); a
    /// caller's connection is what its type says.
    // Requests read it to pick their form; in this layer only the cluster listener does.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn member(&self) -> Member {
        match &self.0.connection {
            Connection::Own(c) => c.member(),
            Connection::Manager(..) | Connection::Multiplexed(..) => Member::Standalone,
            #[cfg(feature = "cluster")]
            Connection::Cluster(..) => Member::Cluster,
        }
    }

    /// What kind of member this connection reaches, where known: redmutex's own connection knows
    /// once it was made (see [`member`](Self::member)).
    pub(crate) fn known_member(&self) -> Option<Member> {
        match &self.0.connection {
            Connection::Own(c) => c.known_member(),
            _ => Some(self.member()),
        }
    }

    /// What kind of member this connection reaches, connecting first where that is not known
    /// yet: for a request's first call on redmutex's own connection, which must go out in the
    /// form of its member (a fenced acquire in the standalone form also reads a key of the
    /// previous layout, in another slot, which a cluster refuses).
    pub(crate) async fn learn_member(&mut self) -> Result<Member, NodeErrorKind> {
        if let Connection::Own(c) = &self.0.connection {
            c.version().await.map_err(node_error)?;
        }
        Ok(self.member())
    }

    /// What redmutex's own connection connects through; `None` for the caller's connections.
    pub(crate) fn client(&self) -> Option<&MemberClient> {
        match &self.0.connection {
            Connection::Own(c) => Some(c.client()),
            _ => None,
        }
    }

    /// The connection to the whole cluster, for a cluster member (connecting first if needed);
    /// `None` for a standalone one.
    #[cfg(feature = "cluster")]
    pub(crate) async fn cluster(
        &mut self,
    ) -> Result<Option<redis::cluster_async::ClusterConnection>, NodeErrorKind> {
        match &self.0.connection {
            Connection::Own(c) => c.cluster().await.map_err(node_error),
            Connection::Cluster(c, _) => Ok(Some(c.clone())),
            Connection::Manager(..) | Connection::Multiplexed(..) => Ok(None),
        }
    }

    /// Sends one command. Not an `async fn`: each async layer around the redis crate's large
    /// future costs a copy of it and a state machine on every node call. Errors the node replied
    /// with come back as [`Value::ServerError`].
    // Inlined, so that the large future it returns is built where its caller keeps it rather
    // than copied there: the cluster's arms made it big enough for the compiler to stop that.
    #[inline(always)]
    pub(crate) fn send<'a>(
        &'a mut self,
        cmd: &'a Cmd,
    ) -> impl Future<Output = RedisResult<Value>> + Send + 'a {
        let scripts = self.0.scripts;
        let sent = match &mut self.0.connection {
            Connection::Own(c) => Either::Left(c.send(cmd)),
            // The cluster's future named, for builds without the feature.
            Connection::Manager(c, _) => Either::Right(Either::<_, RedisFuture<'a, Value>>::Left(
                Either::Left(c.send_packed_command(cmd)),
            )),
            Connection::Multiplexed(c, _) => {
                Either::Right(Either::<_, RedisFuture<'a, Value>>::Left(Either::Right(
                    c.send_packed_command(cmd),
                )))
            }
            #[cfg(feature = "cluster")]
            Connection::Cluster(c, _) => Either::Right(Either::Right(c.req_packed_command(cmd))),
        };
        sent.map(move |reply| reply.map(|reply| name_script_command(reply, scripts)))
    }

    /// Sends one command or a pipeline (in one write; its replies come as one array, in order)
    /// of a primitive that `needs` a version, unless the node runs one too old (see `version`):
    /// then nothing is sent, and the answer is [`NodeErrorKind::TooOld`]. Errors the node replied
    /// with come back as [`Value::ServerError`]. Not an `async fn`, for the reason given at
    /// [`send`](Self::send).
    // Inlined, so that the large future it returns is built where its caller keeps it rather
    // than copied there: the cluster's arms made it big enough for the compiler to stop that.
    #[inline(always)]
    pub(crate) fn send_for<'a>(
        &'a mut self,
        needs: &'static Needs,
        packed: Packed<'a>,
    ) -> impl Future<Output = Result<Value, NodeErrorKind>> + Send + 'a {
        let scripts = self.0.scripts;
        let sent = match &mut self.0.connection {
            Connection::Own(c) => Either::Left(c.send_for(needs, packed)),
            Connection::Manager(c, learned) => Either::Right(Either::<_, Boxed<'a>>::Left(
                Either::Left(send_learning(c, learned, needs, packed)),
            )),
            Connection::Multiplexed(c, learned) => Either::Right(Either::<_, Boxed<'a>>::Left(
                Either::Right(send_learning(c, learned, needs, packed)),
            )),
            // Boxed, as the cluster client boxes each of its calls anyway.
            #[cfg(feature = "cluster")]
            Connection::Cluster(c, learned) => Either::Right(Either::Right(
                send_learning(c, learned, needs, packed).boxed(),
            )),
        };
        sent.map(move |reply| reply.map(|reply| name_script_command(reply, scripts)))
    }

    /// The node's version, as the gate of [`send_for`](Self::send_for) sees it: for redmutex's own
    /// connections, what the current connection learned when it was made (connecting first if
    /// needed); for the caller's, what was learned on first use, or now.
    pub(crate) async fn version(&mut self) -> Result<ServerVersion, NodeErrorKind> {
        match &mut self.0.connection {
            Connection::Own(c) => c.version().await.map_err(node_error),
            Connection::Manager(c, learned) => learn(c, learned).await,
            Connection::Multiplexed(c, learned) => learn(c, learned).await,
            #[cfg(feature = "cluster")]
            Connection::Cluster(c, learned) => learn(c, learned).await,
        }
    }

    /// Opens the connection and loads the scripts into the node's cache, so the first lock does
    /// not pay for the handshakes. redmutex's own connections load the scripts on every new
    /// connection; for the caller's, this is the only time.
    pub(crate) async fn warm_up(&mut self) -> RedisResult<()> {
        if let Connection::Own(c) = &self.0.connection {
            return c.connect().await;
        }
        if let Err(NodeErrorKind::Redis(error)) = self.version().await {
            return Err(error);
        }
        for script in self.0.scripts {
            // SCRIPT LOAD is idempotent.
            self.send(redis::cmd("SCRIPT").arg("LOAD").arg(script.text()))
                .await?
                .extract_error()?;
        }
        Ok(())
    }
}

/// Sends `packed` on a connection the caller built, once the node's version is known and is what
/// the primitive `needs`.
async fn send_learning<C: AskVersion>(
    connection: &mut C,
    learned: &OnceLock<ServerVersion>,
    needs: &Needs,
    packed: Packed<'_>,
) -> Result<Value, NodeErrorKind> {
    learn(connection, learned).await?.allows(needs)?;
    match packed {
        Packed::One(cmd) => connection.req_packed_command(cmd).await,
        Packed::Pipeline(pipeline) => connection
            .req_packed_commands(pipeline, 0, pipeline.len())
            .await
            .map(Value::Array),
    }
    .map_err(NodeErrorKind::Redis)
}

/// The version `learned` holds, or else asks the node (and keeps the answer, unless the node
/// could not give one: then the next call asks again).
async fn learn<C: AskVersion>(
    connection: &mut C,
    learned: &OnceLock<ServerVersion>,
) -> Result<ServerVersion, NodeErrorKind> {
    if let Some(version) = learned.get() {
        return Ok(*version);
    }
    let version = connection
        .ask_version()
        .await
        .map_err(NodeErrorKind::Redis)?;
    Ok(*learned.get_or_init(|| version))
}

/// A connection the caller built, which can tell the version of what it reaches.
trait AskVersion: ConnectionLike + Send {
    fn ask_version(&mut self) -> impl Future<Output = RedisResult<ServerVersion>> + Send;
}

/// A standalone server's version: `INFO server`, or a script where `INFO` is refused.
async fn ask_node<C: ConnectionLike + Send>(connection: &mut C) -> RedisResult<ServerVersion> {
    let info = connection.req_packed_command(&info_server()).await?;
    match ServerVersion::from_info_reply(info)? {
        Some(version) => Ok(version),
        None => {
            let reply = connection.req_packed_command(&script_version()).await?;
            ServerVersion::from_script_reply(reply)
        }
    }
}

impl AskVersion for ConnectionManager {
    fn ask_version(&mut self) -> impl Future<Output = RedisResult<ServerVersion>> + Send {
        ask_node(self)
    }
}

impl AskVersion for MultiplexedConnection {
    fn ask_version(&mut self) -> impl Future<Output = RedisResult<ServerVersion>> + Send {
        ask_node(self)
    }
}

#[cfg(feature = "cluster")]
impl AskVersion for redis::cluster_async::ClusterConnection {
    fn ask_version(&mut self) -> impl Future<Output = RedisResult<ServerVersion>> + Send {
        super::cluster::version(self)
    }
}

/// A script's error for a command its user may not run names the script (by digest) and the line,
/// but not the command: add the line's text, so that the error names the missing permission.
fn name_script_command(reply: Value, scripts: &[Script]) -> Value {
    let Value::ServerError(error) = &reply else {
        return reply;
    };
    let Some((number, line)) = error
        .details()
        .and_then(|detail| refused_script_line(detail, scripts))
    else {
        return reply;
    };
    let detail = error.details().unwrap_or_default();
    let text = format!("-{} {detail} (line {number}: {line})\r\n", error.code());
    redis::parse_redis_value(text.as_bytes()).unwrap_or(reply)
}

/// The number and text of the line that a script error points at, for errors of a command the
/// script's user may not run (Redis 7.0: "The user executing the script can't run this command or
/// subcommand script: DIGEST, on @user_script:LINE.").
fn refused_script_line(detail: &str, scripts: &[Script]) -> Option<(usize, &'static str)> {
    if !detail.starts_with("The user executing the script can't") {
        return None;
    }
    let (_, place) = detail.split_once("script: ")?;
    let (digest, line) = place.split_once(", on @user_script:")?;
    let number: usize = line.trim_end_matches('.').parse().ok()?;
    let script = scripts.iter().find(|script| script.digest() == digest)?;
    let line = script.text().lines().nth(number.checked_sub(1)?)?.trim();
    Some((number, line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::script::lua;

    /// A script to name in errors.
    const RELEASE: Script = lua!("primitives/mutex/release.lua");
    const ALL: &[Script] = &[RELEASE];

    #[test]
    fn a_refused_command_in_a_script_is_named() {
        let digest = RELEASE.digest();
        let reply = format!(
            "-ERR The user executing the script can't run this command or subcommand \
             script: {digest}, on @user_script:5.\r\n"
        );
        let reply = redis::parse_redis_value(reply.as_bytes()).unwrap();
        let Value::ServerError(error) = name_script_command(reply, ALL) else {
            panic!("still an error");
        };
        assert_eq!(error.code(), "ERR");
        let detail = error.details().unwrap();
        assert!(
            detail.ends_with("(line 5: redis.call('DEL', KEYS[1]))"),
            "{detail}"
        );
    }

    #[test]
    fn other_replies_pass_unchanged() {
        for reply in [
            &b"-NOPERM User app has no permissions to run the 'set' command\r\n"[..],
            b"-ERR The user executing the script can't run this command script: 00, on @user_script:5.\r\n",
            b":1\r\n",
        ] {
            let value = redis::parse_redis_value(reply).unwrap();
            assert_eq!(name_script_command(value.clone(), ALL), value);
        }
    }
}
