//! Moving a hash slot between masters by hand, whole or halfway: the steps of a resharding.

use std::fmt;

use crate::redis_cluster::{is_live, must};
use crate::slot::{SLOTS, key_slot};
use crate::{Node, RedisCluster};

/// Keys moved per `MIGRATE`.
const MIGRATE_BATCH: usize = 100;
/// `MIGRATE`'s own timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 5000;

/// A slot being moved from one master to another, left half done for a test to look at: see
/// [`RedisCluster::begin_migration`].
///
/// While it lasts, the source answers `ASK` for keys of the slot it no longer has (and for new
/// keys), the target answers those after `ASKING`, and a multi-key command over keys on both sides
/// gets `TRYAGAIN`. Dropping it leaves the slot half moved; [`finish`](Migration::finish) completes
/// it.
#[must_use = "the slot stays half moved until `finish`"]
pub struct Migration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: &'a Node,
    target: &'a Node,
    target_id: String,
}

impl RedisCluster {
    /// Moves `slot` from the master that serves it to the master `to`, with its keys (and their
    /// TTLs), and waits until every node agrees: one resharding step, as `redis-cli --cluster
    /// reshard` takes it.
    ///
    /// # Panics
    ///
    /// If `to` is not a master of this cluster or already serves `slot`, a step fails, or the
    /// cluster does not settle within 30 s.
    pub fn migrate_slot(&self, slot: u16, to: &Node) {
        self.begin_migration(slot, to).finish();
    }

    /// Starts moving `slot` to the master `to` and stops there, with no key moved yet: the target
    /// is `IMPORTING` the slot from its master, which is `MIGRATING` it to the target.
    ///
    /// Move some keys with [`Migration::move_keys`] or [`Migration::move_some`] to leave the slot
    /// split between the two, and complete the move with [`Migration::finish`].
    ///
    /// # Panics
    ///
    /// If `slot >= 16384`, no master serves it, `to` is not a master of this cluster or already
    /// serves `slot`, or a node refuses the step.
    ///
    /// # Examples
    ///
    /// ```
    /// let cluster = redmutex_testenv::RedisCluster::start(3, 0);
    /// let slot = redmutex_testenv::key_slot("{held}");
    /// for key in ["{held}:a", "{held}:b"] {
    ///     cluster.set(key, "v");
    /// }
    /// let source = cluster.master_of_slot(slot);
    /// let target = cluster.masters().into_iter().find(|m| m.port() != source.port()).unwrap();
    ///
    /// let migration = cluster.begin_migration(slot, target);
    /// migration.move_keys(&["{held}:a"]);
    /// // The source still serves the slot, and sends clients to the target for the moved key.
    /// assert_eq!(source.get("{held}:b").as_deref(), Some("v"));
    /// assert_eq!(cluster.get("{held}:a").as_deref(), Some("v")); // followed an ASK
    /// assert_eq!(migration.keys_left(), vec!["{held}:b".to_string()]);
    ///
    /// migration.finish();
    /// assert_eq!(cluster.master_of_slot(slot).port(), target.port());
    /// assert_eq!(target.get("{held}:b").as_deref(), Some("v"));
    /// ```
    pub fn begin_migration(&self, slot: u16, to: &Node) -> Migration<'_> {
        assert!(
            slot < SLOTS,
            "testenv: slot {slot} is out of range (0..{SLOTS})"
        );
        let view = self.view();
        let source = view
            .owner(slot)
            .unwrap_or_else(|| panic!("testenv: no master serves slot {slot}"));
        let target = self.entry(&view, to);
        assert!(
            target.master,
            "testenv: cannot move slot {slot} to node on port {}: it is a replica",
            to.port()
        );
        assert_ne!(
            source.id,
            target.id,
            "testenv: node on port {} already serves slot {slot}",
            to.port()
        );
        let source_node = self
            .node_by_port(source.port)
            .unwrap_or_else(|| panic!("testenv: slot {slot} is served by a stranger: {source:?}"));
        let target = self.node_by_port(to.port()).unwrap_or_else(|| {
            panic!(
                "testenv: node on port {} is not a node of this cluster",
                to.port()
            )
        });
        let target_id = self.entry(&view, target).id.clone();
        // The target first: a client that the source sends there with `ASK` must find it
        // importing, or it would be sent back with `MOVED`.
        must::<()>(
            target,
            &format!("CLUSTER SETSLOT {slot} IMPORTING"),
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&source.id),
        );
        must::<()>(
            source_node,
            &format!("CLUSTER SETSLOT {slot} MIGRATING"),
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&target_id),
        );
        Migration {
            cluster: self,
            slot,
            source: source_node,
            target,
            target_id,
        }
    }
}

