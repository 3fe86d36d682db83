//! Running the command while the lock (or a leadership) holds, and ending it when it does not.
//!
//! The command never runs past the lease's validity (up to signal delivery): this loop watches
//! `valid_until` itself, re-reading it after every renewal, rather than trusting only the
//! renewals' report. Once the lock is lost the command's process group gets SIGTERM at once
//! and SIGKILL at the earlier of the grace period's end and the validity's end (a few
//! milliseconds before it, see [`KILL_MARGIN`]).

use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use redmutex::{KeepAlive, KeepAliveEnd, Leadership, Lock};
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::sleep_until;

use crate::exit::say;

/// SIGKILL goes out this long before the validity ends, so that delivery and the process's
/// teardown are done by then, and a timer that fires a little late is still in time.
const KILL_MARGIN: Duration = Duration::from_millis(10);

/// How the command ended.
pub enum Outcome {
    /// It exited while the lock held (perhaps after a signal passed on to it).
    Exited(ExitStatus),
    /// The lock was lost, and the command was terminated.
    Lost,
}

/// The signals redmutex passes on to the command rather than die of (leaving the command to run
/// on without the lock).
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    /// The last signal received, until taken.
    received: Option<Signal>,
}

impl Signals {
    /// Takes over SIGINT, SIGTERM, SIGHUP and SIGQUIT for this process.
    pub fn install() -> io::Result<Signals> {
        let kinds = [
            (Signal::INT, SignalKind::interrupt()),
            (Signal::TERM, SignalKind::terminate()),
            (Signal::HUP, SignalKind::hangup()),
            (Signal::QUIT, SignalKind::quit()),
        ];
        let mut streams = Vec::new();
        for (number, kind) in kinds {
            streams.push((number, signal(kind)?));
        }
        Ok(Signals {
            streams,
            received: None,
        })
    }

    /// The next signal received.
    ///
    /// Cancel safe: a signal that arrives meanwhile is kept for the next call.
    pub async fn recv(&mut self) -> Signal {
        let signal = std::future::poll_fn(|cx| {
            for (number, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*number);
                }
            }
            std::task::Poll::Pending
        })
        .await;
        self.received = Some(signal);
        signal
    }

    /// The last signal received since the last call, if any: `elect --restart` stops campaigning
    /// once it passed one on.
    pub fn take_received(&mut self) -> Option<Signal> {
        self.received.take()
    }
}

/// What a command runs under, renewed in the background: `run`'s lock with its keep-alive, or
/// `elect`'s leadership.
pub trait Lease {
    /// The lock's or the election's name, for messages.
    fn name(&self) -> &str;
    /// Until when the command may run, as of the last renewal.
    fn valid_until(&self) -> Instant;
    /// Resolves, saying why, when the renewals stopped; never after [`stop`](Lease::stop).
    fn ended(&self) -> impl Future<Output = String>;
    /// Stops renewing: the lease is given up.
    fn stop(&mut self);
}

/// A lock extended by a keep-alive, for `run`.
pub struct KeptLock<'a> {
    lock: &'a Lock,
    keep: Option<KeepAlive>,
}

impl<'a> KeptLock<'a> {
    /// Starts extending `lock` every `interval`.
    pub fn new(lock: &'a Lock, interval: Duration) -> Self {
        KeptLock {
            lock,
            keep: Some(lock.keep_alive(interval)),
        }
    }
}

impl Lease for KeptLock<'_> {
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    async fn ended(&self) -> String {
        match &self.keep {
            Some(keep) => describe(&keep.ended().await),
            None => std::future::pending().await,
        }
    }

    fn stop(&mut self) {
        self.keep = None;
    }
}

/// A leadership, for `elect`: it renews itself while it lives.
pub struct Leading<'a> {
    pub name: &'a str,
    pub leadership: &'a Leadership,
}

impl Lease for Leading<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn valid_until(&self) -> Instant {
        self.leadership.valid_until()
    }

    async fn ended(&self) -> String {
        format!("the leadership ended: {:?}", self.leadership.lost().await)
    }

    /// A leadership renews until it is dropped; once it is lost, renewals fail anyway.
    fn stop(&mut self) {}
}

/// Waits for `child` to exit while `lease` is renewed, and ends it when the lease is lost.
/// Signals received are passed on to the child's process group.
pub async fn supervise(
    mut child: Child,
    lease: &mut impl Lease,
    grace: Duration,
    signals: &mut Signals,
) -> io::Result<Outcome> {
    // The child leads its own process group (spawned with `process_group(0)`).
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    // Once lost: when SIGKILL is due, and whether it went out.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        let valid_until = last_moment(lease);
        let lost = kill_at.is_some();
        tokio::select! {
            biased;
            status = child.wait() => {
                let status = status?;
                if lost {
                    // Whatever the command left running in its group goes too: the lock is gone.
                    send(group, Signal::KILL);
                    return Ok(Outcome::Lost);
                }
                return Ok(Outcome::Exited(status));
            }
            () = sleep_until(kill_at.unwrap_or(valid_until).into()), if lost && !killed => {
                send(group, Signal::KILL);
                killed = true;
            }
            () = sleep_until(valid_until.into()), if !lost => {
                // An extension may have moved the validity while this timer ran.
                if last_moment(lease) <= Instant::now() {
                    lease.stop();
                    kill_at = Some(lose(lease, group, grace, "its validity ran out"));
                }
            }
            why = lease.ended(), if !lost => {
                lease.stop();
                kill_at = Some(lose(lease, group, grace, &why));
            }
            signal = signals.recv() => {
                send(group, signal);
            }
        }
    }
}

/// The last moment the command may still run: just before the lease's validity ends.
fn last_moment(lease: &impl Lease) -> Instant {
    let valid_until = lease.valid_until();
    valid_until.checked_sub(KILL_MARGIN).unwrap_or(valid_until)
}

/// The lease is lost: SIGTERM now; returns when SIGKILL is due.
fn lose(lease: &impl Lease, group: Option<Pid>, grace: Duration, why: &str) -> Instant {
    send(group, Signal::TERM);
    let now = Instant::now();
    // A grace too long for the clock (`--grace` takes up to billions of hours) is as long as the
    // lock allows, not none at all.
    let last = last_moment(lease);
    let kill_at = now.checked_add(grace).map_or(last, |at| at.min(last));
    say(format!(
        "lost the lock {} ({why}): sent SIGTERM to the command, SIGKILL follows in {:?} at the \
         latest",
        lease.name(),
        kill_at.saturating_duration_since(now)
    ));
    kill_at
}

fn describe(end: &KeepAliveEnd) -> String {
    match end {
        KeepAliveEnd::Lost(error) => format!("an extension failed: {error}"),
        KeepAliveEnd::Expired => "its validity ran out before an extension succeeded".to_owned(),
        KeepAliveEnd::Unlocked => "it was unlocked".to_owned(),
        other => format!("the keep-alive stopped: {other:?}"),
    }
}

/// Sends `signal` to the process group; one that is gone already is no error.
fn send(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = kill_process_group(group, signal);
    }
}
