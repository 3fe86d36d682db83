//! What can go wrong, with enough detail to act on it.

use std::fmt;
use std::time::Duration;

/// Everything a lock operation can fail with.
///
/// One variant per thing a caller would handle differently. When several fit, the most specific wins:
/// on acquire, [`Error::Taken`] if a quorum holds another owner's value, else [`Error::Expired`] if a
/// quorum said OK but no validity is left, else [`Error::NoQuorum`]; on extend and unlock,
/// [`Error::Taken`] if a quorum holds another owner's value, else [`Error::Expired`] if on a quorum the
/// key is gone or foreign, else [`Error::NoQuorum`]. For a [`Semaphore`](crate::Semaphore), whose
/// quorum may be far above a majority, "on a quorum" reads "on so many nodes that fewer than a
/// quorum are left": full nodes, or nodes where the permit is gone.
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
/// let mutex = redlock.new_mutex("job:nightly-report");
/// let _held = mutex.try_lock().await?;
///
/// match mutex.try_lock().await {
///     Err(Error::Taken { nodes }) => println!("another worker runs it (nodes {nodes:?})"),
///     Err(other) => return Err(other),
///     Ok(_) => unreachable!("the lock is already held"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A quorum of nodes holds the key with another owner's value (for a semaphore: so many nodes
    /// are full that a quorum is out of reach).
    #[error("the lock is held by another owner on nodes {nodes:?}")]
    Taken {
        /// Indices (in the order given to [`Redlock`](crate::Redlock)) of the nodes holding another
        /// owner's value.
        nodes: Vec<usize>,
    },

    /// Too few nodes answered as required; every node that did not is listed with the reason.
    #[error(
        "no quorum: {ok} of {total} nodes succeeded, {quorum} needed ({})",
        NodeList(failures)
    )]
    NoQuorum {
        /// How many nodes succeeded.
        ok: usize,
        /// How many successes were needed (`nodes / 2 + 1` for a [`Mutex`](crate::Mutex), see
        /// [`Semaphore::quorum`](crate::Semaphore::quorum)).
        quorum: usize,
        /// How many nodes the client talks to.
        total: usize,
        /// Every node that did not succeed, with what happened there.
        failures: Vec<NodeError>,
    },

    /// The lock's validity ran out: acquiring took longer than the expiry allows, or the lock had
    /// already expired when it was extended or unlocked.
    #[error("the lock has expired")]
    Expired,

    /// The lock was already unlocked through this handle or one of its clones; no I/O was done.
    #[error("the lock was already unlocked")]
    Unlocked,

    /// [`Lock::run`](crate::Lock::run) or [`Leadership::run`](crate::Leadership::run): the lock
    /// (or the leadership) could not be kept while the work ran, so the work was dropped before
    /// the lock's validity ended, and nothing of it runs any more. `cause` says why: another
    /// owner took it ([`Error::Taken`]), it was gone from a quorum or its validity ran out
    /// ([`Error::Expired`]), too few nodes answered the renewals ([`Error::NoQuorum`], with each
    /// node's answer), or a clone unlocked it meanwhile ([`Error::Unlocked`]).
    #[error("the lock was lost while the work ran, and the work was dropped: {cause}")]
    Lost {
        /// Why the lock could not be kept.
        cause: Box<Error>,
    },

    /// [`with_max_wait`](crate::Mutex::with_max_wait): the maximum wait ran out before the lock
    /// was acquired, however many tries were left. `last` says why the last attempt failed, and
    /// so who held the name then: [`Error::Taken`] with the nodes that held another owner's
    /// value, or [`Error::NoQuorum`] with what each node said.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{Error, Redlock};
    /// use std::time::Duration;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = Redlock::connect(cluster.urls()).await?;
    /// let _held = redlock.new_mutex("report").lock().await?;
    /// let waiter = redlock.new_mutex("report").with_max_wait(Duration::from_millis(300));
    /// match waiter.lock().await {
    ///     Err(Error::WaitedOut { waited, last }) => {
    ///         assert!(waited >= Duration::from_millis(300));
    ///         assert!(matches!(*last, Error::Taken { .. }));
    ///     }
    ///     other => panic!("expected the wait to run out, got {other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[error("not acquired within the maximum wait (waited {waited:?}): {last}")]
    WaitedOut {
        /// How long `lock()` waited, from its call to the end of its last attempt.
        waited: Duration,
        /// The last attempt's error.
        last: Box<Error>,
    },

    /// The configuration is invalid; nothing was sent to any node.
    #[error("invalid configuration: {field}: {rule}")]
    Config {
        /// The setting at fault, e.g. `"expiry"` or `"urls[2]"`.
        field: String,
        /// The rule it breaks. Never contains a password.
        rule: String,
    },

    /// A call of the [`blocking`](crate::blocking) API was made on a thread that runs a tokio
    /// runtime's tasks (an `async fn`, or a thread inside `Runtime::block_on`), or inside
    /// `tokio::task::spawn_blocking`, whose threads carry their runtime too; nothing was sent.
    /// Blocking there would stall every task of that runtime, the holder of the lock waited for
    /// included. Use the async API there ([`Redlock`](crate::Redlock)), or inside
    /// `spawn_blocking`, `Handle::current().block_on(...)` of it. With the `blocking` feature.
    #[cfg(feature = "blocking")]
    #[error(
        "a redmutex::blocking call inside a tokio runtime: use the async API (redmutex::Redlock) \
         there, or call from a thread of your own"
    )]
    InsideRuntime,

    /// The [`blocking`](crate::blocking) API's background runtime could not start (its worker
    /// threads could not be spawned); nothing was sent. With the `blocking` feature.
    #[cfg(feature = "blocking")]
    #[error("the blocking API's runtime could not start: {reason}")]
    RuntimeUnavailable {
        /// What the operating system said.
        reason: String,
    },
}

