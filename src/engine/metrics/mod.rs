//! What redmutex records through the `metrics` facade (the `metrics` feature; doc/metrics.md
//! lists the series). Every recording goes through this module: each layer calls it where its
//! event happens (the fan-out for node requests, an attempt for its outcome, the acquire loop for
//! waiting and hand-offs, the held record for holding, extending and losing). Without the
//! feature the functions are empty and the types hold nothing, so the call sites need no `cfg`
//! and compile to nothing.
//!
//! Lock names are never labels (one series per name would grow without bound); a primitive
//! carries only its kind and the static label its owner gave it (`use`), and a node its index in
//! the client's list (addresses carry credentials in some URLs, and change with DNS).
//!
//! Each series lives with its event: `acquire` times the acquiring call and counts the calls that
//! wait and how they got their lock, `hold` counts and times holds and their losses, `node` counts
//! and times each node's requests; `kept` keeps the handles registered with the global recorder.
//! This file holds what they share: the labels, the outcome labels, and the attempts and
//! extensions, counted by outcome.

#[cfg(feature = "metrics")]
use std::time::Instant;

use crate::error::Error;

mod acquire;
mod hold;
#[cfg(feature = "metrics")]
mod kept;
mod node;

pub(crate) use acquire::{Acquiring, Handoff, Waiter, handoff};
pub(crate) use hold::{End, Hold, Lost, lost};
pub(crate) use node::NodeReplies;
#[cfg(feature = "metrics")]
pub(crate) use node::record_cycle;

/// What a primitive's series are labelled with: its kind, and the `use` its owner set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Labels {
    /// `mutex`, `multi`, `read`, `write` or `semaphore`.
    pub primitive: &'static str,
    /// `with_metrics_label`'s value.
    pub use_label: Option<&'static str>,
}

impl Labels {
    /// The labels with `key`'s value added (up to three pairs, on the stack).
    #[cfg(feature = "metrics")]
    fn with(&self, key: &'static str, value: &'static str) -> LabelSet {
        let mut set = LabelSet {
            pairs: [("primitive", self.primitive), (key, value), ("use", "")],
            len: 2,
        };
        if let Some(label) = self.use_label {
            set.pairs[2].1 = label;
            set.len = 3;
        }
        set
    }

    #[cfg(feature = "metrics")]
    fn alone(&self) -> LabelSet {
        let mut set = LabelSet {
            pairs: [("primitive", self.primitive), ("use", ""), ("", "")],
            len: 1,
        };
        if let Some(label) = self.use_label {
            set.pairs[1].1 = label;
            set.len = 2;
        }
        set
    }
}

#[cfg(feature = "metrics")]
struct LabelSet {
    pairs: [(&'static str, &'static str); 3],
    len: usize,
}

#[cfg(feature = "metrics")]
impl LabelSet {
    fn pairs(&self) -> &[(&'static str, &'static str)] {
        &self.pairs[..self.len]
    }
}

/// The outcome labels of an attempt, acquire or extend: what succeeded is `acquired` (or `ok`, an
/// extend), then the failures.
#[cfg(feature = "metrics")]
const FAILURES: [&str; 4] = ["taken", "no_quorum", "expired", "error"];

/// `outcome`'s place: 0 for success, then [`FAILURES`]'s order plus one.
#[cfg(feature = "metrics")]
fn outcome_index<T>(outcome: &Result<T, Error>) -> usize {
    match outcome {
        Ok(_) => 0,
        Err(Error::Taken { .. }) => 1,
        Err(Error::NoQuorum { .. }) => 2,
        Err(Error::Expired) => 3,
        Err(_) => 4,
    }
}

