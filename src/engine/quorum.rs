//! The arithmetic of Redlock: quorum size, validity and milliseconds (the verdict over node
//! replies is `tally`).
//!
//! Pure: no clock, no I/O. Callers measure time and pass durations in, so every rule here is tested
//! with exact numbers.

use std::time::{Duration, Instant};

/// The number of nodes that must agree: a strict majority, `n / 2 + 1`.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The number of nodes a holder of one of `permits` permits must hold: `P * N / (P + 1) + 1`
/// (rounded down before adding one).
///
/// Every node admits at most `P` live holders, so `N` nodes hold at most `P * N` entries, and
/// `P + 1` holders of `q` nodes each would need `(P + 1) * q > P * N` of them: at most `P` hold
/// at once. It is the smallest such `q`: with one node fewer, `P + 1` holders fit (each takes
/// the next `q - 1` nodes round the ring). For one permit it is the majority.
pub(crate) fn permit_quorum(nodes: usize, permits: u32) -> usize {
    let (n, p) = (nodes as u128, u128::from(permits));
    // Below `nodes`, so it fits.
    usize::try_from(p * n / (p + 1)).map_or(nodes, |below| below + 1)
}

/// Time the lock is still safe to use after an attempt that took `elapsed`, or `None` if none is left.
///
/// `expiry - elapsed - expiry * drift_factor`, where `expiry` is what was sent to the nodes. Clocks
/// of different machines run at slightly different rates; the drift term is the margin for that.
/// A drift that is no duration (a factor that is negative or not a number, or too large) leaves
/// nothing: settings refuse such factors, and this never panics on them.
pub(crate) fn validity(expiry: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    // `Duration::mul_f64`, without its panic.
    let drift = Duration::try_from_secs_f64(drift_factor * expiry.as_secs_f64()).ok()?;
    expiry
        .checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|left| !left.is_zero())
}

/// The expiry as sent on the wire: whole milliseconds, rounded down so the nodes never hold the key
/// for less time than validity assumes.
pub(crate) fn expiry_millis(expiry: Duration) -> u64 {
    whole_millis(expiry).max(1)
}

/// Whole milliseconds of `duration`, rounded down, saturating.
pub(crate) fn whole_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `start + left`, which cannot overflow for the expiries settings accept.
pub(crate) fn deadline(start: Instant, left: Duration) -> Instant {
    start.checked_add(left).unwrap_or(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn quorum_is_a_strict_majority() {
        let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (nodes, needed) in expected {
            assert_eq!(quorum(nodes), needed, "nodes = {nodes}");
        }
    }

    #[test]
    fn permit_quorum_follows_the_rule() {
        // (nodes, permits, needed): the table of the README.
        let expected = [
            (3, 1, 2),
            (3, 2, 3),
            (3, 5, 3),
            (5, 1, 3),
            (5, 2, 4),
            (5, 3, 4),
            (5, 4, 5),
            (5, 100, 5),
            (7, 2, 5),
            (7, 3, 6),
            (1, 1, 1),
            (1, u32::MAX, 1),
        ];
        for (nodes, permits, needed) in expected {
            assert_eq!(
                permit_quorum(nodes, permits),
                needed,
                "{nodes} nodes, {permits}"
            );
        }
        // No overflow at the extremes, and the rule still holds there.
        let (n, p) = (usize::MAX, u32::MAX);
        let q = permit_quorum(n, p) as u128;
        let (n, p) = (n as u128, u128::from(p));
        assert!((p + 1) * q > p * n && (p + 1) * (q - 1) <= p * n);
        assert_eq!(permit_quorum(usize::MAX, 1), quorum(usize::MAX));
    }

    #[test]
    fn permit_quorum_is_the_smallest_that_keeps_p_plus_one_holders_out() {
        for nodes in 1..=40usize {
            for permits in 1..=60u32 {
                let (n, p) = (nodes as u64, u64::from(permits));
                let q = permit_quorum(nodes, permits) as u64;
                assert!(q <= n, "reachable with every node up: {nodes}, {permits}");
                assert!((p + 1) * q > p * n, "safe: {nodes}, {permits}");
                assert!((p + 1) * (q - 1) <= p * n, "smallest: {nodes}, {permits}");
            }
            assert_eq!(
                permit_quorum(nodes, 1),
                quorum(nodes),
                "one permit is a mutex"
            );
        }
    }

    #[test]
    fn one_node_fewer_lets_p_plus_one_holders_in() {
        // The rule is tight: with q - 1 nodes each, P + 1 holders taking consecutive nodes round
        // the ring never put more than P on one node.
        for nodes in 2..=9usize {
            for permits in 1..=8u32 {
                let q = permit_quorum(nodes, permits);
                let mut load = vec![0u32; nodes];
                for holder in 0..=permits as usize {
                    for k in 0..q - 1 {
                        load[(holder * (q - 1) + k) % nodes] += 1;
                    }
                }
                assert!(load.iter().all(|&l| l <= permits), "{nodes}, {permits}");
            }
        }
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        // 8 s expiry, 1 % drift = 80 ms, 20 ms elapsed.
        let left = validity(8000 * MS, 20 * MS, 0.01);
        assert_eq!(left, Some(7900 * MS));
    }

    #[test]
    fn validity_is_none_when_exhausted_and_never_underflows() {
        assert_eq!(validity(100 * MS, 99 * MS, 0.01), None, "exactly zero left");
        assert_eq!(validity(100 * MS, 150 * MS, 0.01), None, "elapsed > expiry");
        assert_eq!(
            validity(100 * MS, 99 * MS, 0.5),
            None,
            "drift > what is left"
        );
        assert_eq!(validity(100 * MS, Duration::MAX, 0.0), None, "huge elapsed");
    }

    #[test]
    fn validity_of_any_factor_is_a_value_never_a_panic() {
        for expiry in [Duration::ZERO, MS, 100 * MS, Duration::MAX] {
            for factor in [
                f64::NAN,
                -1.0,
                -0.0,
                1.0,
                2.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ] {
                let left = validity(expiry, Duration::ZERO, factor);
                assert!(
                    left.is_none_or(|left| left <= expiry),
                    "{expiry:?} {factor}"
                );
            }
        }
        assert_eq!(validity(100 * MS, Duration::ZERO, f64::NAN), None);
        assert_eq!(validity(100 * MS, Duration::ZERO, -1.0), None);
        assert_eq!(validity(Duration::MAX, Duration::ZERO, 2.0), None);
        assert_eq!(validity(100 * MS, 10 * MS, -0.0), Some(90 * MS));
    }

    #[test]
    fn validity_keeps_sub_millisecond_precision() {
        let left = validity(10 * MS, Duration::from_micros(9_899), 0.01);
        assert_eq!(left, Some(Duration::from_micros(1)));
    }

    #[test]
    fn expiry_on_the_wire_rounds_down_to_whole_milliseconds() {
        assert_eq!(expiry_millis(Duration::from_micros(1_999)), 1);
        assert_eq!(expiry_millis(Duration::from_micros(1_000)), 1);
        assert_eq!(expiry_millis(Duration::from_secs(8)), 8000);
        assert_eq!(expiry_millis(Duration::from_micros(10)), 1, "at least 1 ms");
    }
}
