//! A real Redis Cluster on loopback: masters with replicas, resharding and failover on demand.
//!
//! Every node is a [`Node`] started with `--cluster-enabled yes`, its own `nodes.conf` in its
//! temporary directory (kept across [`Node::restart`], so a restarted node rejoins as itself, with
//! empty data) and a short `cluster-node-timeout`, on a port whose cluster bus port (+10000) is free
//! too. Three masters or more are joined by `redis-cli --cluster create`; Redis's tool refuses
//! fewer, so one or two masters are joined by hand the same way (config epochs, `ADDSLOTSRANGE`,
//! `MEET`, `REPLICATE`). Either way the start returns only once every node says
//! `cluster_state:ok`, all agree on who serves each of the 16384 slots and on every node's role, and
//! every replica is in sync.
//!
//! The topology is read live (`CLUSTER NODES` of a running node), so [`RedisCluster::masters`] and
//! [`RedisCluster::master_of_key`] follow resharding and failover. The changes a test makes are real
//! ones and wait until the cluster has settled: [`RedisCluster::migrate_slot`] is a resharding step
//! by hand (`SETSLOT IMPORTING/MIGRATING`, `GETKEYSINSLOT`, `MIGRATE`, `SETSLOT NODE`),
//! [`RedisCluster::begin_migration`] stops midway so clients meet `ASK` and `TRYAGAIN`, and
//! [`RedisCluster::failover`] is `CLUSTER FAILOVER` on a replica.

use std::fmt;
use std::fs::{self, File};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::{ErrorKind, FromRedisValue, ServerErrorKind};
use tempfile::TempDir;

use crate::error::tail;
use crate::slot::{SLOTS, key_slot};
use crate::topology::View;
use crate::{Error, Node, redis_cli_binary, redis_server_binary};

/// `cluster-node-timeout` unless the builder says otherwise: short for quick automatic failovers,
/// long enough that a busy machine does not fail healthy nodes.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(2000);
/// How long a start, a resharding step or a failover may take to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `redis-cli --cluster create` may run (it polls once a second while nodes join).
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between checks while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// A manual failover the replica could not complete is dropped after 5 s (Redis's
/// `CLUSTER_MF_TIMEOUT`); asking again after this long covers that.
const FAILOVER_RETRY: Duration = Duration::from_secs(8);
/// Redirects (and `TRYAGAIN` retries) one routed command may follow.
const REDIRECTS: usize = 16;
/// The fewest masters `redis-cli --cluster create` accepts.
const CLI_MIN_MASTERS: usize = 3;
/// Lines of each node's log quoted when the cluster does not settle.
const LOG_TAIL_LINES: usize = 15;

/// A Redis Cluster on loopback: `masters` masters with `replicas` replicas each, every one a
/// [`Node`] of its own.
///
/// Give a client [`seed_url`](RedisCluster::seed_url) (any node's URL names the whole cluster) or
/// [`urls`](RedisCluster::urls). Find where a key lives with
/// [`master_of_key`](RedisCluster::master_of_key), read it with the routed helpers
/// ([`get`](RedisCluster::get), [`pttl`](RedisCluster::pttl), ..., which follow `MOVED` and `ASK`),
/// or look at one node with its own [`Node`] helpers. Fault single nodes with [`Node::kill`],
/// [`Node::pause`] and [`Node::restart`], the whole cluster with
/// [`kill_all`](RedisCluster::kill_all) and friends, and change its topology with
/// [`migrate_slot`](RedisCluster::migrate_slot), [`begin_migration`](RedisCluster::begin_migration)
/// and [`failover`](RedisCluster::failover).
///
/// Unlike [`Cluster`](crate::Cluster), whose nodes are independent, these nodes form one Redis
/// Cluster: to Redlock it is one member. Every method takes `&self`; share it with an `Arc`.
/// Dropping it kills and reaps every node and removes their directories.
///
/// A node's [`Node::get`] and friends talk to that node only: on a node that does not serve the
/// key's slot they panic with its `MOVED` reply, and a replica answers `MOVED` too.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use redmutex_testenv::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 0);
/// assert_eq!(cluster.masters().len(), 3);
///
/// // Routed helpers go to the key's master; the master's own helpers see it there.
/// cluster.set_px("lock:a", "token", Duration::from_secs(30));
/// let owner = cluster.master_of_key("lock:a");
/// assert_eq!(owner.get("lock:a").as_deref(), Some("token"));
///
/// // Move the key's slot to another master: the key goes with it, TTL and all.
/// let slot = redmutex_testenv::key_slot("lock:a");
/// let other = cluster.masters().into_iter().find(|m| m.port() != owner.port()).unwrap();
/// cluster.migrate_slot(slot, other);
/// assert_eq!(cluster.master_of_key("lock:a").port(), other.port());
/// assert!(other.pttl("lock:a") > 0);
/// ```
pub struct RedisCluster {
    /// In start order: the masters first (`redis-cli` makes masters of the first nodes it is
    /// given, on one host), then the replicas.
    nodes: Vec<Node>,
    node_timeout: Duration,
    /// Holds `redis-cli`'s output.
    dir: TempDir,
}

