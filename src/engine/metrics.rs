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

use std::time::Instant;

use crate::error::{Error, NodeErrorKind};

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

/// The outcome label of a failed attempt, acquire or extend.
#[cfg(feature = "metrics")]
fn error_outcome(error: &Error) -> &'static str {
    match error {
        Error::Taken { .. } => "taken",
        Error::NoQuorum { .. } => "no_quorum",
        Error::Expired => "expired",
        _ => "error",
    }
}

/// One attempt to acquire ended (`redmutex_attempts_total`).
#[inline]
pub(crate) fn attempt<T>(labels: &Labels, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    {
        let outcome = outcome.as_ref().map_or_else(error_outcome, |_| "acquired");
        metrics::counter!(
            "redmutex_attempts_total",
            labels.with("outcome", outcome).pairs()
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome);
}

/// A `lock()`, `read()` or `acquire()` call that began at `started` returned
/// (`redmutex_acquire_seconds`).
#[inline]
pub(crate) fn acquired<T>(labels: &Labels, started: Instant, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    {
        let outcome = outcome.as_ref().map_or_else(error_outcome, |_| "acquired");
        metrics::histogram!(
            "redmutex_acquire_seconds",
            labels.with("outcome", outcome).pairs()
        )
        .record(started.elapsed());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, started, outcome);
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
        let mode = match mode {
            Handoff::Wake => "wake",
            Handoff::Fair => "fair",
        };
        metrics::counter!("redmutex_handoffs_total", "mode" => mode).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = mode;
}

/// A call counted in `redmutex_waiting` while this lives: dropped when the call returns or is
/// cancelled, so the gauge cannot drift.
pub(crate) struct Waiter {
    #[cfg(feature = "metrics")]
    gauge: metrics::Gauge,
}

impl Waiter {
    #[inline]
    pub(crate) fn enter(labels: &Labels) -> Waiter {
        #[cfg(feature = "metrics")]
        {
            let gauge = metrics::gauge!("redmutex_waiting", labels.alone().pairs());
            gauge.increment(1.0);
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
        self.gauge.decrement(1.0);
    }
}

/// How a hold ended (`redmutex_held_seconds`'s `end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// `unlock()` released it.
    Unlocked,
    /// Its validity ran out while held: found gone by `unlock()`, or dropped after it.
    Expired,
    /// An extend or a keep-alive found it gone, taken, or could not keep it.
    Lost,
    /// The last handle was dropped without `unlock()`, while still valid.
    Dropped,
}

/// One hold, counted in `redmutex_held` from its start until it ends (at most once, whichever
/// path ends it; a hold nobody ended counts as dropped when the held record goes).
pub(crate) struct Hold {
    #[cfg(feature = "metrics")]
    labels: Labels,
    #[cfg(feature = "metrics")]
    started: Instant,
    #[cfg(feature = "metrics")]
    ended: bool,
}

impl Hold {
    #[inline]
    pub(crate) fn start(labels: &Labels) -> Hold {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!("redmutex_held", labels.alone().pairs()).increment(1.0);
            Hold {
                labels: *labels,
                started: Instant::now(),
                ended: false,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Hold {}
        }
    }

    /// Ends the hold; false if it had ended already.
    #[inline]
    pub(crate) fn end(&mut self, end: End) -> bool {
        #[cfg(feature = "metrics")]
        {
            if self.ended {
                return false;
            }
            self.ended = true;
            let labels = &self.labels;
            metrics::gauge!("redmutex_held", labels.alone().pairs()).decrement(1.0);
            let end = match end {
                End::Unlocked => "unlocked",
                End::Expired => "expired",
                End::Lost => "lost",
                End::Dropped => "dropped",
            };
            metrics::histogram!("redmutex_held_seconds", labels.with("end", end).pairs())
                .record(self.started.elapsed());
            true
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = end;
            true
        }
    }

    /// Ends a hold whose last handle goes: dropped while valid, expired after `valid_until`.
    #[inline]
    pub(crate) fn drop_at(&mut self, valid_until: Instant) {
        let end = if Instant::now() < valid_until {
            End::Dropped
        } else {
            End::Expired
        };
        self.end(end);
    }
}

/// Why a held lock was lost (`redmutex_lost_total`'s `reason`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lost {
    /// An extend found the key gone.
    Expired,
    /// An extend found another owner's value.
    Taken,
    /// A keep-alive's extend failed otherwise (no quorum, errors).
    KeepAliveFailed,
    /// A keep-alive's extends did not succeed before the validity ran out.
    KeepAliveTimedOut,
}

