//! The connection layer: one member of the quorum and the connection to it. A member is one
//! standalone server or one whole Redis Cluster ([`Member`]; with the `cluster` feature, see
//! `cluster`), and its client is what [`MemberClient`](crate::MemberClient) says.
//!
//! Owns a member's connection ([`NodeConnection`](crate::NodeConnection): redmutex's own, which
//! reconnects and replaces itself when it goes silent, or the caller's), the Redis version gate
//! that refuses what a node is too old for, the pub/sub listeners that hear release notices, the
//! Lua scripts as the nodes receive them, one-off questions to each node for the operator's
//! tools, TLS and the redaction of credentials. Knows nothing of locks: what it sends is built
//! above, and what it hears goes to a [`NoticeSink`](listener::NoticeSink) implemented above.
//!
//! Uses only `error`.

use std::fmt;

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod hash_tag;
mod health;
pub(crate) mod listener;
pub(crate) mod member;
pub(crate) mod probe;
pub(crate) mod reconnect;
pub(crate) mod redact;
pub(crate) mod script;
pub(crate) mod servers;
#[cfg(feature = "tls")]
pub(crate) mod tls;
pub(crate) mod version;

use connection::NodeConnection;

/// What one member of the quorum is: one Redis server, or a whole Redis Cluster, which holds a key
/// where the master of the key's slot holds it. What a request sends depends on it: notices go
/// out by `PUBLISH` on a standalone server and by `SPUBLISH` on a cluster, on channels named for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Member {
    /// One server (a standalone master).
    Standalone,
    /// A Redis Cluster, through the redis crate's cluster client.
    Cluster,
}

/// A node of a [`Redlock`](crate::Redlock): its connection and a password-free address for messages.
#[derive(Clone)]
pub(crate) struct Node {
    pub connection: NodeConnection,
    /// The URL with its password redacted, or `None` for connections the caller built.
    pub address: Option<String>,
}

/// The address of node `index` of `nodes` for messages, if it has one.
pub(crate) fn address(nodes: &[Node], index: usize) -> Option<String> {
    nodes.get(index).and_then(|node| node.address.clone())
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(address) => f.write_str(address),
            None => self.connection.fmt(f),
        }
    }
}
