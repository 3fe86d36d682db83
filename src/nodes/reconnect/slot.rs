//! The state of a member's connection and how each event moves it: made on first use, made
//! again at once after an I/O failure, retried after a jittered backoff after a failed attempt,
//! and replaced when a probe finds it silent while a fresh one answers.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::future::{FutureExt, Shared};
use redis::{RedisError, RedisResult};
use tokio::sync::oneshot;

use super::{Live, Reconnecting, cluster_node_error, open};
use crate::nodes::Member;
use crate::nodes::health::{nanos_now, probe};

/// Pause after a failed attempt to connect before the next one, doubled after each failure.
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

pub(super) enum Slot {
    /// No connection: none was needed yet, or the last one was lost or could not be made.
    Idle {
        /// Why the last attempt failed, and until when calls get that error instead of a new
        /// attempt.
        failed: Option<(RedisError, Instant)>,
        /// The pause after the next failed attempt.
        backoff: Duration,
    },
    /// An attempt in progress, shared by every call waiting for it.
    Connecting(Pending),
    Ready(Live),
}

/// The outcome of an attempt to connect, made by a task of its own and awaited by any number of
/// calls. Only the task polls the attempt: a runtime that shuts down drops it (and a call on
/// another runtime never polls I/O or timers of the dead one), which reads as [`abandoned`].
pub(super) type Pending = Shared<oneshot::Receiver<RedisResult<Live>>>;

/// What a call gets to send on.
pub(super) enum Current {
    Ready(Live),
    Pending(Pending),
    Failed(RedisError),
}

impl Reconnecting {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Every change of the slot is one assignment, so a panic elsewhere cannot leave it torn.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn current(self: &Arc<Self>) -> Current {
        let mut slot = self.slot();
        let backoff = match &*slot {
            Slot::Ready(live) => return Current::Ready(live.clone()),
            Slot::Connecting(pending) => return Current::Pending(pending.clone()),
            Slot::Idle {
                failed: Some((error, retry_at)),
                ..
            } if Instant::now() < *retry_at => return Current::Failed(error.clone()),
            Slot::Idle { backoff, .. } => *backoff,
        };
        let Some(connecting) = self.connecting(backoff) else {
            return Current::Failed(no_runtime());
        };
        let pending = connecting.pending.clone();
        *slot = Slot::Connecting(pending.clone());
        drop(slot);
        connecting.start();
        Current::Pending(pending)
    }

    /// An attempt to connect, not started yet; `None` outside a tokio runtime. See [`Connecting`].
    fn connecting(
        self: &Arc<Self>,
        backoff: Duration,
    ) -> Option<Connecting<impl Future<Output = ()> + Send + 'static>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (report, pending) = oneshot::channel();
        let mut attempt = Attempt {
            this: Arc::downgrade(self),
            settled: false,
        };
        let (client, scripts) = (self.client.clone(), self.scripts);
        let moved = self.moved.load(Ordering::Relaxed);
        let seat = self.seat.clone();
        let task = async move {
            let outcome = open(&client, scripts, moved).await;
            // Registered before any call can use it (see `servers`).
            let outcome = outcome.map(|live| live.seated(seat.as_ref()));
            attempt.settle(&outcome, backoff);
            let _ = report.send(outcome);
        };
        Some(Connecting {
            runtime,
            task,
            pending: pending.shared(),
        })
    }

    fn settle(&self, outcome: Option<&RedisResult<Live>>, backoff: Duration) {
        let mut slot = self.slot();
        // Only an attempt in progress can settle, and there is one at most.
        if !matches!(*slot, Slot::Connecting(_)) {
            return;
        }
        let Some(outcome) = outcome else {
            // Abandoned (its runtime shut down): the next call starts another at once.
            *slot = Slot::Idle {
                failed: None,
                backoff,
            };
            return;
        };
        *slot = match outcome {
            Ok(live) => {
                tracing::debug!(node = %self.address, member = ?live.member(), "node connection made");
                self.cluster
                    .store(live.member() == Member::Cluster, Ordering::Relaxed);
                self.known.store(true, Ordering::Release);
                Slot::Ready(live.clone())
            }
            Err(error) => {
                tracing::debug!(node = %self.address, %error, ?backoff, "node connection failed");
                Slot::Idle {
                    failed: Some((error.clone(), Instant::now() + jittered(backoff))),
                    backoff: (backoff * 2).min(BACKOFF_MAX),
                }
            }
        };
    }

    /// The connection `live` failed: it is dropped, and a new one is made at once.
    pub(in crate::nodes) fn lost(self: &Arc<Self>, live: &Live, error: &RedisError) {
        let mut slot = self.slot();
        if matches!(&*slot, Slot::Ready(current) if current.is(live)) {
            tracing::debug!(node = %self.address, %error, "node connection lost, reconnecting");
            let Some(connecting) = self.connecting(BACKOFF_MIN) else {
                *slot = Slot::Idle {
                    failed: None,
                    backoff: BACKOFF_MIN,
                };
                return;
            };
            *slot = Slot::Connecting(connecting.pending.clone());
            drop(slot);
            connecting.start();
        }
    }

    /// A standalone connection `live` had a reply that only a cluster node gives (`MOVED`, `ASK`):
    /// its node runs Redis Cluster although `INFO` did not say (refused). The connection is
    /// dropped and the next one made as a cluster's (see `cluster`); the call that met the
    /// redirection gets the error to report.
    pub(super) fn moved(self: &Arc<Self>, live: &Live) -> RedisError {
        self.moved.store(true, Ordering::Relaxed);
        let error = cluster_node_error();
        tracing::debug!(node = %self.address, "a redirection: the node runs Redis Cluster");
        self.lost(live, &error);
        error
    }

    /// Starts a probe of the suspect connection `live`, unless one runs or ran a moment ago.
    pub(super) fn probe(self: &Arc<Self>, live: &Live) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if live.health.start_probe(nanos_now()) {
            runtime.spawn(probe(
                Arc::downgrade(self),
                self.client.clone(),
                self.scripts,
                self.moved.load(Ordering::Relaxed),
                live.clone(),
            ));
        }
    }

    /// The probe found `old` silent while `fresh` answered.
    pub(in crate::nodes) fn replace(&self, old: &Live, fresh: Live) {
        let mut slot = self.slot();
        if matches!(&*slot, Slot::Ready(current) if current.is(old)) {
            let fresh = fresh.seated(self.seat.as_ref());
            tracing::debug!(
                node = %self.address,
                "node connection went silent while a new one answered: replaced"
            );
            self.cluster
                .store(fresh.member() == Member::Cluster, Ordering::Relaxed);
            *slot = Slot::Ready(fresh);
        }
    }
}

