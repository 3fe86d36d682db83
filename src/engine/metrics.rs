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
    #[cfg_attr(
        not(feature = "metrics"),
        allow(
            dead_code,
            reason = "only `drop_at` ends a hold so, and only with the feature"
        )
    )]
    Dropped,
}

/// One hold, counted in `redmutex_held` from its start until it ends (at most once, whichever
/// path ends it; a hold nobody ended counts as dropped when the held record goes).
pub(crate) struct Hold {
    #[cfg(feature = "metrics")]
    labels: Labels,
    /// The handle the gauge went up by, so that it goes down by the same one whichever recorder
    /// is current where the hold ends (often a `Drop` on another thread).
    #[cfg(feature = "metrics")]
    gauge: GaugeHandle,
    /// `None` where no recorder was installed when the hold started: nothing to time it for.
    #[cfg(feature = "metrics")]
    started: Option<Instant>,
    #[cfg(feature = "metrics")]
    ended: bool,
}

impl Hold {
    #[inline]
    pub(crate) fn start(labels: &Labels) -> Hold {
        #[cfg(feature = "metrics")]
        {
            let current = kept::current();
            let register = || metrics::gauge!("redmutex_held", labels.alone().pairs());
            let gauge = GaugeHandle::new(current, labels, |series| &series.held, register);
            gauge.get().increment(1.0);
            Hold {
                labels: *labels,
                gauge,
                started: (current != kept::Current::Nothing).then(Instant::now),
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
            self.gauge.get().decrement(1.0);
            let Some(started) = self.started else {
                return true;
            };
            let current = kept::current();
            if current == kept::Current::Nothing {
                return true;
            }
            let labels = &self.labels;
            kept::histogram(
                kept::primitive(current, labels)
                    .and_then(|series| series.held_seconds.get(end as usize)),
                || {
                    let end = match end {
                        End::Unlocked => "unlocked",
                        End::Expired => "expired",
                        End::Lost => "lost",
                        End::Dropped => "dropped",
                    };
                    metrics::histogram!("redmutex_held_seconds", labels.with("end", end).pairs())
                },
                |histogram| histogram.record(Since(started)),
            );
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
        #[cfg(feature = "metrics")]
        {
            if self.ended {
                return;
            }
            // A hold started with no recorder is timed by nothing: no clock to read for it.
            let end = match self.started {
                Some(_) if Instant::now() >= valid_until => End::Expired,
                _ => End::Dropped,
            };
            self.end(end);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = valid_until;
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
        let current = kept::current();
        if current == kept::Current::Nothing {
            return;
        }
        kept::counter(
            kept::primitive(current, labels).and_then(|series| series.lost.get(reason as usize)),
            || {
                let reason = match reason {
                    Lost::Expired => "expired",
                    Lost::Taken => "taken",
                    Lost::KeepAliveFailed => "keep_alive_failed",
                    Lost::KeepAliveTimedOut => "keep_alive_timed_out",
                };
                metrics::counter!("redmutex_lost_total", labels.with("reason", reason).pairs())
            },
            |counter| counter.increment(1),
        );
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, reason);
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

/// A node series' handle, registered with the current recorder. For the first 16 nodes its key
/// is a `static` (the label values are literals): no label list to allocate, no hash to compute.
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

/// How a node's request ended (`redmutex_node_requests_total`'s `outcome`), in
/// `kept::NODE_REQUESTS`'s order.
#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
enum NodeOutcome {
    Ok,
    Timeout,
    Refused,
    Error,
}

/// Counts one request of node `node` that ended as `outcome`.
#[cfg(feature = "metrics")]
fn node_request(node: usize, outcome: NodeOutcome, kept: bool) {
    let cell = kept
        .then(|| kept::NODE_REQUESTS.get(node))
        .flatten()
        .and_then(|outcomes| outcomes.get(outcome as usize));
    kept::counter(
        cell,
        || match outcome {
            NodeOutcome::Ok => node_series!(requests, node, "ok"),
            NodeOutcome::Timeout => node_series!(requests, node, "timeout"),
            NodeOutcome::Refused => node_series!(requests, node, "refused"),
            NodeOutcome::Error => node_series!(requests, node, "error"),
        },
        |counter| counter.increment(1),
    );
}

/// The node series of one fan-out (`redmutex_node_requests_total` and `redmutex_node_seconds`):
/// which recorder its replies go to is learned once, when its requests go out, rather than at each
/// reply. A fan-out that starts with no recorder installed records none of its replies, and one
/// that starts with the global recorder current records them all there; with another recorder,
/// each reply registers its series with the recorder current when it comes in.
#[derive(Clone, Copy)]
pub(crate) struct NodeReplies {
    #[cfg(feature = "metrics")]
    current: kept::Current,
    #[cfg(feature = "metrics")]
    sent: Instant,
}

impl NodeReplies {
    /// A fan-out whose requests went out at `sent`.
    #[inline]
    pub(crate) fn sent(sent: Instant) -> NodeReplies {
        #[cfg(feature = "metrics")]
        {
            NodeReplies {
                current: kept::current(),
                sent,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = sent;
            NodeReplies {}
        }
    }

    /// Node `node` answered.
    #[inline]
    pub(crate) fn reply<T>(&self, node: usize, reply: &Result<T, NodeErrorKind>) {
        #[cfg(feature = "metrics")]
        {
            if self.current == kept::Current::Nothing {
                return;
            }
            let outcome = match reply {
                // An answer, whatever it says of the lock: the node is healthy.
                Ok(_)
                | Err(
                    NodeErrorKind::Taken
                    | NodeErrorKind::Missing
                    | NodeErrorKind::Repaired
                    | NodeErrorKind::InLine { .. }
                    | NodeErrorKind::LineAhead,
                ) => NodeOutcome::Ok,
                Err(NodeErrorKind::Timeout(_)) => NodeOutcome::Timeout,
                Err(kind) if kind.is_refusal() => NodeOutcome::Refused,
                Err(_) => NodeOutcome::Error,
            };
            let kept = self.current == kept::Current::Global;
            kept::histogram(
                kept.then(|| kept::NODE_SECONDS.get(node)).flatten(),
                || node_series!(seconds, node),
                |histogram| histogram.record(Since(self.sent)),
            );
            node_request(node, outcome, kept);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (node, reply);
    }

    /// Node `node` did not answer within the node timeout: a `timeout` in
    /// `redmutex_node_requests_total` (and no reply time).
    #[inline]
    pub(crate) fn timed_out(&self, node: usize) {
        #[cfg(feature = "metrics")]
        if self.current != kept::Current::Nothing {
            node_request(
                node,
                NodeOutcome::Timeout,
                self.current == kept::Current::Global,
            );
        }
        #[cfg(not(feature = "metrics"))]
        let _ = node;
    }
}

/// What one uncontended `lock()` + `unlock()` of a mutex records, in the order it records it:
/// the call starts, each node answers the acquire, the attempt is counted, the hold starts, the
/// call returns, each node answers the release, the hold ends. For `internals::record_cycle`.
#[cfg(feature = "metrics")]
pub(crate) fn record_cycle(nodes: usize, sent: Instant) {
    const LABELS: Labels = Labels {
        primitive: "mutex",
        use_label: None,
    };
    let acquired = Ok::<(), Error>(());
    let call = Acquiring::start(&LABELS);
    let replies = NodeReplies::sent(sent);
    for node in 0..nodes {
        replies.reply(node, &Ok::<(), NodeErrorKind>(()));
    }
    attempt(&LABELS, &acquired);
    let mut hold = Hold::start(&LABELS);
    call.returned(&acquired);
    let replies = NodeReplies::sent(sent);
    for node in 0..nodes {
        replies.reply(node, &Ok::<(), NodeErrorKind>(()));
    }
    hold.end(End::Unlocked);
}

/// Handles kept from one recording to the next, for the global recorder only.
///
/// Registering a series with a recorder (what `metrics::counter!` and its kin do on every call)
/// looks its key up in the recorder's registry, which costs far more than the recording itself; a
/// handle, once registered, records straight into its series. But a handle keeps recording into
/// the recorder it was registered with, and the facade names no recorder: a test sets a local
/// recorder for a while and drops it, and the next one may sit at the same address, so a handle
/// kept for "the recorder at this address" could record into a dropped one. The global recorder
/// is the one whose identity is safe: it is installed once, never dropped, never replaced, so
/// nothing else can ever take its address. Handles are kept for it alone, and only once it is
/// current: a primitive built before the application installs its recorder registers nothing
/// early, and a local recorder (set on the thread, current instead of the global) gets its
/// series registered at every recording, as without the cache.
///
/// The facade does not say which recorder is the global one, only which is current on this
/// thread (a local one, else the global one). A thread that never set a local recorder sees the
/// global one: the first time a recorder that could be the global one is current, a short-lived
/// thread looks (`probe`), once per process for the global recorder, and once per thread and
/// address for a local recorder while no global one is installed.
#[cfg(feature = "metrics")]
mod kept {
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use metrics::{Counter, Gauge, Histogram, Recorder};

    use super::Labels;

    /// The global recorder's address, once a probe found it installed (0 until then).
    static GLOBAL: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        /// The last recorder current on this thread that a probe found not to be the global one,
        /// so that a local recorder costs one probe, not one per recording.
        static NOT_GLOBAL: Cell<usize> = const { Cell::new(0) };
    }

    /// Where a recording on this thread goes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Current {
        /// Nowhere: no recorder is installed (the facade's no-op recorder is current), so the
        /// recording is skipped before anything is measured or registered.
        Nothing,
        /// The global recorder, through kept handles.
        Global,
        /// Another recorder (a local one, or one of no size): each recording registers its
        /// series with it.
        Local,
    }

    /// The recorder current on this thread, as far as the facade lets it be told apart.
    enum Seen {
        /// The facade's no-op recorder: none is installed.
        Noop,
        /// A recorder of some size, at this address (which no other recorder has while it lives).
        At(usize),
        /// Another recorder of no size. Values of no size may share any address, so its address
        /// says nothing of which one it is.
        NoSize,
    }

    /// Which recorder is current on this thread.
    #[inline]
    pub(super) fn current() -> Current {
        match seen() {
            Seen::Noop => Current::Nothing,
            Seen::At(address) if is_global(address) => Current::Global,
            Seen::At(_) | Seen::NoSize => Current::Local,
        }
    }

    fn seen() -> Seen {
        metrics::with_recorder(|recorder: &dyn Recorder| {
            let pointer: *const dyn Recorder = recorder;
            if size_of_val(recorder) > 0 {
                return Seen::At(pointer.cast::<()>() as usize);
            }
            // The no-op recorder is told apart from another recorder of no size by its vtable,
            // compared at one address. A vtable may be emitted more than once, so a no-op recorder
            // can fail to match: it is then taken for another recorder and its series registered
            // at each recording, which is slower, never wrong. The other way round cannot happen.
            let noop: *const dyn Recorder = &metrics::NoopRecorder;
            if std::ptr::eq(pointer, noop.with_addr(pointer.addr())) {
                Seen::Noop
            } else {
                Seen::NoSize
            }
        })
    }

    /// The address of the recorder current on this thread, if it has a size (see [`Seen`]).
    fn address() -> Option<usize> {
        match seen() {
            Seen::At(address) => Some(address),
            Seen::Noop | Seen::NoSize => None,
        }
    }

    /// Whether the recorder at `current`, current on this thread, is the global one.
    #[inline]
    fn is_global(current: usize) -> bool {
        let global = GLOBAL.load(Ordering::Relaxed);
        if global != 0 {
            return current == global;
        }
        if NOT_GLOBAL.with(Cell::get) == current {
            return false;
        }
        probe(current)
    }

    /// Asks a thread that has no local recorder which recorder it sees; keeps the answer if it is
    /// the global one (which never changes once installed).
    #[cold]
    fn probe(current: usize) -> bool {
        let global = std::thread::Builder::new()
            .name("redmutex-metrics".into())
            .spawn(address)
            .ok()
            .and_then(|probe| probe.join().ok())
            .flatten();
        if let Some(global) = global {
            GLOBAL.store(global, Ordering::Relaxed);
            if current == global {
                return true;
            }
        }
        // Not the global recorder, or none is installed yet (or no thread could start): asked
        // again only for another recorder, such as the global one once installed.
        NOT_GLOBAL.with(|cell| cell.set(current));
        false
    }

    /// The series of one label set: `None` unless the global recorder is `current`.
    #[inline]
    pub(super) fn primitive(current: Current, labels: &Labels) -> Option<&'static Primitive> {
        (current == Current::Global).then(|| Primitive::of(labels))
    }

    /// The handles of one primitive label set (kind and `use`), each registered on first use so
    /// that a series appears only once something happened to it; label sets are few (a kind
    /// times the static labels an application gives), and live as long as the global recorder.
    /// The arrays are looked up with `get`: an outcome given no slot (a variant added later)
    /// records without a kept handle rather than panic, which inside a `Drop` would abort.
    pub(super) struct Primitive {
        labels: Labels,
        /// By outcome: acquired, then `FAILURES`.
        pub attempts: [OnceLock<Counter>; 5],
        /// The same, then cancelled.
        pub acquire_seconds: [OnceLock<Histogram>; 6],
        /// By outcome: ok, then `FAILURES`.
        pub extensions: [OnceLock<Counter>; 5],
        /// By `End`.
        pub held_seconds: [OnceLock<Histogram>; 4],
        /// By `Lost`.
        pub lost: [OnceLock<Counter>; 4],
        pub held: OnceLock<Gauge>,
        pub waiting: OnceLock<Gauge>,
        next: OnceLock<&'static Primitive>,
    }

    /// The first label set seen; each links the next (a list read without a lock, only ever
    /// appended to).
    static PRIMITIVES: OnceLock<&'static Primitive> = OnceLock::new();

    impl Primitive {
        fn of(labels: &Labels) -> &'static Primitive {
            let mut link = &PRIMITIVES;
            loop {
                let series = link.get_or_init(|| Box::leak(Box::new(Primitive::new(*labels))));
                if series.labels == *labels {
                    return series;
                }
                link = &series.next;
            }
        }

        fn new(labels: Labels) -> Primitive {
            Primitive {
                labels,
                attempts: Default::default(),
                acquire_seconds: Default::default(),
                extensions: Default::default(),
                held_seconds: Default::default(),
                lost: Default::default(),
                held: OnceLock::new(),
                waiting: OnceLock::new(),
                next: OnceLock::new(),
            }
        }
    }

    /// Nodes past the 16th are counted without a kept handle.
    const NODES: usize = 16;

    /// By node, then by `NodeOutcome`.
    pub(super) static NODE_REQUESTS: [[OnceLock<Counter>; 4]; NODES] =
        [const { [const { OnceLock::new() }; 4] }; NODES];
    pub(super) static NODE_SECONDS: [OnceLock<Histogram>; NODES] =
        [const { OnceLock::new() }; NODES];
    /// By `Handoff`.
    pub(super) static HANDOFFS: [OnceLock<Counter>; 2] = [const { OnceLock::new() }; 2];

    /// Records through `kept`'s handle (registered by `register` the first time), or, without
    /// one, through a handle `register` registers with the current recorder now.
    #[inline]
    pub(super) fn counter(
        kept: Option<&OnceLock<Counter>>,
        register: impl FnOnce() -> Counter,
        record: impl FnOnce(&Counter),
    ) {
        match kept {
            Some(cell) => record(cell.get_or_init(register)),
            None => record(&register()),
        }
    }

    /// [`counter`], for a histogram.
    #[inline]
    pub(super) fn histogram(
        kept: Option<&OnceLock<Histogram>>,
        register: impl FnOnce() -> Histogram,
        record: impl FnOnce(&Histogram),
    ) {
        match kept {
            Some(cell) => record(cell.get_or_init(register)),
            None => record(&register()),
        }
    }
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
        let mut series = series(&snapshotter);
        series.sort_by(|a, b| a.0.cmp(&b.0));
        series
    }

    /// What `snapshotter`'s recorder holds: each series as `name{k=v,...}` with its value.
    fn series(snapshotter: &metrics_util::debugging::Snapshotter) -> Vec<(String, DebugValue)> {
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
            let replies = NodeReplies::sent(started);
            replies.reply(0, &Ok::<u64, _>(1));
            replies.reply(1, &Err::<u64, _>(NodeErrorKind::Taken));
            replies.reply(2, &Err::<u64, _>(NodeErrorKind::CrossSlot));
            replies.reply(
                20,
                &Err::<u64, _>(NodeErrorKind::UnexpectedReply("x".into())),
            );
            replies.timed_out(3);
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
        let reply = || NodeReplies::sent(Instant::now()).reply(0, &Ok::<u64, _>(1));
        let first = recorded(reply);
        let second = recorded(reply);
        for series in [first, second] {
            let ok = series
                .iter()
                .find(|(name, _)| name == "redmutex_node_requests_total{node=0,outcome=ok}");
            assert_eq!(ok.map(|(_, value)| value), Some(&DebugValue::Counter(1)));
        }
    }

    /// A hold's gauge goes down in the recorder it went up in, whichever recorder is current
    /// where the hold ends (a lock dropped on another thread, or outside the caller's recorder).
    #[test]
    fn a_hold_ends_in_the_recorder_it_started_in() {
        let labels = Labels {
            primitive: "mutex",
            use_label: Some("moved"),
        };
        let mut hold = None;
        let started = recorded(|| hold = Some(Hold::start(&labels)));
        let mut hold = hold.expect("started");
        let elsewhere = recorded(|| {
            hold.end(End::Unlocked);
        });
        let gauge = |series: &[(String, DebugValue)]| {
            series.iter().find_map(|(name, value)| match value {
                DebugValue::Gauge(gauge) if name == "redmutex_held{primitive=mutex,use=moved}" => {
                    Some(gauge.into_inner())
                }
                _ => None,
            })
        };
        assert_eq!(gauge(&started), Some(1.0), "the start counts");
        assert_eq!(
            gauge(&elsewhere),
            None,
            "the end does not count where it did not start"
        );
    }

    /// Handles are kept for the global recorder alone: what is recorded before it is installed
    /// registers nothing with it, what is recorded after goes into it, and a local recorder set
    /// on the thread meanwhile gets its own series rather than the global one's kept handles.
    /// The only test of this process that installs a global recorder; the others record into
    /// local ones, which take precedence on their threads.
    #[test]
    fn kept_handles_record_into_the_global_recorder_only() {
        let labels = Labels {
            primitive: "semaphore",
            use_label: Some("kept"),
        };
        let acquired = "redmutex_attempts_total{primitive=semaphore,outcome=acquired,use=kept}";
        let timed_out = "redmutex_node_requests_total{node=15,outcome=timeout}";
        let count = |series: &[(String, DebugValue)], name: &str| {
            series.iter().find_map(|(n, value)| match value {
                DebugValue::Counter(count) if n == name => Some(*count),
                _ => None,
            })
        };
        let record = || {
            attempt(&labels, &Ok::<(), Error>(()));
            NodeReplies::sent(Instant::now()).timed_out(15);
        };
        // Before a global recorder: into no recorder, then into a local one.
        record();
        let before = recorded(record);
        assert_eq!(count(&before, acquired), Some(1));

        let global = DebuggingRecorder::new();
        let snapshotter = global.snapshotter();
        metrics::set_global_recorder(global).expect("no other test installs one");
        record();
        record();
        let local = recorded(record);
        record();
        let after = recorded(record);
        for series in [local, after] {
            assert_eq!(count(&series, acquired), Some(1), "the local recorder's");
            assert_eq!(count(&series, timed_out), Some(1), "the local recorder's");
        }
        let global = series(&snapshotter);
        assert_eq!(count(&global, acquired), Some(3), "the global recorder's");
        // Other tests of this process may record node series into it too.
        let timeouts = count(&global, timed_out);
        assert!(timeouts >= Some(3), "the global recorder's: {timeouts:?}");
    }

    /// A recorder of no size other than the facade's no-op one (metrics' own examples print from
    /// one) is recorded into like any other: only the no-op recorder means none is installed.
    #[test]
    fn a_recorder_of_no_size_is_recorded_into() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        use metrics::{
            Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
            Unit,
        };

        static COUNTED: AtomicU64 = AtomicU64::new(0);
        struct Counting;
        impl CounterFn for Counting {
            fn increment(&self, value: u64) {
                COUNTED.fetch_add(value, Ordering::SeqCst);
            }
            fn absolute(&self, _: u64) {}
        }
        struct NoSize;
        impl Recorder for NoSize {
            fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
                Counter::from_arc(Arc::new(Counting))
            }
            fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
                Gauge::noop()
            }
            fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
                Histogram::noop()
            }
        }

        assert_eq!(size_of::<NoSize>(), 0);
        metrics::with_local_recorder(&NoSize, || {
            attempt(&MUTEX, &Ok::<(), Error>(()));
            NodeReplies::sent(Instant::now()).reply(0, &Ok::<(), NodeErrorKind>(()));
        });
        assert_eq!(COUNTED.load(Ordering::SeqCst), 2, "an attempt and a reply");
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
