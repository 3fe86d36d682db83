//! The fencing protocol as a state machine for the model checker: the nodes' scripts, the clients'
//! rounds, the network between them, and the record of the tokens handed out.
//!
//! One lock name. Every node is an independent Redis master that runs each script atomically; a
//! message may be delayed past any number of other steps, delivered in any order, or never (its
//! sender timed out and moved on). A node's lock may expire at any step, and (up to a bound per
//! run) a node may lose its data, counter and lock, as a restart without persistence or a
//! failover to a replica that missed the last raise does.

use std::fmt;

use stateright::{Model, Property};

/// Number of Redis nodes.
pub const NODES: usize = 3;
/// Replies needed for a round to succeed: a majority.
pub const QUORUM: usize = NODES / 2 + 1;

/// Which way of choosing tokens the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// The design: acquire reads each node's counter; token = max of the counted `Ok` counters + 1;
    /// the raise goes to the nodes whose `Ok` went into the token; the token is handed out once a
    /// quorum of them raised their counter while still holding our value.
    Fenced,
    /// As `Fenced`, but the raise goes to every node and any `Ok` counts, also one from a node whose
    /// acquire reply came too late to be counted into the token.
    FencedRaiseOnAll,
    /// As `Fenced`, but the raise script does not check the lock: it raises the counter wherever
    /// it lands.
    FencedUncheckedRaise,
    /// No raise round: the acquire script increments the counter (INCR-on-acquire), the token is
    /// the max of the old counters in the `Ok` replies + 1, handed out as soon as a quorum said `Ok`.
    NaiveMaxOfQuorum,
    /// As `Fenced`, but the acquire script replies with the larger of the counter and the node's
    /// clock (`State::now`, which all nodes read alike): what the scripts do, with the clock in
    /// microseconds (`clock_floor.lua`).
    FencedClockFloor,
}

/// A lock value: unique per acquisition attempt.
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

/// One Redis node: the lock key (with its lease) and the counter key beside it (never expires).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Node {
    /// The lock key's value, `None` when free (released or expired).
    pub lock: Option<Value>,
    /// The counter key: starts at 0, only ever raised.
    pub counter: u64,
}

/// A set of nodes (bit `n` for node `n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nodes(u8);

impl Nodes {
    /// Every node.
    pub const ALL: Nodes = Nodes((1 << NODES) - 1);

    pub fn contains(self, n: usize) -> bool {
        self.0 & (1 << n) != 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..NODES).filter(move |&n| self.contains(n))
    }

    /// Every subset of `self` with `len` nodes.
    pub fn subsets(self, len: usize) -> impl Iterator<Item = Nodes> {
        (0..=Nodes::ALL.0)
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

/// A message in flight. Requests go from a client to node `to`; replies from node `from` back to
/// the client that owns `value`.
///
/// Only `Ok` replies are messages. A `Taken` or `Lost` reply can only make a client give up, and a
/// client may give up at any step anyway (its timeout). A release can only free the lock where the
/// attempt's value still holds it, which an expiry may do at any step anyway. Neither would add a
/// behaviour, only interleavings, so the model leaves them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Acquire script: if the lock is free, take it and reply `Ok` with the counter as read (the
    /// naive scheme also increments the counter).
    Acquire { to: usize, value: Value },
    /// `Ok` reply to an acquire, with the counter the script read.
    AcquireOk {
        from: usize,
        value: Value,
        counter: u64,
    },
    /// Raise script: if `value` holds the lock, `counter = max(counter, token)` and reply `Ok`.
    Raise { to: usize, value: Value, token: u64 },
    /// `Ok` reply to a raise.
    RaiseOk { from: usize, value: Value },
}

/// The messages in flight: unordered and never duplicated (a set, kept sorted so that equal
/// networks are equal states; every message is distinct since values are unique per attempt).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Network(Vec<Msg>);

