//! The client: N independent members (standalone Redis servers or whole Redis Clusters), one
//! shared connection each.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::nodes::Node;
use crate::nodes::connection::NodeConnection;
use crate::nodes::member::{self, MemberClient};
use crate::nodes::redact::{redact_entry, redact_url};
use crate::nodes::script::{self, Script};
use crate::nodes::servers::Servers;
use crate::ops;
use crate::ops::checks::Checkup;
use crate::primitives;
use crate::primitives::election::Election;
use crate::primitives::multi::MultiTarget;
use crate::primitives::mutex::{Mutex, MutexTarget};
use crate::primitives::rwlock::RwLock;
use crate::primitives::semaphore::Semaphore;
use crate::waiting::fair::scripts as fair;
use crate::waiting::listeners::Listeners;

/// Every script, from each layer's own list.
const SCRIPT_LISTS: &[&[Script]] = &[primitives::SCRIPTS, fair::SCRIPTS, ops::SCRIPTS];

/// How many scripts a client loads into each node.
pub(crate) const SCRIPT_COUNT: usize = script::count(SCRIPT_LISTS);

/// Every script, loaded into a node's cache on each new connection, so that requests sent by
/// digest find them even when nobody is left to send the fallback (see `request::Delivery`), and
/// known by digest when a node names one in an error.
pub(crate) static SCRIPTS: [Script; SCRIPT_COUNT] = script::concat(SCRIPT_LISTS);

/// How long the background connection warm-up waits for a node.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(10);

/// A client over N independent members: standalone Redis masters, or whole Redis Clusters.
///
/// Holds one multiplexed connection per member (for a cluster, the redis crate's cluster client),
/// shared by every [`Mutex`] and [`Lock`](crate::Lock) made from it, and re-made after any
/// failure: create one `Redlock` per process and clone it freely (a clone is an `Arc` increment).
///
/// The members must be independent: no replication between them, and no two of them in one
/// cluster. A Redis Cluster is one member, however many masters it has (its nodes share one
/// keyspace): give any one of its nodes' URLs (with the `cluster` feature, on by default).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::Redlock;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(5);
/// let urls = cluster.urls();
/// // e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", ...]
/// let redlock = Redlock::connect(urls).await?;
/// assert_eq!(redlock.len(), 5);
/// assert_eq!(redlock.quorum(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    nodes: Arc<[Node]>,
    /// Release notice listeners, for mutexes with wake-up on release.
    listeners: Arc<Listeners>,
}

