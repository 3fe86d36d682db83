//! Model check of the fair line (issue 15) with the `stateright` model checker: work in progress.
//!
//! The protocol is the implemented one (README, "Waiting in a fair line"; the ROUND and RELEASE
//! scripts in src/scripts/fair.rs; the client in src/waiting/fair.rs and src/acquire.rs), as
//! `model_fair/protocol.rs` describes it: 3 nodes, client `A` holding the lock at the start (it
//! unlocks, or crashes), waiters `B` and `C` with small budgets of rounds, every request delayed
//! past any number of steps (in order per connection), grant notices in any order, replies lost or
//! timed out (bounded), and the entries and keys of a crashed client (or of a value its client
//! moved on from) expiring at any step.
//!
//! # Properties
//! - `MUTUAL_EXCLUSION`: never two clients holding with valid keys at once.
//! - `NO_OVERTAKING`: a client that stood in line (its last round's verdict was "wait": on a
//!   quorum, one ticket) and stayed live and in line is not overtaken by a client that began to
//!   join after that.
//!
//! # What it abstracts away
//! - Time: a live waiter renews in time, so its entries and keys do not expire; a holder's keys
//!   of the quorum it counts lapse only with `lapses`; a release that never lands is, for the
//!   nodes, a crash after sending it, so only a crashed client's entries and keys expire on their
//!   own.
//! - Requests of one client to one node run in the order sent (one connection per node).
//! - Requests to one node: in any order (those of one connection in the order sent), or, to
//!   make larger configurations fit, in the order sent save a budget of overtakings (`reorders`).
//!
//! # What it found, and the negative controls
//! - A waiter that retreated and started over with the same value took the grant notices for
//!   keys its retreat gave back as hand-offs of its new places, and held beside the waiter those
//!   keys went to (`SameValueAfterRetreat`, asserted broken; the code now takes a fresh value).
//! - A waiter that stood in line and then heard of a higher ticket of its own on one node (a
//!   late reply) moved back to it everywhere, behind a waiter that joined after it stood
//!   (`AlignAfterStanding`, asserted broken; it now keeps the ticket it stood with).
//! - A round's script passes a key its waiter holds out of turn to the waiter ahead of it (the
//!   ROUND script, modelled). A waiter whose align round passed on keys the holder's release had
//!   just handed it takes in the grant notices of those hand-offs after the round, finds itself
//!   in line there, and counts them: two holders (`Implemented`, asserted broken). Notices that
//!   name the ticket the place had, counted only where the place still has it
//!   (`TicketedGrants`, a proposal: the RELEASE and ROUND scripts' notices would carry it), pass
//!   this configuration and the late-reply one.
//! - A holder's round that timed out may still land and pass a key of its quorum on: a key whose
//!   round went unanswered no longer counts (the code now forgets it, see `Standing::round`).
//! - A node that gives a joiner the ticket it offers as it is (no "counter + 1") lets a later
//!   joiner overtake (`OfferAsIs`). The other variants have not produced a counterexample in the
//!   configurations tried, so they are not asserted.
//!
//! Progress (every live waiter is eventually served) is checked without faults only; with a
//! crashing client the state space outgrows memory, so progress when the head crashes is not
//! checked here. `cargo test --test model_fair` runs the small configurations;
//! `cargo test --release --test model_fair -- --ignored --nocapture` the larger ones, and
//! `explore` (ignored) any configuration from environment variables.

#[path = "model_fair/protocol.rs"]
mod protocol;
#[path = "model_fair/story.rs"]
mod story;

#[path = "support/model_check.rs"]
mod model_check;

use model_check::Search;
use protocol::{FairModel, MUTUAL_EXCLUSION, NO_OVERTAKING, PROGRESS, Phase, State, Variant};

type Run = model_check::Run<FairModel>;

