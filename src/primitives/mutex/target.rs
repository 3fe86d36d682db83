//! A mutex over one name, as the engine sees it: the name's key holds the lock value; its fencing
//! counter is `<name>:fence`, and its fair line's keys are the waiting layer's (`waiting::fair`).

use std::fmt;
use std::sync::{Arc, OnceLock};

use redis::{Cmd, Pipeline};

use crate::engine::request::{Delivery, Op};
use crate::engine::target::{self, Target, Verb};
use crate::error::Error;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;
use crate::waiting::fair::scripts::{self as line, LineKeys};

/// What a mutex needs of a node: `EVAL` with `redis.sha1hex` and `PUBLISH`, and `SET ... NX PX`.
pub(crate) const NEEDS: Needs = Needs::new("mutexes", Version::new(2, 6, 12), "2.6.12");

/// The suffix of a name's fencing counter (see [`counter_key`]).
pub(crate) const SUFFIXES: &[&str] = &[":fence"];

/// Compare-and-delete (`release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/mutex/release.lua");
/// Compare-and-delete with a release notice (`release_notify.lua`).
pub(crate) const RELEASE_NOTIFY: Script = lua!("primitives/mutex/release_notify.lua");
/// Compare-and-PEXPIRE (`extend.lua`).
pub(crate) const EXTEND: Script = lua!("primitives/mutex/extend.lua");
/// `SET NX PX` and the fencing counter (`acquire_fenced.lua`).
pub(crate) const ACQUIRE_FENCED: Script = lua!("primitives/mutex/acquire_fenced.lua");
/// The fencing raise (`raise.lua`).
pub(crate) const RAISE: Script = lua!("primitives/mutex/raise.lua");

/// The mutex's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[RELEASE, RELEASE_NOTIFY, EXTEND, ACQUIRE_FENCED, RAISE];

/// The key of a name's fencing counter: beside the lock key, never expiring, kept across unlocks.
pub(crate) fn counter_key(name: &str) -> String {
    format!("{name}:fence")
}

/// A mutex over one name.
pub(crate) struct MutexTarget {
    name: [Arc<str>; 1],
    /// The fair line's keys beside the name, made on first use: every fair round and release
    /// names them.
    line: OnceLock<LineKeys>,
}

impl MutexTarget {
    pub(crate) fn new(name: Arc<str>) -> MutexTarget {
        MutexTarget {
            name: [name],
            line: OnceLock::new(),
        }
    }

    /// The keys of the name's fair line.
    fn line_keys(&self) -> &LineKeys {
        self.line.get_or_init(|| LineKeys::new(&self.name[0]))
    }

    fn command_for(&self, op: Op, verb: Verb, value: &str, millis: u64) -> Cmd {
        let name = &self.name[0];
        match op {
            // An entry outside a pipeline (never sent so) is the plain acquire.
            Op::Acquire | Op::Enter => {
                // Sized up front: growing the buffers arg by arg costs more than the rest.
                let mut cmd = Cmd::with_capacity(6, 24 + name.len() + value.len());
                cmd.arg("SET")
                    .arg(&**name)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis);
                cmd
            }
            Op::Extend => script_cmd(verb.script(&EXTEND), verb, name, value, Some(millis)),
            Op::Release { hand_off: true, .. } => {
                line::release(verb, name, self.line_keys(), value)
            }
            Op::Round { ticket } => {
                line::round(verb, name, self.line_keys(), value, millis, ticket)
            }
            Op::Release { notify: false, .. } => {
                script_cmd(verb.script(&RELEASE), verb, name, value, None)
            }
            Op::Release { notify: true, .. } => {
                script_cmd(verb.script(&RELEASE_NOTIFY), verb, name, value, None)
            }
            Op::AcquireFenced => {
                fenced_cmd(verb.script(&ACQUIRE_FENCED), verb, name, value, millis)
            }
            Op::Raise(token) => fenced_cmd(verb.script(&RAISE), verb, name, value, token),
        }
    }
}

impl Target for MutexTarget {
    fn names(&self) -> &[Arc<str>] {
        &self.name
    }

    fn check(&self) -> Result<(), Error> {
        check_name(&self.name[0], || "name".to_owned())
    }

    /// Only a mutex over one name has a line: the line's scripts hand its one key from holder to
    /// waiter.
    fn has_line(&self) -> bool {
        true
    }

