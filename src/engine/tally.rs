//! The verdict over node replies: what each node said, counted, and what that makes of an
//! acquire, an extend, a raise or a release.
//!
//! Pure: no clock, no I/O. Callers measure time and pass durations in.

use std::time::Duration;

use crate::error::{Error, NodeError, NodeErrorKind};

/// What each node said, counted.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Nodes where our value holds the key (after SET, PEXPIRE or DEL of our value).
    pub ours: usize,
    /// Which nodes those are, when `track_nodes` is set (fencing needs them; the plain lock does
    /// not pay for the list).
    pub ours_nodes: Vec<usize>,
    pub track_nodes: bool,
    /// Nodes where another owner's value holds the key.
    pub foreign: Vec<usize>,
    /// Nodes where the key is gone (those an extend repaired included).
    pub missing: usize,
    /// Nodes where an extend found the key gone and set it again (see `Held::extend`).
    pub repaired: Vec<usize>,
    /// Every node that did not say "ours", with the reason.
    pub failures: Vec<NodeError>,
    /// Nodes that have answered so far.
    pub answered: usize,
    /// The highest fencing counter among the nodes that said "ours" (0 without fencing).
    pub max_counter: u64,
    /// Nodes asked.
    pub total: usize,
    /// Nodes that must agree (`quorum(total)` for a mutex).
    pub needed: usize,
    /// Nodes whose definite "no" (another owner's, or gone) decides the verdict: `Taken` on an
    /// acquire, `Expired` on an extend or release. For a mutex it is `needed`, so `Taken` means
    /// another owner holds a quorum. A semaphore's quorum can be far above a majority, and its
    /// holders leave it out of reach long before they fill a quorum of nodes: there it is the
    /// number of refusals that leaves fewer than `needed` nodes, `total - needed + 1`.
    pub blocking: usize,
}

impl Tally {
    /// A tally of `total` nodes of which `needed` must agree, and as many refuse to decide.
    pub(crate) fn new(total: usize, needed: usize) -> Self {
        Tally::with_blocking(total, needed, needed)
    }

    /// A tally of `total` nodes of which `needed` must agree, and whose verdict `blocking`
    /// refusals decide (see [`Tally::blocking`]).
    pub(crate) fn with_blocking(total: usize, needed: usize, blocking: usize) -> Self {
        Tally {
            total,
            needed,
            blocking,
            ..Tally::default()
        }
    }

    /// Counts one node's reply: `Ok` carries the node's fencing counter (0 where not asked for).
    pub(crate) fn add(&mut self, node: usize, reply: Result<u64, NodeErrorKind>) {
        self.answered += 1;
        match reply {
            Ok(counter) => {
                self.ours += 1;
                if self.track_nodes {
                    self.ours_nodes.push(node);
                }
                self.max_counter = self.max_counter.max(counter);
            }
            Err(kind) => {
                match kind {
                    // A fair round waits in line only where the lock is held or promised to a
                    // waiter ahead, and a fair entry leaves a free lock to a line: taken, as far
                    // as this attempt goes.
                    NodeErrorKind::Taken
                    | NodeErrorKind::InLine { .. }
                    | NodeErrorKind::LineAhead => self.foreign.push(node),
                    NodeErrorKind::Missing => self.missing += 1,
                    // Gone, as far as the verdict goes: the repair counts only once the extend
                    // holds without it.
                    NodeErrorKind::Repaired => {
                        self.missing += 1;
                        self.repaired.push(node);
                    }
                    _ => {}
                }
                self.failures.push(NodeError::new(node, kind));
            }
        }
    }

    /// Nodes that did not give a definite answer (timeouts, errors): whatever was sent to them may
    /// still happen, or may not.
    pub(crate) fn unconfirmed(&self) -> usize {
        self.failures
            .iter()
            .filter(|f| {
                !matches!(
                    f.kind,
                    NodeErrorKind::Taken | NodeErrorKind::Missing | NodeErrorKind::Repaired
                )
            })
            .count()
    }