/// Options for a [`RedisCluster`]: [`RedisCluster::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let cluster = redmutex_testenv::RedisCluster::builder()
///     .masters(1)
///     .replicas_per_master(0)
///     .node_timeout(Duration::from_millis(1500))
///     .start();
/// assert_eq!(cluster.len(), 1);
/// assert_eq!(cluster.node_timeout(), Duration::from_millis(1500));
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` or `try_start`"]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each, and waits until the cluster is
    /// healthy: see [`builder`](RedisCluster::builder) for the other options.
    ///
    /// # Panics
    ///
    /// If the cluster cannot be started or does not settle within 30 s; the message says why and
    /// quotes the end of every node's log. Use [`try_start`](RedisCluster::try_start) to handle
    /// that instead.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::builder()
            .masters(masters)
            .replicas_per_master(replicas)
            .start()
    }

    /// Starts `masters` masters with `replicas` replicas each, and waits until the cluster is
    /// healthy.
    ///
    /// # Errors
    ///
    /// As [`RedisClusterBuilder::try_start`].
    pub fn try_start(masters: usize, replicas: usize) -> Result<RedisCluster, Error> {
        RedisCluster::builder()
            .masters(masters)
            .replicas_per_master(replicas)
            .try_start()
    }

    /// A builder with 3 masters, no replicas and a `cluster-node-timeout` of 2 s.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder {
            masters: 3,
            replicas: 0,
            node_timeout: DEFAULT_NODE_TIMEOUT,
        }
    }

    /// The number of nodes, masters and replicas.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes; never, as a cluster has at least one master.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes' `cluster-node-timeout`: how long a node must be unreachable before the others
    /// count it as failing (and a replica of a failed master takes over, about a second later).
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// All nodes, in start order (the order of [`urls`](RedisCluster::urls)), whatever their
    /// current role: the masters started first, then the replicas.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node at index `i`, in start order.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn node(&self, i: usize) -> &Node {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "testenv: node index {i} out of range for a {}-node Redis Cluster",
                self.nodes.len()
            )
        })
    }

    /// `redis://127.0.0.1:PORT/` for every node, masters and replicas, in start order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The URL of one running master, the usual seed a cluster client is given; the first node's
    /// if no node answers.
    pub fn seed_url(&self) -> String {
        self.try_view()
            .ok()
            .and_then(|view| {
                self.masters_in(&view)
                    .into_iter()
                    .find(|node| is_live(node))
                    .map(Node::url)
            })
            .unwrap_or_else(|| self.node(0).url())
    }

    /// The masters that serve slots now, ordered by their first slot (so the first serves slot
    /// 0), dead ones included until a replica replaces them.
    ///
    /// # Panics
    ///
    /// If no running node answers `CLUSTER NODES`.
    pub fn masters(&self) -> Vec<&Node> {
        self.masters_in(&self.view())
    }

    /// The nodes that are replicas now, in start order.
    ///
    /// # Panics
    ///
    /// If no running node answers `CLUSTER NODES`.
    pub fn replicas(&self) -> Vec<&Node> {
        let view = self.view();
        self.nodes
            .iter()
            .filter(|node| view.by_port(node.port()).is_some_and(|e| !e.master))
            .collect()
    }

    /// The replicas of `master` now, in start order.
    ///
    /// # Panics
    ///
    /// If no running node answers `CLUSTER NODES`, or `master` is not a node of this cluster.
    pub fn replicas_of(&self, master: &Node) -> Vec<&Node> {
        let view = self.view();
        let id = self.entry(&view, master).id.clone();
        self.nodes
            .iter()
            .filter(|node| {
                view.by_port(node.port())
                    .is_some_and(|e| !e.master && e.master_id.as_deref() == Some(id.as_str()))
            })
            .collect()
    }

    /// The master `replica` replicates now.
    ///
    /// # Panics
    ///
    /// If `replica` is a master, or not a node of this cluster, or no running node answers
    /// `CLUSTER NODES`.
    pub fn master_of_replica(&self, replica: &Node) -> &Node {
        let view = self.view();
        let entry = self.entry(&view, replica);
        entry
            .master_id
            .as_deref()
            .filter(|_| !entry.master)
            .and_then(|id| view.by_id(id))
            .and_then(|master| self.node_by_port(master.port))
            .unwrap_or_else(|| {
                panic!(
                    "testenv: node on port {} is not a replica of a known master",
                    replica.port()
                )
            })
    }

    /// Whether `node` is a master now (one that lost all its slots counts too).
    ///
    /// # Panics
    ///
    /// If no running node answers `CLUSTER NODES`, or `node` is not a node of this cluster.
    pub fn is_master(&self, node: &Node) -> bool {
        self.entry(&self.view(), node).master
    }

    /// The cluster's id of `node` (its 40-character `CLUSTER MYID`), stable across restarts.
    ///
    /// # Panics
    ///
    /// If no running node answers `CLUSTER NODES`, or `node` is not a node of this cluster.
    pub fn node_id(&self, node: &Node) -> String {
        self.entry(&self.view(), node).id.clone()
    }

    /// The hash slot of `key`: [`key_slot`](crate::key_slot).
    pub fn slot_of(&self, key: &str) -> u16 {
        key_slot(key)
    }

    /// The master that serves `slot` now.
    ///
    /// # Panics
    ///
    /// If no master serves it, `slot >= 16384`, or no running node answers `CLUSTER NODES`.
    pub fn master_of_slot(&self, slot: u16) -> &Node {
        let view = self.view();
        view.owner(slot)
            .and_then(|entry| self.node_by_port(entry.port))
            .unwrap_or_else(|| panic!("testenv: no master serves slot {slot}"))
    }

    /// The master that serves `key`'s slot now: where a lock key is, and its `PTTL` is read.
    ///
    /// During a [`Migration`](crate::Migration) of the slot this is still the source, which may
    /// have handed the key to the target already; the routed helpers ([`get`](RedisCluster::get),
    /// ...) follow it there.
    ///
    /// # Panics
    ///
    /// As [`master_of_slot`](RedisCluster::master_of_slot).
    pub fn master_of_key(&self, key: &str) -> &Node {
        self.master_of_slot(key_slot(key))
    }

    /// A plain connection to the master that serves `key`'s slot now, with 2 s timeouts: for
    /// commands the helpers lack. Commands on keys of other slots get `MOVED`.
    ///
    /// # Panics
    ///
    /// As [`master_of_slot`](RedisCluster::master_of_slot), or if the connection fails.
    pub fn connection_for_key(&self, key: &str) -> redis::Connection {
        self.master_of_key(key).connection()
    }

    /// A key that begins with `prefix`, followed by a counter, whose slot `master` serves now:
    /// different prefixes give keys in different slots.
    ///
    /// # Panics
    ///
    /// If `master` serves no slot, or as [`masters`](RedisCluster::masters).
    pub fn key_on(&self, master: &Node, prefix: &str) -> String {
        let view = self.view();
        let slots = self.entry(&view, master).slots.clone();
        assert!(
            !slots.is_empty(),
            "testenv: node on port {} serves no slot",
            master.port()
        );
        // Even a master of one slot is hit within a few hundred thousand tries (see `key_in_slot`).
        (0u64..10_000_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|key| {
                let slot = key_slot(key);
                slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
            })
            .unwrap_or_else(|| {
                panic!(
                    "testenv: no key {prefix:?} + counter falls into a slot of node on port {}",
                    master.port()
                )
            })
    }

    /// Runs `cmd`, whose keys are `key` or share its slot, on the master that serves `key`,
    /// following `MOVED` and `ASK` redirects (with `ASKING`) and retrying `TRYAGAIN` a few times,
    /// as a cluster client does.
    ///
    /// # Panics
    ///
    /// On any other error, and after 16 redirects or retries.
    ///
    /// # Examples
    ///
    /// ```
    /// let cluster = redmutex_testenv::RedisCluster::start(1, 0);
    /// let mut cmd = redis::cmd("HSET");
    /// cmd.arg("h").arg("field").arg("1");
    /// let added: i64 = cluster.query_key("h", &cmd);
    /// assert_eq!(added, 1);
    /// ```
    pub fn query_key<T: FromRedisValue>(&self, key: &str, cmd: &redis::Cmd) -> T {
        let mut node = self.master_of_key(key);
        let mut asking = false;
        let mut last = String::new();
        for _ in 0..REDIRECTS {
            let reply = node.try_connection().and_then(|mut con| {
                if asking {
                    redis::cmd("ASKING").query::<()>(&mut con)?;
                }
                cmd.query::<T>(&mut con)
            });
            let err = match reply {
                Ok(value) => return value,
                Err(err) => err,
            };
            if let Some((address, _)) = err.redirect_node() {
                asking = err.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                node = self.node_by_address(address).unwrap_or_else(|| {
                    panic!("testenv: key {key:?} redirected to {address}, not a node of ours")
                });
            } else if err.kind() == ErrorKind::Server(ServerErrorKind::TryAgain) {
                thread::sleep(POLL_INTERVAL);
            } else {
                panic!(
                    "testenv: command on key {key:?} at node on port {}: {err}",
                    node.port()
                );
            }
            last = err.to_string();
        }
        panic!("testenv: command on key {key:?} still redirected after {REDIRECTS} tries: {last}")
    }

    /// `GET key` on the key's master, routed: the value, or `None` if the key does not exist.
    pub fn get(&self, key: &str) -> Option<String> {
        self.query_key(key, redis::cmd("GET").arg(key))
    }

    /// `SET key value` on the key's master, routed, with no expiry.
    pub fn set(&self, key: &str, value: &str) {
        self.query_key::<()>(key, redis::cmd("SET").arg(key).arg(value));
    }

    /// `SET key value PX ttl` on the key's master, routed, with `ttl` in whole milliseconds (at
    /// least 1 ms).
    pub fn set_px(&self, key: &str, value: &str, ttl: Duration) {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.query_key::<()>(
            key,
            redis::cmd("SET").arg(key).arg(value).arg("PX").arg(millis),
        );
    }

    /// `PTTL key` on the key's master, routed: milliseconds left, `-1` without expiry, `-2` if
    /// the key does not exist.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query_key(key, redis::cmd("PTTL").arg(key))
    }

    /// `EXISTS key` on the key's master, routed.
    pub fn exists(&self, key: &str) -> bool {
        let count: i64 = self.query_key(key, redis::cmd("EXISTS").arg(key));
        count > 0
    }

    /// `DEL key` on the key's master, routed; deleting a missing key is not an error.
    pub fn del(&self, key: &str) {
        self.query_key::<i64>(key, redis::cmd("DEL").arg(key));
    }

    /// The number of keys on the masters that serve slots, added up (`DBSIZE` of each).
    ///
    /// # Panics
    ///
    /// If a master does not answer.
    pub fn dbsize(&self) -> i64 {
        self.masters().into_iter().map(Node::dbsize).sum()
    }

    /// How many connections are subscribed to the shard channel `channel` (`SSUBSCRIBE`), on all
    /// running nodes together (`PUBSUB SHARDNUMSUB` of each: a client may subscribe at the
    /// channel's master or at one of its replicas).
    ///
    /// # Panics
    ///
    /// If a running node does not answer.
    ///
    /// # Examples
    ///
    /// ```
    /// let cluster = redmutex_testenv::RedisCluster::start(1, 0);
    /// let mut con = cluster.master_of_key("notices").connection();
    /// redis::cmd("SSUBSCRIBE").arg("notices").exec(&mut con).unwrap();
    /// assert_eq!(cluster.shard_subscribers("notices"), 1);
    /// ```
    pub fn shard_subscribers(&self, channel: &str) -> i64 {
        self.nodes
            .iter()
            .filter(|node| is_live(node))
            .map(|node| {
                let (_, count): (String, i64) = must(
                    node,
                    &format!("PUBSUB SHARDNUMSUB {channel}"),
                    redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(channel),
                );
                count
            })
            .sum()
    }

    /// Kills every node ([`Node::kill`]): the whole cluster is gone, as a member of a Redlock
    /// quorum that went down.
    pub fn kill_all(&self) {
        for node in &self.nodes {
            node.kill();
        }
    }

    /// Freezes every running node ([`Node::pause`]).
    ///
    /// Nodes resumed after more than the [`node_timeout`](RedisCluster::node_timeout) count each
    /// other as failing for a moment, as after a real partition, and a replica may take over from
    /// its master: call [`wait_ok`](RedisCluster::wait_ok) after [`resume_all`](RedisCluster::resume_all),
    /// and read the roles afresh.
    pub fn pause_all(&self) {
        for node in self.nodes.iter().filter(|node| is_live(node)) {
            node.pause();
        }
    }

    /// Lets every paused node go on ([`Node::resume`]).
    pub fn resume_all(&self) {
        for node in &self.nodes {
            node.resume();
        }
    }

    /// Kills every node, starts each again on its port with empty data, and waits until the
    /// cluster is healthy again: a whole cluster restarted without persistence. The nodes keep
    /// their ids, roles and slots (each has its `nodes.conf`).
    ///
    /// # Panics
    ///
    /// If a node does not start, or the cluster does not settle within 30 s.
    pub fn restart_all(&self) {
        self.kill_all();
        for node in &self.nodes {
            node.restart();
        }
        self.wait_ok();
    }

    /// Waits until the cluster has settled around the nodes that run (not killed, not paused):
    /// each says `cluster_state:ok`, all agree on the owner of every slot (all 16384 covered, by
    /// running masters only) and on each running node's role, all have noticed every stopped node
    /// (flagged it `fail?` or `fail`), and every running replica is in sync with its master.
    ///
    /// The starts, [`migrate_slot`](RedisCluster::migrate_slot) and
    /// [`failover`](RedisCluster::failover) wait for this themselves; call it after faults of
    /// your own, such as a restarted node, or a killed master whose replica should take over.
    ///
    /// # Panics
    ///
    /// If that does not happen within 30 s (a dead master without a replica leaves the cluster
    /// down for good); the message quotes the end of every node's log.
    pub fn wait_ok(&self) {
        self.settle()
            .unwrap_or_else(|reason| panic!("testenv: {}", self.error(reason)));
    }

    /// Makes `replica` take over from its master by `CLUSTER FAILOVER` (the master agrees and
    /// hands over once the replica has all its writes), and waits until the roles have switched
    /// and the cluster has settled ([`wait_ok`](RedisCluster::wait_ok)); the old master is then a
    /// replica of the new one.
    ///
    /// The masters have then voted on this shard, and vote on it again only after twice the
    /// [`node_timeout`](RedisCluster::node_timeout): a master of the shard killed sooner may not
    /// be replaced, so a test that kills one after a failover waits that long first.
    ///
    /// # Panics
    ///
    /// If `replica` is not a replica of this cluster, or the failover does not complete within
    /// 30 s (the old master must be running: see [`takeover`](RedisCluster::takeover)
    /// otherwise); the message quotes the end of every node's log.
    ///
    /// # Examples
    ///
    /// ```
    /// let cluster = redmutex_testenv::RedisCluster::start(1, 1);
    /// let master = cluster.masters()[0];
    /// let replica = cluster.replicas_of(master)[0];
    /// cluster.set("k", "v");
    ///
    /// cluster.failover(replica);
    /// assert!(cluster.is_master(replica));
    /// assert_eq!(cluster.master_of_replica(master).port(), replica.port());
    /// assert_eq!(replica.get("k").as_deref(), Some("v"));
    /// ```
    pub fn failover(&self, replica: &Node) {
        self.fail_over(replica, None);
    }

    /// Makes `replica` take over from its master at once by `CLUSTER FAILOVER TAKEOVER`, without
    /// the master's agreement nor the other masters' votes, and waits until the cluster has
    /// settled: for a master that is dead or paused. Writes the replica had not received are
    /// lost.
    ///
    /// # Panics
    ///
    /// As [`failover`](RedisCluster::failover).
    pub fn takeover(&self, replica: &Node) {
        self.fail_over(replica, Some("TAKEOVER"));
    }

    fn fail_over(&self, replica: &Node, option: Option<&str>) {
        let view = self.view();
        let entry = self.entry(&view, replica);
        assert!(
            !entry.master,
            "testenv: cannot fail over to node on port {}: it is a master",
            replica.port()
        );
        let what = match option {
            Some(option) => format!("CLUSTER FAILOVER {option}"),
            None => "CLUSTER FAILOVER".to_owned(),
        };
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("FAILOVER").arg(option);
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let mut asked = Instant::now();
        must::<()>(replica, &what, &cmd);
        loop {
            let role = ask::<String>(
                replica,
                "INFO replication",
                redis::cmd("INFO").arg("replication"),
            );
            if role.is_ok_and(|info| info.lines().any(|line| line.trim() == "role:master")) {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "testenv: {}",
                    self.error(format!(
                        "{what} on port {} did not make it a master within {SETTLE_TIMEOUT:?}",
                        replica.port()
                    ))
                );
            }
            if now.duration_since(asked) >= FAILOVER_RETRY {
                // Refused if it became a master meanwhile: the next look at its role says so.
                let _ = ask::<()>(replica, &what, &cmd);
                asked = now;
            }
            thread::sleep(POLL_INTERVAL);
        }
        self.wait_ok();
    }

    /// The masters that serve slots in `view`, ordered by their first slot.
    pub(crate) fn masters_in(&self, view: &View) -> Vec<&Node> {
        let mut masters: Vec<(u16, &Node)> = view
            .entries
            .iter()
            .filter(|entry| entry.master)
            .filter_map(|entry| {
                let first = entry.slots.iter().map(|&(lo, _)| lo).min()?;
                Some((first, self.node_by_port(entry.port)?))
            })
            .collect();
        masters.sort_by_key(|&(first, _)| first);
        masters.into_iter().map(|(_, node)| node).collect()
    }

    /// `node`'s line in `view`.
    pub(crate) fn entry<'v>(&self, view: &'v View, node: &Node) -> &'v crate::topology::Entry {
        view.by_port(node.port()).unwrap_or_else(|| {
            panic!(
                "testenv: node on port {} is not a node of this cluster",
                node.port()
            )
        })
    }

    pub(crate) fn node_by_port(&self, port: u16) -> Option<&Node> {
        self.nodes.iter().find(|node| node.port() == port)
    }

    /// The node at `host:port`, as a `MOVED` or `ASK` reply names it.
    fn node_by_address(&self, address: &str) -> Option<&Node> {
        let port = address.rsplit_once(':')?.1.parse().ok()?;
        self.node_by_port(port)
    }

    /// The cluster as a running node sees it.
    pub(crate) fn view(&self) -> View {
        self.try_view().unwrap_or_else(|reason| {
            panic!("testenv: reading the Redis Cluster's topology: {reason}")
        })
    }

    fn try_view(&self) -> Result<View, String> {
        let mut last = "no node is running".to_owned();
        for node in self.nodes.iter().filter(|node| is_live(node)) {
            match view_of(node) {
                Ok(view) => return Ok(view),
                Err(reason) => last = reason,
            }
        }
        Err(last)
    }

    /// Waits until [`check_settled`](RedisCluster::check_settled) passes; the last reason it
    /// did not, on timeout.
    fn settle(&self) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let reason = match self.check_settled() {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "not healthy after {SETTLE_TIMEOUT:?}; last check: {reason}"
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether the cluster has settled around its running nodes: see
    /// [`wait_ok`](RedisCluster::wait_ok).
    fn check_settled(&self) -> Result<(), String> {
        let (live, stopped): (Vec<&Node>, Vec<&Node>) =
            self.nodes.iter().partition(|node| is_live(node));
        if live.is_empty() {
            return Err("no node is running".into());
        }
        let mut views = Vec::with_capacity(live.len());
        for node in &live {
            let info: String = ask(node, "CLUSTER INFO", redis::cmd("CLUSTER").arg("INFO"))?;
            if !info.lines().any(|line| line.trim() == "cluster_state:ok") {
                return Err(format!(
                    "node on port {} says cluster_state is not ok",
                    node.port()
                ));
            }
            views.push((*node, view_of(node)?));
        }
        let ids = views
            .iter()
            .map(|(node, view)| {
                view.myself()
                    .map(|me| (node.port(), me.id.as_str()))
                    .ok_or_else(|| format!("node on port {} lists no `myself`", node.port()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (first_node, first) = &views[0];
        let runs = first.slot_runs();
        if let Some((lo, hi, _)) = runs.iter().find(|(_, _, owner)| owner.is_none()) {
            return Err(format!(
                "node on port {} sees no master for slots {lo}-{hi}",
                first_node.port()
            ));
        }
        for (node, view) in &views {
            if view.slot_runs() != runs {
                return Err(format!(
                    "nodes on ports {} and {} disagree on the slot map",
                    first_node.port(),
                    node.port()
                ));
            }
            for &(port, id) in &ids {
                let seen = view.by_id(id).ok_or_else(|| {
                    format!(
                        "node on port {} does not know node on port {port} yet",
                        node.port()
                    )
                })?;
                if seen.failed || seen.unsettled {
                    return Err(format!(
                        "node on port {} sees node on port {port} as failing or not yet joined",
                        node.port()
                    ));
                }
                // Every view has every running node by now: the first view passed this loop.
                let reference = first.by_id(id);
                if reference.map(|r| (r.master, &r.master_id))
                    != Some((seen.master, &seen.master_id))
                {
                    return Err(format!(
                        "nodes on ports {} and {} disagree on the role of node on port {port}",
                        first_node.port(),
                        node.port()
                    ));
                }
            }
            for stopped in &stopped {
                if view
                    .by_port(stopped.port())
                    .is_some_and(|seen| !seen.failed && !seen.unsettled)
                {
                    return Err(format!(
                        "node on port {} has not noticed yet that node on port {} is stopped",
                        node.port(),
                        stopped.port()
                    ));
                }
            }
        }
        // Only slots of running masters count as served; a replica may still have to take over.
        for stopped in &stopped {
            let serves = first
                .by_port(stopped.port())
                .is_some_and(|seen| seen.master && !seen.slots.is_empty());
            if serves {
                return Err(format!(
                    "stopped node on port {} still serves slots",
                    stopped.port()
                ));
            }
        }
        for (node, view) in &views {
            if view.myself().is_some_and(|me| me.master) {
                continue;
            }
            let info: String = ask(
                node,
                "INFO replication",
                redis::cmd("INFO").arg("replication"),
            )?;
            let has = |line: &str| info.lines().any(|l| l.trim() == line);
            if !has("master_link_status:up") || !has("master_sync_in_progress:0") {
                return Err(format!(
                    "replica on port {} is not in sync with its master yet",
                    node.port()
                ));
            }
        }
        Ok(())
    }

    /// An [`Error::Cluster`] for `reason`, with the end of every node's log.
    fn error(&self, reason: String) -> Error {
        let logs = self
            .nodes
            .iter()
            .map(|node| {
                let log = node.log_path();
                let text = fs::read_to_string(&log)
                    .map(|text| tail(&text, LOG_TAIL_LINES))
                    .unwrap_or_else(|e| format!("(no log: {e})"));
                format!(
                    "--- last lines of {} (port {}) ---\n{text}",
                    log.display(),
                    node.port()
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        Error::Cluster {
            ports: self.nodes.iter().map(Node::port).collect(),
            reason,
            logs,
        }
    }

    /// Joins the nodes with `redis-cli --cluster create`: the first `masters` nodes become the
    /// masters (Redis's tool picks them in the order given), `replicas` of the others go to each.
    fn create_with_cli(&self, replicas: usize) -> Result<(), Error> {
        let cli = redis_cli_binary()?;
        let output_path = self.dir.path().join("redis-cli.out");
        let output = File::create(&output_path)
            .map_err(|e| Error::io("creating the redis-cli output file", e))?;
        let output_err = output
            .try_clone()
            .map_err(|e| Error::io("duplicating a file handle", e))?;
        let mut child = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(
                self.nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.port())),
            )
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(output_err)
            .spawn()
            .map_err(|e| Error::io(format!("spawning {}", cli.display()), e))?;
        let deadline = Instant::now() + CLI_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Err(e) => return Err(Error::io("waiting for redis-cli", e)),
            }
        };
        let text = without_colors(&fs::read_to_string(&output_path).unwrap_or_default());
        match status {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(self.error(format!(
                "`redis-cli --cluster create` {status}:\n{}",
                tail(&text, 30)
            ))),
            None => Err(self.error(format!(
                "`redis-cli --cluster create` did not finish within {CLI_TIMEOUT:?}:\n{}",
                tail(&text, 30)
            ))),
        }
    }

    /// Joins the nodes by hand, as `redis-cli --cluster create` does, for the one or two masters
    /// it refuses: the first `masters` nodes split the slots, the others replicate them in turn.
    fn create_by_hand(&self, masters: usize) -> Result<(), Error> {
        let fail = |reason: String| self.error(reason);
        // Distinct epochs from the start, as redis-cli gives, so no collision must be resolved.
        for (epoch, node) in (1u64..).zip(&self.nodes) {
            ask::<()>(
                node,
                "CLUSTER SET-CONFIG-EPOCH",
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(epoch),
            )
            .map_err(fail)?;
        }
        let shares = u32::try_from(masters).unwrap_or(u32::MAX);
        for (i, node) in (0u32..).zip(&self.nodes[..masters]) {
            let first = u32::from(SLOTS) * i / shares;
            let last = u32::from(SLOTS) * (i + 1) / shares - 1;
            ask::<()>(
                node,
                "CLUSTER ADDSLOTSRANGE",
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            )
            .map_err(fail)?;
        }
        for node in &self.nodes[1..] {
            ask::<()>(
                &self.nodes[0],
                "CLUSTER MEET",
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port()),
            )
            .map_err(fail)?;
        }
        let ids = self.wait_joined().map_err(fail)?;
        for (k, replica) in self.nodes[masters..].iter().enumerate() {
            ask::<()>(
                replica,
                "CLUSTER REPLICATE",
                redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&ids[k % masters]),
            )
            .map_err(fail)?;
        }
        Ok(())
    }

    /// Waits until every node knows every other one; their ids, in start order.
    fn wait_joined(&self) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let check = || -> Result<Vec<String>, String> {
                let views = self
                    .nodes
                    .iter()
                    .map(view_of)
                    .collect::<Result<Vec<_>, _>>()?;
                for (node, view) in self.nodes.iter().zip(&views) {
                    for other in &self.nodes {
                        if view.by_port(other.port()).is_none_or(|e| e.unsettled) {
                            return Err(format!(
                                "node on port {} does not know node on port {} yet",
                                node.port(),
                                other.port()
                            ));
                        }
                    }
                }
                views
                    .iter()
                    .zip(&self.nodes)
                    .map(|(view, node)| {
                        view.myself().map(|me| me.id.clone()).ok_or_else(|| {
                            format!("node on port {} lists no `myself`", node.port())
                        })
                    })
                    .collect()
            };
            match check() {
                Ok(ids) => return Ok(ids),
                Err(reason) if Instant::now() >= deadline => {
                    return Err(format!(
                        "nodes did not meet within {SETTLE_TIMEOUT:?}: {reason}"
                    ));
                }
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }
}

impl RedisClusterBuilder {
    /// The number of masters, which split the 16384 slots evenly. Default: 3. At least 1; three
    /// or more are joined by `redis-cli --cluster create`, fewer by hand.
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// The number of replicas of each master. Default: 0.
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Every node's `cluster-node-timeout`, at least 1 ms. Default: 2 s. Shorter makes automatic
    /// failover after a kill quicker, and a busy machine likelier to fail a healthy node.
    pub fn node_timeout(mut self, node_timeout: Duration) -> Self {
        self.node_timeout = node_timeout;
        self
    }

    /// Starts the cluster and waits until it is healthy.
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start`].
    pub fn start(self) -> RedisCluster {
        let (masters, replicas) = (self.masters, self.replicas);
        self.try_start().unwrap_or_else(|e| {
            panic!(
                "testenv: could not start a Redis Cluster of {masters} masters with \
                 {replicas} replicas each: {e}"
            )
        })
    }

    /// Starts the cluster and waits until it is healthy (see [`RedisCluster::wait_ok`]).
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] if there are no masters, `redis-cli` fails, or the cluster does not
    /// settle within 30 s; the errors of [`redis_server_binary`](crate::redis_server_binary) and
    /// [`redis_cli_binary`] if a binary is missing; [`Error::Start`] if a node does not start.
    /// Nodes already started are stopped again.
    pub fn try_start(self) -> Result<RedisCluster, Error> {
        let RedisClusterBuilder {
            masters,
            replicas,
            node_timeout,
        } = self;
        let total = replicas
            .checked_add(1)
            .and_then(|per_master| per_master.checked_mul(masters))
            .filter(|&total| masters > 0 && total <= usize::from(SLOTS))
            .ok_or_else(|| Error::Cluster {
                ports: Vec::new(),
                reason: format!(
                    "cannot make a cluster of {masters} masters with {replicas} replicas each: \
                     it needs 1 to 16384 nodes, at least one a master"
                ),
                logs: String::new(),
            })?;
        // Checked before any node starts, so a missing tool is the error, not a half-made cluster.
        if masters >= CLI_MIN_MASTERS {
            redis_cli_binary()?;
        }
        let node_timeout = node_timeout.max(Duration::from_millis(1));
        let dir = tempfile::Builder::new()
            .prefix("testenv-redis-cluster-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary directory for a Redis Cluster", e))?;
        let binary = redis_server_binary()?;
        // In parallel: each start waits for its process to answer, and they need not wait in turn.
        let started: Vec<Result<Node, Error>> = thread::scope(|scope| {
            let starts: Vec<_> = (0..total)
                .map(|_| {
                    let binary = binary.clone();
                    scope.spawn(move || Node::start_with(binary, None, Some(node_timeout)))
                })
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let nodes = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        let cluster = RedisCluster {
            nodes,
            node_timeout,
            dir,
        };
        if masters >= CLI_MIN_MASTERS {
            cluster.create_with_cli(replicas)?;
        } else {
            cluster.create_by_hand(masters)?;
        }
        cluster.settle().map_err(|reason| cluster.error(reason))?;
        Ok(cluster)
    }
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

/// Whether `node` runs and is not paused: whether it can answer.
pub(crate) fn is_live(node: &Node) -> bool {
    node.is_running() && !node.is_paused()
}

/// `CLUSTER NODES` of `node`, read.
fn view_of(node: &Node) -> Result<View, String> {
    let text: String = ask(node, "CLUSTER NODES", redis::cmd("CLUSTER").arg("NODES"))?;
    View::parse(&text).map_err(|e| format!("node on port {}: {e}", node.port()))
}

/// Runs `cmd` on a new connection to `node`; the error names the node and `what`.
fn ask<T: FromRedisValue>(node: &Node, what: &str, cmd: &redis::Cmd) -> Result<T, String> {
    node.try_connection()
        .and_then(|mut con| cmd.query(&mut con))
        .map_err(|e| format!("{what} on node on port {}: {e}", node.port()))
}

/// [`ask`], panicking on error.
pub(crate) fn must<T: FromRedisValue>(node: &Node, what: &str, cmd: &redis::Cmd) -> T {
    ask(node, what, cmd).unwrap_or_else(|reason| panic!("testenv: {reason}"))
}

/// `text` without the terminal color codes `redis-cli` writes.
fn without_colors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // `ESC [ ... m`: skip up to and including the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_codes_are_dropped() {
        assert_eq!(
            without_colors("\u{1b}[29;1m>>> Creating\n\u{1b}[0m[OK] done"),
            ">>> Creating\n[OK] done"
        );
        assert_eq!(without_colors("plain"), "plain");
    }

    #[test]
    fn bad_shapes_are_refused_before_anything_starts() {
        for (masters, replicas) in [(0, 0), (0, 2), (1, usize::MAX), (usize::MAX, 1)] {
            let err = RedisCluster::try_start(masters, replicas).unwrap_err();
            assert!(matches!(err, Error::Cluster { .. }), "{err:?}");
            assert!(err.to_string().contains("at least one a master"), "{err}");
        }
    }
}
