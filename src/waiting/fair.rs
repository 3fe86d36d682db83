//! Fair waiting (`Mutex::with_fair`): one line per name across every client, served in the order
//! the waiters joined it, where a release wakes only the waiter whose turn it is.
//!
//! # The protocol
//! Every node keeps a line per name (see `scripts::fair`): waiters' lock values scored by tickets,
//! each entry expiring unless its waiter renews it. A waiter's *round*, sent to every node at once,
//! takes the lock on a node where it is free and nobody is ahead in line (or where it was handed
//! to us), and otherwise joins the line, or renews its place. A node gives a new waiter a ticket
//! above every ticket it gave before: the one the waiter offers (one above the highest its client
//! heard of), or the next free one if others took that meanwhile. A waiter whose tickets differ
//! between nodes (it joined alongside others) moves its places back to its highest ticket in one
//! more round, so that every node orders the waiters the same way (ties by value). Once every node
//! it reached, a quorum, gave it one ticket, it *stands* with that ticket: its rounds offer it
//! from then on, and a node that turns out to have given it a higher one (a reply it missed)
//! keeps it there, further back on that node only.
//!
//! A release hands the lock to the head of the node's line at once: the node sets the key to the
//! head's value for what is left of the head's entry, and publishes a notice that names the head
//! (by the SHA1 of its value). Only the head's client wakes, only the head's call in it; once a
//! quorum of nodes handed it the lock, it holds the lock without sending anything.
//!
//! A call whose client saw nobody wait for the name lately (see `Hub::knows`) first tries a
//! plain entry instead of a round: `SET NX` and, in the same write, `EXISTS` on the line (see
//! `Target::entry`), which costs the nodes no script. A node counts for the entry only where the
//! `SET` took the key and no line stood there; elsewhere the entry leaves what it took to the line
//! (its release hands the key to the head) and the call joins the line with a round at once.
//!
//! # Why it is safe, and fair
//! - *Mutual exclusion* is the mutex's: a node's key holds one value at a time, whoever set it, and
//!   a holder needs a quorum of keys. A handed key lives until the head's entry would have expired:
//!   the waiter renewed that entry in a round that began at a moment it knows, so it knows how long
//!   each handed key lives without asking, and counts validity from there (expiry minus drift, as
//!   for any lock). Fair waiting only adds reasons to refuse; it never sets a key a plain acquire
//!   would not, except to the head, which is then the only one that can hold it there. What a
//!   waiter counts as its keys must be its keys: a grant notice names the ticket of the place it
//!   was handed for, and counts only where our place has that ticket still (a round of ours may
//!   have passed that key on since, out of turn, see `Standing::handed`); a waiter that retreats
//!   joins again with a fresh value, so that notices of hand-offs it gave back cannot count for
//!   its new places; and a key whose round went unanswered no longer counts (the round may still
//!   land and pass it on). The model check (`tests/model_fair.rs`) found two holders without
//!   each of these three.
//! - *No overtaking.* Say waiter A stands on a quorum `QA` with ticket `a` before waiter C begins
//!   to join. Every node of `QA` has given ticket `a`, so it gives C a ticket above `a`, and C only
//!   ever moves back: C is behind A on every node of `QA`. A offers `a` from then on, so it stays
//!   at `a` there, even when a node outside `QA` turns out to have given it a higher ticket (its
//!   reply was missed): moving back to that one everywhere could put A behind C. To get the lock,
//!   C needs a quorum of nodes that hand or grant it to C, so at least one node of `QA`, where the
//!   live A is ahead. So C cannot hold before A has held, as long as A renews its entries (a live
//!   waiter does, every third of the expiry) and nodes keep their data. A waiter that is in line
//!   on a minority only has no such claim: it was never in line for a quorum; nor has one whose
//!   places with its ticket (and keys) no longer make a quorum (a node forgot it): it aligns to
//!   its highest ticket and stands anew. `tests/model_fair.rs` checks order and exclusion in
//!   small configurations, with late and lost replies.
//! - *Progress.* Once tickets agree, the first live waiter standing on a quorum is first in line
//!   on every node where it stands, so every release there hands it the lock. A waiter that reaches
//!   fewer than a quorum of nodes cannot be served and would hold others up where it was handed the
//!   lock: it gives back what it was handed and tries again later. A waiter that crashed stops
//!   renewing; its entries expire after one expiry, and the line moves on.
//!
//! The entry cannot overtake a waiter W that stood on a quorum before it: on every node of W's
//! quorum, W's entry was there before the `SET` and stays until W is served (then W holds the key
//! there, and the `SET` fails) or stops renewing, so the `EXISTS` behind the `SET` sees it. The
//! nodes where the entry counts are outside W's quorum: fewer than a quorum.
//! `tests/fair.rs` (`a_newcomer_leaves_a_free_lock_to_the_line`) fails if the line is ignored.
//!
//! Waiting costs one round to join (the first attempt, which fails, is that round; after a plain
//! entry, the round right after it) and nothing to be served; a waiter renews its place every third of the expiry. A key that expires without a
//! release (its holder crashed) hands nothing: the head finds the lock free at its next round.

