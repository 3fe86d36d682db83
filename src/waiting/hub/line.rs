//! One client's line of waiters for one name, fed by release notices (wake-up on release).
//!
//! Pure: no clock, no I/O, no randomness of its own. The hub (see `hub`) passes in the time each
//! notice arrived and each attempt began, and wakes the waiters this line names.
//!
//! A waiter is woken once a quorum of nodes reported a release since its last attempt began: then
//! the lock is free on a quorum, as far as this client can tell. One waiter per release is woken
//! (the first in line whose condition holds); the release is then spent for the others, who need
//! fresh notices. A notice carries the released value, which tells one release from the next: the
//! late notices of a spent release (from the slower nodes) must not add up with the first notices
//! of the next one. Notices are only hints: a woken waiter still makes a full attempt.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::waiting::KEPT_MARK;

/// How many spent releases a line remembers, to ignore their late notices. Late notices arrive
/// within a round trip; by then few releases can have followed.
const SPENT: usize = 8;

/// Bounds of the spread of woken waiters' retries (see `Line::spread`).
const SPREAD_MIN: Duration = Duration::from_micros(250);
const SPREAD_MAX: Duration = Duration::from_millis(4);

/// A waiter, as the hub names it.
pub(crate) type WaiterId = u64;

/// The waiters of one client for one name, and what the nodes reported.
pub(crate) struct Line {
    /// Nodes whose notices wake a waiter.
    quorum: usize,
    /// Each node's last notice of a release not yet spent.
    heard: Vec<Option<Heard>>,
    /// The values of the last releases that woke somebody, newest last.
    spent: VecDeque<Arc<[u8]>>,
    /// In line order.
    waiters: Vec<Waiter>,
    /// The node whose notice arrived last: it is up, and the released key is gone there.
    last_node: usize,
    /// A woken waiter retries after a random pause below this. Every client wakes one waiter per
    /// release, so with many clients several woken waiters race for the lock, split the nodes'
    /// votes, and all fail. Like Ethernet's backoff, the spread doubles when a woken waiter lost
    /// and halves when one won: zero (no added latency) while this client's woken waiters win,
    /// wider while they collide with other clients'.
    spread: Duration,
    /// When the last notice of a release that took a waiters' mark off its node arrived, spent or
    /// not (see `waiting::notices`; a release whose holder waited keeps the mark).
    last_taken: Option<Instant>,
    /// The last write of marks that every node answered, by any waiter of this client: the marks
    /// are the same keys whoever wrote them (see `waiting::notices`).
    marks: Option<Marks>,
}

/// A write of waiters' marks of the name to every node, which every node answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marks {
    /// When the write began: the marks expire no sooner than `MARK_TTL` after it, and a notice of
    /// a release that took one arrives after it.
    pub(crate) sent: Instant,
    /// The client's listener connections then (see `hub::State::connects`).
    pub(crate) connects: u64,
}

struct Heard {
    at: Instant,
    /// The released value: the same on every node for one release.
    release: Arc<[u8]>,
}

struct Waiter {
    id: WaiterId,
    /// Notices count only when received after this instant: the start of the waiter's last
    /// attempt.
    since: Instant,
    woken: bool,
}

impl Line {
    /// An empty line over `nodes` nodes, whose waiters wake on notices from `quorum` of them.
    pub(crate) fn new(nodes: usize, quorum: usize) -> Line {
        Line {
            quorum,
            heard: (0..nodes).map(|_| None).collect(),
            spent: VecDeque::new(),
            waiters: Vec::new(),
            last_node: 0,
            spread: Duration::ZERO,
            last_taken: None,
            marks: None,
        }
    }

    /// Puts waiter `id` at the end of the line, counting notices received after `since`. Notices
    /// that arrived during the attempt that just failed count as well. Returns the waiter woken, if
    /// any (it may be this one).
    pub(crate) fn join(&mut self, id: WaiterId, since: Instant) -> Option<WaiterId> {
        self.waiters.push(Waiter {
            id,
            since,
            woken: false,
        });
        self.wake_one(Some(self.quorum))
    }

    /// A node reported the release of `release` (the value, after [`KEPT_MARK`] where the release
    /// kept the waiters' mark there, else it took it) at `at`; returns the waiter woken. The late
    /// notices of a spent release wake nobody.
    pub(crate) fn hear(&mut self, node: usize, release: &[u8], at: Instant) -> Option<WaiterId> {
        if release.first() != Some(&KEPT_MARK) {
            self.last_taken = self.last_taken.max(Some(at));
        }
        if self.spent.iter().any(|spent| **spent == *release) {
            return None;
        }
        self.last_node = node;
        self.heard[node] = Some(Heard {
            at,
            release: Arc::from(release),
        });
        self.wake_one(Some(self.quorum))
    }

