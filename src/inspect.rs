//! Looking at a lock from outside, and breaking it in an emergency: for operators and their tools.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, NodeError, NodeErrorKind};
use crate::mutex::Mutex;
use crate::probe::{Answer, each_node, eval, unexpected};
use crate::quorum::quorum;
use crate::scripts::{DIGESTS, FORCE_RELEASE, INSPECT};

/// Who holds a name, as a quorum of nodes sees it: the answer of [`Mutex::inspect`].
///
/// Never contains the lock value (whoever knows it can extend or release the lock), only its
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
    /// The fingerprint a quorum agrees on, how many nodes hold it, and the smallest TTL among them.
    held: Option<(String, usize, Option<Duration>)>,
}

/// One node's answer to [`Mutex::inspect`].
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
///         NodeAnswer::Failed(error) => println!("node {}: {error}", node.node),
///         _ => {}
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
}

/// What one node said about a name.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeAnswer {
    /// The key is not there.
    Free,
    /// The key is there.
    Held {
        /// The first 12 hex digits of the SHA-1 of the value: equal on nodes that hold one value.
        fingerprint: String,
        /// The key's remaining time to live as the node reported it; `None` if the key never
        /// expires (something other than redmutex set it).
        ttl: Option<Duration>,
    },
    /// No answer: the node's error or timeout.
    Failed(NodeErrorKind),
}

impl LockState {
    /// Judges the nodes' answers: held when a quorum of them holds one and the same value.
    pub(crate) fn judge(nodes: Vec<NodeLockState>) -> Result<LockState, Error> {
        let total = nodes.len();
        let quorum = quorum(total);
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
        let mut by_value: HashMap<&str, (usize, Option<Duration>)> = HashMap::new();
        for node in &nodes {
            if let NodeAnswer::Held { fingerprint, ttl } = &node.answer {
                let (count, smallest) = by_value.entry(fingerprint).or_default();
                *count += 1;
                *smallest = match (*smallest, *ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        // Two values cannot both reach a quorum of one set of nodes.
        let held = by_value
            .into_iter()
            .find(|(_, (count, _))| *count >= quorum)
            .map(|(fingerprint, (count, ttl))| (fingerprint.to_owned(), count, ttl));
        Ok(LockState {
            quorum,
            nodes,
            held,
        })
    }

    /// True when a quorum of nodes holds one and the same value: somebody holds the lock.
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// When held, the smallest remaining time to live among the nodes that hold the value: the
    /// longest the lock can last unless its holder extends it. `None` when not held (or when no
    /// holding node's key expires, which redmutex never does).
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn ttl(&self) -> Option<Duration> {
        self.held.as_ref().and_then(|(_, _, ttl)| *ttl)
    }

    /// When held, the fingerprint of the value a quorum holds (see [`LockState`]).
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
        self.held
            .as_ref()
            .map(|(fingerprint, _, _)| fingerprint.as_str())
    }

    /// How many nodes hold the value a quorum holds; 0 when not held.
    ///
    /// # Examples
    ///
    /// See [`LockState`].
    pub fn holders(&self) -> usize {
        self.held.as_ref().map_or(0, |(_, count, _)| *count)
    }

    /// How many nodes must agree: `nodes / 2 + 1`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let cluster = testenv::Cluster::start(3);
    /// # let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
    /// assert_eq!(redlock.new_mutex("job:q").inspect().await?.quorum(), 2);
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

impl fmt::Display for NodeAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeAnswer::Free => f.write_str("free"),
            NodeAnswer::Held {
                fingerprint,
                ttl: Some(ttl),
            } => write!(f, "held ({fingerprint}), ttl {ttl:?}"),
            NodeAnswer::Held { fingerprint, .. } => write!(f, "held ({fingerprint}), no expiry"),
            NodeAnswer::Failed(error) => write!(f, "{error}"),
        }
    }
}

