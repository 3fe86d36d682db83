//! Wake-up on release: release notices over pub/sub, one listener connection per node.
//!
//! A release script of a mutex with wake-up on release publishes an empty message on
//! `redmutex:released:<name>` on each node where it deleted the key. A [`Hub`] per
//! [`Redlock`](crate::Redlock) keeps, per name somebody waits on, when each node last reported a
//! release, and the queue of waiters. A waiter is woken once a quorum of nodes reported a release
//! since its last attempt began: then the lock is free on a quorum, as far as this client can tell.
//! One waiter per release is woken (the first in line whose condition holds); the release is then
//! spent for the others, who need fresh notices. A notice carries the released value, which tells
//! one release from the next: the late notices of a spent release (from the slower nodes) must
//! not add up with the first notices of the next one. Notices are only hints: a waiter still makes
//! a full attempt, and its retry delay still runs as the fallback.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::listener::Command;
use crate::scripts::NOTICE_PREFIX;

/// How long a name stays subscribed after its last waiter left. Waiters on a busy name come and
/// go; each fresh subscription costs a round trip and one extra attempt (see `acquire`).
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// How many spent releases a name remembers, to ignore their late notices. Late notices arrive
/// within a round trip; by then few releases can have followed.
const SPENT: usize = 8;

/// Bounds of the spread of woken waiters' retries (see `Entry::spread`).
const SPREAD_MIN: Duration = Duration::from_micros(250);
const SPREAD_MAX: Duration = Duration::from_millis(4);

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
    names: HashMap<Arc<str>, Entry>,
    next_id: u64,
}

struct Entry {
    /// Each node's last notice of a release not yet spent.
    heard: Vec<Option<Heard>>,
    /// The values of the last releases that woke somebody, newest last.
    spent: VecDeque<Arc<[u8]>>,
    /// In line order.
    waiters: Vec<Waiter>,
    /// The node whose notice arrived last: it is up, and the released key is gone there.
    last_node: usize,
    /// Since when nobody waits (while `waiters` is empty).
    idle_since: Option<Instant>,
    /// A woken waiter retries after a random pause below this. Every client wakes one waiter per
    /// release, so with many clients several woken waiters race for the lock, split the nodes'
    /// votes, and all fail. Like Ethernet's backoff, the spread doubles when a woken waiter lost
    /// and halves when one won: zero (no added latency) while this client's woken waiters win,
    /// wider while they collide with other clients'.
    spread: Duration,
}

struct Heard {
    at: Instant,
    /// The released value: the same on every node for one release.
    release: Arc<[u8]>,
}

struct Waiter {
    id: u64,
    /// Notices count only when received after this instant: the start of the waiter's last
    /// attempt.
    since: Instant,
    woken: bool,
    wake: Arc<Notify>,
}

impl Entry {
    fn new(nodes: usize) -> Entry {
        Entry {
            heard: (0..nodes).map(|_| None).collect(),
            spent: VecDeque::new(),
            waiters: Vec::new(),
            last_node: 0,
            idle_since: None,
            spread: Duration::ZERO,
        }
    }

    /// Where waiter `id` stands in line.
    fn position(&self, id: u64) -> Option<usize> {
        self.waiters.iter().position(|waiter| waiter.id == id)
    }

    /// The notices received after `since`.
    fn heard_since(&self, since: Instant) -> impl Iterator<Item = &Heard> {
        self.heard
            .iter()
            .flatten()
            .filter(move |heard| heard.at > since)
    }

    /// Records a node's notice of the release of `value`; ignored if that release is spent.
    fn hear(&mut self, node: usize, release: &[u8], at: Instant) {
        if !self.spent.iter().any(|spent| **spent == *release) {
            self.last_node = node;
            self.heard[node] = Some(Heard {
                at,
                release: Arc::from(release),
            });
        }
    }

    /// Wakes the first waiter in line that is not woken yet and, with `needed`, has heard from
    /// that many nodes; the releases it heard of are then spent for everyone else.
    fn wake_one(&mut self, needed: Option<usize>) -> bool {
        let position = self.waiters.iter().position(|waiter| {
            !waiter.woken
                && needed.is_none_or(|needed| self.heard_since(waiter.since).count() >= needed)
        });
        let Some(position) = position else {
            return false;
        };
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
        waiter.wake.notify_one();
        true
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

    /// Puts a waiter for `name` in line, counting notices received after `since`. Subscribes the
    /// nodes to the name if nobody listened for it; then the returned `Subscribing` resolves once
    /// they confirmed.
    pub(crate) fn watch(
        self: &Arc<Self>,
        name: &Arc<str>,
        since: Instant,
    ) -> (Watch, Option<Subscribing>) {
        let mut state = self.state();
        self.sweep(&mut state, Instant::now());
        let id = state.next_id;
        state.next_id += 1;
        let wake = Arc::new(Notify::new());
        let mut subscribing = None;
        let entry = state.names.entry(Arc::clone(name)).or_insert_with(|| {
            let confirmations = FuturesUnordered::new();
            for commands in &self.commands {
                let (sender, receiver) = oneshot::channel();
                // A listener that is gone drops the sender, which reads as "not confirmed".
                let _ = commands.send(Command::Subscribe(channel(name), Some(sender)));
                confirmations.push(receiver);
            }
            subscribing = Some(Subscribing {
                confirmations,
                needed: self.quorum,
            });
            Entry::new(self.nodes)
        });
        entry.idle_since = None;
        entry.waiters.push(Waiter {
            id,
            since,
            woken: false,
            wake: Arc::clone(&wake),
        });
        // Notices that arrived during the attempt that just failed count as well.
        entry.wake_one(Some(self.quorum));
        drop(state);
        let watch = Watch {
            hub: Arc::clone(self),
            name: Arc::clone(name),
            id,
            wake,
            done: false,
        };
        (watch, subscribing)
    }

    /// Whether some `lock()` call of this client waits in line for `name`.
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        self.state()
            .names
            .get(name)
            .is_some_and(|entry| !entry.waiters.is_empty())
    }

