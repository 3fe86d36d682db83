//! Fair waiting (`Mutex::with_fair`): one line per name across every client, served in the order
//! the waiters joined it, where a release wakes only the waiter whose turn it is.
//!
//! # The protocol
//! Every node keeps a line per name (see `scripts` and its `.lua` files): waiters' lock values scored by tickets,
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
//!   land and pass it on). The model check (`tests/models/fair.rs`) found two holders without
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
//!   its highest ticket and stands anew. `tests/models/fair.rs` checks order and exclusion in
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
//! `tests/suite/fair.rs` (`a_newcomer_leaves_a_free_lock_to_the_line`) fails if the line is ignored.
//!
//! Waiting costs one round to join (the first attempt, which fails, is that round; after a plain
//! entry, the round right after it) and nothing to be served; a waiter renews its place every third of the expiry. A key that expires without a
//! release (its holder crashed) hands nothing: the head finds the lock free at its next round.

pub(crate) mod scripts;
mod standing;

use std::time::Instant;

use crate::engine::delay::FOREVER;
use crate::engine::quorum::validity;
use crate::engine::request::Op;
use crate::engine::resource::Resource;
use crate::engine::settings::Plan;
use crate::engine::tally::Tally;
use crate::waiting::hub::{Subscribing, Turn};
use crate::waiting::listeners::Listeners;

use super::Resume;
use super::wait::until;
use scripts::{TICKET_LIMIT, fingerprint};
use standing::{Next, Standing, replies};

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
    /// When the call stops waiting: as long as a polling `lock()` would wait between its tries,
    /// and no later than its maximum wait. Drawn when first needed: a plain entry that gets the
    /// lock never needs it.
    gives_up_at: Option<Instant>,
    /// The end of the call's maximum wait, if it has one.
    deadline: Option<Instant>,
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
    /// waiters ahead of us (see `round.lua`), which ends a split.
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
        deadline: Option<Instant>,
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
            deadline,
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
        Op::Round {
            ticket,
            client: self.listeners.client(),
        }
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

    /// When the call stops waiting, drawn on first use: where only a maximum wait bounds the
    /// call (its tries are `u32::MAX`), the delays are not drawn at all.
    fn gives_up_at(&mut self) -> Instant {
        let (plan, tries, began, deadline) = (self.plan, self.tries, self.began, self.deadline);
        *self.gives_up_at.get_or_insert_with(|| {
            let budget = match (tries, deadline) {
                (u32::MAX, Some(_)) => FOREVER,
                _ => plan.retry_delays_total(tries.saturating_sub(1)),
            };
            let end = began + budget.min(FOREVER);
            deadline.map_or(end, |deadline| end.min(deadline))
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
                tokio::time::sleep_until(until(delay, self.deadline)).await;
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
                tokio::time::sleep_until(due.min(until(delay, self.deadline))).await;
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
