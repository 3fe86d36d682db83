//! Criterion micro-benchmarks of the pure parts of the algorithm: quorum size, validity, lock
//! value generation, and judging an attempt from its replies.
//!
//! `cargo bench --bench micro` (no Redis needed). Reached through the hidden, unstable
//! `redmutex::internals` module.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use redmutex::internals;

fn quorum(c: &mut Criterion) {
    c.bench_function("quorum(5)", |b| b.iter(|| internals::quorum(black_box(5))));
}

fn validity(c: &mut Criterion) {
    let expiry = Duration::from_secs(8);
    let elapsed = Duration::from_micros(350);
    c.bench_function("validity(8 s, 350 us, 0.01)", |b| {
        b.iter(|| internals::validity(black_box(expiry), black_box(elapsed), black_box(0.01)))
    });
    c.bench_function("validity(expired)", |b| {
        b.iter(|| {
            internals::validity(
                black_box(Duration::from_millis(10)),
                black_box(Duration::from_millis(20)),
                black_box(0.01),
            )
        })
    });
}

fn random_value(c: &mut Criterion) {
    c.bench_function("random_value()", |b| b.iter(internals::random_value));
}

fn judge_acquire(c: &mut Criterion) {
    let left = Some(Duration::from_millis(7900));
    for (ok, failed) in [(5, 0), (3, 2), (2, 3)] {
        c.bench_function(
            &format!("judge_acquire({ok} ok, {failed} timed out)"),
            |b| {
                b.iter(|| {
                    internals::judge_acquire(black_box(ok), black_box(failed), black_box(left))
                })
            },
        );
    }
}

criterion_group!(benches, quorum, validity, random_value, judge_acquire);
criterion_main!(benches);