/// An attempt to connect, run by a task of its own so that it completes even when every call
/// waiting for it gave up. Its outcome settles the slot; a failure sets the next attempt its
/// backoff later. Made under the slot's lock, which then records it as the attempt in progress,
/// and started only once that lock is released: a runtime that is shutting down drops the task at
/// once, and its [`Attempt`] then settles the slot, which takes the lock.
struct Connecting<F> {
    runtime: tokio::runtime::Handle,
    task: F,
    pending: Pending,
}

impl<F: Future<Output = ()> + Send + 'static> Connecting<F> {
    fn start(self) {
        self.runtime.spawn(self.task);
    }
}

/// An attempt to connect, as its task sees it: settles the slot once, even when the task is
/// dropped before the attempt ends.
struct Attempt {
    this: Weak<Reconnecting>,
    settled: bool,
}

impl Attempt {
    fn settle(&mut self, outcome: &RedisResult<Live>, backoff: Duration) {
        self.settled = true;
        if let Some(this) = self.this.upgrade() {
            this.settle(Some(outcome), backoff);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.settled
            && let Some(this) = self.this.upgrade()
        {
            this.settle(None, BACKOFF_MIN);
        }
    }
}

/// The error of calls that waited for an attempt whose runtime shut down.
pub(super) fn abandoned() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "connecting was abandoned: the runtime that ran it shut down",
    ))
}

fn no_runtime() -> RedisError {
    RedisError::from(std::io::Error::other("no tokio runtime to connect on"))
}

/// A random pause in `[backoff / 2, backoff]`, so that many clients that lost a node at once do
/// not come back in step.
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

#[cfg(test)]
mod tests {
    use redis::Client;

    use super::*;
    use crate::nodes::member::MemberClient;

    /// A connection wanted while its runtime shuts down (a task's destructor, run by the shutdown,
    /// that sends on it): the runtime refuses the connecting task and drops it at once, and its
    /// `Attempt` settles the slot. That must not happen under the slot's lock, which is not
    /// reentrant: the shutdown hung there, seen as a suite test that never ended.
    #[test]
    fn a_connection_wanted_while_the_runtime_shuts_down_does_not_hang_it() {
        struct SendsOnDrop(Arc<Reconnecting>);
        impl Drop for SendsOnDrop {
            fn drop(&mut self) {
                assert!(matches!(
                    self.0.current(),
                    Current::Pending(_) | Current::Failed(_)
                ));
            }
        }
        let this = Arc::new(Reconnecting::new(
            MemberClient::Node(Client::open("redis://127.0.0.1:1/").expect("a URL")),
            &[],
            None,
        ));
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let guard = SendsOnDrop(this);
            runtime.spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await
            });
            drop(runtime);
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the runtime shut down, rather than hang on the slot's lock");
    }

    #[test]
    fn backoff_is_jittered_below_its_value() {
        for _ in 0..100 {
            let pause = jittered(BACKOFF_MAX);
            assert!(pause >= BACKOFF_MAX / 2 && pause <= BACKOFF_MAX);
        }
    }
}
