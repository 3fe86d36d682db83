//! Tells a path found by the checker as numbered, readable steps.

use stateright::{Model, Path};

use super::protocol::{
    Action, FairModel, Known, Msg, NODES, Node, Phase, Reply, State, Value, client_name,
};

/// One line per step: what happened, then every node's key, line and counter after it.
pub fn tell(model: &FairModel, path: Path<State, Action>) -> String {
    let steps = path.into_vec();
    let mut out = format!("  0. {:<78} | {}\n", "start", nodes(&steps[0].0));
    for (i, (before, action)) in steps.into_iter().enumerate() {
        let Some(action) = action else { break };
        let after = model
            .next_state(&before, action)
            .expect("every action has a next state");
        let step = format!(
            "{}{}",
            event(model, &before, &after, action),
            holds(&before, &after)
        );
        out.push_str(&format!("{:>3}. {step:<78} | {}\n", i + 1, nodes(&after)));
    }
    out
}

/// Who holds at the end, and who overtook whom.
pub fn outcome(s: &State) -> String {
    let mut parts: Vec<String> = (0..)
        .zip(&s.clients)
        .map(|(c, client)| format!("{}: {}", client.value(c), phase(client.phase)))
        .collect();
    for &(c, a) in &s.overtakes {
        parts.push(format!("{} overtook {}", client_name(c), client_name(a)));
    }
    parts.join(", ")
}

fn phase(phase: Phase) -> String {
    match phase {
        Phase::Idle => "idle".to_owned(),
        Phase::Round { .. } => "in a round".to_owned(),
        Phase::Aligning => "aligning".to_owned(),
        Phase::Waiting => "waiting".to_owned(),
        Phase::Retreating => "retreating".to_owned(),
        Phase::Holding { quorum, valid, .. } => {
            let valid = if valid { "" } else { " (expired)" };
            format!("holds on {quorum}{valid}")
        }
        Phase::Done => "unlocked".to_owned(),
        Phase::GaveUp => "gave up".to_owned(),
        Phase::Crashed => "crashed".to_owned(),
    }
}

fn event(model: &FairModel, s: &State, after: &State, action: Action) -> String {
    match action {
        Action::Begin(c) => format!("{} calls lock(): {}", value(after, c), round(after, c)),
        Action::Renew(c) => format!("{} renews: {}", value(s, c), round(after, c)),
        Action::Align(c) => format!("{} aligns: {}", value(s, c), round(after, c)),
        Action::Restart(c) => {
            let fresh = if value(after, c) == value(s, c) {
                "with the same value".to_owned()
            } else {
                format!("with a fresh value {}", value(after, c))
            };
            format!("{} starts over {fresh}: {}", value(s, c), round(after, c))
        }
        Action::Deliver(msg @ Msg::Round { .. }) => script(model, s, after, msg, true),
        Action::DeliverUnheard(msg) => script(model, s, after, msg, false),
        Action::Deliver(Msg::Release { to, value }) => {
            let did = if s.nodes[to].lock != Some(value) {
                if s.nodes[to].ticket_of(value).is_some() {
                    "leaves the line".to_owned()
                } else {
                    "nothing to do".to_owned()
                }
            } else {
                match after.nodes[to].lock {
                    Some(head) => format!("deletes its key, HANDS the lock to {head}"),
                    None => "deletes its key (line empty)".to_owned(),
                }
            };
            format!("n{to} runs release({value}): {did}")
        }
        Action::Deliver(Msg::Grant {
            from,
            value,
            hint,
            ticket,
        }) => {
            format!("{value} hears n{from}'s grant notice (counter {hint}, ticket {ticket})")
        }
        Action::Timeout(c) => format!(
            "{} times out{}",
            value(s, c),
            ended(s, after, c).unwrap_or_default()
        ),
        Action::Unlock(c) => format!("{} unlocks: release -> every node", value(s, c)),
        Action::Crash(c) => format!("{} crashes", client_name(c)),
        Action::ExpireLock(n) => {
            let value = s.nodes[n].lock.expect("only a held key expires");
            format!("n{n}: the key of {value} expires")
        }
        Action::ExpireEntry(n, value) => format!("n{n}: the entry of {value} expires"),
        Action::ForgetCounter(n) => format!("n{n}: the empty line's keys expire, counter 0"),
    }
}

/// A round lands on its node: what the script did, and how the round ended if that was its
/// last missing reply.
fn script(model: &FairModel, s: &State, after: &State, msg: Msg, heard: bool) -> String {
    let Msg::Round {
        to, value, offer, ..
    } = msg
    else {
        unreachable!("only rounds have scripts with replies")
    };
    let (reply, passed) = model.round_script(&mut s.nodes[to].clone(), value, offer);
    let did = if let Some(head) = passed {
        format!(
            "PASSES its key to {} (out of turn), places it at {offer}",
            head.1
        )
    } else if s.nodes[to].lock == Some(value) {
        "extends its key".to_owned()
    } else if after.nodes[to].lock == Some(value) {
        "takes the key".to_owned()
    } else {
        match after.nodes[to].ticket_of(value) {
            Some(t) if s.nodes[to].ticket_of(value) == Some(t) => format!("stays at {t}"),
            Some(t) => format!("places it at {t}"),
            None => "?".to_owned(),
        }
    };
    let lost = if heard { "" } else { " (reply lost)" };
    let late = if s.net.overtakes(msg) {
        " (ahead of earlier requests)"
    } else {
        ""
    };
    format!(
        "n{to} runs round({value}, offer {offer}){late}: {did}, {}{lost}{}",
        reply_name(reply),
        ended(s, after, value.client).unwrap_or_default()
    )
}

