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
use crate::quorum::{Tally, permit_quorum, quorum};
use crate::scripts::{
    ACQUIRE_FENCED, DIGESTS, EXTEND, RAISE, RELEASE, RELEASE_NOTIFY, SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND, SEMAPHORE_RELEASE, fair,
};

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
    /// A counting semaphore over one name: [`Semaphore`](crate::Semaphore). The key `name` holds
    /// the holders and the count they agreed on (see `scripts::SEMAPHORE_ACQUIRE`).
    Permits { permits: u32 },
}

impl Target {
    /// A mutex over `name`: the key `name` holds the lock value.
    pub(crate) fn name(name: Arc<str>) -> Target {
        Target {
            kind: Kind::Name,
            names: Box::new([name]),
        }
    }

    /// A semaphore of `permits` permits over `name`.
    pub(crate) fn permits(name: Arc<str>, permits: u32) -> Target {
        Target {
            kind: Kind::Permits { permits },
            names: Box::new([name]),
        }
    }

    /// The number of permits, for a semaphore.
    pub(crate) fn permit_count(&self) -> Option<u32> {
        match self.kind {
            Kind::Name => None,
            Kind::Permits { permits } => Some(permits),
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
            Kind::Permits { permits } => permit_quorum(nodes, permits),
        }
    }

    /// An empty tally for a request to `nodes` nodes, counting against this target's quorum.
    pub(crate) fn tally(&self, nodes: usize) -> Tally {
        let needed = self.quorum(nodes);
        match self.kind {
            Kind::Name => Tally::new(nodes, needed),
            // Full nodes put a semaphore out of reach once fewer than `needed` are left.
            Kind::Permits { .. } => {
                Tally::with_blocking(nodes, needed, (nodes + 1).saturating_sub(needed))
            }
        }
    }

    /// Checks what needs no I/O: names that cannot be keys, a semaphore without permits.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.names.iter().any(|name| name.is_empty()) {
            return Err(Error::config("name", "must not be empty"));
        }
        if self.kind == (Kind::Permits { permits: 0 }) {
            return Err(Error::config("permits", "must be at least 1, got 0"));
        }
        Ok(())
    }

    /// Whether acquisitions of this target can carry fencing tokens. A token orders one holder
    /// after the next; a semaphore's holders hold side by side, so a resource could not refuse
    /// a stale one by its smaller token (a live holder may carry a smaller one too).
    pub(crate) fn fences(&self) -> bool {
        matches!(self.kind, Kind::Name)
    }

    /// Whether waiters can wait in a fair line on the nodes (see `waiting::fair`). The line's
    /// scripts hand one lock value from holder to waiter; a semaphore's permits have none yet.
    pub(crate) fn has_line(&self) -> bool {
        matches!(self.kind, Kind::Name)
    }

    /// A one-command check on one node whether the target is in use there, for a woken waiter
    /// deciding whether an attempt is worth it: the command, and the reply (an integer) from
    /// which on it is in use. A semaphore counts holders whose entries may have expired unswept:
    /// it may be free although this says not, which costs a waiter a wait, never safety.
    pub(crate) fn probe(&self) -> (Cmd, i64) {
        let name = self.first();
        match self.kind {
            Kind::Name => {
                let mut cmd = Cmd::with_capacity(2, 8 + name.len());
                cmd.arg("EXISTS").arg(&**name);
                (cmd, 1)
            }
            // Holders are scored by their expiry; the permit count's member is negative.
            Kind::Permits { permits } => {
                let mut cmd = Cmd::with_capacity(4, 16 + name.len());
                cmd.arg("ZCOUNT").arg(&**name).arg(0).arg("+inf");
                (cmd, i64::from(permits))
            }
        }
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
            // A fenced acquire, a raise, a fair round and a hand-off are never sent for a
            // semaphore (`fences` and `has_line` are false, and settings asking for them are
            // refused): they map to the plain commands, which answer in the same convention, so
            // the match needs no arm that could fail.
            (Kind::Permits { permits }, Op::Acquire | Op::AcquireFenced | Op::Round { .. }) => {
                semaphore_cmd(
                    verb.script(SEMAPHORE_ACQUIRE, &DIGESTS.semaphore_acquire),
                    verb,
                    name,
                    value,
                    &[millis, u64::from(permits)],
                )
            }
            (Kind::Permits { .. }, Op::Extend | Op::Raise(_)) => semaphore_cmd(
                verb.script(SEMAPHORE_EXTEND, &DIGESTS.semaphore_extend),
                verb,
                name,
                value,
                &[millis],
            ),
            (Kind::Permits { .. }, Op::Release { notify, .. }) => semaphore_cmd(
                verb.script(SEMAPHORE_RELEASE, &DIGESTS.semaphore_release),
                verb,
                name,
                value,
                &[u64::from(notify)],
            ),
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

/// A semaphore script over its one key, with the value and number arguments.
fn semaphore_cmd(script: &str, verb: Verb, name: &str, value: &str, numbers: &[u64]) -> Cmd {
    let mut cmd = Cmd::with_capacity(
        4 + numbers.len(),
        48 + script.len() + name.len() + value.len(),
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
    fn semaphore_scripts_take_the_name_and_their_numbers() {
        let target = Target::permits("jobs".into(), 3);
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, "v", 2000);
        assert_eq!(
            words(&acquire),
            [
                "EVALSHA",
                &DIGESTS.semaphore_acquire,
                "1",
                "jobs",
                "v",
                "2000",
                "3"
            ]
        );
        let extend = target.command(Op::Extend, Delivery::Inline, "v", 2000);
        assert_eq!(words(&extend)[0], "EVAL");
        assert_eq!(words(&extend)[1], SEMAPHORE_EXTEND);
        assert_eq!(words(&extend)[2..], ["1", "jobs", "v", "2000"]);
        for (notify, flag) in [(false, "0"), (true, "1")] {
            let release = Op::Release {
                notify,
                hand_off: false,
            };
            let release = target.command(release, Delivery::ByDigest, "v", 9);
            assert_eq!(words(&release)[1], DIGESTS.semaphore_release);
            assert_eq!(words(&release)[2..], ["1", "jobs", "v", flag]);
        }
        assert!(target.is_script(Op::Acquire));
    }

    #[test]
    fn a_semaphore_needs_its_quorum_and_a_permit() {
        let target = Target::permits("n".into(), 2);
        assert_eq!(target.quorum(5), 4);
        assert_eq!(target.quorum(3), 3);
        let tally = target.tally(5);
        assert_eq!((tally.needed, tally.blocking), (4, 2));
        assert_eq!(target.permit_count(), Some(2));
        assert!(target.check().is_ok());
        assert!(!target.fences());
        assert!(!target.has_line());
        assert!(matches!(
            Target::permits("n".into(), 0).check(),
            Err(Error::Config { field, rule }) if field == "permits" && rule.contains('0')
        ));
        // One permit: the mutex's quorum.
        assert_eq!(Target::permits("n".into(), 1).quorum(5), 3);
    }

    #[test]
    fn a_mutex_needs_a_majority_and_a_name() {
        let target = Target::name("n".into());
        assert_eq!(target.quorum(5), 3);
        let tally = target.tally(4);
        assert_eq!((tally.needed, tally.blocking), (3, 3));
        assert!(target.check().is_ok());
        assert!(target.fences() && target.has_line());
        assert!(matches!(
            Target::name("".into()).check(),
            Err(Error::Config { field, .. }) if field == "name"
        ));
    }
}
