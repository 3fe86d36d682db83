//! A mutex over several names at once ([`Redlock::new_multi_mutex`](crate::Redlock::new_multi_mutex)):
//! a [`Mutex`](crate::Mutex) over this target. The names are the keys, each holding the lock value,
//! set all or none per node by one `MULTI`/`EXEC` of `SET NX PX` (see `MultiTarget::settle`) or,
//! fenced, by one script; fenced, each name's counter is the mutex's
//! (`{<name>}:fence`, and on a standalone server also the old `<name>:fence`, read only), and
//! each name's release notice goes out on its own channel. On a Redis Cluster member the names
//! must share a slot (one hash tag): the engine refuses others there (see `engine::request`).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use redis::{Cmd, Pipeline, Value};

use crate::engine::request::{Delivery, Op};
use crate::engine::target::{
    self, Settled, Target, Verb, channel_arg, check_prefix, publish_verb, waiters_key,
};
use crate::error::Error;
use crate::nodes::Member;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;
use crate::primitives::mutex::{counter_key, legacy_counter_key};

/// What a multi-name lock needs of a node: `EXISTS` of several keys, answering how many exist.
pub(crate) const NEEDS: Needs = Needs::new("multi-name locks", Version::new(3, 0, 3), "3.0.3");

/// Every name or none (`acquire.lua`).
pub(crate) const ACQUIRE: Script = lua!("primitives/multi/acquire.lua");
/// Extends where every name holds the value, and repairs a node that lost some (`extend.lua`).
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

    fn primitive(&self) -> &'static str {
        "multi"
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

    fn check_beside(&self) -> Result<(), Error> {
        for (index, name) in self.names.iter().enumerate() {
            check_prefix(name, || format!("names[{index}]"))?;
        }
        Ok(())
    }

    fn needs(&self, _op: Op) -> &'static Needs {
        &NEEDS
    }

    /// The names are the keys, followed by their counters where fenced (and on a standalone
    /// server by their old counters, read only).
    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
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
            Op::Extend | Op::ExtendAndRepair => (verb.script(&EXTEND), false),
            Op::Release { .. } => (verb.script(&RELEASE), false),
            Op::Raise(_) => (verb.script(&RAISE), true),
        };
        // The waiters' marks of a release with notices: none on a cluster where a name has no
        // slot prefix, whose release there is then the plain one (see `target::waiters_key`).
        let marks: Option<Vec<String>> = match op {
            Op::Release { notify: true, .. } => self
                .names
                .iter()
                .map(|name| waiters_key(name, member))
                .collect(),
            _ => None,
        };
        // Keys per name: the name, its counter or its mark, its old counter (only a fenced
        // acquire on a standalone server reads that one).
        let per_name = match (fenced, op, member) {
            (false, ..) if marks.is_some() => 2,
            (false, ..) => 1,
            (true, Op::AcquireFenced, Member::Standalone) => 3,
            (true, ..) => 2,
        };
        let keys = per_name * self.names.len();
        let bytes: usize = self.names.iter().map(|name| name.len() + 24).sum();
        let mut cmd = Cmd::with_capacity(2 * keys + 6, 48 + script.len() + 3 * bytes + value.len());
        cmd.arg(verb.word()).arg(script).arg(keys);
        for name in &self.names {
            cmd.arg(&**name);
        }
        if let Some(marks) = &marks {
            for mark in marks {
                cmd.arg(mark);
            }
        } else if per_name > 1 {
            for name in &self.names {
                cmd.arg(counter_key(name));
            }
        }
        if per_name > 2 {
            for name in &self.names {
                cmd.arg(legacy_counter_key(name));
            }
        }
        cmd.arg(value);
        match op {
            Op::Acquire | Op::Round { .. } | Op::Enter | Op::AcquireFenced => {
                cmd.arg(millis).arg(per_name);
            }
            Op::Extend => {
                cmd.arg(millis);
            }
            Op::ExtendAndRepair => {
                cmd.arg(millis).arg("repair");
            }
            Op::Release { .. } if marks.is_none() => {}
            // Each name's notice on its own channel, as a mutex over that name publishes it.
            Op::Release { .. } => {
                cmd.arg(publish_verb(member));
                for name in &self.names {
                    if let Some(channel) = channel_arg(name, member) {
                        cmd.arg(channel);
                    }
                }
            }
            Op::Raise(token) => {
                cmd.arg(token);
            }
        }
        cmd
    }

    /// The plain entry (an unfenced acquire): `SET name value NX PX expiry` for every name, in
    /// one `MULTI`/`EXEC` (one name: the `SET` alone), in one write. See
    /// [`settle`](Self::settle) for how its reply reads.
    fn entry(&self, op: Op, _member: Member, value: &str, millis: u64) -> Option<Pipeline> {
        if op != Op::Acquire {
            return None;
        }
        let several = self.names.len() > 1;
        let mut pipeline = Pipeline::with_capacity(self.names.len() + 2);
        if several {
            pipeline.cmd("MULTI");
        }
        for name in &self.names {
            pipeline
                .cmd("SET")
                .arg(&**name)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(millis);
        }
        if several {
            pipeline.cmd("EXEC");
        }
        Some(pipeline)
    }

    /// Reads the plain entry's reply as `acquire.lua` decides, and leaves what the script leaves:
    /// - *Every `SET` took its name*: the script finds every name free and sets each the same way;
    ///   the node counts (counter 0, as the script answers unfenced).
    /// - *No `SET` took its name* (each name holds a value, of any owner and any type): the
    ///   script answers -1 and writes nothing; so does this.
    /// - *Some did, some did not*: the script answers -1 and writes nothing; here the names
    ///   taken hold our value, which the release a failed attempt sends (compare-and-delete)
    ///   removes on the same connection before the reply counts ([`Settled::Release`]).
    /// - *An error*: a `SET` refused when queued (out of memory, read-only, a missing
    ///   permission) aborts the whole `EXEC`, which sets nothing; it goes on as the node's
    ///   error, as the script's would.
    ///
    /// Why the one difference, a part of the set that holds our value on one node for one round
    /// trip, changes no decision: the proof of `doc/multi-name.md` needs only that a node counts
    /// for a holder where every name of its set holds its value, set at once: `EXEC` runs its
    /// `SET`s atomically as the script did, and a node where one failed never counts (its reply
    /// is -1). A part is our value at names we do not hold there: it can only make another
    /// client's attempt on that node find a name taken (as a failed mutex attempt's key does
    /// until its release), never admit one, and no extend, release or raise of another holder
    /// acts on a value other than its own. `tests/suite/multi.rs`
    /// (`the_plain_multi_entry_decides_as_the_script`) fails if the part is left.
    fn settle(&self, op: Op, reply: Value) -> Settled {
        if op != Op::Acquire {
            return Settled::Reply(reply);
        }
        let Value::Array(replies) = reply else {
            return Settled::Reply(reply);
        };
        // One name: the SET's own reply; several: the EXEC's array, after MULTI's and the
        // QUEUED replies. Anything else (EXECABORT) goes on as it came.
        let sets = match (self.names.len(), replies.last()) {
            (1, _) => replies.as_slice(),
            (_, Some(Value::Array(sets))) => sets.as_slice(),
            _ => return Settled::Reply(Value::Array(replies)),
        };
        if sets.len() != self.names.len() {
            return Settled::Reply(Value::Array(replies));
        }
        let taken = sets.iter().filter(|set| matches!(set, Value::Okay)).count();
        if taken == sets.len() {
            return Settled::Reply(Value::Int(0));
        }
        let verdict = sets
            .iter()
            .find(|set| !matches!(set, Value::Okay | Value::Nil))
            .cloned()
            .unwrap_or(Value::Int(-1));
        if taken == 0 {
            Settled::Reply(verdict)
        } else {
            Settled::Release(verdict)
        }
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
    use Member::{Cluster, Standalone};

    #[test]
    fn a_multi_name_lock_sends_every_name_in_one_script() {
        let target = MultiTarget::new(["a", "b", "a", "c"].map(Arc::from));
        let names: Vec<&str> = target.names().iter().map(|n| &**n).collect();
        assert_eq!(names, ["a", "b", "c"], "duplicates collapse, order stays");
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, Standalone, "v", 8000);
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
                "1"
            ]
        );
        let fenced = target.command(Op::AcquireFenced, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(
            words(&fenced)[2..],
            [
                "9",
                "a",
                "b",
                "c",
                "{a}:fence",
                "{b}:fence",
                "{c}:fence",
                "a:fence",
                "b:fence",
                "c:fence",
                "v",
                "8000",
                "3"
            ]
        );
        // On a cluster, without the old counters, which were never there.
        let fenced = target.command(Op::AcquireFenced, Delivery::ByDigest, Cluster, "v", 8000);
        assert_eq!(
            words(&fenced)[2..],
            [
                "6",
                "a",
                "b",
                "c",
                "{a}:fence",
                "{b}:fence",
                "{c}:fence",
                "v",
                "8000",
                "2"
            ]
        );
        for member in [Standalone, Cluster] {
            let raise = target.command(Op::Raise(9), Delivery::Inline, member, "v", 8000);
            assert_eq!(words(&raise)[0], "EVAL");
            assert_eq!(
                words(&raise)[2..],
                [
                    "6",
                    "a",
                    "b",
                    "c",
                    "{a}:fence",
                    "{b}:fence",
                    "{c}:fence",
                    "v",
                    "9"
                ]
            );
        }
        let release = |notify, member| {
            let op = Op::Release {
                notify,
                hand_off: false,
                keep_marks: false,
            };
            words(&target.command(op, Delivery::ByDigest, member, "v", 1))[2..].to_vec()
        };
        assert_eq!(release(false, Standalone), ["3", "a", "b", "c", "v"]);
        assert_eq!(release(false, Cluster), release(false, Standalone));
        // Each name's notice on its own channel, where a waiter marked the lock: on a standalone
        // server the script's default, the name's channel of today; the marks follow the names.
        assert_eq!(
            release(true, Standalone),
            [
                "6",
                "a",
                "b",
                "c",
                "a:waiters",
                "b:waiters",
                "c:waiters",
                "v",
                "PUBLISH"
            ]
        );
        let extend = target.command(Op::Extend, Delivery::ByDigest, Standalone, "v", 5);
        assert_eq!(words(&extend)[1], EXTEND.digest());
        assert_eq!(words(&extend)[2..], ["3", "a", "b", "c", "v", "5"]);
        let repair = target.command(Op::ExtendAndRepair, Delivery::ByDigest, Standalone, "v", 5);
        assert_eq!(
            words(&repair)[2..],
            ["3", "a", "b", "c", "v", "5", "repair"]
        );
        assert!(target.is_script(Op::Acquire));
    }

    #[test]
    fn the_plain_entry_reads_as_the_script() {
        let target = MultiTarget::new(["a", "b"].map(Arc::from));
        let entry = target
            .entry(Op::Acquire, Standalone, "v", 8000)
            .expect("an unfenced acquire is plain");
        let sent: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(
            sent,
            [
                vec!["MULTI"],
                vec!["SET", "a", "v", "NX", "PX", "8000"],
                vec!["SET", "b", "v", "NX", "PX", "8000"],
                vec!["EXEC"]
            ]
        );
        for op in [Op::AcquireFenced, Op::Extend, Op::Enter, Op::Raise(1)] {
            assert!(target.entry(op, Standalone, "v", 8000).is_none(), "{op:?}");
        }
        let queued = || Value::SimpleString("QUEUED".into());
        let reply = |sets: Vec<Value>| {
            target.settle(
                Op::Acquire,
                Value::Array(vec![Value::Okay, queued(), queued(), Value::Array(sets)]),
            )
        };
        assert!(matches!(
            reply(vec![Value::Okay, Value::Okay]),
            Settled::Reply(Value::Int(0))
        ));
        assert!(matches!(
            reply(vec![Value::Nil, Value::Nil]),
            Settled::Reply(Value::Int(-1))
        ));
        assert!(matches!(
            reply(vec![Value::Okay, Value::Nil]),
            Settled::Release(Value::Int(-1))
        ));
        let error = redis::parse_redis_value(b"-ERR no\r\n").expect("an error");
        assert!(matches!(
            reply(vec![Value::Okay, error.clone()]),
            Settled::Release(Value::ServerError(_))
        ));
        // An aborted EXEC set nothing, and goes on as it came.
        let aborted = target.settle(
            Op::Acquire,
            Value::Array(vec![Value::Okay, error, queued(), error_exec()]),
        );
        assert!(matches!(aborted, Settled::Reply(Value::Array(_))));

        // One name: the SET alone.
        let one = MultiTarget::new(["a"].map(Arc::from));
        let entry = one.entry(Op::Acquire, Standalone, "v", 8).expect("plain");
        let sent: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(sent, [vec!["SET", "a", "v", "NX", "PX", "8"]]);
        let settle = |set| one.settle(Op::Acquire, Value::Array(vec![set]));
        assert!(matches!(settle(Value::Okay), Settled::Reply(Value::Int(0))));
        assert!(matches!(settle(Value::Nil), Settled::Reply(Value::Int(-1))));
    }

    fn error_exec() -> Value {
        redis::parse_redis_value(b"-EXECABORT discarded\r\n").expect("an error")
    }

    /// Names with one hash tag: every key and every channel of the cluster variant is in the
    /// tag's slot, and each name's notice is on its own channel.
    #[test]
    fn names_with_one_tag_release_on_a_cluster_each_on_its_channel() {
        let target = MultiTarget::new(["{o}:a", "{o}:b"].map(Arc::from));
        let op = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: false,
        };
        let release = words(&target.command(op, Delivery::ByDigest, Cluster, "v", 1));
        assert_eq!(
            release[2..],
            [
                "4",
                "{o}:a",
                "{o}:b",
                "{o}:a::waiters",
                "{o}:b::waiters",
                "v",
                "SPUBLISH",
                "redmutex:released:{o}:a:",
                "redmutex:released:{o}:b:"
            ]
        );
        let slot = redmutex_testenv::key_slot("o");
        for word in &release[3..] {
            if word != "v" && word != "SPUBLISH" {
                assert_eq!(redmutex_testenv::key_slot(word), slot, "{word}");
            }
        }
        let fenced = target.command(Op::AcquireFenced, Delivery::ByDigest, Cluster, "v", 8);
        assert_eq!(
            words(&fenced)[3..7],
            ["{o}:a", "{o}:b", "{o}:a::fence", "{o}:b::fence"]
        );
    }
}
