//! A writer for a tracing subscriber that keeps everything written, so tests can read the traces,
//! and a way to set that subscriber for one test while others run in the same process.

use std::io;
use std::sync::{Arc, Mutex, Once};

use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber, span};

/// Collects everything a tracing subscriber writes.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .expect("not poisoned")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
    }
}

/// Sets `subscriber` as this thread's default until the guard drops, as
/// `tracing::subscriber::set_default` does, so that it sees this test's events only. Also makes
/// sure, once per process, that another test's thread cannot turn this thread's events off:
/// tracing caches, per callsite, whether any subscriber wants it, and while a single thread's
/// subscriber exists, a callsite first reached on a thread without one is cached as wanted by
/// nobody, for every thread, until the next subscriber is set. A global subscriber that wants
/// nothing but asks again each time keeps every callsite undecided instead.
pub fn set_default(subscriber: impl Subscriber + Send + Sync + 'static) -> DefaultGuard {
    static UNDECIDED: Once = Once::new();
    UNDECIDED.call_once(|| {
        tracing::subscriber::set_global_default(Undecided)
            .expect("no other global subscriber in the tests");
    });
    tracing::subscriber::set_default(subscriber)
}

/// The global subscriber of [`set_default`]: records nothing, decides nothing for good.
struct Undecided;

impl Subscriber for Undecided {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}
