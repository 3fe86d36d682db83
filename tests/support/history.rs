//! A safety checker: records when each holder held the lock, on one monotonic clock, and finds
//! overlaps. Mutual exclusion holds iff no two recorded intervals overlap.

use std::sync::Mutex;
use std::time::Instant;

/// When one holder held the lock: from `lock()` returning to the earlier of calling `unlock()` and
/// the lock's `valid_until()` (after that the holder may no longer rely on it).
#[derive(Debug, Clone)]
pub struct Held {
    pub holder: String,
    pub from: Instant,
    pub until: Instant,
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
        let held = Held {
            holder: holder.to_owned(),
            from: acquired,
            until: unlocked.min(valid_until),
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
                if a.holder != b.holder && b.from < b.until && a.from < a.until {
                    overlaps.push((a.clone(), b.clone()));
                }
            }
        }
        overlaps
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