    /// Waiter `id` starts an attempt at `since`: only notices received from now on count, and a
    /// waiter that was woken goes to the back of the line.
    pub(crate) fn rearm(&mut self, id: WaiterId, since: Instant) {
        let Some(mut position) = self.position(id) else {
            return;
        };
        if self.waiters[position].woken {
            let waiter = self.waiters.remove(position);
            self.waiters.push(waiter);
            position = self.waiters.len() - 1;
        }
        let waiter = &mut self.waiters[position];
        waiter.woken = false;
        waiter.since = since;
    }

    /// A woken waiter found the lock taken again before its attempt: back to waiting, at its place
    /// in line, for releases after `since`. A release heard while it was still marked woken woke
    /// nobody; it counts now. Returns the waiter woken.
    pub(crate) fn wait_again(&mut self, id: WaiterId, since: Instant) -> Option<WaiterId> {
        if let Some(position) = self.position(id) {
            let waiter = &mut self.waiters[position];
            waiter.woken = false;
            waiter.since = since;
        }
        self.wake_one(Some(self.quorum))
    }

    /// How the attempt after a wake-up went: `won` narrows the spread, a loss widens it.
    pub(crate) fn woken_attempt(&mut self, won: bool) {
        self.spread = next_spread(self.spread, won);
    }

    /// Waiter `id` leaves the line. One that was woken and leaves without having got the lock
    /// (`done` false: its `lock()` was cancelled) passes the wake-up on, so a release is not lost
    /// on a waiter that left. Returns the waiter woken.
    pub(crate) fn leave(&mut self, id: WaiterId, done: bool) -> Option<WaiterId> {
        let position = self.position(id)?;
        let waiter = self.waiters.remove(position);
        if waiter.woken && !done {
            self.wake_one(None)
        } else {
            None
        }
    }

    /// Whether waiter `id` is woken.
    pub(crate) fn is_woken(&self, id: WaiterId) -> bool {
        self.position(id)
            .is_some_and(|position| self.waiters[position].woken)
    }

    /// Whether anybody waits.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// For a woken waiter before its attempt: a pause below the current spread (`fraction` of it,
    /// drawn by the caller in `[0, 1)`), and the node that reported the release last (a good one to
    /// look at after the pause).
    pub(crate) fn pause(&self, fraction: f64) -> (Duration, usize) {
        (self.spread.mul_f64(fraction), self.last_node)
    }

    /// A write of marks that every node answered: the latest such write tells (see
    /// `waiting::notices`: every node then has a mark that landed at or after its start).
    pub(crate) fn marks_placed(&mut self, marks: Marks) {
        if self.marks.is_none_or(|placed| placed.sent < marks.sent) {
            self.marks = Some(marks);
        }
    }

    /// The latest write of marks that every node answered, whether or not some may be gone since:
    /// when they expire, whoever still waits must write them again.
    pub(crate) fn last_marks(&self) -> Option<Marks> {
        self.marks
    }

    /// The marks this client placed, while none may be gone from a node: no notice of a release
    /// that took one arrived since their write began (late notices of spent releases included),
    /// and the client's listeners did not (re)connect since (`connects`, their count now).
    pub(crate) fn marks(&self, connects: u64) -> Option<Marks> {
        self.marks.filter(|marks| {
            marks.connects == connects && self.last_taken.is_none_or(|at| at < marks.sent)
        })
    }

    /// Where waiter `id` stands in line.
    fn position(&self, id: WaiterId) -> Option<usize> {
        self.waiters.iter().position(|waiter| waiter.id == id)
    }

    /// The notices received after `since`.
    fn heard_since(&self, since: Instant) -> impl Iterator<Item = &Heard> {
        self.heard
            .iter()
            .flatten()
            .filter(move |heard| heard.at > since)
    }

    /// Wakes the first waiter in line that is not woken yet and, with `needed`, has heard from
    /// that many nodes; the releases it heard of are then spent for everyone else.
    fn wake_one(&mut self, needed: Option<usize>) -> Option<WaiterId> {
        let position = self.waiters.iter().position(|waiter| {
            !waiter.woken
                && needed.is_none_or(|needed| self.heard_since(waiter.since).count() >= needed)
        })?;
        let since = self.waiters[position].since;
        let releases: Vec<Arc<[u8]>> = self
            .heard_since(since)
            .map(|heard| Arc::clone(&heard.release))
            .collect();
        for release in releases {
            if !self.spent.contains(&release) {
                if self.spent.len() == SPENT {
                    self.spent.pop_front();
                }
                self.spent.push_back(release);
            }
        }
        let spent = &self.spent;
        for heard in &mut self.heard {
            if heard.as_ref().is_some_and(|h| spent.contains(&h.release)) {
                *heard = None;
            }
        }
        let waiter = &mut self.waiters[position];
        waiter.woken = true;
        Some(waiter.id)
    }
}

