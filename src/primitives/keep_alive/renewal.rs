//! When a keep-alive renews, when it retries a renewal that failed, and when it gives up.
//!
//! Pure: clock readings and the random source are parameters, so tests check exact moments.
//!
//! The rules, from two facts. An extend is bounded by the node timeout (its fan-out waits no
//! longer for any node), so one started at `t` has its verdict by `t + round_trip`. And a
//! renewal's new validity counts from its own start (`Held::extend`), however late its reply
//! comes: retrying never stretches the lock past what each attempt's start allows. So:
//!
//! - a renewal is due `every` after the start of the last one that succeeded, and no later than
//!   the last moment from which one still ends before the loss must be reported;
//! - a renewal that failed for a reason that may pass (too few nodes answered) is tried again
//!   after a short jittered delay, as long as that attempt too can end before the report;
//! - otherwise the loss is reported, at the latest [`REPORT_MARGIN`] before the validity ends,
//!   so that a timer that fires a little late still reports it before, never after; work under
//!   the lease is dropped then, or [`DROP_MARGIN`] before the end by its own timer.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::engine::delay::RetryDelay;

/// How long before the end of the validity a keep-alive reports a loss at the latest, by default
/// (and at least: see `KeepAlive::report_before`): ahead of a holder's own timer at the end of
/// the validity (`run`'s, [`DROP_MARGIN`]; the `redmutex` command kills 10 ms before it), so that
/// the holder hears why, with the nodes' answers.
pub(crate) const REPORT_MARGIN: Duration = Duration::from_millis(25);

/// How long before the end of the validity work under a lease is dropped at the latest, if its
/// keep-alive has not reported the loss by then (a keep-alive starved of its thread): after the
/// report, so that the report (with the nodes' answers) normally comes first.
pub(crate) const DROP_MARGIN: Duration = Duration::from_millis(10);

/// A keep-alive's timing: how often it renews, and how long one renewal may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    /// The interval between renewals that succeed.
    pub(crate) every: Duration,
    /// How long one extend may take: the node timeout.
    pub(crate) round_trip: Duration,
    /// How long before the end of the validity a loss is reported at the latest.
    pub(crate) margin: Duration,
}

impl Renewal {
    /// The renewal of a lock renewed every `every`, whose extends take up to `round_trip`, with
    /// the default margin.
    pub(crate) fn new(every: Duration, round_trip: Duration) -> Renewal {
        Renewal {
            every,
            round_trip,
            margin: REPORT_MARGIN,
        }
    }

    /// When the loss of a lock valid until `valid_until` must be reported by: `margin` before it
    /// (at once, for a margin longer than what is left).
    pub(crate) fn report_by(&self, valid_until: Instant) -> Instant {
        valid_until.checked_sub(self.margin).unwrap_or(valid_until)
    }

    /// When work under a lease valid until `valid_until` is dropped at the latest.
    pub(crate) fn drop_by(valid_until: Instant) -> Instant {
        valid_until.checked_sub(DROP_MARGIN).unwrap_or(valid_until)
    }

    /// The last moment a renewal may start and still end before the report: `None` if that
    /// moment is not representable (long passed).
    pub(crate) fn latest_start(&self, valid_until: Instant) -> Option<Instant> {
        self.report_by(valid_until).checked_sub(self.round_trip)
    }

    /// When the next renewal is due, the last that succeeded having started at `last`: `every`
    /// later, or at the latest start if that comes first; `None` when no renewal started `now`
    /// or later can end in time.
    pub(crate) fn due(&self, now: Instant, last: Instant, valid_until: Instant) -> Option<Instant> {
        let latest = self
            .latest_start(valid_until)
            .filter(|latest| *latest >= now)?;
        Some(
            last.checked_add(self.every)
                .map_or(latest, |due| due.min(latest)),
        )
    }

    /// When to try again after a renewal failed at `now`, `delay` later; `None` when that attempt
    /// could not end before the report.
    pub(crate) fn retry_at(
        &self,
        now: Instant,
        valid_until: Instant,
        delay: Duration,
    ) -> Option<Instant> {
        let at = now.checked_add(delay)?;
        (at <= self.latest_start(valid_until)?).then_some(at)
    }

