//! Looking at a lock from outside, and breaking it in an emergency: for operators and their tools.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::engine::quorum::{permit_quorum, quorum};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::nodes::probe::{Answer, each_node, eval, unexpected};
use crate::nodes::script::{Script, lua};
use crate::primitives::mutex::Mutex;
use crate::primitives::rwlock::{RwLock, mark_key, readers_key};
use crate::primitives::semaphore::Semaphore;

/// What holds a name, read in one atomic step (`ops/inspect/inspect.lua`).
pub(crate) const INSPECT: Script = lua!("ops/inspect/inspect.lua");
/// Deletes a name's keys, whatever they hold (`ops/inspect/force_release.lua`).
pub(crate) const FORCE_RELEASE: Script = lua!("ops/inspect/force_release.lua");

/// The operator's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[INSPECT, FORCE_RELEASE];

/// Who holds a name, as a quorum of nodes sees it: the answer of [`Mutex::inspect`],
/// [`RwLock::inspect`] and [`Semaphore::inspect`], whatever holds the name.
///
/// Never contains a lock value (whoever knows it can extend or release the lock), only its
/// fingerprint: the first 12 hex digits of the value's SHA-1, computed by each node. Equal
/// fingerprints mean equal values; a fingerprint does not give the value back (the default values
/// carry 128 random bits).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let cluster = testenv::Cluster::start(3);
/// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// let mutex = redlock.new_mutex("job:backup");
/// assert!(!mutex.inspect().await?.is_held());
///
/// let lock = mutex.lock().await?;
/// let state = mutex.inspect().await?;
/// assert!(state.is_held());
/// assert!(state.ttl().is_some_and(|ttl| ttl <= mutex.expiry()));
/// assert_eq!(state.holders(), 3);
/// # lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockState {
    quorum: usize,
    nodes: Vec<NodeLockState>,
    held: Option<Held>,
}

/// What holds a name on a quorum, on how many nodes, and the longest it lasts unless extended.
#[derive(Debug, Clone)]
struct Held {
    holder: Holder,
    nodes: usize,
    ttl: Option<Duration>,
}

/// What holds a name on a quorum of nodes: [`LockState::holder`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let cluster = testenv::Cluster::start(3);
/// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// use redmutex::Holder;
///
/// let catalog = redlock.new_rwlock("catalog");
/// let (first, second) = (catalog.read().await?, catalog.read().await?);
/// match catalog.inspect().await?.holder() {
///     Some(Holder::Readers { count, .. }) => assert_eq!(*count, 2),
///     other => panic!("{other:?}"),
/// }
/// # first.unlock().await?;
/// # second.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// One lock value: a [`Mutex`]'s lock or a [`RwLock`]'s writer (their keys are alike, so the
    /// nodes cannot tell them apart).
    #[non_exhaustive]
    Exclusive {
        /// The value's fingerprint (see [`LockState`]).
        fingerprint: String,
    },
    /// Readers of a [`RwLock`]: `count` readers each hold on a quorum of nodes.
    #[non_exhaustive]
    Readers {
        /// How many readers hold.
        count: usize,
    },
    /// A [`Semaphore`]: `held` of its `permits` permits are held, each on the semaphore's quorum.
    #[non_exhaustive]
    Permits {
        /// How many permits are held.
        held: usize,
        /// How many permits the semaphore has.
        permits: u32,
    },
    /// A key redmutex never writes at a name (a hash, a list, ...), of one type on a quorum: no
    /// lock can be taken while it stands.
    #[non_exhaustive]
    Foreign {
        /// The key's type, as Redis's `TYPE` names it.
        kind: String,
    },
}

impl Holder {
    /// A one-word name of what holds: `exclusive`, `readers`, `semaphore` or `foreign`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let workers = redlock.new_semaphore("workers", 2);
    /// let permit = workers.acquire().await?;
    /// let state = workers.inspect().await?;
    /// assert_eq!(state.holder().map(|holder| holder.kind()), Some("semaphore"));
    /// # permit.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Holder::Exclusive { .. } => "exclusive",
            Holder::Readers { .. } => "readers",
            Holder::Permits { .. } => "semaphore",
            Holder::Foreign { .. } => "foreign",
        }
    }
}

/// One node's answer to an inspection ([`Mutex::inspect`], [`RwLock::inspect`],
/// [`Semaphore::inspect`]).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let cluster = testenv::Cluster::start(3);
/// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// use redmutex::NodeAnswer;
///
/// let state = redlock.new_mutex("job:rotate-logs").inspect().await?;
/// for node in state.nodes() {
///     match &node.answer {
///         NodeAnswer::Free => println!("node {}: free", node.node),
///         NodeAnswer::Held { fingerprint, ttl } => {
///             println!("node {}: held ({fingerprint}), ttl {ttl:?}", node.node)
///         }
///         NodeAnswer::Readers { readers, .. } => {
///             println!("node {}: {} readers", node.node, readers.len())
///         }
///         NodeAnswer::Failed(error) => println!("node {}: {error}", node.node),
///         other => println!("node {}: {other}", node.node),
///     }
///     if let Some(ttl) = node.writer_waiting {
///         println!("node {}: a writer waits, new readers refused for {ttl:?}", node.node);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The node's index, in the order given to [`Redlock`](crate::Redlock).
    pub node: usize,
    /// The node's URL with any password hidden; `None` for connections the caller built.
    pub address: Option<String>,
    /// What the node said.
    pub answer: NodeAnswer,
    /// When a waiting writer of a [`RwLock`] left its mark (`<name>:writer-waiting`) here, which
    /// refuses new readers on this node: the mark's remaining time to live (`Duration::MAX` if
    /// it never expires, which redmutex never does). `None` without a mark, or when the node
    /// failed.
    pub writer_waiting: Option<Duration>,
}

