//! The fair line as a state machine for the model checker: the nodes' two scripts
//! (`src/waiting/fair/*.lua`), the clients' `lock()` calls (`src/waiting/fair/`, `src/waiting/acquire.rs`),
//! the network between them, expiries and crashes.
//!
//! One lock name. Every node runs each script atomically; a message may be delayed past any number
//! of other steps, delivered in any order, or never. Clients are named `A`, `B`, `C`; a value is
//! a client and the number of its value in its `lock()` call (`B1`, `B2` after a fresh value).

use std::fmt;

use stateright::{Model, Property};

/// Number of Redis nodes.
pub const NODES: usize = 3;
/// Nodes whose agreement holds the lock: a majority.
pub const QUORUM: usize = NODES / 2 + 1;

/// What the model runs: the code, or the code with one ingredient changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Grant notices that do not name the ticket the waiter's place had (as the code's did before
    /// they did): a notice counts as a hand-off on any node where the waiter is in line, so a
    /// notice for a key its round since passed on out of turn still counts.
    UnticketedGrants,
    /// A node gives a waiter that is new to its line the ticket the waiter offers, even one at or
    /// below tickets it gave before (no "counter + 1").
    OfferAsIs,
    /// A waiter that stood in line and then hears of a higher ticket of its own on some node (its
    /// reply was missed when it stood) moves back to it everywhere, as the code did: it may then
    /// stand behind a waiter that joined after it stood.
    AlignAfterStanding,
    /// A waiter whose tickets differ offers its lowest ticket instead of its highest; nodes still
    /// move a waiter only back, so its places never change.
    AlignDown,
    /// As `AlignDown`, with nodes that set a waiter's ticket to its offer either way, so that
    /// aligning down can work.
    AlignDownMovingForward,
    /// A grant notice counts as a hand-off whatever the waiter knows of that node (the code counts
    /// it at once only where a round put the waiter in line).
    TrustEveryGrant,
    /// A waiter in line sends no renewal round: it waits for grant notices alone (the code renews
    /// its place before it expires, and that round is also what finds a lock left free).
    NoticesOnly,
    /// A waiter that retreated starts over with the same value when every node answered its
    /// release (as the code did): grant notices for the places it gave back, kept by its hub or
    /// late, then count as hand-offs of its new places.
    SameValueAfterRetreat,
    /// The scripts and the client as implemented: a grant notice also carries the ticket the
    /// waiter had in line on that node, and counts as a hand-off only where the waiter's place
    /// has that ticket; elsewhere only a round can confirm it.
    Implemented,
}

/// Which clients may crash (up to `FairModel::crashes` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crashing {
    /// Any client in its call, or holding.
    Anyone,
    /// A client in line: it stood in line on a quorum (its last verdict was "wait") and its call
    /// goes on (waiting, or in a renewal round).
    InLine,
    /// A client in line that is the head of the line on a quorum of nodes: the next release
    /// there hands it the lock.
    Head,
    /// As `Head`, or the starting holder while it holds.
    HeadOrHolder,
}

/// A lock value: unique per client and value number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// Client index (0 is `A`).
    pub client: u8,
    /// Which value of the client's call, from 1 (a fresh value after an unconfirmed release).
    pub attempt: u8,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", client_name(self.client), self.attempt)
    }
}

/// `A` for client 0.
pub fn client_name(client: u8) -> char {
    char::from(b'A' + client)
}

/// A set of nodes (bit `n` for node `n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nodes(u8);

impl Nodes {
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
}

impl FromIterator<usize> for Nodes {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Nodes {
        Nodes(iter.into_iter().fold(0, |bits, n| bits | (1 << n)))
    }
}

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.iter().map(|n| format!("n{n}")).collect();
        write!(f, "{{{}}}", names.join(" "))
    }
}

/// One node's keys for the name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The lock key: a value, or `None` when free.
    pub lock: Option<Value>,
    /// The line: `(ticket, value)`, sorted, so the head comes first (ties by value).
    pub line: Vec<(u8, Value)>,
    /// The highest ticket the node gave (the `:ticket` key; 0 once it expired).
    pub counter: u8,
}

impl Node {
    pub fn ticket_of(&self, value: Value) -> Option<u8> {
        self.line
            .iter()
            .find(|&&(_, v)| v == value)
            .map(|&(ticket, _)| ticket)
    }

    pub fn head(&self) -> Option<Value> {
        self.line.first().map(|&(_, v)| v)
    }

    fn remove(&mut self, value: Value) {
        self.line.retain(|&(_, v)| v != value);
    }

    fn place(&mut self, value: Value, ticket: u8) {
        self.remove(value);
        let entry = (ticket, value);
        let at = self.line.partition_point(|&e| e < entry);
        self.line.insert(at, entry);
    }
}

/// A node's reply to a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// `{1, 0}`: the lock is ours there.
    Granted,
    /// `{0, ticket}`: in line there.
    InLine(u8),
}

