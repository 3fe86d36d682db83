//! What a lock covers on every node, as the engine sees it: a [`Target`].
//!
//! Every primitive is a `Target` (see `primitives`): a mutex over one name, a mutex over several,
//! either side of a read-write lock, a semaphore. The fan-out, the tally, validity, the release of
//! failed attempts and the held record are shared; a target says which names it covers, how many
//! nodes' agreement makes a quorum, and which command each operation sends to a node. Replies
//! follow one convention for all of them (see `request::Request::interpret`).

use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use redis::{Cmd, Pipeline, Value};

use crate::engine::quorum::quorum;
use crate::engine::request::{Delivery, Op};
use crate::engine::tally::Tally;
use crate::error::Error;
use crate::nodes::Member;
use crate::nodes::hash_tag::slot_prefix;
use crate::nodes::listener::{channel, notice_channel};
use crate::nodes::script::Script;
use crate::nodes::version::Needs;

/// The keys a lock covers on every node and the rules that go with them: what the engine asks of
/// a primitive. Default methods are what most primitives share.
pub(crate) trait Target: fmt::Debug + Send + Sync {
    /// Every name the lock covers, without duplicates, in the order given; never empty but for a
    /// multi-name lock over an empty list, which [`check`](Target::check) refuses before any I/O.
    fn names(&self) -> &[Arc<str>];

    /// The primitive's kind as its metrics label it (`primitive`): `mutex`, `multi`, `read`,
    /// `write` or `semaphore`.
    fn primitive(&self) -> &'static str;

    /// The first name: the only one for single-name targets, and the one traces show.
    fn first(&self) -> &Arc<str> {
        self.names().first().unwrap_or(&NO_NAME)
    }

    /// How many of `nodes` nodes must agree. A majority for the locks: two majorities share a
    /// node, where the second acquire script saw what the first left (see the README).
    fn quorum(&self, nodes: usize) -> usize {
        quorum(nodes)
    }

    /// An empty tally for a request to `nodes` nodes, counting against this target's quorum.
    fn tally(&self, nodes: usize) -> Tally {
        Tally::new(nodes, self.quorum(nodes))
    }

    /// Checks what needs no I/O: names that cannot be keys, or that could be another name's
    /// auxiliary keys, and the primitive's own numbers.
    fn check(&self) -> Result<(), Error>;

