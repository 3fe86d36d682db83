//! What a lock covers on every node: its keys, the commands that act on them, and how many nodes
//! must agree.
//!
//! Every primitive (a mutex over one name, and the ones built on the same engine) is a `Target`.
//! The fan-out, the tally, validity, the release of failed attempts and the held [`Lock`](crate::Lock)
//! are shared; a target only says which command each operation sends to a node, and how many
//! nodes' agreement makes a quorum for it. Replies follow one convention for all of them (see
//! `node::Request::interpret`).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use redis::{Cmd, Pipeline};

use crate::engine::quorum::{permit_quorum, quorum, whole_millis};
use crate::engine::request::{Delivery, Op};
use crate::engine::tally::Tally;
use crate::error::Error;
use crate::nodes::script::Script;
use crate::nodes::version::Primitive;
use crate::scripts::{
    ACQUIRE_FENCED, EXTEND, NAMES_ACQUIRE, NAMES_EXTEND, NAMES_RAISE, NAMES_RELEASE, RAISE,
    READ_ACQUIRE, READ_EXTEND, READ_RELEASE, RELEASE, RELEASE_NOTIFY, SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND, SEMAPHORE_RELEASE, WRITE_ACQUIRE, fair,
};

/// The keys a lock holds and the rules that go with them.
pub(crate) struct Target {
    kind: Kind,
    /// Without duplicates, in the order given; never empty but for a multi-name lock over an
    /// empty list, which `check` refuses before any I/O.
    names: Box<[Arc<str>]>,
    /// The keys a read-write lock keeps beside its name, for its two sides.
    beside: Option<Beside>,
    /// The fair line's keys beside a mutex's name, made on first use: every fair round and
    /// release names them.
    line: OnceLock<LineKeys>,
}

/// The keys of a name's fair line (see `scripts::fair`).
struct LineKeys {
    line: String,
    until: String,
    ticket: String,
}

/// The kinds of primitives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One name whose key holds the lock value: [`Mutex`](crate::Mutex).
    Name,
    /// Several names whose keys all hold the lock value, set all or none per node: a multi-name
    /// [`Mutex`](crate::Mutex).
    Names,
    /// A reader of a read-write lock: an entry in the name's readers, whose key holds the
    /// readers' marker ([`RwLock::read`](crate::RwLock::read)).
    Read,
    /// The writer of a read-write lock: the name's key holds the lock value, as for a mutex
    /// ([`RwLock::write`](crate::RwLock::write)).
    Write,
    /// A counting semaphore over one name: [`Semaphore`](crate::Semaphore). The key `name` holds
    /// the holders and the count they agreed on (see `scripts::SEMAPHORE_ACQUIRE`).
    Permits { permits: u32 },
}

/// Keys of a read-write lock beside its name, made once rather than on every command.
#[derive(Debug)]
struct Beside {
    /// `<name>:readers`: the readers, a sorted set scored by when each entry expires.
    readers: Box<str>,
    /// `<name>:writer-waiting`: a waiting writer's mark, which new readers respect.
    mark: Box<str>,
    /// The name's fencing counter.
    counter: Box<str>,
    /// How long a writer's mark lives, in milliseconds (writers only).
    mark_millis: u64,
}

/// Suffixes of the keys redmutex keeps beside a name `x`: `x:fence` (the fencing counter),
/// `x:readers` and `x:writer-waiting` (a read-write lock's readers and a waiting writer's mark),
/// `x:line`, `x:line:until` and `x:ticket` (the fair line). No name may end in one, so that no
/// name is ever another name's auxiliary key.
pub(crate) const RESERVED_SUFFIXES: [&str; 6] = [
    ":fence",
    ":readers",
    ":writer-waiting",
    ":line",
    ":line:until",
    ":ticket",
];

/// The first name of a target without names (refused by `check`), so that reading it never panics.
static NO_NAME: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

impl Target {
    /// A mutex over `name`: the key `name` holds the lock value.
    pub(crate) fn name(name: Arc<str>) -> Target {
        Target {
            kind: Kind::Name,
            names: Box::new([name]),
            beside: None,
            line: OnceLock::new(),
        }
    }

