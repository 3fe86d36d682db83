//! Removing what redmutex keeps beside a name that is no longer used (`purge.lua`).

use redis::Value;

use crate::engine::quorum::quorum;
use crate::engine::target::{WAITERS_SUFFIX, beside, waiters_key};
use crate::error::{Error, NodeError};
use crate::nodes::Member;
use crate::nodes::hash_tag::slot_prefix;
use crate::nodes::probe::{each_node, eval, unexpected};
use crate::nodes::script::{Script, lua};
use crate::primitives::mutex::{Mutex, legacy_counter_key};
use crate::primitives::reserved_suffixes;

/// Deletes the keys kept beside a name, unless it is held or waited for (`ops/inspect/purge.lua`).
pub(crate) const PURGE: Script = lua!("ops/inspect/purge.lua");

/// The suffix of the fair line's key, whose waiters keep a name in use.
const LINE: &str = ":line";

/// The keys of `purge.lua` for `name` on a member of kind `member`, and the index (from 1) of the
/// line among them, 0 where there is none.
fn purge_keys(name: &str, member: Member) -> (Vec<String>, usize) {
    let mut keys = vec![name.to_owned()];
    let mut line = 0;
    if slot_prefix(name).is_some() {
        for suffix in reserved_suffixes().filter(|s| *s != WAITERS_SUFFIX) {
            keys.push(beside(name, suffix));
            if suffix == LINE {
                line = keys.len();
            }
        }
    }
    keys.extend(waiters_key(name, member));
    // The previous layout's counter, another slot on a cluster, where it was never kept.
    if member == Member::Standalone {
        keys.push(legacy_counter_key(name));
    }
    (keys, line)
}

impl Mutex {
    /// Deletes everything redmutex keeps beside the name on every node (the fencing counter, an
    /// election's leader record, a read-write lock's and a fair line's keys, the waiters' mark;
    /// see `doc/keys.md`), for a name that is retired: these keys never expire. Refused on every
    /// node where the name is held (by a lock, readers or a semaphore's holders) or a fair line
    /// waits for it, atomically on each node, so it never takes anything from a holder.
    ///
    /// After a purge, fencing tokens of the name start again from the nodes' clocks (see
    /// [`with_fencing`](Mutex::with_fencing)), which keeps them above those handed out before as
    /// long as the clocks agree.
    ///
    /// # Errors
    ///
    /// [`Error::Taken`] with the nodes where the name is held or waited for (nothing was deleted
    /// there; the others were purged); [`Error::NoQuorum`] when fewer than a quorum of nodes
    /// answered; [`Error::Config`] (before any I/O) for invalid settings and for a mutex over
    /// several names (purge them one by one).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the name purged on the nodes that ran the script, and on those
    /// it was on its way to: call it again to finish.
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
    ///
    /// let mutex = redlock.new_mutex("report:2025").with_fencing(true);
    /// let lock = mutex.lock().await?; // keeps {report:2025}:fence on every node
    /// assert!(matches!(mutex.purge().await, Err(Error::Taken { .. })));
    /// lock.unlock().await?;
    /// assert_eq!(mutex.purge().await?, 3); // the counter, on each of the 3 nodes
    /// # Ok(())
    /// # }
    /// ```
    pub async fn purge(&self) -> Result<usize, Error> {
        let plan = self.plan()?;
        if self.names().len() != 1 {
            return Err(Error::config("names", "purge one name at a time"));
        }
        let nodes = self.resource().nodes();
        let name = self.name();
        let answers = each_node(nodes, plan.node_timeout, |_, mut connection| async move {
            let (keys, line) = purge_keys(name, connection.member());
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let line = line.to_string();
            match eval(&mut connection, &PURGE, &keys, &[line.as_str()]).await? {
                Value::Int(deleted) => Ok(deleted),
                other => Err(unexpected(&other)),
            }
        })
        .await;
        let total = answers.len();
        let (mut deleted, mut held, mut failures) = (0, Vec::new(), Vec::new());
        for (node, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(count) if count < 0 => held.push(node),
                Ok(count) => deleted += usize::try_from(count).unwrap_or(0),
                Err(kind) => failures.push(NodeError {
                    address: crate::nodes::address(nodes, node),
                    ..NodeError::new(node, kind)
                }),
            }
        }
        tracing::debug!(name, deleted, held = held.len(), total, "purged");
        if !held.is_empty() {
            return Err(Error::Taken { nodes: held });
        }
        let answered = total - failures.len();
        if answered < quorum(total) {
            return Err(Error::NoQuorum {
                ok: answered,
                quorum: quorum(total),
                total,
                failures,
            });
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_beside_a_name_and_where_the_line_is() {
        let (keys, line) = purge_keys("order:42", Member::Standalone);
        assert_eq!(keys[0], "order:42");
        assert_eq!(keys[line - 1], "{order:42}:line", "KEYS[line] in Lua");
        for key in [
            "{order:42}:fence",
            "{order:42}:leader",
            "{order:42}:readers",
            "{order:42}:line:to",
            "order:42:waiters",
            "order:42:fence",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key}: {keys:?}");
        }
        let (keys, _) = purge_keys("order:42", Member::Cluster);
        assert!(
            keys.iter()
                .all(|k| k == "order:42" || k.starts_with("{order:42}"))
        );
        // No keys beside a name without a slot prefix on a cluster: nothing to purge.
        assert_eq!(
            purge_keys("a}b", Member::Cluster),
            (vec!["a}b".to_owned()], 0)
        );
    }
}