/// A message in flight: a request to node `to`, or a grant notice to the client owning `value`.
///
/// Replies are not messages: a node's reply to a round reaches its client with the step in which
/// the script runs (or is lost then, see `Action::DeliverUnheard`), and a reply that comes after
/// the client stopped waiting is the same as none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// The `ROUND` script, as round number `round` of the client's call.
    Round {
        to: usize,
        value: Value,
        round: u8,
        offer: u8,
    },
    /// The fair `RELEASE` script (unlock, leaving the line, giving back hand-offs).
    Release { to: usize, value: Value },
    /// A grant notice: node `from` handed the lock to `value`; `hint` is its ticket counter,
    /// `ticket` the ticket `value` had in line there (0 with `UnticketedGrants`, whose notices
    /// do not carry it).
    Grant {
        from: usize,
        value: Value,
        hint: u8,
        ticket: u8,
    },
}

/// The messages in flight, kept in a canonical order so that equal networks are equal states.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Network {
    /// Requests to nodes: sorted, or, where each node takes them in the order they were sent
    /// (`FairModel::reorders`), grouped by node in that order.
    requests: Vec<Msg>,
    /// Grant notices: sorted.
    notices: Vec<Msg>,
    /// Whether `requests` keeps the order of sending.
    in_order: bool,
}

/// The node a request goes to.
fn node_of(msg: Msg) -> Option<usize> {
    match msg {
        Msg::Round { to, .. } | Msg::Release { to, .. } => Some(to),
        Msg::Grant { .. } => None,
    }
}

impl Network {
    /// An empty network; `in_order`: it keeps the order in which requests to a node were sent.
    pub fn new(in_order: bool) -> Network {
        Network {
            in_order,
            ..Network::default()
        }
    }

    /// Whether it keeps the order in which requests to a node were sent.
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    pub fn send(&mut self, msg: Msg) {
        match node_of(msg) {
            Some(_) if self.requests.contains(&msg) => {}
            Some(to) if self.in_order => {
                let at = self
                    .requests
                    .partition_point(|&m| node_of(m).is_some_and(|n| n <= to));
                self.requests.insert(at, msg);
            }
            Some(_) => insert_sorted(&mut self.requests, msg),
            None => insert_sorted(&mut self.notices, msg),
        }
    }

    pub fn take(&mut self, msg: Msg) {
        self.requests.retain(|&m| m != msg);
        self.notices.retain(|&m| m != msg);
    }

    pub fn iter(&self) -> impl Iterator<Item = Msg> + '_ {
        self.requests.iter().chain(&self.notices).copied()
    }

    fn retain(&mut self, mut keep: impl FnMut(&Msg) -> bool) {
        self.requests.retain(&mut keep);
        self.notices.retain(keep);
    }

    /// Whether landing `msg` now would overtake a request sent to its node before it (only
    /// known where the network keeps the order of sending).
    pub fn overtakes(&self, msg: Msg) -> bool {
        let Some(to) = node_of(msg) else {
            return false;
        };
        self.in_order && self.requests.iter().find(|&&m| node_of(m) == Some(to)) != Some(&msg)
    }

    /// Whether `msg` is the next to land of its connection: a client sends its requests to one
    /// node over one connection, which runs them in the order they were sent (rounds by their
    /// number, a release after every round). Grant notices come over the node's notice
    /// connection, in any order.
    pub fn first_in_line(&self, msg: Msg) -> bool {
        let (to, value, round) = match msg {
            Msg::Round {
                to, value, round, ..
            } => (to, value, Some(round)),
            Msg::Release { to, value } => (to, value, None),
            Msg::Grant { .. } => return true,
        };
        !self.iter().any(|m| match m {
            Msg::Round {
                to: t,
                value: v,
                round: r,
                ..
            } => t == to && v == value && round.is_none_or(|round| r < round),
            _ => false,
        })
    }

    /// Whether a release of `value` is still on its way to some node.
    pub fn releasing(&self, value: Value) -> bool {
        self.iter()
            .any(|m| matches!(m, Msg::Release { value: v, .. } if v == value))
    }
}

fn insert_sorted(msgs: &mut Vec<Msg>, msg: Msg) {
    if let Err(at) = msgs.binary_search(&msg) {
        msgs.insert(at, msg);
    }
}

/// What a waiter knows of one node (`Standing` in `src/waiting/fair/standing.rs`: `granted`, or `renewed`
/// with `tickets`, or neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Known {
    #[default]
    Nothing,
    InLine(u8),
    Granted,
}

/// What a waiter does after a round that did not get it the lock (`Next` in the code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Wait,
    Align,
    Retreat,
}

/// A waiter's standing, as `Standing` in `src/waiting/fair/standing.rs` keeps it (times aside).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Standing {
    pub known: [Known; NODES],
    /// A grant notice came from a node with neither a renewal nor a grant known.
    pub unconfirmed: bool,
    /// The ticket it stood in line with, on a quorum: from then on it offers this one, and
    /// never moves back.
    pub stood: Option<u8>,
}

