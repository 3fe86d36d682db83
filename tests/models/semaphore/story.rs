//! Tells a path found by the checker as numbered, readable steps.

use stateright::{Model, Path};

use super::protocol::{Action, Msg, Phase, SemaphoreModel, State, Value, current_value};

/// One line per step: what happened, then each node's entries and the holders after it.
pub fn tell(model: &SemaphoreModel, path: Path<State, Action>) -> String {
    let mut out = String::new();
    for (i, (before, action)) in path.into_vec().into_iter().enumerate() {
        let Some(action) = action else { break };
        let after = model
            .next_state(&before, action)
            .expect("every action has a next state");
        let step = event(&before, &after, action);
        out.push_str(&format!(
            "{:>3}. {step:<52} | {}\n",
            i + 1,
            snapshot(&after)
        ));
    }
    out
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
            format!(
                "n{to} admits {value} ({} held there before)",
                s.nodes[to].entries.len()
            )
        }
        Action::Deliver(msg) => format!("{msg:?}"),
        Action::Count { client, oks } => {
            format!("{} counts Ok from {oks} => HOLDS", current_value(s, client))
        }
        Action::GiveUp(c) => format!("{} gives up (timeout), gives back", current_value(s, c)),
        Action::Unlock(c) => format!("{} unlocks", current_value(s, c)),
        Action::Expire { node, value } => {
            let client = after.clients[usize::from(value.client)];
            let current = client.attempts == value.attempt;
            let still = match client.phase {
                Phase::Holding { .. } if current => ", still holding",
                Phase::Acquiring if current => ", its Ok still counts",
                _ => "",
            };
            format!("n{node}: entry of {value} expires{still}")
        }
    }
}

/// `n0 {A1 C1}  n1 {A1 B1}  n2 {B1 C1}  holders A1 B1 C1`
pub fn snapshot(s: &State) -> String {
    let nodes: Vec<String> = s
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let entries: Vec<String> = node.entries.iter().map(Value::to_string).collect();
            format!("n{n} {{{}}}", entries.join(" "))
        })
        .collect();
    let holders: Vec<String> = s.holders().map(|v| v.to_string()).collect();
    format!("{}  holders {}", nodes.join("  "), holders.join(" "))
}
