//! What a lock covers on every node: its keys, the commands that act on them, and how many nodes
//! must agree.
//!
//! Every primitive (a mutex over one name, and the ones built on the same engine) is a `Target`.
//! The fan-out, the tally, validity, the release of failed attempts and the held [`Lock`](crate::Lock)
//! are shared; a target only says which command each operation sends to a node, and how many
//! nodes' agreement makes a quorum for it. Replies follow one convention for all of them (see
//! `node::Request::interpret`).

use std::fmt;
use std::sync::Arc;

use redis::Cmd;

use crate::error::Error;
use crate::node::{Delivery, Op};
use crate::quorum::quorum;
use crate::scripts::{ACQUIRE_FENCED, DIGESTS, EXTEND, RAISE, RELEASE, RELEASE_NOTIFY, fair};

/// The keys a lock holds and the rules that go with them.
pub(crate) struct Target {
    kind: Kind,
    /// Never empty, without duplicates, in the order given.
    names: Box<[Arc<str>]>,
}

/// The kinds of primitives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One name whose key holds the lock value: [`Mutex`](crate::Mutex).
    Name,
}

impl Target {
    /// A mutex over `name`: the key `name` holds the lock value.
    pub(crate) fn name(name: Arc<str>) -> Target {
        Target {
            kind: Kind::Name,
            names: Box::new([name]),
        }
    }

    /// Every name the lock covers.
    pub(crate) fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// The first name: the only one for single-name targets, and the one traces show.
    pub(crate) fn first(&self) -> &Arc<str> {
        &self.names[0]
    }

    /// How many of `nodes` nodes must agree.
    pub(crate) fn quorum(&self, nodes: usize) -> usize {
        match self.kind {
            Kind::Name => quorum(nodes),
        }
    }

    /// Checks what needs no I/O: names that cannot be keys.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.names.iter().any(|name| name.is_empty()) {
            return Err(Error::config("name", "must not be empty"));
        }
        Ok(())
    }

    /// Whether `op` is sent as a script (and so may need the EVAL fallback on NOSCRIPT).
    pub(crate) fn is_script(&self, op: Op) -> bool {
        !matches!((self.kind, op), (Kind::Name, Op::Acquire))
    }

    /// The command of `op` for this target: SET, or a script sent by digest (EVALSHA) or in full
    /// (EVAL).
    pub(crate) fn command(&self, op: Op, delivery: Delivery, value: &str, millis: u64) -> Cmd {
        let verb = match delivery {
            Delivery::ByDigest => Verb::EvalSha,
            Delivery::Inline => Verb::Eval,
        };
        let name = self.first();
        match (self.kind, op) {
            (Kind::Name, Op::Acquire) => {
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
            (Kind::Name, Op::Extend) => script_cmd(
                verb.script(EXTEND, &DIGESTS.extend),
                verb,
                name,
                value,
                Some(millis),
            ),
            (Kind::Name, Op::Release { hand_off: true, .. }) => line_cmd(
                verb.script(fair::RELEASE, &fair::DIGESTS.release),
                verb,
                name,
                &[value],
            ),
            (Kind::Name, Op::Round { ticket }) => line_cmd(
                verb.script(fair::ROUND, &fair::DIGESTS.round),
                verb,
                name,
                &[value, &millis.to_string(), &ticket.to_string()],
            ),
            (Kind::Name, Op::Release { notify: false, .. }) => script_cmd(
                verb.script(RELEASE, &DIGESTS.release),
                verb,
                name,
                value,
                None,
            ),
            (Kind::Name, Op::Release { notify: true, .. }) => script_cmd(
                verb.script(RELEASE_NOTIFY, &DIGESTS.release_notify),
                verb,
                name,
                value,
                None,
            ),
            (Kind::Name, Op::AcquireFenced) => fenced_cmd(
                verb.script(ACQUIRE_FENCED, &DIGESTS.acquire_fenced),
                verb,
                name,
                value,
                millis,
            ),
            (Kind::Name, Op::Raise(token)) => {
                fenced_cmd(verb.script(RAISE, &DIGESTS.raise), verb, name, value, token)
            }
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("kind", &self.kind)
            .field("names", &self.names)
            .finish()
    }
}

/// The key of a name's fencing counter: beside the lock key, never expiring, kept across unlocks.
pub(crate) fn counter_key(name: &str) -> String {
    format!("{name}:fence")
}

/// How a script travels.
#[derive(Debug, Clone, Copy)]
enum Verb {
    EvalSha,
    Eval,
}

impl Verb {
    fn word(self) -> &'static str {
        match self {
            Verb::EvalSha => "EVALSHA",
            Verb::Eval => "EVAL",
        }
    }

    /// The script's text for EVAL, its digest for EVALSHA.
    fn script<'a>(self, text: &'a str, digest: &'a str) -> &'a str {
        match self {
            Verb::EvalSha => digest,
            Verb::Eval => text,
        }
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

/// A script over the lock key and its fair line (see `scripts::fair`).
fn line_cmd(script: &str, verb: Verb, name: &str, args: &[&str]) -> Cmd {
    let line = format!("{name}:line");
    let until = format!("{name}:line:until");
    let ticket = format!("{name}:ticket");
    let mut cmd = Cmd::with_capacity(7 + args.len(), 64 + script.len() + 4 * name.len());
    cmd.arg(verb.word())
        .arg(script)
        .arg(4)
        .arg(name)
        .arg(line)
        .arg(until)
        .arg(ticket);
    for arg in args {
        cmd.arg(*arg);
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

    fn words(cmd: &Cmd) -> Vec<String> {
        let packed = cmd.get_packed_command();
        String::from_utf8_lossy(&packed)
            .split("\r\n")
            .filter(|w| !w.is_empty() && !w.starts_with(['*', '$']))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn set_is_built_as_redlock_requires() {
        let target = Target::name("name".into());
        let cmd = target.command(Op::Acquire, Delivery::ByDigest, "value", 8000);
        assert_eq!(words(&cmd), ["SET", "name", "value", "NX", "PX", "8000"]);
    }

    #[test]
    fn scripts_go_by_digest_or_in_full() {
        let target = Target::name("name".into());
        let by_digest = target.command(Op::Extend, Delivery::ByDigest, "v", 5);
        assert_eq!(
            words(&by_digest),
            ["EVALSHA", &DIGESTS.extend, "1", "name", "v", "5"]
        );
        let inline = target.command(Op::Raise(7), Delivery::Inline, "v", 5);
        assert_eq!(words(&inline)[2..], ["2", "name", "name:fence", "v", "7"]);
        assert_eq!(words(&inline)[0], "EVAL");
    }

    #[test]
    fn a_mutex_needs_a_majority_and_a_name() {
        let target = Target::name("n".into());
        assert_eq!(target.quorum(5), 3);
        assert!(target.check().is_ok());
        assert!(matches!(
            Target::name("".into()).check(),
            Err(Error::Config { field, .. }) if field == "name"
        ));
    }
}
