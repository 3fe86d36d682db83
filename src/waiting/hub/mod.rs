//! Wake-up on release: the release notices a client hears, and its waiters' places in line.
//!
//! A release script of a mutex with wake-up on release publishes the released value on
//! `redmutex:released:<name>` on each node where it deleted the key. A [`Hub`] per
//! [`Redlock`](crate::Redlock) hears them through one listener connection per node, and keeps a
//! [`Line`] per name somebody waits on: the line decides whom a notice wakes. A waiter holds a
//! [`Place`] from its first wait to the end of its `lock()` call.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::waiting::hub::line::{Line, WaiterId};

pub(crate) mod line;
mod place;
mod turn;
mod watcher;

use crate::nodes::listener::{Command, NoticeSink, Topic};
use crate::waiting::fair::scripts::GRANT_MARK;
pub(crate) use place::Place;
pub(crate) use turn::Turn;
pub(crate) use watcher::Watcher;

/// How long a name stays subscribed after its last waiter left. Waiters on a busy name come and
/// go; each fresh subscription costs a round trip and one extra attempt (see `waiting`).
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// How often each listener asks the hub to sweep. A name goes at the first sweep after its linger
/// ran out, so a sweep every `LINGER` left names subscribed for up to twice the linger; a fifth of
/// it bounds that at 1.2 times the linger, for a pass over the names map a second per listener
/// (one per node).
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Release notices received, and who waits for them, per name.
pub(crate) struct Hub {
    pub(crate) quorum: usize,
    pub(crate) nodes: usize,
    pub(crate) state: std::sync::Mutex<State>,
    /// One per node's listener.
    pub(crate) commands: Vec<mpsc::UnboundedSender<Command>>,
}

#[derive(Default)]
pub(crate) struct State {
    names: HashMap<Arc<str>, Waiters>,
    /// How to wake each waiter of every name.
    wakers: HashMap<WaiterId, Arc<Notify>>,
    next_id: WaiterId,
    /// How many times a listener (re)connected, and so asked what to listen for: notices
    /// published while it was away are lost, and the waiters' marks they took with them too (see
    /// `waiting::notices`).
    pub(crate) connects: u64,
}

/// This client's waiters for one name.
struct Waiters {
    /// Those woken by release notices (wake-up on release).
    line: Line,
    /// Those in the fair line, by the fingerprint of their value (see `waiting::fair`).
    turns: HashMap<String, Handed>,
    /// Hand-offs to fingerprints nobody here claimed: a call whose round joined the line a moment
    /// ago claims them when it takes its turn.
    unclaimed: VecDeque<(String, Grant)>,
    /// The highest ticket the name's notices mentioned.
    latest_ticket: u64,
    /// Since when nobody waits.
    idle_since: Option<Instant>,
    /// The name's subscription: a notice published before it is in place is lost.
    subscription: Subscribing,
    /// The subscription to the fair line's grants of the name to this client (see
    /// `nodes::listener::grant_channel`), made by the first fair waiter.
    grants: Option<Subscribing>,
    /// Those told of every notice, who take no turn (see [`Watcher`]).
    watchers: Vec<WaiterId>,
}

/// What the notices told one fair waiter since it last looked.
struct Handed {
    id: WaiterId,
    /// The hand-offs to it.
    nodes: Vec<Grant>,
    /// A node freed the lock without handing it to anyone: a round may find it free.
    freed: bool,
}

/// A hand-off a node's notice told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub node: usize,
    /// The ticket the waiter's place had there when the node handed it the lock; `None` from
    /// releases that do not say (redmutex before it did).
    pub ticket: Option<u64>,
}

/// How many unclaimed hand-offs a name remembers.
const UNCLAIMED: usize = 16;

/// The highest ticket counter a notice may name and still be heard as a hint (2^32). A node's
/// counter grows by one per waiter that joins while the line lives, and the line's keys go
/// when its last entry does: no line lives through four billion joins. A higher counter comes
/// from somebody else's `PUBLISH`, and taken as a hint it would make our next joiner offer a
/// ticket near what the nodes can hold exactly (`fair::scripts::TICKET_LIMIT`), or past it. An
/// ignored hint costs at most one round: the nodes give the joiner the next free ticket.
const HINT_LIMIT: u64 = 1 << 32;