impl Redlock {
    /// Connects to every node URL: `redis://[[user]:password@]host:port[/db]`, `valkey://` alike,
    /// or `rediss://` / `valkeys://` for TLS with the `tls` feature. A URL of any node of a Redis
    /// Cluster (such as a managed service's configuration endpoint) stands for the whole cluster,
    /// one member, with the `cluster` feature (on by default): redmutex finds out when it
    /// connects (see [`MemberClient`]). Several URLs of one cluster's nodes joined by `|`
    /// (`redis://c1:7000|redis://c2:7000`) are one member whose cluster client starts from any
    /// of them, so the member is found while one of them is down. Without the feature, such a member answers every call
    /// with [`NodeErrorKind::ClusterFeatureOff`](crate::NodeErrorKind::ClusterFeatureOff).
    ///
    /// A thin layer over [`from_clients`](Redlock::from_clients): each URL becomes a
    /// `redis::Client`, with the same behaviour. Connections are made lazily and re-made after
    /// failures, so a node that is down at start-up is not an error: a majority is enough to lock,
    /// and the node shows up in that call's errors.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if `urls` is empty or a URL does not parse, for a TLS URL when the
    /// `tls` feature is off (the message names the feature), and when two URLs reach one server
    /// (the same host and port, whatever the scheme, database or credentials; names are not
    /// resolved): the message names both entries, counted from 1. It never contains a password.
    /// Two names of one server (`localhost` and `127.0.0.1`, or two seeds of one Redis Cluster)
    /// are found once connected, by the server's `run_id`: the member connected second gets no
    /// lock request, and each call reports it as
    /// [`NodeErrorKind::SameServer`](crate::NodeErrorKind::SameServer), a refusal.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it completes at its first poll, since it waits for no node (connections are
    /// made in the background, or on first use). A future dropped unpolled builds nothing and
    /// connects nowhere.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use redmutex::{Error, Redlock};
    ///
    /// let error = Redlock::connect(["redis://:hunter2@127.0.0.1:6379", "not a url"])
    ///     .await
    ///     .unwrap_err();
    /// assert!(matches!(error, Error::Config { .. }));
    /// assert!(!error.to_string().contains("hunter2"));
    /// # }
    /// ```
    ///
    /// Two standalone servers and a Redis Cluster, given by one of its nodes: three members.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let servers = redmutex_testenv::Cluster::start(2);
    /// let cluster = redmutex_testenv::RedisCluster::start(3, 0);
    /// let urls = [servers.urls()[0].clone(), servers.urls()[1].clone(), cluster.seed_url()];
    /// // e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://config-endpoint:6379"]
    /// let redlock = Redlock::connect(urls).await?;
    /// assert_eq!((redlock.len(), redlock.quorum()), (3, 2));
    /// let lock = redlock.new_mutex("invoice:2026-12").lock().await?;
    /// lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect<I>(urls: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut clients = Vec::new();
        for (index, url) in urls.into_iter().enumerate() {
            let url = url.as_ref();
            let seeds = member::seeds(url);
            if seeds.len() > 1 {
                clients.push(seeded(index, &seeds)?);
                continue;
            }
            let address = redact_url(url);
            let client = member::node_client(url).map_err(|_| url_error(index, url))?;
            clients.push((MemberClient::Node(client), Some(address)));
        }
        refuse_duplicates(&clients, "urls")?;
        Redlock::with_clients(clients)
    }

    /// Builds a client over members reached through `clients`, one per member, in order: for
    /// connections [`connect`](Redlock::connect) cannot describe with a URL, such as TLS with a
    /// private CA or a client certificate (`redis::Client::build_with_tls`, with the `tls`
    /// feature), or credentials that must not sit in a URL. Each is a `redis::Client` of one node
    /// (a standalone server, or any node of a Redis Cluster, which stands for its cluster as with
    /// `connect`) or, with the `cluster` feature, a `redis::cluster::ClusterClient`: see
    /// [`MemberClient`], which also says what to build a cluster client with.
    ///
    /// Everything works as with `connect`: one connection per node, made on first use, re-made
    /// after any failure (including a refused set-up: wrong credentials, `maxclients` reached) and
    /// replaced when it goes half-open; the redis crate's own response and connect timeouts are
    /// not used, since redmutex bounds every call by the mutex's node timeout; the scripts are
    /// loaded on each new connection; and mutexes with wake-up on release open one pub/sub
    /// connection per member through the same clients (for a cluster, one RESP3 cluster
    /// connection for sharded pub/sub). Called within a tokio runtime, it starts connecting in
    /// the background; outside one, connections open on first use. Unlike `connect`, it keeps the
    /// clients' TCP settings: set `TCP_NODELAY` on them (`redis::io::tcp::TcpSettings`), or with
    /// nodes in other zones a request written right after another may wait for a round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if there are no clients, or when two node clients reach one server (the
    /// same host and port), as with [`connect`](Redlock::connect).
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Redlock::connect): it completes at its first poll, and a future dropped
    /// unpolled connects nowhere.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let urls = cluster.urls();
    /// // With the `tls` feature, `redis::Client::build_with_tls(url, certificates)` makes clients
    /// // that trust a private CA or present a client certificate.
    /// let clients = urls
    ///     .iter()
    ///     .map(|url| redis::Client::open(url.as_str()))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let redlock = Redlock::from_clients(clients).await?;
    /// let lock = redlock.new_mutex("report:weekly").lock().await?;
    /// lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_clients<I>(clients: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: Into<MemberClient>,
    {
        let clients = clients
            .into_iter()
            .map(|client| {
                let client = client.into();
                // A cluster client does not tell its seed nodes: its rows show no address.
                let address = (!client.is_cluster()).then(|| client.address());
                (client, address)
            })
            .collect::<Vec<_>>();
        refuse_duplicates(&clients, "clients")?;
        Redlock::with_clients(clients)
    }

    /// The client over `clients`, each with its password-free address for messages.
    fn with_clients(clients: Vec<(MemberClient, Option<String>)>) -> Result<Redlock, Error> {
        #[cfg(feature = "tls")]
        crate::nodes::tls::install_crypto_provider();
        let seats = Servers::seats(
            clients
                .iter()
                .map(|(client, address)| address.clone().unwrap_or_else(|| client.address()))
                .collect(),
        );
        let nodes: Vec<Node> = clients
            .into_iter()
            .zip(seats)
            .map(|((client, address), seat)| Node {
                connection: NodeConnection::reconnecting(client, &SCRIPTS, Some(seat)),
                address,
            })
            .collect();
        let listened = nodes.iter().map(|node| node.connection.clone()).collect();
        let redlock = Redlock::from_nodes(nodes, listened)?;
        redlock.warm_up();
        Ok(redlock)
    }

    /// Builds a client from connections the caller made, one per node, in order.
    ///
    /// Prefer [`connect`](Redlock::connect) or [`from_clients`](Redlock::from_clients), which make
    /// connections that come back by themselves after any failure and support wake-up on release:
    /// a client built here has no way to open the release listeners (its mutexes with wake-up on
    /// release poll instead), and its connections recover only as well as the caller made them
    /// (see [`NodeConnection`]). Build them without response or connect timeouts of their own:
    /// the redis crate's defaults (500 ms, 1 s) would cut node calls shorter than the mutex's
    /// timeout. Called within a tokio runtime, it loads the scripts on every node in the
    /// background.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if there are no connections.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redmutex::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// use redis::AsyncConnectionConfig;
    ///
    /// // No timeouts of the driver's own: redmutex bounds each call by the mutex's node timeout.
    /// let config = AsyncConnectionConfig::new()
    ///     .set_response_timeout(None)
    ///     .set_connection_timeout(None);
    /// let mut connections = Vec::new();
    /// for url in cluster.urls() {
    ///     let client = redis::Client::open(url)?;
    ///     connections.push(client.get_multiplexed_async_connection_with_config(&config).await?);
    /// }
    /// let redlock = Redlock::new(connections)?;
    /// assert_eq!(redlock.len(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new<I>(connections: I) -> Result<Redlock, Error>
    where
        I: IntoIterator,
        I::Item: Into<NodeConnection>,
    {
        let nodes = connections
            .into_iter()
            .map(|connection| Node {
                connection: connection.into().with_scripts(&SCRIPTS),
                address: None,
            })
            .collect();
        // No clients to open listeners with: mutexes with wake-up on release poll instead.
        let redlock = Redlock::from_nodes(nodes, Vec::new())?;
        redlock.warm_up();
        Ok(redlock)
    }

    /// The client over `nodes`; `listened` are the connections whose clients the release
    /// listeners connect through (none for connections the caller built).
    fn from_nodes(nodes: Vec<Node>, listened: Vec<NodeConnection>) -> Result<Redlock, Error> {
        if nodes.is_empty() {
            return Err(Error::config("nodes", "at least one node is required"));
        }
        Ok(Redlock {
            nodes: nodes.into(),
            listeners: Arc::new(Listeners::new(listened)),
        })
    }

    /// Opens the connections and loads the scripts in the background, so the first lock does not
    /// pay for the handshakes, and an unlock sent by digest to a node that then stalls still works
    /// when the node resumes (its NOSCRIPT fallback would never be sent).
    fn warm_up(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for node in self.nodes.iter() {
            let mut connection = node.connection.clone();
            runtime.spawn(async move {
                // Best effort: a node that is down is reported by the calls that need it. Bounded,
                // so a paused node does not keep this task alive.
                let _ = tokio::time::timeout(WARM_UP_TIMEOUT, connection.warm_up()).await;
            });
        }
    }

    /// A [`Mutex`] for the resource `name`, with default settings (see [`Mutex`] for each).
    ///
    /// The name is the Redis key on every node. An invalid name (empty) is reported by the first
    /// lock operation, before any I/O.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Redlock;
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock
    ///     .new_mutex("book:978-0-13-468599-1")
    ///     .with_expiry(Duration::from_secs(30));
    /// assert_eq!(mutex.name(), "book:978-0-13-468599-1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_mutex(&self, name: impl Into<String>) -> Mutex {
        let target = Arc::new(MutexTarget::new(name.into().into()));
        Mutex::new(Arc::clone(&self.nodes), Arc::clone(&self.listeners), target)
    }

    /// An [`Election`] over `name`, with default settings (see [`Election`] for each): one
    /// leader at a time among the candidates that campaign on it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let leadership = redlock.new_election("scheduler").campaign("host-a").await?;
    /// assert_eq!(leadership.identity(), "host-a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_election(&self, name: impl Into<String>) -> Election {
        let (nodes, listeners) = (Arc::clone(&self.nodes), Arc::clone(&self.listeners));
        Election::new(nodes, listeners, name.into().into())
    }

    /// A [`Semaphore`] for the resource `name` with `permits` permits, with default settings (see
    /// [`Semaphore`] for each): at most `permits` holders at once.
    ///
    /// Every `Semaphore` of a name must use the same number of permits (nodes refuse another
    /// count while anyone holds the name). Zero permits, like an empty name, is reported by the
    /// first operation as [`Error::Config`], before any I/O.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{Error, Redlock};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// let crawlers = redlock.new_semaphore("crawler:example.org", 3);
    /// assert_eq!((crawlers.permits(), crawlers.quorum()), (3, 3));
    ///
    /// let none = redlock.new_semaphore("crawler:example.org", 0);
    /// assert!(matches!(none.acquire().await, Err(Error::Config { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(
            Arc::clone(&self.nodes),
            Arc::clone(&self.listeners),
            name.into(),
            permits,
        )
    }

    /// A [`Mutex`] over every name of `names` at once: its [`lock()`](Mutex::lock) and
    /// [`try_lock()`](Mutex::try_lock) take all of them or none, and its [`Lock`](crate::Lock)
    /// holds all of them ([`Lock::names`](crate::Lock::names)). Default settings, as for
    /// [`new_mutex`](Redlock::new_mutex); fencing hands out one token for the whole set.
    ///
    /// The names are the keys, as for a mutex: a multi-name mutex and a [`Mutex`] on one of its
    /// names exclude each other, and two multi-name mutexes exclude each other exactly when they
    /// share a name. Each node runs one script that sets every key or none, so no node ever holds
    /// part of the set, and two lockers of overlapping sets cannot deadlock each holding a part.
    /// Duplicate names collapse (the first stays). An empty list or an empty name is reported by
    /// the first lock operation as [`Error::Config`], before any I/O.
    ///
    /// See [`guide::multi_name`](crate::guide::multi_name) for the keys, the safety argument and the
    /// costs.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{Error, Redlock};
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// // A transfer holds both accounts.
    /// let transfer = redlock.new_multi_mutex(["account:1", "account:2"]);
    /// let lock = transfer.lock().await?;
    /// assert_eq!(lock.names().collect::<Vec<_>>(), ["account:1", "account:2"]);
    ///
    /// // Anyone who needs one of them waits.
    /// let audit = redlock.new_mutex("account:2");
    /// assert!(matches!(audit.try_lock().await, Err(Error::Taken { .. })));
    /// lock.unlock().await?;
    /// audit.try_lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_multi_mutex<I>(&self, names: I) -> Mutex
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let names = names.into_iter().map(|name| Arc::from(name.into()));
        let target = Arc::new(MultiTarget::new(names));
        Mutex::new(Arc::clone(&self.nodes), Arc::clone(&self.listeners), target)
    }

    /// A read-write lock for the resource `name`, with default settings (those of a [`Mutex`]):
    /// any number of readers at once, or one writer.
    ///
    /// The writer holds the name's key, as a [`Mutex`] does, so a `Mutex` on the name behaves as
    /// a writer. An invalid name is reported by the first lock operation, before any I/O. See
    /// [`RwLock`] for the keys and the safety argument.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Redlock;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// let config = redlock.new_rwlock("config:pricing");
    /// let reader = config.read().await?;
    /// let another = config.read().await?; // readers hold together
    /// reader.unlock().await?;
    /// another.unlock().await?;
    /// let writer = config.write().await?;
    /// writer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_rwlock(&self, name: impl Into<String>) -> RwLock {
        let (nodes, listeners) = (Arc::clone(&self.nodes), Arc::clone(&self.listeners));
        RwLock::new(nodes, listeners, name.into().into())
    }

    /// The number of members: standalone servers, and Redis Clusters counted once each.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Settings alone: no node is contacted here, so any URL will do.
    /// let redlock = redmutex::Redlock::connect(["redis://127.0.0.1:1/"]).await?;
    /// assert_eq!(redlock.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    #[allow(clippy::len_without_is_empty)] // a Redlock always has at least one node
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// How many nodes must agree for a [`Mutex`]: `len() / 2 + 1`. A [`Semaphore`] of two
    /// permits or more needs more ([`Semaphore::quorum`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let urls = ["redis://127.0.0.1:1/", "redis://127.0.0.1:2/", "redis://127.0.0.1:3/"];
    /// let redlock = redmutex::Redlock::connect(urls).await?;
    /// assert_eq!(redlock.quorum(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        crate::engine::quorum::quorum(self.nodes.len())
    }

    /// Node checks for every configured node, to run at start-up or from a doctor command; see
    /// [`Checkup`] for what is checked.
    ///
    /// # Examples
    ///
    /// See [`Checkup`].
    pub fn checkup(&self) -> Checkup {
        Checkup::new(Arc::clone(&self.nodes))
    }
}

