//! What one fair waiter knows of its standing on each node, and what it does next: pure, so that
//! every rule of the protocol (see `fair`) is tested with exact replies and times.

use std::time::Instant;

use crate::engine::tally::Tally;
use crate::error::NodeErrorKind;

/// What one waiter knows of its standing on each node, and since when. Pure: times are passed in.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    /// Nodes whose agreement holds the lock.
    quorum: usize,
    /// Nodes the waiter sends its rounds to.
    nodes: usize,
    /// Per node, from the first round on: most fair calls never make one (their plain entry
    /// takes the lock), so they allocate nothing here.
    places: Vec<OnNode>,
    /// The highest ticket we had anywhere: our ticket still once every node handed us the key.
    last_ticket: Option<u64>,
    /// A grant notice came that only a round can confirm.
    unconfirmed: bool,
    /// The ticket we stood in line with, once every node we reached (a quorum) gave us the same
    /// one. Our rounds offer it from then on, so that we never move back behind a waiter that
    /// joined after we stood; a node that reports a higher ticket keeps us there.
    stood: Option<u64>,
}

/// What one waiter knows of its standing on one node.
#[derive(Debug, Clone, Copy, Default)]
struct OnNode {
    /// The start of the last round that renewed our entry there, while we are in line there.
    /// The entry lives at least an expiry from that moment.
    renewed: Option<Instant>,
    /// Our ticket there, while we are in line there.
    ticket: Option<u64>,
    /// A moment from which the key holding our value there lives at least an expiry: the start
    /// of the round that took or extended it, or, for a key handed to us, the renewal of the
    /// entry it was handed for.
    granted: Option<Instant>,
    /// Our last round there went unanswered. It may have run, and passed on a key handed to us
    /// there before it; so a grant notice from that node waits for a definite reply.
    unanswered: bool,
}

/// One node's reply to a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The lock is ours there (taken or extended by this round).
    Granted,
    /// We wait in line there, with this ticket.
    InLine { ticket: u64 },
    /// No definite answer (an error or a timeout).
    Unknown,
}

/// What a waiter does after a round that did not get it the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// It stands in line on a quorum, with one ticket: wait to be served.
    Wait,
    /// Its tickets differ between nodes (it joined alongside others): a round at once moves its
    /// places back to its highest ticket, so that every node orders it the same way.
    Align,
    /// It reaches fewer than a quorum of nodes: give back what it was handed (others may need
    /// those nodes), and try again after the retry delay.
    Retreat,
}

impl Standing {
    pub(crate) fn new(nodes: usize, quorum: usize) -> Standing {
        Standing {
            quorum,
            nodes,
            places: Vec::new(),
            last_ticket: None,
            unconfirmed: false,
            stood: None,
        }
    }

    /// Takes in the replies of a round that began at `started`.
    pub(crate) fn round(&mut self, started: Instant, replies: &[Reply]) {
        self.unconfirmed = false;
        if self.places.is_empty() {
            self.places = vec![OnNode::default(); self.nodes.max(replies.len())];
        }
        for (place, reply) in self.places.iter_mut().zip(replies) {
            place.unanswered = *reply == Reply::Unknown;
            match *reply {
                Reply::Granted => {
                    place.granted = Some(started);
                    place.renewed = None;
                    place.ticket = None;
                }
                Reply::InLine { ticket } => {
                    place.granted = None;
                    place.renewed = Some(started);
                    place.ticket = Some(ticket);
                    self.last_ticket = self.last_ticket.max(Some(ticket));
                }
                // Whatever the round did there may or may not have happened, and may still
                // happen: a place in line only moves back, so what we knew still bounds it; but
                // a key of ours there may be passed on by the round (someone ahead of our
                // offer, see `round.lua`), so it no longer counts.
                Reply::Unknown => place.granted = None,
            }
        }
        let highest = self.highest();
        self.stood = match self.stood {
            // Where we stand with that ticket, waiters that joined after we stood are behind
            // us; while those nodes (or keys we hold) are a quorum, any quorum a later waiter
            // needs includes one of them.
            Some(ticket) if self.holding(ticket) >= self.quorum => Some(ticket),
            _ if self.reached() >= self.quorum && self.tickets().all(|t| Some(t) == highest) => {
                highest
            }
            _ => None,
        };
    }

