//! Node checks: whether the configured nodes are fit to run Redlock on, as an operator's doctor
//! would ask. This file gathers the facts (I/O); `judge` judges them, without I/O, so that every
//! verdict is tested without Redis.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

#[cfg(doc)]
use crate::Redlock;
use crate::engine::target::waiters_key;
use crate::engine::value::random_value;
use crate::nodes::connection::NodeConnection;
use crate::nodes::probe::{Answer, bounded, each_node, eval, send, unexpected};
use crate::nodes::{Member, Node};
use crate::primitives::mutex::{EXTEND, RELEASE, RELEASE_NOTIFY};

mod judge;

#[cfg(feature = "cluster")]
use crate::error::NodeErrorKind;
#[cfg(feature = "cluster")]
use judge::MasterFacts;
use judge::{Facts, Round, config_value, judge, parse_info};

/// Default bound on each command of a check.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default prefix of the scratch names that the permissions check locks.
const DEFAULT_SCRATCH_PREFIX: &str = "redmutex:check:";

/// How long the permissions check's scratch key lives if its unlock fails.
const SCRATCH_EXPIRY: Duration = Duration::from_secs(10);

/// A run of node checks, made by [`Redlock::checkup`]; [`run`](Checkup::run) it.
///
/// For every node it checks, and reports with [`CheckStatus`] and a one-line reason:
///
/// | check | fails when | ACL needs |
/// |---|---|---|
/// | `reachable` | the node does not answer `PING` | `+ping` |
/// | `distinct` | two nodes are one server (same `run_id`): it would count twice | `+info` |
/// | `independent` | the node is a replica, its master or a replica of it is another configured node, or two nodes reach one Redis Cluster (shared node IDs) | `+info`, `+cluster\|slots` on a cluster |
/// | `eviction` | `maxmemory` is set with any policy but `noeviction` (lock keys carry a TTL, so `volatile-*` evicts them too) | `+info` |
/// | `persistence` | never; warns unless `appendonly yes` and `appendfsync always` | `+info`, `+config\|get` |
/// | `permissions` | a real lock, extend and unlock round on a scratch name fails | `+set`, `+evalsha`, `+eval`, keys matching the scratch prefix, `&redmutex:released:*` |
/// | `version` | the node's Redis is too old for mutexes; warns when it is too old for other primitives (named, with the version they need: they are refused on this node), or its version is unknown | `+info`, or else `+eval` |
///
/// A Redis Cluster member gets one row per check too: `eviction`, `persistence` and
/// `permissions` run on each of its masters (a lock key may land on any), and its row takes the
/// worst master's verdict and names the masters that have it; `independent` warns when the
/// cluster has replicas, as for a standalone master's. A question the node refuses to answer
/// (INFO or CONFIG disabled, as on some managed services) gives a warning with the node's reason,
/// not a failure; the checks of an unreachable node are skipped.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::{CheckStatus, Redlock};
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = Redlock::connect(cluster.urls()).await?;
/// let report = redlock.checkup().run().await;
/// for check in report.checks() {
///     if check.status != CheckStatus::Pass {
///         println!("node {} {}: {} ({})", check.node, check.kind, check.status, check.reason);
///     }
/// }
/// assert!(!report.has_failures());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Checkup {
    nodes: Arc<[Node]>,
    timeout: Duration,
    scratch_prefix: String,
}

/// The checks, one row per node and check: the answer of [`Checkup::run`].
///
/// # Examples
///
/// See [`Checkup`].
#[derive(Debug, Clone)]
pub struct CheckReport {
    quorum: usize,
    nodes: usize,
    checks: Vec<NodeCheck>,
    /// Nodes that refused the credentials (their `reachable` check fails).
    refused_authentication: usize,
    /// Each node's PING round trip, `None` where it did not answer.
    round_trips: Vec<Option<Duration>>,
}

/// One check of one node.
///
/// # Examples
///
/// See [`Checkup`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeCheck {
    /// The node's index, in the order given to [`Redlock`].
    pub node: usize,
    /// The node's URL with any password hidden; `None` for connections the caller built.
    pub address: Option<String>,
    /// Which check.
    pub kind: CheckKind,
    /// Its verdict.
    pub status: CheckStatus,
    /// Why, in one line.
    pub reason: String,
}

