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

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::line::{Line, WaiterId};
use crate::listener::Command;
use crate::scripts::NOTICE_PREFIX;
use crate::scripts::fair::GRANT_MARK;

/// How long a name stays subscribed after its last waiter left. Waiters on a busy name come and
/// go; each fresh subscription costs a round trip and one extra attempt (see `waiting`).
pub(crate) const LINGER: Duration = Duration::from_secs(5);

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
}

/// This client's waiters for one name.
struct Waiters {
    /// Those woken by release notices (wake-up on release).
    line: Line,
    /// Those in the fair line, by the fingerprint of their value (see `waiting::fair`).
    turns: HashMap<String, Handed>,
    /// Hand-offs to fingerprints nobody here claimed: a call whose round joined the line a moment
    /// ago claims them when it takes its turn.
    unclaimed: VecDeque<(String, usize)>,
    /// The highest ticket the name's notices mentioned.
    latest_ticket: u64,
    /// Since when nobody waits.
    idle_since: Option<Instant>,
}

/// What the notices told one fair waiter since it last looked.
struct Handed {
    id: WaiterId,
    /// Nodes that handed it the lock.
    nodes: Vec<usize>,
    /// A node freed the lock without handing it to anyone: a round may find it free.
    freed: bool,
}

/// How many unclaimed hand-offs a name remembers.
const UNCLAIMED: usize = 16;

impl Waiters {
    fn new(nodes: usize, quorum: usize) -> Waiters {
        Waiters {
            line: Line::new(nodes, quorum),
            turns: HashMap::new(),
            unclaimed: VecDeque::new(),
            latest_ticket: 0,
            idle_since: None,
        }
    }

