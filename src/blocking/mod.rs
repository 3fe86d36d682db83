//! A blocking API, for programs without an async runtime: command-line tools, batch jobs,
//! services on synchronous frameworks. With the `blocking` feature.
//!
//! [`Redlock`], [`Mutex`], [`RwLock`], [`Semaphore`] and [`Election`] have the async API's
//! constructors, builder methods and names; `lock()`, `try_lock()`, `read()`, `write()`,
//! `acquire()`, `campaign()`, [`Lock::extend`], [`Lock::unlock`] and the others block the
//! calling thread until they are done, and return the async API's [`Error`]s. The
//! settings, their defaults and bounds are those of the async builders, whose pages describe
//! them.
//!
//! # One engine
//!
//! Every call runs the async API on a tokio runtime of redmutex's own, one per process, started
//! by the first [`Redlock::connect`] or [`Redlock::from_clients`]: two worker threads named
//! `redmutex-blocking`, which also run the connections, the release listeners and the
//! keep-alives while the caller's thread is blocked (a keep-alive renews while the work of
//! [`Lock::run`] holds the caller's thread). So every rule of the algorithm, every guarantee
//! and every test of the async API holds for this one: it is the same code. The runtime lives
//! until the process ends.
//!
//! # Inside a tokio runtime
//!
//! A blocking call made on a thread that belongs to a tokio runtime (an `async fn`, a
//! `Runtime::block_on`, or `tokio::task::spawn_blocking`) returns
//! [`Error::InsideRuntime`] at once, sends nothing and never panics:
//! blocking a runtime's thread would stall its tasks, the one holding the lock waited for
//! included. Use the async API there. Building handles ([`Redlock::new_mutex`], the builder
//! methods, [`Lock::keep_alive`]) and dropping them never blocks, and works anywhere.
//!
//! # Drop
//!
//! A [`Lock`] (its last clone) or a [`Leadership`] dropped without `unlock()` or `resign()`
//! releases in the background, on redmutex's runtime, as the async API's do on theirs; the caller
//! needs no runtime, and a drop inside one releases on redmutex's all the same. The release goes out at once but is not waited for: a process that exits right
//! after a drop may exit first, and the keys then expire. Call `unlock()` before exiting.
//!
//! # Examples
//!
//! ```
//! use redmutex::blocking::Redlock;
//! use std::time::Duration;
//!
//! // Local test nodes (redmutex-testenv); production code passes its own URLs.
//! let cluster = redmutex_testenv::Cluster::start(3);
//! let urls = cluster.urls();
//!
//! // e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", ...]
//! let redlock = Redlock::connect(urls)?;
//! let mutex = redlock.new_mutex("report:weekly").with_expiry(Duration::from_secs(30));
//! let lock = mutex.lock()?; // blocks until held, or the tries run out
//! // ... write the report, well before lock.valid_until() ...
//! lock.unlock()?;
//! # Ok::<(), redmutex::Error>(())
//! ```

mod election;
mod lock;
mod primitives;
mod redlock;

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, EnterGuard, Handle, Runtime};

use crate::error::Error;

pub use election::{Election, Leadership};
pub use lock::{KeepAlive, Lease, Lock};
pub use primitives::{Mutex, RwLock, Semaphore};
pub use redlock::Redlock;

/// Worker threads of the runtime: they run every task of the blocking clients (the callers'
/// calls, the connections, the listeners, the keep-alives), which wait on the network far more
/// than they compute; two let one call's fan-out go on while another's replies are judged.
const WORKERS: usize = 2;

/// The runtime, one per process, started by the first blocking client. It is never shut down, so
/// background work (a dropped lock's release, a reconnect) never finds it gone.
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// redmutex's runtime, which every handle of this module carries: having one proves it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Background {
    runtime: &'static Runtime,
}

impl Background {
    /// The runtime, started if it was not (refused inside a tokio runtime).
    fn start() -> Result<Background, Error> {
        refuse_inside_runtime()?;
        if let Some(runtime) = RUNTIME.get() {
            return Ok(Background { runtime });
        }
        let built = Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("redmutex-blocking")
            .enable_all()
            .build()
            .map_err(|error| Error::RuntimeUnavailable {
                reason: error.to_string(),
            })?;
        // Two threads may have built one at once: the first stays, the other is dropped here,
        // outside any runtime (as refused above), where dropping one may block.
        Ok(Background {
            runtime: RUNTIME.get_or_init(|| built),
        })
    }

    /// `lock`, made to release on this runtime when its last clone is dropped without an unlock,
    /// wherever that happens.
    fn own(self, lock: crate::Lock) -> Lock {
        lock.release_on(self.runtime.handle().clone());
        Lock::new(lock, self)
    }

