//! Running the command while the lock (or a leadership) holds, and ending it when it does not.
//!
//! COMMAND runs under the enforcer ([`crate::enforcer`]), a process of its own that ends
//! COMMAND's tree before the lease's validity ends even while this one is stopped or after it
//! died. This loop keeps the enforcer told: the validity after every renewal, a loss the moment
//! it is known (an extension failed, or the validity ran out: this loop watches `valid_until`
//! itself, rather than trusting only the renewals' report), signals to pass on, and Ctrl-Z.
//! Once the lease is lost, COMMAND's process group gets SIGTERM at once and SIGKILL at the
//! earlier of the grace period's end and the validity's end (a few milliseconds before it, see
//! [`KILL_MARGIN`]).

use std::cell::Cell;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use redmutex::{Error, KeepAlive, KeepAliveEnd, Leadership, Lock, Mutex, NodeAnswer, NodeError};
use rustix::process::{Signal, getpid, kill_process};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{MissedTickBehavior, sleep_until};

use crate::clock::Mono;
use crate::duration::shown;
use crate::exit::say;
use crate::guard::Guard;
use crate::members::Members;
pub use crate::schedule::KILL_MARGIN;
use crate::wire::{Cut, Order, Report};

/// How the command ended.
pub enum Outcome {
    /// It exited while the lock held (perhaps after a signal passed on to it).
    Exited(ExitStatus),
    /// The lock was lost, and the command was terminated.
    Lost,
    /// The enforcer is gone (this says how), and the command was killed.
    EnforcerGone(String),
}

/// A signal received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// To be passed on to COMMAND.
    PassOn(Signal),
    /// Ctrl-Z (SIGTSTP), or SIGTTIN: suspend, with COMMAND.
    Suspend,
}

/// The signals redmutex handles itself: those it passes on to the command rather than die of
/// (leaving the command to run on without the lock), and those that would suspend it.
pub struct Signals {
    streams: Vec<(Received, tokio::signal::unix::Signal)>,
    /// The last signal passed on, until taken.
    received: Option<Signal>,
}

impl Signals {
    /// Takes over SIGINT, SIGTERM, SIGHUP and SIGQUIT (passed on), and SIGTSTP and SIGTTIN
    /// (suspension) for this process.
    ///
    /// SIGTTOU is left alone: the kernel raises it on a background process's own write to the
    /// terminal (with `stty tostop`), and restarts the write after a handler returns, so a
    /// process that catches it and does not stop at once raises it again and again. Left to its
    /// default it stops `redmutex` as SIGSTOP does, which the enforcer covers.
    pub fn install() -> io::Result<Signals> {
        let kinds = [
            (Received::PassOn(Signal::INT), SignalKind::interrupt()),
            (Received::PassOn(Signal::TERM), SignalKind::terminate()),
            (Received::PassOn(Signal::HUP), SignalKind::hangup()),
            (Received::PassOn(Signal::QUIT), SignalKind::quit()),
            (
                Received::Suspend,
                SignalKind::from_raw(Signal::TSTP.as_raw()),
            ),
            (
                Received::Suspend,
                SignalKind::from_raw(Signal::TTIN.as_raw()),
            ),
        ];
        let mut streams = Vec::new();
        for (received, kind) in kinds {
            streams.push((received, signal(kind)?));
        }
        Ok(Signals {
            streams,
            received: None,
        })
    }

    /// The next signal received.
    ///
    /// Cancel safe: a signal that arrives meanwhile is kept for the next call.
    pub async fn recv(&mut self) -> Received {
        let received = std::future::poll_fn(|cx| {
            for (received, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*received);
                }
            }
            std::task::Poll::Pending
        })
        .await;
        if let Received::PassOn(signal) = received {
            self.received = Some(signal);
        }
        received
    }

    /// The next signal to pass on; suspensions received meanwhile (while no command runs) stop
    /// this process until it is continued.
    ///
    /// Cancel safe.
    pub async fn pass_on(&mut self) -> Signal {
        loop {
            match self.recv().await {
                Received::PassOn(signal) => return signal,
                Received::Suspend => suspend_self(),
            }
        }
    }

    /// The last signal passed on since the last call, if any: `elect --restart` stops
    /// campaigning once it passed one on.
    pub fn take_received(&mut self) -> Option<Signal> {
        self.received.take()
    }
}