    /// Notes the time if nobody waits any more.
    fn left(&mut self, now: Instant) {
        if !self.line.has_waiters() && self.turns.is_empty() {
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

fn channel(name: &str) -> String {
    format!("{NOTICE_PREFIX}{name}")
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
            *subscribing = Some(self.subscribe(name));
            Waiters::new(self.nodes, self.quorum)
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
        self.sweep(&mut state, Instant::now());
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
    /// subscribes like [`join`](Hub::join).
    pub(crate) fn take_turn(
        self: &Arc<Self>,
        name: &Arc<str>,
        fingerprint: &str,
    ) -> (Turn, Option<Subscribing>) {
        let mut state = self.state();
        self.sweep(&mut state, Instant::now());
        let (id, wake) = state.new_waiter();
        let mut subscribing = None;
        let waiters = self.waiters(&mut state, name, &mut subscribing);
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

    /// Asks every listener to subscribe to `name`'s notices.
    fn subscribe(&self, name: &str) -> Subscribing {
        let confirmations = FuturesUnordered::new();
        for commands in &self.commands {
            let (sender, receiver) = oneshot::channel();
            // A listener that is gone drops the sender, which reads as "not confirmed".
            let _ = commands.send(Command::Subscribe(channel(name), Some(sender)));
            confirmations.push(receiver);
        }
        Subscribing {
            confirmations,
            needed: self.quorum,
        }
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

    /// Whether some `lock()` call of this client waits in line for `name` (fair waiters aside).
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        self.state()
            .names
            .get(name)
            .is_some_and(|waiters| waiters.line.has_waiters())
    }

    /// A node's notice on `name`: a release (the payload is the released value) or a hand-off
    /// (see `scripts::fair::GRANT_MARK`).
    pub(crate) fn notice(&self, node: usize, name: &str, payload: &[u8], now: Instant) {
        let mut state = self.state();
        let Some(waiters) = state.names.get_mut(name) else {
            return;
        };
        if let Some(grant) = payload.strip_prefix(&[GRANT_MARK]) {
            let Some((fingerprint, ticket)) = parse_grant(grant) else {
                return;
            };
            waiters.latest_ticket = waiters.latest_ticket.max(ticket);
            let woken = match waiters.turns.get_mut(fingerprint) {
                Some(handed) => {
                    handed.nodes.push(node);
                    Some(handed.id)
                }
                None => {
                    if waiters.unclaimed.len() == UNCLAIMED {
                        waiters.unclaimed.pop_front();
                    }
                    waiters.unclaimed.push_back((fingerprint.to_owned(), node));
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

    /// The channels of every name somebody listens for, to subscribe a listener after it
    /// (re)connected.
    pub(crate) fn channels(&self) -> Vec<String> {
        self.state()
            .names
            .keys()
            .map(|name| channel(name))
            .collect()
    }

    /// Drops names nobody waited on for [`LINGER`], and unsubscribes the nodes from them.
    fn sweep(&self, state: &mut State, now: Instant) {
        state.names.retain(|name, waiters| {
            let stale = waiters
                .idle_since
                .is_some_and(|idle| now.duration_since(idle) >= LINGER);
            if stale {
                for commands in &self.commands {
                    let _ = commands.send(Command::Unsubscribe(channel(name)));
                }
            }
            !stale
        });
    }

    pub(crate) fn sweep_now(&self) {
        let mut state = self.state();
        self.sweep(&mut state, Instant::now());
    }
}

/// Reads a hand-off notice after its mark: the fingerprint of the new holder's value, a space,
/// and the node's latest ticket.
fn parse_grant(grant: &[u8]) -> Option<(&str, u64)> {
    let text = std::str::from_utf8(grant).ok()?;
    let (fingerprint, ticket) = text.split_once(' ')?;
    Some((fingerprint, ticket.parse().ok()?))
}

/// Moves the hand-offs to `fingerprint` that nobody had claimed into `handed`.
fn claim(unclaimed: &mut VecDeque<(String, usize)>, fingerprint: &str, handed: &mut Handed) {
    unclaimed.retain(|(unclaimed, node)| {
        let ours = unclaimed == fingerprint;
        if ours {
            handed.nodes.push(*node);
        }
        !ours
    });
}

/// The subscription of a name that had no listeners yet, on its way to the nodes.
pub(crate) struct Subscribing {
    confirmations: FuturesUnordered<oneshot::Receiver<()>>,
    needed: usize,
}

impl Subscribing {
    /// Waits until a quorum of nodes confirmed the subscription, or `timeout` passed.
    pub(crate) async fn confirmed(mut self, timeout: Duration) {
        let quorum = async {
            let mut confirmed = 0;
            while let Some(reply) = self.confirmations.next().await {
                confirmed += usize::from(reply.is_ok());
                if confirmed >= self.needed {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, quorum).await;
    }
}

/// One `lock()` call's place in its client's line for a name, from its first wait to its return.
///
/// Dropped without [`Place::done`] (the `lock()` call failed or was cancelled) after it was woken,
/// it passes the wake-up on to the next waiter, so a release is not lost on a waiter that left.
pub(crate) struct Place {
    hub: Arc<Hub>,
    name: Arc<str>,
    id: WaiterId,
    wake: Arc<Notify>,
    done: bool,
}

impl Place {
    /// Runs `f` on this place's line under the hub's lock, and wakes whom it names.
    fn with_line(&self, f: impl FnOnce(&mut Line) -> Option<WaiterId>) {
        let mut state = self.hub.state();
        let woken = state
            .names
            .get_mut(&*self.name)
            .and_then(|waiters| f(&mut waiters.line));
        state.wake(woken);
    }

    /// Called as an attempt starts: only notices received from now on count, and a waiter that
    /// was woken goes to the back of the line.
    pub(crate) fn rearm(&self, since: Instant) {
        self.with_line(|line| {
            line.rearm(self.id, since);
            None
        });
    }

    /// Resolves once this waiter is woken by release notices.
    pub(crate) async fn woken(&self) {
        loop {
            if self.is_woken() {
                return;
            }
            // A wake-up before this point left a permit, so none is lost.
            self.wake.notified().await;
        }
    }

    fn is_woken(&self) -> bool {
        let state = self.hub.state();
        state
            .names
            .get(&*self.name)
            .is_some_and(|waiters| waiters.line.is_woken(self.id))
    }

    /// For a woken waiter before its attempt: a random pause below the name's current spread,
    /// and the node that reported the release last (see `Line::pause`).
    pub(crate) fn pause(&self) -> (Duration, usize) {
        let fraction = rand::random::<f64>();
        let state = self.hub.state();
        state
            .names
            .get(&*self.name)
            .map_or((Duration::ZERO, 0), |waiters| waiters.line.pause(fraction))
    }

    /// A woken waiter found the lock taken again before its attempt: back to waiting, at its
    /// place in line, for releases after `since`.
    pub(crate) fn wait_again(&self, since: Instant) {
        self.with_line(|line| line.wait_again(self.id, since));
    }

    /// Reports how the attempt after a wake-up went.
    pub(crate) fn woken_attempt(&self, won: bool) {
        self.with_line(|line| {
            line.woken_attempt(won);
            None
        });
    }

    /// Leaves the line for good: the `lock()` call got the lock.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.hub.state();
        state.wakers.remove(&self.id);
        let woken = state.names.get_mut(&*self.name).and_then(|waiters| {
            let woken = waiters.line.leave(self.id, self.done);
            waiters.left(now);
            woken
        });
        state.wake(woken);
    }
}

/// One fair `lock()` call's slot in its client's hub: the hand-offs the notices reported for it,
/// and the latest ticket they mentioned.
pub(crate) struct Turn {
    hub: Arc<Hub>,
    name: Arc<str>,
    fingerprint: String,
    id: WaiterId,
    wake: Arc<Notify>,
}

impl Turn {
    /// The waiter's value changed (it joins the line anew): hand-offs to the old one no longer
    /// count.
    pub(crate) fn rename(&mut self, fingerprint: &str) {
        let mut state = self.hub.state();
        if let Some(waiters) = state.names.get_mut(&*self.name) {
            waiters.turns.remove(&self.fingerprint);
            let mut handed = Handed {
                id: self.id,
                nodes: Vec::new(),
                freed: false,
            };
            claim(&mut waiters.unclaimed, fingerprint, &mut handed);
            waiters.turns.insert(fingerprint.to_owned(), handed);
        }
        self.fingerprint = fingerprint.to_owned();
    }

    /// Resolves after a notice concerned this waiter (some may have come before: see
    /// [`take_news`](Turn::take_news)).
    pub(crate) async fn notified(&self) {
        self.wake.notified().await;
    }

    /// The nodes that handed us the lock since the last call, and whether a node freed it.
    pub(crate) fn take_news(&self) -> (Vec<usize>, bool) {
        let mut state = self.hub.state();
        let handed = state
            .names
            .get_mut(&*self.name)
            .and_then(|waiters| waiters.turns.get_mut(&self.fingerprint));
        match handed {
            Some(handed) => (
                std::mem::take(&mut handed.nodes),
                std::mem::take(&mut handed.freed),
            ),
            None => (Vec::new(), false),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.hub.state();
        state.wakers.remove(&self.id);
        if let Some(waiters) = state.names.get_mut(&*self.name) {
            waiters.turns.remove(&self.fingerprint);
            waiters.left(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::quorum;

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
        assert_eq!(hub.channels(), ["redmutex:released:n"]);
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

    #[test]
    fn names_nobody_waits_on_are_swept_after_lingering() {
        let hub = hub(3);
        let (place, _) = hub.join(&name(), Instant::now());
        place.done();
        let later = Instant::now() + LINGER;
        hub.sweep(&mut hub.state(), later);
        assert!(hub.channels().is_empty());
        let (turn, subscribing) = hub.take_turn(&name(), "f");
        assert!(subscribing.is_some(), "fair waiters subscribe too");
        drop(turn);
        hub.sweep(&mut hub.state(), Instant::now() + LINGER);
        assert!(hub.channels().is_empty());
    }
}