    /// Whether holders may get fencing tokens. A token orders one holder after the next; holders
    /// side by side could not be told from a stale one by a smaller token (a live one may carry a
    /// smaller token too), so those refuse fencing here.
    fn check_fencing(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Whether every name can have keys and a notice channel beside it, in its slot: asked where
    /// the settings keep some (fencing, fair waiting; a read-write lock's `check` asks always).
    /// See [`check_prefix`].
    fn check_beside(&self) -> Result<(), Error> {
        for (index, name) in self.names().iter().enumerate() {
            check_prefix(name, || match index {
                0 => "name".to_owned(),
                _ => format!("names[{index}]"),
            })?;
        }
        Ok(())
    }

    /// Whether waiters can wait in a fair line on the nodes (see `waiting::fair`): only where the
    /// line's scripts can hand the target's one key from holder to waiter.
    fn has_line(&self) -> bool {
        false
    }

    /// A one-command check on one node whether `name` (one of the target's) is in use there, for
    /// a woken waiter deciding whether an attempt is worth it: the command, and the reply (an
    /// integer) from which on it is in use; `None` when no single command can tell. By default,
    /// whether the name's key exists.
    fn probe(&self, name: &str) -> Option<(Cmd, i64)> {
        let mut cmd = Cmd::with_capacity(2, 8 + name.len());
        cmd.arg("EXISTS").arg(name);
        Some((cmd, 1))
    }

    /// What a node must run for `op` on this target (see `nodes::version`): which primitive the
    /// operation counts as for the version gate.
    fn needs(&self, op: Op) -> &'static Needs;

    /// Whether `op` is sent as a script (and so may need the EVAL fallback on NOSCRIPT).
    fn is_script(&self, _op: Op) -> bool {
        true
    }

    /// The command of `op` for this target on a member of kind `member`: a plain command, or a
    /// script sent as `delivery` says. The keys are the same on both kinds; what differs is how
    /// notices go out (see [`Channels`]), and that a fenced acquire on a standalone server also
    /// reads the counter where the previous key layout kept it.
    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd;

    /// The pipeline of `op` where it is one (sent in one write, answered as one array), instead
    /// of [`command`](Target::command). None by default.
    fn entry(&self, _op: Op, _member: Member, _value: &str, _millis: u64) -> Option<Pipeline> {
        None
    }

    /// What a node's `reply` to `op` leaves to do on that node: where [`entry`](Target::entry)
    /// sends plain commands in place of a script, they decide what they can (answering as the
    /// script would have), and leave the rest to the script. Asked only of replies to an entry
    /// (the reply of one command goes on as it came); the reply as it came by default.
    fn settle(&self, _op: Op, reply: Value) -> Settled {
        Settled::Reply(reply)
    }
}

/// What a node's reply to a plain entry leaves to do on that node (see [`Target::settle`]).
#[derive(Debug)]
pub(crate) enum Settled {
    /// Decided: read this reply as the operation's script's.
    Reply(Value),
    /// Decided once this command ran on the node too (on the same connection, after the entry);
    /// then read the reply as the script's.
    After(Cmd, Value),
    /// The node's state was not plain: the operation's script runs there after all, and decides.
    Script,
    /// Decided as this reply, which is not "ours", but the entry set some of the target's keys
    /// on the node on the way (a multi-name entry that found one name taken): the release a failed
    /// attempt sends (compare-and-delete, with the notices its settings ask for) runs there
    /// first, on the same connection, so the node holds nothing of ours once the reply counts.
    Release(Value),
}

/// A plain entry of several commands (`commands`, over keys of one name's slot), as a member of
/// kind `member` must receive it: as it is on a standalone server; on a Redis Cluster, in one
/// transaction (`MULTI`, the commands, `EXEC`).
///
/// While a slot migrates, its master answers `ASK` for keys it no longer has, and the cluster
/// client sends the whole pipeline again to the master importing the slot, after `ASKING`. The
/// importing master serves only the next command so flagged, or a whole transaction: a plain
/// pipeline's second command was sent back with `MOVED`, the client followed it to the first
/// master, and the pipeline bounced between them until the client gave up; worse, its first
/// command had run on the importing master, which need not hold the name. A transaction is
/// checked as a whole: it runs on one master with every key it names there, or not at all
/// (`EXEC` answers `TRYAGAIN` while its keys are split between the two masters, or missing on
/// the importing one, which the client retries after a pause, as it does a script's). Its
/// replies are read with [`executed`]. A standalone server moves no slots, and its entries stay
/// the plain pipelines they were, two commands fewer for the node to run.
pub(crate) fn entry_for(member: Member, commands: Pipeline) -> Pipeline {
    match member {
        Member::Standalone => commands,
        Member::Cluster => {
            let mut pipeline = Pipeline::with_capacity(commands.len() + 2);
            pipeline.cmd("MULTI");
            for cmd in commands.cmd_iter() {
                pipeline.add_command(cmd.clone());
            }
            pipeline.cmd("EXEC");
            pipeline
        }
    }
}

/// The replies of an entry's commands: from a transaction of [`entry_for`] (`OK` to `MULTI`, a
/// `QUEUED` for each command, then `EXEC`'s array of their replies), `EXEC`'s array; anything
/// else (a plain pipeline's replies, a transaction that was aborted, whose `EXEC` answers an
/// error) as it came.
pub(crate) fn executed(reply: Value) -> Value {
    let Value::Array(mut replies) = reply else {
        return reply;
    };
    let transaction = matches!(replies.first(), Some(Value::Okay))
        && matches!(replies.last(), Some(Value::Array(_)))
        && replies[1..replies.len() - 1]
            .iter()
            .all(|queued| matches!(queued, Value::SimpleString(text) if text == "QUEUED"));
    match replies.pop() {
        Some(exec) if transaction => exec,
        Some(last) => {
            replies.push(last);
            Value::Array(replies)
        }
        None => Value::Array(replies),
    }
}

/// The key `suffix` beside `name` (one of the reserved suffixes, see `primitives`): the name's
/// slot prefix followed by the suffix, `{order:42}:fence` for `order:42` and
/// `{user:1}:cart::fence` for `{user:1}:cart` (see
/// [`slot_prefix`](crate::nodes::hash_tag::slot_prefix)), so that on a Redis Cluster every key of
/// a name is in the name's slot, and one script can touch them all.
///
/// A name without a prefix (a `}` and no hash tag) has no keys beside it: every setting and
/// primitive that keeps some refuses it before any I/O ([`check_prefix`]), so what stands in for
/// it here (the name followed by the suffix, so that nothing panics) is never sent.
pub(crate) fn beside(name: &str, suffix: &str) -> String {
    match slot_prefix(name) {
        Some(prefix) => format!("{prefix}{suffix}"),
        None => format!("{name}{suffix}"),
    }
}

/// Refuses a name that has no slot prefix (a `}` and no hash tag, see
/// [`slot_prefix`](crate::nodes::hash_tag::slot_prefix)) where keys or a notice channel must go
/// beside it: on a Redis Cluster they must be in the name's slot, which only a prefix gives them,
/// and a name's keys are named alike on every kind of member. `field` names it in the error.
pub(crate) fn check_prefix(name: &str, field: impl Fn() -> String) -> Result<(), Error> {
    if slot_prefix(name).is_some() {
        return Ok(());
    }
    Err(Error::config(
        field(),
        format!(
            "`{name}` contains `}}` but no hash tag, so nothing can be kept beside it: fencing, \
             fair waiting and read-write locks keep keys (and a notice channel) beside a name as \
             `{{<name>}}:<suffix>`, in the name's Redis Cluster slot, which a `}}` in the name \
             would end early; rename it, or give it a hash tag of its own (`{{tag}}...`)"
        ),
    ))
}

/// How a script publishes a name's notices on a member of kind `member`: `PUBLISH` on a
/// standalone server; `SPUBLISH` on a cluster (sharded pub/sub, Redis 7.0), where a notice
/// reaches only the subscribers of the channel's slot instead of being broadcast to every node.
pub(crate) fn publish_verb(member: Member) -> &'static str {
    match member {
        Member::Standalone => "PUBLISH",
        Member::Cluster => "SPUBLISH",
    }
}