/// The member of the `index`th entry, a Redis Cluster given by several `seeds`, with its address
/// for messages (the seeds without their secrets, joined by `|`).
fn seeded(index: usize, seeds: &[&str]) -> Result<(MemberClient, Option<String>), Error> {
    let address = seeds
        .iter()
        .map(|seed| redact_url(seed))
        .collect::<Vec<_>>()
        .join("|");
    #[cfg(feature = "cluster")]
    {
        for seed in seeds {
            member::node_client(seed).map_err(|_| url_error(index, seed))?;
        }
        let client =
            member::seeded_cluster_client(seeds).map_err(|_| url_error(index, seeds[0]))?;
        Ok((client, Some(address)))
    }
    #[cfg(not(feature = "cluster"))]
    Err(Error::config(
        format!("urls[{index}]"),
        format!(
            "entry {} ({address}) names a Redis Cluster by several seed nodes, which needs \
             redmutex's `cluster` feature",
            index + 1
        ),
    ))
}

/// Why `url` (the `index`th, counted from 0) makes no client. The rule names the entry as given
/// without its secrets, counted from 1 as an operator lists them, since the redis crate's own
/// messages are generic.
fn url_error(index: usize, url: &str) -> Error {
    let entry = format!("entry {} ({})", index + 1, redact_entry(url));
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let rule = match scheme.as_deref() {
        Some("rediss" | "valkeys") if cfg!(not(feature = "tls")) => format!(
            "{entry}: TLS needs redmutex's `tls` feature \
             (redmutex = {{ version = \"...\", features = [\"tls\"] }})"
        ),
        _ => format!(
            "{entry} is not a valid Redis URL: write it as redis://host:port \
             (rediss:// for TLS)"
        ),
    };
    Error::config(format!("urls[{index}]"), rule)
}

