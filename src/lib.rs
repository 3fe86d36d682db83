#![doc = include_str!("../README.md")]

mod acquire;
mod checks;
mod engine;
mod error;
mod fenced;
mod hub;
mod inspect;
mod keep_alive;
mod line;
mod lock;
mod mutex;
mod nodes;
mod redlock;
mod rwlock;
mod scripts;
mod semaphore;
mod target;
mod waiting;

pub use checks::{CheckKind, CheckReport, CheckStatus, Checkup, NodeCheck};
pub use error::{Error, NodeError, NodeErrorKind};
pub use fenced::fenced_set;
pub use inspect::{Holder, HolderEntry, LockState, NodeAnswer, NodeLockState};
pub use keep_alive::{KeepAlive, KeepAliveEnd};
pub use lock::Lock;
pub use mutex::Mutex;
pub use nodes::connection::NodeConnection;
pub use redlock::Redlock;
pub use rwlock::RwLock;
pub use semaphore::Semaphore;

/// The pure parts of the algorithm, exposed for the crate's own benchmarks. Not a stable API.
#[doc(hidden)]
pub mod internals {
    use std::time::Duration;

    /// The compare-and-delete script, for the benchmark's raw floor to run the same Lua.
    pub const RELEASE_SCRIPT: &str = crate::scripts::RELEASE.text();

    /// A semaphore's acquire script (key: the name; arguments: the value, the expiry in
    /// milliseconds, the permits), for tests that count its replies against another quorum than
    /// the library's.
    pub const SEMAPHORE_ACQUIRE_SCRIPT: &str = crate::scripts::SEMAPHORE_ACQUIRE.text();

    /// How many scripts a client loads into each node when it starts, for tests that wait until
    /// it is done.
    pub const SCRIPTS: usize = crate::scripts::ALL.len();

    /// See `quorum::quorum`.
    pub fn quorum(nodes: usize) -> usize {
        crate::engine::quorum::quorum(nodes)
    }

    /// See `quorum::validity`.
    pub fn validity(expiry: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
        crate::engine::quorum::validity(expiry, elapsed, drift_factor)
    }

    /// See `value::random_value`.
    pub fn random_value() -> std::sync::Arc<str> {
        crate::engine::value::random_value()
    }

    /// Counts `ok` successes and `failed` timeouts out of `ok + failed` nodes and judges an acquire,
    /// as one attempt does after its replies are in.
    pub fn judge_acquire(ok: usize, failed: usize, validity: Option<Duration>) -> bool {
        let total = ok + failed;
        let mut tally =
            crate::engine::tally::Tally::new(total, crate::engine::quorum::quorum(total));
        for node in 0..ok {
            tally.add(node, Ok(0));
        }
        for node in ok..ok + failed {
            tally.add(
                node,
                Err(crate::error::NodeErrorKind::Timeout(Duration::from_millis(
                    1,
                ))),
            );
        }
        tally.close([]);
        tally.judge_acquire(validity).is_ok()
    }
}
