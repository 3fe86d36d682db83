//! Model check of the semaphore's quorum (issue 17) with the `stateright` model checker.
//!
//! This is the protocol `Semaphore` implements (src/semaphore.rs, the acquire script in
//! src/primitives/semaphore/*.lua), checked over every interleaving of a small configuration rather than the few
//! a test samples. Run it with `cargo test --test models semaphore:: -- --nocapture` to see the
//! state counts and each counterexample as numbered steps; the larger configurations, which take
//! minutes, with `cargo test --release --test models semaphore:: -- --ignored --nocapture`.
//!
//! # The protocol (one name, `N` independent nodes, `P` permits)
//! Each node holds a set of entries, each a holder's value with its own expiry. Every script runs
//! atomically on its node.
//! 1. Acquire, sent to every node: sweep the expired entries; if fewer than `P` remain, add ours
//!    and reply `Ok`; otherwise reply "full".
//! 2. With `Ok` from a quorum `q` of the nodes (counting any `q` of those that have arrived) and
//!    validity left, the client holds a permit. Otherwise the attempt fails: give back everywhere,
//!    maybe retry later (bounded).
//! 3. The holder gives its permit back (unlock), or stops relying on it when its validity ends.
//!
//! # Properties, and what the checker finds
//! - `AT_MOST_P`: never more than `P` clients hold a permit at once.
//! - `ALL_P_HELD` (an example, not an invariant): `P` clients can hold at once, so the model is
//!   not vacuously safe.
//!
//! With the rule's quorum, `q = P * N / (P + 1) + 1` (rounded down before adding one), and honest
//! clients, `AT_MOST_P` holds in every reachable state. Each ingredient is load-bearing; the
//! checker finds a counterexample without it:
//! - a plain majority (`Quorum::Majority`), as redis-semaphore's `RedlockSemaphore` counts: three
//!   holders of 2 permits over 3 nodes, on {n0 n1}, {n1 n2} and {n0 n2}, while no node ever
//!   admits more than 2;
//! - validity (`Clients::PastExpiry`): a client that counts or keeps holding past the expiry of
//!   one of its entries lets that node admit another holder under it.
//!
//! # Proof
//! Take `P + 1` clients holding at one moment `T`. Each holds on the `q` nodes it counted, and its
//! entry is live on each of them at `T`: every entry the attempt set was made after the attempt
//! began and lives for the expiry on its node's clock, while the holder relies on its permit only
//! until the attempt's start plus the expiry minus the elapsed time and the drift allowance
//! (validity), which ends first as long as the nodes' clocks run at rates within that allowance.
//! So at `T` the nodes hold `(P + 1) * q` live entries of these clients, a value at most once per
//! node. But a node's script admits a value only while fewer than `P` live entries remain, and
//! entries leave only by expiry or release, so no node holds more than `P` live entries at any
//! moment: at most `P * N` in all. `(P + 1) * q > P * N` by the choice of `q`, a contradiction.
//! The rule's quorum is the smallest with that property, and the majority is below it from
//! `P = 2` on (N = 3: 3 against 2).
//!
//! Assumptions, as for the mutex: nodes keep their data (a node restarted without persistence
//! forgets its entries, so it must stay down longer than the longest expiry); they are independent
//! masters (no failover to a replica that missed entries); clocks run at rates within the drift
//! allowance. Every holder uses the same `P` (the script refuses another count while a holder of
//! the name is live).
//!
//! # What the model covers
//! In `cargo test`: 2 permits and 3 clients, over 3 nodes (three attempts each) and over 5 (one
//! attempt each). The ignored test runs 5 nodes with two attempts each, and 3 permits for 4
//! clients over 5 and over 4 nodes. Every message may be delayed past any number of steps, delivered in any order, or
//! never. A client may time out (give up) at any step, and counts any quorum of the admissions
//! that have arrived (the rest are late). Any entry may expire at any step; an honest client whose
//! entry expires has failed its attempt (the validity check) or stopped holding (its validity
//! ended first), as the proof above says. A failed attempt's acquires may still land, at any later
//! step, while the attempt is still running.
//!
//! # What it abstracts away
//! - Clocks: an entry is "live / expired", and its expiry an event that may happen at any step;
//!   validity arithmetic and drift are the assumption above, not modelled.
//! - "Full" replies and release messages: each could only cause what a timeout or an expiry
//!   already may cause at any step (see `Msg` in `semaphore/protocol.rs`).
//! - Extend: its script renews only a live entry of ours and never adds one, so it changes no
//!   node's set of entries, only when they expire, which the model leaves open anyway.
//! - `forget_inert` in `semaphore/protocol.rs` drops entries and messages nobody can use any
//!   more; each removal is an expiry the model allows anyway, and removes no behaviour.