    /// Our tickets, one per node where we are in line.
    fn tickets(&self) -> impl Iterator<Item = u64> + '_ {
        self.places.iter().filter_map(|place| place.ticket)
    }

    /// The nodes we reached: in line there, or the key is ours.
    fn reached(&self) -> usize {
        self.places
            .iter()
            .filter(|place| place.granted.is_some() || place.renewed.is_some())
            .count()
    }

    /// The nodes where we stand in line with `ticket`, or the key is ours.
    fn holding(&self, ticket: u64) -> usize {
        self.places
            .iter()
            .filter(|place| place.granted.is_some() || place.ticket == Some(ticket))
            .count()
    }

    /// The highest ticket we are in line with now.
    fn highest(&self) -> Option<u64> {
        self.tickets().max()
    }

    /// A notice said `node` handed us the lock when our place there had `ticket`.
    ///
    /// It counts only where we stand in line with that very ticket, as far as our rounds' replies
    /// tell. A round of ours that ran there after the hand-off may have passed the key on, out of
    /// turn, to a waiter ahead of the ticket it offered (`round.lua`), and put us back
    /// in line with that offer; counting the notice then would make two holders (found by the
    /// model check, `tests/models/fair.rs`). Such a round either told us our new ticket, which
    /// differs (a node hands a waiter the key only while nobody is ahead of it, and a later
    /// waiter's ticket is higher, so only an offer above the old ticket passes the key on), or
    /// went unanswered. Every other notice needs a round to confirm it (so does one from a node
    /// no round of ours reached yet).
    pub(crate) fn handed(&mut self, node: usize, ticket: Option<u64>) {
        let Some(place) = self.places.get_mut(node) else {
            self.unconfirmed = true;
            return;
        };
        match place.renewed {
            Some(renewed) if ticket.is_some() && place.ticket == ticket && !place.unanswered => {
                place.ticket = None;
                place.renewed = None;
                place.granted = Some(renewed);
            }
            _ if place.granted.is_some() => {}
            _ => self.unconfirmed = true,
        }
    }

    /// With a quorum of keys ours, the moment from which all of them live at least an expiry.
    pub(crate) fn held_from(&self) -> Option<Instant> {
        let granted = self.places.iter().filter_map(|place| place.granted);
        let earliest = granted.clone().min();
        (granted.count() >= self.quorum)
            .then_some(earliest)
            .flatten()
    }

    /// Whether a grant came that only a round can confirm.
    pub(crate) fn unconfirmed(&self) -> bool {
        self.unconfirmed
    }

    /// The ticket our rounds offer: the one we stood in line with, or before we stood (or once
    /// we lost that standing) the highest we had anywhere, which all our places should carry.
    pub(crate) fn ticket(&self) -> Option<u64> {
        self.stood.or(self.last_ticket)
    }

    /// Whether some nodes, but fewer than a quorum, gave us the key: a split, or a hand-off
    /// still on its way.
    pub(crate) fn partial(&self) -> bool {
        let granted = self
            .places
            .iter()
            .filter(|place| place.granted.is_some())
            .count();
        granted > 0 && granted < self.quorum
    }

    /// What to do after a round that did not get the lock.
    pub(crate) fn next(&self) -> Next {
        let highest = self.highest();
        if self.reached() < self.quorum {
            Next::Retreat
        } else if self.stood.is_some() || self.tickets().all(|t| Some(t) == highest) {
            Next::Wait
        } else {
            Next::Align
        }
    }

    /// Forgets everything: after giving back what we had.
    pub(crate) fn clear(&mut self) {
        self.places.fill(OnNode::default());
        self.last_ticket = None;
        self.unconfirmed = false;
        self.stood = None;
    }
}

