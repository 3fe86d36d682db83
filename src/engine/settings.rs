//! A mutex's settings: defaults, and the rules that make them valid.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::delay::RetryDelay;
use crate::engine::quorum::{expiry_millis, whole_millis};
use crate::engine::request::Op;
use crate::engine::target::Target;
use crate::engine::value::check_value;
use crate::error::Error;

/// Default time a lock is held before the nodes drop it: 8 s.
pub(crate) const DEFAULT_EXPIRY: Duration = Duration::from_secs(8);
/// Default number of attempts `lock()` makes.
pub(crate) const DEFAULT_TRIES: u32 = 32;
/// Default clock drift allowance, as a fraction of the expiry.
pub(crate) const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default per-node timeout, as a fraction of the expiry.
pub(crate) const DEFAULT_TIMEOUT_FACTOR: f64 = 0.05;
/// The longest expiry accepted. Locks are leases, not storage; the bound also keeps every
/// `Instant + Duration` in range.
pub(crate) const MAX_EXPIRY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Generates lock values.
pub(crate) type ValueFn = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
pub(crate) struct Settings {
    pub expiry: Duration,
    /// As set; `None` for the default, which depends on `max_wait` (see `Settings::tries`).
    pub tries: Option<u32>,
    /// How long `lock()` may wait in all; `None` leaves it to the tries.
    pub max_wait: Option<Duration>,
    pub retry_delay: RetryDelay,
    pub drift_factor: f64,
    pub timeout_factor: f64,
    pub fail_fast: bool,
    pub shuffle_nodes: bool,
    pub fencing: bool,
    pub wake_on_release: bool,
    pub fair: bool,
    /// Replicas that must acknowledge each lock write before its member counts; 0 is off.
    pub replica_acks: u32,
    pub value_fn: Option<ValueFn>,
    /// The `use` label of the primitive's metrics.
    pub metrics_label: Option<&'static str>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            expiry: DEFAULT_EXPIRY,
            tries: None,
            max_wait: None,
            retry_delay: RetryDelay::default(),
            drift_factor: DEFAULT_DRIFT_FACTOR,
            timeout_factor: DEFAULT_TIMEOUT_FACTOR,
            fail_fast: false,
            shuffle_nodes: false,
            fencing: false,
            wake_on_release: true,
            fair: false,
            replica_acks: 0,
            value_fn: None,
            metrics_label: None,
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("expiry", &self.expiry)
            .field("tries", &self.tries)
            .field("max_wait", &self.max_wait)
            .field("retry_delay", &self.retry_delay)
            .field("drift_factor", &self.drift_factor)
            .field("timeout_factor", &self.timeout_factor)
            .field("fail_fast", &self.fail_fast)
            .field("shuffle_nodes", &self.shuffle_nodes)
            .field("fencing", &self.fencing)
            .field("wake_on_release", &self.wake_on_release)
            .field("fair", &self.fair)
            .field("replica_acks", &self.replica_acks)
            .field("value_fn", &self.value_fn.as_ref().map(|_| "fn"))
            .field("metrics_label", &self.metrics_label)
            .finish()
    }
}

/// Settings checked and turned into what the algorithm uses.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The expiry as sent on the wire; validity is computed from this, not from the setting.
    pub expiry: Duration,
    /// The same, in the milliseconds Redis takes.
    pub millis: u64,
    /// The bound on each node call.
    pub node_timeout: Duration,
    /// Attempts at most: as set, else 32, or without end when only `max_wait` bounds the wait.
    pub tries: u32,
    /// How long `lock()` may wait in all, from its call to the start of its last attempt.
    pub max_wait: Option<Duration>,
    pub retry_delay: RetryDelay,
    pub drift_factor: f64,
    pub fail_fast: bool,
    pub shuffle_nodes: bool,
    pub fencing: bool,
    /// Waiting by release notices, and releases that notify where waiters marked the name;
    /// implied by `fair`.
    pub wake_on_release: bool,
    /// Waiting in the fair line across clients (see `waiting::fair`).
    pub fair: bool,
    /// What each lock write waits for before its member counts; `None` when off.
    pub replica_acks: Option<ReplicaAcks>,
}

/// How many replicas must acknowledge a lock write (`WAIT replicas timeout`) before the member
/// that took it counts (see `request::call`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub replicas: u32,
    /// WAIT's own timeout: half the node timeout, in whole milliseconds. The write and the WAIT
    /// share the node timeout, which bounds the whole call; a WAIT that outlived it would leave
    /// the member timed out instead of saying how many replicas answered, so the write gets the
    /// other half for its round trip. Never 0, which WAIT reads as "forever".
    pub timeout: Duration,
}