    /// True once more replies cannot change the verdict: a quorum said "ours", or it can no longer
    /// and it is also settled whether enough nodes hold another owner's value for `Taken` (which
    /// must not depend on which replies happened to come first).
    pub(crate) fn decided(&self) -> bool {
        let (needed, blocking) = (self.needed, self.blocking);
        let pending = self.total - self.answered;
        let foreign = self.foreign.len();
        self.ours >= needed
            || (self.ours + pending < needed
                && (foreign >= blocking || foreign + pending < blocking))
    }

    /// Like [`decided`](Tally::decided), for a release: its verdict also tells a lock that expired
    /// (a quorum gone or foreign) from one that could not be reached, so that must be settled too.
    pub(crate) fn release_decided(&self) -> bool {
        let (needed, blocking) = (self.needed, self.blocking);
        let pending = self.total - self.answered;
        let gone = self.foreign.len() + self.missing;
        self.decided() && (self.ours >= needed || gone >= blocking || gone + pending < blocking)
    }

    /// Marks every node that has not answered as not awaited (fail-fast returned early).
    pub(crate) fn close(&mut self, pending: impl IntoIterator<Item = usize>) {
        for node in pending {
            self.add(node, Err(NodeErrorKind::NotAwaited));
        }
        self.failures.sort_by_key(|failure| failure.node);
        self.foreign.sort_unstable();
        self.repaired.sort_unstable();
    }

    fn has_quorum(&self) -> bool {
        self.ours >= self.needed
    }

    fn foreign_blocks(&self) -> bool {
        self.foreign.len() >= self.blocking
    }

    fn gone_blocks(&self) -> bool {
        self.foreign.len() + self.missing >= self.blocking
    }

    /// Whether an acquire or extend judged now succeeds (given validity left): a quorum holds our
    /// value and not enough nodes hold another owner's to make it `Taken`.
    pub(crate) fn holds(&self) -> bool {
        self.has_quorum() && !self.foreign_blocks()
    }

    /// The nodes that did not hold our value, for a verdict that [`holds`](Tally::holds): the
    /// failures but the calls it did not wait for (`Lock::failing_nodes`).
    pub(crate) fn failing(&self) -> Vec<NodeError> {
        self.failures
            .iter()
            .filter(|f| !matches!(f.kind, NodeErrorKind::NotAwaited))
            .cloned()
            .collect()
    }

    fn no_quorum(self) -> Error {
        Error::NoQuorum {
            ok: self.ours,
            quorum: self.needed,
            total: self.total,
            failures: self.failures,
        }
    }

    fn taken(self) -> Error {
        Error::Taken {
            nodes: self.foreign,
        }
    }

    /// The outcome of an acquire attempt.
    ///
    /// `validity` is what is left after the attempt (see `quorum::validity`).
    pub(crate) fn judge_acquire(self, validity: Option<Duration>) -> Result<Duration, Error> {
        if self.holds() {
            validity.ok_or(Error::Expired)
        } else if self.foreign_blocks() {
            Err(self.taken())
        } else {
            Err(self.no_quorum())
        }
    }

    /// The outcome of an extend: like acquire, but a quorum of gone keys means the lock expired.
    pub(crate) fn judge_extend(self, validity: Option<Duration>) -> Result<Duration, Error> {
        if self.holds() {
            validity.ok_or(Error::Expired)
        } else if self.foreign_blocks() {
            Err(self.taken())
        } else if self.gone_blocks() {
            Err(Error::Expired)
        } else {
            Err(self.no_quorum())
        }
    }

    /// The outcome of a fencing raise (`tally` tracks its nodes): like an extend, but only the
    /// nodes in `counted`, whose counters went into the token, count towards the quorum. A node
    /// that took the raise but was not counted is listed as [`NodeErrorKind::NotCounted`].
    pub(crate) fn judge_raise(
        mut self,
        counted: &[usize],
        validity: Option<Duration>,
    ) -> Result<Duration, Error> {
        let (raised, late): (Vec<usize>, Vec<usize>) = self
            .ours_nodes
            .iter()
            .partition(|node| counted.contains(node));
        for node in late {
            let kind = NodeErrorKind::NotCounted;
            self.failures.push(NodeError::new(node, kind));
        }
        self.failures.sort_by_key(|failure| failure.node);
        self.ours = raised.len();
        self.ours_nodes = raised;
        self.judge_extend(validity)
    }