    /// The delay before a retry: uniformly random between half of and a whole tenth of the
    /// interval (that tenth taken as 1 ms at least): short enough to try many times within the
    /// interval, jittered so that the holders of many locks do not retry in step.
    pub(crate) fn retry_delay(&self, rng: &mut impl Rng) -> Duration {
        let max = (self.every / 10).max(Duration::from_millis(1));
        RetryDelay::Random { min: max / 2, max }.after(1, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MS: Duration = Duration::from_millis(1);

    /// A 1.5 s lock renewed every 500 ms, whose extends take up to 75 ms (timeout factor 0.05).
    const RENEWAL: Renewal = Renewal {
        every: Duration::from_millis(500),
        round_trip: Duration::from_millis(75),
        margin: REPORT_MARGIN,
    };

    #[test]
    fn a_renewal_is_due_an_interval_after_the_last_but_never_too_late() {
        let t = Instant::now();
        let valid_until = t + 1485 * MS;
        assert_eq!(RENEWAL.due(t, t, valid_until), Some(t + 500 * MS));
        // An interval as long as the lock: due at the last start that still ends in time.
        let long = Renewal {
            every: 2 * RENEWAL.every * 3,
            ..RENEWAL
        };
        assert_eq!(long.due(t, t, valid_until), Some(t + (1485 - 25 - 75) * MS));
        // Late (the task ran late): due already, so at once, while a renewal can still end in
        // time (started by 1485 - 25 - 75 = 1385 ms).
        for late in [900, 1385] {
            assert_eq!(
                RENEWAL.due(t + late * MS, t, valid_until),
                Some(t + 500 * MS)
            );
        }
        assert_eq!(RENEWAL.due(t + 1386 * MS, t, valid_until), None);
        // A lock whose validity is over is not renewed.
        assert_eq!(RENEWAL.due(t, t, t), None);
    }

    #[test]
    fn retries_go_on_while_one_more_can_end_before_the_report() {
        let t = Instant::now();
        let valid_until = t + 1000 * MS;
        // Latest start: 1000 - 25 - 75 = 900 ms.
        assert_eq!(
            RENEWAL.retry_at(t + 800 * MS, valid_until, 50 * MS),
            Some(t + 850 * MS)
        );
        assert_eq!(
            RENEWAL.retry_at(t + 850 * MS, valid_until, 50 * MS),
            Some(t + 900 * MS)
        );
        assert_eq!(RENEWAL.retry_at(t + 851 * MS, valid_until, 50 * MS), None);
        assert_eq!(RENEWAL.retry_at(t + 2000 * MS, valid_until, MS), None);
    }

    #[test]
    fn the_report_comes_before_the_validity_ends() {
        let t = Instant::now() + Duration::from_secs(1);
        assert_eq!(RENEWAL.report_by(t), t - REPORT_MARGIN);
        // Every attempt started at the latest start ends by the report.
        let latest = RENEWAL.latest_start(t).expect("in range");
        assert!(latest + RENEWAL.round_trip <= RENEWAL.report_by(t));
        assert!(RENEWAL.report_by(t) < Renewal::drop_by(t));
        // A holder that needs 400 ms to wind down under the lock: retries stop 400 ms earlier.
        let wind_down = Renewal {
            margin: 400 * MS,
            ..RENEWAL
        };
        assert_eq!(wind_down.report_by(t), t - 400 * MS);
        assert_eq!(wind_down.latest_start(t), Some(t - 475 * MS));
        assert!(Renewal::drop_by(t) < t);
    }

    /// Seeded, so the sequence replays: between 25 and 50 ms for a 500 ms interval, never the
    /// same twice in a row, and under 1 ms (but not under half of it) for a 1 ms interval.
    #[test]
    fn retry_delays_are_short_and_jittered() {
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..50).map(|_| RENEWAL.retry_delay(&mut rng)).collect();
        assert!(
            delays.iter().all(|d| (25 * MS..50 * MS).contains(d)),
            "{delays:?}"
        );
        assert!(delays.windows(2).all(|pair| pair[0] != pair[1]));
        let mut again = StdRng::seed_from_u64(7);
        assert_eq!(RENEWAL.retry_delay(&mut again), delays[0]);
        let tiny = Renewal {
            every: MS,
            round_trip: MS,
            margin: MS,
        };
        let delay = tiny.retry_delay(&mut rng);
        assert!((MS / 2..MS).contains(&delay), "{delay:?}");
    }
}