impl ReplicaAcks {
    /// The acknowledgements for `replicas` (`None` for 0: off), for a node timeout of
    /// `node_timeout`; `None` inside `Err` when the node timeout leaves WAIT no whole millisecond.
    fn new(replicas: u32, node_timeout: Duration) -> Result<Option<ReplicaAcks>, Error> {
        if replicas == 0 {
            return Ok(None);
        }
        let millis = whole_millis(node_timeout / 2);
        if millis == 0 {
            return Err(Error::config(
                "replica_acks",
                format!(
                    "WAIT for replicas gets half the node timeout (expiry * timeout_factor, here \
                     {node_timeout:?}), and needs at least 1ms of it: lengthen the expiry or the \
                     timeout factor"
                ),
            ));
        }
        Ok(Some(ReplicaAcks {
            replicas,
            timeout: Duration::from_millis(millis),
        }))
    }
}

impl Plan {
    /// The delay after attempt number `failed` (1-based), drawn from the thread-local generator.
    pub(crate) fn retry_delay_after(&self, failed: u32) -> Duration {
        self.retry_delay.after(failed, &mut rand::rng())
    }

    /// The retry delays after attempts 1 to `count`, added up: see `RetryDelay::total`.
    pub(crate) fn retry_delays_total(&self, count: u32) -> Duration {
        self.retry_delay.total(count, &mut rand::rng())
    }

    /// How this mutex releases: compare-and-delete, with a notice for waiters when they listen,
    /// and a hand-off to the head of the line when they wait in it. With `keep_marks` (the holder
    /// had to wait, or the keys are a failed attempt's), a notice leaves the waiters' mark in place
    /// (see `waiting::notices`).
    pub(crate) fn release_op(&self, keep_marks: bool) -> Op {
        Op::Release {
            notify: self.wake_on_release,
            hand_off: self.fair,
            keep_marks,
        }
    }
}

impl Settings {
    /// Checks every rule, so that nothing invalid ever reaches a node: those of what the lock
    /// covers first, then those of the settings alone. (A `Resource` keeps the two halves
    /// apart.)
    #[cfg(test)]
    pub(crate) fn plan(&self, target: &dyn Target) -> Result<Plan, Error> {
        self.check_target(target)?;
        self.plan_alone()
    }

    /// The rules that depend on what the lock covers (`plan`'s first half). Kept apart so that
    /// handles over different names can share one checked copy of the settings.
    pub(crate) fn check_target(&self, target: &dyn Target) -> Result<(), Error> {
        target.check()?;
        if self.fencing {
            target.check_fencing()?;
        }
        if self.fencing || self.fair {
            target.check_beside()?;
        }
        if self.fair && !target.has_line() {
            return Err(Error::config(
                "fair",
                "fair waiting is for a mutex over one name only",
            ));
        }
        Ok(())
    }

    /// The rules of the settings alone, and what they turn into (`plan`'s second half).
    pub(crate) fn plan_alone(&self) -> Result<Plan, Error> {
        if self.expiry < Duration::from_millis(1) || self.expiry > MAX_EXPIRY {
            return Err(Error::config(
                "expiry",
                format!("must be between 1ms and 365 days, got {:?}", self.expiry),
            ));
        }
        if self.tries == Some(0) {
            return Err(Error::config("tries", "must be at least 1"));
        }
        // Written so that NaN fails too.
        if !(self.drift_factor >= 0.0 && self.drift_factor < 1.0) {
            return Err(Error::config(
                "drift_factor",
                format!("must be in [0, 1), got {}", self.drift_factor),
            ));
        }
        if !(self.timeout_factor > 0.0 && self.timeout_factor < 1.0) {
            return Err(Error::config(
                "timeout_factor",
                format!("must be in (0, 1), got {}", self.timeout_factor),
            ));
        }
        if self.fair && self.fencing {
            return Err(Error::config(
                "fair",
                "fair waiting does not hand out fencing tokens yet; use one or the other",
            ));
        }
        let millis = expiry_millis(self.expiry);
        let expiry = Duration::from_millis(millis);
        let node_timeout = expiry.mul_f64(self.timeout_factor);
        let replica_acks = ReplicaAcks::new(self.replica_acks, node_timeout)?;
        Ok(Plan {
            expiry,
            millis,
            node_timeout,
            tries: self.tries(),
            max_wait: self.max_wait,
            retry_delay: self.retry_delay.clone(),
            drift_factor: self.drift_factor,
            fail_fast: self.fail_fast,
            shuffle_nodes: self.shuffle_nodes,
            fencing: self.fencing,
            wake_on_release: self.wake_on_release || self.fair,
            fair: self.fair,
            replica_acks,
        })
    }