/// The channel of `name`'s notices that a script must be given on a member of kind `member`:
/// none on a standalone server, where the scripts publish on their default channel,
/// `redmutex:released:<name>` (a unit test keeps it equal to `notice_channel`'s); the sharded
/// channel in the name's slot on a cluster (see `nodes::listener::notice_channel`).
///
/// The scripts that publish take the command and the channel as their last arguments, and
/// default to `PUBLISH` on that channel where they are left out: so a standalone server receives
/// the requests it received before there were clusters, byte for byte: two more arguments cost a
/// node measurably more work per release with notice (`benches/README.md`).
///
/// A name without a slot prefix has no channel on a cluster: fair waiting refuses it before any
/// I/O (see [`check_prefix`]), and a release of it there sends no notice (it has no
/// [`waiters_key`] there either), so what stands in for it here (the standalone channel, so that
/// nothing panics) is never sent.
pub(crate) fn channel_arg(name: &str, member: Member) -> Option<String> {
    match member {
        Member::Standalone => None,
        Member::Cluster => Some(notice_channel(name, member).unwrap_or_else(|| channel(name))),
    }
}

/// The suffix of the key where waiters mark a name as waited for (see [`waiters_key`]).
pub(crate) const WAITERS_SUFFIX: &str = ":waiters";

/// The key of the mark waiters leave for `name` on a member of kind `member` (see
/// `waiting::notices`): a release that deletes the name's key deletes this one with it, in the
/// same `DEL`, and publishes a notice only where it was there, so that a release nobody waits
/// for costs a node one more key in its `DEL` and nothing else.
///
/// On a standalone server it is the name followed by the suffix, `order:42:waiters`, which the
/// release script makes itself from the name: one more argument to every release would cost the
/// node more than the whole look (`benches/README.md`). Any ACL pattern that lets a user write the
/// name (`~lock:*`) lets it write the mark too. On a cluster it must be in the name's slot, so it
/// is beside the name (`{order:42}:waiters`, see [`beside`]) and passed to the scripts; a name
/// without a slot prefix has none there, and its waiters poll.
pub(crate) fn waiters_key(name: &str, member: Member) -> Option<String> {
    match member {
        Member::Standalone => Some(format!("{name}{WAITERS_SUFFIX}")),
        Member::Cluster => slot_prefix(name).map(|prefix| format!("{prefix}{WAITERS_SUFFIX}")),
    }
}

/// The commands that mark every one of `names` as waited for on a member of kind `member`, for
/// `millis` milliseconds: `PSETEX <mark> <millis> 1` each (a command of its own in the nodes'
/// `INFO commandstats`, apart from the attempts' `SET`s). Sent in one write before a waiter's
/// attempt (see `request::Request::with_marks`).
pub(crate) fn mark_commands(names: &[Arc<str>], member: Member, millis: u64) -> Vec<Cmd> {
    names
        .iter()
        .filter_map(|name| waiters_key(name, member))
        .map(|key| {
            let mut cmd = Cmd::with_capacity(4, 24 + key.len());
            cmd.arg("PSETEX").arg(key).arg(millis).arg(1);
            cmd
        })
        .collect()
}

/// A name's channel on a cluster, made on first use: a target lives as long as its primitive,
/// and most never publish, or never to a cluster.
#[derive(Debug, Default)]
pub(crate) struct Channels {
    cluster: OnceLock<Option<Box<str>>>,
}

