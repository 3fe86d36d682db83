//! What the engine acts for: the nodes, what a lock covers on them, and the settings.

use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::engine::metrics::Labels;
use crate::engine::settings::{Plan, Settings};
use crate::engine::target::Target;
use crate::error::Error;
use crate::nodes::Node;

/// A primitive's nodes, its [`Target`], its settings and what they validate to: everything an
/// attempt, a held lock or a waiter needs. Cheap to clone (three `Arc`s); settings changes make
/// their own copy, or share an equal one.
#[derive(Clone)]
pub(crate) struct Resource {
    nodes: Arc<[Node]>,
    target: Arc<dyn Target>,
    /// Shared by every handle on default settings (whatever its target), by handles whose setters
    /// made the same plain settings on one thread (see [`shared`]), and by a primitive's clones
    /// and its locks; never changed in place.
    config: Arc<Config>,
    /// Why the settings do not suit the target (`Settings::check_target`), which comes before
    /// any error of the settings alone.
    refused: Option<Arc<Error>>,
}

/// The settings, checked once per change rather than on every operation. Nothing in it depends
/// on the target, so that one copy serves every name: a client holding a lock per order or per
/// account keeps one per distinct settings rather than one per name.
#[derive(Clone)]
struct Config {
    settings: Settings,
    plan: Result<Plan, Error>,
}

impl Config {
    fn new(settings: Settings) -> Config {
        let plan = settings.plan_alone();
        Config { settings, plan }
    }
}

/// The default settings, checked once per process and shared by every handle that keeps them.
static DEFAULTS: LazyLock<Arc<Config>> =
    LazyLock::new(|| Arc::new(Config::new(Settings::default())));

/// How many settings a thread remembers for [`shared`]: enough for a few setters in a row (each
/// step of `.with_expiry(..).with_tries(..)` is one) on a couple of kinds of handle.
const RECENT: usize = 8;