use std::time::{Duration, Instant};

use crate::engine::delay::FOREVER;
use crate::engine::quorum::validity;
use crate::engine::request::Op;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::error::NodeErrorKind;
use crate::hub::{Subscribing, Turn};
use crate::waiting::fair::scripts::{TICKET_LIMIT, fingerprint};
use crate::waiting::listeners::Listeners;

use super::Resume;

pub(crate) mod scripts;

/// What one waiter knows of its standing on each node, and since when. Pure: times are passed in.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    /// Nodes whose agreement holds the lock.
    quorum: usize,
    /// Per node: the start of the last round that renewed our entry there, while we are in line
    /// there. The entry lives at least an expiry from that moment.
    renewed: Vec<Option<Instant>>,
    /// Per node: our ticket there, while we are in line there.
    tickets: Vec<Option<u64>>,
    /// The highest ticket we had anywhere: our ticket still once every node handed us the key.
    last_ticket: Option<u64>,
    /// Per node: a moment from which the key holding our value there lives at least an expiry:
    /// the start of the round that took or extended it, or, for a key handed to us, the renewal
    /// of the entry it was handed for.
    granted: Vec<Option<Instant>>,
    /// A grant notice came that only a round can confirm.
    unconfirmed: bool,
    /// Per node: our last round there went unanswered. It may have run, and passed on a key
    /// handed to us there before it; so a grant notice from that node waits for a definite reply.
    unanswered: Vec<bool>,
    /// The ticket we stood in line with, once every node we reached (a quorum) gave us the same
    /// one. Our rounds offer it from then on, so that we never move back behind a waiter that
    /// joined after we stood; a node that reports a higher ticket keeps us there.
    stood: Option<u64>,
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
            renewed: vec![None; nodes],
            tickets: vec![None; nodes],
            last_ticket: None,
            granted: vec![None; nodes],
            unconfirmed: false,
            unanswered: vec![false; nodes],
            stood: None,
        }
    }

    /// Takes in the replies of a round that began at `started`.
    pub(crate) fn round(&mut self, started: Instant, replies: &[Reply]) {
        self.unconfirmed = false;
        for (node, reply) in replies.iter().enumerate() {
            self.unanswered[node] = *reply == Reply::Unknown;
            match *reply {
                Reply::Granted => {
                    self.granted[node] = Some(started);
                    self.renewed[node] = None;
                    self.tickets[node] = None;
                }
                Reply::InLine { ticket } => {
                    self.granted[node] = None;
                    self.renewed[node] = Some(started);
                    self.tickets[node] = Some(ticket);
                    self.last_ticket = self.last_ticket.max(Some(ticket));
                }
                // Whatever the round did there may or may not have happened, and may still
                // happen: a place in line only moves back, so what we knew still bounds it; but
                // a key of ours there may be passed on by the round (someone ahead of our
                // offer, see `scripts::fair::ROUND`), so it no longer counts.
                Reply::Unknown => self.granted[node] = None,
            }
        }
        let highest = self.highest();
        self.stood = match self.stood {
            // Where we stand with that ticket, waiters that joined after we stood are behind
            // us; while those nodes (or keys we hold) are a quorum, any quorum a later waiter
            // needs includes one of them.
            Some(ticket) if self.holding(ticket) >= self.quorum => Some(ticket),
            _ if self.reached() >= self.quorum
                && self.tickets.iter().flatten().all(|&t| Some(t) == highest) =>
            {
                highest
            }
            _ => None,
        };
    }

    /// The nodes we reached: in line there, or the key is ours.
    fn reached(&self) -> usize {
        (0..self.granted.len())
            .filter(|&node| self.granted[node].is_some() || self.renewed[node].is_some())
            .count()
    }

    /// The nodes where we stand in line with `ticket`, or the key is ours.
    fn holding(&self, ticket: u64) -> usize {
        (0..self.granted.len())
            .filter(|&node| self.granted[node].is_some() || self.tickets[node] == Some(ticket))
            .count()
    }

    /// The highest ticket we are in line with now.
    fn highest(&self) -> Option<u64> {
        self.tickets.iter().flatten().copied().max()
    }

    /// A notice said `node` handed us the lock when our place there had `ticket`.
    ///
    /// It counts only where we stand in line with that very ticket, as far as our rounds' replies
    /// tell. A round of ours that ran there after the hand-off may have passed the key on, out of
    /// turn, to a waiter ahead of the ticket it offered (`scripts::fair::ROUND`), and put us back
    /// in line with that offer; counting the notice then would make two holders (found by the
    /// model check, `tests/model_fair.rs`). Such a round either told us our new ticket, which
    /// differs (a node hands a waiter the key only while nobody is ahead of it, and a later
    /// waiter's ticket is higher, so only an offer above the old ticket passes the key on), or
    /// went unanswered. Every other notice needs a round to confirm it.
    pub(crate) fn handed(&mut self, node: usize, ticket: Option<u64>) {
        match self.renewed[node] {
            Some(renewed)
                if ticket.is_some() && self.tickets[node] == ticket && !self.unanswered[node] =>
            {
                self.tickets[node] = None;
                self.renewed[node] = None;
                self.granted[node] = Some(renewed);
            }
            _ if self.granted[node].is_some() => {}
            _ => self.unconfirmed = true,
        }
    }

    /// With a quorum of keys ours, the moment from which all of them live at least an expiry.
    pub(crate) fn held_from(&self) -> Option<Instant> {
        let granted: Vec<Instant> = self.granted.iter().flatten().copied().collect();
        (granted.len() >= self.quorum)
            .then(|| granted.into_iter().min())
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
        let granted = self.granted.iter().flatten().count();
        granted > 0 && granted < self.quorum
    }

    /// What to do after a round that did not get the lock.
    pub(crate) fn next(&self) -> Next {
        let highest = self.highest();
        if self.reached() < self.quorum {
            Next::Retreat
        } else if self.stood.is_some() || self.tickets.iter().flatten().all(|&t| Some(t) == highest)
        {
            Next::Wait
        } else {
            Next::Align
        }
    }

    /// Forgets everything: after giving back what we had.
    pub(crate) fn clear(&mut self) {
        self.renewed.iter_mut().for_each(|r| *r = None);
        self.unanswered.iter_mut().for_each(|u| *u = false);
        self.tickets.iter_mut().for_each(|t| *t = None);
        self.last_ticket = None;
        self.granted.iter_mut().for_each(|g| *g = None);
        self.unconfirmed = false;
        self.stood = None;
    }
}