impl Channels {
    /// The command and, where the member needs one (see [`channel_arg`]), the channel of
    /// `name`'s notices on a member of kind `member`.
    pub(crate) fn get(&self, name: &str, member: Member) -> (&'static str, Option<&str>) {
        let channel = match member {
            Member::Standalone => None,
            Member::Cluster => self
                .cluster
                .get_or_init(|| channel_arg(name, member).map(String::into_boxed_str))
                .as_deref(),
        };
        (publish_verb(member), channel)
    }
}

/// The first name of a target without names (refused by `check`), so that reading it never panics.
static NO_NAME: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

/// How a script travels: by digest (`EVALSHA`), or in full (`EVAL`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Verb {
    EvalSha,
    Eval,
}

impl From<Delivery> for Verb {
    fn from(delivery: Delivery) -> Verb {
        match delivery {
            Delivery::ByDigest => Verb::EvalSha,
            Delivery::Inline => Verb::Eval,
        }
    }
}

impl Verb {
    /// The command's first word.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Verb::EvalSha => "EVALSHA",
            Verb::Eval => "EVAL",
        }
    }

    /// The script's text for EVAL, its digest for EVALSHA.
    pub(crate) fn script(self, script: &Script) -> &'static str {
        match self {
            Verb::EvalSha => script.digest(),
            Verb::Eval => script.text(),
        }
    }
}

/// Writes a target as `Debug` shows every one: its kind, its names and, for a writer, how long
/// its mark lives.
pub(crate) fn debug(
    f: &mut fmt::Formatter<'_>,
    kind: fmt::Arguments<'_>,
    names: &[Arc<str>],
    mark_millis: Option<u64>,
) -> fmt::Result {
    f.debug_struct("Target")
        .field("kind", &kind)
        .field("names", &names)
        .field("mark_ms", &mark_millis)
        .finish()
}

/// A target for the engine's own tests: one name, `SET NX PX` to acquire and a script (the
/// mutex's extend, as a stand-in) for every other operation.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const NEEDS: Needs = Needs::new(
        "test locks",
        crate::nodes::version::Version::new(2, 6, 12),
        "2.6.12",
    );
    /// Never sent: the tests only read the commands built with it.
    const SCRIPT: Script = Script::new(
        "test.lua",
        "\nreturn 1\n",
        "193cde15ebb0d8c62558e5f95c238b87e60b3992",
    );

    /// One name, or (for the engine's refusals on a cluster) several.
    #[derive(Debug)]
    pub(crate) struct OneName(Box<[Arc<str>]>);

    impl OneName {
        pub(crate) fn new(name: &str) -> OneName {
            OneName::several(&[name])
        }

        pub(crate) fn several(names: &[&str]) -> OneName {
            OneName(names.iter().map(|name| Arc::from(*name)).collect())
        }
    }

    impl Target for OneName {
        fn names(&self) -> &[Arc<str>] {
            &self.0
        }

        fn primitive(&self) -> &'static str {
            "mutex"
        }

        fn check(&self) -> Result<(), Error> {
            if self.0[0].is_empty() {
                return Err(Error::config("name", "must not be empty"));
            }
            Ok(())
        }

        fn needs(&self, _op: Op) -> &'static Needs {
            &NEEDS
        }

        fn is_script(&self, op: Op) -> bool {
            op != Op::Acquire
        }

        /// A release with notice also names the publish command of `member`.
        fn command(
            &self,
            op: Op,
            delivery: Delivery,
            member: Member,
            value: &str,
            millis: u64,
        ) -> Cmd {
            let mut cmd = Cmd::new();
            if op == Op::Acquire {
                cmd.arg("SET")
                    .arg(&*self.0[0])
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis);
            } else {
                let verb = Verb::from(delivery);
                cmd.arg(verb.word())
                    .arg(verb.script(&SCRIPT))
                    .arg(1)
                    .arg(&*self.0[0])
                    .arg(value);
                if let Op::Release { notify: true, .. } = op {
                    cmd.arg(publish_verb(member));
                }
            }
            cmd
        }
    }

    #[test]
    fn a_target_without_names_has_an_empty_first_name() {
        #[derive(Debug)]
        struct NoNames;
        impl Target for NoNames {
            fn names(&self) -> &[Arc<str>] {
                &[]
            }
            fn primitive(&self) -> &'static str {
                "mutex"
            }
            fn check(&self) -> Result<(), Error> {
                Err(Error::config("names", "must not be empty"))
            }
            fn needs(&self, _op: Op) -> &'static Needs {
                &NEEDS
            }
            fn command(&self, _: Op, _: Delivery, _: Member, _: &str, _: u64) -> Cmd {
                Cmd::new()
            }
        }
        assert_eq!(NoNames.first().len(), 0, "no panic without names");
        assert_eq!(OneName::new("n").quorum(5), 3);
    }
}
