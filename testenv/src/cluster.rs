//! A set of independent nodes, as Redlock runs over.

use std::fmt;

use crate::{Error, Node, Proxies, Proxy};

/// `n` independent Redis masters on loopback, each a [`Node`] with its own port.
///
/// The nodes know nothing of each other (no replication, no Redis Cluster), as Redlock requires.
/// Share a cluster between tasks with an `Arc`: every method takes `&self`. Dropping it stops every
/// node.
pub struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` nodes and waits until each answers `PING`.
    ///
    /// # Panics
    ///
    /// If a node cannot be started; the message says why and quotes the end of the node's log.
    /// Use [`try_start`](Cluster::try_start) to handle that instead.
    pub fn start(n: usize) -> Cluster {
        Cluster::try_start(n)
            .unwrap_or_else(|e| panic!("testenv: could not start a {n}-node cluster: {e}"))
    }

    /// Starts `n` nodes and waits until each answers `PING`.
    ///
    /// # Errors
    ///
    /// If `redis-server` cannot be found or installed, or a node does not start; nodes already
    /// started are stopped again.
    pub fn try_start(n: usize) -> Result<Cluster, Error> {
        let nodes = (0..n).map(|_| Node::start()).collect::<Result<_, _>>()?;
        Ok(Cluster { nodes })
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node at index `i`, in start order (the order of [`urls`](Cluster::urls)).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn node(&self, i: usize) -> &Node {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "testenv: node index {i} out of range for a {}-node cluster",
                self.nodes.len()
            )
        })
    }

    /// All nodes, in start order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// `redis://127.0.0.1:PORT/` for every node, in order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// Starts a new [`Proxy`] in front of each node, for one client; their URLs are in node order.
    ///
    /// Each call makes new proxies, so each client can get its own and see its own partition. The
    /// proxies forward to the nodes' ports, so they keep working across restarts. They are
    /// independent of the cluster: drop them before it, or they reset the connections they
    /// accept once the nodes are gone.
    ///
    /// # Panics
    ///
    /// If a proxy cannot bind a loopback port.
    pub fn proxies(&self) -> Proxies {
        Proxies::new(
            self.nodes
                .iter()
                .map(|node| Proxy::start(node.port()))
                .collect(),
        )
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.nodes)
            .finish()
    }
}