impl Migration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot is moving from, which still serves it.
    pub fn source(&self) -> &Node {
        self.source
    }

    /// The master the slot is moving to.
    pub fn target(&self) -> &Node {
        self.target
    }

    /// The slot's keys still on the source.
    ///
    /// # Panics
    ///
    /// If the source does not answer.
    pub fn keys_left(&self) -> Vec<String> {
        self.keys_on_source(None)
            .into_iter()
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect()
    }

    /// Moves `keys` from the source to the target with one `MIGRATE`, TTLs and all; keys not on
    /// the source are skipped.
    ///
    /// # Panics
    ///
    /// If a key is not in the slot, or `MIGRATE` fails (say, the target has the key already).
    pub fn move_keys(&self, keys: &[&str]) {
        for key in keys {
            assert_eq!(
                key_slot(key),
                self.slot,
                "testenv: key {key:?} is not in slot {}",
                self.slot
            );
        }
        let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.as_bytes().to_vec()).collect();
        self.migrate(&keys);
    }

    /// Moves up to `count` of the slot's keys from the source to the target, and returns them.
    ///
    /// # Panics
    ///
    /// As [`move_keys`](Migration::move_keys).
    pub fn move_some(&self, count: usize) -> Vec<String> {
        let keys = self.keys_on_source(Some(count));
        for batch in keys.chunks(MIGRATE_BATCH) {
            self.migrate(batch);
        }
        keys.iter()
            .map(|key| String::from_utf8_lossy(key).into_owned())
            .collect()
    }

    /// Moves the remaining keys, gives the slot to the target (`CLUSTER SETSLOT slot NODE` on
    /// the target, the source and every other running master), and waits until the cluster has
    /// settled.
    ///
    /// # Panics
    ///
    /// If a step fails, or the cluster does not settle within 30 s.
    pub fn finish(self) {
        loop {
            let keys = self.keys_on_source(Some(MIGRATE_BATCH));
            if keys.is_empty() {
                break;
            }
            self.migrate(&keys);
        }
        let view = self.cluster.view();
        let others = self.cluster.masters_in(&view).into_iter().filter(|node| {
            node.port() != self.source.port() && node.port() != self.target.port() && is_live(node)
        });
        // The target first: it bumps its config epoch as it takes the slot, so its claim wins
        // over the source's older one everywhere.
        for node in [self.target, self.source].into_iter().chain(others) {
            must::<()>(
                node,
                &format!("CLUSTER SETSLOT {} NODE", self.slot),
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg("NODE")
                    .arg(&self.target_id),
            );
        }
        self.cluster.wait_ok();
    }

    /// Up to `limit` of the slot's keys on the source; all of them without a limit.
    fn keys_on_source(&self, limit: Option<usize>) -> Vec<Vec<u8>> {
        let count = limit.unwrap_or_else(|| {
            must(
                self.source,
                "CLUSTER COUNTKEYSINSLOT",
                redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(self.slot),
            )
        });
        if count == 0 {
            return Vec::new();
        }
        must(
            self.source,
            "CLUSTER GETKEYSINSLOT",
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(count),
        )
    }

    fn migrate(&self, keys: &[Vec<u8>]) {
        if keys.is_empty() {
            return;
        }
        // `NOKEY` when none of them is on the source: nothing to move.
        must::<String>(
            self.source,
            "MIGRATE",
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.target.port())
                .arg("")
                .arg(0)
                .arg(MIGRATE_TIMEOUT_MS)
                .arg("KEYS")
                .arg(keys),
        );
    }
}

impl fmt::Debug for Migration<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Migration")
            .field("slot", &self.slot)
            .field("source", &self.source.port())
            .field("target", &self.target.port())
            .finish()
    }
}
