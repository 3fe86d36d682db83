//! How redmutex's own connection to a node has been answering, and the probe that tells a dead
//! connection from a stalled node (see `reconnect` for the connection itself, and for what the
//! probe does on a cluster member).
//!
//! **Silence.** A half-open connection (the node's host vanished, a middlebox dropped the flow)
//! shows no error: requests go out and nothing comes back, so every call costs its timeout until
//! the operating system gives up, often many minutes later. A connection is suspect once
//! [`SILENT_CALLS`] requests went out with no reply since, over at least [`SILENT_FOR`]. Then a
//! probe (one at a time, at most one per [`PROBE_INTERVAL`]) sends `PING` on the suspect
//! connection and opens a fresh one beside it. The fresh one replaces the suspect only if it is
//! made and answers its own `PING` while the suspect's `PING` stays unanswered, for [`PROBE_WAIT`]
//! from the probe's start and at least [`PROBE_GRACE`] after the fresh one answered.
//!
//! Replacing needs that proof: see `reconnect` (*Why replacing needs that proof*).

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use redis::{RedisResult, Value};

use super::member::MemberClient;
use super::reconnect::{Link, Live, Reconnecting, open};
use super::script::Script;

/// A connection is suspect after this many requests without a reply...
const SILENT_CALLS: u32 = 3;
/// ...over at least this long since the first of them.
const SILENT_FOR: Duration = Duration::from_secs(1);
/// How long the suspect connection's PING has to answer, from the start of the probe.
const PROBE_WAIT: Duration = Duration::from_secs(2);
/// At least this long after the fresh connection answered.
const PROBE_GRACE: Duration = Duration::from_millis(500);
/// Pause between two probes of one connection.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What a probe found.
enum Verdict {
    /// The suspect connection answered its PING (or failed outright).
    Answered(RedisResult<Value>),
    /// It stayed silent while a fresh connection answered.
    Silent(Live),
    /// No fresh connection could be made: the node itself does not answer (paused, down, cut off),
    /// so replacing the connection would gain nothing.
    Unknown,
}

/// Tells a dead connection from a stalled node; see the module docs. `moved` is what the
/// connection's owner knows of redirections (see `reconnect::open`).
pub(super) async fn probe(
    this: Weak<Reconnecting>,
    client: MemberClient,
    scripts: &'static [Script],
    moved: bool,
    old: Live,
) {
    // Ends the probe however the task ends, also when its runtime shuts down.
    let _ending = EndProbe(Arc::clone(&old.health));
    let started = tokio::time::Instant::now();
    let mut answer = pin!(ping(&old.link));
    let fresh = open(&client, scripts, moved);
    let verdict = tokio::select! {
        answered = &mut answer => Verdict::Answered(answered),
        fresh = fresh => match fresh {
            Ok(fresh) => {
                let until = (started + PROBE_WAIT).max(tokio::time::Instant::now() + PROBE_GRACE);
                match tokio::time::timeout_at(until, &mut answer).await {
                    Ok(answered) => Verdict::Answered(answered),
                    Err(_) => Verdict::Silent(fresh),
                }
            }
            _ => Verdict::Unknown,
        },
    };
    if let Some(this) = this.upgrade() {
        match verdict {
            Verdict::Answered(Err(error)) if error.is_unrecoverable_error() => {
                this.lost(&old, &error);
            }
            Verdict::Answered(_) => old.health.answered(),
            Verdict::Silent(fresh) => this.replace(&old, fresh),
            Verdict::Unknown => {}
        }
    }
}

/// `PING` on a connection: to its node, or to every master of its cluster, each on the connection
/// its requests go through, so that an answer means every request queued before it has run.
fn ping(link: &Link) -> BoxFuture<'static, RedisResult<Value>> {
    match link {
        Link::Node(connection) => {
            let mut connection = connection.clone();
            async move { connection.send_packed_command(&redis::cmd("PING")).await }.boxed()
        }
        #[cfg(feature = "cluster")]
        Link::Cluster(connection) => super::cluster::ping(connection.clone()).boxed(),
    }
}

struct EndProbe(Arc<Health>);

impl Drop for EndProbe {
    fn drop(&mut self) {
        self.0.end_probe(nanos_now());
    }
}

/// How a connection has been answering: requests sent since its last reply, and since when.
#[derive(Default)]
pub(super) struct Health {
    unanswered: AtomicU32,
    /// When the first of the unanswered requests went out, in nanoseconds since [`EPOCH`].
    silent_since: AtomicU64,
    probing: AtomicBool,
    /// No probe before this, in nanoseconds since [`EPOCH`].
    next_probe: AtomicU64,
}

/// The origin of the instants kept in atomics.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

pub(super) fn nanos_now() -> u64 {
    u64::try_from(EPOCH.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Health {
    /// Records a request going out; `true` if the connection is now suspect. `now` reads the
    /// clock (nanoseconds since [`EPOCH`]), only when needed. Races between concurrent calls can
    /// only blur the count a little, and a probe decides nothing on its own.
    pub(super) fn sent(&self, now: impl FnOnce() -> u64) -> bool {
        let before = self.unanswered.fetch_add(1, Ordering::Relaxed);
        if before == 0 {
            self.silent_since.store(now(), Ordering::Relaxed);
            return false;
        }
        before + 1 >= SILENT_CALLS
            && now().saturating_sub(self.silent_since.load(Ordering::Relaxed)) >= nanos(SILENT_FOR)
    }

    pub(super) fn answered(&self) {
        self.unanswered.store(0, Ordering::Relaxed);
    }

    /// Whether this caller may start a probe at `now`: none runs, and the last ended long enough
    /// ago.
    pub(super) fn start_probe(&self, now: u64) -> bool {
        now >= self.next_probe.load(Ordering::Relaxed)
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    fn end_probe(&self, now: u64) {
        let next = now.saturating_add(nanos(PROBE_INTERVAL));
        self.next_probe.store(next, Ordering::Relaxed);
        self.probing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_connection_is_suspect_after_a_run_of_silent_calls_only() {
        let health = Health::default();
        let start = 10 * SECOND;
        let at = |t: u64| move || t;
        assert!(!health.sent(at(start)));
        assert!(!health.sent(at(start + SECOND / 2)));
        assert!(
            !health.sent(at(start + SECOND / 2)),
            "three calls, but not silent long"
        );
        assert!(health.sent(at(start + nanos(SILENT_FOR))));
        health.answered();
        let later = start + 5 * SECOND;
        assert!(!health.sent(at(later)), "a reply ends the run");
        assert!(!health.sent(at(later + 2 * SECOND)), "two calls are no run");
        assert!(health.sent(at(later + 2 * SECOND)));
    }

    #[test]
    fn one_probe_at_a_time_and_a_pause_between() {
        let health = Health::default();
        let now = 10 * SECOND;
        assert!(health.start_probe(now));
        assert!(!health.start_probe(now), "one runs");
        health.end_probe(now);
        assert!(
            !health.start_probe(now + SECOND / 2),
            "too soon after the last"
        );
        assert!(health.start_probe(now + nanos(PROBE_INTERVAL)));
    }
}
