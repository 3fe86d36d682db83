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
//! so none of that is done here. What this module still gives it is what the crate lacks: the
//! set-up in the background with a backoff, calls that fail at once during the backoff (rather
//! than wait in the crate's retries), the version gate, and the probe of `health`, whose `PING`
//! goes to every master, on the suspect connection and on a fresh one: it finds out a cluster
//! that went silent as a whole (a dead path to it), with the same proof as above, since each of
//! the crate's node connections keeps its order. A single master that goes half-open while the
//! others answer is not found out (any reply resets the count of silent calls): its calls cost
//! their timeouts until TCP gives up on the flow, or until a failover's new owner is learned from
//! another command's `MOVED`. No response timeout of the crate's own would do better: it would
//! also drop the connection of a stalled master, whose queued requests must keep their order.
//!
//! **The files.** `slot` holds the state of the connection (made, being made, or failed and in
//! backoff) and how each event moves it; `send` what a call sends on it; `open` how one is made
//! and checked. This file holds the types they share and the errors of a cluster node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use redis::{Client, RedisError};

use super::Member;
use super::health::Health;
use super::member::MemberClient;
use super::script::Script;
use super::servers::{SameServer, Seat};
use super::version::ServerVersion;
use crate::error::NodeErrorKind;

mod open;
mod send;
mod slot;

// Only the cluster's code outside this module names the bounds.
#[cfg(feature = "cluster")]
pub(crate) use open::CLUSTER_CONNECT_TIMEOUT;
#[cfg(feature = "cluster")]
pub(super) use open::CONNECT_TIMEOUT;
pub(super) use open::open;
pub(crate) use send::Packed;
use slot::{BACKOFF_MIN, Slot};

/// A connection to one node that remakes itself. Shared by every clone of its
/// [`NodeConnection`](crate::NodeConnection).
pub(crate) struct Reconnecting {
    client: MemberClient,
    /// The node's address for traces, without credentials.
    address: String,
    /// Loaded into the node's cache on every new connection.
    scripts: &'static [Script],
    slot: Mutex<Slot>,
    /// Where its connections register the server they reached, in its `Redlock`.
    seat: Option<Seat>,
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

/// A connection that was made, and how it has been answering.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) link: Link,
    pub(super) health: Arc<Health>,
    /// What the node said of its version when this connection was made (for a cluster, its
    /// oldest master).
    version: ServerVersion,
    /// The `run_id` of the server it reached (a cluster: of each master), where `INFO` told it;
    /// emptied once registered (see [`seated`](Self::seated)), since every call clones a `Live`.
    run_ids: Vec<Box<str>>,
    /// Set when another member already reaches that server: then nothing is sent on it (see
    /// `servers`).
    same_as: Option<Arc<SameServer>>,
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
    pub(super) fn new(link: Link, version: ServerVersion, run_ids: Vec<Box<str>>) -> Live {
        Live {
            link,
            health: Arc::new(Health::default()),
            version,
            run_ids,
            same_as: None,
        }
    }

    /// Registers what this new connection reached in `seat`'s `Redlock` (see `servers`); a
    /// connection of a member without a seat (built outside a `Redlock`) is not judged.
    pub(super) fn seated(mut self, seat: Option<&Seat>) -> Live {
        let run_ids = std::mem::take(&mut self.run_ids);
        if let Some(seat) = seat {
            self.same_as = seat.register(&run_ids).map(Arc::new);
        }
        self
    }

    fn member(&self) -> Member {
        match self.link {
            Link::Node(_) => Member::Standalone,
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => Member::Cluster,
        }
    }

    pub(super) fn is(&self, other: &Live) -> bool {
        Arc::ptr_eq(&self.health, &other.health)
    }
}

impl Reconnecting {
    /// Makes nothing yet: the first call connects.
    pub(crate) fn new(
        client: MemberClient,
        scripts: &'static [Script],
        seat: Option<Seat>,
    ) -> Reconnecting {
        Reconnecting {
            seat,
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

    /// [`member`](Self::member) once a connection was made (or the client is a cluster
    /// client); `None` before.
    pub(crate) fn known_member(&self) -> Option<Member> {
        self.known.load(Ordering::Acquire).then(|| self.member())
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

/// A client's address for messages, e.g. `rediss://10.0.0.1:6380`: never its credentials.
pub(crate) fn address_of(client: &Client) -> String {
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}"),
        other => other.to_string(),
    }
}
