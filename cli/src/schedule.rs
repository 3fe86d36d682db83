//! When the enforcer ends COMMAND: the deadline arithmetic, apart from processes and clocks.
//!
//! The enforcer knows the lease's validity as of the last renewal `redmutex` reported. COMMAND
//! may run until [`KILL_MARGIN`] before it ends (its *last moment*), whatever else happens. The
//! enforcer ends COMMAND (SIGTERM, then SIGKILL after the grace period and by the last moment at
//! the latest) when `redmutex` says the lease is lost, when `redmutex` is gone, and when no
//! renewal arrived by the time a healthy `redmutex` would long have sent one: half a renewal
//! period (at most the grace period) before the last moment, when the lease has already gone a
//! full period and a half without one. Once it ends COMMAND nothing brings it back: a renewal
//! reported later changes no deadline.

use std::time::Duration;

use crate::clock::Mono;

/// SIGKILL goes out this long before the validity ends, so that delivery and the processes'
/// teardown are done by then, and a timer that fires a little late is still in time.
pub const KILL_MARGIN: Duration = Duration::from_millis(10);

/// Why COMMAND's tree is being ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// `redmutex` said the lease is lost.
    Lost,
    /// No renewal arrived in time: `redmutex` is stopped, hung or too slow.
    Overdue,
    /// `redmutex` is gone (its end of the socket closed).
    Orphaned,
    /// COMMAND exited by itself while the lease held; what it left running goes before the
    /// lease is given up.
    Finished,
}

/// A signal the enforcer must send to COMMAND's tree now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Term,
    Kill,
}

/// Once ending: why, and when SIGKILL is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct End {
    why: Why,
    kill_at: Mono,
    killed: bool,
}

/// The enforcer's deadlines.
#[derive(Debug, Clone)]
pub struct Schedule {
    valid_until: Mono,
    interval: Duration,
    grace: Duration,
    end: Option<End>,
}

impl Schedule {
    /// A lease valid until `valid_until`, renewed every `interval`; COMMAND gets `grace` between
    /// SIGTERM and SIGKILL (less when the lease ends sooner).
    pub fn new(valid_until: Mono, interval: Duration, grace: Duration) -> Self {
        Schedule {
            valid_until,
            interval,
            grace,
            end: None,
        }
    }

    /// A renewal: the lease is valid until `valid_until`. Ignored once ending.
    pub fn renewed(&mut self, valid_until: Mono) {
        if self.end.is_none() {
            self.valid_until = valid_until;
        }
    }

    /// The last moment COMMAND's tree may run.
    pub fn last_moment(&self) -> Mono {
        self.valid_until.sub(KILL_MARGIN)
    }

    /// When the enforcer stops waiting for a renewal.
    fn overdue_at(&self) -> Mono {
        self.last_moment().sub(self.grace.min(self.interval / 2))
    }

    /// Starts ending COMMAND's tree, unless it is being ended already.
    pub fn end(&mut self, why: Why, now: Mono) -> Option<Act> {
        if self.end.is_some() {
            return None;
        }
        let last = self.last_moment();
        let kill_at = now.add(self.grace).min(last);
        let killed = now >= kill_at;
        self.end = Some(End {
            why,
            kill_at,
            killed,
        });
        Some(if killed { Act::Kill } else { Act::Term })
    }

    /// COMMAND's own process exited. What it left of its tree goes: at once when the lease is
    /// lost (or its end is near), else after SIGTERM and the grace period.
    pub fn command_exited(&mut self, now: Mono) -> Act {
        match &mut self.end {
            Some(end) if end.why != Why::Finished => {
                end.killed = true;
                Act::Kill
            }
            Some(_) => Act::Term,
            None => self.end(Why::Finished, now).unwrap_or(Act::Kill),
        }
    }

    /// When [`due`](Self::due) has something to do next.
    pub fn wake_at(&self) -> Option<Mono> {
        match self.end {
            None => Some(self.overdue_at()),
            Some(end) if !end.killed => Some(end.kill_at),
            Some(_) => None,
        }
    }

    /// What is due at `now`.
    pub fn due(&mut self, now: Mono) -> Option<Act> {
        let overdue = now >= self.overdue_at();
        match &mut self.end {
            None if overdue => self.end(Why::Overdue, now),
            Some(end) if !end.killed && now >= end.kill_at => {
                end.killed = true;
                Some(Act::Kill)
            }
            _ => None,
        }
    }

