//! Tells a path found by the checker as numbered, readable steps.

use stateright::{Model, Path};

use super::protocol::{Action, FencingModel, Msg, Phase, State, Value, current_value};

/// One line per step: what happened, then the nodes' locks and counters after it.
pub fn tell(model: &FencingModel, path: Path<State, Action>) -> String {
    let mut out = String::new();
    for (i, (before, action)) in path.into_vec().into_iter().enumerate() {
        let Some(action) = action else { break };
        let after = model
            .next_state(&before, action)
            .expect("every action has a next state");
        let step = format!(
            "{}{}",
            event(&before, &after, action),
            released(&before, &after, action)
        );
        out.push_str(&format!("{:>3}. {step:<66} | {}\n", i + 1, nodes(&after)));
    }
    out
}

/// The tokens handed out, in order: `A1 got 2, B1 got 1`.
pub fn handouts(s: &State) -> String {
    let all: Vec<String> = s
        .handouts
        .iter()
        .map(|h| format!("{} got {}", h.value, h.token))
        .collect();
    all.join(", ")
}

fn event(s: &State, after: &State, action: Action) -> String {
    match action {
        Action::Begin(c) => {
            let value = Value {
                client: c,
                attempt: s.clients[usize::from(c)].attempts + 1,
            };
            format!("{value} begins: acquire -> every node")
        }
        Action::Deliver(Msg::Acquire { to, value }) => {
            let counter = s.nodes[to].counter;
            let incr = if after.nodes[to].counter > counter {
                format!(", counter := {}", after.nodes[to].counter)
            } else {
                String::new()
            };
            let read = after
                .net
                .acquire_oks(value)
                .find(|&(n, _)| n == to)
                .map_or(counter, |(_, read)| read);
            format!("n{to} runs acquire({value}): free, locks{incr}, replies Ok({read})")
        }
        Action::Deliver(Msg::Raise { to, value, token }) => {
            let counter = after.nodes[to].counter;
            let whose = if s.nodes[to].lock == Some(value) {
                "ours".to_owned()
            } else {
                format!("lock is {}, unchecked", lock(s, to))
            };
            format!("n{to} runs raise({value}, {token}): {whose}, counter := {counter}, replies Ok")
        }
        Action::Deliver(msg) => format!("{msg:?}"),
        Action::Count { client, oks } => {
            let value = current_value(s, client);
            let read: Vec<String> = s
                .net
                .acquire_oks(value)
                .filter(|&(n, _)| oks.contains(n))
                .map(|(n, counter)| format!("n{n}:{counter}"))
                .collect();
            let decided = match after.clients[usize::from(client)].phase {
                Phase::Raising { token } => format!("token {token}, raise -> ..."),
                _ => holds(after),
            };
            format!("{value} counts Ok {} => {decided}", read.join(" "))
        }
        Action::Hold { client, oks } => {
            format!(
                "{} gets raise Ok from {oks} => {}",
                current_value(s, client),
                holds(after)
            )
        }
        Action::GiveUp(c) => format!("{} gives up (timeout), releases", current_value(s, c)),
        Action::Expire(n) => {
            let value = s.nodes[n].lock.expect("only a held lock expires");
            format!("n{n}: lock of {value} expires")
        }
        Action::Forget(n) => format!("n{n} forgets its data (restart without persistence)"),
    }
}

/// Locks that the step released without an expiry: those of an attempt that is over (see
/// `forget_inert` in the protocol: its release lands at once).
fn released(before: &State, after: &State, action: Action) -> String {
    let gone: Vec<String> = (0..before.nodes.len())
        .filter(|&n| {
            action != Action::Expire(n)
                && action != Action::Forget(n)
                && after.nodes[n].lock.is_none()
        })
        .filter_map(|n| match (before.nodes[n].lock, action) {
            (Some(value), _) => Some(format!("n{n}:{value}")),
            (None, Action::Deliver(Msg::Acquire { to, value })) if to == n => {
                Some(format!("n{n}:{value}"))
            }
            _ => None,
        })
        .collect();
    if gone.is_empty() {
        String::new()
    } else {
        format!("; released {}", gone.join(" "))
    }
}

fn lock(s: &State, n: usize) -> String {
    s.nodes[n]
        .lock
        .map_or_else(|| "free".to_owned(), |value| value.to_string())
}

/// `HOLDS with token 2`, for the hand-out just recorded.
fn holds(after: &State) -> String {
    let handout = after.handouts.last().expect("a hold records a hand-out");
    let stale = if handout.intact {
        ""
    } else {
        " (lease already gone)"
    };
    format!("HOLDS with token {}{stale}", handout.token)
}

/// `locks A1 -- B1  counters 1 0 0`
fn nodes(s: &State) -> String {
    let locks: Vec<String> = s
        .nodes
        .iter()
        .map(|node| node.lock.map_or_else(|| "--".to_owned(), |v| v.to_string()))
        .collect();
    let counters: Vec<String> = s
        .nodes
        .iter()
        .map(|node| node.counter.to_string())
        .collect();
    let clock = if s.now > 0 {
        format!("  clock {}", s.now)
    } else {
        String::new()
    };
    format!(
        "locks {}  counters {}{clock}",
        locks.join(" "),
        counters.join(" ")
    )
}