/// Each node's reply to a round, from its tally (which tracks nodes for rounds).
fn replies(tally: &Tally) -> Vec<Reply> {
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

/// One `lock()` call's fair waiting.
pub(crate) struct FairWait<'a> {
    resource: &'a Resource,
    listeners: &'a Listeners,
    plan: &'a Plan,
    standing: Standing,
    /// What to do after the last round.
    next: Next,
    /// Our slot in the client's hub: grant notices and hints. `None` without listeners.
    turn: Option<Turn>,
    /// The subscription to the name's notices, when this call started it: one more round once it
    /// is confirmed catches a hand-off that came before.
    subscribing: Option<Subscribing>,
    /// The fingerprint of the value of the current (or next) round: grant notices name us by it.
    fingerprint: String,
    /// When the call stops waiting: as long as a polling `lock()` would wait between its tries.
    /// Drawn when first needed: a plain entry that gets the lock never needs it.
    gives_up_at: Option<Instant>,
    /// When the call began, and how many tries it has: what `gives_up_at` is drawn from.
    began: Instant,
    tries: u32,
    /// When the last round began: a renewal is due a third of the expiry later.
    last_round: Instant,
    /// The first attempt is a plain entry (`Op::Enter`): this client saw nobody wait for the
    /// name lately, so it is likely free with nobody in line. Cleared once sent.
    enter: bool,
    /// The last attempt was an entry that did not get the lock: a round at once joins the line.
    entered: bool,
    /// Since when some nodes, but fewer than a quorum, gave us the key. A hand-off reaches every
    /// node within a node timeout; after that, a round passes keys we hold out of turn to the
    /// waiters ahead of us (see `scripts::fair::ROUND`), which ends a split.
    partial_since: Option<Instant>,
}

