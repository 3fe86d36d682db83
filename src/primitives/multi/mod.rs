//! A mutex over several names at once ([`Redlock::new_multi_mutex`](crate::Redlock::new_multi_mutex)):
//! a [`Mutex`](crate::Mutex) over this target. The names are the keys, each holding the lock value,
//! set all or none per node by one script; fenced, each name's counter is the mutex's
//! (`<name>:fence`).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use redis::Cmd;

use crate::engine::request::{Delivery, Op};
use crate::engine::target::{self, Target, Verb};
use crate::error::Error;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;
use crate::primitives::mutex::counter_key;

/// What a multi-name lock needs of a node: `EXISTS` of several keys, answering how many exist.
pub(crate) const NEEDS: Needs = Needs::new("multi-name locks", Version::new(3, 0, 3), "3.0.3");

/// Every name or none (`acquire.lua`).
pub(crate) const ACQUIRE: Script = lua!("primitives/multi/acquire.lua");
/// Extends where every name holds the value (`extend.lua`).
pub(crate) const EXTEND: Script = lua!("primitives/multi/extend.lua");
/// Deletes every name that holds the value (`release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/multi/release.lua");
/// The fencing raise of every name (`raise.lua`).
pub(crate) const RAISE: Script = lua!("primitives/multi/raise.lua");

/// The multi-name lock's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[ACQUIRE, EXTEND, RELEASE, RAISE];

/// A mutex over several names.
pub(crate) struct MultiTarget {
    /// Without duplicates, in the order given; empty only for an empty list, which `check`
    /// refuses before any I/O.
    names: Box<[Arc<str>]>,
}

impl MultiTarget {
    /// Every name of `names`; duplicates collapse, the first one stays.
    pub(crate) fn new(names: impl IntoIterator<Item = Arc<str>>) -> MultiTarget {
        let mut seen = HashSet::new();
        let unique: Vec<Arc<str>> = names
            .into_iter()
            .filter(|name| seen.insert(Arc::clone(name)))
            .collect();
        MultiTarget {
            names: unique.into_boxed_slice(),
        }
    }
}

impl Target for MultiTarget {
    fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    fn check(&self) -> Result<(), Error> {
        if self.names.is_empty() {
            return Err(Error::config("names", "must not be empty"));
        }
        for (index, name) in self.names.iter().enumerate() {
            check_name(name, || format!("names[{index}]"))?;
        }
        Ok(())
    }

    fn needs(&self, _op: Op) -> &'static Needs {
        &NEEDS
    }

    /// The names are the keys, followed by their counters where fenced.
    fn command(&self, op: Op, delivery: Delivery, value: &str, millis: u64) -> Cmd {
        let verb = Verb::from(delivery);
        // Fair rounds are only for a mutex over one name (`has_line`; settings asking for one
        // elsewhere are refused): a round here would be a plain acquire.
        let op = match op {
            Op::Round { .. } | Op::Enter => Op::Acquire,
            op => op,
        };
        let (script, fenced) = match op {
            Op::Acquire | Op::Round { .. } | Op::Enter => (verb.script(&ACQUIRE), false),
            Op::AcquireFenced => (verb.script(&ACQUIRE), true),
            Op::Extend => (verb.script(&EXTEND), false),
            Op::Release { .. } => (verb.script(&RELEASE), false),
            Op::Raise(_) => (verb.script(&RAISE), true),
        };
        let keys = if fenced {
            2 * self.names.len()
        } else {
            self.names.len()
        };
        let bytes: usize = self.names.iter().map(|name| name.len() + 8).sum();
        let mut cmd = Cmd::with_capacity(keys + 6, 48 + script.len() + 2 * bytes + value.len());
        cmd.arg(verb.word()).arg(script).arg(keys);
        for name in &self.names {
            cmd.arg(&**name);
        }
        if fenced {
            for name in &self.names {
                cmd.arg(counter_key(name));
            }
        }
        cmd.arg(value);
        match op {
            Op::Acquire | Op::Round { .. } | Op::Enter => cmd.arg(millis).arg(0),
            Op::AcquireFenced => cmd.arg(millis).arg(1),
            Op::Extend => cmd.arg(millis),
            Op::Release { notify, .. } => cmd.arg(u8::from(notify)),
            Op::Raise(token) => cmd.arg(token),
        };
        cmd
    }
}

impl fmt::Debug for MultiTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        target::debug(f, format_args!("Names"), &self.names, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::words;

    #[test]
    fn a_multi_name_lock_sends_every_name_in_one_script() {
        let target = MultiTarget::new(["a", "b", "a", "c"].map(Arc::from));
        let names: Vec<&str> = target.names().iter().map(|n| &**n).collect();
        assert_eq!(names, ["a", "b", "c"], "duplicates collapse, order stays");
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, "v", 8000);
        assert_eq!(
            words(&acquire),
            [
                "EVALSHA",
                ACQUIRE.digest(),
                "3",
                "a",
                "b",
                "c",
                "v",
                "8000",
                "0"
            ]
        );
        let fenced = target.command(Op::AcquireFenced, Delivery::ByDigest, "v", 8000);
        assert_eq!(
            words(&fenced)[2..],
            [
                "6", "a", "b", "c", "a:fence", "b:fence", "c:fence", "v", "8000", "1"
            ]
        );
        let raise = target.command(Op::Raise(9), Delivery::Inline, "v", 8000);
        assert_eq!(words(&raise)[0], "EVAL");
        assert_eq!(
            words(&raise)[2..],
            [
                "6", "a", "b", "c", "a:fence", "b:fence", "c:fence", "v", "9"
            ]
        );
        let release = target.command(
            Op::Release {
                notify: true,
                hand_off: false,
            },
            Delivery::ByDigest,
            "v",
            1,
        );
        assert_eq!(words(&release)[2..], ["3", "a", "b", "c", "v", "1"]);
        let extend = target.command(Op::Extend, Delivery::ByDigest, "v", 5);
        assert_eq!(words(&extend)[1], EXTEND.digest());
        assert_eq!(words(&extend)[2..], ["3", "a", "b", "c", "v", "5"]);
        assert!(target.is_script(Op::Acquire));
    }
}
