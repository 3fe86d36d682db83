//! A safety checker: records when each holder held the lock, on one monotonic clock, and finds
//! overlaps. Mutual exclusion holds iff no two recorded intervals overlap, except two shared ones
//! (readers of a read-write lock); a semaphore of `P` permits is kept iff no more than `P`
//! recorded intervals overlap at any instant.

use std::sync::Mutex;
use std::time::Instant;

/// When one holder held the lock: from `lock()` returning to the earlier of calling `unlock()` and
/// the lock's `valid_until()` (after that the holder may no longer rely on it).
#[derive(Debug, Clone)]
pub struct Held {
    pub holder: String,
    pub from: Instant,
    pub until: Instant,
    /// A reader's section, which may overlap other readers' (but no writer's).
    pub shared: bool,
}

/// Every critical section of a run.
#[derive(Debug, Default)]
pub struct History {
    held: Mutex<Vec<Held>>,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    /// Records a critical section. `unlocked` is when the holder stopped using the resource.
    pub fn record(&self, holder: &str, acquired: Instant, unlocked: Instant, valid_until: Instant) {
        self.push(holder, acquired, unlocked.min(valid_until), false);
    }

    /// Records a reader's critical section, which may overlap other readers'.
    pub fn record_shared(
        &self,
        holder: &str,
        acquired: Instant,
        unlocked: Instant,
        valid_until: Instant,
    ) {
        self.push(holder, acquired, unlocked.min(valid_until), true);
    }

    fn push(&self, holder: &str, from: Instant, until: Instant, shared: bool) {
        let held = Held {
            holder: holder.to_owned(),
            from,
            until,
            shared,
        };
        self.held.lock().expect("not poisoned").push(held);
    }

    pub fn len(&self) -> usize {
        self.held.lock().expect("not poisoned").len()
    }

    /// Every pair of intervals of different holders that overlap.
    pub fn overlaps(&self) -> Vec<(Held, Held)> {
        let mut held = self.held.lock().expect("not poisoned").clone();
        held.sort_by_key(|h| h.from);
        let mut overlaps = Vec::new();
        for (i, a) in held.iter().enumerate() {
            // Sorted by start: only later intervals that start before `a` ends can overlap it.
            for b in held[i + 1..].iter().take_while(|b| b.from < a.until) {
                let both_shared = a.shared && b.shared;
                if a.holder != b.holder && !both_shared && b.from < b.until && a.from < a.until {
                    overlaps.push((a.clone(), b.clone()));
                }
            }
        }
        overlaps
    }

    /// The most critical sections held at one instant. Intervals are half-open: one that ends as
    /// another starts does not overlap it.
    pub fn max_concurrent(&self) -> usize {
        let held = self.held.lock().expect("not poisoned");
        // +1 at each start, -1 at each end; at one instant the ends come first.
        let mut events: Vec<(Instant, i64)> = held
            .iter()
            .filter(|h| h.from < h.until)
            .flat_map(|h| [(h.from, 1), (h.until, -1)])
            .collect();
        events.sort();
        let (mut now, mut most) = (0i64, 0i64);
        for (_, step) in events {
            now += step;
            most = most.max(now);
        }
        most as usize
    }

    /// Panics if more than `permits` critical sections were held at one instant.
    pub fn assert_at_most(&self, permits: usize) {
        let most = self.max_concurrent();
        assert!(
            most <= permits,
            "{most} critical sections held at once, {permits} permitted"
        );
    }

    /// Panics with the first overlaps found.
    pub fn assert_exclusive(&self) {
        let overlaps = self.overlaps();
        assert!(
            overlaps.is_empty(),
            "{} overlapping critical sections, e.g. {:?}",
            overlaps.len(),
            &overlaps[..overlaps.len().min(3)]
        );
    }
}
