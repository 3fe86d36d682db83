//! The primitives: what a caller takes and holds. Each lives in a folder of its own with its
//! public type, its [`Target`](crate::engine::target::Target) (its keys, the command of each
//! operation, its quorum and its checks) and its scripts as `.lua` files: `mutex` (one name),
//! `multi` (several names, a `Mutex` over another target), `rwlock` (both sides) and
//! `semaphore`. Beside them: the held [`Lock`](crate::Lock) every primitive hands out,
//! [`KeepAlive`](crate::KeepAlive), and the resource side of fencing
//! ([`fenced_set`](crate::fenced_set)).
//!
//! A primitive builds on the engine for one attempt and the held lock, and on `waiting` for the
//! acquire loop; its client constructs it. Adding one touches its own folder and the
//! registration below: the suffixes of the keys it keeps beside a name, the Redis version it
//! needs, and its scripts.
//!
//! The scripts follow one reply convention (see `engine::request::Request::interpret`): an
//! acquire script answers the fencing counter (`0` or more; `0` where none was asked for) when it
//! took the lock and `-1` when another owner holds it; every other script answers `1` when it
//! acted on our value, `0` when the lock is gone and `-1` when another owner's value holds it, so
//! the caller can tell an expired lock from a taken one; an extend asked to repair answers `2`
//! where the key was gone and it set it again. Anything else is an error reply with a message.
//! Only acquire scripts and that repair create keys, and a repair counts for nothing until the
//! extend holds on a quorum without it, or is deleted again (see `engine::held::Held::extend`): a
//! lock that expired stays expired. Scripts check everything before they write: Redis does not
//! undo a script's writes when it fails halfway.
//!
//! Uses `waiting`, `engine`, `nodes` and `error`.

pub(crate) mod election;
pub(crate) mod fenced;
pub(crate) mod keep_alive;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod mutex;
pub(crate) mod run;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

use crate::engine::target::WAITERS_SUFFIX;
use crate::error::Error;
use crate::nodes::hash_tag::slot_prefix;
use crate::nodes::script::{self, Script};
use crate::nodes::version::Needs;
use crate::waiting::fair::scripts as fair;

/// Suffixes of the keys redmutex keeps beside a name `x` (see `engine::target::beside`):
/// `{x}:fence` (the fencing counter), `{x}:readers` and `{x}:writer-waiting` (a read-write lock's
/// readers and a waiting writer's mark), `{x}:line`, `{x}:line:until` and `{x}:ticket` (the fair
/// line), `{x}:leader` (an election's record), and `x:waiters` (`{x}:waiters` on a cluster: the
/// waiters' mark, see `engine::target::waiters_key`). No name may be another name's auxiliary key:
/// a name ending in one of them is refused when the rest of it is a slot prefix (`{x}:fence`,
/// `{user:1}:cart::leader`), and always for `:waiters`, which a standalone server keeps as the
/// name followed by it, and `:fence`, where fenced locks still read the previous layout's counter
/// (`mutex::legacy_counter_key`). `app:leader` is none of these, and is a name like any other.
const RESERVED_SUFFIXES: [&[&str]; 5] = [
    mutex::SUFFIXES,
    rwlock::SUFFIXES,
    fair::SUFFIXES,
    election::SUFFIXES,
    &[WAITERS_SUFFIX],
];

