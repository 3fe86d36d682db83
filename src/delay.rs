//! How long `lock()` waits between attempts.
//!
//! Pure: the random source is a parameter, so tests replay exact sequences from a seed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngExt};

/// The default delay range: uniformly random in `[50 ms, 250 ms)`, as in redsync.
pub(crate) const DEFAULT_MIN: Duration = Duration::from_millis(50);
/// Upper bound (exclusive) of the default range.
pub(crate) const DEFAULT_MAX: Duration = Duration::from_millis(250);

/// A user-supplied delay: receives the number of the attempt that just failed (1, 2, ...).
pub(crate) type DelayFn = Arc<dyn Fn(u32) -> Duration + Send + Sync>;

/// The retry delay policy of a mutex.
#[derive(Clone)]
pub(crate) enum RetryDelay {
    /// Uniformly random in `[min, max)`; the jitter spreads competing clients apart.
    Random { min: Duration, max: Duration },
    /// Always the same.
    Fixed(Duration),
    /// Computed by the caller from the attempt number.
    Custom(DelayFn),
}

impl Default for RetryDelay {
    fn default() -> Self {
        RetryDelay::Random {
            min: DEFAULT_MIN,
            max: DEFAULT_MAX,
        }
    }
}

impl fmt::Debug for RetryDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryDelay::Random { min, max } => write!(f, "Random({min:?}..{max:?})"),
            RetryDelay::Fixed(delay) => write!(f, "Fixed({delay:?})"),
            RetryDelay::Custom(_) => f.write_str("Custom(fn)"),
        }
    }
}

impl RetryDelay {
    /// The delay after attempt number `failed` (1-based) has failed.
    pub(crate) fn after(&self, failed: u32, rng: &mut impl Rng) -> Duration {
        match self {
            RetryDelay::Random { min, max } if min < max => {
                let nanos = rng.random_range(min.as_nanos()..max.as_nanos());
                // The range is bounded by `max`, itself a Duration, so this always fits.
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            RetryDelay::Random { min, .. } => *min,
            RetryDelay::Fixed(delay) => *delay,
            RetryDelay::Custom(f) => f(failed),
        }
    }

    /// The longest delay the policy can give, where it is known without calling the caller's
    /// function.
    pub(crate) fn longest(&self) -> Option<Duration> {
        match self {
            RetryDelay::Random { min, max } => Some((*min).max(*max)),
            RetryDelay::Fixed(delay) => Some(*delay),
            RetryDelay::Custom(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn default_is_random_within_50_to_250_ms() {
        let mut rng = StdRng::seed_from_u64(7);
        let delay = RetryDelay::default();
        let mut seen_low = false;
        let mut seen_high = false;
        for attempt in 1..=10_000 {
            let d = delay.after(attempt, &mut rng);
            assert!(d >= DEFAULT_MIN && d < DEFAULT_MAX, "{d:?}");
            seen_low |= d < Duration::from_millis(60);
            seen_high |= d > Duration::from_millis(240);
        }
        assert!(seen_low && seen_high, "the whole range is used");
    }

    #[test]
    fn seeded_jitter_is_reproducible() {
        let delay = RetryDelay::default();
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (1..=5)
                .map(|n| delay.after(n, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn fixed_and_custom_give_exact_sequences() {
        let mut rng = StdRng::seed_from_u64(0);
        let fixed = RetryDelay::Fixed(Duration::from_millis(100));
        let custom = RetryDelay::Custom(Arc::new(|n| Duration::from_millis(10 * u64::from(n))));
        let fixed_seq: Vec<_> = (1..=3).map(|n| fixed.after(n, &mut rng)).collect();
        let custom_seq: Vec<_> = (1..=3).map(|n| custom.after(n, &mut rng)).collect();
        let ms = Duration::from_millis;
        assert_eq!(fixed_seq, [ms(100), ms(100), ms(100)]);
        assert_eq!(custom_seq, [ms(10), ms(20), ms(30)]);
    }

    #[test]
    fn the_longest_delay_is_known_unless_custom() {
        let ms = Duration::from_millis;
        assert_eq!(RetryDelay::default().longest(), Some(ms(250)));
        assert_eq!(RetryDelay::Fixed(ms(7)).longest(), Some(ms(7)));
        assert_eq!(
            RetryDelay::Custom(Arc::new(|_| Duration::from_millis(1))).longest(),
            None
        );
    }

    #[test]
    fn empty_random_range_falls_back_to_its_bound() {
        let mut rng = StdRng::seed_from_u64(0);
        let d = Duration::from_millis(5);
        assert_eq!(RetryDelay::Random { min: d, max: d }.after(1, &mut rng), d);
    }
}
