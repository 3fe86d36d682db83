//! A mutex over one name, as the engine sees it: the name's key holds the lock value; its fencing
//! counter is `{<name>}:fence` (see `engine::target::beside` for the layout of every key beside a
//! name), and its fair line's keys are the waiting layer's (`waiting::fair`).
//!
//! On a standalone server a fenced acquire also reads `<name>:fence`, where the counter was kept
//! before the keys moved into the name's slot, and takes the larger: a counter left there by an
//! older client keeps tokens increasing across the upgrade. Raises write only the new key, which
//! from then on stays ahead. A cluster member never had the old layout, whose counter would be in
//! another slot than the name anyway.

use std::fmt;
use std::sync::{Arc, OnceLock};

use redis::{Cmd, Pipeline, Value};

use crate::engine::quorum::whole_millis;
use crate::engine::request::{Delivery, Op};
use crate::engine::target::{self, Channels, Settled, Target, Verb, beside, waiters_key};
use crate::error::Error;
use crate::nodes::Member;
use crate::nodes::listener::grant_channel;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;
use crate::waiting::MARK_TTL;
use crate::waiting::fair::scripts::{self as line, LineKeys};

/// What a mutex needs of a node: `EVAL` with `redis.sha1hex` and `PUBLISH`, and `SET ... NX PX`.
pub(crate) const NEEDS: Needs = Needs::new("mutexes", Version::new(2, 6, 12), "2.6.12");

/// The suffix of a name's fencing counter (see [`counter_key`]).
pub(crate) const SUFFIXES: &[&str] = &[":fence"];

/// Compare-and-delete (`release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/mutex/release.lua");
/// Compare-and-delete with a release notice (`release_notify.lua`).
pub(crate) const RELEASE_NOTIFY: Script = lua!("primitives/mutex/release_notify.lua");
/// Compare-and-delete that keeps the waiters' mark, with a release notice (`release_keep.lua`).
pub(crate) const RELEASE_KEEP: Script = lua!("primitives/mutex/release_keep.lua");
/// Compare-and-PEXPIRE, and the repair of a node that lost the key (`extend.lua`).
pub(crate) const EXTEND: Script = lua!("primitives/mutex/extend.lua");
/// `SET NX PX` and the fencing counter (`acquire_fenced.lua`).
pub(crate) const ACQUIRE_FENCED: Script = lua!("primitives/mutex/acquire_fenced.lua");
/// The fencing raise (`raise.lua`).
pub(crate) const RAISE: Script = lua!("primitives/mutex/raise.lua");

/// The mutex's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[
    RELEASE,
    RELEASE_NOTIFY,
    RELEASE_KEEP,
    EXTEND,
    ACQUIRE_FENCED,
    RAISE,
];

/// The key of a name's fencing counter, `{<name>}:fence`: beside the lock key in its slot, never
/// expiring, kept across unlocks.
pub(crate) fn counter_key(name: &str) -> String {
    beside(name, ":fence")
}

/// Where the previous key layout kept a name's fencing counter, `<name>:fence`: still read (never
/// written) by a fenced acquire on a standalone server (see the module's documentation).
pub(crate) fn legacy_counter_key(name: &str) -> String {
    format!("{name}:fence")
}

/// A mutex over one name.
pub(crate) struct MutexTarget {
    name: [Arc<str>; 1],
    /// The fair line's keys beside the name, made on first use: every fair round and release
    /// names them. Boxed, so that a target never used fairly (most of those a client holds at
    /// once) keeps one pointer for them rather than three empty strings.
    line: OnceLock<Box<LineKeys>>,
    /// The channel its releases publish on, on a cluster.
    channels: Channels,
}

impl MutexTarget {
    pub(crate) fn new(name: Arc<str>) -> MutexTarget {
        MutexTarget {
            name: [name],
            line: OnceLock::new(),
            channels: Channels::default(),
        }
    }

    /// The keys of the name's fair line.
    fn line_keys(&self) -> &LineKeys {
        self.line
            .get_or_init(|| Box::new(LineKeys::new(&self.name[0])))
    }