/// A live entry of a read-write lock's readers or a semaphore's holders, on one node.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let cluster = testenv::Cluster::start(3);
/// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
/// use redmutex::NodeAnswer;
///
/// let workers = redlock.new_semaphore("workers", 3);
/// let permit = workers.acquire().await?;
/// let state = workers.inspect().await?;
/// if let NodeAnswer::Permits { holders, .. } = &state.nodes()[0].answer {
///     assert_eq!(holders.len(), 1);
///     assert!(holders[0].ttl <= workers.expiry());
///     assert_eq!(holders[0].fingerprint.len(), 12);
/// }
/// # permit.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderEntry {
    /// The fingerprint of the holder's value (see [`LockState`]).
    pub fingerprint: String,
    /// How long the entry lives on this node, by the node's clock, unless its holder extends it.
    pub ttl: Duration,
}

/// What one node said about a name.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeAnswer {
    /// The key is not there.
    Free,
    /// The key holds a lock value: a [`Mutex`]'s or a [`RwLock`]'s writer's.
    Held {
        /// The first 12 hex digits of the SHA-1 of the value: equal on nodes that hold one value.
        fingerprint: String,
        /// The key's remaining time to live as the node reported it; `None` if the key never
        /// expires (something other than redmutex set it).
        ttl: Option<Duration>,
    },
    /// Readers of a [`RwLock`] hold the name here: its key holds the readers' marker.
    #[non_exhaustive]
    Readers {
        /// The live readers here (none when every entry has expired but the marker has not yet).
        readers: Vec<HolderEntry>,
        /// The marker's remaining time to live (the latest reader's); `None` if it never expires.
        ttl: Option<Duration>,
    },
    /// A [`Semaphore`]'s holders: the name's key is their sorted set.
    #[non_exhaustive]
    Permits {
        /// The live holders here.
        holders: Vec<HolderEntry>,
        /// The permit count the holders agreed on; `None` where the set has none (redmutex did
        /// not make it).
        permits: Option<u32>,
        /// The set's remaining time to live; `None` if it never expires.
        ttl: Option<Duration>,
    },
    /// A key of a type redmutex never writes at a name.
    #[non_exhaustive]
    Foreign {
        /// Its type, as Redis's `TYPE` names it (`hash`, `list`, ...).
        kind: String,
        /// Its remaining time to live; `None` if it never expires.
        ttl: Option<Duration>,
    },
    /// No answer: the node's error or timeout.
    Failed(NodeErrorKind),
}

/// Per fingerprint: the nodes where it is live, and the smallest TTL among them.
#[derive(Default)]
struct Seen {
    nodes: HashSet<usize>,
    ttl: Option<Duration>,
}

/// The smaller of two TTLs, where `None` (a key without expiry) is the larger.
fn smaller(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Groups `(node, fingerprint, ttl)` sightings by fingerprint.
fn group<'a>(
    sightings: impl Iterator<Item = (usize, &'a str, Option<Duration>)>,
) -> HashMap<&'a str, Seen> {
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    for (node, fingerprint, ttl) in sightings {
        let entry = seen.entry(fingerprint).or_default();
        entry.ttl = smaller(entry.ttl, ttl);
        entry.nodes.insert(node);
    }
    seen
}

/// The holders among `sightings` that are live on at least `needed` nodes: how many, on how many
/// nodes in all, and the longest any of them lasts (each lasts as long as its smallest TTL).
fn holding<'a>(
    sightings: impl Iterator<Item = (usize, &'a str, Option<Duration>)>,
    needed: usize,
) -> Option<(usize, usize, Option<Duration>)> {
    let mut count = 0;
    let mut nodes = HashSet::new();
    let mut longest: Option<Duration> = None;
    for seen in group(sightings).into_values() {
        if seen.nodes.len() >= needed {
            count += 1;
            nodes.extend(seen.nodes);
            longest = longest.max(seen.ttl);
        }
    }
    (count > 0).then_some((count, nodes.len(), longest))
}