    /// The outcome of an unlock.
    pub(crate) fn judge_release(self) -> Result<(), Error> {
        if self.foreign_blocks() {
            Err(self.taken())
        } else if self.has_quorum() {
            Ok(())
        } else if self.gone_blocks() {
            Err(Error::Expired)
        } else {
            Err(self.no_quorum())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::quorum::{permit_quorum, quorum, validity};

    const MS: Duration = Duration::from_millis(1);

    fn tally(replies: &[Result<u64, NodeErrorKind>]) -> Tally {
        let mut tally = Tally::new(replies.len(), quorum(replies.len()));
        for (node, reply) in replies.iter().enumerate() {
            tally.add(node, reply.clone());
        }
        tally
    }

    fn timeout() -> NodeErrorKind {
        NodeErrorKind::Timeout(MS)
    }

    #[test]
    fn acquire_needs_quorum_and_validity() {
        let ok = tally(&[Ok(0), Ok(0), Err(timeout())]);
        assert_eq!(ok.judge_acquire(Some(5 * MS)).ok(), Some(5 * MS));

        let late = tally(&[Ok(0), Ok(0), Err(timeout())]);
        assert!(matches!(late.judge_acquire(None), Err(Error::Expired)));

        let short = tally(&[Ok(0), Err(timeout()), Err(timeout())]);
        match short.judge_acquire(Some(5 * MS)) {
            Err(Error::NoQuorum {
                ok,
                quorum,
                total,
                failures,
            }) => {
                assert_eq!((ok, quorum, total), (1, 2, 3));
                let nodes: Vec<usize> = failures.iter().map(|f| f.node).collect();
                assert_eq!(nodes, [1, 2]);
            }
            other => panic!("expected NoQuorum, got {other:?}"),
        }
    }

    #[test]
    fn acquire_reports_taken_only_on_a_foreign_quorum() {
        let taken = tally(&[
            Err(NodeErrorKind::Taken),
            Ok(0),
            Err(NodeErrorKind::Taken),
            Err(NodeErrorKind::Taken),
            Err(timeout()),
        ]);
        match taken.judge_acquire(Some(MS)) {
            Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 2, 3]),
            other => panic!("expected Taken, got {other:?}"),
        }

        let split = tally(&[
            Err(NodeErrorKind::Taken),
            Ok(0),
            Err(NodeErrorKind::Taken),
            Ok(0),
            Err(timeout()),
        ]);
        assert!(matches!(
            split.judge_acquire(Some(MS)),
            Err(Error::NoQuorum { ok: 2, .. })
        ));
    }

    #[test]
    fn a_semaphore_is_taken_once_its_holders_leave_too_few_nodes() {
        // 5 nodes, 2 permits: 4 needed, so 2 full nodes leave the quorum out of reach.
        let semaphore = |replies: &[Result<u64, NodeErrorKind>]| {
            let mut tally = Tally::with_blocking(5, 4, 2);
            for (node, reply) in replies.iter().enumerate() {
                tally.add(node, reply.clone());
            }
            tally
        };
        let full = [
            Ok(0),
            Err(NodeErrorKind::Taken),
            Ok(0),
            Err(NodeErrorKind::Taken),
            Ok(0),
        ];
        match semaphore(&full).judge_acquire(Some(MS)) {
            Err(Error::Taken { nodes }) => assert_eq!(nodes, [1, 3]),
            other => panic!("expected Taken, got {other:?}"),
        }
        // One full node and one down: the node that is down could have made the difference.
        let down = [
            Ok(0),
            Err(NodeErrorKind::Taken),
            Ok(0),
            Err(timeout()),
            Ok(0),
        ];
        assert!(matches!(
            semaphore(&down).judge_acquire(Some(MS)),
            Err(Error::NoQuorum {
                ok: 3,
                quorum: 4,
                ..
            })
        ));
        // A permit gone from 2 of the 5 nodes can no longer be extended or released on 4.
        let lost = [
            Ok(0),
            Err(NodeErrorKind::Missing),
            Ok(0),
            Err(NodeErrorKind::Missing),
            Ok(0),
        ];
        assert!(matches!(
            semaphore(&lost).judge_extend(Some(MS)),
            Err(Error::Expired)
        ));
        assert!(matches!(
            semaphore(&lost).judge_release(),
            Err(Error::Expired)
        ));
        // Fail-fast: two refusals decide, whatever the other three say.
        let mut early = Tally::with_blocking(5, 4, 2);
        early.add(1, Err(NodeErrorKind::Taken));
        assert!(!early.decided());
        early.add(3, Err(NodeErrorKind::Taken));
        assert!(early.decided());
    }