/// The checks [`Checkup`] makes, in the order it reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckKind {
    /// The node answers, and how fast.
    Reachable,
    /// No other configured node is the same server.
    Distinct,
    /// An independent member: no replication with other configured nodes, and no two of them in
    /// one Redis Cluster.
    Independent,
    /// Lock keys cannot be evicted.
    Eviction,
    /// A restart does not forget locks.
    Persistence,
    /// A lock, extend and unlock round works with this connection's permissions.
    Permissions,
    /// The node's version runs every primitive (see [`guide::limits`](crate::guide::limits)).
    Version,
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum CheckStatus {
    /// Fine.
    Pass,
    /// Not checked, because the node is unreachable (which fails its `reachable` check).
    Skip,
    /// Works, with a risk the operator should know about, or could not be checked.
    Warn,
    /// Unfit for Redlock as configured.
    Fail,
}

impl Checkup {
    /// Checks of `nodes`, with the default bound and scratch prefix.
    pub(crate) fn new(nodes: Arc<[Node]>) -> Checkup {
        Checkup {
            nodes,
            timeout: DEFAULT_TIMEOUT,
            scratch_prefix: DEFAULT_SCRATCH_PREFIX.to_owned(),
        }
    }
}

impl fmt::Debug for Checkup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As the client it came from shows itself: its nodes.
        let redlock = format_args!("Redlock {{ nodes: {:?} }}", self.nodes);
        f.debug_struct("Checkup")
            .field("redlock", &redlock)
            .field("timeout", &self.timeout)
            .field("scratch_prefix", &self.scratch_prefix)
            .finish()
    }
}

impl Checkup {
    /// The bound on each command sent to a node. Default 2 s.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let checkup = redlock.checkup().with_timeout(Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Checkup { timeout, ..self }
    }

    /// The prefix of the scratch name that the permissions check locks (a random suffix follows).
    /// Default `redmutex:check:`. Choose one that the connection's ACL key patterns allow, as
    /// your lock names are.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// let checkup = redlock.checkup().with_scratch_prefix("locks:check:");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_scratch_prefix(self, prefix: impl Into<String>) -> Self {
        Checkup {
            scratch_prefix: prefix.into(),
            ..self
        }
    }

    /// Asks every node at once and judges the answers. A node that does not answer a question
    /// within the timeout counts as refusing it.
    ///
    /// The permissions check sets a scratch key (the prefix and 22 random characters) for at most
    /// 10 s, and deletes it again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as to the nodes: dropping the future may leave the scratch key of the
    /// permissions check, which expires on its own within 10 s.
    ///
    /// # Examples
    ///
    /// See [`Checkup`].
    pub async fn run(&self) -> CheckReport {
        let nodes = &self.nodes;
        let scratch = format!("{}{}", self.scratch_prefix, random_value());
        let timeout = self.timeout;
        // Each question has its own bound; this one only keeps a wedged node from stalling all.
        let outer = timeout.saturating_mul(8);
        let facts = each_node(nodes, outer, |_, connection| {
            gather(connection, timeout, &scratch)
        })
        .await;
        let facts = facts
            .into_iter()
            .map(|answer| answer.unwrap_or_else(Facts::unreachable))
            .collect::<Vec<_>>();
        let addresses = nodes.iter().map(|node| node.address.clone()).collect();
        judge(&facts, addresses)
    }
}

impl CheckReport {
    /// Every check, ordered by node, then by check.
    ///
    /// # Examples
    ///
    /// See [`Checkup`].
    pub fn checks(&self) -> &[NodeCheck] {
        &self.checks
    }

    /// Whether any check failed.
    ///
    /// # Examples
    ///
    /// See [`Checkup`].
    pub fn has_failures(&self) -> bool {
        self.checks.iter().any(|c| c.status == CheckStatus::Fail)
    }

    /// How many nodes passed every check or only warned: those a lock can count on.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let report = redlock.checkup().run().await;
    /// assert!(report.sound_nodes() >= report.quorum());
    /// # Ok(())
    /// # }
    /// ```
    pub fn sound_nodes(&self) -> usize {
        (0..self.nodes)
            .filter(|&node| {
                self.checks
                    .iter()
                    .all(|c| c.node != node || c.status != CheckStatus::Fail)
            })
            .count()
    }

