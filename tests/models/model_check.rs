//! Running a `stateright` model for the model checks (`tests/models/`): every reachable state,
//! or until the first discovery of given properties, with the counts printed. Each model tells
//! its own paths (its `story` module).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Path};

/// The order in which the checker visits states.
pub enum Search<S> {
    /// Level by level: the first path found to a property is a shortest one. Every state waiting
    /// to be visited is kept with the path to it, which can outgrow memory.
    BreadthFirst,
    /// Path by path: only the states along the current path (and their siblings) wait, so
    /// memory goes to the set of states seen. `symmetry` maps a state to one representative of
    /// the states that behave the same (stateright supports it only here).
    #[allow(dead_code)] // not every model needs it
    DepthFirst { symmetry: Option<fn(&S) -> S> },
}

/// The outcome of one run of the checker.
pub struct Run<M: Model> {
    pub model: M,
    pub unique_states: usize,
    /// Every reachable state was visited (the run did not stop at a discovery).
    pub complete: bool,
    pub discoveries: HashMap<&'static str, Path<M::State, M::Action>>,
}

impl<M> Run<M>
where
    M: Model + Clone + Debug + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    /// Breadth-first over every reachable state, or until a discovery for one of `stop_at`; the
    /// environment variable `DEPTH` bounds the depth (for exploring by hand). Prints `label` with
    /// the state counts.
    pub fn check(model: M, stop_at: &[&'static str], label: &str) -> Run<M> {
        Run::check_with(model, stop_at, label, Search::BreadthFirst)
    }

    /// As [`Run::check`], in the order `search` says.
    pub fn check_with(
        model: M,
        stop_at: &[&'static str],
        label: &str,
        search: Search<M::State>,
    ) -> Run<M> {
        let start = Instant::now();
        let mut builder = model.clone().checker();
        if let Some(depth) = std::env::var("DEPTH").ok().and_then(|d| d.parse().ok()) {
            builder = builder.target_max_depth(depth);
        }
        if stop_at.is_empty() {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            builder = builder.threads(threads);
        } else {
            // One thread: the first counterexample is then a shortest one, and always the same.
            let names: BTreeSet<&'static str> = stop_at.iter().copied().collect();
            builder = builder.finish_when(HasDiscoveries::AnyOf(names));
        }
        let checker: Box<dyn Checker<M>> = match search {
            Search::BreadthFirst => Box::new(builder.spawn_bfs().join()),
            Search::DepthFirst { symmetry } => {
                if let Some(representative) = symmetry {
                    builder = builder.symmetry_fn(representative);
                }
                Box::new(builder.spawn_dfs().join())
            }
        };
        let run = Run {
            model,
            unique_states: checker.unique_state_count(),
            complete: checker.is_done() && stop_at.is_empty(),
            discoveries: checker.discoveries(),
        };
        println!(
            "{label}: {} states ({} generated), depth {}, {}, {:.1?}, found {:?}",
            run.unique_states,
            checker.state_count(),
            checker.max_depth(),
            if run.complete {
                "complete"
            } else {
                "stopped at the first counterexample"
            },
            start.elapsed(),
            run.discoveries.keys().collect::<Vec<_>>(),
        );
        run
    }

    /// The checker's path to `property`; panics if it found none.
    pub fn path_to(&self, property: &'static str) -> Path<M::State, M::Action> {
        self.discoveries
            .get(property)
            .unwrap_or_else(|| panic!("the checker should find a path to {property:?}"))
            .clone()
    }

    /// Panics unless the run covered every reachable state and `property` was never broken;
    /// `tell` prints the counterexample first.
    pub fn assert_never_broken(&self, property: &'static str, tell: impl FnOnce(&Self)) {
        assert!(self.complete, "the check must cover every reachable state");
        if self.discoveries.contains_key(property) {
            tell(self);
            panic!("{:?} breaks {property:?}", self.model);
        }
    }
}