/// The spread after a woken waiter's attempt.
fn next_spread(spread: Duration, won: bool) -> Duration {
    if won {
        let half = spread / 2;
        if half < SPREAD_MIN {
            Duration::ZERO
        } else {
            half
        }
    } else {
        (spread * 2).clamp(SPREAD_MIN, SPREAD_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// One release notice per node in `nodes`, each a microsecond after `after` (one that kept
    /// the mark if `value` starts with `+`); returns the last time and every waiter woken.
    fn release(
        line: &mut Line,
        value: &str,
        nodes: &[usize],
        after: Instant,
    ) -> (Instant, Vec<WaiterId>) {
        let mut at = after;
        let mut woken = Vec::new();
        for &node in nodes {
            at += US;
            woken.extend(line.hear(node, value.as_bytes(), at));
        }
        (at, woken)
    }

    fn woken(line: &Line, ids: &[WaiterId]) -> Vec<bool> {
        ids.iter().map(|&id| line.is_woken(id)).collect()
    }

    #[test]
    fn the_spread_widens_on_collisions_and_closes_on_wins() {
        let mut spread = Duration::ZERO;
        spread = next_spread(spread, true);
        assert_eq!(spread, Duration::ZERO, "no collisions, no pause");
        let mut widths = Vec::new();
        for _ in 0..6 {
            spread = next_spread(spread, false);
            widths.push(spread.as_micros());
        }
        assert_eq!(widths, [250, 500, 1000, 2000, 4000, 4000]);
        for _ in 0..5 {
            spread = next_spread(spread, true);
        }
        assert_eq!(spread, Duration::ZERO);
    }

    #[test]
    fn a_woken_waiter_pauses_within_the_spread() {
        let mut line = Line::new(3, 2);
        assert_eq!(line.pause(0.5), (Duration::ZERO, 0));
        line.woken_attempt(false);
        line.woken_attempt(false);
        release(&mut line, "a", &[2], Instant::now());
        assert_eq!(
            line.pause(0.5),
            (250 * US, 2),
            "half of 500 us, node 2 heard last"
        );
    }

    #[test]
    fn each_release_wakes_the_next_in_line_only() {
        let mut line = Line::new(5, 3);
        let since = Instant::now();
        let ids = [1, 2, 3];
        for id in ids {
            assert_eq!(line.join(id, since), None);
        }
        let (at, woke) = release(&mut line, "a", &[0, 1], since);
        assert!(woke.is_empty(), "2 of 5 is no quorum");
        let (at, woke) = release(&mut line, "a", &[2], at);
        assert_eq!(woke, [1]);
        // The slower nodes' notices of the same release wake nobody...
        let (at, woke) = release(&mut line, "a", &[3, 4], at);
        assert!(woke.is_empty());
        // ...and do not add up with the first notices of the next release.
        let (at, woke) = release(&mut line, "b", &[4, 0], at);
        assert!(woke.is_empty());
        let (at, woke) = release(&mut line, "b", &[1], at);
        assert_eq!(woke, [2]);
        release(&mut line, "b", &[2, 3], at);
        assert_eq!(woken(&line, &ids), [true, true, false]);
    }

    /// A late notice of a spent release wakes nobody, but it still says that a mark went from
    /// its node: waiters' marks are set again after it (see `waiting::notices`).
    #[test]
    fn every_taking_notice_tells_that_a_mark_may_be_gone() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        assert_eq!(line.join(1, since), None);
        assert_eq!(line.marks(0), None, "nothing placed yet");
        line.marks_placed(marks(since));
        assert_eq!(line.marks(0), Some(marks(since)));
        let (at, woke) = release(&mut line, "a", &[0, 1], since);
        assert_eq!(woke, [1]);
        assert_eq!(line.marks(0), None, "taken");
        line.marks_placed(marks(at + US));
        assert_eq!(line.marks(0), Some(marks(at + US)));
        let (late, woke) = release(&mut line, "a", &[2], at + US);
        assert!(woke.is_empty(), "spent");
        assert_eq!(line.marks(0), None, "a late notice took one too");
        line.marks_placed(marks(late + US));
        assert_eq!(line.marks(0), Some(marks(late + US)));
        assert_eq!(line.marks(1), None, "a listener connected since");
        assert_eq!(
            line.last_marks(),
            Some(marks(late + US)),
            "still due to expire"
        );
    }

    /// Marks written at `sent`, with no listener connection counted.
    fn marks(sent: Instant) -> Marks {
        Marks { sent, connects: 0 }
    }

    /// Of two writes that every node answered, the later-begun one tells: each node has a mark
    /// that landed after it began.
    #[test]
    fn the_latest_write_of_marks_tells() {
        let mut line = Line::new(3, 2);
        let first = Instant::now();
        line.marks_placed(marks(first + US));
        line.marks_placed(marks(first));
        assert_eq!(line.marks(0), Some(marks(first + US)));
    }

    /// A release that kept the mark wakes as any other, and leaves the marks counted as placed.
    #[test]
    fn a_notice_that_kept_the_mark_wakes_without_taking_it() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        assert_eq!(line.join(1, since), None);
        line.marks_placed(marks(since));
        let (at, woke) = release(&mut line, "+a", &[0, 1], since);
        assert_eq!(woke, [1]);
        let (at, woke) = release(&mut line, "+a", &[2], at);
        assert!(woke.is_empty(), "spent");
        assert_eq!(line.marks(0), Some(marks(since)));
        // One node's release took it (a holder that had not waited): that one counts.
        line.rearm(1, at);
        release(&mut line, "b", &[1], at);
        assert_eq!(line.marks(0), None);
    }

    #[test]
    fn notices_from_before_an_attempt_do_not_count() {
        let mut line = Line::new(3, 2);
        let start = Instant::now();
        let (at, _) = release(&mut line, "a", &[0, 1, 2], start);
        assert_eq!(line.join(1, at + US), None, "the attempt saw the lock free");
        assert_eq!(
            line.join(2, start),
            Some(2),
            "the release came after this attempt began"
        );
    }

    #[test]
    fn a_cancelled_waiter_hands_its_wake_up_on() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        line.join(2, since);
        release(&mut line, "a", &[0, 2], since);
        assert_eq!(woken(&line, &[1, 2]), [true, false]);
        assert_eq!(line.leave(1, false), Some(2));
    }

    #[test]
    fn a_waiter_that_returned_keeps_its_wake_up() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        line.join(2, since);
        release(&mut line, "a", &[0, 1], since);
        assert_eq!(line.leave(1, true), None, "the lock went to 1");
        assert!(!line.is_woken(2));
    }

    #[test]
    fn a_woken_waiter_goes_to_the_back_of_the_line() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        line.join(2, since);
        let (at, _) = release(&mut line, "a", &[0, 1], since);
        // The first lost its attempt to somebody else, and waits again.
        line.rearm(1, at + US);
        let (_, woke) = release(&mut line, "b", &[0, 1], at + 2 * US);
        assert_eq!(woke, [2]);
        assert!(!line.is_woken(1));
    }

    #[test]
    fn a_waiter_that_found_the_lock_taken_keeps_its_place() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        line.join(2, since);
        let (at, _) = release(&mut line, "a", &[0, 1], since);
        assert!(line.is_woken(1));
        assert_eq!(line.pause(0.0).1, 1, "the node heard from last");
        // Another client got the lock during the pause: wait again, first in line still.
        assert_eq!(line.wait_again(1, at), None);
        let (_, woke) = release(&mut line, "b", &[1, 2], at);
        assert_eq!(woke, [1]);
    }

    #[test]
    fn a_release_heard_while_looking_is_not_lost() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        let (at, _) = release(&mut line, "a", &[0, 1], since);
        assert!(line.is_woken(1));
        // While it looked at a node, the new holder released already.
        release(&mut line, "b", &[1, 2], at);
        assert_eq!(
            line.wait_again(1, since + US),
            Some(1),
            "release b wakes it"
        );
    }

    #[test]
    fn notices_during_a_failed_attempt_wake_at_once() {
        let mut line = Line::new(3, 2);
        let since = Instant::now();
        line.join(1, since);
        let (at, _) = release(&mut line, "a", &[0, 1], since);
        line.leave(1, true);
        // This attempt began before release "b" and failed; the release is news to it.
        let attempt = at + US;
        release(&mut line, "b", &[1, 2], attempt);
        assert_eq!(line.join(2, attempt), Some(2));
    }

    #[test]
    fn spent_releases_are_remembered_within_bounds() {
        let mut line = Line::new(3, 2);
        let mut at = Instant::now();
        for round in 0..3 * SPENT as u64 {
            line.join(round, at);
            let woke;
            (at, woke) = release(&mut line, &round.to_string(), &[0, 1], at);
            assert_eq!(woke, [round], "round {round}");
            line.leave(round, true);
        }
        assert_eq!(line.spent.len(), SPENT);
    }
}