impl Network {
    pub fn send(&mut self, msg: Msg) {
        if let Err(at) = self.0.binary_search(&msg) {
            self.0.insert(at, msg);
        }
    }

    pub fn take(&mut self, msg: Msg) {
        if let Ok(at) = self.0.binary_search(&msg) {
            self.0.remove(at);
        }
    }

    pub fn contains(&self, msg: Msg) -> bool {
        self.0.binary_search(&msg).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = Msg> + '_ {
        self.0.iter().copied()
    }

    fn retain(&mut self, keep: impl FnMut(&Msg) -> bool) {
        self.0.retain(keep);
    }

    /// Whether a raise of `value` to node `to` is in flight.
    fn raise_in_flight(&self, to: usize, value: Value) -> bool {
        self.iter()
            .any(|m| matches!(m, Msg::Raise { to: t, value: v, .. } if t == to && v == value))
    }

    /// The acquire `Ok` replies to `value` in flight: node and counter read.
    pub fn acquire_oks(&self, value: Value) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.iter().filter_map(move |m| match m {
            Msg::AcquireOk {
                from,
                value: v,
                counter,
            } if v == value => Some((from, counter)),
            _ => None,
        })
    }

    /// The nodes whose raise `Ok` reply to `value` is in flight.
    pub fn raise_oks(&self, value: Value) -> Nodes {
        self.iter()
            .filter_map(|m| match m {
                Msg::RaiseOk { from, value: v } if v == value => Some(from),
                _ => None,
            })
            .collect()
    }
}

/// Where a client is in its current attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between attempts: before the first, after one failed, or after one was handed its token
    /// (what a holder does next, unlock or hold on till its lease runs out, only decides how long
    /// others' acquires are kept out, which their being delayed covers already).
    Idle,
    /// Acquire sent to every node; waiting for replies.
    Acquiring,
    /// Raise of `token` sent; waiting for replies.
    Raising { token: u64 },
}

/// A client of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Attempts started so far; the current attempt's value has this number.
    pub attempts: u8,
    /// Where the current attempt stands.
    pub phase: Phase,
    /// How many tokens had been handed out (to anyone) when the current attempt began.
    pub handouts_at_begin: usize,
}

/// A token handed out: the event "client holds with token t".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handout {
    /// The attempt that now holds.
    pub value: Value,
    /// Its token.
    pub token: u64,
    /// How many hand-outs had happened when this attempt began (sent its acquires): the ones that
    /// finished before it started, in real time.
    pub handouts_at_begin: usize,
    /// Whether the attempt's value still held the lock, at the hand-out, on every node of the
    /// quorum that decided it (raise quorum; acquire quorum for the naive scheme). If not, its
    /// lease had run out before the client even learnt it held: a stale holder from the start.
    pub intact: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: [Node; NODES],
    pub clients: Vec<Client>,
    pub net: Network,
    /// Every hand-out so far, in the order they happened.
    pub handouts: Vec<Handout>,
    /// The nodes' clock, for `FencedClockFloor` (0 in the other schemes): real time, which moves
    /// on when an attempt begins and when a client chooses a token. That is the one assumption
    /// about real clocks the floor needs: a clock read after a token was chosen is later than the
    /// reads that chose it (real clocks count microseconds, and a token takes a round trip at
    /// least), and every node reads the same time (clocks agree).
    pub now: u64,
    /// How many nodes lost their data so far (see `FencingModel::forgets`).
    pub forgotten: u8,
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The client starts its next attempt: sends acquire to every node.
    Begin(u8),
    /// The network delivers a request; the node runs its script atomically.
    Deliver(Msg),
    /// The client ends its acquire round with the `Ok` replies of `oks` (a quorum or more of those
    /// that have arrived; the others are late) and chooses its token from them.
    Count { client: u8, oks: Nodes },
    /// The client ends its raise round: the `Ok` replies of the quorum `oks` have arrived.
    Hold { client: u8, oks: Nodes },
    /// The client ends its current round without a quorum (timeout, or `Taken`/`Lost` replies);
    /// the attempt fails, the client releases.
    GiveUp(u8),
    /// A node loses its data: its lock and its counter (back to 0: a counter brought back to any
    /// older value is no worse, since reads only ever take the larger of the counter and more).
    Forget(usize),
    /// A node's lock expires: its lease ran out (say the holder paused past it), or a release of
    /// its value arrived.
    Expire(usize),
}