/// Stops this process (as SIGTSTP's default would have) until it is continued.
fn suspend_self() {
    let _ = kill_process(getpid(), Signal::STOP);
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
    /// `why` the lease ended (from [`ended`](Lease::ended)), with what more can be learned once
    /// the command was told: it may ask the nodes.
    fn explain(&self, why: String) -> impl Future<Output = String>;
    /// Stops renewing: the lease is given up.
    fn stop(&mut self);
    /// The members that did not hold it at the last renewal, with why.
    fn failing(&self) -> Vec<NodeError>;
}

/// Why a lock that was deleted before it expired was lost, before the nodes were asked more.
const DELETED: &str = "the lock was deleted before it expired (forced unlock?)";

/// A lock extended by a keep-alive, for `run`.
pub struct KeptLock<'a> {
    lock: &'a Lock,
    /// The mutex it was taken with, to ask the nodes why it was lost.
    mutex: &'a Mutex,
    keep: Option<KeepAlive>,
    /// Whether the keep-alive found the lock deleted before it expired.
    deleted: Cell<bool>,
}

impl<'a> KeptLock<'a> {
    /// Starts extending `lock` every `interval`. A loss is reported `grace` (at most an
    /// interval) before the validity ends, so that `redmutex` hears it, with the nodes' answers,
    /// before the enforcer's own deadline (half an interval, at most `grace`, before the end), and
    /// COMMAND gets its grace while the lock still holds.
    pub fn new(lock: &'a Lock, mutex: &'a Mutex, interval: Duration, grace: Duration) -> Self {
        KeptLock {
            lock,
            mutex,
            deleted: Cell::new(false),
            keep: Some(lock.keep_alive(interval).report_before(grace.min(interval))),
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
        let Some(keep) = &self.keep else {
            return std::future::pending().await;
        };
        let end = keep.ended().await;
        // Gone from a quorum while its validity had not run out: not expired, deleted (a
        // forced unlock, or nodes that restarted empty).
        if matches!(end, KeepAliveEnd::Lost(Error::Expired)) && Instant::now() < self.valid_until()
        {
            self.deleted.set(true);
            return DELETED.to_owned();
        }
        describe(&end)
    }

    async fn explain(&self, why: String) -> String {
        if !self.deleted.get() {
            return why;
        }
        // After SIGTERM went out: one inspect round says on how many nodes.
        let Ok(state) = self.mutex.inspect().await else {
            return why;
        };
        let gone = state
            .nodes()
            .iter()
            .filter(|node| matches!(node.answer, NodeAnswer::Free))
            .count();
        format!(
            "the lock was deleted on {gone} of {} nodes before it expired (forced unlock?)",
            state.nodes().len()
        )
    }

    fn stop(&mut self) {
        self.keep = None;
    }

    fn failing(&self) -> Vec<NodeError> {
        self.lock.failing_nodes()
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

    async fn explain(&self, why: String) -> String {
        why
    }

    /// A leadership renews until it is dropped; once it is lost, renewals fail anyway.
    fn stop(&mut self) {}

    fn failing(&self) -> Vec<NodeError> {
        self.leadership.failing_nodes()
    }
}

/// Waits for the command under `guard` to exit while `lease` is renewed, and has it ended when
/// the lease is lost. Signals received are passed on to the command's process group; Ctrl-Z
/// suspends it with this process.
pub async fn supervise(
    guard: &mut Guard,
    lease: &mut impl Lease,
    members: &mut Members,
    grace: Duration,
    interval: Duration,
    signals: &mut Signals,
) -> Outcome {
    // The enforcer learns of a renewal within a few percent of the renewal period (it stops
    // waiting for one half a period before the validity ends, see `schedule`).
    let mut renewals = tokio::time::interval((interval / 8).max(Duration::from_millis(1)));
    renewals.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut told = lease.valid_until();
    let mut lost = false;
    loop {
        let valid_until = last_moment(lease);
        tokio::select! {
            biased;
            report = guard.report() => match report {
                Some(Report::Exited { status, cut }) => {
                    if lost {
                        return Outcome::Lost;
                    }
                    if let Some(cut) = cut {
                        lease.stop();
                        let why = match cut {
                            Cut::Told => "it was lost",
                            Cut::Overdue => {
                                "no renewal reached the enforcer before the lock's validity \
                                 ended: redmutex was stopped or too slow"
                            }
                        };
                        say(format!(
                            "lost the lock {} ({why}): the command was ended",
                            lease.name()
                        ));
                        return Outcome::Lost;
                    }
                    return Outcome::Exited(ExitStatus::from_raw(status));
                }
                Some(_) => {}
                None => return Outcome::EnforcerGone(guard.enforcer_gone().await),
            },
            () = sleep_until(valid_until.into()), if !lost => {
                // An extension may have moved the validity while this timer ran.
                if last_moment(lease) <= Instant::now() {
                    lease.stop();
                    lost = true;
                    lose(guard, lease, grace, "its validity ran out").await;
                }
            }
            why = lease.ended(), if !lost => {
                lease.stop();
                lost = true;
                lose(guard, lease, grace, &why).await;
            }
            _ = renewals.tick(), if !lost => {
                let now = lease.valid_until();
                if now != told {
                    told = now;
                    guard.order(Order::Valid(Mono::from_instant(now))).await;
                    members.renewed(lease.failing());
                }
            }
            received = signals.recv() => match received {
                Received::PassOn(signal) => guard.order(Order::Signal(signal.as_raw())).await,
                Received::Suspend => {
                    // The enforcer stops COMMAND's group, and continues it after this process
                    // is continued only if the lease still holds by then.
                    guard.order(Order::Suspend).await;
                    suspend_self();
                    guard.order(Order::Resume).await;
                }
            },
        }
    }
}

/// The last moment the command may still run: just before the lease's validity ends.
fn last_moment(lease: &impl Lease) -> Instant {
    let valid_until = lease.valid_until();
    valid_until.checked_sub(KILL_MARGIN).unwrap_or(valid_until)
}

/// The lease is lost: the enforcer sends SIGTERM now, and SIGKILL when it is due.
async fn lose(guard: &mut Guard, lease: &impl Lease, grace: Duration, why: &str) {
    guard.order(Order::Lost).await;
    let why = lease.explain(why.to_owned()).await;
    let now = Instant::now();
    // A grace too long for the clock (`--grace` takes up to billions of hours) is as long as the
    // lock allows, not none at all.
    let last = last_moment(lease);
    let kill_at = now.checked_add(grace).map_or(last, |at| at.min(last));
    let ending = if kill_at > now {
        format!(
            "sent SIGTERM to the command, SIGKILL follows in {} at the latest",
            shown(kill_at.saturating_duration_since(now))
        )
    } else {
        "the command gets SIGKILL now".to_owned()
    };
    say(format!("lost the lock {} ({why}): {ending}", lease.name()));
}

fn describe(end: &KeepAliveEnd) -> String {
    match end {
        KeepAliveEnd::Lost(error) => format!("an extension failed: {error}"),
        KeepAliveEnd::Expired => "its validity ran out before an extension succeeded".to_owned(),
        KeepAliveEnd::Unlocked => "it was unlocked".to_owned(),
        other => format!("the keep-alive stopped: {other:?}"),
    }
}