/// A lock lost while held; `hold` ends as lost, and the loss counts once however many paths
/// report it.
#[inline]
pub(crate) fn lost(labels: &Labels, hold: &mut Hold, reason: Lost) {
    if !hold.end(End::Lost) {
        return;
    }
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            Lost::Expired => "expired",
            Lost::Taken => "taken",
            Lost::KeepAliveFailed => "keep_alive_failed",
            Lost::KeepAliveTimedOut => "keep_alive_timed_out",
        };
        metrics::counter!("redmutex_lost_total", labels.with("reason", reason).pairs())
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, reason);
}

/// An `extend()` (the caller's or a keep-alive's) ended (`redmutex_extensions_total`).
#[inline]
pub(crate) fn extension<T>(labels: &Labels, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    {
        let outcome = outcome.as_ref().map_or_else(error_outcome, |_| "ok");
        metrics::counter!(
            "redmutex_extensions_total",
            labels.with("outcome", outcome).pairs()
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome);
}

/// A node series' handle. For the first 16 nodes its key is a `static` (the label values are
/// literals), so recording builds no key: no label list to allocate, no hash to compute; a
/// recording per node reply is most of what redmutex records.
#[cfg(feature = "metrics")]
macro_rules! node_series {
    (requests, $node:expr, $outcome:literal) => {
        node_series!(@requests $node, $outcome; NODES)
    };
    (seconds, $node:expr) => {
        node_series!(@seconds $node; NODES)
    };
    (@$which:ident $node:expr $(, $outcome:literal)?; NODES) => {
        node_series!(@$which $node $(, $outcome)?;
            0 "0" 1 "1" 2 "2" 3 "3" 4 "4" 5 "5" 6 "6" 7 "7"
            8 "8" 9 "9" 10 "10" 11 "11" 12 "12" 13 "13" 14 "14" 15 "15")
    };
    (@requests $node:expr, $outcome:literal; $($n:literal $s:literal)*) => {
        match $node {
            $($n => metrics::counter!(
                "redmutex_node_requests_total", "node" => $s, "outcome" => $outcome
            ),)*
            n => metrics::counter!(
                "redmutex_node_requests_total", "node" => n.to_string(), "outcome" => $outcome
            ),
        }
    };
    (@seconds $node:expr; $($n:literal $s:literal)*) => {
        match $node {
            $($n => metrics::histogram!("redmutex_node_seconds", "node" => $s),)*
            n => metrics::histogram!("redmutex_node_seconds", "node" => n.to_string()),
        }
    };
}

/// Node `node` answered a request sent at `started` (`redmutex_node_requests_total` and
/// `redmutex_node_seconds`).
#[inline]
pub(crate) fn node_reply<T>(node: usize, reply: &Result<T, NodeErrorKind>, started: Instant) {
    #[cfg(feature = "metrics")]
    {
        let requests = match reply {
            // An answer, whatever it says of the lock: the node is healthy.
            Ok(_)
            | Err(
                NodeErrorKind::Taken
                | NodeErrorKind::Missing
                | NodeErrorKind::InLine { .. }
                | NodeErrorKind::LineAhead,
            ) => node_series!(requests, node, "ok"),
            Err(NodeErrorKind::Timeout(_)) => {
                node_series!(requests, node, "timeout")
            }
            Err(kind) if kind.is_refusal() => {
                node_series!(requests, node, "refused")
            }
            Err(_) => {
                node_series!(requests, node, "error")
            }
        };
        node_series!(seconds, node).record(started.elapsed());
        requests.increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, reply, started);
}

/// Node `node` did not answer within the node timeout: a `timeout` in
/// `redmutex_node_requests_total` (and no reply time).
#[inline]
pub(crate) fn node_timed_out(node: usize) {
    #[cfg(feature = "metrics")]
    node_series!(requests, node, "timeout").increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = node;
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// What `record` recorded: each series as `name{k=v,...}` with its value.
    fn recorded(record: impl FnOnce()) -> Vec<(String, DebugValue)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record);
        let mut series: Vec<_> = snapshotter
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
            .collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        series
    }

    fn names(series: &[(String, DebugValue)]) -> Vec<&str> {
        series.iter().map(|(name, _)| name.as_str()).collect()
    }

    const MUTEX: Labels = Labels {
        primitive: "mutex",
        use_label: None,
    };

    #[test]
    fn a_node_that_answers_anything_is_ok_and_a_refusal_is_not_an_error() {
        let started = Instant::now();
        let series = recorded(|| {
            node_reply(0, &Ok::<u64, _>(1), started);
            node_reply(1, &Err::<u64, _>(NodeErrorKind::Taken), started);
            node_reply(2, &Err::<u64, _>(NodeErrorKind::CrossSlot), started);
            node_reply(
                20,
                &Err::<u64, _>(NodeErrorKind::UnexpectedReply("x".into())),
                started,
            );
            node_timed_out(3);
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_node_requests_total{node=0,outcome=ok}",
                "redmutex_node_requests_total{node=1,outcome=ok}",
                "redmutex_node_requests_total{node=2,outcome=refused}",
                "redmutex_node_requests_total{node=20,outcome=error}",
                "redmutex_node_requests_total{node=3,outcome=timeout}",
                "redmutex_node_seconds{node=0}",
                "redmutex_node_seconds{node=1}",
                "redmutex_node_seconds{node=20}",
                "redmutex_node_seconds{node=2}",
            ]
        );
    }

    /// Two recorders one after the other on one thread, which may share an address: each gets
    /// its own recordings (handles kept across recordings, keyed by the recorder's address, fail
    /// this).
    #[test]
    fn node_series_follow_the_recorder() {
        let first = recorded(|| node_reply(0, &Ok::<u64, _>(1), Instant::now()));
        let second = recorded(|| node_reply(0, &Ok::<u64, _>(1), Instant::now()));
        for series in [first, second] {
            let ok = series
                .iter()
                .find(|(name, _)| name == "redmutex_node_requests_total{node=0,outcome=ok}");
            assert_eq!(ok.map(|(_, value)| value), Some(&DebugValue::Counter(1)));
        }
    }

    #[test]
    fn a_hold_ends_once_whichever_path_ends_it() {
        let series = recorded(|| {
            let labels = Labels {
                primitive: "write",
                use_label: Some("catalog"),
            };
            let mut hold = Hold::start(&labels);
            lost(&labels, &mut hold, Lost::Taken);
            lost(&labels, &mut hold, Lost::KeepAliveFailed);
            assert!(!hold.end(End::Unlocked));
            hold.drop_at(Instant::now());
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_held_seconds{primitive=write,end=lost,use=catalog}",
                "redmutex_held{primitive=write,use=catalog}",
                "redmutex_lost_total{primitive=write,reason=taken,use=catalog}",
            ]
        );
        assert_eq!(series[1].1, DebugValue::Gauge(0.0.into()));
        assert_eq!(series[2].1, DebugValue::Counter(1));
    }

    #[test]
    fn a_hold_dropped_after_its_validity_ended_expired() {
        let series = recorded(|| {
            let mut valid = Hold::start(&MUTEX);
            valid.drop_at(Instant::now() + Duration::from_secs(60));
            let mut late = Hold::start(&MUTEX);
            late.drop_at(Instant::now());
        });
        assert_eq!(
            names(&series),
            [
                "redmutex_held_seconds{primitive=mutex,end=dropped}",
                "redmutex_held_seconds{primitive=mutex,end=expired}",
                "redmutex_held{primitive=mutex}",
            ]
        );
    }

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