    #[test]
    fn extend_tells_expired_from_taken_from_no_quorum() {
        let gone = tally(&[
            Err(NodeErrorKind::Missing),
            Err(NodeErrorKind::Taken),
            Ok(0),
        ]);
        assert!(matches!(gone.judge_extend(Some(MS)), Err(Error::Expired)));

        let taken = tally(&[Err(NodeErrorKind::Taken), Err(NodeErrorKind::Taken), Ok(0)]);
        assert!(matches!(
            taken.judge_extend(Some(MS)),
            Err(Error::Taken { .. })
        ));

        let down = tally(&[Err(NodeErrorKind::Missing), Err(timeout()), Ok(0)]);
        assert!(matches!(
            down.judge_extend(Some(MS)),
            Err(Error::NoQuorum { ok: 1, .. })
        ));

        let slow = tally(&[Ok(0), Ok(0), Ok(0)]);
        assert!(matches!(slow.judge_extend(None), Err(Error::Expired)));
    }

    /// A node an extend repaired counts as one where the key was gone: it never makes the quorum,
    /// and a quorum of gone keys is an expired lock, repaired or not.
    #[test]
    fn repaired_nodes_count_as_gone() {
        let mut t = Tally::new(5, 3);
        for (node, reply) in [
            (4, Err(NodeErrorKind::Repaired)),
            (0, Ok(0)),
            (1, Ok(0)),
            (2, Err(NodeErrorKind::Repaired)),
            (3, Err(timeout())),
        ] {
            t.add(node, reply);
        }
        t.close([]);
        assert_eq!((t.ours, t.missing, t.unconfirmed()), (2, 2, 1));
        assert_eq!(t.repaired, [2, 4]);
        assert!(matches!(
            t.judge_extend(Some(MS)),
            Err(Error::NoQuorum { ok: 2, .. })
        ));

        let gone = tally(&[
            Err(NodeErrorKind::Repaired),
            Err(NodeErrorKind::Repaired),
            Ok(0),
        ]);
        assert!(gone.release_decided());
        assert!(matches!(gone.judge_extend(Some(MS)), Err(Error::Expired)));

        let held = tally(&[Ok(0), Err(NodeErrorKind::Repaired), Ok(0)]);
        assert_eq!(held.judge_extend(Some(MS)).ok(), Some(MS));
    }

    #[test]
    fn release_succeeds_on_quorum_only() {
        assert!(
            tally(&[Ok(0), Ok(0), Err(timeout())])
                .judge_release()
                .is_ok()
        );
        assert!(matches!(
            tally(&[
                Err(NodeErrorKind::Missing),
                Err(NodeErrorKind::Missing),
                Ok(0)
            ])
            .judge_release(),
            Err(Error::Expired)
        ));
        assert!(matches!(
            tally(&[Ok(0), Err(timeout()), Err(timeout())]).judge_release(),
            Err(Error::NoQuorum { .. })
        ));
    }

    #[test]
    fn decided_as_soon_as_the_outcome_cannot_change() {
        let mut t = Tally::new(5, 3);
        t.add(0, Ok(0));
        t.add(1, Ok(0));
        assert!(!t.decided(), "2 of 5, 3 pending");
        t.add(2, Ok(0));
        assert!(t.decided(), "quorum reached");

        let mut t = Tally::new(5, 3);
        t.add(0, Err(timeout()));
        t.add(1, Err(NodeErrorKind::Taken));
        assert!(!t.decided(), "3 pending could still make a quorum");
        t.add(2, Err(timeout()));
        assert!(
            !t.decided(),
            "no quorum for us, but a foreign 3 is still possible"
        );
        t.add(3, Err(timeout()));
        assert!(
            t.decided(),
            "1 pending can make neither 3 ours nor 3 foreign"
        );

        let mut t = Tally::new(5, 3);
        t.add(0, Err(NodeErrorKind::Taken));
        t.add(1, Err(NodeErrorKind::Taken));
        t.add(2, Err(timeout()));
        assert!(
            !t.decided(),
            "failed, but Taken or NoQuorum depends on the rest"
        );
        t.add(3, Err(NodeErrorKind::Taken));
        assert!(t.decided());
    }

