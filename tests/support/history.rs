//! A safety checker: records when each holder held the lock, on one monotonic clock, and finds
//! overlaps. Mutual exclusion holds iff no two recorded intervals overlap, except two shared ones
//! (readers of a read-write lock).

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