impl Waiters {
    fn new(nodes: usize, quorum: usize, subscription: Subscribing) -> Waiters {
        Waiters {
            line: Line::new(nodes, quorum),
            turns: HashMap::new(),
            unclaimed: VecDeque::new(),
            latest_ticket: 0,
            idle_since: None,
            subscription,
            grants: None,
            watchers: Vec::new(),
        }
    }

    /// Notes the time if nobody waits any more.
    fn left(&mut self, now: Instant) {
        if !self.line.has_waiters() && self.turns.is_empty() && self.watchers.is_empty() {
            self.idle_since = Some(now);
        }
    }
}

impl State {
    /// Wakes the waiter a line named, if any.
    fn wake(&self, woken: Option<WaiterId>) {
        if let Some(wake) = woken.and_then(|id| self.wakers.get(&id)) {
            // A wake-up before the waiter awaits it leaves a permit, so none is lost.
            wake.notify_one();
        }
    }

    /// A new waiter's id, and how to wake it.
    fn new_waiter(&mut self) -> (WaiterId, Arc<Notify>) {
        let id = self.next_id;
        self.next_id += 1;
        let wake = Arc::new(Notify::new());
        self.wakers.insert(id, Arc::clone(&wake));
        (id, wake)
    }
}

impl Hub {
    /// Whether the listener tasks still run: they end only when the hub is dropped, or when the
    /// runtime they ran on shut down.
    pub(crate) fn listening(&self) -> bool {
        self.commands.iter().all(|commands| !commands.is_closed())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is left consistent at every step, so a panic elsewhere does not spoil it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The waiters of `name`, subscribing the nodes to its notices if nobody listened for it.
    fn waiters<'s>(
        &self,
        state: &'s mut State,
        name: &Arc<str>,
        subscribing: &mut Option<Subscribing>,
    ) -> &'s mut Waiters {
        let waiters = state.names.entry(Arc::clone(name)).or_insert_with(|| {
            let subscription = self.subscribe(Topic::Notices(Arc::clone(name)));
            *subscribing = Some(subscription.clone());
            Waiters::new(self.nodes, self.quorum, subscription)
        });
        waiters.idle_since = None;
        waiters
    }

    /// Puts a waiter for `name` in line, counting notices received after `since`. Subscribes the
    /// nodes to the name if nobody listened for it; then the returned `Subscribing` resolves once
    /// they confirmed.
    pub(crate) fn join(
        self: &Arc<Self>,
        name: &Arc<str>,
        since: Instant,
    ) -> (Place, Option<Subscribing>) {
        let mut state = self.state();
        self.sweep_at(&mut state, Instant::now());
        let (id, wake) = state.new_waiter();
        let mut subscribing = None;
        let woken = self
            .waiters(&mut state, name, &mut subscribing)
            .line
            .join(id, since);
        state.wake(woken);
        drop(state);
        let place = Place {
            hub: Arc::clone(self),
            name: Arc::clone(name),
            id,
            wake,
            done: false,
        };
        (place, subscribing)
    }

    /// Registers a fair waiter of `name`, named by `fingerprint` in hand-off notices, and
    /// subscribes like [`join`](Hub::join), to the name's grants to this client too. Unlike
    /// `join`, it returns the subscriptions to every waiter that comes while they are on their
    /// way, not only to the one that started them: a hand-off to any of them may have been
    /// published before the nodes listened, and only a fair waiter's next round, a third of the
    /// expiry later, would find it.
    pub(crate) fn take_turn(
        self: &Arc<Self>,
        name: &Arc<str>,
        fingerprint: &str,
    ) -> (Turn, Option<Subscribing>) {
        let mut state = self.state();
        self.sweep_at(&mut state, Instant::now());
        let (id, wake) = state.new_waiter();
        let mut subscribing = None;
        let waiters = self.waiters(&mut state, name, &mut subscribing);
        let grants = waiters
            .grants
            .get_or_insert_with(|| self.subscribe(Topic::Grants(Arc::clone(name))))
            .clone();
        let pending: Vec<Subscribing> = [waiters.subscription.clone(), grants]
            .into_iter()
            .filter(|subscription| !subscription.is_confirmed())
            .collect();
        subscribing = Subscribing::all(pending);
        let mut handed = Handed {
            id,
            nodes: Vec::new(),
            freed: false,
        };
        claim(&mut waiters.unclaimed, fingerprint, &mut handed);
        waiters.turns.insert(fingerprint.to_owned(), handed);
        drop(state);
        let turn = Turn {
            hub: Arc::clone(self),
            name: Arc::clone(name),
            fingerprint: fingerprint.to_owned(),
            id,
            wake,
        };
        (turn, subscribing)
    }

    /// A watcher of `name`'s notices (see [`Watcher`]), subscribing like [`join`](Hub::join).
    pub(crate) fn watch(self: &Arc<Self>, name: &Arc<str>) -> (Watcher, Option<Subscribing>) {
        let mut state = self.state();
        self.sweep_at(&mut state, Instant::now());
        let (id, wake) = state.new_waiter();
        let mut subscribing = None;
        self.waiters(&mut state, name, &mut subscribing)
            .watchers
            .push(id);
        drop(state);
        let watcher = Watcher {
            hub: Arc::clone(self),
            name: Arc::clone(name),
            id,
            wake,
        };
        (watcher, subscribing)
    }

    /// Asks every listener to subscribe to `topic`.
    fn subscribe(&self, topic: Topic) -> Subscribing {
        let confirmations = FuturesUnordered::new();
        for commands in &self.commands {
            let (sender, receiver) = oneshot::channel();
            // A listener that is gone drops the sender, which reads as "not confirmed".
            let _ = commands.send(Command::Subscribe(topic.clone(), Some(sender)));
            confirmations.push(receiver);
        }
        let needed = self.quorum;
        let quorum = async move {
            let mut confirmations = confirmations;
            let mut confirmed = 0;
            while let Some(reply) = confirmations.next().await {
                confirmed += usize::from(reply.is_ok());
                if confirmed >= needed {
                    return;
                }
            }
        };
        Subscribing(quorum.boxed().shared())
    }

    /// The highest ticket heard of for `name`, and `seen` from now on if higher: for the offer of
    /// a fair waiter's next round.
    pub(crate) fn latest_ticket(&self, name: &str, seen: u64) -> u64 {
        let mut state = self.state();
        match state.names.get_mut(name) {
            Some(waiters) => {
                waiters.latest_ticket = waiters.latest_ticket.max(seen);
                waiters.latest_ticket
            }
            None => seen,
        }
    }

    /// Whether a call of this client waited for `name` lately (the name is still subscribed:
    /// somebody waits, or waited less than [`LINGER`] ago).
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.state().names.contains_key(name)
    }

    /// Whether some `lock()` call of this client waits in line for `name` (fair waiters aside).
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        self.state()
            .names
            .get(name)
            .is_some_and(|waiters| waiters.line.has_waiters())
    }

    /// Drops names nobody waited on for [`LINGER`], and unsubscribes the nodes from them.
    fn sweep_at(&self, state: &mut State, now: Instant) {
        state.names.retain(|name, waiters| {
            let stale = waiters
                .idle_since
                .is_some_and(|idle| now.duration_since(idle) >= LINGER);
            if stale {
                for topic in topics(name, waiters) {
                    for commands in &self.commands {
                        let _ = commands.send(Command::Unsubscribe(topic.clone()));
                    }
                }
            }
            !stale
        });
    }
}

