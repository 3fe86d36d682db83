//! What one node said about a name, and how the inspection script's reply reads.

use std::fmt;
use std::time::Duration;

use redis::Value;

#[cfg(doc)]
use super::LockState;
use crate::error::NodeErrorKind;
use crate::nodes::probe::{Answer, unexpected};
#[cfg(doc)]
use crate::{Mutex, RwLock, Semaphore};

/// One node's answer to an inspection ([`Mutex::inspect`], [`RwLock::inspect`],
/// [`Semaphore::inspect`]).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use redmutex::NodeAnswer;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
/// use redmutex::NodeAnswer;
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let cluster = redmutex_testenv::Cluster::start(3);
/// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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

/// A PTTL as a time to live: `None` for `-1` (no expiry) and `-2` (no key).
fn time_to_live(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// Reads the inspection script's reply (see `inspect.lua`): the node's answer, and the
/// writer's mark's time to live if there is one.
pub(super) fn read_inspect(reply: Value) -> Answer<(NodeAnswer, Option<Duration>)> {
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

    fn entry(fingerprint: &str, millis: u64) -> HolderEntry {
        HolderEntry {
            fingerprint: fingerprint.to_owned(),
            ttl: Duration::from_millis(millis),
        }
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
