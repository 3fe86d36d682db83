//! Handles kept from one recording to the next, for the global recorder only.
//!
//! Registering a series with a recorder (what `metrics::counter!` and its kin do on every call)
//! looks its key up in the recorder's registry, which costs far more than the recording itself; a
//! handle, once registered, records straight into its series. But a handle keeps recording into
//! the recorder it was registered with, and the facade names no recorder: a test sets a local
//! recorder for a while and drops it, and the next one may sit at the same address, so a handle
//! kept for "the recorder at this address" could record into a dropped one. The global recorder
//! is the one whose identity is safe: it is installed once, never dropped, never replaced, so
//! nothing else can ever take its address. Handles are kept for it alone, and only once it is
//! current: a primitive built before the application installs its recorder registers nothing
//! early, and a local recorder (set on the thread, current instead of the global) gets its
//! series registered at every recording, as without the cache.
//!
//! The facade does not say which recorder is the global one, only which is current on this
//! thread (a local one, else the global one). A thread that never set a local recorder sees the
//! global one: the first time a recorder that could be the global one is current, a short-lived
//! thread looks (`probe`), once per process for the global recorder, and once per thread and
//! address for a local recorder while no global one is installed.

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
pub(super) static NODE_SECONDS: [OnceLock<Histogram>; NODES] = [const { OnceLock::new() }; NODES];
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::engine::metrics::testing::{MUTEX, recorded, series};
    use crate::engine::metrics::{Labels, NodeReplies, attempt};
    use crate::error::{Error, NodeErrorKind};

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
}
