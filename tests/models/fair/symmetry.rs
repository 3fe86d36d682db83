//! The nodes are interchangeable: renaming them maps every run of the model to a run of the model
//! with the same clients' fates. The checker visits one state of each class of renamings (the
//! smallest), which makes the state space up to six times smaller.

use super::protocol::{Client, Msg, NODES, Network, Node, Nodes, Phase, State};

/// Every order of the nodes: `PERMUTATIONS[p][n]` is the new name of node `n`.
const PERMUTATIONS: [[usize; NODES]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// The representative of `s`'s class: the smallest of its renamings.
///
/// States compare by their nodes first, so the smallest renaming has the nodes in order; only
/// the renamings that put them in order (more than one where nodes are equal) are built.
pub fn representative(s: &State) -> State {
    PERMUTATIONS
        .iter()
        .filter(|to| {
            let mut named = [0; NODES];
            for (n, &new) in to.iter().enumerate() {
                named[new] = n;
            }
            named.windows(2).all(|w| s.nodes[w[0]] <= s.nodes[w[1]])
        })
        .map(|to| rename(s, to))
        .min()
        .expect("some renaming puts the nodes in order")
}

fn rename(s: &State, to: &[usize; NODES]) -> State {
    let mut nodes: [Node; NODES] = Default::default();
    for (n, node) in s.nodes.iter().enumerate() {
        nodes[to[n]] = node.clone();
    }
    let mut net = Network::new(s.net.in_order());
    for msg in s.net.iter() {
        net.send(match msg {
            Msg::Round {
                to: n,
                value,
                round,
                offer,
            } => Msg::Round {
                to: to[n],
                value,
                round,
                offer,
            },
            Msg::Release { to: n, value } => Msg::Release { to: to[n], value },
            Msg::Grant {
                from,
                value,
                hint,
                ticket,
            } => Msg::Grant {
                from: to[from],
                value,
                hint,
                ticket,
            },
        });
    }
    State {
        nodes,
        clients: s.clients.iter().map(|c| rename_client(c, to)).collect(),
        net,
        timeouts: s.timeouts,
        reorders: s.reorders,
        overtakes: s.overtakes.clone(),
    }
}

fn rename_client(c: &Client, to: &[usize; NODES]) -> Client {
    let mut renamed = *c;
    for (n, &new) in to.iter().enumerate() {
        renamed.replies[new] = c.replies[n];
        renamed.standing.known[new] = c.standing.known[n];
        renamed.pending[new] = c.pending[n];
    }
    if let Phase::Holding { quorum, .. } = &mut renamed.phase {
        *quorum = rename_nodes(*quorum, to);
    }
    renamed
}

fn rename_nodes(nodes: Nodes, to: &[usize; NODES]) -> Nodes {
    nodes.iter().map(|n| to[n]).collect()
}
