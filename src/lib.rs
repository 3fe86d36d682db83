#![doc = include_str!("../doc/rustdoc-links.md")]
#![doc = include_str!("../README.md")]
// docs.rs builds with `--cfg docsrs` (see Cargo.toml) and marks each feature-gated item.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom to top, each a folder whose module doc says what it owns; a layer uses only
// those below it. `nodes`: one node and the connection to it. `engine`: one operation on every
// node, the quorum and validity, the held record. `waiting`: the acquire loop and the ways of
// waiting between attempts. `primitives`: what a caller takes, each with its keys, commands and
// Lua scripts. `ops`: the operator's tools. `blocking`: the public API again, for threads
// without a runtime, on a runtime of its own. `error` is used by all; `redlock`, the client,
// constructs everything and assembles the scripts every node loads.
#[cfg(feature = "blocking")]
pub mod blocking;
mod engine;
mod error;
pub mod guide;
mod nodes;
mod ops;
mod primitives;
mod redlock;
mod waiting;

pub use error::{Error, NodeError, NodeErrorKind};
pub use nodes::connection::NodeConnection;
pub use nodes::member::MemberClient;
pub use ops::checks::{CheckKind, CheckReport, CheckStatus, Checkup, NodeCheck};
pub use ops::inspect::{Holder, HolderEntry, LockState, NodeAnswer, NodeLockState};
pub use primitives::election::{Election, LeaderInfo, Leadership, LeadershipEnd};
pub use primitives::fenced::fenced_set;
pub use primitives::keep_alive::{KeepAlive, KeepAliveEnd};
pub use primitives::lock::Lock;
pub use primitives::mutex::Mutex;
pub use primitives::rwlock::RwLock;
pub use primitives::semaphore::Semaphore;
pub use redlock::Redlock;

/// The `redis` crate this version of redmutex is built on (see the README's *Install*), so that
/// an application hands [`fenced_set`], [`Redlock::from_clients`] and [`MemberClient`] the same
/// crate's connections and clients without pinning a matching version of its own.
///
/// # Examples
///
/// ```
/// use redmutex::redis;
///
/// // Opening a client only parses its URL; it connects on first use.
/// let client = redis::Client::open("redis://127.0.0.1:6379/0");
/// assert!(client.is_ok());
/// assert!(redis::Client::open("not a URL").is_err());
/// ```
pub use redis;

/// The pure parts of the algorithm, exposed for the crate's own benchmarks. Not a stable API.
#[doc(hidden)]
pub mod internals {
    use std::time::Duration;

    /// The compare-and-delete script, for the benchmark's raw floor to run the same Lua.
    pub const RELEASE_SCRIPT: &str = crate::primitives::mutex::RELEASE.text();

    /// A semaphore's acquire script (key: the name; arguments: the value, the expiry in
    /// milliseconds, the permits), for tests that count its replies against another quorum than
    /// the library's.
    pub const SEMAPHORE_ACQUIRE_SCRIPT: &str = crate::primitives::semaphore::ACQUIRE.text();

    /// How many scripts a client loads into each node when it starts, for tests that wait until
    /// it is done.
    pub const SCRIPTS: usize = crate::redlock::SCRIPT_COUNT;

    /// The text of every script a client loads into its nodes, as sent, for tests that read what
    /// the scripts run (the scripts are `.lua` files under `src/`, assembled by `build.rs`).
    pub fn script_texts() -> impl Iterator<Item = &'static str> {
        crate::redlock::SCRIPTS.iter().map(|script| script.text())
    }

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

    /// Records what one `lock()` + `unlock()` of a mutex on `nodes` nodes records (the
    /// `metrics` feature), for the benchmark of what recording costs on its own; `sent` stands
    /// for when both fan-outs sent their requests.
    #[cfg(feature = "metrics")]
    pub fn record_cycle(nodes: usize, sent: std::time::Instant) {
        crate::engine::metrics::record_cycle(nodes, sent);
    }
}