impl NoticeSink for Hub {
    /// A node's notice on `name`: a release (the payload is the released value, after
    /// `waiting::KEPT_MARK` where the release kept the waiters' mark) or a hand-off (see
    /// `fair::scripts::GRANT_MARK`).
    ///
    /// Anyone allowed to `PUBLISH` on the node can send one (the README's ACL section: those are
    /// users who could write the lock keys as well). So a notice is `node`'s word (the listener
    /// that heard it) about `node` only, whatever node it was first published on; a hand-off goes
    /// only to the waiter its fingerprint names, which counts it only where its place has the
    /// ticket named (`Standing::handed`); and its counter is a hint within [`HINT_LIMIT`].
    fn notice(&self, node: usize, name: &str, payload: &[u8], now: Instant) {
        let mut state = self.state();
        let Some(waiters) = state.names.get_mut(name) else {
            return;
        };
        let watchers = waiters.watchers.clone();
        for watcher in watchers {
            state.wake(Some(watcher));
        }
        let Some(waiters) = state.names.get_mut(name) else {
            return;
        };
        if let Some(grant) = payload.strip_prefix(&[GRANT_MARK]) {
            let Some((fingerprint, counter, place)) = parse_grant(grant) else {
                return;
            };
            if counter <= HINT_LIMIT {
                waiters.latest_ticket = waiters.latest_ticket.max(counter);
            }
            let grant = Grant {
                node,
                ticket: place,
            };
            let woken = match waiters.turns.get_mut(fingerprint) {
                Some(handed) => {
                    handed.nodes.push(grant);
                    Some(handed.id)
                }
                None => {
                    if waiters.unclaimed.len() == UNCLAIMED {
                        waiters.unclaimed.pop_front();
                    }
                    waiters.unclaimed.push_back((fingerprint.to_owned(), grant));
                    None
                }
            };
            state.wake(woken);
            return;
        }
        let woken = waiters.line.hear(node, payload, now);
        if woken.is_some() {
            tracing::trace!(node, "woken by release notices");
        }
        // The lock is free on that node and nobody was in line there: the fair waiter of this
        // client that came first may find it free on a quorum.
        let first_turn = waiters
            .turns
            .values_mut()
            .min_by_key(|handed| handed.id)
            .map(|handed| {
                handed.freed = true;
                handed.id
            });
        state.wake(woken);
        state.wake(first_turn);
    }