    /// The command and channel of the name's notices on `member`, where it needs them (see
    /// `engine::target::channel_arg`).
    fn notices(&self, member: Member) -> Option<(&'static str, &str)> {
        match self.channels.get(&self.name[0], member) {
            (publish, Some(channel)) => Some((publish, channel)),
            (_, None) => None,
        }
    }

    fn command_for(&self, op: Op, verb: Verb, member: Member, value: &str, millis: u64) -> Cmd {
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
            Op::ExtendAndRepair => {
                let mut cmd = script_cmd(verb.script(&EXTEND), verb, name, value, Some(millis));
                cmd.arg("repair");
                cmd
            }
            Op::Release { hand_off: true, .. } => {
                // A fair mutex's name has a slot prefix (`check_beside`), hence a mark. Made only
                // for a cluster: a standalone server's script makes it from the name.
                let cluster = match member {
                    Member::Cluster => waiters_key(name, member).zip(self.notices(member)),
                    Member::Standalone => None,
                };
                let cluster = cluster
                    .as_ref()
                    .map(|(mark, notices)| (self.line_keys(), mark.as_str(), *notices));
                line::release(verb, name, value, cluster)
            }
            Op::Round { ticket, client } => {
                let notices = self.notices(member);
                let mark = waiters_key(name, member).unwrap_or_default();
                let grants = grant_channel(name, client).unwrap_or_default();
                let keys = self.line_keys();
                line::round(
                    verb,
                    name,
                    keys,
                    &mark,
                    (value, millis, ticket),
                    &grants,
                    notices,
                )
            }
            Op::Release { notify: false, .. } => {
                script_cmd(verb.script(&RELEASE), verb, name, value, None)
            }
            Op::Release {
                notify: true,
                keep_marks: false,
                ..
            } => self.release_with(&RELEASE_NOTIFY, verb, member, value, None),
            Op::Release {
                notify: true,
                keep_marks: true,
                ..
            } => {
                let keep = whole_millis(MARK_TTL);
                self.release_with(&RELEASE_KEEP, verb, member, value, Some(keep))
            }
            Op::AcquireFenced => {
                let script = verb.script(&ACQUIRE_FENCED);
                let legacy = member == Member::Standalone;
                fenced_cmd(script, verb, name, legacy, value, millis)
            }
            Op::Raise(token) => fenced_cmd(verb.script(&RAISE), verb, name, false, value, token),
        }
    }
}

impl MutexTarget {
    /// A release by `script`, which takes the arguments of `release_notify.lua`: on a standalone
    /// server the name and the value alone (the script makes the waiters' mark from the name);
    /// on a cluster also the mark, the command and the channel. A name without a slot prefix has
    /// no mark and no channel on a cluster (see `target::waiters_key`): there its release is the
    /// plain one, and its waiters poll. With `keep` (`release_keep.lua`), the argument after the
    /// value: how many milliseconds the waiters' mark lives where the release finds one.
    pub(crate) fn release_with(
        &self,
        script: &Script,
        verb: Verb,
        member: Member,
        value: &str,
        keep: Option<u64>,
    ) -> Cmd {
        let name = &self.name[0];
        let notices = self.notices(member);
        let mark = match member {
            Member::Standalone => None,
            Member::Cluster => match waiters_key(name, member) {
                Some(mark) => Some(mark),
                None => return script_cmd(verb.script(&RELEASE), verb, name, value, None),
            },
        };
        let script = verb.script(script);
        match (mark, notices) {
            (Some(mark), Some((publish, channel))) => {
                let mut cmd = Cmd::with_capacity(
                    9,
                    64 + script.len() + name.len() + mark.len() + value.len() + channel.len(),
                );
                cmd.arg(verb.word())
                    .arg(script)
                    .arg(2)
                    .arg(&**name)
                    .arg(mark)
                    .arg(value);
                if let Some(keep) = keep {
                    cmd.arg(keep);
                }
                cmd.arg(publish).arg(channel);
                cmd
            }
            _ => script_cmd(script, verb, name, value, keep),
        }
    }
}