/// Each node's reply to a round, from its tally (which tracks nodes for rounds).
pub(super) fn replies(tally: &Tally) -> Vec<Reply> {
    let mut replies = vec![Reply::Unknown; tally.total];
    for &node in &tally.ours_nodes {
        replies[node] = Reply::Granted;
    }
    for failure in &tally.failures {
        if let NodeErrorKind::InLine { ticket } = failure.kind {
            replies[failure.node] = Reply::InLine { ticket };
        }
    }
    replies
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn line(ticket: u64) -> Reply {
        Reply::InLine { ticket }
    }

    #[test]
    fn a_quorum_of_keys_holds_from_the_earliest() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(4), line(4), line(4)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.held_from(), None);
        standing.round(t0 + 10 * MS, &[line(4), Reply::Unknown, Reply::Granted]);
        standing.handed(0, Some(4));
        // Node 0 was handed the lock for an entry renewed at t0 + 10 ms, node 2 granted then.
        assert_eq!(standing.held_from(), Some(t0 + 10 * MS));
    }

    #[test]
    fn a_grant_before_any_round_needs_a_round() {
        let mut standing = Standing::new(3, 2);
        standing.handed(1, Some(4));
        assert!(standing.unconfirmed());
        assert_eq!(standing.held_from(), None);
        assert!(!standing.partial());
        assert_eq!(standing.next(), Next::Retreat);
        standing.clear();
        assert!(!standing.unconfirmed());
    }

    #[test]
    fn a_handed_key_lives_from_the_renewal_it_was_handed_for() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(4), line(4), line(4)]);
        standing.round(t0 + 5 * MS, &[line(4), line(4), line(4)]);
        standing.handed(0, Some(4));
        standing.handed(1, Some(4));
        assert_eq!(standing.held_from(), Some(t0 + 5 * MS));
    }

    #[test]
    fn a_grant_from_a_node_whose_round_went_unanswered_needs_a_round() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(4), line(4), line(4)]);
        // The second round may have run on node 0 after a hand-off there and passed the key on.
        standing.round(t0 + 5 * MS, &[Reply::Unknown, line(4), line(4)]);
        standing.handed(0, Some(4));
        standing.handed(1, Some(4));
        assert_eq!(standing.held_from(), None, "node 0 cannot count");
        assert!(standing.unconfirmed());
        standing.round(t0 + 6 * MS, &[Reply::Granted, Reply::Granted, line(4)]);
        assert_eq!(standing.held_from(), Some(t0 + 6 * MS));
    }

    /// The model check's two holders: the holder's release hands node 0 to us while our tickets
    /// differ; our align round offers the higher ticket, so node 0 passes the key on to the
    /// waiter ahead of that offer and puts us back in line there; the notice of the first
    /// hand-off comes after the round's reply. It names the ticket our place had, 1, and our
    /// place there has 3 now: it does not count.
    #[test]
    fn a_grant_for_a_key_passed_on_since_does_not_count() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(1), line(3), line(3)]);
        assert_eq!(standing.next(), Next::Align);
        standing.round(t0 + MS, &[line(3), line(3), line(3)]);
        standing.handed(0, Some(1));
        assert_eq!(standing.held_from(), None);
        assert!(standing.unconfirmed(), "a round finds out");
        // A notice without a ticket (from an older release) never counts on its own either.
        standing.handed(1, None);
        assert_eq!(standing.held_from(), None);
        // The notice of a hand-off to our present place counts.
        standing.handed(1, Some(3));
        standing.handed(2, Some(3));
        assert_eq!(standing.held_from(), Some(t0 + MS));
    }

    /// Forged or stray notices: a grant counts only for the node that sent it (the hub's word,
    /// see `Hub::notice`), and only where our place there has the ticket it names; anything else
    /// at most calls for a round, which tells what the node really did.
    #[test]
    fn only_a_grant_for_our_place_on_that_node_counts() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(4), line(4), line(4)]);
        for forged in [Some(3), Some(5), Some(u64::MAX), None] {
            for node in 0..3 {
                standing.handed(node, forged);
            }
            assert_eq!(standing.held_from(), None, "{forged:?}");
            assert!(!standing.partial(), "{forged:?}");
            assert!(standing.unconfirmed(), "{forged:?}: a round finds out");
            standing.round(t0, &[line(4), line(4), line(4)]);
        }
        // One node's grant, heard over and over (copies of other nodes' grants published on
        // its channel), is one node of a quorum of two.
        for _ in 0..3 {
            standing.handed(0, Some(4));
        }
        assert_eq!(standing.held_from(), None);
        assert!(standing.partial(), "a round ends a split that lasts");
        // The round finds the key was never ours there.
        standing.round(t0 + MS, &[line(4), line(4), line(4)]);
        assert!(!standing.partial());
        assert_eq!(standing.next(), Next::Wait);
        standing.handed(1, Some(4));
        standing.handed(2, Some(4));
        assert_eq!(standing.held_from(), Some(t0 + MS));
    }

    #[test]
    fn a_grant_without_a_known_renewal_needs_a_round() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(1), Reply::Unknown, line(1)]);
        standing.handed(1, Some(1));
        assert!(standing.unconfirmed());
        standing.handed(0, Some(1));
        assert_eq!(standing.held_from(), None, "node 1 cannot count");
        standing.round(t0 + MS, &[Reply::Granted, Reply::Granted, line(1)]);
        assert!(!standing.unconfirmed());
        assert_eq!(standing.held_from(), Some(t0 + MS));
    }

    #[test]
    fn places_with_different_tickets_are_aligned_to_the_highest() {
        let t0 = Instant::now();
        let mut standing = Standing::new(5, 3);
        // Joined alongside another waiter: two nodes took the other one first.
        standing.round(t0, &[line(7), line(8), line(7), line(8), Reply::Unknown]);
        assert_eq!(standing.next(), Next::Align);
        assert_eq!(standing.ticket(), Some(8));
        standing.round(
            t0 + MS,
            &[line(8), line(8), line(8), line(8), Reply::Unknown],
        );
        assert_eq!(standing.next(), Next::Wait);
    }

    #[test]
    fn a_waiter_reaching_a_minority_retreats() {
        let t0 = Instant::now();
        let mut standing = Standing::new(5, 3);
        let down = Reply::Unknown;
        standing.round(t0, &[line(2), Reply::Granted, down, down, down]);
        assert_eq!(standing.next(), Next::Retreat, "two of five");
        standing.clear();
        assert_eq!(standing.ticket(), None);
        standing.round(t0 + MS, &[line(2), Reply::Granted, line(2), down, down]);
        assert_eq!(standing.next(), Next::Wait);
    }

    #[test]
    fn some_keys_but_no_quorum_is_partial_and_the_ticket_is_remembered() {
        let t0 = Instant::now();
        let mut standing = Standing::new(5, 3);
        standing.round(t0, &[line(6); 5]);
        assert!(!standing.partial());
        standing.handed(0, Some(6));
        standing.handed(1, Some(6));
        assert!(standing.partial(), "two of five handed over");
        standing.handed(2, Some(6));
        assert!(!standing.partial());
        assert_eq!(standing.held_from(), Some(t0));
        // Every key ours: the ticket is still known, for a round that must pass keys on.
        standing.handed(3, Some(6));
        standing.handed(4, Some(6));
        assert_eq!(standing.ticket(), Some(6));
    }

    #[test]
    fn losing_a_key_is_forgotten() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[Reply::Granted, Reply::Granted, line(3)]);
        assert_eq!(standing.held_from(), Some(t0));
        // Node 1's key expired and the node took us into its line again, behind others.
        standing.round(t0 + MS, &[Reply::Granted, line(5), line(3)]);
        assert_eq!(standing.held_from(), None);
        // A key and a place with our ticket still make a quorum: we keep that ticket.
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.ticket(), Some(3));
    }

    #[test]
    fn a_key_whose_round_went_unanswered_no_longer_counts() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[Reply::Granted, line(1), line(1)]);
        standing.handed(1, Some(1));
        assert_eq!(standing.held_from(), Some(t0));
        // A renewal lands late on node 0, or never: it may pass the key on there.
        standing.round(t0 + MS, &[Reply::Unknown, Reply::Granted, line(1)]);
        assert_eq!(standing.held_from(), None);
        assert!(standing.partial());
        standing.round(t0 + 2 * MS, &[Reply::Granted, Reply::Granted, line(1)]);
        assert_eq!(standing.held_from(), Some(t0 + 2 * MS));
    }

    #[test]
    fn a_waiter_that_stood_keeps_its_ticket_when_a_late_reply_shows_a_higher_one() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        // The join: node 0's reply is missed; nodes 1 and 2 gave ticket 1.
        standing.round(t0, &[Reply::Unknown, line(1), line(1)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.ticket(), Some(1));
        // Node 0 had given us 2 (another waiter took 1 there first). Moving back to 2 everywhere
        // could put us behind a waiter that joined after we stood: we stay, and offer 1.
        standing.round(t0 + MS, &[line(2), line(1), line(1)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.ticket(), Some(1));
        standing.round(t0 + 2 * MS, &[line(2), line(1), Reply::Unknown]);
        assert_eq!(
            standing.next(),
            Next::Wait,
            "what node 2 said last still counts"
        );
    }

    #[test]
    fn a_lower_ticket_heard_late_is_moved_to_the_one_we_stood_with() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[Reply::Unknown, line(3), line(3)]);
        standing.round(t0 + MS, &[line(1), line(3), line(3)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(
            standing.ticket(),
            Some(3),
            "the offer moves node 0 back to 3"
        );
    }

    #[test]
    fn keys_handed_to_us_count_with_the_places_we_stood_in() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(1), line(1), Reply::Unknown]);
        standing.handed(0, Some(1));
        standing.round(t0 + MS, &[Reply::Granted, Reply::Unknown, line(4)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.ticket(), Some(1));
    }

    #[test]
    fn a_waiter_whose_places_with_its_ticket_are_no_quorum_aligns_again() {
        let t0 = Instant::now();
        let mut standing = Standing::new(3, 2);
        standing.round(t0, &[line(1), line(1), Reply::Unknown]);
        assert_eq!(standing.ticket(), Some(1));
        // Node 1 forgot us (a restart, say) and put us at 5; node 2 has us at 4.
        standing.round(t0 + MS, &[line(1), line(5), line(4)]);
        assert_eq!(standing.next(), Next::Align);
        assert_eq!(standing.ticket(), Some(5));
        standing.round(t0 + 2 * MS, &[line(5), line(5), line(5)]);
        assert_eq!(standing.next(), Next::Wait);
        assert_eq!(standing.ticket(), Some(5));
        standing.clear();
        assert_eq!(standing.ticket(), None, "a retreat forgets the ticket");
    }
}