    /// Every topic somebody listens for, to subscribe a listener after it (re)connected.
    fn topics(&self) -> Vec<Topic> {
        let mut state = self.state();
        state.connects += 1;
        state
            .names
            .iter()
            .flat_map(|(name, waiters)| topics(name, waiters))
            .collect()
    }

    /// Drops names nobody waited on for [`LINGER`], and unsubscribes the nodes from them.
    fn sweep(&self) {
        let mut state = self.state();
        self.sweep_at(&mut state, Instant::now());
    }
}

/// Reads a hand-off notice after its mark: the fingerprint of the new holder's value, the node's
/// latest ticket, and the ticket the new holder's place had (absent from older releases),
/// separated by spaces.
fn parse_grant(grant: &[u8]) -> Option<(&str, u64, Option<u64>)> {
    let text = std::str::from_utf8(grant).ok()?;
    let mut words = text.split(' ');
    let fingerprint = words.next()?;
    let counter = words.next()?.parse().ok()?;
    let place = match words.next() {
        Some(place) => Some(place.parse().ok()?),
        None => None,
    };
    Some((fingerprint, counter, place))
}

/// What the listeners listen to for `name`: its notices, and its grants to this client once a
/// fair waiter asked for them.
fn topics(name: &Arc<str>, waiters: &Waiters) -> Vec<Topic> {
    let mut topics = vec![Topic::Notices(Arc::clone(name))];
    if waiters.grants.is_some() {
        topics.push(Topic::Grants(Arc::clone(name)));
    }
    topics
}

/// Moves the hand-offs to `fingerprint` that nobody had claimed into `handed`.
fn claim(unclaimed: &mut VecDeque<(String, Grant)>, fingerprint: &str, handed: &mut Handed) {
    unclaimed.retain(|(unclaimed, grant)| {
        let ours = unclaimed == fingerprint;
        if ours {
            handed.nodes.push(*grant);
        }
        !ours
    });
}