    /// Whether `other` holds the same plain values, so that one checked copy can serve both.
    /// Settings with a function of the caller's (a value or delay function) are never the same,
    /// so that no cache of settings keeps a caller's closure alive.
    pub(crate) fn same_plain(&self, other: &Settings) -> bool {
        // Destructured, so that a field added to `Settings` cannot be left out of the comparison
        // (two handles that differ in it would then share one copy): the build fails instead.
        let Settings {
            expiry,
            tries,
            max_wait,
            retry_delay,
            drift_factor,
            timeout_factor,
            fail_fast,
            shuffle_nodes,
            fencing,
            wake_on_release,
            fair,
            replica_acks,
            value_fn,
            metrics_label,
        } = self;
        let plain_delay = |delay: &RetryDelay| match delay {
            RetryDelay::Random { min, max } => Some((0, *min, *max)),
            RetryDelay::Fixed(delay) => Some((1, *delay, *delay)),
            RetryDelay::Custom(_) => None,
        };
        let delay = plain_delay(retry_delay);
        value_fn.is_none()
            && other.value_fn.is_none()
            && delay.is_some()
            && delay == plain_delay(&other.retry_delay)
            && *expiry == other.expiry
            && *tries == other.tries
            && *max_wait == other.max_wait
            && drift_factor.to_bits() == other.drift_factor.to_bits()
            && timeout_factor.to_bits() == other.timeout_factor.to_bits()
            && *fail_fast == other.fail_fast
            && *shuffle_nodes == other.shuffle_nodes
            && *fencing == other.fencing
            && *wake_on_release == other.wake_on_release
            && *fair == other.fair
            && *replica_acks == other.replica_acks
            && *metrics_label == other.metrics_label
    }

    /// How many attempts `lock()` makes at most: as set; by default 32, or no bound (`u32::MAX`)
    /// when only a maximum wait was set, which then ends the wait by itself.
    pub(crate) fn tries(&self) -> u32 {
        match (self.tries, self.max_wait) {
            (Some(tries), _) => tries,
            (None, Some(_)) => u32::MAX,
            (None, None) => DEFAULT_TRIES,
        }
    }

