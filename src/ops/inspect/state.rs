//! What holds a name, as a quorum of nodes sees it, judged from each node's answer: pure, so that
//! every verdict is tested without Redis.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::answer::{HolderEntry, NodeAnswer, NodeLockState};
use crate::engine::quorum::{permit_quorum, quorum};
use crate::error::{Error, NodeError};
#[cfg(doc)]
use crate::{Mutex, RwLock, Semaphore};

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
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
/// use redmutex::Holder;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
                        address: n.address.clone(),
                        ..NodeError::new(n.node, kind.clone())
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
    /// use redmutex::Holder;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeErrorKind;

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
}