    /// How many nodes refused this client's credentials (`NOAUTH`, `WRONGPASS`: see
    /// [`NodeErrorKind::is_authentication_refusal`](crate::NodeErrorKind::is_authentication_refusal));
    /// their `reachable` check fails and says so.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let report = redlock.checkup().run().await;
    /// assert_eq!(report.refused_authentication(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn refused_authentication(&self) -> usize {
        self.refused_authentication
    }

    /// Each node's round trip (its PING's), in node order; `None` for a node that did not answer.
    ///
    /// With nodes at very different distances, a lock waits for the farthest by default, while
    /// [`with_fail_fast(true)`](crate::Mutex::with_fail_fast) returns once a quorum decided: the
    /// `quorum()`-th shortest round trip, not the longest.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let report = redlock.checkup().run().await;
    /// let mut round_trips: Vec<_> = report.round_trips().iter().flatten().copied().collect();
    /// round_trips.sort();
    /// let quorum_waits = round_trips[report.quorum() - 1];
    /// let default_waits = round_trips[round_trips.len() - 1];
    /// assert!(quorum_waits <= default_waits);
    /// # Ok(())
    /// # }
    /// ```
    pub fn round_trips(&self) -> &[Option<Duration>] {
        &self.round_trips
    }

    /// How many nodes a lock needs: `nodes / 2 + 1`.
    ///
    /// # Examples
    ///
    /// See [`sound_nodes`](CheckReport::sound_nodes).
    pub fn quorum(&self) -> usize {
        self.quorum
    }
}