/// The permit count most nodes report (the larger on a tie): the holders of a semaphore agree on
/// one, and a node with another count refuses them.
fn reported_permits(nodes: &[NodeLockState]) -> Option<u32> {
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for node in nodes {
        if let NodeAnswer::Permits {
            permits: Some(permits),
            ..
        } = node.answer
        {
            *counts.entry(permits).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(permits, nodes)| (nodes, permits))
        .map(|(permits, _)| permits)
}

impl LockState {
    /// Judges the nodes' answers: held when a quorum of them agrees on a holder. `permits` is the
    /// count of the semaphore asked about, if one was.
    ///
    /// What holds a name is always of one kind per node (the name's key has one type), and the
    /// rule for each kind is the one its acquire follows, so at most one kind can hold:
    /// - a lock value (a mutex's or a writer's) holds when a majority holds that very value;
    /// - readers hold when at least one reader's entry is live on a majority (each reader
    ///   acquired on its own majority; readers on different nodes each count if each has one).
    ///   Their count is the number of such readers, so a reader whose failed attempt left
    ///   entries on a minority does not count;
    /// - a semaphore holds when at least one holder's entry is live on the semaphore's quorum
    ///   (`P * N / (P + 1) + 1`, more than a majority for `P >= 2`): `held` of `P` counts those
    ///   holders. `P` is the semaphore's when one is inspected, else the count most nodes report;
    /// - a key of another type holds when a majority has a key of that type.
    ///
    /// Answers are needed from the quorum of the name's kind (the semaphore's when it is one):
    /// with fewer, a holder could hide on the nodes that did not answer.
    ///
    /// The TTL is the longest the name stays held unless extended: for one value, the smallest
    /// TTL among its nodes; for readers and permits, the longest of theirs, each reader or holder
    /// lasting as long as its smallest TTL.
    pub(crate) fn judge(
        nodes: Vec<NodeLockState>,
        permits: Option<u32>,
    ) -> Result<LockState, Error> {
        let total = nodes.len();
        let majority = quorum(total);
        let permits = permits.or_else(|| reported_permits(&nodes));
        let quorum = permits.map_or(majority, |p| permit_quorum(total, p).max(majority));
        let answered = nodes
            .iter()
            .filter(|n| !matches!(n.answer, NodeAnswer::Failed(_)))
            .count();
        if answered < quorum {
            let failures = nodes
                .iter()
                .filter_map(|n| match &n.answer {
                    NodeAnswer::Failed(kind) => Some(NodeError {
                        node: n.node,
                        kind: kind.clone(),
                    }),
                    _ => None,
                })
                .collect();
            return Err(Error::NoQuorum {
                ok: answered,
                quorum,
                total,
                failures,
            });
        }
        let held = exclusive(&nodes, majority)
            .or_else(|| readers(&nodes, majority))
            .or_else(|| permits.and_then(|permits| semaphore(&nodes, permits, quorum)))
            .or_else(|| foreign(&nodes, majority));
        Ok(LockState {
            quorum,
            nodes,
            held,
        })
    }

    /// True when a quorum of nodes agrees on a holder (see [`holder`](LockState::holder)):
    /// somebody holds the name.
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// What holds the name on a quorum: one lock value, readers (how many), a semaphore (how many
    /// of its permits), or a key redmutex never writes; `None` when not held.
    ///
    /// Each holder counts where the rule of its kind says it holds: a lock value or a reader
    /// when it is live on a majority of the nodes, a semaphore's holder when it is live on the
    /// semaphore's quorum ([`Semaphore::quorum`]). Readers whose failed attempts left entries on
    /// fewer nodes are not counted.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Holder;
    ///
    /// let exports = redlock.new_semaphore("exports", 3);
    /// let (first, second) = (exports.acquire().await?, exports.acquire().await?);
    /// // A mutex over the name sees the semaphore too.
    /// let state = redlock.new_mutex("exports").inspect().await?;
    /// match state.holder() {
    ///     Some(Holder::Permits { held, permits, .. }) => assert_eq!((*held, *permits), (2, 3)),
    ///     other => panic!("{other:?}"),
    /// }
    /// # first.unlock().await?;
    /// # second.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder(&self) -> Option<&Holder> {
        self.held.as_ref().map(|held| &held.holder)
    }

    /// When held, the longest the name can stay held unless its holders extend: for one lock
    /// value, the smallest remaining time to live among the nodes that hold it; for readers or a
    /// semaphore's holders, the longest of theirs, each lasting as long as its smallest time to
    /// live among its nodes. `None` when not held (or when no holding node's key expires, which
    /// redmutex never does).
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn ttl(&self) -> Option<Duration> {
        self.held.as_ref().and_then(|held| held.ttl)
    }

    /// When one lock value holds (a mutex's or a writer's), its fingerprint (see [`LockState`]);
    /// `None` otherwise, also for readers and semaphores (whose holders are several).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("job:fingerprint");
    /// let lock = mutex.lock().await?;
    /// let fingerprint = mutex.inspect().await?.fingerprint().map(str::to_owned);
    /// assert_eq!(fingerprint.map(|f| f.len()), Some(12));
    /// # lock.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fingerprint(&self) -> Option<&str> {
        match self.holder() {
            Some(Holder::Exclusive { fingerprint }) => Some(fingerprint),
            _ => None,
        }
    }

    /// On how many nodes the holder holds: the nodes that hold the lock value; for readers or a
    /// semaphore, the nodes where at least one of the counted holders is live. 0 when not held.
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn holders(&self) -> usize {
        self.held.as_ref().map_or(0, |held| held.nodes)
    }

    /// How many nodes must agree, and answer: `nodes / 2 + 1`, or for a semaphore its larger
    /// quorum ([`Semaphore::quorum`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// assert_eq!(redlock.new_mutex("job:q").inspect().await?.quorum(), 2);
    /// assert_eq!(redlock.new_semaphore("job:q", 2).inspect().await?.quorum(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Every node's answer, in node order.
    ///
    /// # Examples
    ///
    /// See [`NodeLockState`].
    pub fn nodes(&self) -> &[NodeLockState] {
        &self.nodes
    }
}

/// One value on a majority. Two values cannot both reach a majority of one set of nodes.
fn exclusive(nodes: &[NodeLockState], majority: usize) -> Option<Held> {
    let sightings = nodes.iter().filter_map(|node| match &node.answer {
        NodeAnswer::Held { fingerprint, ttl } => Some((node.node, fingerprint.as_str(), *ttl)),
        _ => None,
    });
    group(sightings)
        .into_iter()
        .find(|(_, seen)| seen.nodes.len() >= majority)
        .map(|(fingerprint, seen)| Held {
            holder: Holder::Exclusive {
                fingerprint: fingerprint.to_owned(),
            },
            nodes: seen.nodes.len(),
            ttl: seen.ttl,
        })
}

