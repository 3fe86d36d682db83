//! The semaphore protocol as a state machine for the model checker: the nodes' acquire script,
//! the clients' attempts, the network between them, and who holds a permit.
//!
//! One semaphore name over up to 8 nodes. Every node is an independent Redis master that runs each
//! script atomically; a message may be delayed past any number of other steps, delivered in any
//! order, or never (its sender timed out and moved on). Any entry may expire at any step.

use std::fmt;

use stateright::{Model, Property};

/// The quorum a client counts its admissions against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// The rule: `P * N / (P + 1) + 1` (3 of 3 nodes for 2 permits, 4 of 5).
    Rule,
    /// A plain majority, `N / 2 + 1` (2 of 3), as redis-semaphore's `RedlockSemaphore` counts.
    Majority,
}

/// What a client does when one of its entries expires under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// As redmutex: validity (expiry minus elapsed minus drift) ends before any entry the
    /// attempt set can expire, so an attempt with an expired entry fails its validity check, and a
    /// holder has stopped relying on its permit before any of its entries goes.
    Honest,
    /// A client that goes on counting and holding past an expiry (no validity check, or a holder
    /// paused past its permit's expiry).
    PastExpiry,
}

/// A permit request's value: unique per acquisition attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// Client index (0 is `A`).
    pub client: u8,
    /// Attempt number of that client, from 1.
    pub attempt: u8,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", char::from(b'A' + self.client), self.attempt)
    }
}

/// A set of nodes (bit `n` for node `n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nodes(u8);

impl Nodes {
    pub fn contains(self, n: usize) -> bool {
        self.0 & (1 << n) != 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..8).filter(move |&n| self.contains(n))
    }

    /// Every subset of `self` with `len` nodes.
    pub fn subsets(self, len: usize) -> impl Iterator<Item = Nodes> {
        (0..=self.0)
            .map(Nodes)
            .filter(move |sub| sub.0 & !self.0 == 0 && sub.len() == len)
    }
}

impl FromIterator<usize> for Nodes {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Nodes {
        Nodes(iter.into_iter().fold(0, |bits, n| bits | (1 << n)))
    }
}

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.iter().map(|n| format!("n{n}")).collect();
        write!(f, "{}", names.join(" "))
    }
}

/// One Redis node: the live entries of the semaphore's sorted set (at most the permits), sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Node {
    pub entries: Vec<Value>,
}

impl Node {
    pub fn holds(&self, value: Value) -> bool {
        self.entries.contains(&value)
    }

    /// The acquire script: after its sweep (expired entries are already gone, see `Expire`),
    /// admit the value if fewer than `permits` remain.
    fn admits(&self, value: Value, permits: usize) -> bool {
        self.entries.len() < permits && !self.holds(value)
    }

    fn remove(&mut self, value: Value) {
        self.entries.retain(|&v| v != value);
    }
}

/// A message in flight: a request from a client to node `to`, or a node's `Ok` reply.
///
/// Only admissions are replies: a "full" reply can only make a client give up, which it may do at
/// any step anyway (its timeout), and an acquire that would find its node full may equally stay in
/// flight and land later or never. Release messages are not modelled either: a release can only
/// remove an entry of an attempt that is over, which the model does at once (see `forget_inert`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Acquire script for `value` on node `to`.
    Acquire { to: usize, value: Value },
    /// Node `from` admitted `value`.
    AcquireOk { from: usize, value: Value },
}

/// The messages in flight: unordered, never duplicated, kept sorted so that equal networks are
/// equal states.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Network(Vec<Msg>);

impl Network {
    fn send(&mut self, msg: Msg) {
        if let Err(at) = self.0.binary_search(&msg) {
            self.0.insert(at, msg);
        }
    }

    fn take(&mut self, msg: Msg) {
        if let Ok(at) = self.0.binary_search(&msg) {
            self.0.remove(at);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Msg> + '_ {
        self.0.iter().copied()
    }

    /// The nodes whose admission of `value` has arrived.
    pub fn oks(&self, value: Value) -> Nodes {
        self.iter()
            .filter_map(|m| match m {
                Msg::AcquireOk { from, value: v } if v == value => Some(from),
                _ => None,
            })
            .collect()
    }
}

/// Where a client stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between attempts: before the first, after one failed, or after its permit was given back.
    Idle,
    /// Acquire sent to every node; waiting for admissions.
    Acquiring,
    /// Holds a permit, admitted by the nodes `on` (the quorum it counted).
    Holding { on: Nodes },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Attempts started so far; the current attempt's value has this number.
    pub attempts: u8,
    pub phase: Phase,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Node>,
    pub clients: Vec<Client>,
    pub net: Network,
}

impl State {
    /// The values that hold a permit now.
    pub fn holders(&self) -> impl Iterator<Item = Value> + '_ {
        (0..)
            .zip(&self.clients)
            .filter(|(_, client)| matches!(client.phase, Phase::Holding { .. }))
            .map(|(c, _)| current_value(self, c))
    }
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The client starts its next attempt: sends acquire to every node.
    Begin(u8),
    /// The network delivers an acquire; the node runs the script atomically and admits the value.
    Deliver(Msg),
    /// The client counts the admissions of the quorum `oks` (from those that have arrived; the
    /// others are late) and holds a permit.
    Count { client: u8, oks: Nodes },
    /// The client's attempt ends without a quorum (timeout, or full nodes); it gives back what it
    /// may have taken.
    GiveUp(u8),
    /// The holder gives its permit back (unlock).
    Unlock(u8),
    /// The entry of `value` on node `node` expires (a script's sweep finds it past its score).
    Expire { node: usize, value: Value },
}