impl Target for MutexTarget {
    fn names(&self) -> &[Arc<str>] {
        &self.name
    }

    fn primitive(&self) -> &'static str {
        "mutex"
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

    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
        self.command_for(op, Verb::from(delivery), member, value, millis)
    }

    /// A fair mutex's plain first try: `SET NX`, and whether anybody stands in line (on a
    /// cluster, in one transaction: see `engine::target::entry_for`).
    fn entry(&self, op: Op, member: Member, value: &str, millis: u64) -> Option<Pipeline> {
        if op != Op::Enter {
            return None;
        }
        let set = self.command_for(Op::Acquire, Verb::EvalSha, member, value, millis);
        Some(target::entry_for(
            member,
            line::entry(set, self.line_keys()),
        ))
    }

    /// A fair entry's replies, out of its transaction on a cluster; the engine reads them (see
    /// `engine::request`).
    fn settle(&self, op: Op, reply: Value) -> Settled {
        match op {
            Op::Enter => Settled::Reply(target::executed(reply)),
            _ => Settled::Reply(reply),
        }
    }
}

impl fmt::Debug for MutexTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        target::debug(f, format_args!("Name"), &self.name, None)
    }
}

/// A script over one key, with the value and optionally the expiry as arguments.
fn script_cmd(script: &str, verb: Verb, name: &str, value: &str, millis: Option<u64>) -> Cmd {
    let mut cmd = Cmd::with_capacity(7, 32 + script.len() + name.len() + value.len());
    cmd.arg(verb.word()).arg(script).arg(1).arg(name).arg(value);
    if let Some(millis) = millis {
        cmd.arg(millis);
    }
    cmd
}