impl Error {
    pub(crate) fn config(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error::Config {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// Names each failing node of this error (and of the errors it wraps) by its address:
    /// `address(node)`, `None` where the client tells none.
    pub(crate) fn name_nodes(mut self, address: &impl Fn(usize) -> Option<String>) -> Self {
        match &mut self {
            Error::NoQuorum { failures, .. } => name_failures(failures, address),
            Error::Lost { cause } | Error::WaitedOut { last: cause, .. } => {
                let inner = std::mem::replace(&mut **cause, Error::Expired);
                **cause = inner.name_nodes(address);
            }
            _ => {}
        }
        self
    }

    /// Whether nodes that refused the command (see [`NodeErrorKind::is_refusal`]) are so many that
    /// the rest cannot make a quorum: then another attempt is bound to fail the same way, and
    /// `lock()` returns this error at once instead of spending its tries.
    pub(crate) fn is_refused_by_too_many(&self) -> bool {
        match self {
            Error::NoQuorum {
                quorum,
                total,
                failures,
                ..
            } => {
                let refused = failures.iter().filter(|f| f.kind.is_refusal()).count();
                total.saturating_sub(refused) < *quorum
            }
            _ => false,
        }
    }
}

/// What happened on one node that did not succeed.
///
/// # Examples
///
/// ```
/// use redmutex::{Error, NodeError, NodeErrorKind};
///
/// fn timed_out_nodes(error: &Error) -> Vec<usize> {
///     match error {
///         Error::NoQuorum { failures, .. } => failures
///             .iter()
///             .filter(|f| matches!(f.kind, NodeErrorKind::Timeout(_)))
///             .map(|f| f.node)
///             .collect(),
///         _ => Vec::new(),
///     }
/// }
/// assert!(timed_out_nodes(&Error::Expired).is_empty());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeError {
    /// The node's index, in the order given to [`Redlock`](crate::Redlock).
    pub node: usize,
    /// What happened there.
    pub kind: NodeErrorKind,
    /// The member's address without credentials (`redis://10.0.0.1:6379`), which names it in
    /// messages; `None` where the client has none to tell (connections the caller built, a
    /// `ClusterClient`), and then messages name it by index (`node 2`).
    pub address: Option<String>,
}

impl NodeError {
    /// What happened on node `node`, its address not known yet (see [`Error::name_nodes`]).
    pub(crate) fn new(node: usize, kind: NodeErrorKind) -> Self {
        NodeError {
            node,
            kind,
            address: None,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(address) => write!(f, "{address}: {}", self.kind),
            None => write!(f, "node {}: {}", self.node, self.kind),
        }
    }
}

/// Why one node did not succeed.
///
/// # Examples
///
/// ```
/// use redmutex::NodeErrorKind;
/// use std::time::Duration;
///
/// let kind = NodeErrorKind::Timeout(Duration::from_millis(400));
/// assert_eq!(kind.to_string(), "timed out after 400ms");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// The key holds another owner's value.
    #[error("held by another owner")]
    Taken,
    /// The key is not there (it expired, or was never set).
    #[error("key not found")]
    Missing,
    /// [`Lock::extend`](crate::Lock::extend): the key was not there (the node lost it, say in a
    /// restart without persistence), and the extend set it again with this lock's value. Counts as
    /// [`Missing`](Self::Missing) towards the verdict; when the extend fails, what it set is
    /// deleted again before it returns.
    #[error("key not found; set again")]
    Repaired,
    /// No reply within the per-node timeout (`expiry * timeout_factor`).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection or the server reported an error.
    #[error("{0}")]
    Redis(redis::RedisError),
    /// The node answered with a reply this protocol never produces, e.g. because the key holds
    /// another type or something between client and node rewrites traffic.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// Fail-fast mode decided the outcome before this node answered.
    #[error("not awaited (fail-fast)")]
    NotAwaited,
    /// Fencing: the node took the raise, but its acquire reply came too late for its counter to
    /// go into the token, so it does not count towards the raise's quorum.
    #[error("its counter was not counted into the token")]
    NotCounted,
    /// Fair waiting ([`Mutex::with_fair`](crate::Mutex::with_fair)): the lock is held, or promised
    /// to waiters ahead in line; the node keeps this waiter's place. Counts as [`Taken`](Self::Taken)
    /// towards [`Error::Taken`].
    #[error("waiting in line with ticket {ticket}")]
    InLine {
        /// The waiter's ticket on this node: the line is served in the order of tickets.
        ticket: u64,
    },
    /// Fair waiting: the lock was free on this node, but waiters stand in line there, so a
    /// newcomer leaves it to them (and joins the line). Counts as [`Taken`](Self::Taken) towards
    /// [`Error::Taken`].
    #[error("free, but waiters stand in line")]
    LineAhead,
    /// The node runs a version of Redis older than the primitive needs (see
    /// [`guide::limits`](crate::guide::limits)), so nothing was sent to it: a script that stopped at a command the node lacks
    /// would leave what it wrote before. The version is learned when a connection is made (for
    /// connections the caller built, on first use); this is a [`refusal`](Self::is_refusal).
    #[error("{what} need Redis {needs} or later; this node runs {runs}")]
    TooOld {
        /// The primitive, in the plural: `"read-write locks"`, `"semaphores"`, ...
        what: &'static str,
        /// The oldest version that runs it, e.g. `"7.0"`.
        needs: &'static str,
        /// What the node runs, e.g. `"Redis 6.2.14"`.
        runs: String,
    },
    /// The member is a Redis Cluster, and the names of a multi-name lock hash to different slots
    /// of it, so nothing was sent to it: one script can only touch one slot, and a lock across
    /// shards would need a protocol of its own inside the member. Names that share a hash tag
    /// (`{order:42}:items`, `{order:42}:payment`) share a slot. This is a
    /// [`refusal`](Self::is_refusal).
    #[error(
        "the names are in different hash slots of this Redis Cluster, which one multi-name lock \
         cannot span: give them one hash tag, as in `{{order:42}}:items` and `{{order:42}}:payment`"
    )]
    CrossSlot,
    /// The node runs Redis Cluster, and redmutex was built without its `cluster` feature, which
    /// talks to a whole cluster as one member: nothing is sent to it (a
    /// [`refusal`](Self::is_refusal)), since a connection to one node of a cluster reaches only
    /// the keys of that node's slots.
    #[error(
        "a Redis Cluster node: a cluster member needs redmutex's `cluster` feature \
         (on by default; turned off here)"
    )]
    ClusterFeatureOff,
    /// This member reaches the same Redis server as the earlier member `entry` (the same
    /// `run_id`, learned when the connection was made), under another address: `localhost` and
    /// `127.0.0.1`, a DNS name and its address, or two seeds of one Redis Cluster. Nothing is sent
    /// to it, since that server would count twice towards every quorum; list each server once.
    /// A [`refusal`](Self::is_refusal). Not checked where a node refuses `INFO`.
    #[error(
        "the same server as member {entry} ({address}, run_id {run_id}...): it would count twice \
         towards the quorum; list each server once"
    )]
    SameServer {
        /// The member that counts for the server, counted from 1 in the order given.
        entry: usize,
        /// Its address, without credentials.
        address: String,
        /// The first characters of the server's `run_id`.
        run_id: String,
    },
    /// [`with_replica_acks`](crate::Mutex::with_replica_acks): the member took the lock write
    /// (an acquire, an extension, a fencing raise), but fewer of the replicas of the master that
    /// holds the key than asked acknowledged it (`WAIT`) within WAIT's timeout, half the node
    /// timeout; so the member does not count. A standalone server without replicas answers this
    /// to every write: `0 of 1 replicas acknowledged`.
    ///
    /// Not a [`refusal`](Self::is_refusal): a replica that is paused, resyncing or reconnecting
    /// acknowledges again soon, so `lock()` keeps trying while other members may still make the
    /// quorum.
    #[error(
        "{acknowledged} of {wanted} replicas acknowledged the write within {within:?} \
         (with_replica_acks)"
    )]
    Unreplicated {
        /// How many replicas acknowledged the write in time.
        acknowledged: u64,
        /// How many were asked for.
        wanted: u32,
        /// WAIT's timeout.
        within: Duration,
    },
}