/// The model: its size, the quorum counted, how clients treat expiries, and each client's
/// attempts.
#[derive(Clone, Debug)]
pub struct SemaphoreModel {
    /// Redis nodes (at most 8).
    pub nodes: usize,
    /// How many may hold at once, and how many live entries a node admits.
    pub permits: usize,
    pub quorum: Quorum,
    pub clients: Clients,
    /// Acquisition attempts of each client (failed ones included); one entry per client.
    pub attempts: &'static [u8],
}

/// Property: never more holders than permits.
pub const AT_MOST_P: &str = "never more than P holders";
/// Example wanted: all P permits held at once (the model is not vacuous).
pub const ALL_P_HELD: &str = "P holders at once";

impl SemaphoreModel {
    /// The nodes a holder must count.
    pub fn needed(&self) -> usize {
        match self.quorum {
            Quorum::Rule => self.permits * self.nodes / (self.permits + 1) + 1,
            Quorum::Majority => self.nodes / 2 + 1,
        }
    }
}

impl Model for SemaphoreModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            attempts: 0,
            phase: Phase::Idle,
        };
        vec![State {
            nodes: vec![Node::default(); self.nodes],
            clients: vec![client; self.attempts.len()],
            net: Network::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, client) in (0..).zip(&s.clients) {
            match client.phase {
                Phase::Idle if client.attempts < self.attempts[usize::from(c)] => {
                    actions.push(Action::Begin(c));
                }
                Phase::Idle => {}
                Phase::Acquiring => {
                    actions.push(Action::GiveUp(c));
                    let needed = self.needed();
                    for oks in s.net.oks(current_value(s, c)).subsets(needed) {
                        actions.push(Action::Count { client: c, oks });
                    }
                }
                Phase::Holding { .. } => actions.push(Action::Unlock(c)),
            }
        }
        // Only deliveries that admit: one that finds its node full is answered "full", no
        // different from staying in flight (and maybe landing later).
        for msg in s.net.iter() {
            if let Msg::Acquire { to, value } = msg
                && s.nodes[to].admits(value, self.permits)
            {
                actions.push(Action::Deliver(msg));
            }
        }
        for (node, n) in s.nodes.iter().enumerate() {
            for &value in &n.entries {
                actions.push(Action::Expire { node, value });
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Begin(c) => {
                let client = &mut s.clients[usize::from(c)];
                client.attempts += 1;
                client.phase = Phase::Acquiring;
                let value = current_value(&s, c);
                for to in 0..self.nodes {
                    s.net.send(Msg::Acquire { to, value });
                }
            }
            Action::Deliver(msg) => {
                s.net.take(msg);
                if let Msg::Acquire { to, value } = msg {
                    let node = &mut s.nodes[to];
                    node.entries.push(value);
                    node.entries.sort();
                    s.net.send(Msg::AcquireOk { from: to, value });
                }
            }
            Action::Count { client, oks } => {
                s.clients[usize::from(client)].phase = Phase::Holding { on: oks };
            }
            Action::GiveUp(c) | Action::Unlock(c) => s.clients[usize::from(c)].phase = Phase::Idle,
            Action::Expire { node, value } => {
                s.nodes[node].remove(value);
                if self.clients == Clients::Honest {
                    // Its validity ended first: the attempt fails, or the holder has stopped.
                    s.clients[usize::from(value.client)].phase = Phase::Idle;
                }
            }
        }
        forget_inert(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(AT_MOST_P, at_most_p),
            Property::sometimes(ALL_P_HELD, all_p_held),
        ]
    }
}

fn at_most_p(model: &SemaphoreModel, s: &State) -> bool {
    s.holders().count() <= model.permits
}

fn all_p_held(model: &SemaphoreModel, s: &State) -> bool {
    s.holders().count() == model.permits
}

/// Drops what can no longer change anything but itself, so that the checker does not explore the
/// moments at which it goes away:
/// - a message of an attempt that is over (its acquire landing would only admit nobody, and its
///   reply would be ignored);
/// - an entry of an attempt that is over (given back, or expired: nobody relies on it), and a
///   holder's entry on a node it did not count.
///
/// Why removing an entry early removes no behaviour: an entry only keeps other acquires out of
/// its node. Every run in which it stays is matched by one in which it went early and the
/// acquires it kept out stayed in flight; the clients' steps are the same in both. Conversely,
/// going early is an expiry, a step of the model anyway.
fn forget_inert(s: &mut State) {
    let State {
        nodes,
        clients,
        net,
    } = s;
    let phase_of = |value: Value| {
        let client = clients[usize::from(value.client)];
        (client.attempts == value.attempt).then_some(client.phase)
    };
    net.0.retain(|&msg| match msg {
        Msg::Acquire { value, .. } | Msg::AcquireOk { value, .. } => {
            phase_of(value) == Some(Phase::Acquiring)
        }
    });
    for (n, node) in nodes.iter_mut().enumerate() {
        node.entries.retain(|&value| match phase_of(value) {
            Some(Phase::Acquiring) => true,
            Some(Phase::Holding { on }) => on.contains(n),
            Some(Phase::Idle) | None => false,
        });
    }
}

/// The value of the client's current attempt.
pub fn current_value(s: &State, c: u8) -> Value {
    Value {
        client: c,
        attempt: s.clients[usize::from(c)].attempts,
    }
}
