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

/// The longest wait a deadline is set for: about 30 years, as tokio's own "far future". Delays
/// are not bounded (`Duration::MAX` waits for ever, within the tries), but `Instant + Duration`
/// panics past what the clock represents, so a deadline is never set further out than this.
pub(crate) const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// How many delays [`RetryDelay::total`] draws one by one; each further one counts as their
/// average, so that `u32::MAX` tries cost no more work than this.
const SUMMED: u32 = 1000;

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

    /// The delays after attempts 1 to `count`, added up (saturating): how long `lock()` would
    /// wait in all, between `count + 1` tries.
    ///
    /// The first thousand delays are drawn (or computed) one by one; each further one counts as
    /// their average. That is exact for a fixed delay, and close for a random one; a function
    /// is called a thousand times at most.
    pub(crate) fn total(&self, count: u32, rng: &mut impl Rng) -> Duration {
        let drawn = count.min(SUMMED);
        let sum = (1..=drawn).fold(Duration::ZERO, |sum, failed| {
            sum.saturating_add(self.after(failed, rng))
        });
        match count - drawn {
            0 => sum,
            rest => sum.saturating_add((sum / drawn).saturating_mul(rest)),
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
    fn totals_are_exact_for_fixed_delays_and_saturate() {
        let mut rng = StdRng::seed_from_u64(0);
        let ms = Duration::from_millis;
        assert_eq!(RetryDelay::Fixed(ms(7)).total(0, &mut rng), Duration::ZERO);
        assert_eq!(RetryDelay::Fixed(ms(7)).total(3, &mut rng), ms(21));
        assert_eq!(
            RetryDelay::Fixed(ms(1)).total(u32::MAX, &mut rng),
            ms(u64::from(u32::MAX))
        );
        for count in [1, 2, SUMMED, SUMMED + 1, u32::MAX] {
            let max = RetryDelay::Fixed(Duration::MAX);
            assert_eq!(max.total(count, &mut rng), Duration::MAX, "{count}");
            let custom = RetryDelay::Custom(Arc::new(|_| Duration::MAX));
            assert_eq!(custom.total(count, &mut rng), Duration::MAX, "{count}");
        }
        assert_eq!(
            RetryDelay::Fixed(Duration::ZERO).total(u32::MAX, &mut rng),
            Duration::ZERO
        );
    }

    #[test]
    fn totals_call_a_function_a_thousand_times_at_most() {
        let mut rng = StdRng::seed_from_u64(0);
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let custom = RetryDelay::Custom(Arc::new(move |n| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Duration::from_millis(u64::from(n))
        }));
        // 1 + 2 + 3 ms, each computed.
        assert_eq!(custom.total(3, &mut rng), Duration::from_millis(6));
        calls.store(0, std::sync::atomic::Ordering::Relaxed);
        // 1 to 1000 ms (500.5 s, 500.5 ms on average), then 2000 more at the average.
        assert_eq!(
            custom.total(SUMMED + 2000, &mut rng),
            Duration::from_millis(500_500 + 2000 * 500) + Duration::from_micros(2000 * 500)
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), SUMMED);
        let random = RetryDelay::default().total(u32::MAX, &mut rng);
        let tries = u32::MAX;
        assert!(
            random >= DEFAULT_MIN * tries && random < DEFAULT_MAX * tries,
            "{random:?}"
        );
    }

    #[test]
    fn empty_random_range_falls_back_to_its_bound() {
        let mut rng = StdRng::seed_from_u64(0);
        let d = Duration::from_millis(5);
        assert_eq!(RetryDelay::Random { min: d, max: d }.after(1, &mut rng), d);
    }
}