mod protocol;
mod story;

use crate::model_check;

use protocol::{ALL_P_HELD, AT_MOST_P, Clients, Quorum, SemaphoreModel, State};

/// Attempts per client in `cargo test` over 3 nodes: three each (failed attempts count).
const ATTEMPTS: &[u8] = &[3, 3, 3];

type Run = model_check::Run<SemaphoreModel>;

/// Checks `model` (see [`Run::check`](model_check::Run::check)).
fn check(model: SemaphoreModel, stop_at: &[&'static str]) -> Run {
    let label = format!(
        "{} nodes, {} permits, quorum {:?} ({} nodes), clients {:?}, attempts {:?}",
        model.nodes,
        model.permits,
        model.quorum,
        model.needed(),
        model.clients,
        model.attempts,
    );
    Run::check(model, stop_at, &label)
}

impl Run {
    /// The checker's path to `property` (a counterexample, or an example), told step by step
    /// (and printed).
    fn path(&self, property: &'static str) -> (State, String) {
        let path = self.path_to(property);
        let last = path.last_state().clone();
        let story = story::tell(&self.model, path);
        println!(
            "path to {property:?} ({:?} quorum, {:?} clients):\n{story}",
            self.model.quorum, self.model.clients
        );
        (last, story)
    }

    fn assert_holds(&self, property: &'static str) {
        self.assert_never_broken(property, |run| {
            run.path(property);
        });
    }
}

/// 2 permits over `nodes` nodes.
fn model(
    nodes: usize,
    quorum: Quorum,
    clients: Clients,
    attempts: &'static [u8],
) -> SemaphoreModel {
    SemaphoreModel {
        nodes,
        permits: 2,
        quorum,
        clients,
        attempts,
    }
}

#[test]
fn at_most_p_hold_with_the_rules_quorum() {
    let run = check(model(3, Quorum::Rule, Clients::Honest, ATTEMPTS), &[]);
    assert_eq!(run.model.needed(), 3);
    assert!(
        run.unique_states > 1_000,
        "suspiciously few states: {}",
        run.unique_states
    );
    run.assert_holds(AT_MOST_P);
    // Not vacuous: both permits are held at once in some run.
    let (both, _) = run.path(ALL_P_HELD);
    assert_eq!(both.holders().count(), 2);
}

#[test]
fn a_majority_quorum_lets_three_hold_two_permits() {
    let run = check(
        model(3, Quorum::Majority, Clients::Honest, &[1, 1, 1]),
        &[AT_MOST_P],
    );
    let (last, story) = run.path(AT_MOST_P);
    assert_eq!(last.holders().count(), 3, "{story}");
    // No node ever admitted more than 2: each holder counted a different pair of nodes.
    assert!(last.nodes.iter().all(|n| n.entries.len() <= 2), "{story}");
}

#[test]
fn holding_past_an_expiry_breaks_even_the_rules_quorum() {
    let run = check(
        model(3, Quorum::Rule, Clients::PastExpiry, &[1, 1, 1]),
        &[AT_MOST_P],
    );
    let (last, story) = run.path(AT_MOST_P);
    assert_eq!(last.holders().count(), 3, "{story}");
    assert!(story.contains("expires, still holding"), "{story}");
}

#[test]
fn five_nodes_at_most_p_with_the_rule_and_not_with_a_majority() {
    // 4 of 5: a holder need not be on every node, so holders' quorums differ.
    let run = check(model(5, Quorum::Rule, Clients::Honest, &[1, 1, 1]), &[]);
    assert_eq!(run.model.needed(), 4);
    run.assert_holds(AT_MOST_P);
    run.path(ALL_P_HELD);

    let run = check(
        model(5, Quorum::Majority, Clients::Honest, &[1, 1, 1]),
        &[AT_MOST_P],
    );
    let (last, story) = run.path(AT_MOST_P);
    assert_eq!(last.holders().count(), 3, "{story}");
    assert!(last.nodes.iter().all(|n| n.entries.len() <= 2), "{story}");
}

#[test]
#[ignore = "minutes: cargo test --release --test models semaphore:: -- --ignored --nocapture"]
fn at_most_p_hold_in_larger_configurations() {
    let configurations: [(usize, usize, &'static [u8]); 3] = [
        (5, 2, &[2, 2, 2]),
        (5, 3, &[1, 1, 1, 1]),
        (4, 3, &[2, 1, 1, 1]),
    ];
    for (nodes, permits, attempts) in configurations {
        let model = SemaphoreModel {
            nodes,
            permits,
            quorum: Quorum::Rule,
            clients: Clients::Honest,
            attempts,
        };
        let run = check(model, &[]);
        run.assert_holds(AT_MOST_P);
        run.path(ALL_P_HELD);
    }
}