impl Standing {
    /// `Standing::round`: a reply overwrites what was known; no reply keeps a place in line, but
    /// not a key (the round may pass it on where someone is ahead of its offer). Then the ticket
    /// it stands with: the one every node it reached gave it, once those are a quorum; kept
    /// while the nodes where it has that ticket (or the key) are a quorum. `keep`: it keeps its
    /// ticket once it stood (`AlignAfterStanding` does not).
    fn round(&mut self, replies: [Option<Reply>; NODES], keep: bool) {
        self.unconfirmed = false;
        for (known, reply) in self.known.iter_mut().zip(replies) {
            match reply {
                Some(Reply::Granted) => *known = Known::Granted,
                Some(Reply::InLine(ticket)) => *known = Known::InLine(ticket),
                // The round may have passed the key on, out of turn, and may still land.
                None if *known == Known::Granted => *known = Known::Nothing,
                None => {}
            }
        }
        let reached = self.known.iter().filter(|&&k| k != Known::Nothing).count();
        let highest = self.highest();
        self.stood = match self.stood {
            Some(ticket) if keep && self.holding(ticket) >= QUORUM => Some(ticket),
            _ if reached >= QUORUM && self.tickets().all(|t| Some(t) == highest) => highest,
            _ => None,
        };
    }

    /// Nodes where it stands with `ticket`, or holds the key.
    fn holding(&self, ticket: u8) -> usize {
        self.known
            .iter()
            .filter(|&&k| k == Known::Granted || k == Known::InLine(ticket))
            .count()
    }

    /// `Standing::handed`: a place in line known there becomes a grant; with nothing known, only
    /// a round can confirm it. `ticket`: the ticket the notice says the place had
    /// (`Implemented`); a place with another ticket also needs a round.
    fn handed(&mut self, n: usize, ticket: Option<u8>, trust_every_grant: bool) {
        match self.known[n] {
            Known::InLine(t) if ticket.is_none_or(|ticket| ticket == t) => {
                self.known[n] = Known::Granted;
            }
            Known::InLine(_) => self.unconfirmed = true,
            Known::Nothing if trust_every_grant => self.known[n] = Known::Granted,
            Known::Nothing => self.unconfirmed = true,
            Known::Granted => {}
        }
    }

    pub fn granted(&self) -> Nodes {
        (0..NODES)
            .filter(|&n| self.known[n] == Known::Granted)
            .collect()
    }

    fn tickets(&self) -> impl Iterator<Item = u8> + '_ {
        self.known.iter().filter_map(|known| match *known {
            Known::InLine(ticket) => Some(ticket),
            _ => None,
        })
    }

    /// The highest ticket anywhere.
    pub fn highest(&self) -> Option<u8> {
        self.tickets().max()
    }

    /// `Standing::ticket`, the ticket its rounds offer: the one it stood with, else the highest
    /// anywhere.
    pub fn ticket(&self) -> Option<u8> {
        self.stood.or_else(|| self.highest())
    }

    fn lowest(&self) -> Option<u8> {
        self.tickets().min()
    }

    /// `Standing::next`.
    pub fn next(&self) -> Next {
        let reached = self
            .known
            .iter()
            .filter(|&&known| known != Known::Nothing)
            .count();
        if reached < QUORUM {
            Next::Retreat
        } else if self.stood.is_some() || self.tickets().all(|t| Some(t) == self.highest()) {
            Next::Wait
        } else {
            Next::Align
        }
    }
}

/// Where a client's `lock()` call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Not called yet.
    Idle,
    /// A round is out; the call waits for its replies. `last`: the call gives up after it.
    Round { last: bool },
    /// Its tickets differ; the align round is due (progress checks only: elsewhere it is sent
    /// in the same step).
    Aligning,
    /// In line on a quorum with one ticket: waiting for grant notices or its renewal.
    Waiting,
    /// Reached fewer than a quorum: released everywhere, waiting for the release to be answered
    /// (or to time out) before it starts over.
    Retreating,
    /// Holds the lock, decided by the keys on `quorum`. `valid` until one of those keys expires
    /// (the holder's validity ends before). `intact`: every key of `quorum` held its value when
    /// it began to hold. `handed`: it learnt it holds from grant notices, not from a round.
    Holding {
        quorum: Nodes,
        valid: bool,
        intact: bool,
        handed: bool,
    },
    /// Unlocked after holding.
    Done,
    /// The call's time ran out: its last round failed and it released everywhere.
    GaveUp,
    /// The process crashed: it sends nothing more, and its entries and keys expire.
    Crashed,
}