/// Checks `model` (see [`Run::check`](model_check::Run::check)).
fn check(model: FairModel, stop_at: &[&'static str]) -> Run {
    let label = format!("{model:?}");
    Run::check(model, stop_at, &label)
}

impl Run {
    fn counterexample(&self, property: &'static str) -> (State, String) {
        let path = self.path_to(property);
        let last = path.last_state().clone();
        let story = story::tell(&self.model, path);
        println!(
            "counterexample to {property:?} ({:?}): {}\n{story}",
            self.model.variant,
            story::outcome(&last)
        );
        (last, story)
    }

    fn assert_holds(&self, property: &'static str) {
        self.assert_never_broken(property, |run| {
            run.counterexample(property);
        });
    }
}

/// A holder and two waiters with one round each, no faults.
fn small() -> FairModel {
    FairModel {
        variant: Variant::Implemented,
        holder: true,
        budgets: &[0, 1, 1],
        crashes: 0,
        timeouts: 0,
        lost_replies: false,
        reorders: None,
        lapses: false,
        forget_counters: false,
        progress: false,
    }
}

#[test]
fn exclusion_and_order_hold_in_a_small_configuration() {
    let run = check(small(), &[]);
    assert!(
        run.unique_states > 10_000,
        "suspiciously few states: {}",
        run.unique_states
    );
    run.assert_holds(MUTUAL_EXCLUSION);
    run.assert_holds(NO_OVERTAKING);
}

#[test]
fn a_node_that_gives_the_offered_ticket_as_it_is_lets_a_later_joiner_overtake() {
    // Without "counter + 1", C stands on a quorum with ticket 1, B joins later offering 1 and
    // gets it too, and the tie goes to B's smaller value.
    let model = FairModel {
        variant: Variant::OfferAsIs,
        budgets: &[0, 2, 2],
        ..small()
    };
    let run = check(model, &[NO_OVERTAKING]);
    let (last, story) = run.counterexample(NO_OVERTAKING);
    assert!(!last.overtakes.is_empty(), "{story}");
}

/// Checks `model` depth first: memory then goes to the set of states seen, not to the states
/// waiting to be visited, which lets larger configurations fit.
fn check_depth_first(model: FairModel, stop_at: &[&'static str]) -> Run {
    let label = format!("{model:?}");
    Run::check_with(
        model,
        stop_at,
        &label,
        Search::DepthFirst { symmetry: None },
    )
}

/// A waiter that retreats gives back the keys it was handed; if it starts over with the same
/// value, the notices of those hand-offs (kept by its hub, or late) count for its new places.
/// One timeout, requests in order: two waiters and the holder suffice.
fn stale_hand_offs() -> FairModel {
    FairModel {
        budgets: &[0, 3, 1],
        timeouts: 1,
        reorders: Some(0),
        ..small()
    }
}

#[test]
fn a_waiter_that_starts_over_with_its_old_value_counts_hand_offs_it_gave_back() {
    // B's first round times out before any reply: it retreats. Its round then lands everywhere,
    // the holder's release hands B each key, and B's release passes it on (or frees it for C).
    // B starts over with the same value, stands behind C, and takes in the old grant notices:
    // both hold.
    let model = FairModel {
        variant: Variant::SameValueAfterRetreat,
        ..stale_hand_offs()
    };
    let run = check(model, &[MUTUAL_EXCLUSION]);
    let (last, story) = run.counterexample(MUTUAL_EXCLUSION);
    let holders = last
        .clients
        .iter()
        .filter(|c| matches!(c.phase, Phase::Holding { valid: true, .. }))
        .count();
    assert_eq!(holders, 2, "{story}");
}

#[test]
fn a_waiter_that_starts_over_with_a_fresh_value_ignores_old_hand_offs() {
    let run = check(stale_hand_offs(), &[]);
    run.assert_holds(MUTUAL_EXCLUSION);
    run.assert_holds(NO_OVERTAKING);
}

/// The smallest configuration found where a waiter that stood in line learns of a higher
/// ticket of its own afterwards: C's first round times out with a request still on its way to
/// one node, B joins and B's request to that node overtakes C's there. Both waiters need three
/// rounds (join, then renew or align, and one to stand or be served in).
fn late_reply() -> FairModel {
    FairModel {
        budgets: &[0, 3, 3],
        timeouts: 1,
        reorders: Some(1),
        ..small()
    }
}

#[test]
#[ignore = "half a minute: cargo test --release --test model_fair -- --ignored --nocapture"]
fn a_waiter_that_moves_back_after_standing_can_be_overtaken() {
    // C stands on n1 and n2 with ticket 1, its request to n0 delayed. B joins after, gets 2 on
    // n1 and n2, and 1 on n0, ahead of C's request; B aligns to 2. C's request lands on n0: 2.
    // C's renewal hears it and moves C back to 2 everywhere, where B, tied and with the smaller
    // value, is ahead of it. The next release hands B the lock.
    let model = FairModel {
        variant: Variant::AlignAfterStanding,
        ..late_reply()
    };
    let run = check_depth_first(model, &[NO_OVERTAKING]);
    let (last, story) = run.counterexample(NO_OVERTAKING);
    assert!(!last.overtakes.is_empty(), "{story}");
}

#[test]
#[ignore = "minutes: cargo test --release --test model_fair -- --ignored --nocapture"]
fn a_waiter_that_keeps_the_ticket_it_stood_with_is_not_overtaken() {
    // With grant notices that name the ticket (not implemented yet: see below), since keys
    // passed on out of turn break exclusion in this configuration otherwise.
    let model = FairModel {
        variant: Variant::TicketedGrants,
        ..late_reply()
    };
    let run = check_depth_first(model, &[]);
    run.assert_holds(MUTUAL_EXCLUSION);
    run.assert_holds(NO_OVERTAKING);
}

/// Two waiters that join at once take different nodes first; both align, and the holder's
/// release hands a key to the one that moves back.
fn passed_keys() -> FairModel {
    FairModel {
        budgets: &[0, 3, 3],
        reorders: Some(1),
        ..small()
    }
}

#[test]
fn a_key_passed_on_out_of_turn_is_still_counted_from_its_grant_notice() {
    // C stands first on n1 and n2, B on n0 (its request overtook C's). The holder's release
    // hands n1 and n2 to C while C's align round is out; that round finds B ahead of C's new
    // ticket and passes both keys to B. C then takes in the two grant notices: they say nothing
    // of which place they were for, and C is in line there, so C holds too.
    let run = check_depth_first(passed_keys(), &[MUTUAL_EXCLUSION]);
    let (last, story) = run.counterexample(MUTUAL_EXCLUSION);
    let holders = last
        .clients
        .iter()
        .filter(|c| matches!(c.phase, Phase::Holding { valid: true, .. }))
        .count();
    assert_eq!(holders, 2, "{story}");
}

#[test]
#[ignore = "seconds: cargo test --release --test model_fair -- --ignored --nocapture"]
fn grant_notices_that_name_the_ticket_are_not_taken_for_keys_passed_on() {
    let model = FairModel {
        variant: Variant::TicketedGrants,
        ..passed_keys()
    };
    let run = check_depth_first(model, &[]);
    run.assert_holds(MUTUAL_EXCLUSION);
    run.assert_holds(NO_OVERTAKING);
}

#[test]
#[ignore = "minutes: cargo test --release --test model_fair -- --ignored --nocapture"]
fn exclusion_and_order_hold_in_larger_configurations() {
    let configurations = [
        FairModel {
            budgets: &[0, 2, 1],
            ..small()
        },
        FairModel {
            budgets: &[0, 2, 2],
            ..small()
        },
        FairModel {
            timeouts: 1,
            ..small()
        },
        FairModel {
            crashes: 1,
            ..small()
        },
    ];
    for model in configurations {
        let run = check(model, &[]);
        run.assert_holds(MUTUAL_EXCLUSION);
        run.assert_holds(NO_OVERTAKING);
    }
}

#[test]
#[ignore = "a tool: B, V, CRASH, TIMEOUTS, LOST, REORDERS, LAPSE, FORGET, DFS, DEPTH pick it"]
fn explore() {
    let budgets: &'static [u8] = match std::env::var("B").ok().as_deref() {
        Some("a") => &[0, 2, 2],
        Some("b") => &[0, 3, 2],
        Some("c") => &[0, 1, 1],
        Some("d") => &[0, 2, 2, 0],
        Some("e") => &[0, 1, 2],
        Some("f") => &[0, 2, 3],
        Some("g") => &[0, 3, 3],
        Some("h") => &[0, 3, 1],
        _ => &[0, 2, 1],
    };
    let flag = |name: &str| std::env::var(name).is_ok();
    let model = FairModel {
        variant: match std::env::var("V").ok().as_deref() {
            Some("offer") => Variant::OfferAsIs,
            Some("down") => Variant::AlignDown,
            Some("downfwd") => Variant::AlignDownMovingForward,
            Some("trust") => Variant::TrustEveryGrant,
            Some("same") => Variant::SameValueAfterRetreat,
            Some("align") => Variant::AlignAfterStanding,
            Some("ticket") => Variant::TicketedGrants,
            _ => Variant::Implemented,
        },
        holder: true,
        budgets,
        crashes: u8::from(flag("CRASH")),
        timeouts: std::env::var("TIMEOUTS")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(1),
        lost_replies: flag("LOST"),
        reorders: std::env::var("REORDERS").ok().and_then(|r| r.parse().ok()),
        lapses: flag("LAPSE"),
        forget_counters: flag("FORGET"),
        progress: false,
    };
    let search = if flag("DFS") {
        Search::DepthFirst { symmetry: None }
    } else {
        Search::BreadthFirst
    };
    let label = format!("{model:?}");
    let run = Run::check_with(model, &[MUTUAL_EXCLUSION, NO_OVERTAKING], &label, search);
    for p in [MUTUAL_EXCLUSION, NO_OVERTAKING] {
        if run.discoveries.contains_key(p) {
            run.counterexample(p);
        }
    }
}

/// Without faults, every waiter is served and unlocks, whatever the order of the steps: no state
/// is left where a live client waits for ever. (With one crash this configuration's state space
/// outgrows the machine's memory; the crash case is tested on real nodes in tests/fair.rs.)
#[test]
#[ignore = "six minutes, 8 GB: cargo test --release --test model_fair -- --ignored --nocapture"]
fn every_waiter_is_served_when_nobody_fails() {
    // With grant notices that name the ticket: the code's notices let two waiters hold here,
    // without any fault (see `a_key_passed_on_out_of_turn_is_still_counted_from_its_grant_notice`).
    let model = FairModel {
        variant: Variant::TicketedGrants,
        progress: true,
        ..small()
    };
    let run = check(model, &[]);
    run.assert_holds(PROGRESS);
    run.assert_holds(MUTUAL_EXCLUSION);
    run.assert_holds(NO_OVERTAKING);
}
