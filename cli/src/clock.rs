//! Instants that cross from one process to another: `CLOCK_MONOTONIC`, which every process on
//! the machine reads alike, whereas an [`Instant`] means something only inside the process that
//! made it.

use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mono(u64);

impl Mono {
    /// The clock now.
    pub fn now() -> Mono {
        let now = clock_gettime(ClockId::Monotonic);
        let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
        Mono(seconds.saturating_mul(1_000_000_000).saturating_add(nanos))
    }

    /// `at` on this clock, never later than it (the two clocks are read in the order that errs
    /// early).
    pub fn from_instant(at: Instant) -> Mono {
        let mono = Mono::now();
        let now = Instant::now();
        match at.checked_duration_since(now) {
            Some(ahead) => mono.add(ahead),
            None => mono.sub(now.duration_since(at)),
        }
    }

    /// This reading as an [`Instant`] of this process, never later than it.
    pub fn to_instant(self) -> Instant {
        let now = Instant::now();
        let mono = Mono::now();
        match self.0.checked_sub(mono.0) {
            Some(ahead) => now.checked_add(Duration::from_nanos(ahead)).unwrap_or(now),
            None => {
                let behind = Duration::from_nanos(mono.0 - self.0);
                now.checked_sub(behind).unwrap_or(now)
            }
        }
    }

    /// The raw nanoseconds, for the wire.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// A reading from its nanoseconds.
    pub fn from_nanos(nanos: u64) -> Mono {
        Mono(nanos)
    }

    /// `duration` later, saturating.
    pub fn add(self, duration: Duration) -> Mono {
        Mono(self.0.saturating_add(nanos(duration)))
    }

    /// `duration` earlier, saturating at the clock's zero.
    pub fn sub(self, duration: Duration) -> Mono {
        Mono(self.0.saturating_sub(nanos(duration)))
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn since(self, earlier: Mono) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in nanoseconds, saturating (`u64` nanoseconds are 584 years).
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_survives_the_round_trip_to_within_the_reads() {
        let at = Instant::now() + Duration::from_millis(750);
        let back = Mono::from_instant(at).to_instant();
        assert!(back <= at, "{back:?} after {at:?}");
        assert!(at - back < Duration::from_millis(5), "{:?}", at - back);
        let past = Instant::now() - Duration::from_millis(300);
        assert!(Mono::from_instant(past) < Mono::now());
    }

    #[test]
    fn arithmetic_saturates() {
        let zero = Mono::from_nanos(0);
        assert_eq!(zero.sub(Duration::from_secs(1)), zero);
        assert_eq!(
            Mono::from_nanos(u64::MAX - 1).add(Duration::MAX),
            Mono::from_nanos(u64::MAX)
        );
        assert_eq!(zero.since(Mono::from_nanos(5)), Duration::ZERO);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
    }
}