    /// A mutex over every name of `names` at once; duplicates collapse, the first one stays.
    pub(crate) fn multi(names: impl IntoIterator<Item = Arc<str>>) -> Target {
        let mut seen = HashSet::new();
        let unique: Vec<Arc<str>> = names
            .into_iter()
            .filter(|name| seen.insert(Arc::clone(name)))
            .collect();
        Target {
            kind: Kind::Names,
            names: unique.into_boxed_slice(),
            beside: None,
            line: OnceLock::new(),
        }
    }

    /// A semaphore of `permits` permits over `name`.
    pub(crate) fn permits(name: Arc<str>, permits: u32) -> Target {
        Target {
            kind: Kind::Permits { permits },
            names: Box::new([name]),
            beside: None,
            line: OnceLock::new(),
        }
    }

    /// The number of permits, for a semaphore.
    pub(crate) fn permit_count(&self) -> Option<u32> {
        match self.kind {
            Kind::Permits { permits } => Some(permits),
            _ => None,
        }
    }

    /// The readers' side of a read-write lock over `name`.
    pub(crate) fn read(name: Arc<str>) -> Target {
        Target::side(Kind::Read, name, Duration::ZERO)
    }

    /// The writer's side of a read-write lock over `name`, whose mark (left while readers hold)
    /// lives for `mark`.
    pub(crate) fn write(name: Arc<str>, mark: Duration) -> Target {
        Target::side(Kind::Write, name, mark)
    }

    fn side(kind: Kind, name: Arc<str>, mark: Duration) -> Target {
        let beside = Beside {
            readers: format!("{name}:readers").into(),
            mark: format!("{name}:writer-waiting").into(),
            counter: counter_key(&name).into(),
            mark_millis: whole_millis(mark),
        };
        Target {
            kind,
            names: Box::new([name]),
            beside: Some(beside),
            line: OnceLock::new(),
        }
    }

    /// Every name the lock covers.
    pub(crate) fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// The first name: the only one for single-name targets, and the one traces show.
    pub(crate) fn first(&self) -> &Arc<str> {
        self.names.first().unwrap_or(&NO_NAME)
    }

    /// How many of `nodes` nodes must agree. A majority for the locks: two majorities share a
    /// node, where the second acquire script saw what the first left (see the README). A
    /// semaphore of P permits needs more (see `quorum::permit_quorum`).
    pub(crate) fn quorum(&self, nodes: usize) -> usize {
        match self.kind {
            Kind::Name | Kind::Names | Kind::Read | Kind::Write => quorum(nodes),
            Kind::Permits { permits } => permit_quorum(nodes, permits),
        }
    }

    /// An empty tally for a request to `nodes` nodes, counting against this target's quorum.
    pub(crate) fn tally(&self, nodes: usize) -> Tally {
        let needed = self.quorum(nodes);
        match self.kind {
            Kind::Name | Kind::Names | Kind::Read | Kind::Write => Tally::new(nodes, needed),
            // Full nodes put a semaphore out of reach once fewer than `needed` are left.
            Kind::Permits { .. } => {
                Tally::with_blocking(nodes, needed, (nodes + 1).saturating_sub(needed))
            }
        }
    }

    /// Whether waiters can wait in a fair line on the nodes (see `waiting::fair`): only for a
    /// mutex over one name, whose line's scripts hand its one key from holder to waiter.
    pub(crate) fn has_line(&self) -> bool {
        self.kind == Kind::Name
    }

    /// A one-command check on one node whether `name` (one of the target's) is in use there,
    /// for a woken waiter
    /// deciding whether an attempt is worth it: the command, and the reply (an integer) from
    /// which on it is in use; `None` when no single command can tell (readers get in while the
    /// name's key is present). A semaphore counts holders whose entries may have expired
    /// unswept: it may be free although this says not, which costs a waiter a wait, never
    /// safety.
    pub(crate) fn probe(&self, name: &str) -> Option<(Cmd, i64)> {
        match self.kind {
            Kind::Name | Kind::Names | Kind::Write => {
                let mut cmd = Cmd::with_capacity(2, 8 + name.len());
                cmd.arg("EXISTS").arg(name);
                Some((cmd, 1))
            }
            Kind::Read => None,
            // Holders are scored by their expiry; the permit count's member is negative.
            Kind::Permits { permits } => {
                let mut cmd = Cmd::with_capacity(4, 16 + name.len());
                cmd.arg("ZCOUNT").arg(name).arg(0).arg("+inf");
                Some((cmd, i64::from(permits)))
            }
        }
    }