impl NodeErrorKind {
    /// Whether the node refused this client's credentials: `NOAUTH` (the node wants a password
    /// and got none), `WRONGPASS` (the user or password is wrong, or the user is disabled), or a
    /// failed `AUTH` while connecting. A [`refusal`](Self::is_refusal) an operator fixes in the
    /// node's URL (or the node's `requirepass` / ACL users), not by waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::NodeErrorKind;
    /// use std::time::Duration;
    ///
    /// assert!(!NodeErrorKind::Timeout(Duration::from_millis(400)).is_authentication_refusal());
    /// ```
    pub fn is_authentication_refusal(&self) -> bool {
        let NodeErrorKind::Redis(error) = self else {
            return false;
        };
        error.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
    }

    /// Whether the node refused the command for a reason that trying again soon cannot fix, only an
    /// operator: the user may not run it (`NOPERM`: a missing ACL permission, named in the
    /// message), the connection is not authenticated (`NOAUTH`), its credentials were refused
    /// (`WRONGPASS`, or a failed `AUTH` while connecting), a script's user may not run a command,
    /// key or channel of the script, the command is unknown there (disabled or renamed, e.g.
    /// scripting turned off), the node's Redis is too old for the primitive
    /// ([`TooOld`](Self::TooOld)), the names of a multi-name lock span slots of a cluster
    /// ([`CrossSlot`](Self::CrossSlot)), it runs Redis Cluster in a build without the
    /// `cluster` feature ([`ClusterFeatureOff`](Self::ClusterFeatureOff)), or it is a server
    /// another member already reaches ([`SameServer`](Self::SameServer)).
    ///
    /// `lock()` stops retrying when such refusals alone leave too few nodes for a quorum, and
    /// returns [`Error::NoQuorum`] with them at once. The connection to a node that refused its
    /// set-up is tried again on later calls, so the node comes back once the operator fixed it.
    ///
    /// # Examples
    ///
    /// ```
    /// use redmutex::NodeErrorKind;
    /// use std::time::Duration;
    ///
    /// assert!(!NodeErrorKind::Timeout(Duration::from_millis(400)).is_refusal());
    /// assert!(!NodeErrorKind::Taken.is_refusal());
    /// ```
    pub fn is_refusal(&self) -> bool {
        let error = match self {
            NodeErrorKind::Redis(error) => error,
            NodeErrorKind::TooOld { .. }
            | NodeErrorKind::CrossSlot
            | NodeErrorKind::ClusterFeatureOff
            | NodeErrorKind::SameServer { .. } => return true,
            _ => return false,
        };
        if error.kind() == redis::ErrorKind::AuthenticationFailed {
            return true;
        }
        match error.code() {
            Some("NOPERM" | "NOAUTH" | "WRONGPASS") => true,
            // Redis 7.0 reports a command that a script's user may not run as a plain error.
            Some("ERR") => error.detail().is_some_and(|detail| {
                detail.starts_with("unknown command")
                    || detail.starts_with("The user executing the script can't")
            }),
            _ => false,
        }
    }
}

