//! Real `redis-server` nodes on loopback for integration tests of code that takes Redis locks:
//! redmutex's own tests, examples and benchmarks, and yours (see the README for what it needs and
//! may install).
//!
//! A [`Cluster`] is a set of independent Redis masters, each a child `redis-server` process with its
//! own port, temporary directory and log file, started with persistence off. Each [`Node`] can be
//! inspected with a plain synchronous client and faulted on purpose: killed, paused (`SIGSTOP`),
//! resumed, restarted on the same port with empty data (now, or after a delay with
//! [`Node::restart_after`]) or with its data kept ([`Node::restart_keeping_data`], as a node
//! with persistence), and given a key's early expiry ([`Node::shorten`]) as if its clock had
//! jumped. Everything is cleaned up on drop.
//!
//! Faults of the network between one client and one node come from a [`Proxy`] in front of the
//! node, switched at run time between the [`Mode`]s pass, delay, blackhole, reset, and hold-after
//! (a blackhole that begins after a given number of requests), and able to leave its current
//! connections half-open for good ([`Proxy::strand`]) while it serves new ones.
//! [`Cluster::proxies`] gives one client a proxy per node ([`Proxies`]), so two clients can see
//! different partitions of the same cluster.
//!
//! A [`RedisCluster`] is the other shape: one real Redis Cluster (`--cluster-enabled yes` nodes
//! joined by `redis-cli --cluster create`), masters with replicas, that a test can reshard
//! ([`RedisCluster::migrate_slot`], or halfway with [`RedisCluster::begin_migration`]) and fail over
//! ([`RedisCluster::failover`]) while it looks at keys on the master that serves them
//! ([`RedisCluster::master_of_key`], [`key_slot`]). To Redlock a whole Redis Cluster is one member.
//!
//! The `redis-server` binary is taken from `REDMUTEX_REDIS_SERVER` if that is set, else from `PATH`
//! or the usual system directories; if it is missing and we run as root on a Debian-like system,
//! Debian's package is installed with `apt-get` once (see [`Error::NotFound`] otherwise). The same
//! goes for `redis-cli` ([`redis_cli_binary`], `REDMUTEX_REDIS_CLI`, Debian's `redis-tools`), which
//! only a [`RedisCluster`] needs. Other releases (Redis 6.0 and 6.2, Valkey) come from
//! [`release_binary`], for nodes that [`Cluster::start_with`] starts with a binary each.
//!
//! [`Cluster::start_tls`] starts nodes that serve TLS with certificates of a throwaway CA ([`Tls`]),
//! made at test time; [`Node::acl_setuser`] and [`Node::config_set`] set up users and limits.
//!
//! This crate is meant as a dev-dependency: it panics freely in its helpers, because a failing
//! helper means a broken test environment, and the panic message says what went wrong.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//!
//! let cluster = redmutex_testenv::Cluster::start(3);
//! assert_eq!(cluster.urls().len(), 3);
//!
//! let node = cluster.node(0);
//! node.set_px("greeting", "hello", Duration::from_secs(5));
//! assert_eq!(node.get("greeting").as_deref(), Some("hello"));
//! assert!(node.pttl("greeting") > 0);
//!
//! // A restarted node keeps its port but forgets everything, as a node without persistence does.
//! node.restart();
//! assert_eq!(node.get("greeting"), None);
//!
//! // A client that reaches the nodes through proxies, with node 2 cut off from it.
//! let proxies = cluster.proxies();
//! proxies.set_mode(&[2], redmutex_testenv::Mode::Blackhole);
//! let urls = proxies.urls(); // give these to the client
//! assert_eq!(urls.len(), 3);
//! ```

mod cluster;
mod error;
mod install;
mod migration;
mod port;
mod proxy;
mod redis_cluster;
mod release;
mod server;
mod slot;
mod tls;
mod topology;

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use cluster::Cluster;
pub use error::Error;
pub use install::{redis_cli_binary, redis_server_binary};
pub use migration::Migration;
pub use proxy::{Mode, Proxies, Proxy};
pub use redis_cluster::{RedisCluster, RedisClusterBuilder};
pub use release::{Release, release_binary};
pub use server::{ClientInfo, Node, RestartHandle};
pub use slot::{SLOTS, crc16, key_in_slot, key_slot};
pub use tls::{Identity, Tls};
