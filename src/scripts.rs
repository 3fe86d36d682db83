//! The Lua scripts that act on a lock's keys on one node, atomically.
//!
//! One reply convention for all of them (see `node::Request::interpret`): an acquire script answers
//! the fencing counter (`0` or more; `0` where none was asked for) when it took the lock and `-1`
//! when another owner holds it; every other script answers `1` when it acted on our value, `0` when
//! the lock is gone and `-1` when another owner's value holds it, so the caller can tell an expired
//! lock from a taken one. Anything else is an error reply with a message. Only acquire scripts
//! create keys: a lock that expired stays expired.
//!
//! Scripts check everything before they write: Redis does not undo a script's writes when it
//! fails halfway.

use crate::nodes::script::{Script, lua};

pub(crate) mod fair;

/// Compare-and-delete (`primitives/mutex/release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/mutex/release.lua");

/// Compare-and-delete with a release notice (`primitives/mutex/release_notify.lua`).
pub(crate) const RELEASE_NOTIFY: Script = lua!("primitives/mutex/release_notify.lua");

/// Compare-and-PEXPIRE (`primitives/mutex/extend.lua`).
pub(crate) const EXTEND: Script = lua!("primitives/mutex/extend.lua");

/// `SET NX PX` and the fencing counter (`primitives/mutex/acquire_fenced.lua`).
pub(crate) const ACQUIRE_FENCED: Script = lua!("primitives/mutex/acquire_fenced.lua");

/// The fencing raise (`primitives/mutex/raise.lua`).
pub(crate) const RAISE: Script = lua!("primitives/mutex/raise.lua");

/// What the name's key holds while readers hold a read-write lock: a value no lock ever has
/// (`settings::check_value` refuses it), so `SET NX` of a writer or a plain mutex fails, and no
/// compare-and-act script ever takes it for its own. The scripts spell it out too; a unit test
/// keeps them equal.
pub(crate) const READERS_MARKER: &str = "redmutex:readers";

/// Multi-name acquire (`primitives/multi/acquire.lua`).
pub(crate) const NAMES_ACQUIRE: Script = lua!("primitives/multi/acquire.lua");
/// Multi-name extend (`primitives/multi/extend.lua`).
pub(crate) const NAMES_EXTEND: Script = lua!("primitives/multi/extend.lua");
/// Multi-name release (`primitives/multi/release.lua`).
pub(crate) const NAMES_RELEASE: Script = lua!("primitives/multi/release.lua");
/// Multi-name fencing raise (`primitives/multi/raise.lua`).
pub(crate) const NAMES_RAISE: Script = lua!("primitives/multi/raise.lua");

/// Read acquire (`primitives/rwlock/read_acquire.lua`).
pub(crate) const READ_ACQUIRE: Script = lua!("primitives/rwlock/read_acquire.lua");
/// Read extend (`primitives/rwlock/read_extend.lua`).
pub(crate) const READ_EXTEND: Script = lua!("primitives/rwlock/read_extend.lua");
/// Read release (`primitives/rwlock/read_release.lua`).
pub(crate) const READ_RELEASE: Script = lua!("primitives/rwlock/read_release.lua");
/// Write acquire (`primitives/rwlock/write_acquire.lua`).
pub(crate) const WRITE_ACQUIRE: Script = lua!("primitives/rwlock/write_acquire.lua");

/// Inspection (`ops/inspect/inspect.lua`).
pub(crate) const INSPECT: Script = lua!("ops/inspect/inspect.lua");
/// Forced release (`ops/inspect/force_release.lua`).
pub(crate) const FORCE_RELEASE: Script = lua!("ops/inspect/force_release.lua");

/// Takes a permit (`primitives/semaphore/acquire.lua`).
pub(crate) const SEMAPHORE_ACQUIRE: Script = lua!("primitives/semaphore/acquire.lua");
/// Renews a permit (`primitives/semaphore/extend.lua`).
pub(crate) const SEMAPHORE_EXTEND: Script = lua!("primitives/semaphore/extend.lua");
/// Gives a permit back (`primitives/semaphore/release.lua`).
pub(crate) const SEMAPHORE_RELEASE: Script = lua!("primitives/semaphore/release.lua");

/// Every script, loaded into a node's cache on each new connection, so that requests sent by
/// digest find them even when nobody is left to send the fallback (see `node::Delivery`), and
/// known by digest when a node names one in an error.
pub(crate) const ALL: &[Script] = &[
    RELEASE,
    RELEASE_NOTIFY,
    EXTEND,
    ACQUIRE_FENCED,
    RAISE,
    INSPECT,
    FORCE_RELEASE,
    fair::ROUND,
    fair::RELEASE,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_RELEASE,
    NAMES_ACQUIRE,
    NAMES_EXTEND,
    NAMES_RELEASE,
    NAMES_RAISE,
    READ_ACQUIRE,
    READ_EXTEND,
    READ_RELEASE,
    WRITE_ACQUIRE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::listener::NOTICE_PREFIX;

    #[test]
    fn digests_are_sha1_hex_and_distinct() {
        for script in ALL {
            let digest = script.digest();
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(digest, redis::Script::new(script.text()).get_hash());
        }
        let distinct: std::collections::HashSet<_> = ALL.iter().map(Script::digest).collect();
        assert_eq!(distinct.len(), ALL.len(), "ALL lists every script once");
    }

    #[test]
    fn notices_go_to_the_channel_listeners_subscribe_to() {
        for script in [
            RELEASE_NOTIFY,
            FORCE_RELEASE,
            SEMAPHORE_RELEASE,
            NAMES_RELEASE,
            READ_RELEASE,
        ] {
            assert!(script.text().contains(&format!("'{NOTICE_PREFIX}' .. ")));
        }
    }

    #[test]
    fn the_readers_marker_is_the_one_the_scripts_use() {
        let quoted = format!("'{READERS_MARKER}'");
        for script in [
            READ_ACQUIRE,
            READ_EXTEND,
            READ_RELEASE,
            WRITE_ACQUIRE,
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
        let cluster = testenv::Cluster::start(1);
        let client = redis::Client::open(cluster.urls()[0].as_str()).expect("a URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("the node answers");
        for script in ALL {
            if let Err(error) = crate::nodes::script::load(&mut connection, script).await {
                panic!("{error}");
            }
        }
    }
}
