//! What the engine acts for: the nodes, what a lock covers on them, and the settings.

use std::fmt;
use std::sync::Arc;

use crate::engine::metrics::Labels;
use crate::engine::settings::{Plan, Settings};
use crate::engine::target::Target;
use crate::error::Error;
use crate::nodes::Node;

/// A primitive's nodes, its [`Target`], its settings and what they validate to: everything an
/// attempt, a held lock or a waiter needs. Cheap to clone (two `Arc`s); settings changes make
/// their own copy.
#[derive(Clone)]
pub(crate) struct Resource {
    nodes: Arc<[Node]>,
    config: Arc<Config>,
}

/// Shared by a primitive's clones and its locks.
#[derive(Clone)]
struct Config {
    target: Arc<dyn Target>,
    settings: Settings,
    /// Checked once per change of settings, not on every operation.
    plan: Result<Plan, Error>,
}

impl Resource {
    /// `target` on `nodes`, with default settings.
    pub(crate) fn new(nodes: Arc<[Node]>, target: Arc<dyn Target>) -> Resource {
        let settings = Settings::default();
        let plan = settings.plan(&*target);
        Resource {
            nodes,
            config: Arc::new(Config {
                target,
                settings,
                plan,
            }),
        }
    }

    /// Applies `change` to the settings and checks them again.
    pub(crate) fn with_settings(mut self, change: impl FnOnce(&mut Settings)) -> Resource {
        let config = Arc::make_mut(&mut self.config);
        change(&mut config.settings);
        config.plan = config.settings.plan(&*config.target);
        self
    }

    /// The same settings over another target (a read-write lock's writer, whose mark depends on
    /// the settings).
    pub(crate) fn with_target(mut self, target: Arc<dyn Target>) -> Resource {
        let config = Arc::make_mut(&mut self.config);
        config.plan = config.settings.plan(&*target);
        config.target = target;
        self
    }

    pub(crate) fn nodes(&self) -> &Arc<[Node]> {
        &self.nodes
    }

    /// What the lock covers.
    pub(crate) fn target(&self) -> &Arc<dyn Target> {
        &self.config.target
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.config.settings
    }

    /// The validated settings, or why they are invalid.
    pub(crate) fn plan(&self) -> Result<&Plan, Error> {
        self.config.plan.as_ref().map_err(Error::clone)
    }

    /// A value for a new acquisition.
    pub(crate) fn new_value(&self) -> Result<Arc<str>, Error> {
        self.config.settings.new_value()
    }

    /// What its metrics are labelled with.
    pub(crate) fn labels(&self) -> Labels {
        Labels {
            primitive: self.config.target.primitive(),
            use_label: self.config.settings.metrics_label,
        }
    }

    /// The name that waiting and traces go by: the first of the target's.
    pub(crate) fn name(&self) -> &Arc<str> {
        self.config.target.first()
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("target", &self.config.target)
            .field("settings", &self.config.settings)
            .field("nodes", &self.nodes.len())
            .finish()
    }
}