    /// A value for a new acquisition.
    pub(crate) fn new_value(&self) -> Result<Arc<str>, Error> {
        match &self.value_fn {
            Some(f) => {
                let value = f();
                check_value(&value)?;
                Ok(value.into())
            }
            // Never empty.
            None => Ok(crate::engine::value::random_value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::target::tests::OneName;
    use crate::engine::value::READERS_MARKER;

    fn target(name: &str) -> OneName {
        OneName::new(name)
    }

    /// Each field on its own keeps two settings from sharing one copy.
    #[test]
    fn settings_differing_in_any_one_field_are_not_the_same() {
        type Change = (&'static str, fn(&mut Settings));
        let changes: [Change; 14] = [
            ("expiry", |s| s.expiry += Duration::from_millis(1)),
            ("tries", |s| s.tries = Some(DEFAULT_TRIES)),
            ("max_wait", |s| s.max_wait = Some(Duration::from_secs(1))),
            ("retry_delay", |s| {
                s.retry_delay = RetryDelay::Fixed(Duration::from_millis(7))
            }),
            ("drift_factor", |s| s.drift_factor /= 2.0),
            ("timeout_factor", |s| s.timeout_factor /= 2.0),
            ("fail_fast", |s| s.fail_fast = !s.fail_fast),
            ("shuffle_nodes", |s| s.shuffle_nodes = !s.shuffle_nodes),
            ("fencing", |s| s.fencing = !s.fencing),
            ("wake_on_release", |s| {
                s.wake_on_release = !s.wake_on_release
            }),
            ("fair", |s| s.fair = !s.fair),
            ("replica_acks", |s| s.replica_acks += 1),
            ("value_fn", |s| s.value_fn = Some(Arc::new(|| "v".into()))),
            ("metrics_label", |s| s.metrics_label = Some("checkout")),
        ];
        let defaults = Settings::default();
        assert!(defaults.same_plain(&Settings::default()));
        for (field, change) in changes {
            let mut changed = Settings::default();
            change(&mut changed);
            assert!(!changed.same_plain(&defaults), "{field}");
            assert!(!defaults.same_plain(&changed), "{field}");
        }
    }

    fn field(result: Result<Plan, Error>) -> String {
        match result {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_redsync() {
        let plan = Settings::default()
            .plan(&target("name"))
            .expect("defaults are valid");
        assert_eq!(plan.expiry, Duration::from_secs(8));
        assert_eq!(plan.millis, 8000);
        assert_eq!(plan.node_timeout, Duration::from_millis(400));
        assert_eq!(plan.tries, 32);
        assert_eq!(plan.drift_factor, 0.01);
        assert!(!plan.fail_fast && !plan.shuffle_nodes);
        assert_eq!(plan.replica_acks, None);
        assert!(
            plan.wake_on_release,
            "waiters are woken by releases unless opted out"
        );
        assert_eq!(plan.max_wait, None);
    }

    /// A maximum wait alone bounds the wait by itself; tries that were set bound it as well,
    /// whichever ends it first.
    #[test]
    fn a_maximum_wait_lifts_the_default_tries_only() {
        let plan = |tries, max_wait| {
            Settings {
                tries,
                max_wait,
                ..Settings::default()
            }
            .plan(&target("n"))
            .expect("valid")
        };
        let second = Some(Duration::from_secs(1));
        assert_eq!(plan(None, None).tries, DEFAULT_TRIES);
        assert_eq!(plan(None, second).tries, u32::MAX);
        assert_eq!(plan(Some(5), second).tries, 5);
        assert_eq!(plan(Some(5), None).tries, 5);
        assert_eq!(plan(None, second).max_wait, second);
    }

    #[test]
    fn replica_acks_wait_half_the_node_timeout() {
        let acks = |replica_acks, expiry| {
            Settings {
                replica_acks,
                expiry,
                ..Settings::default()
            }
            .plan(&target("n"))
        };
        let plan = acks(2, Duration::from_secs(8)).expect("valid");
        let expected = ReplicaAcks {
            replicas: 2,
            timeout: Duration::from_millis(200),
        };
        assert_eq!(plan.replica_acks, Some(expected));
        assert_eq!(
            acks(0, Duration::from_millis(1)).unwrap().replica_acks,
            None
        );
        // 0.05 of 20ms is 1ms: half of it is no whole millisecond.
        assert_eq!(field(acks(1, Duration::from_millis(20))), "replica_acks");
        assert!(acks(1, Duration::from_millis(40)).is_ok());
    }

    #[test]
    fn every_rule_names_its_field() {
        let with = |f: fn(&mut Settings)| {
            let mut s = Settings::default();
            f(&mut s);
            s
        };
        assert_eq!(field(Settings::default().plan(&target(""))), "name");
        for bad in [Duration::ZERO, Duration::from_micros(999), MAX_EXPIRY * 2] {
            let s = Settings {
                expiry: bad,
                ..Settings::default()
            };
            assert_eq!(field(s.plan(&target("n"))), "expiry", "{bad:?}");
        }
        assert_eq!(
            field(with(|s| s.tries = Some(0)).plan(&target("n"))),
            "tries"
        );
        for bad in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
            let s = Settings {
                drift_factor: bad,
                ..Settings::default()
            };
            assert_eq!(field(s.plan(&target("n"))), "drift_factor", "{bad}");
        }
        for bad in [0.0, -1.0, 1.0, f64::NAN] {
            let s = Settings {
                timeout_factor: bad,
                ..Settings::default()
            };
            assert_eq!(field(s.plan(&target("n"))), "timeout_factor", "{bad}");
        }
    }

    #[test]
    fn boundary_values_are_accepted() {
        let s = Settings {
            expiry: Duration::from_millis(1),
            drift_factor: 0.0,
            timeout_factor: 0.999,
            tries: Some(1),
            ..Settings::default()
        };
        assert!(s.plan(&target("n")).is_ok());
        let s = Settings {
            expiry: MAX_EXPIRY,
            ..Settings::default()
        };
        assert!(s.plan(&target("n")).is_ok());
    }

    #[test]
    fn empty_values_are_rejected() {
        let s = Settings {
            value_fn: Some(Arc::new(String::new)),
            ..Settings::default()
        };
        assert!(matches!(s.new_value(), Err(Error::Config { field, .. }) if field == "value"));
        let s = Settings {
            value_fn: Some(Arc::new(|| READERS_MARKER.to_owned())),
            ..Settings::default()
        };
        assert!(matches!(s.new_value(), Err(Error::Config { field, .. }) if field == "value"));
    }
}