    /// Checks what needs no I/O: names that cannot be keys, or that could be another name's
    /// auxiliary keys.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.names.is_empty() {
            return Err(Error::config("names", "must not be empty"));
        }
        if self.kind == (Kind::Permits { permits: 0 }) {
            return Err(Error::config("permits", "must be at least 1, got 0"));
        }
        for (index, name) in self.names.iter().enumerate() {
            let field = || match self.kind {
                Kind::Names => format!("names[{index}]"),
                Kind::Name | Kind::Read | Kind::Write | Kind::Permits { .. } => "name".to_owned(),
            };
            if name.is_empty() {
                return Err(Error::config(field(), "must not be empty"));
            }
            if let Some(suffix) = RESERVED_SUFFIXES.iter().find(|s| name.ends_with(**s)) {
                return Err(Error::config(
                    field(),
                    format!(
                        "must not end in `{suffix}`: redmutex keeps `<name>{suffix}` beside \
                         the key of a name (reserved suffixes: {})",
                        RESERVED_SUFFIXES.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether holders get fencing tokens: not readers, nor a semaphore's holders. A token orders
    /// one holder after the next; holders side by side could not be told from a stale one by a
    /// smaller token (a live one may carry a smaller token too).
    pub(crate) fn check_fencing(&self) -> Result<(), Error> {
        let rule = match self.kind {
            Kind::Read => "readers get no fencing tokens: they do not exclude each other",
            Kind::Permits { .. } => {
                "a semaphore's holders get no fencing tokens: they hold side by side"
            }
            Kind::Name | Kind::Names | Kind::Write => return Ok(()),
        };
        Err(Error::config("fencing", rule))
    }

    /// What a node must run for `op` on this target (see `version` for each one's minimum). A
    /// fair mutex's rounds, first tries and hand-offs are the fair line's; its extend, and a
    /// release without hand-off, are the plain mutex's.
    pub(crate) fn primitive(&self, op: Op) -> Primitive {
        match (self.kind, op) {
            (Kind::Name, Op::Round { .. } | Op::Enter | Op::Release { hand_off: true, .. }) => {
                Primitive::FairMutex
            }
            (Kind::Name, _) => Primitive::Mutex,
            (Kind::Names, _) => Primitive::MultiMutex,
            (Kind::Read | Kind::Write, _) => Primitive::RwLock,
            (Kind::Permits { .. }, _) => Primitive::Semaphore,
        }
    }

    /// Whether `op` is sent as a script (and so may need the EVAL fallback on NOSCRIPT).
    pub(crate) fn is_script(&self, op: Op) -> bool {
        !matches!((self.kind, op), (Kind::Name, Op::Acquire | Op::Enter))
    }

    /// The command of `op` for this target: SET, or a script sent by digest (EVALSHA) or in full
    /// (EVAL).
    pub(crate) fn command(&self, op: Op, delivery: Delivery, value: &str, millis: u64) -> Cmd {
        let verb = match delivery {
            Delivery::ByDigest => Verb::EvalSha,
            Delivery::Inline => Verb::Eval,
        };
        match self.kind {
            Kind::Name => self.name_command(op, verb, value, millis),
            Kind::Names => self.names_command(op, verb, value, millis),
            Kind::Read | Kind::Write => self.side_command(op, verb, value, millis),
            Kind::Permits { permits } => self.permits_command(op, verb, value, millis, permits),
        }
    }

    /// The pipeline of `op` where it is one: a fair mutex's plain first try, `SET NX` and then
    /// `EXISTS` on the name's line (see `waiting::fair`). Run in this order, the `EXISTS` sees
    /// every waiter that stood in line before the `SET`: entries leave a line only when their
    /// waiter is served, leaves or dies.
    pub(crate) fn entry(&self, op: Op, value: &str, millis: u64) -> Option<Pipeline> {
        if op != Op::Enter || !self.has_line() {
            return None;
        }
        let mut pipeline = Pipeline::with_capacity(2);
        pipeline.add_command(self.name_command(Op::Acquire, Verb::EvalSha, value, millis));
        pipeline.cmd("EXISTS").arg(&self.line_keys().line);
        Some(pipeline)
    }

    /// The keys of the name's fair line.
    fn line_keys(&self) -> &LineKeys {
        self.line.get_or_init(|| {
            let name = self.first();
            LineKeys {
                line: format!("{name}:line"),
                until: format!("{name}:line:until"),
                ticket: format!("{name}:ticket"),
            }
        })
    }

    fn name_command(&self, op: Op, verb: Verb, value: &str, millis: u64) -> Cmd {
        let name = self.first();
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
            Op::Release { hand_off: true, .. } => line_cmd(
                verb.script(&fair::RELEASE),
                verb,
                name,
                self.line_keys(),
                &[value],
            ),
            Op::Round { ticket } => line_cmd(
                verb.script(&fair::ROUND),
                verb,
                name,
                self.line_keys(),
                &[value, &millis.to_string(), &ticket.to_string()],
            ),
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

    /// Multi-name commands: the names are the keys, followed by their counters where fenced.
    fn names_command(&self, op: Op, verb: Verb, value: &str, millis: u64) -> Cmd {
        // Fair rounds are only for a mutex over one name (`has_line`; settings asking for one
        // elsewhere are refused): a round here would be a plain acquire.
        let op = match op {
            Op::Round { .. } | Op::Enter => Op::Acquire,
            op => op,
        };
        let (script, fenced) = match op {
            Op::Acquire | Op::Round { .. } | Op::Enter => (verb.script(&NAMES_ACQUIRE), false),
            Op::AcquireFenced => (verb.script(&NAMES_ACQUIRE), true),
            Op::Extend => (verb.script(&NAMES_EXTEND), false),
            Op::Release { .. } => (verb.script(&NAMES_RELEASE), false),
            Op::Raise(_) => (verb.script(&NAMES_RAISE), true),
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

    /// Read-write lock commands. The writer holds the name's key as a mutex does, so it shares
    /// the mutex's extend, release and raise; only its acquire also looks at the readers.
    fn side_command(&self, op: Op, verb: Verb, value: &str, millis: u64) -> Cmd {
        let Some(beside) = &self.beside else {
            // Not reached: read and write targets are made with their keys.
            return self.name_command(op, verb, value, millis);
        };
        let name = self.first();
        let read = self.kind == Kind::Read;
        let mut cmd = Cmd::with_capacity(9, 64 + 4 * name.len() + value.len());
        // As for several names, a fair round here would be a plain acquire.
        let op = match op {
            Op::Round { .. } | Op::Enter => Op::Acquire,
            op => op,
        };
        match op {
            // Readers never fence (`check` refuses it): their acquire answers 0 either way.
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter if read => {
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_ACQUIRE))
                    .arg(3)
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(&*beside.mark)
                    .arg(value)
                    .arg(millis);
            }
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter => {
                let fenced = op == Op::AcquireFenced;
                cmd.arg(verb.word())
                    .arg(verb.script(&WRITE_ACQUIRE))
                    .arg(if fenced { 4 } else { 3 })
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(&*beside.mark);
                if fenced {
                    cmd.arg(&*beside.counter);
                }
                cmd.arg(value).arg(millis).arg(beside.mark_millis);
            }
            // Not reached for readers either; a renewal of the reader's entry is harmless.
            Op::Extend | Op::Raise(_) if read => {
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_EXTEND))
                    .arg(2)
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(value)
                    .arg(millis);
            }
            Op::Release { notify, .. } if read => {
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_RELEASE))
                    .arg(2)
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(value)
                    .arg(u8::from(notify));
            }
            Op::Extend | Op::Release { .. } | Op::Raise(_) => {
                return self.name_command(op, verb, value, millis);
            }
        }
        cmd
    }

    /// Semaphore commands. A fenced acquire, a raise, a fair round and a hand-off are never sent
    /// for a semaphore (settings asking for them are refused): they map to the plain commands,
    /// which answer in the same convention, so no arm can fail.
    fn permits_command(&self, op: Op, verb: Verb, value: &str, millis: u64, permits: u32) -> Cmd {
        let name = self.first();
        match op {
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter => semaphore_cmd(
                verb.script(&SEMAPHORE_ACQUIRE),
                verb,
                name,
                value,
                &[millis, u64::from(permits)],
            ),
            Op::Extend | Op::Raise(_) => {
                semaphore_cmd(verb.script(&SEMAPHORE_EXTEND), verb, name, value, &[millis])
            }
            Op::Release { notify, .. } => semaphore_cmd(
                verb.script(&SEMAPHORE_RELEASE),
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
            .field("mark_ms", &self.beside.as_ref().map(|b| b.mark_millis))
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
    fn script(self, script: &Script) -> &'static str {
        match self {
            Verb::EvalSha => script.digest(),
            Verb::Eval => script.text(),
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
fn line_cmd(script: &str, verb: Verb, name: &str, keys: &LineKeys, args: &[&str]) -> Cmd {
    let mut cmd = Cmd::with_capacity(7 + args.len(), 64 + script.len() + 4 * name.len());
    cmd.arg(verb.word())
        .arg(script)
        .arg(4)
        .arg(name)
        .arg(&keys.line)
        .arg(&keys.until)
        .arg(&keys.ticket);
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
    fn a_fair_entry_sets_then_looks_for_the_line() {
        let target = Target::name("name".into());
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
        let multi = Target::multi(["a", "b"].map(Arc::from));
        assert!(multi.entry(Op::Enter, "v", 8000).is_none());
        assert_eq!(
            words(&multi.command(Op::Enter, Delivery::ByDigest, "v", 8000)),
            words(&multi.command(Op::Acquire, Delivery::ByDigest, "v", 8000))
        );
    }

    #[test]
    fn scripts_go_by_digest_or_in_full() {
        let target = Target::name("name".into());
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
    fn a_multi_name_lock_sends_every_name_in_one_script() {
        let target = Target::multi(["a", "b", "a", "c"].map(Arc::from));
        let names: Vec<&str> = target.names().iter().map(|n| &**n).collect();
        assert_eq!(names, ["a", "b", "c"], "duplicates collapse, order stays");
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, "v", 8000);
        assert_eq!(
            words(&acquire),
            [
                "EVALSHA",
                NAMES_ACQUIRE.digest(),
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
        assert_eq!(words(&extend)[1], NAMES_EXTEND.digest());
        assert_eq!(words(&extend)[2..], ["3", "a", "b", "c", "v", "5"]);
        assert!(target.is_script(Op::Acquire));
    }

    #[test]
    fn the_two_sides_of_a_read_write_lock() {
        let read = Target::read("n".into());
        let cmd = read.command(Op::Acquire, Delivery::ByDigest, "v", 8000);
        assert_eq!(
            words(&cmd),
            [
                "EVALSHA",
                READ_ACQUIRE.digest(),
                "3",
                "n",
                "n:readers",
                "n:writer-waiting",
                "v",
                "8000"
            ]
        );
        let cmd = read.command(
            Op::Release {
                notify: false,
                hand_off: false,
            },
            Delivery::ByDigest,
            "v",
            8000,
        );
        assert_eq!(
            words(&cmd)[1..],
            [READ_RELEASE.digest(), "2", "n", "n:readers", "v", "0"]
        );
        assert!(read.probe("n").is_none());

        let write = Target::write("n".into(), Duration::from_millis(1450));
        let cmd = write.command(Op::AcquireFenced, Delivery::ByDigest, "v", 8000);
        assert_eq!(
            words(&cmd)[1..],
            [
                WRITE_ACQUIRE.digest(),
                "4",
                "n",
                "n:readers",
                "n:writer-waiting",
                "n:fence",
                "v",
                "8000",
                "1450"
            ]
        );
        // Holding the name's key like a mutex, the writer shares its other scripts.
        let mutex = Target::name("n".into());
        for op in [
            Op::Extend,
            Op::Release {
                notify: true,
                hand_off: false,
            },
            Op::Raise(3),
        ] {
            let write = write.command(op, Delivery::ByDigest, "v", 8000);
            let mutex = mutex.command(op, Delivery::ByDigest, "v", 8000);
            assert_eq!(words(&write), words(&mutex), "{op:?}");
        }
        assert!(write.probe("n").is_some());
        assert!(write.check_fencing().is_ok());
        assert!(matches!(
            read.check_fencing(),
            Err(Error::Config { field, .. }) if field == "fencing"
        ));
    }

    #[test]
    fn each_operation_needs_what_its_primitive_runs() {
        let mutex = Target::name("n".into());
        let release = |hand_off| Op::Release {
            notify: true,
            hand_off,
        };
        for op in [
            Op::Acquire,
            Op::AcquireFenced,
            Op::Extend,
            Op::Raise(1),
            release(false),
        ] {
            assert_eq!(mutex.primitive(op), Primitive::Mutex, "{op:?}");
        }
        for op in [Op::Round { ticket: 1 }, Op::Enter, release(true)] {
            assert_eq!(mutex.primitive(op), Primitive::FairMutex, "{op:?}");
        }
        let multi = Target::multi(["a", "b"].map(Arc::from));
        assert_eq!(multi.primitive(Op::Acquire), Primitive::MultiMutex);
        // Writers too: one rule says where a name's readers and writers may be counted.
        for target in [
            Target::read("n".into()),
            Target::write("n".into(), Duration::ZERO),
        ] {
            for op in [Op::Acquire, Op::Extend, release(false)] {
                assert_eq!(target.primitive(op), Primitive::RwLock, "{op:?}");
            }
        }
        let semaphore = Target::permits("n".into(), 2);
        assert_eq!(semaphore.primitive(release(false)), Primitive::Semaphore);
    }

    #[test]
    fn bad_names_are_config_errors() {
        let field = |target: Target| match target.check() {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(field(Target::multi([])), "names");
        assert_eq!(field(Target::multi(["a", ""].map(Arc::from))), "names[1]");
        for suffix in RESERVED_SUFFIXES {
            let name: Arc<str> = format!("x{suffix}").into();
            assert_eq!(field(Target::name(Arc::clone(&name))), "name");
            assert_eq!(field(Target::read(Arc::clone(&name))), "name");
            assert_eq!(field(Target::multi([Arc::from("a"), name])), "names[1]");
        }
        // Only the suffix is reserved.
        assert!(Target::name("fence:readers:x".into()).check().is_ok());
        assert_eq!(Target::multi([]).first().len(), 0, "no panic without names");
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
    #[test]
    fn semaphore_scripts_take_the_name_and_their_numbers() {
        let target = Target::permits("jobs".into(), 3);
        let acquire = target.command(Op::Acquire, Delivery::ByDigest, "v", 2000);
        assert_eq!(
            words(&acquire),
            [
                "EVALSHA",
                SEMAPHORE_ACQUIRE.digest(),
                "1",
                "jobs",
                "v",
                "2000",
                "3"
            ]
        );
        let extend = target.command(Op::Extend, Delivery::Inline, "v", 2000);
        assert_eq!(words(&extend)[0], "EVAL");
        assert_eq!(words(&extend)[1], SEMAPHORE_EXTEND.text());
        assert_eq!(words(&extend)[2..], ["1", "jobs", "v", "2000"]);
        for (notify, flag) in [(false, "0"), (true, "1")] {
            let release = Op::Release {
                notify,
                hand_off: false,
            };
            let release = target.command(release, Delivery::ByDigest, "v", 9);
            assert_eq!(words(&release)[1], SEMAPHORE_RELEASE.digest());
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
        assert!(target.check_fencing().is_err());
        assert!(!target.has_line());
        assert!(matches!(
            Target::permits("n".into(), 0).check(),
            Err(Error::Config { field, rule }) if field == "permits" && rule.contains('0')
        ));
        // One permit: the mutex's quorum.
        assert_eq!(Target::permits("n".into(), 1).quorum(5), 3);
    }
}
