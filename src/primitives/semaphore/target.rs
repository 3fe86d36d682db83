//! A semaphore, as the engine sees it: the key `name` holds the holders and the count they agreed
//! on (see `prelude.lua`), and a holder needs more nodes than a majority.

use std::fmt;
use std::sync::Arc;

use redis::Cmd;

use crate::engine::quorum::permit_quorum;
use crate::engine::request::{Delivery, Op};
use crate::engine::tally::Tally;
use crate::engine::target::{self, Channels, Target, Verb, waiters_key};
use crate::error::Error;
use crate::nodes::Member;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;

/// What a semaphore needs of a node: `PEXPIREAT ... GT` (7.0), and writes after `TIME`.
pub(crate) const NEEDS: Needs = Needs::new("semaphores", Version::new(7, 0, 0), "7.0");

/// Takes a permit (`acquire.lua`).
pub(crate) const ACQUIRE: Script = lua!("primitives/semaphore/acquire.lua");
/// Renews a permit (`extend.lua`).
pub(crate) const EXTEND: Script = lua!("primitives/semaphore/extend.lua");
/// Gives a permit back (`release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/semaphore/release.lua");

/// The semaphore's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[ACQUIRE, EXTEND, RELEASE];

/// A counting semaphore of `permits` permits over one name.
pub(crate) struct PermitsTarget {
    name: [Arc<str>; 1],
    permits: u32,
    /// The channel its releases publish on, on a cluster.
    channels: Channels,
}

impl PermitsTarget {
    pub(crate) fn new(name: Arc<str>, permits: u32) -> PermitsTarget {
        PermitsTarget {
            name: [name],
            permits,
            channels: Channels::default(),
        }
    }

    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }
}

impl Target for PermitsTarget {
    fn names(&self) -> &[Arc<str>] {
        &self.name
    }

    fn primitive(&self) -> &'static str {
        "semaphore"
    }

    /// More than a majority for two permits or more (see `quorum::permit_quorum`).
    fn quorum(&self, nodes: usize) -> usize {
        permit_quorum(nodes, self.permits)
    }

    fn tally(&self, nodes: usize) -> Tally {
        let needed = self.quorum(nodes);
        // Full nodes put a semaphore out of reach once fewer than `needed` are left.
        Tally::with_blocking(nodes, needed, (nodes + 1).saturating_sub(needed))
    }

    fn check(&self) -> Result<(), Error> {
        if self.permits == 0 {
            return Err(Error::config("permits", "must be at least 1, got 0"));
        }
        check_name(&self.name[0], || "name".to_owned())
    }

    fn check_fencing(&self) -> Result<(), Error> {
        Err(Error::config(
            "fencing",
            "a semaphore's holders get no fencing tokens: they hold side by side",
        ))
    }

    /// Holders are scored by their expiry; the permit count's member is negative. A semaphore
    /// counts holders whose entries may have expired unswept: it may be free although this says
    /// not, which costs a waiter a wait, never safety.
    fn probe(&self, name: &str) -> Option<(Cmd, i64)> {
        let mut cmd = Cmd::with_capacity(4, 16 + name.len());
        cmd.arg("ZCOUNT").arg(name).arg(0).arg("+inf");
        Some((cmd, i64::from(self.permits)))
    }

    fn needs(&self, _op: Op) -> &'static Needs {
        &NEEDS
    }

    /// A fenced acquire, a raise, a fair round and a hand-off are never sent for a semaphore
    /// (settings asking for them are refused): they map to the plain commands, which answer in
    /// the same convention, so no arm can fail.
    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
        let (verb, name) = (Verb::from(delivery), &self.name[0]);
        match op {
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter => semaphore_cmd(
                verb.script(&ACQUIRE),
                verb,
                name,
                value,
                &[millis, u64::from(self.permits)],
            ),
            // A permit's entry is never repaired (see `Held::extend`): putting it back is the
            // acquire's decision (room among the permits).
            Op::Extend | Op::ExtendAndRepair | Op::Raise(_) => {
                semaphore_cmd(verb.script(&EXTEND), verb, name, value, &[millis])
            }
            Op::Release { notify, .. } => {
                let script = verb.script(&RELEASE);
                // None on a cluster for a name without a slot prefix: its waiters poll there.
                let Some(mark) = waiters_key(name, member).filter(|_| notify) else {
                    return semaphore_cmd(script, verb, name, value, &[]);
                };
                let (publish, channel) = self.channels.get(name, member);
                let mut cmd =
                    Cmd::with_capacity(8, 64 + script.len() + 2 * name.len() + value.len());
                cmd.arg(verb.word())
                    .arg(script)
                    .arg(2)
                    .arg(&**name)
                    .arg(mark)
                    .arg(value)
                    .arg(publish);
                if let Some(channel) = channel {
                    cmd.arg(channel);
                }
                cmd
            }
        }
    }
}