    #[test]
    fn a_release_is_decided_only_once_expired_or_not_is_settled() {
        let mut t = Tally::new(5, 3);
        t.add(0, Err(NodeErrorKind::Missing));
        t.add(1, Err(NodeErrorKind::Missing));
        t.add(2, Err(timeout()));
        assert!(t.decided(), "no quorum of ours, none foreign");
        assert!(
            !t.release_decided(),
            "Expired or NoQuorum depends on the rest"
        );
        t.add(3, Err(NodeErrorKind::Missing));
        assert!(t.release_decided());

        let mut t = Tally::new(5, 3);
        for node in 0..3 {
            t.add(node, Ok(0));
        }
        assert!(t.release_decided(), "released on a quorum");
    }

    #[test]
    fn a_raise_counts_only_the_nodes_whose_counters_made_the_token() {
        let raise = |counted: &[usize]| {
            // Nodes 0, 1, 3 and 4 took the raise; node 2 timed out.
            let mut t = Tally::new(5, 3);
            t.track_nodes = true;
            for node in [0, 1, 3, 4] {
                t.add(node, Ok(0));
            }
            t.add(2, Err(timeout()));
            t.close([]);
            t.judge_raise(counted, Some(100 * MS))
        };
        assert_eq!(
            raise(&[0, 1, 4]).ok(),
            Some(100 * MS),
            "three counted nodes took it"
        );
        // Counted 0, 1 and 2: only two of them took the raise, although four nodes did.
        let Err(Error::NoQuorum {
            ok,
            quorum,
            failures,
            ..
        }) = raise(&[0, 1, 2])
        else {
            panic!("two counted nodes are not a quorum of five");
        };
        assert_eq!((ok, quorum), (2, 3));
        let listed: Vec<(usize, bool)> = failures
            .iter()
            .map(|f| (f.node, matches!(f.kind, NodeErrorKind::NotCounted)))
            .collect();
        assert_eq!(listed, [(2, false), (3, true), (4, true)]);
    }

    #[test]
    fn a_raise_past_the_validity_has_expired() {
        let mut t = Tally::new(3, 2);
        t.track_nodes = true;
        for node in 0..3 {
            t.add(node, Ok(0));
        }
        t.close([]);
        assert!(matches!(
            t.judge_raise(&[0, 1, 2], None),
            Err(Error::Expired)
        ));
    }

    #[test]
    fn close_marks_pending_nodes_and_sorts() {
        let mut t = Tally::new(3, 2);
        t.add(2, Err(timeout()));
        t.add(0, Err(NodeErrorKind::Taken));
        t.close([1]);
        let nodes: Vec<usize> = t.failures.iter().map(|f| f.node).collect();
        assert_eq!(nodes, [0, 1, 2]);
        assert!(matches!(t.failures[1].kind, NodeErrorKind::NotAwaited));
    }

