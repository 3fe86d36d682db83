//! Whether every run of a model ends: a search for a cycle among its reachable states.
//!
//! `stateright` judges an `eventually` property at terminal states only (states with no step
//! left: a path that reaches one without the property ever holding is a counterexample). A run
//! that goes round a cycle for ever is not judged: reaching a state seen before is not an end.
//! Where the reachable states have no cycle, every run is finite and ends in a terminal state,
//! so judging those judges every run.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use stateright::{Model, Path};

/// A run that can go on for ever: `path` leads from an initial state to a state that behaves as
/// its state number `from` does (the same state, or a renaming of it under the symmetry).
pub struct Cycle<M: Model> {
    pub path: Path<M::State, M::Action>,
    pub from: usize,
}

/// What the search found: a cycle, or none among `states` states.
pub struct Search<M: Model> {
    pub cycle: Option<Cycle<M>>,
    pub states: usize,
}

/// Maps a state to the representative of the states that behave the same.
pub type Representative<M> = fn(&<M as Model>::State) -> <M as Model>::State;

enum Mark {
    /// On the path being searched: reaching it again closes a cycle.
    OnPath,
    /// Searched through: no cycle passes through it.
    Done,
}

struct Frame<M: Model> {
    state: M::State,
    key: u64,
    /// Steps still to try from `state`.
    actions: Vec<M::Action>,
    /// The step that led here.
    via: Option<M::Action>,
}

/// Depth-first over the reachable states (one per class where `symmetry` maps states to a
/// representative: a cycle among classes is a cycle among states, since a path from a state to
/// a renaming of it, repeated, comes back to it), stopping at the first cycle.
pub fn find_cycle<M>(model: &M, symmetry: Option<Representative<M>>) -> Search<M>
where
    M: Model,
    M::State: Hash + Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let key = |state: &M::State| {
        let mut hasher = DefaultHasher::new();
        match symmetry {
            Some(representative) => representative(state).hash(&mut hasher),
            None => state.hash(&mut hasher),
        }
        hasher.finish()
    };
    let frame = |state: M::State, key: u64, via: Option<M::Action>| {
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        Frame::<M> {
            state,
            key,
            actions,
            via,
        }
    };
    let mut marks: HashMap<u64, Mark> = HashMap::new();
    for init in model.init_states() {
        let init_key = key(&init);
        if marks.contains_key(&init_key) {
            continue;
        }
        marks.insert(init_key, Mark::OnPath);
        let mut path = vec![frame(init, init_key, None)];
        while let Some(top) = path.last_mut() {
            let Some(action) = top.actions.pop() else {
                marks.insert(top.key, Mark::Done);
                path.pop();
                continue;
            };
            let Some(next) = model.next_state(&top.state, action.clone()) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            let next_key = key(&next);
            match marks.get(&next_key) {
                Some(Mark::Done) => {}
                Some(Mark::OnPath) => {
                    let from = path
                        .iter()
                        .position(|f| f.key == next_key)
                        .expect("a state on the path is in the path");
                    let actions: Vec<M::Action> = path
                        .iter()
                        .filter_map(|f| f.via.clone())
                        .chain([action])
                        .collect();
                    let init = path[0].state.clone();
                    let path = Path::from_actions(model, init, &actions)
                        .expect("the steps were taken from the model");
                    return Search {
                        cycle: Some(Cycle { path, from }),
                        states: marks.len(),
                    };
                }
                None => {
                    marks.insert(next_key, Mark::OnPath);
                    path.push(frame(next, next_key, Some(action)));
                }
            }
        }
    }
    Search {
        cycle: None,
        states: marks.len(),
    }
}