thread_local! {
    /// The checked settings this thread's setters made last, newest first (plain ones only: see
    /// `Settings::same_plain`).
    static RECENT_CONFIGS: std::cell::RefCell<Vec<Arc<Config>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A checked copy of `settings`: the defaults', or one this thread made lately with the same
/// values, or a new one. A client that makes a handle per order with the same setters then keeps
/// one copy of those settings rather than one per name; no copy is ever changed in place, so a
/// setter on one handle never shows in another.
fn shared(settings: Settings) -> Arc<Config> {
    if settings.same_plain(&DEFAULTS.settings) {
        return Arc::clone(&DEFAULTS);
    }
    // `try_with`: a setter may run while the thread's locals are being destroyed (a handle made
    // in another thread-local's drop), and then simply shares nothing.
    let cached = RECENT_CONFIGS
        .try_with(|recent| {
            let mut recent = recent.borrow_mut();
            let at = recent
                .iter()
                .position(|c| c.settings.same_plain(&settings))?;
            let config = recent.remove(at);
            recent.insert(0, Arc::clone(&config));
            Some(config)
        })
        .ok()
        .flatten();
    if let Some(config) = cached {
        return config;
    }
    let plain = settings.same_plain(&settings);
    let config = Arc::new(Config::new(settings));
    if plain {
        let _ = RECENT_CONFIGS.try_with(|recent| {
            let mut recent = recent.borrow_mut();
            recent.truncate(RECENT - 1);
            recent.insert(0, Arc::clone(&config));
        });
    }
    config
}

impl Resource {
    /// `target` on `nodes`, with default settings.
    pub(crate) fn new(nodes: Arc<[Node]>, target: Arc<dyn Target>) -> Resource {
        let config = Arc::clone(&DEFAULTS);
        let refused = refused(&config.settings, &*target);
        Resource {
            nodes,
            target,
            config,
            refused,
        }
    }

    /// Applies `change` to the settings and checks them again.
    pub(crate) fn with_settings(mut self, change: impl FnOnce(&mut Settings)) -> Resource {
        let mut settings = self.config.settings.clone();
        change(&mut settings);
        self.config = shared(settings);
        self.refused = refused(&self.config.settings, &*self.target);
        self
    }

    /// The same settings over another target (a read-write lock's writer, whose mark depends on
    /// the settings).
    pub(crate) fn with_target(mut self, target: Arc<dyn Target>) -> Resource {
        self.refused = refused(&self.config.settings, &*target);
        self.target = target;
        self
    }

    pub(crate) fn nodes(&self) -> &Arc<[Node]> {
        &self.nodes
    }

    /// What the lock covers.
    pub(crate) fn target(&self) -> &Arc<dyn Target> {
        &self.target
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.config.settings
    }

    /// The validated settings, or why they are invalid.
    pub(crate) fn plan(&self) -> Result<&Plan, Error> {
        if let Some(refused) = &self.refused {
            return Err(Error::clone(refused));
        }
        self.config.plan.as_ref().map_err(Error::clone)
    }

    /// A value for a new acquisition.
    pub(crate) fn new_value(&self) -> Result<Arc<str>, Error> {
        self.config.settings.new_value()
    }

    /// What its metrics are labelled with.
    pub(crate) fn labels(&self) -> Labels {
        Labels {
            primitive: self.target.primitive(),
            use_label: self.config.settings.metrics_label,
        }
    }

    /// The name that waiting and traces go by: the first of the target's.
    pub(crate) fn name(&self) -> &Arc<str> {
        self.target.first()
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("target", &self.target)
            .field("settings", &self.config.settings)
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// What `Settings::check_target` says of `settings` over `target`, kept as an `Arc` so that
/// cloning a handle never copies an error.
fn refused(settings: &Settings, target: &dyn Target) -> Option<Arc<Error>> {
    settings.check_target(target).err().map(Arc::new)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::target::tests::OneName;

    fn resource(name: &str) -> Resource {
        Resource::new(Arc::from(Vec::new()), Arc::new(OneName::new(name)))
    }

    #[test]
    fn handles_share_the_default_settings_until_a_setter_copies_them() {
        let (a, b) = (resource("a"), resource("b"));
        assert!(
            Arc::ptr_eq(&a.config, &b.config),
            "two handles on default settings hold one copy of them"
        );
        let a = a.with_settings(|s| s.expiry = Duration::from_secs(30));
        assert!(
            !Arc::ptr_eq(&a.config, &b.config),
            "a setter makes its own copy"
        );
        assert_eq!(a.settings().expiry, Duration::from_secs(30));
        assert_eq!(
            b.settings().expiry,
            Duration::from_secs(8),
            "the other keeps its own"
        );
        assert_eq!(b.plan().map(|p| p.millis).ok(), Some(8000));
        assert_eq!(a.plan().map(|p| p.millis).ok(), Some(30_000));
        // A clone shares the copy, and a setter on the clone leaves the original alone.
        let c = a.clone().with_settings(|s| s.tries = Some(3));
        assert_eq!((a.settings().tries, c.settings().tries), (None, Some(3)));
        assert_eq!(c.settings().expiry, Duration::from_secs(30));
        assert_eq!(resource("d").settings().expiry, Duration::from_secs(8));
    }

    #[test]
    fn handles_with_the_same_setters_share_one_copy() {
        let set = |name| {
            resource(name)
                .with_settings(|s| s.expiry = Duration::from_secs(600))
                .with_settings(|s| s.tries = Some(5))
        };
        let (a, b) = (set("a"), set("b"));
        assert!(
            Arc::ptr_eq(&a.config, &b.config),
            "the same setters on two handles end in one copy"
        );
        let c = b.clone().with_settings(|s| s.tries = Some(6));
        assert!(!Arc::ptr_eq(&b.config, &c.config));
        assert_eq!(
            (a.settings().tries, b.settings().tries),
            (Some(5), Some(5)),
            "no change shows in another"
        );
        assert_eq!(c.settings().tries, Some(6));
        // Setting a default value back shares the defaults.
        let d = resource("d")
            .with_settings(|s| s.wake_on_release = false)
            .with_settings(|s| s.wake_on_release = true);
        assert!(Arc::ptr_eq(&d.config, &resource("e").config));
        // A caller's function is never shared, nor kept by the thread.
        let f = |name| resource(name).with_settings(|s| s.value_fn = Some(Arc::new(|| "v".into())));
        let (f1, f2) = (f("f"), f("g"));
        assert!(!Arc::ptr_eq(&f1.config, &f2.config));
        assert_eq!(Arc::strong_count(&f1.config), 1, "no cache holds it");
    }

    #[test]
    fn the_target_rules_still_come_first() {
        let field = |resource: &Resource| match resource.plan() {
            Err(Error::Config { field, .. }) => field,
            Ok(_) => "ok".to_owned(),
            other => panic!("expected a config error, got {other:?}"),
        };
        // An empty name is refused even on shared defaults, and before a bad setting.
        let empty = resource("");
        assert_eq!(field(&empty), "name");
        assert_eq!(field(&empty.with_settings(|s| s.tries = Some(0))), "name");
        // The test target has no fair line: a setter checks the target again.
        let fair = resource("n").with_settings(|s| s.fair = true);
        assert_eq!(field(&fair), "fair");
        assert_eq!(field(&fair.with_settings(|s| s.fair = false)), "ok");
        assert_eq!(
            field(&resource("n").with_settings(|s| s.tries = Some(0))),
            "tries"
        );
    }
}