/// What each primitive needs of a node (see `nodes::version`): the newest feature it uses sets
/// its minimum.
///
/// | feature | since | used by |
/// |---|---|---|
/// | `EVAL`, `EVALSHA`, `redis.sha1hex`, `PUBLISH` in scripts | 2.6.0 | every primitive |
/// | `SET ... NX PX` | 2.6.12 | every primitive |
/// | `ZADD ... XX` | 3.0.2 | readers, semaphores |
/// | `EXISTS` of several keys, answering how many exist | 3.0.3 | multi-name locks |
/// | writes after `TIME` in a script (scripts replicated by their effects by default) | 5.0 | the fair line, read-write locks, semaphores |
/// | `SET ... PXAT` | 6.2 | readers |
/// | `PEXPIREAT ... GT` | 7.0 | readers, semaphores |
/// | `SPUBLISH` in scripts | 7.0 | wake-up on release and fair waiting on a Redis Cluster member (`engine::request::SHARDED_NOTICES`) |
///
/// Read-write locks are refused as a whole on an older node, writers too, so that one rule says
/// where a name's readers and writers may be counted.
pub(crate) const NEEDS: [&Needs; 5] = [
    &mutex::NEEDS,
    &multi::NEEDS,
    &fair::NEEDS,
    &rwlock::NEEDS,
    &semaphore::NEEDS,
];

/// The primitives' scripts, which every node loads.
const SCRIPT_LISTS: &[&[Script]] = &[
    mutex::SCRIPTS,
    multi::SCRIPTS,
    rwlock::SCRIPTS,
    semaphore::SCRIPTS,
    election::SCRIPTS,
];

/// Every primitive's scripts, in one list.
pub(crate) const SCRIPTS: &[Script] =
    &script::concat::<{ script::count(SCRIPT_LISTS) }>(SCRIPT_LISTS);

/// Every reserved suffix, in the order error messages list them.
pub(crate) fn reserved_suffixes() -> impl Iterator<Item = &'static str> {
    RESERVED_SUFFIXES.into_iter().flatten().copied()
}