    /// Runs `operation` on the runtime and blocks this thread until it is done. The operation
    /// runs as a task of the runtime, beside the connections' tasks that answer it, so that this
    /// thread is woken once, at the end, rather than at each node's reply.
    fn call<T, F>(self, operation: F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        refuse_inside_runtime()?;
        let task = self.runtime.spawn(operation);
        match self.runtime.block_on(task) {
            Ok(outcome) => outcome,
            Err(error) => match error.try_into_panic() {
                // The operation panicked: so does the call, as it would have in the caller's task.
                Ok(panic) => std::panic::resume_unwind(panic),
                // Not reached: nothing aborts the task, and the runtime never shuts down.
                Err(error) => Err(Error::RuntimeUnavailable {
                    reason: error.to_string(),
                }),
            },
        }
    }

    /// Makes `leadership` resign on this runtime when dropped, wherever that happens.
    fn resign_on_drop(self, leadership: &crate::Leadership) {
        leadership.release_on(self.runtime.handle().clone());
    }

    /// Acquires through a clone of `builder` with `acquire` (a lock of a primitive), blocking.
    fn hold<B, F, A>(self, builder: &B, acquire: F) -> Result<Lock, Error>
    where
        B: Clone + Send + 'static,
        F: FnOnce(B) -> A + Send + 'static,
        A: Future<Output = Result<crate::Lock, Error>> + Send + 'static,
    {
        let builder = builder.clone();
        let lock = self.call(async move { acquire(builder).await })?;
        Ok(self.own(lock))
    }

    /// Waits for `future` on this thread, in the runtime's context (for futures that borrow,
    /// and only wait: a keep-alive's end, a leadership's loss).
    fn block_on<F: Future>(self, future: F) -> Result<F::Output, Error> {
        refuse_inside_runtime()?;
        Ok(self.runtime.block_on(future))
    }

    /// Enters the runtime's context, so that what is spawned meanwhile (a keep-alive) runs on it.
    fn enter(self) -> EnterGuard<'static> {
        self.runtime.enter()
    }
}

/// [`Error::InsideRuntime`] on a thread of a tokio runtime (see the module's doc).
fn refuse_inside_runtime() -> Result<(), Error> {
    match Handle::try_current() {
        Ok(_) => Err(Error::InsideRuntime),
        Err(_) => Ok(()),
    }
}

/// The builder methods of a blocking handle: each hands its argument to the async builder's
/// method of the same name, whose page says the default, the bounds and gives an example; and
/// the getters, which read the async builder's.
///
/// `waiting;` first in the list stands for the settings of how a call waits, which every
/// primitive and the election share; `locking;` for those and the settings every lock shares.
macro_rules! same_as_async {
    ($wrapper:ident over $inner:ident { waiting; $($rest:tt)* }) => {
        same_as_async!($wrapper over $inner {
            set with_max_wait(wait: std::time::Duration);
            set with_tries(tries: u32);
            set with_retry_delay(delay: std::time::Duration);
            set with_retry_delay_fn(
                delay: impl Send + Sync + 'static + Fn(u32) -> std::time::Duration
            );
            set with_drift_factor(factor: f64);
            set with_timeout_factor(factor: f64);
            $($rest)*
        });
    };
    ($wrapper:ident over $inner:ident { locking; $($rest:tt)* }) => {
        same_as_async!($wrapper over $inner {
            waiting;
            set with_expiry(expiry: std::time::Duration);
            set with_metrics_label(label: &'static str);
            set with_fail_fast(fail_fast: bool);
            set with_wake_on_release(wake: bool);
            set with_replica_acks(replicas: u32);
            set with_shuffle_nodes(shuffle: bool);
            set with_value_fn(value: impl Send + Sync + 'static + Fn() -> String);
            $($rest)*
        });
    };
    ($wrapper:ident over $inner:ident {
        $(set $setter:ident($arg:ident: $ty:ty);)*
        $(get $getter:ident -> $ret:ty;)*
    }) => {
        impl $wrapper {
            $(
                #[doc = concat!(
                    "The setting of [`", stringify!($inner), "::", stringify!($setter),
                    "`](crate::", stringify!($inner), "::", stringify!($setter),
                    "), with its default and bounds."
                )]
                #[must_use]
                pub fn $setter(self, $arg: $ty) -> Self {
                    Self {
                        inner: self.inner.$setter($arg),
                        ..self
                    }
                }
            )*
            $(
                #[doc = concat!(
                    "As [`", stringify!($inner), "::", stringify!($getter),
                    "`](crate::", stringify!($inner), "::", stringify!($getter), ")."
                )]
                pub fn $getter(&self) -> $ret {
                    self.inner.$getter()
                }
            )*
        }
    };
}
use same_as_async;