/// Readers each live on a majority.
fn readers(nodes: &[NodeLockState], majority: usize) -> Option<Held> {
    let sightings = nodes.iter().flat_map(|node| match &node.answer {
        NodeAnswer::Readers { readers, .. } => entries(node.node, readers),
        _ => entries(node.node, &[]),
    });
    let (count, nodes, ttl) = holding(sightings, majority)?;
    Some(Held {
        holder: Holder::Readers { count },
        nodes,
        ttl,
    })
}

/// A semaphore's holders each live on its quorum.
fn semaphore(nodes: &[NodeLockState], permits: u32, needed: usize) -> Option<Held> {
    let sightings = nodes.iter().flat_map(|node| match &node.answer {
        NodeAnswer::Permits { holders, .. } => entries(node.node, holders),
        _ => entries(node.node, &[]),
    });
    let (held, nodes, ttl) = holding(sightings, needed)?;
    Some(Held {
        holder: Holder::Permits { held, permits },
        nodes,
        ttl,
    })
}

/// A key of one foreign type on a majority.
fn foreign(nodes: &[NodeLockState], majority: usize) -> Option<Held> {
    let sightings = nodes.iter().filter_map(|node| match &node.answer {
        NodeAnswer::Foreign { kind, ttl } => Some((node.node, kind.as_str(), *ttl)),
        _ => None,
    });
    group(sightings)
        .into_iter()
        .find(|(_, seen)| seen.nodes.len() >= majority)
        .map(|(kind, seen)| Held {
            holder: Holder::Foreign {
                kind: kind.to_owned(),
            },
            nodes: seen.nodes.len(),
            ttl: seen.ttl,
        })
}

/// One node's entries as sightings.
fn entries(
    node: usize,
    entries: &[HolderEntry],
) -> impl Iterator<Item = (usize, &str, Option<Duration>)> {
    entries
        .iter()
        .map(move |entry| (node, entry.fingerprint.as_str(), Some(entry.ttl)))
}

impl fmt::Display for NodeAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let expiry = |f: &mut fmt::Formatter<'_>, ttl: &Option<Duration>| match ttl {
            Some(ttl) => write!(f, ", ttl {ttl:?}"),
            None => f.write_str(", no expiry"),
        };
        match self {
            NodeAnswer::Free => f.write_str("free"),
            NodeAnswer::Held { fingerprint, ttl } => {
                write!(f, "held ({fingerprint})")?;
                expiry(f, ttl)
            }
            NodeAnswer::Readers { readers, ttl } => {
                write!(f, "readers: {} live", readers.len())?;
                expiry(f, ttl)
            }
            NodeAnswer::Permits {
                holders,
                permits: Some(permits),
                ttl,
            } => {
                write!(f, "semaphore: {} of {permits} permits held", holders.len())?;
                expiry(f, ttl)
            }
            NodeAnswer::Permits { holders, ttl, .. } => {
                write!(f, "semaphore: {} held, no permit count", holders.len())?;
                expiry(f, ttl)
            }
            NodeAnswer::Foreign { kind, ttl } => {
                write!(f, "a {kind}, not a redmutex lock")?;
                expiry(f, ttl)
            }
            NodeAnswer::Failed(error) => write!(f, "{error}"),
        }
    }
}

/// The keys an inspection or a forced release looks at for `name`: the name, its readers and its
/// writer's mark.
fn name_keys(name: &str) -> [String; 3] {
    [name.to_owned(), readers_key(name), mark_key(name)]
}

/// Asks every node (at once, each bounded by the node timeout) what holds `mutex`'s one name,
/// and judges the answers; `permits` is the count of the semaphore asked about, if one is.
async fn inspect(mutex: &Mutex, permits: Option<u32>) -> Result<LockState, Error> {
    let plan = mutex.plan()?;
    let nodes = mutex.resource().nodes();
    let keys = name_keys(mutex.name());
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let keys = keys.as_slice();
    let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
        let reply = eval(&mut connection, &INSPECT, keys, &[]).await?;
        read_inspect(reply)
    })
    .await;
    let states = nodes
        .iter()
        .zip(answers)
        .enumerate()
        .map(|(index, (node, answer))| {
            let (answer, writer_waiting) = match answer {
                Ok((answer, mark)) => (answer, mark),
                Err(error) => (NodeAnswer::Failed(error), None),
            };
            NodeLockState {
                node: index,
                address: node.address.clone(),
                answer,
                writer_waiting,
            }
        })
        .collect();
    LockState::judge(states, permits)
}

/// Deletes every name of `mutex` on every node, whatever holds it (see `scripts::FORCE_RELEASE`),
/// and returns on how many nodes something was deleted.
async fn force(mutex: &Mutex) -> Result<usize, Error> {
    let plan = mutex.plan()?;
    let nodes = mutex.resource().nodes();
    let name = mutex.name();
    let notify = if plan.wake_on_release { "1" } else { "0" };
    let triples: Vec<String> = mutex.names().flat_map(name_keys).collect();
    let keys: Vec<&str> = triples.iter().map(String::as_str).collect();
    let keys = keys.as_slice();
    let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
        match eval(&mut connection, &FORCE_RELEASE, keys, &[notify]).await? {
            Value::Int(deleted) => Ok(deleted > 0),
            other => Err(unexpected(&other)),
        }
    })
    .await;
    let total = answers.len();
    // A majority of answers is enough for a semaphore too: its holders need more nodes than
    // the ones that did not answer.
    let quorum = quorum(total);
    let mut deleted = 0;
    let mut failures = Vec::new();
    for (node, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(kind) => failures.push(NodeError { node, kind }),
        }
    }
    tracing::debug!(name, deleted, total, "forced release");
    let answered = total - failures.len();
    if answered < quorum {
        return Err(Error::NoQuorum {
            ok: answered,
            quorum,
            total,
            failures,
        });
    }
    Ok(deleted)
}