/// The model: a scheme and the size of the configuration.
#[derive(Clone, Debug)]
pub struct FencingModel {
    pub scheme: Scheme,
    /// Acquisition attempts of each client (failed ones included); one entry per client.
    pub attempts: &'static [u8],
    /// How many times in a run a node may lose its data.
    pub forgets: u8,
}

/// Property: a hand-out's token exceeds every token handed out before its attempt began.
pub const REAL_TIME_ORDER: &str = "tokens increase in real-time order";
/// Property: no token is handed out twice.
pub const UNIQUE: &str = "tokens are unique";
/// Property: a hand-out whose lease is intact exceeds every token handed out before it.
pub const INTACT_HANDOUT_ORDER: &str = "intact hand-outs increase in hand-out order";
/// Property: every hand-out exceeds every token handed out before it ((a) read literally).
pub const HANDOUT_ORDER: &str = "all hand-outs increase in hand-out order";

impl Model for FencingModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            attempts: 0,
            phase: Phase::Idle,
            handouts_at_begin: 0,
        };
        vec![State {
            nodes: Default::default(),
            clients: vec![client; self.attempts.len()],
            net: Network::default(),
            handouts: Vec::new(),
            now: 0,
            forgotten: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, client) in (0..).zip(&s.clients) {
            let value = current_value(s, c);
            match client.phase {
                Phase::Idle if client.attempts < self.attempts[usize::from(c)] => {
                    actions.push(Action::Begin(c));
                }
                Phase::Idle => {}
                Phase::Acquiring => {
                    actions.push(Action::GiveUp(c));
                    let arrived: Nodes = s.net.acquire_oks(value).map(|(n, _)| n).collect();
                    for len in QUORUM..=NODES {
                        for oks in arrived.subsets(len) {
                            actions.push(Action::Count { client: c, oks });
                        }
                    }
                }
                Phase::Raising { .. } => {
                    actions.push(Action::GiveUp(c));
                    // The client holds as soon as a quorum has arrived.
                    for oks in s.net.raise_oks(value).subsets(QUORUM) {
                        actions.push(Action::Hold { client: c, oks });
                    }
                }
            }
        }
        // Only deliveries that change something: an acquire where the lock is free, a raise where
        // its value holds the lock. The others would be answered `Taken`/`Lost`, which is no
        // different from staying in flight (and maybe landing later).
        for msg in s.net.iter() {
            let effective = match msg {
                Msg::Acquire { to, .. } => s.nodes[to].lock.is_none(),
                Msg::Raise { to, value, .. } => self.raise_applies(s.nodes[to], value),
                Msg::AcquireOk { .. } | Msg::RaiseOk { .. } => false,
            };
            if effective {
                actions.push(Action::Deliver(msg));
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if node.lock.is_some() {
                actions.push(Action::Expire(n));
            }
            if s.forgotten < self.forgets && *node != Node::default() {
                actions.push(Action::Forget(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Begin(c) => {
                self.tick(&mut s);
                let handouts = s.handouts.len();
                let client = &mut s.clients[usize::from(c)];
                client.attempts += 1;
                client.handouts_at_begin = handouts;
                client.phase = Phase::Acquiring;
                let value = current_value(&s, c);
                for to in 0..NODES {
                    s.net.send(Msg::Acquire { to, value });
                }
            }
            Action::Deliver(msg) => {
                s.net.take(msg);
                self.run_script(&mut s, msg);
            }
            Action::Count { client, oks } => self.count(&mut s, client, oks),
            Action::Hold { client, oks } => {
                let Phase::Raising { token } = s.clients[usize::from(client)].phase else {
                    unreachable!("Hold is only enabled while raising")
                };
                hold(&mut s, client, token, oks);
            }
            Action::GiveUp(c) => end_attempt(&mut s, c),
            Action::Expire(n) => s.nodes[n].lock = None,
            Action::Forget(n) => {
                s.nodes[n] = Node::default();
                s.forgotten += 1;
            }
        }
        self.forget_inert(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(REAL_TIME_ORDER, real_time_order),
            Property::always(UNIQUE, unique),
            Property::always(INTACT_HANDOUT_ORDER, intact_handout_order),
            Property::always(HANDOUT_ORDER, handout_order),
        ]
    }
}

fn real_time_order(_: &FencingModel, s: &State) -> bool {
    s.handouts.iter().all(|h| {
        s.handouts[..h.handouts_at_begin]
            .iter()
            .all(|earlier| earlier.token < h.token)
    })
}

fn unique(_: &FencingModel, s: &State) -> bool {
    s.handouts.iter().enumerate().all(|(i, h)| {
        s.handouts[..i]
            .iter()
            .all(|earlier| earlier.token != h.token)
    })
}

fn intact_handout_order(_: &FencingModel, s: &State) -> bool {
    s.handouts.iter().enumerate().all(|(i, h)| {
        !h.intact
            || s.handouts[..i]
                .iter()
                .all(|earlier| earlier.token < h.token)
    })
}

fn handout_order(_: &FencingModel, s: &State) -> bool {
    s.handouts.windows(2).all(|w| w[0].token < w[1].token)
}

impl FencingModel {
    /// Real time moves on (see `State::now`); only the scheme that reads the clock keeps it, so
    /// that the others' states stay as few as before.
    fn tick(&self, s: &mut State) {
        if self.scheme == Scheme::FencedClockFloor {
            s.now += 1;
        }
    }

    /// Whether a raise of `value` does anything on `node`.
    fn raise_applies(&self, node: Node, value: Value) -> bool {
        self.scheme == Scheme::FencedUncheckedRaise || node.lock == Some(value)
    }

    /// A node runs the script of a request, atomically; an `Ok` reply goes back on the network.
    fn run_script(&self, s: &mut State, msg: Msg) {
        match msg {
            Msg::Acquire { to, value } => {
                let node = &mut s.nodes[to];
                if node.lock.is_none() {
                    node.lock = Some(value);
                    let counter = match self.scheme {
                        Scheme::FencedClockFloor => node.counter.max(s.now),
                        _ => node.counter,
                    };
                    if self.scheme == Scheme::NaiveMaxOfQuorum {
                        node.counter += 1;
                    }
                    s.net.send(Msg::AcquireOk {
                        from: to,
                        value,
                        counter,
                    });
                }
            }
            Msg::Raise { to, value, token } => {
                let node = &mut s.nodes[to];
                if self.raise_applies(*node, value) {
                    node.counter = node.counter.max(token);
                    s.net.send(Msg::RaiseOk { from: to, value });
                }
            }
            Msg::AcquireOk { .. } | Msg::RaiseOk { .. } => {
                unreachable!("replies are read by Count and Hold")
            }
        }
    }

    /// The acquire round ends with the `Ok` replies of `oks` counted: the token is the max of their
    /// counters + 1. The naive scheme hands it out at once; the fenced ones raise first.
    fn count(&self, s: &mut State, c: u8, oks: Nodes) {
        let value = current_value(s, c);
        let max = s
            .net
            .acquire_oks(value)
            .filter(|&(n, _)| oks.contains(n))
            .map(|(_, counter)| counter)
            .max()
            .expect("Count needs a quorum of Ok replies");
        let token = max + 1;
        self.tick(s);
        let raise_on = match self.scheme {
            Scheme::NaiveMaxOfQuorum => return hold(s, c, token, oks),
            Scheme::Fenced | Scheme::FencedUncheckedRaise | Scheme::FencedClockFloor => oks,
            Scheme::FencedRaiseOnAll => Nodes::ALL,
        };
        for to in raise_on.iter() {
            s.net.send(Msg::Raise { to, value, token });
        }
        s.clients[usize::from(c)].phase = Phase::Raising { token };
    }

    /// Drops what can no longer change anything but itself, so that the checker does not explore
    /// the moments at which it goes away. Each rule removes interleavings, never a behaviour of the
    /// counters, the clients or the hand-outs:
    /// - a reply to a round that its client no longer waits for (it would be ignored);
    /// - a raise that can never find its value on its node: the value is not there, and its
    ///   acquire there has already landed, so it never will be;
    /// - in the fenced schemes, an acquire whose client no longer waits for its reply, unless a
    ///   raise of the same value to the same node is in flight: landing, it would only hold that
    ///   node's lock for nobody. (The naive acquire increments the counter: it always stays.)
    /// - a lock whose client is not acquiring or raising with it (gave up, or was handed its token,
    ///   or is on a later attempt), unless a raise in flight can still find it: the lock is
    ///   released (an expiry could free it at this very step anyway).
    ///
    /// Why a lock held for nobody, or for a holder, may go early: it only keeps other acquires out
    /// of its node (a raise of another value needs that value's own lock). Every run in which it
    /// stays is matched by a run with the same steps, less that lock's own expiry, in which it went
    /// early; acquires that it kept out are still in flight there, and the counters, clients and
    /// hand-outs are the same in both. Conversely, going early is an expiry, a step of the model.
    fn forget_inert(&self, s: &mut State) {
        let State {
            nodes,
            clients,
            net,
            ..
        } = s;
        let phase_of = |value: Value| {
            let client = clients[usize::from(value.client)];
            (client.attempts == value.attempt).then_some(client.phase)
        };
        let snapshot = net.clone();
        net.retain(|&msg| match msg {
            Msg::AcquireOk { value, .. } => phase_of(value) == Some(Phase::Acquiring),
            Msg::RaiseOk { value, .. } => matches!(phase_of(value), Some(Phase::Raising { .. })),
            Msg::Raise { to, value, .. } => {
                self.raise_applies(nodes[to], value)
                    || snapshot.contains(Msg::Acquire { to, value })
            }
            Msg::Acquire { to, value } => {
                self.scheme == Scheme::NaiveMaxOfQuorum
                    || phase_of(value) == Some(Phase::Acquiring)
                    || snapshot.raise_in_flight(to, value)
            }
        });
        for (to, node) in nodes.iter_mut().enumerate() {
            if let Some(value) = node.lock {
                let live = matches!(
                    phase_of(value),
                    Some(Phase::Acquiring | Phase::Raising { .. })
                );
                if !live && !net.raise_in_flight(to, value) {
                    node.lock = None;
                }
            }
        }
    }
}

/// The value of the client's current attempt.
pub fn current_value(s: &State, c: u8) -> Value {
    Value {
        client: c,
        attempt: s.clients[usize::from(c)].attempts,
    }
}

/// The client is handed `token`, decided by the replies of the quorum `oks`: record it.
fn hold(s: &mut State, c: u8, token: u64, oks: Nodes) {
    let value = current_value(s, c);
    let intact = oks.iter().all(|n| s.nodes[n].lock == Some(value));
    s.handouts.push(Handout {
        value,
        token,
        handouts_at_begin: s.clients[usize::from(c)].handouts_at_begin,
        intact,
    });
    end_attempt(s, c);
}

/// The client's attempt is over (failed, or handed its token); it may begin its next one later.
fn end_attempt(s: &mut State, c: u8) {
    let client = &mut s.clients[usize::from(c)];
    client.phase = Phase::Idle;
    client.handouts_at_begin = 0;
}