/// A waiter renews its place this many times per expiry, so a renewal is done well before the
/// place could expire, even with a slow node.
const RENEWALS_PER_EXPIRY: u32 = 3;

impl<'a> FairWait<'a> {
    pub(crate) fn new(
        resource: &'a Resource,
        listeners: &'a Listeners,
        plan: &'a Plan,
        tries: u32,
    ) -> FairWait<'a> {
        let nodes = resource.nodes().len();
        let now = Instant::now();
        FairWait {
            resource,
            listeners,
            plan,
            standing: Standing::new(nodes, resource.target().quorum(nodes)),
            next: Next::Wait,
            turn: None,
            subscribing: None,
            fingerprint: String::new(),
            gives_up_at: None,
            began: now,
            tries,
            last_round: now,
            partial_since: None,
            enter: listeners
                .running_hub()
                .is_none_or(|hub| !hub.knows(resource.name())),
            entered: false,
        }
    }

    /// An attempt with `value` begins.
    pub(crate) fn attempt_starts(&mut self, value: &str) {
        if self.enter {
            // Grant notices name a waiter in line; an entry is in no line.
            return;
        }
        let fingerprint = fingerprint(value);
        if fingerprint != self.fingerprint {
            if let Some(turn) = &mut self.turn {
                turn.rename(&fingerprint);
            }
            self.fingerprint = fingerprint;
        }
    }

    /// The attempt's request. First, while this client saw nobody wait for the name lately, a
    /// plain entry. Then rounds: in line, our highest ticket (so every place carries it); joining,
    /// one above every ticket this client heard of, which nodes take as it is unless others took
    /// it meanwhile.
    pub(crate) fn op(&mut self) -> Op {
        if std::mem::take(&mut self.enter) {
            return Op::Enter;
        }
        let ticket = match self.standing.ticket() {
            Some(ticket) => ticket,
            None => self.heard(0).saturating_add(1).min(TICKET_LIMIT),
        };
        Op::Round { ticket }
    }

    /// The highest ticket this client heard of for the name, counting `seen`.
    fn heard(&self, seen: u64) -> u64 {
        match self.listeners.running_hub() {
            Some(hub) => hub.latest_ticket(self.resource.name(), seen),
            None => seen,
        }
    }

    /// Takes in a round's replies; whether what the round set stays (our places in line, and keys
    /// handed to us). On the last round nothing stays: the call leaves the line.
    pub(crate) fn observe(&mut self, tally: &Tally, started: Instant, last: bool, op: Op) -> bool {
        if op == Op::Enter {
            // An entry stands nowhere in line; a key it took where a line stands belongs to that
            // line, so whatever it set is released before the round that joins.
            self.entered = true;
            return false;
        }
        self.last_round = started;
        self.standing.round(started, &replies(tally));
        if let Some(ticket) = self.standing.ticket() {
            self.heard(ticket);
        }
        self.next = self.standing.next();
        self.note_partial();
        let keep = !last && self.next != Next::Retreat;
        if !keep {
            self.standing.clear();
        }
        keep
    }

    /// Whether the last round reached fewer than a quorum of nodes, so the call left the line.
    pub(crate) fn retreated(&self) -> bool {
        self.next == Next::Retreat
    }

    /// Whether the call must stop: its waiting time is up.
    pub(crate) fn is_last(&mut self) -> bool {
        if self.enter && self.tries > 1 {
            return false;
        }
        Instant::now() >= self.gives_up_at()
    }

    /// When the call stops waiting, drawn on first use.
    fn gives_up_at(&mut self) -> Instant {
        let (plan, tries, began) = (self.plan, self.tries, self.began);
        *self.gives_up_at.get_or_insert_with(|| {
            let budget: Duration = plan.retry_delays_total(tries.saturating_sub(1));
            began + budget.min(FOREVER)
        })
    }

    /// Waits until a round is due, or a quorum of nodes handed us the lock.
    pub(crate) async fn wait(&mut self) -> Resume {
        if std::mem::take(&mut self.entered) {
            return Resume::Attempt;
        }
        match self.next {
            Next::Align => return Resume::Attempt,
            Next::Retreat => {
                let delay = self.plan.retry_delay_after(1);
                tokio::time::sleep(delay).await;
                return Resume::Attempt;
            }
            Next::Wait => {}
        }
        if self.turn.is_none() {
            self.join();
        }
        if let Some(subscribing) = self.subscribing.take() {
            subscribing.confirmed(self.plan.node_timeout).await;
            return Resume::Attempt;
        }
        let renewal = self.last_round + self.plan.expiry / RENEWALS_PER_EXPIRY;
        let mut due = renewal.min(self.gives_up_at());
        loop {
            if let Some(resume) = self.news() {
                return resume;
            }
            if let Some(since) = self.partial_since {
                due = due.min(since + self.plan.node_timeout);
            }
            let due = tokio::time::Instant::from(due);
            let Some(turn) = &self.turn else {
                // No listeners (connections the caller built): nobody tells us of a hand-off,
                // so a round every retry delay finds it.
                let delay = self.plan.retry_delay_after(1);
                let poll = tokio::time::Instant::now() + delay.min(FOREVER);
                tokio::time::sleep_until(due.min(poll)).await;
                return Resume::Attempt;
            };
            tokio::select! {
                () = tokio::time::sleep_until(due) => return Resume::Attempt,
                () = turn.notified() => {}
            }
        }
    }

    /// What the notices since the last look mean: the lock is ours, a round is due, or nothing.
    fn news(&mut self) -> Option<Resume> {
        let turn = self.turn.as_ref()?;
        let (handed, freed) = turn.take_news();
        for grant in handed {
            self.standing.handed(grant.node, grant.ticket);
        }
        self.note_partial();
        if let Some(from) = self.standing.held_from() {
            let left = validity(self.plan.expiry, from.elapsed(), self.plan.drift_factor);
            return Some(match left {
                Some(left) => Resume::Granted(Instant::now() + left),
                // Handed too late to use: a round extends what is ours.
                None => Resume::Attempt,
            });
        }
        (freed || self.standing.unconfirmed()).then_some(Resume::Attempt)
    }

    /// Starts or stops the clock of a partial hand-off.
    fn note_partial(&mut self) {
        if !self.standing.partial() {
            self.partial_since = None;
        } else if self.partial_since.is_none() {
            self.partial_since = Some(Instant::now());
        }
    }

    /// Takes a slot in the client's hub for the name, and subscribes to its notices.
    fn join(&mut self) {
        let Some(hub) = self.listeners.hub() else {
            return;
        };
        let (turn, subscribing) = hub.take_turn(self.resource.name(), &self.fingerprint);
        self.turn = Some(turn);
        self.subscribing = subscribing;
    }
}

#[cfg(test)]
mod tests {
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