impl Mutex {
    /// Asks every node (at once, each bounded by the node timeout) whether the name is held, by
    /// what and for how long, without taking or changing anything.
    ///
    /// The answer is a snapshot: the lock may be taken or released right after. It never contains
    /// the lock value, only a fingerprint (see [`LockState`]). A name that readers of a
    /// [`RwLock`] or holders of a [`Semaphore`] hold is described as theirs (see
    /// [`LockState::holder`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered (each failure listed), the
    /// semaphore's quorum where a semaphore holds the name; [`Error::Config`] (before any I/O)
    /// for invalid settings, and for a mutex over several names (inspect them one by one).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// let mutex = redlock.new_mutex("job:stuck?");
    /// let state = mutex.inspect().await?;
    /// match state.ttl() {
    ///     Some(ttl) if state.is_held() => println!("held, free again within {ttl:?}"),
    ///     _ => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self) -> Result<LockState, Error> {
        self.plan()?;
        if self.names().len() > 1 {
            return Err(Error::config(
                "names",
                "inspect looks at one name: inspect each with `Redlock::new_mutex(name)`",
            ));
        }
        inspect(self, None).await
    }

    /// **Breaks the lock on purpose**: deletes the name's key on every node, whatever holds it.
    /// Returns on how many nodes something was deleted.
    ///
    /// A mutex made by [`Redlock::new_multi_mutex`](crate::Redlock::new_multi_mutex) deletes the
    /// keys of all its names. Where readers of a [`RwLock`] hold the name, it removes them all;
    /// where a [`Semaphore`] does, every holder; and a waiting writer's mark goes too, which
    /// would refuse new readers while nobody holds the name (see [`RwLock::force_unlock`]).
    ///
    /// This is the emergency release for a lock that must not wait for its expiry (its holder hung
    /// with a long expiry, or is known to be dead). **It breaks mutual exclusion**: if the holder is
    /// still running, it goes on believing it holds the lock until its next
    /// [`extend`](crate::Lock::extend) or [`unlock`](crate::Lock::unlock), which then fail as for
    /// an expired lock ([`Error::Expired`]), while someone else may already have taken the lock.
    /// Only a resource that checks fencing tokens is protected from that holder meanwhile.
    ///
    /// With [`with_wake_on_release(true)`](Mutex::with_wake_on_release) it publishes the release
    /// notice where it deleted a name's key, so waiters move at once. The fencing counter
    /// (`<name>:fence`) is never touched: tokens keep increasing across a forced release.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the lock may still stand
    /// (keys were deleted on the nodes that did answer). [`Error::Config`] (before any I/O) for
    /// invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the key deleted on some nodes only.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Error;
    ///
    /// let mutex = redlock.new_mutex("job:hung");
    /// let stuck = mutex.lock().await?; // a holder that never finishes
    ///
    /// assert_eq!(mutex.force_unlock().await?, 3);
    /// assert!(!mutex.inspect().await?.is_held());
    /// assert!(matches!(stuck.extend().await, Err(Error::Expired)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self) -> Result<usize, Error> {
        force(self).await
    }
}

impl RwLock {
    /// Asks every node (at once, each bounded by the node timeout) who holds the name, without
    /// taking or changing anything: a writer ([`Holder::Exclusive`], with its fingerprint), readers
    /// ([`Holder::Readers`], how many), or nobody. Each node's answer also tells whether a
    /// waiting writer's mark refuses new readers there ([`NodeLockState::writer_waiting`]).
    ///
    /// A reader counts when its entry is live on a majority of the nodes, as it must to hold; a
    /// writer and a [`Mutex`] on the name look alike. The answer is a snapshot and never contains
    /// a lock value (see [`LockState`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered (each failure listed);
    /// [`Error::Config`] (before any I/O) for invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Holder;
    ///
    /// let prices = redlock.new_rwlock("prices");
    /// let writer = prices.write().await?;
    /// let state = prices.inspect().await?;
    /// assert!(matches!(state.holder(), Some(Holder::Exclusive { .. })));
    /// writer.unlock().await?;
    ///
    /// let reader = prices.read().await?;
    /// let state = prices.inspect().await?;
    /// assert!(matches!(state.holder(), Some(Holder::Readers { count: 1, .. })));
    /// assert!(state.ttl().is_some_and(|ttl| ttl <= prices.expiry()));
    /// # reader.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self) -> Result<LockState, Error> {
        inspect(self.writer(), None).await
    }

    /// **Breaks the lock on purpose**: frees the name on every node, whoever holds it (a writer,
    /// or every reader), and removes a waiting writer's mark. Returns on how many nodes something
    /// was deleted.
    ///
    /// Without the mark gone, new readers would be refused until it expired (as long as the
    /// expiry with [`with_retry_delay_fn`](RwLock::with_retry_delay_fn)) although nobody holds
    /// the name; a writer still waiting marks again at its next attempt. Holders that were forced
    /// out learn it at their next [`extend`](crate::Lock::extend) or
    /// [`unlock`](crate::Lock::unlock), which fail with [`Error::Expired`]: as
    /// [`Mutex::force_unlock`], this breaks mutual exclusion, and the fencing counter stays.
    /// With [`with_wake_on_release(true)`](RwLock::with_wake_on_release) waiters are woken.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the lock may still stand.
    /// [`Error::Config`] (before any I/O) for invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the name freed on some nodes only.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Error;
    ///
    /// let prices = redlock.new_rwlock("prices").with_tries(1);
    /// let stuck = prices.read().await?; // a reader that never finishes
    /// // A writer found it and waits: its mark keeps new readers out.
    /// assert!(matches!(prices.try_write().await, Err(Error::Taken { .. })));
    ///
    /// assert_eq!(prices.force_unlock().await?, 3);
    /// assert!(!prices.inspect().await?.is_held());
    /// prices.try_read().await?.unlock().await?; // no mark left to refuse it
    /// assert!(matches!(stuck.extend().await, Err(Error::Expired)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self) -> Result<usize, Error> {
        force(self.writer()).await
    }
}