/// A client: one `lock()` call on the name, then an unlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    /// The number of the current value (0 before the call).
    pub attempt: u8,
    pub phase: Phase,
    /// The replies to the current round so far.
    pub replies: [Option<Reply>; NODES],
    pub standing: Standing,
    /// Nodes whose grant notices for the current value arrived but were not yet taken in: the
    /// hub keeps them (under the waiter's turn, or unclaimed until its first wait) until the
    /// waiter looks at its news, which it does only while waiting.
    pub pending: [Option<u8>; NODES],
    /// The highest ticket the client heard of (its offer to join is one above).
    pub heard: u8,
    /// Rounds sent in this call (only counted where the call has a budget of rounds).
    pub rounds: u8,
    /// Its last verdict was `Wait`: it stood in line on a quorum with one ticket.
    pub stood: bool,
    /// It held the lock at some point.
    pub held: bool,
    /// Clients that stood in line, live and not yet served, when this one began to join (bit `c`).
    pub ahead: u8,
}

impl Client {
    pub fn value(&self, c: u8) -> Value {
        Value {
            client: c,
            attempt: self.attempt,
        }
    }

    /// Waiting or in a round: it renews its entries and keys in time, so they do not expire.
    fn renewing(&self) -> bool {
        matches!(
            self.phase,
            Phase::Round { .. } | Phase::Aligning | Phase::Waiting
        )
    }

    /// Still in its call, so its hub keeps grant notices for its value.
    fn listening(&self) -> bool {
        matches!(
            self.phase,
            Phase::Round { .. } | Phase::Aligning | Phase::Waiting | Phase::Retreating
        )
    }

    /// Whether it waits for the reply of `value`'s round `round`.
    fn waits_for(&self, value: Value, round: u8) -> bool {
        matches!(self.phase, Phase::Round { .. })
            && self.attempt == value.attempt
            && self.rounds == round
    }
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    pub nodes: [Node; NODES],
    pub clients: Vec<Client>,
    pub net: Network,
    /// Timeouts so far.
    pub timeouts: u8,
    /// Requests that overtook earlier ones to their node so far (see `FairModel::reorders`).
    pub reorders: u8,
    /// Ghost record: `(c, a)` when `c` began to hold while `a` was ahead of it (see `ahead`).
    pub overtakes: Vec<(u8, u8)>,
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The client calls `lock()`: its first round.
    Begin(u8),
    /// A request lands on its node and the script runs (a round's reply reaches its client at
    /// once, which ends the round when it was the last one missing), or a grant notice reaches
    /// its client.
    Deliver(Msg),
    /// A round lands and its script runs, but the reply is lost.
    DeliverUnheard(Msg),
    /// The client stops waiting for the replies still missing (its node timeout).
    Timeout(u8),
    /// A waiting client's renewal is due: a round.
    Renew(u8),
    /// The align round of a client whose tickets differ (progress checks only).
    Align(u8),
    /// A retreated client starts over, with a fresh value.
    Restart(u8),
    /// The holder unlocks.
    Unlock(u8),
    Crash(u8),
    /// A node's lock key expires (only a key that nobody renews).
    ExpireLock(usize),
    /// A line entry expires (only one that nobody renews).
    ExpireEntry(usize, Value),
    /// A node's empty line keys expire, and its ticket counter with them.
    ForgetCounter(usize),
}

/// The model: which protocol, the size of the configuration and the faults in it.
#[derive(Clone, Debug)]
pub struct FairModel {
    pub variant: Variant,
    /// Client `A` holds the lock on every node at the start (it may unlock or crash).
    pub holder: bool,
    /// Rounds each client's call may send before it gives up (the last one is its last round);
    /// one entry per client (ignored for the starting holder, and in progress checks).
    pub budgets: &'static [u8],
    /// How many clients may crash.
    pub crashes: u8,
    /// Which clients may crash.
    pub crashing: Crashing,
    /// How many times, in all, a client may stop waiting for replies still missing (a round
    /// ends only once every node answered otherwise). Progress checks have none.
    pub timeouts: u8,
    /// A round's script may run and its reply be lost.
    pub lost_replies: bool,
    /// `None`: a node takes requests in any order (those of one connection in the order sent).
    /// `Some(n)`: a node takes requests in the order they were sent to it, but `n` times in all a
    /// request may overtake requests sent before it (of other connections), as one delayed on
    /// its way does.
    pub reorders: Option<u8>,
    /// A holder's keys may expire while it holds (it paused past its lease, say).
    pub lapses: bool,
    /// A node whose line is empty may forget its ticket counter (the line's keys expired).
    pub forget_counters: bool,
    /// A progress check: nothing is lost and nothing times out, nobody gives up, and a waiter
    /// sends a round only when it would change something (see `useful`).
    pub progress: bool,
}