/// ` => waits [..]` when client `c`'s round ended in this step.
fn ended(s: &State, after: &State, c: u8) -> Option<String> {
    let (b, a) = (&s.clients[usize::from(c)], &after.clients[usize::from(c)]);
    let Phase::Round { .. } = b.phase else {
        return None;
    };
    if matches!(a.phase, Phase::Round { .. }) && a.rounds == b.rounds {
        return None;
    }
    let verdict = match a.phase {
        Phase::Holding { .. } => "holds".to_owned(),
        Phase::Round { .. } => "tickets differ, aligns at once".to_owned(),
        Phase::Aligning => "tickets differ, aligns".to_owned(),
        Phase::Waiting => format!("waits [{}]", standing(after, c)),
        Phase::Retreating => "reached a minority: releases everywhere".to_owned(),
        Phase::GaveUp => "last round: gives up, releases everywhere".to_owned(),
        other => format!("{other:?}"),
    };
    Some(format!(" => {} {verdict}", a.value(c)))
}

/// `; B1 HOLDS on {n0 n1}` when the step made a client a holder.
fn holds(before: &State, after: &State) -> String {
    let mut out = String::new();
    for (c, (b, a)) in (0..).zip(before.clients.iter().zip(&after.clients)) {
        if let Phase::Holding {
            quorum,
            intact,
            handed,
            ..
        } = a.phase
            && !matches!(b.phase, Phase::Holding { .. })
        {
            let how = if handed {
                "handed over"
            } else {
                "by its round"
            };
            let stale = if intact {
                String::new()
            } else {
                let others: Vec<String> = quorum
                    .iter()
                    .filter(|&n| after.nodes[n].lock != Some(a.value(c)))
                    .map(|n| format!("n{n} is {}", key(&after.nodes[n])))
                    .collect();
                format!(" (BUT {})", others.join(", "))
            };
            out.push_str(&format!("; {} HOLDS on {quorum} {how}{stale}", a.value(c)));
        }
        if a.phase == Phase::Waiting && a.pending == [None; NODES] && b.pending != [None; NODES] {
            out.push_str(&format!(
                "; {} takes in its notices [{}]",
                a.value(c),
                standing(after, c)
            ));
        }
    }
    out
}

fn reply_name(reply: Reply) -> String {
    match reply {
        Reply::Granted => "GRANTED".to_owned(),
        Reply::InLine(t) => format!("IN_LINE({t})"),
    }
}

fn value(s: &State, c: u8) -> Value {
    s.clients[usize::from(c)].value(c)
}

fn round(after: &State, c: u8) -> String {
    let offer = after.net.iter().find_map(|m| match m {
        Msg::Round {
            value,
            round,
            offer,
            ..
        } if value == self::value(after, c) && round == after.clients[usize::from(c)].rounds => {
            Some(offer)
        }
        _ => None,
    });
    let last = match after.clients[usize::from(c)].phase {
        Phase::Round { last: true } => " (its last)",
        _ => "",
    };
    match offer {
        Some(offer) => format!("round{last} offering {offer} -> every node"),
        None => "round -> every node".to_owned(),
    }
}

/// What the client knows of each node: `n0:granted n1:3 n2:-`.
fn standing(s: &State, c: u8) -> String {
    let known = s.clients[usize::from(c)].standing.known;
    let parts: Vec<String> = (0..NODES)
        .map(|n| match known[n] {
            Known::Nothing => format!("n{n}:-"),
            Known::InLine(t) => format!("n{n}:{t}"),
            Known::Granted => format!("n{n}:granted"),
        })
        .collect();
    parts.join(" ")
}

fn key(node: &Node) -> String {
    node.lock
        .map_or_else(|| "free".to_owned(), |value| value.to_string())
}

/// `n0 A1 [1:B1 2:C1] #2`: each node's key, line and counter.
fn nodes(s: &State) -> String {
    let parts: Vec<String> = s
        .nodes
        .iter()
        .map(|node| {
            let line: Vec<String> = node
                .line
                .iter()
                .map(|(ticket, value)| format!("{ticket}:{value}"))
                .collect();
            let lock = node.lock.map_or_else(|| "--".to_owned(), |v| v.to_string());
            format!("{lock} [{}] #{}", line.join(" "), node.counter)
        })
        .collect();
    parts.join(" | ")
}