impl Semaphore {
    /// Asks every node (at once, each bounded by the node timeout) how many permits are held,
    /// without taking or changing anything: [`Holder::Permits`] with `held` of
    /// [`permits()`](Semaphore::permits), or nobody.
    ///
    /// A holder counts when its entry is live on [`quorum()`](Semaphore::quorum) nodes, as it
    /// must to hold; [`LockState::quorum`] is that quorum. The answer is a snapshot and never
    /// contains a lock value (see [`LockState`]). A name held by something else (a [`Mutex`], a
    /// [`RwLock`]) is described as theirs.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than [`quorum()`](Semaphore::quorum) nodes answered (a
    /// holder could hide on the others); [`Error::Config`] (before any I/O) for invalid settings
    /// or zero permits.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(5);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Holder;
    ///
    /// let payments = redlock.new_semaphore("payments", 3);
    /// assert!(!payments.inspect().await?.is_held());
    /// let permit = payments.acquire().await?;
    /// let state = payments.inspect().await?;
    /// assert!(matches!(
    ///     state.holder(),
    ///     Some(Holder::Permits { held: 1, permits: 3, .. })
    /// ));
    /// assert_eq!(state.quorum(), payments.quorum());
    /// # permit.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self) -> Result<LockState, Error> {
        inspect(self.engine(), Some(self.permits())).await
    }

    /// **Breaks the semaphore on purpose**: deletes the name on every node, every holder and the
    /// permit count with it, whatever holds it. Returns on how many nodes something was deleted.
    ///
    /// Holders that were forced out learn it at their next [`extend`](crate::Lock::extend) or
    /// [`unlock`](crate::Lock::unlock), which fail with [`Error::Expired`]; meanwhile as many new
    /// holders as there are permits may get in beside them. With
    /// [`with_wake_on_release(true)`](Semaphore::with_wake_on_release) waiters are woken.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a majority of nodes answered: permits may still be
    /// held. [`Error::Config`] (before any I/O) for invalid settings or zero permits.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the name deleted on some nodes only.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// use redmutex::Error;
    ///
    /// let exports = redlock.new_semaphore("exports", 1).with_tries(1);
    /// let stuck = exports.acquire().await?; // a holder that never finishes
    /// assert!(matches!(exports.try_acquire().await, Err(Error::Taken { .. })));
    ///
    /// assert_eq!(exports.force_unlock().await?, 3);
    /// exports.try_acquire().await?.unlock().await?;
    /// assert!(matches!(stuck.extend().await, Err(Error::Expired)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self) -> Result<usize, Error> {
        force(self.engine()).await
    }
}