/// Property: never two holders whose holds are valid.
pub const MUTUAL_EXCLUSION: &str = "mutual exclusion";
/// Property: no holder overtook a live waiter that stood in line before it began to join.
pub const NO_OVERTAKING: &str = "no overtaking";
/// Property (progress checks): every client that did not crash eventually held and unlocked.
pub const PROGRESS: &str = "progress";
/// Property (progress checks): while a client that did not crash is not yet served, some step
/// other than a crash can happen. No crash need ever come, so a state whose only ways on are
/// crashes is one where a run may stop; the checker judges `PROGRESS` only where no step at all
/// is left.
pub const NOT_STUCK: &str = "not stuck";
/// Example: a waiter holds by grant notices alone.
pub const HANDED_OVER: &str = "a waiter holds by hand-offs";
/// Example: a client holds after another one crashed while in line.
pub const SERVED_AFTER_CRASH: &str = "served after a crash";

impl Model for FairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let idle = Client {
            attempt: 0,
            phase: Phase::Idle,
            replies: [None; NODES],
            standing: Standing::default(),
            pending: [None; NODES],
            heard: 0,
            rounds: 0,
            stood: false,
            held: false,
            ahead: 0,
        };
        let mut s = State {
            nodes: Default::default(),
            clients: vec![idle; self.budgets.len()],
            net: Network::new(self.reorders.is_some()),
            timeouts: 0,
            reorders: 0,
            overtakes: Vec::new(),
        };
        if self.holder {
            let holder = &mut s.clients[0];
            holder.attempt = 1;
            holder.held = true;
            holder.phase = Phase::Holding {
                quorum: Nodes::ALL,
                valid: true,
                intact: true,
                handed: false,
            };
            for node in &mut s.nodes {
                node.lock = Some(holder.value(0));
            }
        }
        vec![s]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let crashed = s
            .clients
            .iter()
            .filter(|c| c.phase == Phase::Crashed)
            .count();
        for (c, client) in (0..).zip(&s.clients) {
            match client.phase {
                Phase::Idle => actions.push(Action::Begin(c)),
                // A round whose replies are all in has ended (see `deliver`).
                Phase::Round { .. } if s.timeouts < self.timeouts => {
                    actions.push(Action::Timeout(c));
                }
                Phase::Round { .. } => {}
                Phase::Aligning => {
                    if self.useful(s, c) {
                        actions.push(Action::Align(c));
                    }
                }
                Phase::Waiting if self.variant == Variant::NoticesOnly => {}
                Phase::Waiting => {
                    if !self.progress || self.useful(s, c) {
                        actions.push(Action::Renew(c));
                    }
                }
                Phase::Retreating => actions.push(Action::Restart(c)),
                Phase::Holding { .. } => actions.push(Action::Unlock(c)),
                Phase::Done | Phase::GaveUp | Phase::Crashed => {}
            }
            if crashed < usize::from(self.crashes) && self.may_crash(s, c) {
                actions.push(Action::Crash(c));
            }
        }
        for msg in s.net.iter() {
            if !s.net.first_in_line(msg) {
                continue;
            }
            if s.net.overtakes(msg) && s.reorders >= self.reorders.unwrap_or(0) {
                continue;
            }
            actions.push(Action::Deliver(msg));
            if let Msg::Round { value, round, .. } = msg {
                let client = &s.clients[usize::from(value.client)];
                if self.lost_replies && client.waits_for(value, round) {
                    actions.push(Action::DeliverUnheard(msg));
                }
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if node.lock.is_some_and(|v| self.expires(s, v, Some(n))) {
                actions.push(Action::ExpireLock(n));
            }
            for &(_, v) in &node.line {
                if self.expires(s, v, None) {
                    actions.push(Action::ExpireEntry(n, v));
                }
            }
            if self.forget_counters && node.line.is_empty() && node.counter > 0 {
                actions.push(Action::ForgetCounter(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Begin(c) => {
                s.clients[usize::from(c)].attempt = 1;
                self.start_round(&mut s, c, true);
            }
            Action::Deliver(msg) => {
                s.reorders += u8::from(s.net.overtakes(msg));
                s.net.take(msg);
                self.deliver(&mut s, msg, true);
            }
            Action::DeliverUnheard(msg) => {
                s.reorders += u8::from(s.net.overtakes(msg));
                s.net.take(msg);
                self.deliver(&mut s, msg, false);
            }
            Action::Timeout(c) => {
                s.timeouts += 1;
                self.end_round(&mut s, c);
            }
            Action::Renew(c) | Action::Align(c) => self.start_round(&mut s, c, false),
            Action::Restart(c) => {
                let client = &mut s.clients[usize::from(c)];
                let same_value = self.variant == Variant::SameValueAfterRetreat;
                if s.net.releasing(client.value(c)) || !same_value {
                    // A fresh value: a release that timed out somewhere cannot land on the next
                    // round's keys (src/waiting/acquire.rs), and hand-offs to the old value, which the
                    // retreat gave back, no longer count (`Turn::rename`), however late their
                    // notices come.
                    client.attempt += 1;
                    client.pending = [None; NODES];
                }
                self.start_round(&mut s, c, true);
            }
            Action::Unlock(c) => {
                let client = &mut s.clients[usize::from(c)];
                client.phase = Phase::Done;
                let value = client.value(c);
                release_everywhere(&mut s, value);
            }
            Action::Crash(c) => s.clients[usize::from(c)].phase = Phase::Crashed,
            Action::ExpireLock(n) => {
                let value = s.nodes[n].lock.take().expect("only a held key expires");
                let client = &mut s.clients[usize::from(value.client)];
                if client.attempt == value.attempt
                    && let Phase::Holding { quorum, valid, .. } = &mut client.phase
                    && quorum.contains(n)
                {
                    *valid = false;
                }
            }
            Action::ExpireEntry(n, value) => s.nodes[n].remove(value),
            Action::ForgetCounter(n) => s.nodes[n].counter = 0,
        }
        forget_inert(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(MUTUAL_EXCLUSION, mutual_exclusion),
            Property::always(NO_OVERTAKING, |_, s: &State| s.overtakes.is_empty()),
            Property::sometimes(HANDED_OVER, handed_over),
            Property::sometimes(SERVED_AFTER_CRASH, served_after_crash),
        ];
        if self.progress {
            properties.push(Property::eventually(PROGRESS, everyone_served));
            properties.push(Property::always(NOT_STUCK, not_stuck));
        }
        properties
    }
}

fn mutual_exclusion(_: &FairModel, s: &State) -> bool {
    let holders = s
        .clients
        .iter()
        .filter(|c| matches!(c.phase, Phase::Holding { valid: true, .. }))
        .count();
    holders <= 1
}

fn handed_over(_: &FairModel, s: &State) -> bool {
    s.clients
        .iter()
        .any(|c| matches!(c.phase, Phase::Holding { handed: true, .. }))
}

fn served_after_crash(_: &FairModel, s: &State) -> bool {
    s.clients
        .iter()
        .any(|c| c.phase == Phase::Crashed && c.stood)
        && s.clients
            .iter()
            .any(|c| matches!(c.phase, Phase::Holding { valid: true, .. }))
}

fn everyone_served(_: &FairModel, s: &State) -> bool {
    s.clients
        .iter()
        .all(|c| matches!(c.phase, Phase::Done | Phase::Crashed))
}

fn not_stuck(model: &FairModel, s: &State) -> bool {
    let mut actions = Vec::new();
    model.actions(s, &mut actions);
    everyone_served(model, s) || actions.iter().any(|a| !matches!(a, Action::Crash(_)))
}

fn release_everywhere(s: &mut State, value: Value) {
    for to in 0..NODES {
        s.net.send(Msg::Release { to, value });
    }
}

/// Drops grant notices for a value whose call is over or moved to a fresh value: nobody looks
/// at them any more, and the checker need not explore when they go away.
///
/// Also drops a release that would find nothing of its value on its node and has no round of it
/// to wait for there: it would change nothing when it lands.
fn forget_inert(s: &mut State) {
    let State {
        clients,
        net,
        nodes,
        ..
    } = s;
    let before = net.clone();
    net.retain(|&msg| match msg {
        Msg::Grant { value, .. } => {
            let client = &clients[usize::from(value.client)];
            client.attempt == value.attempt && client.listening()
        }
        Msg::Release { to, value } => {
            let node = &nodes[to];
            node.lock == Some(value)
                || node.ticket_of(value).is_some()
                || !before.first_in_line(msg)
        }
        Msg::Round { .. } => true,
    });
}

impl FairModel {
    /// Whether client `c` may crash now (within the number of crashes).
    fn may_crash(&self, s: &State, c: u8) -> bool {
        let client = &s.clients[usize::from(c)];
        let in_call = !matches!(
            client.phase,
            Phase::Idle | Phase::Done | Phase::GaveUp | Phase::Crashed
        );
        let in_line = client.stood && client.renewing();
        let value = client.value(c);
        match self.crashing {
            Crashing::Anyone => in_call,
            Crashing::InLine => in_line,
            Crashing::Head | Crashing::HeadOrHolder => {
                let heads = s.nodes.iter().filter(|n| n.head() == Some(value)).count();
                let holder = self.crashing == Crashing::HeadOrHolder
                    && self.holder
                    && c == 0
                    && matches!(client.phase, Phase::Holding { .. });
                (in_line && heads >= QUORUM) || holder
            }
        }
    }

    /// Whether the entries and the key of `value` may expire: nobody renews them. A waiter
    /// renews in time; a holder does not renew its entries, and its keys lapse only where the
    /// configuration says so (or once it crashed).
    ///
    /// A client that left the line (unlocked, gave up, or retreats) has its release on the way to
    /// every node where it has something; its release lands after its rounds (see
    /// `Network::first_in_line`). A release that never lands is, for the nodes, the same as a
    /// crash after sending it, so only a crashed client's entries and keys (and those of a value
    /// the client moved on from, whose release timed out) expire on their own.
    fn expires(&self, s: &State, value: Value, key_on: Option<usize>) -> bool {
        let client = &s.clients[usize::from(value.client)];
        if client.attempt != value.attempt {
            return true;
        }
        match (client.phase, key_on) {
            (Phase::Crashed, _) => true,
            // Its entries are no longer renewed; its keys of the quorum it counts lapse only where
            // the configuration says so, the others (handed to a stale entry) when that entry would
            // have.
            (Phase::Holding { .. }, None) => true,
            (Phase::Holding { quorum, .. }, Some(n)) => self.lapses || !quorum.contains(n),
            _ => false,
        }
    }

    /// A round of client `c` begins (`join`: the first of its current value, or after starting
    /// over): every node is sent the same offer.
    fn start_round(&self, s: &mut State, c: u8, join: bool) {
        if join {
            let ahead = (0..)
                .zip(&s.clients)
                .filter(|&(a, other)| a != c && other.stood && other.renewing() && !other.held)
                .fold(0, |bits, (a, _)| bits | (1 << a));
            s.clients[usize::from(c)].ahead |= ahead;
        }
        let client = &mut s.clients[usize::from(c)];
        if !self.progress {
            client.rounds += 1;
        }
        let last = !self.progress && client.rounds >= self.budgets[usize::from(c)];
        let offer = self.offer(client);
        client.phase = Phase::Round { last };
        client.replies = [None; NODES];
        let (value, round) = (client.value(c), client.rounds);
        for to in 0..NODES {
            s.net.send(Msg::Round {
                to,
                value,
                round,
                offer,
            });
        }
    }

    /// The ticket a grant notice carries for a head that had `ticket` (see `Msg::Grant`).
    fn notice_ticket(&self, ticket: u8) -> u8 {
        if self.variant == Variant::Implemented {
            ticket
        } else {
            0
        }
    }

    /// Whether a waiter that stood keeps its ticket (see `Standing::round`).
    fn keeps_standing(&self) -> bool {
        self.variant != Variant::AlignAfterStanding
    }

    /// The ticket a client's next round offers (`FairWait::op`): in line, its highest ticket;
    /// joining, one above the highest it heard of.
    fn offer(&self, client: &Client) -> u8 {
        let ticket = match self.variant {
            Variant::AlignDown | Variant::AlignDownMovingForward => client.standing.lowest(),
            _ => client.standing.ticket(),
        };
        ticket.unwrap_or(client.heard + 1)
    }

    /// A message arrives; for a round, `heard` says whether its reply reaches the client.
    fn deliver(&self, s: &mut State, msg: Msg, heard: bool) {
        match msg {
            Msg::Round {
                to,
                value,
                round,
                offer,
            } => {
                let hint = s.nodes[to].counter;
                let (reply, passed) = self.round_script(&mut s.nodes[to], value, offer);
                if let Some((ticket, head)) = passed {
                    s.net.send(Msg::Grant {
                        from: to,
                        value: head,
                        hint,
                        ticket: self.notice_ticket(ticket),
                    });
                }
                let c = value.client;
                let client = &mut s.clients[usize::from(c)];
                if heard && client.waits_for(value, round) {
                    client.replies[to] = Some(reply);
                    // The round ends once every node answered: nothing else happens in between
                    // that could not happen after.
                    if client.replies.iter().all(Option::is_some) {
                        self.end_round(s, c);
                    }
                }
            }
            Msg::Release { to, value } => {
                let node = &mut s.nodes[to];
                node.remove(value);
                if node.lock == Some(value) {
                    node.lock = None;
                    // Expired entries are gone already (an expiry is a step of its own).
                    if let Some(&(ticket, head)) = node.line.first() {
                        node.lock = Some(head);
                        node.remove(head);
                        let hint = node.counter;
                        s.net.send(Msg::Grant {
                            from: to,
                            value: head,
                            hint,
                            ticket: self.notice_ticket(ticket),
                        });
                    }
                    // Without a head, a plain release notice: it only makes a waiter start a
                    // round sooner, which a renewal may do at any step (not modelled).
                }
            }
            Msg::Grant {
                from,
                value,
                hint,
                ticket,
            } => {
                let client = &mut s.clients[usize::from(value.client)];
                client.heard = client.heard.max(hint);
                client.pending[from] = Some(ticket);
                if client.phase == Phase::Waiting {
                    self.news(s, value.client);
                }
            }
        }
    }

    /// The `ROUND` script on one node.
    ///
    /// A waiter whose key is held out of turn there (someone is ahead of its offer) passes it to
    /// the head, as a release would, and stands at its offer: the head it was handed to comes
    /// second (the node publishes a grant notice for it).
    pub fn round_script(
        &self,
        node: &mut Node,
        value: Value,
        offer: u8,
    ) -> (Reply, Option<(u8, Value)>) {
        if node.lock == Some(value) {
            if let Some(&(ticket, head)) = node.line.first()
                && (ticket, head) < (offer, value)
            {
                node.lock = Some(head);
                node.remove(head);
                node.place(value, offer);
                node.counter = node.counter.max(offer);
                return (Reply::InLine(offer), Some((ticket, head)));
            }
            node.remove(value);
            return (Reply::Granted, None);
        }
        if node.lock.is_none() && node.head().is_none_or(|head| head == value) {
            node.lock = Some(value);
            node.remove(value);
            return (Reply::Granted, None);
        }
        let ticket = match node.ticket_of(value) {
            Some(ticket) => {
                let moves = match self.variant {
                    Variant::AlignDownMovingForward => offer != ticket,
                    _ => offer > ticket,
                };
                if moves {
                    node.place(value, offer);
                    offer
                } else {
                    ticket
                }
            }
            None => {
                let ticket = match self.variant {
                    Variant::OfferAsIs => offer,
                    _ => offer.max(node.counter + 1),
                };
                node.place(value, ticket);
                ticket
            }
        };
        node.counter = node.counter.max(ticket);
        (Reply::InLine(ticket), None)
    }

    /// The round of client `c` ends with the replies it has (`FairWait::observe`, then the
    /// judgement in `attempt_once`, then `FairWait::wait`).
    fn end_round(&self, s: &mut State, c: u8) {
        let client = &mut s.clients[usize::from(c)];
        let Phase::Round { last } = client.phase else {
            unreachable!("a round ends only while it is out")
        };
        let value = client.value(c);
        let replies = std::mem::take(&mut client.replies);
        let granted: Nodes = (0..NODES)
            .filter(|&n| replies[n] == Some(Reply::Granted))
            .collect();
        client.standing.round(replies, self.keeps_standing());
        client.heard = client.heard.max(client.standing.highest().unwrap_or(0));
        let next = client.standing.next();
        if granted.len() >= QUORUM {
            // The validity is assumed positive: a slow client only delays what follows.
            return hold(s, c, granted, false);
        }
        if last {
            client.standing = Standing::default();
            client.phase = Phase::GaveUp;
            return release_everywhere(s, value);
        }
        match next {
            Next::Retreat => {
                // It leaves the line: whoever joins now may be served before it.
                client.stood = false;
                for other in &mut s.clients {
                    other.ahead &= !(1 << c);
                }
                let client = &mut s.clients[usize::from(c)];
                // The hub keeps grant notices that came for this value (`pending`).
                client.standing = Standing::default();
                client.phase = Phase::Retreating;
                release_everywhere(s, value);
            }
            Next::Align if self.progress => client.phase = Phase::Aligning,
            Next::Align => self.start_round(s, c, false),
            Next::Wait => {
                client.stood = true;
                client.phase = Phase::Waiting;
                self.news(s, c);
            }
        }
    }

    /// A waiting client looks at the grant notices that came (`FairWait::news`).
    fn news(&self, s: &mut State, c: u8) {
        let client = &mut s.clients[usize::from(c)];
        let trust = self.variant == Variant::TrustEveryGrant;
        let ticketed = self.variant == Variant::Implemented;
        for (n, ticket) in client.pending.into_iter().enumerate() {
            if let Some(ticket) = ticket {
                client.standing.handed(n, ticketed.then_some(ticket), trust);
            }
        }
        client.pending = [None; NODES];
        let granted = client.standing.granted();
        if granted.len() >= QUORUM {
            hold(s, c, granted, true);
        } else if client.standing.unconfirmed {
            self.start_round(s, c, false);
        }
    }

    /// In progress checks: whether a round of client `c` sent now would change anything, were
    /// it delivered at once (a round that changes nothing only renews, and live waiters' entries
    /// do not expire here; a run that repeats it forever shows as a terminal state).
    fn useful(&self, s: &State, c: u8) -> bool {
        let mut nodes = s.nodes.clone();
        let client = &s.clients[usize::from(c)];
        let offer = self.offer(client);
        let mut replies = [None; NODES];
        for (node, reply) in nodes.iter_mut().zip(&mut replies) {
            *reply = Some(self.round_script(node, client.value(c), offer).0);
        }
        let mut standing = client.standing;
        standing.round(replies, self.keeps_standing());
        nodes != s.nodes || standing != client.standing
    }
}

/// Client `c` begins to hold, decided by the keys of `quorum`.
fn hold(s: &mut State, c: u8, quorum: Nodes, handed: bool) {
    let value = s.clients[usize::from(c)].value(c);
    let intact = quorum.iter().all(|n| s.nodes[n].lock == Some(value));
    let ahead = s.clients[usize::from(c)].ahead;
    for (a, other) in (0..).zip(&s.clients) {
        let live = !matches!(other.phase, Phase::Crashed | Phase::GaveUp);
        if ahead & (1 << a) != 0 && live && !other.held {
            s.overtakes.push((c, a));
        }
    }
    let client = &mut s.clients[usize::from(c)];
    client.held = true;
    client.phase = Phase::Holding {
        quorum,
        valid: true,
        intact,
        handed,
    };
}