/// Fills in the address of each failure still without one: `address(node)`.
pub(crate) fn name_failures(
    failures: &mut [NodeError],
    address: &impl Fn(usize) -> Option<String>,
) {
    for failure in failures.iter_mut().filter(|f| f.address.is_none()) {
        failure.address = address(failure.node);
    }
}

/// Formats node failures as `node 1: ...; node 3: ...`.
struct NodeList<'a>(&'a [NodeError]);

impl fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, failure) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_quorum_lists_every_failing_node() {
        let error = Error::NoQuorum {
            ok: 1,
            quorum: 2,
            total: 3,
            failures: vec![
                NodeError::new(1, NodeErrorKind::Timeout(Duration::from_millis(50))),
                NodeError::new(2, NodeErrorKind::Taken),
            ],
        };
        assert_eq!(
            error.to_string(),
            "no quorum: 1 of 3 nodes succeeded, 2 needed \
             (node 1: timed out after 50ms; node 2: held by another owner)"
        );
    }

    #[test]
    fn no_quorum_names_members_by_address_where_known() {
        let error = Error::NoQuorum {
            ok: 1,
            quorum: 2,
            total: 3,
            failures: vec![
                NodeError::new(0, NodeErrorKind::Timeout(Duration::from_millis(50))),
                NodeError::new(2, NodeErrorKind::Taken),
            ],
        };
        let lost = Error::Lost {
            cause: Box::new(error),
        };
        let address = |node| (node == 0).then(|| "redis://10.0.0.1:6379".to_owned());
        assert_eq!(
            lost.name_nodes(&address).to_string(),
            "the lock was lost while the work ran, and the work was dropped: no quorum: 1 of 3 \
             nodes succeeded, 2 needed (redis://10.0.0.1:6379: timed out after 50ms; node 2: held \
             by another owner)"
        );
    }

    fn redis_error(reply: &[u8]) -> NodeErrorKind {
        let value = redis::parse_redis_value(reply).unwrap();
        NodeErrorKind::Redis(value.extract_error().unwrap_err())
    }

    #[test]
    fn refusals_are_the_errors_only_an_operator_can_fix() {
        for reply in [
            &b"-NOPERM User app has no permissions to run the 'evalsha' command\r\n"[..],
            b"-NOAUTH Authentication required.\r\n",
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            b"-ERR unknown command 'EVALSHA', with args beginning with: \r\n",
            b"-ERR The user executing the script can't run this command or subcommand \
              script: 06ca, on @user_script:5.\r\n",
        ] {
            assert!(redis_error(reply).is_refusal(), "{reply:?}");
        }
        for reply in [
            &b"-ERR max number of clients reached\r\n"[..],
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-NOSCRIPT No matching script.\r\n",
        ] {
            assert!(!redis_error(reply).is_refusal(), "{reply:?}");
        }
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(!NodeErrorKind::Redis(io).is_refusal());
        for reply in [
            &b"-NOAUTH Authentication required.\r\n"[..],
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        ] {
            assert!(redis_error(reply).is_authentication_refusal(), "{reply:?}");
        }
        let noperm = redis_error(b"-NOPERM User app has no permissions\r\n");
        assert!(!noperm.is_authentication_refusal());
    }

    #[test]
    fn refusals_stop_retries_once_they_leave_no_quorum() {
        let no_quorum = |kinds: Vec<NodeErrorKind>| Error::NoQuorum {
            ok: 0,
            quorum: 3,
            total: 5,
            failures: kinds
                .into_iter()
                .enumerate()
                .map(|(node, kind)| NodeError::new(node, kind))
                .collect(),
        };
        let noperm = || redis_error(b"-NOPERM no permissions\r\n");
        let timeout = || NodeErrorKind::Timeout(Duration::from_millis(1));
        assert!(!no_quorum(vec![noperm(), noperm()]).is_refused_by_too_many());
        assert!(!no_quorum(vec![noperm(), noperm(), timeout()]).is_refused_by_too_many());
        assert!(no_quorum(vec![noperm(), noperm(), noperm()]).is_refused_by_too_many());
        assert!(!Error::Expired.is_refused_by_too_many());
    }

    #[test]
    fn config_names_field_and_rule() {
        let error = Error::config("drift_factor", "must be in [0, 1), got 1.5");
        assert_eq!(
            error.to_string(),
            "invalid configuration: drift_factor: must be in [0, 1), got 1.5"
        );
    }
}