/// A PTTL as a time to live: `None` for `-1` (no expiry) and `-2` (no key).
fn time_to_live(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// Reads the inspection script's reply (see `scripts::INSPECT`): the node's answer, and the
/// writer's mark's time to live if there is one.
fn read_inspect(reply: Value) -> Answer<(NodeAnswer, Option<Duration>)> {
    let Value::Array(items) = &reply else {
        return Err(unexpected(&reply));
    };
    let [kind, Value::Int(pttl), Value::Int(mark), rest @ ..] = items.as_slice() else {
        return Err(unexpected(&reply));
    };
    let kind = match kind {
        Value::BulkString(kind) => String::from_utf8_lossy(kind),
        Value::SimpleString(kind) => kind.as_str().into(),
        _ => return Err(unexpected(&reply)),
    };
    let ttl = time_to_live(*pttl);
    let mark = match *mark {
        -1 => Some(Duration::MAX),
        mark => time_to_live(mark),
    };
    let fingerprint = |value: &Value| match value {
        Value::BulkString(fingerprint) => Some(String::from_utf8_lossy(fingerprint).into_owned()),
        _ => None,
    };
    let entries = |rest: &[Value]| -> Option<Vec<HolderEntry>> {
        rest.chunks(2)
            .map(|pair| match pair {
                [fp, Value::Int(millis)] => Some(HolderEntry {
                    fingerprint: fingerprint(fp)?,
                    ttl: Duration::from_millis(u64::try_from(*millis).unwrap_or(0)),
                }),
                _ => None,
            })
            .collect()
    };
    let answer = match (&*kind, rest) {
        ("none", []) => Some(NodeAnswer::Free),
        ("string", [value]) => {
            fingerprint(value).map(|fingerprint| NodeAnswer::Held { fingerprint, ttl })
        }
        ("readers", entries_left) => {
            entries(entries_left).map(|readers| NodeAnswer::Readers { readers, ttl })
        }
        ("zset", [Value::Int(count), entries_left @ ..]) => {
            entries(entries_left).map(|holders| NodeAnswer::Permits {
                holders,
                permits: u32::try_from(*count).ok().filter(|&count| count > 0),
                ttl,
            })
        }
        ("none" | "string" | "zset", _) => None,
        (other, _) => Some(NodeAnswer::Foreign {
            kind: other.to_owned(),
            ttl,
        }),
    };
    answer
        .map(|answer| (answer, mark))
        .ok_or_else(|| unexpected(&reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node: usize, answer: NodeAnswer) -> NodeLockState {
        NodeLockState {
            node,
            address: None,
            answer,
            writer_waiting: None,
        }
    }

    fn judge(nodes: Vec<NodeLockState>) -> Result<LockState, Error> {
        LockState::judge(nodes, None)
    }

    fn entry(fingerprint: &str, millis: u64) -> HolderEntry {
        HolderEntry {
            fingerprint: fingerprint.to_owned(),
            ttl: Duration::from_millis(millis),
        }
    }

    fn readers(entries: &[(&str, u64)]) -> NodeAnswer {
        NodeAnswer::Readers {
            readers: entries.iter().map(|&(f, ms)| entry(f, ms)).collect(),
            ttl: entries
                .iter()
                .map(|&(_, ms)| Duration::from_millis(ms))
                .max(),
        }
    }

    fn permits(count: u32, entries: &[(&str, u64)]) -> NodeAnswer {
        NodeAnswer::Permits {
            holders: entries.iter().map(|&(f, ms)| entry(f, ms)).collect(),
            permits: Some(count),
            ttl: None,
        }
    }

    fn held(fingerprint: &str, millis: u64) -> NodeAnswer {
        NodeAnswer::Held {
            fingerprint: fingerprint.to_owned(),
            ttl: Some(Duration::from_millis(millis)),
        }
    }

    fn failed() -> NodeAnswer {
        NodeAnswer::Failed(NodeErrorKind::Timeout(Duration::from_millis(5)))
    }

    #[test]
    fn held_needs_a_quorum_of_one_value() {
        let state = judge(vec![
            node(0, held("a", 900)),
            node(1, held("a", 700)),
            node(2, held("b", 100)),
            node(3, NodeAnswer::Free),
            node(4, held("a", 800)),
        ])
        .unwrap();
        assert!(state.is_held());
        assert_eq!(state.fingerprint(), Some("a"));
        assert_eq!(state.holders(), 3);
        // The smallest among the holders of the quorum's value, not the other value's.
        assert_eq!(state.ttl(), Some(Duration::from_millis(700)));
    }

    #[test]
    fn split_values_are_not_held() {
        let state = judge(vec![
            node(0, held("a", 900)),
            node(1, held("a", 700)),
            node(2, held("b", 100)),
            node(3, held("b", 100)),
            node(4, NodeAnswer::Free),
        ])
        .unwrap();
        assert!(!state.is_held());
        assert_eq!(
            (state.ttl(), state.fingerprint(), state.holders()),
            (None, None, 0)
        );
    }

    #[test]
    fn fewer_answers_than_a_quorum_is_no_quorum() {
        let result = judge(vec![
            node(0, held("a", 900)),
            node(1, failed()),
            node(2, failed()),
        ]);
        match result {
            Err(Error::NoQuorum {
                ok: 1,
                quorum: 2,
                total: 3,
                failures,
            }) => assert_eq!(failures.iter().map(|f| f.node).collect::<Vec<_>>(), [1, 2]),
            other => panic!("{other:?}"),
        }
        // A quorum of answers is enough, even if some nodes failed.
        let state = judge(vec![
            node(0, held("a", 900)),
            node(1, held("a", 500)),
            node(2, failed()),
        ])
        .unwrap();
        assert_eq!(state.ttl(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn keys_without_expiry_have_no_ttl() {
        let eternal = NodeAnswer::Held {
            fingerprint: "a".into(),
            ttl: None,
        };
        let state = judge(vec![
            node(0, eternal.clone()),
            node(1, eternal),
            node(2, held("a", 300)),
        ])
        .unwrap();
        assert_eq!(state.ttl(), Some(Duration::from_millis(300)));
    }

    #[test]
    fn readers_count_when_each_is_live_on_a_majority() {
        // Reader a on nodes 0-2, b on 2-4: both hold. c (a failed attempt) only on node 1.
        let state = judge(vec![
            node(0, readers(&[("a", 900)])),
            node(1, readers(&[("a", 800), ("c", 5000)])),
            node(2, readers(&[("a", 950), ("b", 400)])),
            node(3, readers(&[("b", 300)])),
            node(4, readers(&[("b", 350)])),
        ])
        .unwrap();
        assert_eq!(state.holder(), Some(&Holder::Readers { count: 2 }));
        assert_eq!(state.holders(), 5);
        // Until a's shortest TTL, at least a still holds; c's longer one does not count.
        assert_eq!(state.ttl(), Some(Duration::from_millis(800)));
        assert_eq!(state.fingerprint(), None);
        assert_eq!(state.quorum(), 3);
    }

    #[test]
    fn readers_on_no_majority_and_a_marker_without_readers_do_not_hold() {
        let state = judge(vec![
            node(0, readers(&[("a", 900)])),
            node(1, readers(&[("b", 900)])),
            node(2, readers(&[])),
        ])
        .unwrap();
        assert!(!state.is_held());
        assert_eq!((state.holder(), state.holders()), (None, 0));
    }

    #[test]
    fn a_semaphore_holder_counts_on_the_semaphores_quorum() {
        // 5 nodes, 2 permits: a holder must be live on 4.
        let state = judge(vec![
            node(0, permits(2, &[("a", 900), ("b", 100)])),
            node(1, permits(2, &[("a", 900), ("b", 100)])),
            node(2, permits(2, &[("a", 700), ("b", 100)])),
            node(3, permits(2, &[("a", 900)])),
            node(4, NodeAnswer::Free),
        ])
        .unwrap();
        assert_eq!(
            state.holder(),
            Some(&Holder::Permits {
                held: 1,
                permits: 2
            })
        );
        assert_eq!(state.holder().map(Holder::kind), Some("semaphore"));
        assert_eq!((state.quorum(), state.holders()), (4, 4));
        assert_eq!(state.ttl(), Some(Duration::from_millis(700)));
        // Asked as a semaphore of another count: its quorum decides (3 permits over 5: 4 too;
        // 1 permit: the majority, where b holds as well).
        let one = LockState::judge(state.nodes().to_vec(), Some(1)).unwrap();
        assert_eq!(
            one.holder(),
            Some(&Holder::Permits {
                held: 2,
                permits: 1
            })
        );
        assert_eq!(one.quorum(), 3);
    }

    #[test]
    fn a_semaphore_needs_answers_from_its_quorum() {
        // 5 nodes, 2 permits: 3 answers are a majority, but a holder needs 4 nodes.
        let result = judge(vec![
            node(0, permits(2, &[("a", 900)])),
            node(1, permits(2, &[("a", 900)])),
            node(2, permits(2, &[("a", 900)])),
            node(3, failed()),
            node(4, failed()),
        ]);
        assert!(
            matches!(
                result,
                Err(Error::NoQuorum {
                    ok: 3,
                    quorum: 4,
                    total: 5,
                    ..
                })
            ),
            "{result:?}"
        );
        // Asked as a semaphore, even where no node shows one.
        let free = vec![
            node(0, NodeAnswer::Free),
            node(1, NodeAnswer::Free),
            node(2, failed()),
        ];
        assert!(judge(free.clone()).is_ok());
        assert!(matches!(
            LockState::judge(free, Some(2)),
            Err(Error::NoQuorum { quorum: 3, .. })
        ));
    }

    #[test]
    fn the_permit_count_most_nodes_report_decides() {
        assert_eq!(
            reported_permits(&[
                node(0, permits(3, &[])),
                node(1, permits(2, &[])),
                node(2, permits(2, &[])),
            ]),
            Some(2)
        );
        // A tie goes to the larger count, the stricter quorum.
        assert_eq!(
            reported_permits(&[node(0, permits(3, &[])), node(1, permits(2, &[]))]),
            Some(3)
        );
        assert_eq!(reported_permits(&[node(0, NodeAnswer::Free)]), None);
    }

    #[test]
    fn a_foreign_key_on_a_majority_holds() {
        let hash = |ms| NodeAnswer::Foreign {
            kind: "hash".into(),
            ttl: Some(Duration::from_millis(ms)),
        };
        let state = judge(vec![
            node(0, hash(500)),
            node(1, hash(300)),
            node(2, NodeAnswer::Free),
        ])
        .unwrap();
        assert_eq!(
            state.holder(),
            Some(&Holder::Foreign {
                kind: "hash".into()
            })
        );
        assert_eq!(state.ttl(), Some(Duration::from_millis(300)));
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn reply(kind: &str, pttl: i64, mark: i64, rest: Vec<Value>) -> Value {
        let mut items = vec![bulk(kind), Value::Int(pttl), Value::Int(mark)];
        items.extend(rest);
        Value::Array(items)
    }

    #[test]
    fn script_replies_are_read() {
        let read = |reply: Value| read_inspect(reply).unwrap();
        assert!(matches!(
            read(reply("none", -2, -2, vec![])),
            (NodeAnswer::Free, None)
        ));
        match read(reply("string", 1500, -2, vec![bulk("0123456789ab")])) {
            (NodeAnswer::Held { fingerprint, ttl }, None) => {
                assert_eq!(fingerprint, "0123456789ab");
                assert_eq!(ttl, Some(Duration::from_millis(1500)));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read(reply("string", -1, -2, vec![bulk("x")])),
            (NodeAnswer::Held { ttl: None, .. }, None)
        ));
        let two = vec![bulk("a"), Value::Int(900), bulk("b"), Value::Int(40)];
        match read(reply("readers", 900, 1200, two.clone())) {
            (NodeAnswer::Readers { readers, ttl }, Some(mark)) => {
                assert_eq!(readers, [entry("a", 900), entry("b", 40)]);
                assert_eq!(ttl, Some(Duration::from_millis(900)));
                assert_eq!(mark, Duration::from_millis(1200));
            }
            other => panic!("{other:?}"),
        }
        // A mark without expiry (never redmutex's) waits for ever.
        assert!(matches!(
            read(reply("none", -2, -1, vec![])),
            (NodeAnswer::Free, Some(Duration::MAX))
        ));
        let mut counted = vec![Value::Int(3)];
        counted.extend(two);
        match read(reply("zset", 900, -2, counted)) {
            (
                NodeAnswer::Permits {
                    holders,
                    permits: Some(3),
                    ..
                },
                None,
            ) => assert_eq!(holders.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read(reply("zset", 900, -2, vec![Value::Int(-1)])),
            (NodeAnswer::Permits { permits: None, .. }, None)
        ));
        assert!(matches!(
            read(reply("list", -1, -2, vec![])),
            (NodeAnswer::Foreign { ttl: None, .. }, None)
        ));
        for wrong in [
            Value::Okay,
            Value::Nil,
            reply("string", 5, -2, vec![]),
            reply("readers", 5, -2, vec![bulk("a")]),
            reply("zset", 5, -2, vec![]),
            reply("none", -2, -2, vec![bulk("x")]),
        ] {
            assert!(
                matches!(read_inspect(wrong), Err(NodeErrorKind::UnexpectedReply(_))),
                "should be refused"
            );
        }
    }
}