/// Checks a name of a primitive: not empty, and not a key redmutex keeps beside another name
/// (see [`RESERVED_SUFFIXES`]). `field` names it in the error.
pub(crate) fn check_name(name: &str, field: impl Fn() -> String) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::config(field(), "must not be empty"));
    }
    let after_any_name = [WAITERS_SUFFIX, mutex::SUFFIXES[0]];
    let collides = |suffix: &&str| {
        name.strip_suffix(*suffix)
            .is_some_and(|rest| after_any_name.contains(suffix) || is_slot_prefix(rest))
    };
    if let Some(suffix) = reserved_suffixes().find(collides) {
        return Err(Error::config(
            field(),
            format!(
                "is a key redmutex keeps beside another name: it must not be a name's slot \
                 prefix followed by `{suffix}`, as in `{{x}}{suffix}` (reserved suffixes: {}; \
                 `:waiters` and `:fence` after any name)",
                reserved_suffixes().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(())
}

/// Whether `text` is some name's slot prefix (see `nodes::hash_tag::slot_prefix`): `{x}` for the
/// name `x`, or `{user:1}:cart:` for `{user:1}:cart`.
fn is_slot_prefix(text: &str) -> bool {
    let name = text
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .or_else(|| text.strip_suffix(':'));
    name.is_some_and(|name| slot_prefix(name).as_deref() == Some(text))
}

/// The words of a command, for tests that check what a target sends.
#[cfg(test)]
pub(crate) fn words(cmd: &redis::Cmd) -> Vec<String> {
    let packed = cmd.get_packed_command();
    String::from_utf8_lossy(&packed)
        .split("\r\n")
        .filter(|w| !w.is_empty() && !w.starts_with(['*', '$']))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::engine::request::Op;
    use crate::engine::settings::{Plan, Settings};
    use crate::engine::target::Target;
    use crate::nodes::hash_tag::slot_prefix;
    use crate::nodes::version::{ServerVersion, Version};
    use multi::MultiTarget;
    use mutex::MutexTarget;
    use rwlock::{ReadTarget, WriteTarget};
    use semaphore::PermitsTarget;

    fn name(name: &str) -> MutexTarget {
        MutexTarget::new(name.into())
    }

    fn field(result: Result<Plan, Error>) -> String {
        match result {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn the_table_of_minimums() {
        let table: Vec<(&str, &str)> = NEEDS.iter().map(|n| (n.what, n.text)).collect();
        assert_eq!(
            table,
            [
                ("mutexes", "2.6.12"),
                ("multi-name locks", "3.0.3"),
                ("fair mutexes", "5.0"),
                ("read-write locks", "7.0"),
                ("semaphores", "7.0"),
            ]
        );
        for needs in NEEDS {
            assert_eq!(Version::parse(needs.text), Some(needs.version), "{needs:?}");
        }
    }

    /// Which primitives a node of each kind runs, in the order of `NEEDS`.
    fn runs(node: ServerVersion) -> Vec<bool> {
        NEEDS.iter().map(|n| node.allows(n).is_ok()).collect()
    }

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn each_version_runs_what_it_can() {
        let redis = |text| ServerVersion::Redis(v(text));
        assert_eq!(runs(redis("7.0.0")), [true; 5]);
        assert_eq!(runs(redis("6.2.14")), [true, true, true, false, false]);
        assert_eq!(runs(redis("6.0.9")), [true, true, true, false, false]);
        assert_eq!(runs(redis("4.0.14")), [true, true, false, false, false]);
        assert_eq!(runs(redis("3.0.2")), [true, false, false, false, false]);
        assert_eq!(runs(redis("2.6.11")), [false; 5]);
        // Valkey is judged by the Redis version it serves.
        let valkey = ServerVersion::Valkey {
            valkey: v("9.1.2"),
            redis: v("7.2.4"),
        };
        assert_eq!(runs(valkey), [true; 5]);
        // Only what surely cannot run is refused.
        let before = ServerVersion::Before(v("7.0"));
        assert_eq!(runs(before), [true, true, true, false, false]);
        assert_eq!(runs(ServerVersion::Unknown), [true; 5]);
    }

    #[test]
    fn a_refusal_names_what_is_needed_and_what_runs() {
        let error = ServerVersion::Redis(v("6.2.14"))
            .allows(&rwlock::NEEDS)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "read-write locks need Redis 7.0 or later; this node runs Redis 6.2.14"
        );
        assert!(error.is_refusal());
        let error = ServerVersion::Before(v("7.0"))
            .allows(&semaphore::NEEDS)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "semaphores need Redis 7.0 or later; this node runs Redis older than 7.0 \
             (INFO refused; scripts see no version)"
        );
    }

    #[test]
    fn each_operation_needs_what_its_primitive_runs() {
        let mutex = name("n");
        let release = |hand_off| Op::Release {
            notify: true,
            hand_off,
            keep_marks: false,
        };
        for op in [
            Op::Acquire,
            Op::AcquireFenced,
            Op::Extend,
            Op::Raise(1),
            release(false),
        ] {
            assert_eq!(mutex.needs(op), &mutex::NEEDS, "{op:?}");
        }
        for op in [
            Op::Round {
                ticket: 1,
                client: 7,
            },
            Op::Enter,
            release(true),
        ] {
            assert_eq!(mutex.needs(op), &fair::NEEDS, "{op:?}");
        }
        let multi = MultiTarget::new(["a", "b"].map(Arc::from));
        assert_eq!(multi.needs(Op::Acquire), &multi::NEEDS);
        // Writers too: one rule says where a name's readers and writers may be counted.
        let sides: [Box<dyn Target>; 2] = [
            Box::new(ReadTarget::new("n".into())),
            Box::new(WriteTarget::new("n".into(), Duration::ZERO)),
        ];
        for target in sides {
            for op in [Op::Acquire, Op::Extend, release(false)] {
                assert_eq!(target.needs(op), &rwlock::NEEDS, "{op:?}");
            }
        }
        let semaphore = PermitsTarget::new("n".into(), 2);
        assert_eq!(semaphore.needs(release(false)), &semaphore::NEEDS);
    }

    #[test]
    fn bad_names_are_config_errors() {
        let field = |target: &dyn Target| match target.check() {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        let multi = |names: &[&str]| MultiTarget::new(names.iter().map(|n| Arc::from(*n)));
        assert_eq!(field(&multi(&[])), "names");
        assert_eq!(field(&multi(&["a", ""])), "names[1]");
        for suffix in reserved_suffixes() {
            for name in [format!("{{x}}{suffix}"), format!("{{u:1}}:cart:{suffix}")] {
                let name: Arc<str> = name.into();
                assert_eq!(field(&MutexTarget::new(Arc::clone(&name))), "name");
                assert_eq!(field(&ReadTarget::new(Arc::clone(&name))), "name");
                assert_eq!(field(&multi(&["a", &name])), "names[1]");
            }
            // A name that is no slot prefix followed by the suffix is no other name's key.
            let plain = format!("app{suffix}");
            let ok = MutexTarget::new(plain.as_str().into()).check().is_ok();
            assert_eq!(ok, ![WAITERS_SUFFIX, ":fence"].contains(&suffix), "{plain}");
        }
        // Only the suffix is reserved.
        assert!(MutexTarget::new("fence:readers:x".into()).check().is_ok());
        assert!(MutexTarget::new("{x}y:leader".into()).check().is_ok());
        assert_eq!(multi(&[]).first().len(), 0, "no panic without names");
    }

    #[test]
    fn fencing_and_fair_lines_are_refused_where_there_are_none() {
        let fenced = Settings {
            fencing: true,
            ..Settings::default()
        };
        assert!(fenced.plan(&name("n")).is_ok());
        assert_eq!(
            field(fenced.plan(&PermitsTarget::new("n".into(), 2))),
            "fencing"
        );
        let fair = Settings {
            fair: true,
            ..Settings::default()
        };
        assert!(fair.plan(&name("n")).is_ok());
        assert_eq!(field(fair.plan(&PermitsTarget::new("n".into(), 2))), "fair");
        assert_eq!(
            field(Settings::default().plan(&PermitsTarget::new("n".into(), 0))),
            "permits"
        );
    }

    /// Every command of every primitive, in its cluster variant, keeps to the slot of the name:
    /// its keys, and the channel it publishes on (with `SPUBLISH`, never `PUBLISH`); the
    /// standalone variant names no channel (the scripts' default is the channel of today) and no
    /// `SPUBLISH`.
    #[test]
    fn every_command_on_a_cluster_keeps_to_the_name_slot() {
        use crate::engine::request::Delivery;
        use crate::nodes::Member::{Cluster, Standalone};
        use crate::nodes::listener::NOTICE_PREFIX;

        let release = |notify, hand_off| Op::Release {
            notify,
            hand_off,
            keep_marks: false,
        };
        let ops = [
            Op::Acquire,
            Op::AcquireFenced,
            Op::Extend,
            Op::Raise(7),
            Op::Round {
                ticket: 3,
                client: 7,
            },
            Op::Enter,
            release(false, false),
            release(true, false),
            release(true, true),
        ];
        for name in ["order:42", "{user:1}:cart", "x{y", "{x}", "é{ü}"] {
            let slot = redmutex_testenv::key_slot(name);
            let targets: [Box<dyn Target>; 5] = [
                Box::new(MutexTarget::new(name.into())),
                Box::new(MultiTarget::new([Arc::from(name)])),
                Box::new(ReadTarget::new(name.into())),
                Box::new(WriteTarget::new(name.into(), Duration::from_secs(1))),
                Box::new(PermitsTarget::new(name.into(), 2)),
            ];
            for (target, op) in targets.iter().flat_map(|t| ops.map(|op| (t, op))) {
                let commands = |member| match target.entry(op, member, "v", 8000) {
                    Some(pipeline) => pipeline.cmd_iter().map(words).collect(),
                    None => vec![words(&target.command(
                        op,
                        Delivery::ByDigest,
                        member,
                        "v",
                        8,
                    ))],
                };
                let publishes = |commands: &[Vec<String>], verb: &str| {
                    commands.iter().any(|words| words.iter().any(|w| w == verb))
                };
                let cluster: Vec<Vec<String>> = commands(Cluster);
                let context = format!("{name}: {target:?} {op:?}: {cluster:?}");
                for words in &cluster {
                    let keys = match words[0].as_str() {
                        "EVALSHA" => {
                            let count: usize = words[2].parse().expect("a key count");
                            assert_eq!(words[3], name, "{context}");
                            &words[3..3 + count]
                        }
                        "MULTI" | "EXEC" => &[],
                        _ => &words[1..2],
                    };
                    for key in keys {
                        assert_eq!(redmutex_testenv::key_slot(key), slot, "{key} in {context}");
                    }
                    for channel in words.iter().filter(|w| w.starts_with(NOTICE_PREFIX)) {
                        assert_eq!(
                            redmutex_testenv::key_slot(channel),
                            slot,
                            "{channel} in {context}"
                        );
                        let prefix = slot_prefix(name).expect("a prefix");
                        assert_eq!(*channel, format!("{NOTICE_PREFIX}{prefix}"), "{context}");
                    }
                }
                assert!(!publishes(&cluster, "PUBLISH"), "{context}");
                // What publishes: a release with notice or hand-off, and a fair round.
                let expected = match op {
                    Op::Release {
                        notify, hand_off, ..
                    } => notify || hand_off,
                    Op::Round { .. } => target.has_line(),
                    _ => false,
                };
                assert_eq!(publishes(&cluster, "SPUBLISH"), expected, "{context}");
                let standalone: Vec<Vec<String>> = commands(Standalone);
                assert!(!publishes(&standalone, "SPUBLISH"), "{context}");
                let named = |w: &String| w.starts_with(NOTICE_PREFIX);
                assert!(!standalone.iter().flatten().any(named), "{context}");
            }
        }
    }

    /// A name with a `}` and no hash tag has no slot prefix: everything that keeps keys beside a
    /// name refuses it, naming the rule; a mutex takes it, waking on release where it can (on a
    /// standalone server; on a cluster its waiters poll).
    #[test]
    fn names_without_a_slot_prefix_take_plain_locks_only() {
        let name = "job}1";
        let plain = Settings::default();
        assert!(plain.wake_on_release);
        assert!(plain.plan(&MutexTarget::new(name.into())).is_ok());
        assert!(
            plain
                .plan(&MultiTarget::new(["a".into(), name.into()]))
                .is_ok()
        );
        assert!(plain.plan(&PermitsTarget::new(name.into(), 2)).is_ok());
        let settings = [
            Settings {
                fencing: true,
                ..Settings::default()
            },
            Settings {
                fair: true,
                ..Settings::default()
            },
        ];
        for settings in &settings {
            for (target, expected) in [
                (&MutexTarget::new(name.into()) as &dyn Target, "name"),
                (&MultiTarget::new(["a".into(), name.into()]), "names[1]"),
            ] {
                match settings.plan(target) {
                    Err(Error::Config { field, rule }) if field == expected => {
                        assert!(rule.contains("no hash tag"), "{rule}");
                    }
                    other => panic!("{settings:?} {target:?}: {other:?}"),
                }
            }
        }
        assert_eq!(field(plain.plan(&ReadTarget::new(name.into()))), "name");
        // A name with a tag of its own keeps everything, whatever follows it.
        for settings in &settings[..2] {
            assert!(settings.plan(&MutexTarget::new("{job}1}".into())).is_ok());
        }
    }

    #[test]
    fn readers_get_no_fencing() {
        let s = Settings {
            fencing: true,
            ..Settings::default()
        };
        assert_eq!(field(s.plan(&ReadTarget::new("n".into()))), "fencing");
        assert!(
            s.plan(&WriteTarget::new("n".into(), Duration::ZERO))
                .is_ok()
        );
        assert!(s.plan(&MultiTarget::new(["a".into(), "b".into()])).is_ok());
    }
}