/// A script over the lock key and its fencing counter (and, with `legacy`, the counter where the
/// previous layout kept it), with one number argument.
fn fenced_cmd(script: &str, verb: Verb, name: &str, legacy: bool, value: &str, number: u64) -> Cmd {
    let counter = counter_key(name);
    let mut cmd = Cmd::with_capacity(8, 48 + script.len() + 3 * name.len() + value.len());
    cmd.arg(verb.word())
        .arg(script)
        .arg(if legacy { 3 } else { 2 })
        .arg(name)
        .arg(counter);
    if legacy {
        cmd.arg(legacy_counter_key(name));
    }
    cmd.arg(value).arg(number);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::multi::MultiTarget;
    use crate::primitives::words;
    use Member::{Cluster, Standalone};

    fn mutex(name: &str) -> MutexTarget {
        MutexTarget::new(name.into())
    }

    #[test]
    fn set_is_built_as_redlock_requires() {
        let target = mutex("name");
        let cmd = target.command(Op::Acquire, Delivery::ByDigest, Standalone, "value", 8000);
        assert_eq!(words(&cmd), ["SET", "name", "value", "NX", "PX", "8000"]);
    }

    #[test]
    fn a_fair_entry_sets_then_looks_for_the_line() {
        let target = mutex("name");
        let entry = target
            .entry(Op::Enter, Standalone, "value", 8000)
            .expect("a pipeline");
        let commands: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(
            commands,
            [
                vec!["SET", "name", "value", "NX", "PX", "8000"],
                vec!["EXISTS", "{name}:line"]
            ]
        );
        assert!(!target.is_script(Op::Enter));
        assert!(
            target
                .entry(Op::Acquire, Standalone, "value", 8000)
                .is_none()
        );
        // On a cluster, one transaction, whose EXEC's replies the engine reads.
        let entry = target
            .entry(Op::Enter, Cluster, "value", 8000)
            .expect("a pipeline");
        let commands: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(commands.len(), 4);
        assert_eq!(
            (commands[0][0].as_str(), commands[3][0].as_str()),
            ("MULTI", "EXEC")
        );
        assert_eq!(commands[2], ["EXISTS", "{name}:line"]);
        let queued = || Value::SimpleString("QUEUED".into());
        let exec = Value::Array(vec![Value::Okay, Value::Int(0)]);
        match target.settle(
            Op::Enter,
            Value::Array(vec![Value::Okay, queued(), queued(), exec.clone()]),
        ) {
            Settled::Reply(reply) => assert_eq!(reply, exec),
            other => panic!("{other:?}"),
        }
        // The standalone form's replies go on as they came.
        match target.settle(Op::Enter, exec.clone()) {
            Settled::Reply(reply) => assert_eq!(reply, exec),
            other => panic!("{other:?}"),
        }
        // Only a mutex over one name has a line; elsewhere an entry is the plain acquire.
        let multi = MultiTarget::new(["a", "b"].map(Arc::from));
        assert!(multi.entry(Op::Enter, Standalone, "v", 8000).is_none());
        assert_eq!(
            words(&multi.command(Op::Enter, Delivery::ByDigest, Standalone, "v", 8000)),
            words(&multi.command(Op::Acquire, Delivery::ByDigest, Standalone, "v", 8000))
        );
    }

    #[test]
    fn scripts_go_by_digest_or_in_full() {
        let target = mutex("name");
        let by_digest = target.command(Op::Extend, Delivery::ByDigest, Standalone, "v", 5);
        assert_eq!(
            words(&by_digest),
            ["EVALSHA", EXTEND.digest(), "1", "name", "v", "5"]
        );
        let repair = target.command(Op::ExtendAndRepair, Delivery::ByDigest, Standalone, "v", 5);
        assert_eq!(
            words(&repair),
            ["EVALSHA", EXTEND.digest(), "1", "name", "v", "5", "repair"]
        );
        let inline = target.command(Op::Raise(7), Delivery::Inline, Standalone, "v", 5);
        assert_eq!(words(&inline)[2..], ["2", "name", "{name}:fence", "v", "7"]);
        assert_eq!(words(&inline)[0], "EVAL");
    }

    /// The keys beside a name carry its slot prefix: `{name}:` for a name without a hash tag,
    /// the name and one more colon for a name with one, which keeps its tag.
    #[test]
    fn the_keys_beside_a_name_are_in_its_slot() {
        assert_eq!(counter_key("order:42"), "{order:42}:fence");
        assert_eq!(counter_key("{user:1}:cart"), "{user:1}:cart::fence");
        assert_eq!(legacy_counter_key("order:42"), "order:42:fence");
        let line = |name: &str| {
            let entry = mutex(name)
                .entry(Op::Enter, Standalone, "v", 1)
                .expect("a pipeline");
            words(entry.cmd_iter().nth(1).expect("EXISTS"))[1].clone()
        };
        assert_eq!(line("{user:1}:cart"), "{user:1}:cart::line");
    }

    /// On a standalone server a fenced acquire reads the counter of the previous layout too (so
    /// tokens never go backwards across the upgrade); on a cluster, where it would be in another
    /// slot and never was, it does not. The raise writes only the new counter.
    #[test]
    fn a_fenced_acquire_reads_the_old_counter_on_a_standalone_server_only() {
        let target = mutex("n");
        let standalone = target.command(Op::AcquireFenced, Delivery::ByDigest, Standalone, "v", 8);
        assert_eq!(
            words(&standalone)[1..],
            [
                ACQUIRE_FENCED.digest(),
                "3",
                "n",
                "{n}:fence",
                "n:fence",
                "v",
                "8"
            ]
        );
        let cluster = target.command(Op::AcquireFenced, Delivery::ByDigest, Cluster, "v", 8);
        assert_eq!(
            words(&cluster)[1..],
            [ACQUIRE_FENCED.digest(), "2", "n", "{n}:fence", "v", "8"]
        );
        for member in [Standalone, Cluster] {
            let raise = target.command(Op::Raise(9), Delivery::ByDigest, member, "v", 8);
            assert_eq!(words(&raise)[2..], ["2", "n", "{n}:fence", "v", "9"]);
        }
    }

    /// A release notice goes out with `SPUBLISH` on the sharded channel in the name's slot on a
    /// cluster, both passed as arguments with the waiters' mark beside the name; a standalone
    /// server gets the arguments of a plain release (the script makes the mark from the name and
    /// defaults to `PUBLISH` on the name's channel of today).
    #[test]
    fn notices_go_out_as_the_member_takes_them() {
        let target = mutex("n");
        let notify = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: false,
        };
        let standalone = target.command(notify, Delivery::ByDigest, Standalone, "v", 8);
        assert_eq!(
            words(&standalone)[1..],
            [RELEASE_NOTIFY.digest(), "1", "n", "v"]
        );
        let cluster = target.command(notify, Delivery::Inline, Cluster, "v", 8);
        assert_eq!(
            words(&cluster)[2..],
            [
                "2",
                "n",
                "{n}:waiters",
                "v",
                "SPUBLISH",
                "redmutex:released:{n}"
            ]
        );
        assert!(
            RELEASE_NOTIFY
                .text()
                .contains("KEYS[2] or name .. ':waiters'")
        );
        // A release that keeps the marks adds how long they live, last.
        let keep = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: true,
        };
        let ttl = whole_millis(MARK_TTL).to_string();
        let standalone = target.command(keep, Delivery::ByDigest, Standalone, "v", 8);
        assert_eq!(
            words(&standalone)[1..],
            [RELEASE_KEEP.digest(), "1", "n", "v", &ttl]
        );
        let cluster = target.command(keep, Delivery::ByDigest, Cluster, "v", 8);
        assert_eq!(
            words(&cluster)[1..],
            [
                RELEASE_KEEP.digest(),
                "2",
                "n",
                "{n}:waiters",
                "v",
                &ttl,
                "SPUBLISH",
                "redmutex:released:{n}"
            ]
        );
        let text = RELEASE_KEEP.text();
        assert!(text.contains("KEYS[2] or name .. ':waiters'"));
        let kept = char::from(crate::waiting::KEPT_MARK);
        assert!(text.contains(&format!("'{kept}' .. ARGV[1]")));
        // A name without a slot prefix has no mark on a cluster: a plain release there.
        let cluster = mutex("a}b").command(notify, Delivery::ByDigest, Cluster, "v", 8);
        assert_eq!(words(&cluster)[1..], [RELEASE.digest(), "1", "a}b", "v"]);
        // The fair line's release and round publish grants the same way, to the head's client's
        // channel where the line knows it. On a standalone server the release is the request of a
        // plain release with notice (the script makes the line's keys from the name).
        let hand_off = Op::Release {
            notify: true,
            hand_off: true,
            keep_marks: false,
        };
        let release = target.command(hand_off, Delivery::ByDigest, Cluster, "v", 8);
        let line = [
            "n",
            "{n}:line",
            "{n}:line:until",
            "{n}:ticket",
            "{n}:waiters",
            "{n}:line:to",
        ];
        assert_eq!(words(&release)[2], "6");
        assert_eq!(words(&release)[3..9], line);
        assert_eq!(
            words(&release)[9..],
            ["v", "SPUBLISH", "redmutex:released:{n}"]
        );
        let release = target.command(hand_off, Delivery::ByDigest, Standalone, "v", 8);
        assert_eq!(words(&release)[2..], ["1", "n", "v"]);
        let round = |member| {
            let op = Op::Round {
                ticket: 3,
                client: 0xc0ffee,
            };
            words(&target.command(op, Delivery::ByDigest, member, "v", 8))
        };
        let grants = "redmutex:granted:{n}:0000000000c0ffee";
        assert_eq!(
            round(Standalone)[3..9],
            [
                "n",
                "{n}:line",
                "{n}:line:until",
                "{n}:ticket",
                "n:waiters",
                "{n}:line:to"
            ]
        );
        assert_eq!(round(Standalone)[9..], ["v", "8", "3", grants]);
        assert_eq!(round(Cluster)[3..9], line);
        assert_eq!(
            round(Cluster)[9..],
            ["v", "8", "3", grants, "SPUBLISH", "redmutex:released:{n}"]
        );
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