/// The label of the outcome at `index`, with `ok` the success's.
#[cfg(feature = "metrics")]
fn outcome_label(index: usize, ok: &'static str) -> &'static str {
    index.checked_sub(1).map_or(ok, |failure| FAILURES[failure])
}

/// The time since an instant, in seconds, read when a histogram takes it: a handle that records
/// nothing (a series the application filtered out) reads no clock.
#[cfg(feature = "metrics")]
struct Since(Instant);

#[cfg(feature = "metrics")]
impl metrics::IntoF64 for Since {
    fn into_f64(self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// One attempt to acquire ended (`redmutex_attempts_total`).
#[inline]
pub(crate) fn attempt<T>(labels: &Labels, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    count_outcome(
        labels,
        outcome,
        "redmutex_attempts_total",
        "acquired",
        |series| &series.attempts,
    );
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome);
}

/// An `extend()` (the caller's or a keep-alive's) ended (`redmutex_extensions_total`).
#[inline]
pub(crate) fn extension<T>(labels: &Labels, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    count_outcome(
        labels,
        outcome,
        "redmutex_extensions_total",
        "ok",
        |series| &series.extensions,
    );
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome);
}

/// Counts `outcome` in the counter `name` by its `outcome` label (`ok` the success's), through
/// the kept handle `slots` picks where there is one.
#[cfg(feature = "metrics")]
fn count_outcome<T>(
    labels: &Labels,
    outcome: &Result<T, Error>,
    name: &'static str,
    ok: &'static str,
    slots: fn(&kept::Primitive) -> &[std::sync::OnceLock<metrics::Counter>],
) {
    let current = kept::current();
    if current == kept::Current::Nothing {
        return;
    }
    let index = outcome_index(outcome);
    kept::counter(
        kept::primitive(current, labels).and_then(|series| slots(series).get(index)),
        || {
            metrics::counter!(
                name,
                labels.with("outcome", outcome_label(index, ok)).pairs()
            )
        },
        |counter| counter.increment(1),
    );
}

/// The handle a gauge went up by, kept by what must take it down by the same one.
#[cfg(feature = "metrics")]
enum GaugeHandle {
    /// The global recorder's, kept as long as the process lives: no reference count to touch.
    Kept(&'static metrics::Gauge),
    /// Registered with another recorder for this use alone, or the facade's no-op handle where
    /// no recorder was installed.
    Registered(metrics::Gauge),
}

#[cfg(feature = "metrics")]
impl GaugeHandle {
    /// The gauge of `labels` that `slot` picks, in the recorder `current` is.
    fn new(
        current: kept::Current,
        labels: &Labels,
        slot: fn(&'static kept::Primitive) -> &'static std::sync::OnceLock<metrics::Gauge>,
        register: impl FnOnce() -> metrics::Gauge,
    ) -> GaugeHandle {
        match kept::primitive(current, labels) {
            Some(series) => GaugeHandle::Kept(slot(series).get_or_init(register)),
            None if current == kept::Current::Nothing => {
                GaugeHandle::Registered(metrics::Gauge::noop())
            }
            None => GaugeHandle::Registered(register()),
        }
    }

    fn get(&self) -> &metrics::Gauge {
        match self {
            GaugeHandle::Kept(gauge) => gauge,
            GaugeHandle::Registered(gauge) => gauge,
        }
    }
}

/// What the tests beside each concept share: recording into a local recorder, and reading it.
#[cfg(all(test, feature = "metrics"))]
mod testing {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::Labels;

    /// What `record` recorded: each series as `name{k=v,...}` with its value.
    pub(super) fn recorded(record: impl FnOnce()) -> Vec<(String, DebugValue)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record);
        let mut series = series(&snapshotter);
        series.sort_by(|a, b| a.0.cmp(&b.0));
        series
    }

    /// What `snapshotter`'s recorder holds: each series as `name{k=v,...}` with its value.
    pub(super) fn series(
        snapshotter: &metrics_util::debugging::Snapshotter,
    ) -> Vec<(String, DebugValue)> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels: Vec<String> = key
                    .labels()
                    .map(|label| format!("{}={}", label.key(), label.value()))
                    .collect();
                (format!("{}{{{}}}", key.name(), labels.join(",")), value)
            })
            .collect()
    }

    pub(super) fn names(series: &[(String, DebugValue)]) -> Vec<&str> {
        series.iter().map(|(name, _)| name.as_str()).collect()
    }

    pub(super) const MUTEX: Labels = Labels {
        primitive: "mutex",
        use_label: None,
    };
}