/// The subscription of a name that had no listeners yet, on its way to the nodes: done once a
/// quorum of listeners confirmed it (or every listener answered). Shared, so that whichever of its
/// waiters looks first drives it, and a waiter that stops waiting leaves it to the others.
#[derive(Clone)]
pub(crate) struct Subscribing(Shared<BoxFuture<'static, ()>>);

impl Subscribing {
    /// Waits until a quorum of nodes confirmed the subscription, or `timeout` passed.
    pub(crate) async fn confirmed(self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.0).await;
    }

    /// Whether the subscription is done.
    fn is_confirmed(&self) -> bool {
        self.0.peek().is_some()
    }

    /// Done once every one of `pending` is; `None` for none.
    fn all(pending: Vec<Subscribing>) -> Option<Subscribing> {
        match pending.len() {
            0 => None,
            1 => pending.into_iter().next(),
            _ => {
                let all = futures::future::join_all(pending.into_iter().map(|s| s.0)).map(drop);
                Some(Subscribing(all.boxed().shared()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::quorum::quorum;
    use crate::waiting::hub::line::Marks;

    #[test]
    fn grants_carry_the_counter_and_the_place_s_ticket() {
        assert_eq!(parse_grant(b"ab12 9 7"), Some(("ab12", 9, Some(7))));
        // From a release that names no ticket: the notice alone cannot count.
        assert_eq!(parse_grant(b"ab12 9"), Some(("ab12", 9, None)));
        assert_eq!(parse_grant(b"ab12 9 x"), None);
        assert_eq!(parse_grant(b"ab12"), None);
    }

    /// A hub whose listeners are gone: commands to them are dropped.
    fn hub(nodes: usize) -> Arc<Hub> {
        Arc::new(Hub {
            quorum: quorum(nodes),
            nodes,
            state: std::sync::Mutex::new(State::default()),
            commands: (0..nodes).map(|_| mpsc::unbounded_channel().0).collect(),
        })
    }

    fn name() -> Arc<str> {
        Arc::from("n")
    }

    #[test]
    fn the_first_waiter_subscribes_the_name() {
        let hub = hub(3);
        let since = Instant::now();
        let (_first, subscribing) = hub.join(&name(), since);
        assert!(subscribing.is_some());
        let (_second, subscribing) = hub.join(&name(), since);
        assert!(subscribing.is_none(), "one subscription per name");
        assert_eq!(hub.topics(), [Topic::Notices(Arc::from("n"))]);
    }

    #[tokio::test]
    async fn notices_wake_the_first_place_in_line() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.join(&name(), since);
        let (second, _) = hub.join(&name(), since);
        hub.notice(0, "n", b"a", since + Duration::from_micros(1));
        hub.notice(2, "n", b"a", since + Duration::from_micros(2));
        tokio::time::timeout(Duration::from_secs(1), first.woken())
            .await
            .expect("a quorum of notices wakes the first in line");
        assert!(!second.is_woken());
        // Cancelled after its wake-up: the next in line gets it.
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), second.woken())
            .await
            .expect("the wake-up is passed on");
    }

    /// A notice with `+` before the value kept the waiters' mark: the client's marks stay placed.
    /// One without took it.
    #[test]
    fn only_notices_of_releases_that_took_the_mark_unsettle_the_marks() {
        let hub = hub(3);
        let since = Instant::now();
        let (place, _) = hub.join(&name(), since);
        let marks = Marks {
            sent: since,
            connects: hub.state().connects,
        };
        place.marks_placed(marks);
        hub.notice(0, "n", b"+a", since + Duration::from_micros(1));
        assert_eq!(place.marks(), Some(marks), "kept");
        hub.notice(1, "n", b"b", since + Duration::from_micros(2));
        assert_eq!(place.marks(), None, "taken");
        assert_eq!(place.last_marks(), Some(marks), "still due to expire");
    }

    /// Every notice reaches every watcher, and a watcher takes no waiter's wake-up; a watcher
    /// keeps the name subscribed until it goes.
    #[tokio::test]
    async fn watchers_hear_every_notice_beside_the_line() {
        let hub = hub(3);
        let since = Instant::now();
        let (watcher, _) = hub.watch(&name());
        let (other, _) = hub.watch(&name());
        let (waiter, _) = hub.join(&name(), since);
        hub.notice(0, "n", b"a", since + Duration::from_micros(1));
        hub.notice(1, "n", b"a", since + Duration::from_micros(2));
        for watcher in [&watcher, &other] {
            tokio::time::timeout(Duration::from_secs(1), watcher.changed())
                .await
                .expect("a notice reaches every watcher");
        }
        tokio::time::timeout(Duration::from_secs(1), waiter.woken())
            .await
            .expect("the waiter is woken all the same");
        drop(waiter);
        let later = Instant::now() + LINGER * 2;
        hub.sweep_at(&mut hub.state(), later);
        assert!(hub.knows("n"), "watched names stay subscribed");
        drop((watcher, other));
        hub.sweep_at(&mut hub.state(), Instant::now() + LINGER * 2);
        assert!(!hub.knows("n"), "a name nobody watches any more is let go");
    }

    /// A notice is the word of the node whose listener heard it, about that node only, for the
    /// waiter it names: whatever it says, it never counts for another node or another waiter.
    #[test]
    fn a_grant_reaches_only_the_waiter_it_names_as_the_node_that_sent_it() {
        let hub = hub(3);
        let now = Instant::now();
        let (ours, _) = hub.take_turn(&name(), "ours");
        let (theirs, _) = hub.take_turn(&name(), "theirs");
        hub.notice(1, "n", b"\0theirs 5 5", now);
        hub.notice(2, "n", b"\0ours 5 5", now);
        // Node 2's grant, heard again on node 0's connection, is node 0's word.
        hub.notice(0, "n", b"\0ours 5 5", now);
        hub.notice(0, "n", b"\0nobody 5 5", now);
        let grant = |node| Grant {
            node,
            ticket: Some(5),
        };
        assert_eq!(ours.take_news(), (vec![grant(2), grant(0)], false));
        assert_eq!(theirs.take_news(), (vec![grant(1)], false));
        // A waiter that takes its turn later claims only grants that name it.
        drop(ours);
        let (later, _) = hub.take_turn(&name(), "nobody");
        assert_eq!(later.take_news(), (vec![grant(0)], false));
    }

    #[test]
    fn a_counter_no_line_reaches_is_no_hint() {
        let hub = hub(3);
        let (_turn, _) = hub.take_turn(&name(), "ours");
        let now = Instant::now();
        hub.notice(0, "n", b"\0x 7 1", now);
        assert_eq!(hub.latest_ticket("n", 0), 7);
        hub.notice(0, "n", b"\0x 18446744073709551615 1", now);
        hub.notice(1, "n", b"\0x 1152921504606846976 1", now);
        hub.notice(2, "n", format!("\0x {} 1", HINT_LIMIT + 1).as_bytes(), now);
        assert_eq!(hub.latest_ticket("n", 0), 7);
        hub.notice(2, "n", format!("\0x {HINT_LIMIT} 1").as_bytes(), now);
        assert_eq!(hub.latest_ticket("n", 0), HINT_LIMIT);
    }

    #[test]
    fn names_go_soon_after_their_linger() {
        // Each name goes at the first sweep at or after the end of its linger: sweeps at most a
        // fifth of it apart keep it at most 1.2 lingers.
        assert!(
            SWEEP_EVERY * 5 <= LINGER,
            "a name may stay {:?} after its last waiter, for a linger of {LINGER:?}",
            LINGER + SWEEP_EVERY
        );
        let hub = hub(3);
        let (place, _) = hub.join(&name(), Instant::now());
        let left = Instant::now();
        place.done();
        hub.sweep_at(&mut hub.state(), left + LINGER - SWEEP_EVERY);
        assert_eq!(
            hub.topics().len(),
            1,
            "still lingering a sweep before its end"
        );
        hub.sweep_at(&mut hub.state(), left + LINGER + SWEEP_EVERY);
        assert!(hub.topics().is_empty(), "gone at the first sweep after it");
    }

    #[test]
    fn names_nobody_waits_on_are_swept_after_lingering() {
        let hub = hub(3);
        let (place, _) = hub.join(&name(), Instant::now());
        place.done();
        let later = Instant::now() + LINGER;
        hub.sweep_at(&mut hub.state(), later);
        assert!(hub.topics().is_empty());
        let (turn, subscribing) = hub.take_turn(&name(), "f");
        assert!(subscribing.is_some(), "fair waiters subscribe too");
        drop(turn);
        hub.sweep_at(&mut hub.state(), Instant::now() + LINGER);
        assert!(hub.topics().is_empty());
    }
}