impl fmt::Debug for PermitsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = format_args!("Permits {{ permits: {} }}", self.permits);
        target::debug(f, kind, &self.name, None)
    }
}

/// A semaphore script over its one key, with the value and number arguments.
fn semaphore_cmd(script: &str, verb: Verb, name: &str, value: &str, numbers: &[u64]) -> Cmd {
    let mut cmd = Cmd::with_capacity(
        6 + numbers.len(),
        64 + script.len() + 2 * name.len() + value.len(),
    );
    cmd.arg(verb.word()).arg(script).arg(1).arg(name).arg(value);
    for &number in numbers {
        cmd.arg(number);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::words;
    use Member::{Cluster, Standalone};

    #[test]
    fn semaphore_scripts_take_the_name_and_their_numbers() {
        let target = PermitsTarget::new("jobs".into(), 3);
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, Standalone, "v", 2000);
        assert_eq!(
            words(&acquire),
            ["EVALSHA", ACQUIRE.digest(), "1", "jobs", "v", "2000", "3"]
        );
        let extend = target.command(Op::Extend, Delivery::Inline, Standalone, "v", 2000);
        assert_eq!(words(&extend)[0], "EVAL");
        assert_eq!(words(&extend)[1], EXTEND.text());
        assert_eq!(words(&extend)[2..], ["1", "jobs", "v", "2000"]);
        let release = |notify, member| {
            let op = Op::Release {
                notify,
                hand_off: false,
                keep_marks: false,
            };
            words(&target.command(op, Delivery::ByDigest, member, "v", 9))
        };
        assert_eq!(release(false, Standalone)[1], RELEASE.digest());
        assert_eq!(release(false, Standalone)[2..], ["1", "jobs", "v"]);
        assert_eq!(release(false, Cluster), release(false, Standalone));
        assert_eq!(
            release(true, Standalone)[2..],
            ["2", "jobs", "jobs:waiters", "v", "PUBLISH"]
        );
        assert_eq!(
            release(true, Cluster)[2..],
            [
                "2",
                "jobs",
                "{jobs}:waiters",
                "v",
                "SPUBLISH",
                "redmutex:released:{jobs}"
            ]
        );
        assert!(target.is_script(Op::Acquire));
    }

    #[test]
    fn a_semaphore_needs_its_quorum_and_a_permit() {
        let target = PermitsTarget::new("n".into(), 2);
        assert_eq!(target.quorum(5), 4);
        assert_eq!(target.quorum(3), 3);
        let tally = target.tally(5);
        assert_eq!((tally.needed, tally.blocking), (4, 2));
        assert_eq!(target.permits(), 2);
        assert!(target.check().is_ok());
        assert!(target.check_fencing().is_err());
        assert!(!target.has_line());
        assert!(matches!(
            PermitsTarget::new("n".into(), 0).check(),
            Err(Error::Config { field, rule }) if field == "permits" && rule.contains('0')
        ));
        // One permit: the mutex's quorum.
        assert_eq!(PermitsTarget::new("n".into(), 1).quorum(5), 3);
    }
}