    /// A node reported the release of `release` (the value) on `name`.
    pub(crate) fn notice(&self, node: usize, name: &str, release: &[u8], now: Instant) {
        let mut state = self.state();
        let Some(entry) = state.names.get_mut(name) else {
            return;
        };
        entry.hear(node, release, now);
        if entry.wake_one(Some(self.quorum)) {
            tracing::trace!(node, "woken by release notices");
        }
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
        state.names.retain(|name, entry| {
            let stale = entry
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

/// One `lock()` call's place in line for a name, from its first failed attempt to its return.
///
/// Dropped without [`Watch::done`] (the `lock()` future was cancelled) after it was woken, it
/// passes the wake-up on to the next waiter, so a release is not lost on a waiter that left.
pub(crate) struct Watch {
    hub: Arc<Hub>,
    name: Arc<str>,
    id: u64,
    wake: Arc<Notify>,
    done: bool,
}

impl Watch {
    /// Called as an attempt starts: only notices received from now on count, and a waiter that
    /// was woken goes to the back of the line.
    pub(crate) fn rearm(&self, since: Instant) {
        self.with_entry(|entry| {
            let Some(mut position) = entry.position(self.id) else {
                return;
            };
            if entry.waiters[position].woken {
                let waiter = entry.waiters.remove(position);
                entry.waiters.push(waiter);
                position = entry.waiters.len() - 1;
            }
            let waiter = &mut entry.waiters[position];
            waiter.woken = false;
            waiter.since = since;
        });
    }

    /// Runs `f` on this waiter's name under the hub's lock; `None` if the name is gone.
    fn with_entry<R>(&self, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        self.hub.state().names.get_mut(&*self.name).map(f)
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
        self.with_entry(|entry| {
            entry
                .position(self.id)
                .is_some_and(|p| entry.waiters[p].woken)
        })
        .unwrap_or(false)
    }

    /// For a woken waiter before its attempt: a random pause below the name's current spread,
    /// and the node that reported the release last (a good one to look at after the pause).
    pub(crate) fn pause(&self) -> (Duration, usize) {
        self.with_entry(|entry| {
            let pause = if entry.spread.is_zero() {
                Duration::ZERO
            } else {
                entry.spread.mul_f64(rand::random::<f64>())
            };
            (pause, entry.last_node)
        })
        .unwrap_or((Duration::ZERO, 0))
    }

    /// A woken waiter found the lock taken again before its attempt: back to waiting, at its
    /// place in line, for releases after `since`.
    pub(crate) fn wait_again(&self, since: Instant) {
        let quorum = self.hub.quorum;
        self.with_entry(|entry| {
            if let Some(position) = entry.position(self.id) {
                let waiter = &mut entry.waiters[position];
                waiter.woken = false;
                waiter.since = since;
            }
            // A release heard while this waiter was still marked woken woke nobody: count it now.
            entry.wake_one(Some(quorum));
        });
    }

    /// Reports how the attempt after a wake-up went: `won` widens or narrows the spread.
    pub(crate) fn woken_attempt(&self, won: bool) {
        self.with_entry(|entry| entry.spread = next_spread(entry.spread, won));
    }

    /// Leaves the line for good: the `lock()` call returned.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let now = Instant::now();
        let done = self.done;
        self.with_entry(|entry| {
            let Some(position) = entry.position(self.id) else {
                return;
            };
            let waiter = entry.waiters.remove(position);
            if waiter.woken && !done {
                entry.wake_one(None);
            }
            if entry.waiters.is_empty() {
                entry.idle_since = Some(now);
            }
        });
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

    /// One release notice per node in `nodes`, each a microsecond after `after`.
    fn release(hub: &Hub, value: &str, nodes: &[usize], after: Instant) -> Instant {
        let mut at = after;
        for &node in nodes {
            at += Duration::from_micros(1);
            hub.notice(node, "n", value.as_bytes(), at);
        }
        at
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
    fn the_first_waiter_subscribes_the_name() {
        let hub = hub(3);
        let since = Instant::now();
        let (_first, subscribing) = hub.watch(&name(), since);
        assert!(subscribing.is_some());
        let (_second, subscribing) = hub.watch(&name(), since);
        assert!(subscribing.is_none(), "one subscription per name");
        assert_eq!(hub.channels(), ["redmutex:released:n"]);
    }

    #[test]
    fn each_release_wakes_the_next_in_line_only() {
        let hub = hub(5);
        let since = Instant::now();
        let waiters: Vec<Watch> = (0..3).map(|_| hub.watch(&name(), since).0).collect();
        let woken = || waiters.iter().map(Watch::is_woken).collect::<Vec<_>>();
        let at = release(&hub, "a", &[0, 1], since);
        assert_eq!(woken(), [false; 3], "2 of 5 is no quorum");
        let at = release(&hub, "a", &[2], at);
        assert_eq!(woken(), [true, false, false]);
        // The slower nodes' notices of the same release wake nobody...
        let at = release(&hub, "a", &[3, 4], at);
        assert_eq!(woken(), [true, false, false]);
        // ...and do not add up with the first notices of the next release.
        let at = release(&hub, "b", &[4, 0], at);
        assert_eq!(woken(), [true, false, false]);
        let at = release(&hub, "b", &[1], at);
        assert_eq!(woken(), [true, true, false]);
        release(&hub, "b", &[2, 3], at);
        assert_eq!(woken(), [true, true, false]);
    }

    #[test]
    fn notices_from_before_an_attempt_do_not_count() {
        let hub = hub(3);
        let start = Instant::now();
        // The name is watched (a waiter came and went), and a release nobody waited for is heard.
        hub.watch(&name(), start).0.done();
        let at = release(&hub, "a", &[0, 1, 2], start);
        let (after, _) = hub.watch(&name(), at + Duration::from_micros(1));
        assert!(!after.is_woken(), "the attempt saw the lock free already");
        let (before, _) = hub.watch(&name(), start);
        assert!(
            before.is_woken(),
            "the release came after this attempt began"
        );
    }

    #[test]
    fn a_cancelled_waiter_hands_its_wake_up_on() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let (second, _) = hub.watch(&name(), since);
        release(&hub, "a", &[0, 2], since);
        assert!(first.is_woken() && !second.is_woken());
        drop(first);
        assert!(second.is_woken());
    }

    #[test]
    fn a_waiter_that_returned_keeps_its_wake_up() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let (second, _) = hub.watch(&name(), since);
        release(&hub, "a", &[0, 1], since);
        first.done();
        assert!(!second.is_woken(), "the lock went to the first waiter");
    }

    #[test]
    fn a_woken_waiter_goes_to_the_back_of_the_line() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let (second, _) = hub.watch(&name(), since);
        let at = release(&hub, "a", &[0, 1], since);
        // The first lost its attempt to somebody else, and waits again.
        first.rearm(at + Duration::from_micros(1));
        release(&hub, "b", &[0, 1], at + Duration::from_micros(2));
        assert!(second.is_woken() && !first.is_woken());
    }

    #[test]
    fn a_waiter_that_found_the_lock_taken_keeps_its_place() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let (second, _) = hub.watch(&name(), since);
        let at = release(&hub, "a", &[0, 1], since);
        assert!(first.is_woken());
        assert_eq!(first.pause().1, 1, "the node heard from last");
        // Another client got the lock during the pause: wait again, first in line still.
        first.wait_again(at);
        assert!(!first.is_woken());
        release(&hub, "b", &[1, 2], at);
        assert!(first.is_woken() && !second.is_woken());
    }

    #[test]
    fn a_release_heard_while_looking_is_not_lost() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let at = release(&hub, "a", &[0, 1], since);
        assert!(first.is_woken());
        // While it looked at a node, the new holder released already.
        release(&hub, "b", &[1, 2], at);
        first.wait_again(since + Duration::from_nanos(1));
        assert!(first.is_woken(), "release b wakes it");
    }

    #[test]
    fn notices_during_a_failed_attempt_wake_at_once() {
        let hub = hub(3);
        let since = Instant::now();
        let (first, _) = hub.watch(&name(), since);
        let at = release(&hub, "a", &[0, 1], since);
        first.done();
        // This attempt began before release "b" and failed; the release is news to it.
        let attempt = at + Duration::from_micros(1);
        release(&hub, "b", &[1, 2], attempt);
        let (late, _) = hub.watch(&name(), attempt);
        assert!(late.is_woken());
    }

    #[test]
    fn spent_releases_are_remembered_within_bounds() {
        let hub = hub(3);
        let mut at = Instant::now();
        for round in 0..3 * SPENT {
            let (waiter, _) = hub.watch(&name(), at);
            at = release(&hub, &round.to_string(), &[0, 1], at);
            assert!(waiter.is_woken(), "round {round}");
            waiter.done();
        }
        let state = hub.state();
        assert_eq!(state.names["n"].spent.len(), SPENT);
    }
}