impl Mutex {
    /// Asks every node (at once, each bounded by the node timeout) whether the name is held and
    /// for how long, without taking or changing anything.
    ///
    /// The answer is a snapshot: the lock may be taken or released right after. It never contains
    /// the lock value, only a fingerprint (see [`LockState`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered (each failure listed);
    /// [`Error::Config`] (before any I/O) for invalid settings, and for a mutex over several names
    /// (inspect them one by one).
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
        let plan = self.plan()?;
        if self.names().len() > 1 {
            return Err(Error::config(
                "names",
                "inspect looks at one name: inspect each with `Redlock::new_mutex(name)`",
            ));
        }
        let nodes = self.redlock().nodes();
        let name = self.name();
        let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
            let reply = eval(&mut connection, INSPECT, &DIGESTS.inspect, &[name], &[]).await?;
            read_inspect(reply)
        })
        .await;
        let states = nodes
            .iter()
            .zip(answers)
            .enumerate()
            .map(|(index, (node, answer))| NodeLockState {
                node: index,
                address: node.address.clone(),
                answer: answer.unwrap_or_else(NodeAnswer::Failed),
            })
            .collect();
        LockState::judge(states)
    }

    /// **Breaks the lock on purpose**: deletes the name's key on every node, whatever value it
    /// holds. Returns on how many nodes something was deleted.
    ///
    /// A mutex made by [`Redlock::new_multi_mutex`](crate::Redlock::new_multi_mutex) deletes the
    /// keys of all its names. Where readers of a [`RwLock`](crate::RwLock) hold the name, it
    /// removes them all, and a waiting writer's mark goes too, which would refuse new readers
    /// while nobody holds the name.
    ///
    /// This is the emergency release for a lock that must not wait for its expiry (its holder hung
    /// with a long expiry, or is known to be dead). **It breaks mutual exclusion**: if the holder is
    /// still running, it goes on believing it holds the lock until its next
    /// [`extend`](crate::Lock::extend) or [`unlock`](crate::Lock::unlock), which then fail as for
    /// an expired lock ([`Error::Expired`]), while someone else may already have taken the lock.
    /// Only a resource that checks fencing tokens is protected from that holder meanwhile.
    ///
    /// With [`with_wake_on_release(true)`](Mutex::with_wake_on_release) it publishes the release
    /// notice where it deleted a key, so waiters move at once. The fencing counter
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
        let plan = self.plan()?;
        let nodes = self.redlock().nodes();
        let name = self.name();
        let notify = if plan.wake_on_release { "1" } else { "0" };
        let triples: Vec<String> = self
            .names()
            .flat_map(|name| {
                [
                    name.to_owned(),
                    format!("{name}:readers"),
                    format!("{name}:writer-waiting"),
                ]
            })
            .collect();
        let keys: Vec<&str> = triples.iter().map(String::as_str).collect();
        let keys = keys.as_slice();
        let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
            let script = (FORCE_RELEASE, DIGESTS.force_release.as_str());
            match eval(&mut connection, script.0, script.1, keys, &[notify]).await? {
                Value::Int(deleted) => Ok(deleted > 0),
                other => Err(unexpected(&other)),
            }
        })
        .await;
        let total = answers.len();
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
}

/// Reads the inspection script's reply: nil, or the fingerprint and the PTTL.
fn read_inspect(reply: Value) -> Answer<NodeAnswer> {
    match reply {
        Value::Nil => Ok(NodeAnswer::Free),
        Value::Array(ref items) => match items.as_slice() {
            [Value::BulkString(fingerprint), Value::Int(pttl)] => Ok(NodeAnswer::Held {
                fingerprint: String::from_utf8_lossy(fingerprint).into_owned(),
                // PTTL is -1 for a key without expiry.
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            _ => Err(unexpected(&reply)),
        },
        other => Err(unexpected(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node: usize, answer: NodeAnswer) -> NodeLockState {
        NodeLockState {
            node,
            address: None,
            answer,
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
        let state = LockState::judge(vec![
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
        let state = LockState::judge(vec![
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
        let result = LockState::judge(vec![
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
        let state = LockState::judge(vec![
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
        let state = LockState::judge(vec![
            node(0, eternal.clone()),
            node(1, eternal),
            node(2, held("a", 300)),
        ])
        .unwrap();
        assert_eq!(state.ttl(), Some(Duration::from_millis(300)));
    }

    #[test]
    fn script_replies_are_read() {
        assert!(matches!(read_inspect(Value::Nil), Ok(NodeAnswer::Free)));
        let reply = Value::Array(vec![
            Value::BulkString(b"0123456789ab".to_vec()),
            Value::Int(1500),
        ]);
        match read_inspect(reply) {
            Ok(NodeAnswer::Held { fingerprint, ttl }) => {
                assert_eq!(fingerprint, "0123456789ab");
                assert_eq!(ttl, Some(Duration::from_millis(1500)));
            }
            other => panic!("{other:?}"),
        }
        let eternal = Value::Array(vec![Value::BulkString(b"x".to_vec()), Value::Int(-1)]);
        assert!(matches!(
            read_inspect(eternal),
            Ok(NodeAnswer::Held { ttl: None, .. })
        ));
        assert!(matches!(
            read_inspect(Value::Okay),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
    }
}
