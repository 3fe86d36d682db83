//! A set of independent nodes, as Redlock runs over.

use std::fmt;
use std::path::PathBuf;

use crate::{Error, Node, Proxies, Proxy, Tls};

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
        let nodes = (0..n)
            .map(|_| Node::start(None))
            .collect::<Result<_, _>>()?;
        Ok(Cluster { nodes })
    }

    /// Starts one node per binary, in order, each of its own `redis-server` (or
    /// `valkey-server`) binary, say one that [`release_binary`](crate::release_binary) brings:
    /// nodes of several releases side by side.
    ///
    /// # Panics
    ///
    /// If a node cannot be started; the message says why and quotes the end of the node's log.
    ///
    /// # Examples
    ///
    /// ```
    /// let binary = redmutex_testenv::redis_server_binary().unwrap();
    /// let cluster = redmutex_testenv::Cluster::start_with([binary.clone(), binary]);
    /// assert_eq!(cluster.len(), 2);
    /// ```
    pub fn start_with<I>(binaries: I) -> Cluster
    where
        I: IntoIterator<Item = PathBuf>,
    {
        binaries
            .into_iter()
            .map(|binary| Node::start_binary(binary, None))
            .collect::<Result<Vec<_>, _>>()
            .map(|nodes| Cluster { nodes })
            .unwrap_or_else(|e| panic!("testenv: could not start the cluster: {e}"))
    }

    /// Starts `n` nodes that serve TLS with certificates of `tls`'s CA, and waits until each
    /// answers `PING`.
    ///
    /// Each node gets a server certificate for `127.0.0.1` and `localhost`, written with the CA
    /// certificate into its temporary directory, and requires client certificates if `tls` says
    /// so. Clients under test connect to [`tls_urls`](Cluster::tls_urls). Each node also serves
    /// plain TCP on loopback (its [`url`](Node::url)), which testenv's readiness probes and
    /// inspection helpers use.
    ///
    /// # Panics
    ///
    /// If a node cannot be started; the message says why and quotes the end of the node's log.
    ///
    /// # Examples
    ///
    /// ```
    /// let tls = redmutex_testenv::Tls::new();
    /// let cluster = redmutex_testenv::Cluster::start_tls(1, &tls);
    /// assert!(cluster.tls_urls()[0].starts_with("rediss://127.0.0.1:"));
    /// // Give a client the URLs and `tls.ca_pem()` to trust.
    /// ```
    pub fn start_tls(n: usize, tls: &Tls) -> Cluster {
        (0..n)
            .map(|_| Node::start(Some(tls)))
            .collect::<Result<Vec<_>, _>>()
            .map(|nodes| Cluster { nodes })
            .unwrap_or_else(|e| panic!("testenv: could not start a {n}-node TLS cluster: {e}"))
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

    /// `rediss://127.0.0.1:PORT/` for every node, in order, with their TLS ports.
    ///
    /// # Panics
    ///
    /// If the nodes were not started with [`start_tls`](Cluster::start_tls).
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::tls_url).collect()
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
