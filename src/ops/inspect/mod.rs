//! Looking at a lock from outside, and breaking it in an emergency: for operators and their tools.
//!
//! `inspect.lua` reads what holds a name on one node (`answer` reads its reply), `state` judges
//! the nodes' answers as a quorum sees them, and this file asks the nodes, for every primitive.

mod answer;
mod purge;
mod state;

use redis::Value;

use answer::read_inspect;
pub use answer::{HolderEntry, NodeAnswer, NodeLockState};
pub use state::{Holder, LockState};

use futures::future::join_all;

use crate::engine::quorum::quorum;
use crate::engine::target::{channel_arg, publish_verb};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::nodes::Member;
use crate::nodes::connection::NodeConnection;
use crate::nodes::hash_tag::slot_prefix;
use crate::nodes::probe::{each_node, eval, unexpected};
use crate::nodes::script::{Script, lua};
use crate::primitives::mutex::Mutex;
use crate::primitives::rwlock::{RwLock, mark_key, readers_key};
use crate::primitives::semaphore::Semaphore;

/// What holds a name, read in one atomic step (`ops/inspect/inspect.lua`).
pub(crate) const INSPECT: Script = lua!("ops/inspect/inspect.lua");
/// Deletes a name's keys, whatever they hold (`ops/inspect/force_release.lua`).
pub(crate) const FORCE_RELEASE: Script = lua!("ops/inspect/force_release.lua");

/// The operator's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[INSPECT, FORCE_RELEASE, purge::PURGE];

/// The keys an inspection or a forced release looks at for `name`: the name, its readers and its
/// writer's mark; `None` for the last two where the name has no keys beside it (a `}` and no hash
/// tag: only a plain mutex takes such a name, so nothing can be kept beside it).
fn name_keys(name: &str) -> (String, Option<[String; 2]>) {
    let beside = slot_prefix(name).map(|_| [readers_key(name), mark_key(name)]);
    (name.to_owned(), beside)
}

/// Asks every node (at once, each bounded by the node timeout) what holds `mutex`'s one name,
/// and judges the answers; `permits` is the count of the semaphore asked about, if one is.
async fn inspect(mutex: &Mutex, permits: Option<u32>) -> Result<LockState, Error> {
    let plan = mutex.plan()?;
    let nodes = mutex.resource().nodes();
    let (name, beside) = name_keys(mutex.name());
    let mut keys = vec![name.as_str()];
    keys.extend(beside.iter().flatten().map(String::as_str));
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

/// The keys `force_release.lua` deletes for `name`, in threes: a name without keys beside it
/// stands in for them itself.
fn force_keys(name: &str) -> [String; 3] {
    match name_keys(name) {
        (name, Some([readers, mark])) => [name, readers, mark],
        (name, None) => [name.clone(), name.clone(), name],
    }
}

/// Deletes every name of `mutex` on every node, whatever holds it (see `force_release.lua`),
/// and returns on how many nodes something was deleted.
async fn force(mutex: &Mutex) -> Result<usize, Error> {
    let plan = mutex.plan()?;
    let nodes = mutex.resource().nodes();
    let name = mutex.name();
    let names: Vec<&str> = mutex.names().collect();
    let notify = plan.wake_on_release;
    let names = names.as_slice();
    let answers = each_node(nodes, plan.node_timeout, |_, connection| async move {
        match connection.member() {
            Member::Standalone => force_on(connection, names, notify, Member::Standalone).await,
            // Names of several slots cannot go in one script on a cluster: one script per name,
            // all at once. Deleting is idempotent, so a name deleted while another fails is as
            // good as on a standalone server whose script ran before a failure was reported.
            Member::Cluster => {
                let each = names.iter().map(|name| {
                    force_on(
                        connection.clone(),
                        std::slice::from_ref(name),
                        notify,
                        Member::Cluster,
                    )
                });
                let mut deleted = false;
                for answer in join_all(each).await {
                    deleted |= answer?;
                }
                Ok(deleted)
            }
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
            Err(kind) => failures.push(NodeError {
                address: crate::nodes::address(nodes, node),
                ..NodeError::new(node, kind)
            }),
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

/// Runs `force_release.lua` over `names` on one member of kind `member`: whether it deleted
/// something.
async fn force_on(
    mut connection: NodeConnection,
    names: &[&str],
    notify: bool,
    member: Member,
) -> Result<bool, NodeErrorKind> {
    let keys: Vec<String> = names.iter().flat_map(|name| force_keys(name)).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut args: Vec<String> = Vec::new();
    if notify {
        args.push(publish_verb(member).to_owned());
        args.extend(names.iter().filter_map(|name| channel_arg(name, member)));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match eval(&mut connection, &FORCE_RELEASE, &keys, &args).await? {
        Value::Int(deleted) => Ok(deleted > 0),
        other => Err(unexpected(&other)),
    }
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
    /// Cancel safe: it only reads, and a dropped reading changes nothing on the nodes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// With wake-up on release (the default; see
    /// [`with_wake_on_release`](Mutex::with_wake_on_release)) it publishes the release notice
    /// wherever it deleted a name's key, marked by a waiter or not, so waiters move at once. The fencing counter
    /// (`{<name>}:fence`) is never touched: tokens keep increasing across a forced release.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the lock may still stand
    /// (keys were deleted on the nodes that did answer). [`Error::Config`] (before any I/O) for
    /// invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the name freed on the nodes that ran the deletion, and on
    /// those it was on its way to (a request already sent runs there): call it again to finish.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// Cancel safe: it only reads, and a dropped reading changes nothing on the nodes.
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
    /// Unless [`with_wake_on_release(false)`](RwLock::with_wake_on_release) was set, waiters are
    /// woken.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the lock may still stand.
    /// [`Error::Config`] (before any I/O) for invalid settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the name freed on the nodes that ran the deletion, and on
    /// those it was on its way to (a request already sent runs there): call it again to finish.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
    /// Cancel safe: it only reads, and a dropped reading changes nothing on the nodes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Holder;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(5);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
        inspect(self.mutex(), Some(self.permits())).await
    }

    /// **Breaks the semaphore on purpose**: deletes the name on every node, every holder and the
    /// permit count with it, whatever holds it. Returns on how many nodes something was deleted.
    ///
    /// Holders that were forced out learn it at their next [`extend`](crate::Lock::extend) or
    /// [`unlock`](crate::Lock::unlock), which fail with [`Error::Expired`]; meanwhile as many new
    /// holders as there are permits may get in beside them. With wake-up on release (the
    /// default, see [`with_wake_on_release`](Semaphore::with_wake_on_release)) waiters are woken.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a majority of nodes answered: permits may still be
    /// held. [`Error::Config`] (before any I/O) for invalid settings or zero permits.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the name freed on the nodes that ran the deletion, and on
    /// those it was on its way to (a request already sent runs there): call it again to finish.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::Error;
    ///
    /// // Local test nodes (redmutex-testenv); production code passes its own URLs.
    /// let cluster = redmutex_testenv::Cluster::start(3);
    /// let redlock = redmutex::Redlock::connect(cluster.urls()).await?;
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
        force(self.mutex()).await
    }
}
