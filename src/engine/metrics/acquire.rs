//! The acquiring call's series: how long a `lock()`, `read()` or `acquire()` call took
//! (`redmutex_acquire_seconds`), how many calls wait (`redmutex_waiting`), and how a call that
//! waited got its lock (`redmutex_handoffs_total`).

#[cfg(feature = "metrics")]
use std::time::Instant;

use super::Labels;
#[cfg(feature = "metrics")]
use super::{GaugeHandle, Since, kept, outcome_index, outcome_label};
use crate::error::Error;

/// A `lock()`, `read()` or `acquire()` call, timed from its start until it returns, or until it
/// is dropped before it returns (outcome `cancelled`: a caller's own timeout around the call,
/// say, whose waits would otherwise be missing from the histogram, and the longest ones at that)
/// (`redmutex_acquire_seconds`).
pub(crate) struct Acquiring {
    #[cfg(feature = "metrics")]
    labels: Labels,
    /// `None` where no recorder was installed when the call started: nothing to time it for.
    #[cfg(feature = "metrics")]
    started: Option<Instant>,
    #[cfg(feature = "metrics")]
    returned: bool,
}

/// `Acquiring`'s outcome for a call dropped before it returned, after `outcome_index`'s.
#[cfg(feature = "metrics")]
const CANCELLED: usize = 5;

impl Acquiring {
    #[inline]
    pub(crate) fn start(labels: &Labels) -> Acquiring {
        #[cfg(feature = "metrics")]
        {
            let recording = kept::current() != kept::Current::Nothing;
            Acquiring {
                labels: *labels,
                started: recording.then(Instant::now),
                returned: false,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Acquiring {}
        }
    }

    /// The call returns `outcome`.
    #[inline]
    pub(crate) fn returned<T>(self, outcome: &Result<T, Error>) {
        #[cfg(feature = "metrics")]
        {
            let mut this = self;
            this.returned = true;
            this.record(outcome_index(outcome));
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (self, outcome);
    }

    #[cfg(feature = "metrics")]
    fn record(&self, index: usize) {
        let Some(started) = self.started else {
            return;
        };
        let current = kept::current();
        if current == kept::Current::Nothing {
            return;
        }
        let labels = &self.labels;
        kept::histogram(
            kept::primitive(current, labels).and_then(|series| series.acquire_seconds.get(index)),
            || {
                let outcome = match index {
                    CANCELLED => "cancelled",
                    index => outcome_label(index, "acquired"),
                };
                metrics::histogram!(
                    "redmutex_acquire_seconds",
                    labels.with("outcome", outcome).pairs()
                )
            },
            |histogram| histogram.record(Since(started)),
        );
    }
}

#[cfg(feature = "metrics")]
impl Drop for Acquiring {
    fn drop(&mut self) {
        if !self.returned {
            self.record(CANCELLED);
        }
    }
}

/// A call counted in `redmutex_waiting` while this lives: dropped when the call returns or is
/// cancelled, so the gauge cannot drift.
pub(crate) struct Waiter {
    #[cfg(feature = "metrics")]
    gauge: GaugeHandle,
}

impl Waiter {
    #[inline]
    pub(crate) fn enter(labels: &Labels) -> Waiter {
        #[cfg(feature = "metrics")]
        {
            let current = kept::current();
            let register = || metrics::gauge!("redmutex_waiting", labels.alone().pairs());
            // The handle the gauge went up by is the one it goes down by, whichever recorder is
            // current when the call returns.
            let gauge = GaugeHandle::new(current, labels, |series| &series.waiting, register);
            gauge.get().increment(1.0);
            Waiter { gauge }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Waiter {}
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiter {
    fn drop(&mut self) {
        self.gauge.get().decrement(1.0);
    }
}

/// How a call that waited got its lock (`redmutex_handoffs_total`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Handoff {
    /// An attempt after a release notice woke the call.
    Wake,
    /// The releaser handed the lock over in the fair line.
    Fair,
}

/// A waiting call acquired after a wake-up or a hand-off.
#[inline]
pub(crate) fn handoff(mode: Handoff) {
    #[cfg(feature = "metrics")]
    {
        let current = kept::current();
        if current == kept::Current::Nothing {
            return;
        }
        let kept = (current == kept::Current::Global)
            .then(|| kept::HANDOFFS.get(mode as usize))
            .flatten();
        kept::counter(
            kept,
            || match mode {
                Handoff::Wake => metrics::counter!("redmutex_handoffs_total", "mode" => "wake"),
                Handoff::Fair => metrics::counter!("redmutex_handoffs_total", "mode" => "fair"),
            },
            |counter| counter.increment(1),
        );
    }
    #[cfg(not(feature = "metrics"))]
    let _ = mode;
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::engine::metrics::testing::MUTEX;

    #[test]
    fn a_waiter_counts_while_it_lives() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);
        let gauge = || match &snapshotter.snapshot().into_vec()[..] {
            // A snapshot reads and resets: each reading is the change since the last.
            [(_, _, _, DebugValue::Gauge(value))] => value.0,
            other => panic!("{other:?}"),
        };
        let first = Waiter::enter(&MUTEX);
        let second = Waiter::enter(&MUTEX);
        drop(first);
        assert_eq!(gauge(), 1.0, "one waits");
        drop(second);
        assert_eq!(gauge(), -1.0, "and then none");
    }
}