impl CheckKind {
    /// The check's short name, as in the table of [`Checkup`].
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(redmutex::CheckKind::Eviction.name(), "eviction");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            CheckKind::Reachable => "reachable",
            CheckKind::Distinct => "distinct",
            CheckKind::Independent => "independent",
            CheckKind::Eviction => "eviction",
            CheckKind::Persistence => "persistence",
            CheckKind::Permissions => "permissions",
            CheckKind::Version => "version",
        }
    }
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl CheckStatus {
    /// `pass`, `skip`, `warn` or `fail`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(redmutex::CheckStatus::Warn.name(), "warn");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Skip => "skip",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        }
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Asks one node everything the checks need, each question bounded by `timeout`.
async fn gather(mut connection: NodeConnection, timeout: Duration, scratch: &str) -> Answer<Facts> {
    let started = Instant::now();
    let ping = bounded(timeout, send(&mut connection, &redis::cmd("PING")))
        .await
        .map(|_| started.elapsed());
    if let Err(error) = ping {
        return Ok(Facts::unreachable(error));
    }
    #[cfg(feature = "cluster")]
    if let Ok(Some(cluster)) = bounded(timeout, connection.cluster()).await {
        return Ok(gather_cluster(connection, cluster, timeout, scratch, ping).await);
    }
    let info = bounded(timeout, send(&mut connection, &redis::cmd("INFO")))
        .await
        .and_then(|reply| parse_info(&reply));
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("appendfsync");
    let appendfsync = bounded(timeout, send(&mut connection, &config))
        .await
        .and_then(|reply| config_value(&reply));
    let round = permissions_round(&mut connection, timeout, scratch).await;
    // What the connection learned when it was made: the version its calls are judged by.
    let version = bounded(timeout, connection.version()).await;
    Ok(Facts {
        ping,
        info,
        appendfsync,
        round,
        version,
        cluster: None,
    })
}

/// Asks a cluster member what the checks need: its masters (`CLUSTER SLOTS`), then each
/// master's `INFO` and `appendfsync`, and a permissions round on a scratch key in its slots, all
/// masters at once.
#[cfg(feature = "cluster")]
async fn gather_cluster(
    mut connection: NodeConnection,
    mut cluster: redis::cluster_async::ClusterConnection,
    timeout: Duration,
    scratch: &str,
    ping: Answer<Duration>,
) -> Facts {
    use crate::nodes::cluster::{Master, masters, send_to};
    use crate::nodes::hash_tag::key_slot;
    use crate::nodes::reconnect::node_error;

    let version = bounded(timeout, connection.version()).await;
    let masters = bounded(timeout, async {
        masters(&mut cluster).await.map_err(node_error)
    })
    .await;
    let masters = match masters {
        Ok(masters) => masters,
        Err(error) => {
            // The masters are unknown (CLUSTER SLOTS refused): one round where the scratch key
            // lands.
            let round = permissions_round(&mut connection, timeout, scratch).await;
            return Facts::cluster(ping, version, round, Err(error));
        }
    };
    let ask = |master: &Master| {
        let (mut cluster, mut connection) = (cluster.clone(), connection.clone());
        let address = master.address.clone();
        // A scratch name on this master's slots: a few tries each, unless the prefix has a hash
        // tag, which puts every name in one slot.
        let key = (0..1 << 16)
            .map(|n| format!("{scratch}:{n}"))
            .find(|key| master.serves(key_slot(key)));
        let master = master.clone();
        async move {
            let info = redis::cmd("INFO");
            let info = bounded(timeout, async {
                send_to(&mut cluster, &address, info)
                    .await
                    .map_err(node_error)
            })
            .await
            .and_then(|reply| reply.extract_error().map_err(NodeErrorKind::Redis))
            .and_then(|reply| parse_info(&reply));
            let mut config = redis::cmd("CONFIG");
            config.arg("GET").arg("appendfsync");
            let appendfsync = bounded(timeout, async {
                send_to(&mut cluster, &address, config)
                    .await
                    .map_err(node_error)
            })
            .await
            .and_then(|reply| reply.extract_error().map_err(NodeErrorKind::Redis))
            .and_then(|reply| config_value(&reply));
            let round = match key {
                Some(key) => Some(permissions_round(&mut connection, timeout, &key).await),
                None => None,
            };
            MasterFacts {
                address: master.address,
                id: master.id,
                info,
                appendfsync,
                round,
            }
        }
    };
    let masters = futures::future::join_all(masters.iter().map(ask)).await;
    Facts::cluster(ping, version, Round::Done, Ok(masters))
}

/// One real lock, extend and unlock, with the library's own commands and scripts.
async fn permissions_round(
    connection: &mut NodeConnection,
    timeout: Duration,
    scratch: &str,
) -> Round {
    let value = random_value();
    let millis = SCRATCH_EXPIRY.as_millis().to_string();
    let mut set = Cmd::new();
    set.arg("SET")
        .arg(scratch)
        .arg(&*value)
        .arg("NX")
        .arg("PX")
        .arg(&millis);
    match bounded(timeout, send(connection, &set)).await {
        Ok(Value::Okay) => {}
        Ok(other) => return Round::Failed("SET NX PX", unexpected(&other)),
        Err(error) => return Round::Failed("SET NX PX", error),
    }
    let round = extend_and_unlock(connection, timeout, scratch, &value, &millis).await;
    if let Round::Failed(..) = round {
        // Scripts may be what is refused: the scratch key goes with a plain DEL (nobody else
        // uses its random name), or else expires on its own.
        let mut del = Cmd::new();
        del.arg("DEL").arg(scratch);
        let _ = bounded(timeout, send(connection, &del)).await;
    }
    round
}

/// The rest of the permissions round, once the scratch key is set.
async fn extend_and_unlock(
    connection: &mut NodeConnection,
    timeout: Duration,
    scratch: &str,
    value: &str,
    millis: &str,
) -> Round {
    let (keys, args) = ([scratch], [value, millis]);
    match bounded(timeout, eval(connection, &EXTEND, &keys, &args)).await {
        Ok(Value::Int(1)) => {}
        Ok(other) => return Round::Failed("the extend script", unexpected(&other)),
        Err(error) => return Round::Failed("the extend script", error),
    }
    // A waiter's mark, then the release it makes notify (see `waiting::notices`). On a cluster
    // the mark is beside the scratch key, in its slot, and passed as the script's second key.
    let member = connection.member();
    let mark = waiters_key(scratch, member).unwrap_or_else(|| format!("{scratch}:waiters"));
    let mut marking = Cmd::new();
    marking.arg("PSETEX").arg(&mark).arg(millis).arg(1);
    let notice = async {
        send(connection, &marking).await?;
        match member {
            Member::Standalone => eval(connection, &RELEASE_NOTIFY, &keys, &args[..1]).await,
            Member::Cluster => {
                let keys = [scratch, mark.as_str()];
                eval(connection, &RELEASE_NOTIFY, &keys, &args[..1]).await
            }
        }
    };
    let refused = match bounded(timeout, notice).await {
        Ok(Value::Int(1)) => return Round::Done,
        Ok(other) => unexpected(&other),
        Err(error) => error,
    };
    // Perhaps only the mark or PUBLISH is refused: then plain locks work, without wake-up on
    // release. The refused script may have deleted the key before it failed (scripts do not roll
    // back), so the plain release may find nothing left; a mark left behind expires with the
    // scratch key's expiry.
    match bounded(timeout, eval(connection, &RELEASE, &keys, &args[..1])).await {
        Ok(Value::Int(0 | 1)) => Round::NoNotice(refused),
        Ok(other) => Round::Failed("the unlock script", unexpected(&other)),
        Err(error) => Round::Failed("the unlock script", error),
    }
}