    /// Property test over random clusters, replies and timings (seeded, so failures replay).
    #[test]
    fn verdicts_agree_with_the_counts_for_arbitrary_replies() {
        use rand::rngs::StdRng;
        use rand::{RngExt, SeedableRng};

        let mut rng = StdRng::seed_from_u64(0x5eed);
        for case in 0..100_000 {
            let n = rng.random_range(1..=9usize);
            // A mutex's majority, or a semaphore's quorum, whose refusals block sooner.
            let (q, blocking) = match rng.random_range(0..4u32) {
                0 => (quorum(n), quorum(n)),
                permits => {
                    let q = permit_quorum(n, permits);
                    (q, n - q + 1)
                }
            };
            let tally = |replies: &[Result<u64, NodeErrorKind>]| {
                let mut tally = Tally::with_blocking(replies.len(), q, blocking);
                for (node, reply) in replies.iter().enumerate() {
                    tally.add(node, reply.clone());
                }
                tally
            };
            let replies: Vec<Result<u64, NodeErrorKind>> = (0..n)
                .map(|_| match rng.random_range(0..5) {
                    0 | 1 => Ok(0),
                    2 => Err(NodeErrorKind::Taken),
                    3 => Err(NodeErrorKind::Missing),
                    _ => Err(timeout()),
                })
                .collect();
            let ours = replies.iter().filter(|r| r.is_ok()).count();
            let taken = replies
                .iter()
                .filter(|r| matches!(r, Err(NodeErrorKind::Taken)))
                .count();
            let missing = replies
                .iter()
                .filter(|r| matches!(r, Err(NodeErrorKind::Missing)))
                .count();

            let expiry = Duration::from_micros(rng.random_range(1_000..10_000_000));
            let elapsed = Duration::from_micros(rng.random_range(0..12_000_000));
            let drift = rng.random_range(0.0..1.0);
            let left = validity(expiry, elapsed, drift);
            // Validity: positive and never more than expiry - elapsed - drift.
            if let Some(left) = left {
                assert!(!left.is_zero());
                assert!(left + elapsed + expiry.mul_f64(drift) <= expiry + Duration::from_nanos(1));
            } else {
                assert!(elapsed + expiry.mul_f64(drift) + Duration::from_nanos(1) >= expiry);
            }

            match tally(&replies).judge_acquire(left) {
                Ok(_) => assert!(ours >= q && left.is_some(), "case {case}"),
                Err(Error::Taken { nodes }) => {
                    assert!(
                        nodes.len() >= blocking && nodes.len() == taken,
                        "case {case}"
                    );
                    // Taken only when the others alone leave the quorum out of reach.
                    assert!(n - taken < q, "case {case}");
                }
                Err(Error::Expired) => assert!(ours >= q && left.is_none(), "case {case}"),
                Err(Error::NoQuorum { ok, failures, .. }) => {
                    assert!(ok < q && taken < blocking, "case {case}");
                    assert_eq!(failures.len(), n - ours);
                }
                Err(other) => panic!("case {case}: {other:?}"),
            }
            match tally(&replies).judge_release() {
                Ok(()) => assert!(ours >= q),
                Err(Error::Taken { .. }) => assert!(taken >= blocking),
                Err(Error::Expired) => {
                    assert!(ours < q && taken < blocking && taken + missing >= blocking)
                }
                Err(Error::NoQuorum { .. }) => assert!(ours < q && taken + missing < blocking),
                Err(other) => panic!("case {case}: {other:?}"),
            }

            // Fail-fast: once `decided`, no completion of the remaining replies changes success.
            let answered = rng.random_range(0..=n);
            let mut partial = Tally::with_blocking(n, q, blocking);
            for (node, reply) in replies[..answered].iter().enumerate() {
                partial.add(node, reply.clone());
            }
            if partial.decided() && partial.ours < q {
                assert!(
                    ours < q,
                    "case {case}: decided failure, but all replies reach a quorum"
                );
                // The variant is settled too: the early verdict is the one all replies give.
                let mut early = partial;
                early.close(answered..n);
                let early = early.judge_acquire(left);
                let full = tally(&replies).judge_acquire(left);
                assert_eq!(
                    std::mem::discriminant(&early.unwrap_err()),
                    std::mem::discriminant(&full.unwrap_err()),
                    "case {case}"
                );
            }
            // A fail-fast release: once decided, the early verdict is the one all replies give.
            let mut partial = Tally::with_blocking(n, q, blocking);
            for (node, reply) in replies[..answered].iter().enumerate() {
                partial.add(node, reply.clone());
            }
            if partial.release_decided() {
                let mut early = partial;
                early.close(answered..n);
                let early = early.judge_release();
                let full = tally(&replies).judge_release();
                assert_eq!(early.is_ok(), full.is_ok(), "case {case}");
                if let (Err(early), Err(full)) = (early, full) {
                    assert_eq!(
                        std::mem::discriminant(&early),
                        std::mem::discriminant(&full),
                        "case {case}"
                    );
                }
            }
        }
    }
}