    /// A fair mutex's rounds, first tries and hand-offs are the fair line's; its extend, and a
    /// release without hand-off, are the plain mutex's.
    fn needs(&self, op: Op) -> &'static Needs {
        match op {
            Op::Round { .. } | Op::Enter | Op::Release { hand_off: true, .. } => &line::NEEDS,
            _ => &NEEDS,
        }
    }

    fn is_script(&self, op: Op) -> bool {
        !matches!(op, Op::Acquire | Op::Enter)
    }

    fn command(&self, op: Op, delivery: Delivery, value: &str, millis: u64) -> Cmd {
        self.command_for(op, Verb::from(delivery), value, millis)
    }

    /// A fair mutex's plain first try: `SET NX`, and whether anybody stands in line.
    fn entry(&self, op: Op, value: &str, millis: u64) -> Option<Pipeline> {
        if op != Op::Enter {
            return None;
        }
        let set = self.command_for(Op::Acquire, Verb::EvalSha, value, millis);
        Some(line::entry(set, self.line_keys()))
    }
}

impl fmt::Debug for MutexTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        target::debug(f, format_args!("Name"), &self.name, None)
    }
}

/// A script over one key, with the value and optionally the expiry as arguments.
fn script_cmd(script: &str, verb: Verb, name: &str, value: &str, millis: Option<u64>) -> Cmd {
    let mut cmd = Cmd::with_capacity(6, 32 + script.len() + name.len() + value.len());
    cmd.arg(verb.word()).arg(script).arg(1).arg(name).arg(value);
    if let Some(millis) = millis {
        cmd.arg(millis);
    }
    cmd
}

/// A script over the lock key and its fencing counter, with one number argument.
fn fenced_cmd(script: &str, verb: Verb, name: &str, value: &str, number: u64) -> Cmd {
    let counter = counter_key(name);
    let mut cmd = Cmd::with_capacity(7, 40 + script.len() + 2 * name.len() + value.len());
    cmd.arg(verb.word())
        .arg(script)
        .arg(2)
        .arg(name)
        .arg(counter)
        .arg(value)
        .arg(number);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::multi::MultiTarget;
    use crate::primitives::words;

    fn mutex(name: &str) -> MutexTarget {
        MutexTarget::new(name.into())
    }

    #[test]
    fn set_is_built_as_redlock_requires() {
        let target = mutex("name");
        let cmd = target.command(Op::Acquire, Delivery::ByDigest, "value", 8000);
        assert_eq!(words(&cmd), ["SET", "name", "value", "NX", "PX", "8000"]);
    }

    #[test]
    fn a_fair_entry_sets_then_looks_for_the_line() {
        let target = mutex("name");
        let entry = target.entry(Op::Enter, "value", 8000).expect("a pipeline");
        let commands: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(
            commands,
            [
                vec!["SET", "name", "value", "NX", "PX", "8000"],
                vec!["EXISTS", "name:line"]
            ]
        );
        assert!(!target.is_script(Op::Enter));
        assert!(target.entry(Op::Acquire, "value", 8000).is_none());
        // Only a mutex over one name has a line; elsewhere an entry is the plain acquire.
        let multi = MultiTarget::new(["a", "b"].map(Arc::from));
        assert!(multi.entry(Op::Enter, "v", 8000).is_none());
        assert_eq!(
            words(&multi.command(Op::Enter, Delivery::ByDigest, "v", 8000)),
            words(&multi.command(Op::Acquire, Delivery::ByDigest, "v", 8000))
        );
    }

    #[test]
    fn scripts_go_by_digest_or_in_full() {
        let target = mutex("name");
        let by_digest = target.command(Op::Extend, Delivery::ByDigest, "v", 5);
        assert_eq!(
            words(&by_digest),
            ["EVALSHA", EXTEND.digest(), "1", "name", "v", "5"]
        );
        let inline = target.command(Op::Raise(7), Delivery::Inline, "v", 5);
        assert_eq!(words(&inline)[2..], ["2", "name", "name:fence", "v", "7"]);
        assert_eq!(words(&inline)[0], "EVAL");
    }

    #[test]
    fn a_mutex_needs_a_majority_and_a_name() {
        let target = mutex("n");
        assert_eq!(target.quorum(5), 3);
        assert!(target.check().is_ok());
        assert!(matches!(
            mutex("").check(),
            Err(Error::Config { field, .. }) if field == "name"
        ));
    }
}