/// Refuses two members that reach one server: it would count twice towards every quorum, so
/// with three members one server would decide alone, and a member listed twice on the way to
/// its own lock would wait for itself. Entries are counted from 1, as an operator lists them.
fn refuse_duplicates(clients: &[(MemberClient, Option<String>)], field: &str) -> Result<(), Error> {
    let mut seen: Vec<(String, usize)> = Vec::with_capacity(clients.len());
    for (index, (client, _)) in clients.iter().enumerate() {
        let Some(server) = client.server() else {
            continue;
        };
        if let Some(&(_, first)) = seen.iter().find(|(known, _)| *known == server) {
            let entry = |index: usize| {
                let address = clients[index].1.clone();
                let address = address.unwrap_or_else(|| clients[index].0.address());
                format!("entry {} ({address})", index + 1)
            };
            return Err(Error::config(
                field,
                format!(
                    "{} and {} reach the same server, {server}: each member must be another \
                     server, or its vote would count twice",
                    entry(first),
                    entry(index)
                ),
            ));
        }
        seen.push((server, index));
    }
    Ok(())
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::value::READERS_MARKER;
    use crate::nodes::listener::NOTICE_PREFIX;
    use crate::ops::inspect::{FORCE_RELEASE, INSPECT};
    use crate::primitives::{multi, mutex, rwlock, semaphore};

    #[test]
    fn digests_are_sha1_hex_and_distinct() {
        assert_eq!(SCRIPTS.len(), 25);
        for script in &SCRIPTS {
            let digest = script.digest();
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(digest, redis::Script::new(script.text()).get_hash());
        }
        let distinct: std::collections::HashSet<_> = SCRIPTS.iter().map(Script::digest).collect();
        assert_eq!(
            distinct.len(),
            SCRIPTS.len(),
            "SCRIPTS lists every script once"
        );
    }

    #[test]
    fn notices_go_to_the_channel_listeners_subscribe_to() {
        for script in [
            mutex::RELEASE_NOTIFY,
            mutex::target::RELEASE_KEEP,
            FORCE_RELEASE,
            semaphore::target::RELEASE,
            multi::RELEASE,
            rwlock::target::READ_RELEASE,
            fair::RELEASE,
        ] {
            assert!(script.text().contains(&format!("'{NOTICE_PREFIX}' .. ")));
        }
    }

    #[test]
    fn the_readers_marker_is_the_one_the_scripts_use() {
        let quoted = format!("'{READERS_MARKER}'");
        for script in [
            rwlock::target::READ_ACQUIRE,
            rwlock::target::READ_EXTEND,
            rwlock::target::READ_RELEASE,
            rwlock::target::WRITE_ACQUIRE,
            INSPECT,
            FORCE_RELEASE,
        ] {
            let script = script.text();
            assert!(script.contains(&quoted));
            // Every mention is the marker itself, quoted whole.
            assert_eq!(
                script.matches("redmutex:readers").count(),
                script.matches(&quoted).count()
            );
        }
    }

    /// Every script loads into a real node under the digest it is sent by; a script the node
    /// refuses (a Lua syntax error) is reported at its `.lua` file and line.
    #[tokio::test]
    async fn every_script_loads_into_a_node() {
        let cluster = redmutex_testenv::Cluster::start(1);
        let client = redis::Client::open(cluster.urls()[0].as_str()).expect("a URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("the node answers");
        for script in &SCRIPTS {
            if let Err(error) = crate::nodes::script::load(&mut connection, script).await {
                panic!("{error}");
            }
        }
    }
}