    /// Whether COMMAND may be continued after a suspension: the lease holds and nothing ends it.
    pub fn may_resume(&self, now: Mono) -> bool {
        self.end.is_none() && now < self.last_moment()
    }

    /// Why COMMAND's tree is being ended, if it is.
    pub fn why(&self) -> Option<Why> {
        self.end.map(|end| end.why)
    }

    /// Whether SIGKILL went out.
    pub fn killed(&self) -> bool {
        self.end.is_some_and(|end| end.killed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(ms: u64) -> Mono {
        Mono::from_nanos(ms * 1_000_000)
    }

    /// A lease valid until 1000 ms, renewed every 300 ms, with a 5 s grace.
    fn lease() -> Schedule {
        Schedule::new(at(1000), 300 * MS, 5000 * MS)
    }

    #[test]
    fn without_renewals_sigterm_comes_half_a_period_before_the_last_moment_and_sigkill_at_it() {
        let mut schedule = lease();
        assert_eq!(schedule.last_moment(), at(990));
        assert_eq!(schedule.wake_at(), Some(at(840)));
        assert_eq!(schedule.due(at(839)), None);
        assert_eq!(schedule.due(at(840)), Some(Act::Term));
        assert_eq!(schedule.why(), Some(Why::Overdue));
        assert_eq!(schedule.wake_at(), Some(at(990)));
        assert_eq!(schedule.due(at(989)), None);
        assert_eq!(schedule.due(at(990)), Some(Act::Kill));
        assert!(schedule.killed());
        assert_eq!(schedule.wake_at(), None);
        assert_eq!(schedule.due(at(2000)), None);
    }

    #[test]
    fn a_renewal_moves_every_deadline() {
        let mut schedule = lease();
        schedule.renewed(at(1300));
        assert_eq!(schedule.wake_at(), Some(at(1140)));
        assert_eq!(schedule.due(at(1000)), None);
        assert!(schedule.may_resume(at(1289)));
        assert!(!schedule.may_resume(at(1290)));
    }

    #[test]
    fn a_short_grace_waits_longer_for_a_renewal() {
        let mut schedule = Schedule::new(at(1000), 300 * MS, 20 * MS);
        assert_eq!(schedule.wake_at(), Some(at(970)));
        assert_eq!(schedule.due(at(970)), Some(Act::Term));
        assert_eq!(schedule.wake_at(), Some(at(990)));
        let mut none = Schedule::new(at(1000), 300 * MS, Duration::ZERO);
        assert_eq!(none.due(at(990)), Some(Act::Kill));
    }

    #[test]
    fn a_lost_lease_gets_the_grace_but_never_past_the_last_moment() {
        let mut schedule = lease();
        assert_eq!(schedule.end(Why::Lost, at(100)), Some(Act::Term));
        assert_eq!(schedule.wake_at(), Some(at(990)));
        // Ending is final: a later renewal or loss changes nothing.
        schedule.renewed(at(5000));
        assert_eq!(schedule.end(Why::Orphaned, at(200)), None);
        assert_eq!(schedule.wake_at(), Some(at(990)));
        assert!(!schedule.may_resume(at(200)));

        let mut short = Schedule::new(at(1000), 300 * MS, 100 * MS);
        short.end(Why::Orphaned, at(100));
        assert_eq!(short.wake_at(), Some(at(200)));
        // Past the last moment already: SIGKILL at once.
        let mut late = lease();
        assert_eq!(late.end(Why::Lost, at(995)), Some(Act::Kill));
        assert!(late.killed());
    }

    #[test]
    fn what_command_leaves_goes_at_once_after_a_loss_and_after_the_grace_otherwise() {
        let mut lost = lease();
        lost.end(Why::Lost, at(100));
        assert_eq!(lost.command_exited(at(150)), Act::Kill);
        assert!(lost.killed());

        let mut finished = Schedule::new(at(1000), 300 * MS, 200 * MS);
        assert_eq!(finished.command_exited(at(100)), Act::Term);
        assert_eq!(finished.why(), Some(Why::Finished));
        assert_eq!(finished.wake_at(), Some(at(300)));
        assert_eq!(finished.due(at(300)), Some(Act::Kill));
    }
}
