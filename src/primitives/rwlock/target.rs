//! The two sides of a read-write lock, as the engine sees them. The writer holds the name's key as
//! a mutex does; readers are entries in `{<name>}:readers` while the key holds the readers'
//! marker; a waiting writer leaves its mark in `{<name>}:writer-waiting` (see
//! `engine::target::beside` for the layout of the keys beside a name: a name with a `}` and no
//! hash tag has none, and is refused for read-write locks).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};

use crate::engine::quorum::whole_millis;
use crate::engine::request::{Delivery, Op};
use crate::engine::target::{
    self, Channels, Settled, Target, Verb, beside, check_prefix, waiters_key,
};
use crate::engine::value::READERS_MARKER;
use crate::error::Error;
use crate::nodes::Member;
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};
use crate::primitives::check_name;
use crate::primitives::mutex::{MutexTarget, counter_key, legacy_counter_key};

/// What a read-write lock needs of a node: `PEXPIREAT ... GT` (7.0), `SET ... PXAT` (6.2) for
/// readers. Writers are refused with them, so that one rule says where a name's readers and
/// writers may be counted.
pub(crate) const NEEDS: Needs = Needs::new("read-write locks", Version::new(7, 0, 0), "7.0");

/// The suffixes of the keys beside a name (see [`readers_key`] and [`mark_key`]).
pub(crate) const SUFFIXES: &[&str] = &[":readers", ":writer-waiting"];

/// Read acquire (`read_acquire.lua`).
pub(crate) const READ_ACQUIRE: Script = lua!("primitives/rwlock/read_acquire.lua");
/// Read extend (`read_extend.lua`).
pub(crate) const READ_EXTEND: Script = lua!("primitives/rwlock/read_extend.lua");
/// Read release (`read_release.lua`).
pub(crate) const READ_RELEASE: Script = lua!("primitives/rwlock/read_release.lua");
/// Write acquire (`write_acquire.lua`).
pub(crate) const WRITE_ACQUIRE: Script = lua!("primitives/rwlock/write_acquire.lua");

/// The read-write lock's scripts, which every node loads; the writer's others are the mutex's.
pub(crate) const SCRIPTS: &[Script] = &[READ_ACQUIRE, READ_EXTEND, READ_RELEASE, WRITE_ACQUIRE];

/// `{<name>}:readers`: the readers, a sorted set scored by when each entry expires.
pub(crate) fn readers_key(name: &str) -> String {
    beside(name, ":readers")
}

/// `{<name>}:writer-waiting`: a waiting writer's mark, which new readers respect.
pub(crate) fn mark_key(name: &str) -> String {
    beside(name, ":writer-waiting")
}

/// A read-write lock's names need keys beside them, whatever the settings.
fn check_rw_name(name: &str) -> Result<(), Error> {
    check_name(name, || "name".to_owned())?;
    check_prefix(name, || "name".to_owned())
}

/// Keys of a read-write lock beside its name, made once rather than on every command.
#[derive(Debug)]
struct Beside {
    readers: Box<str>,
    mark: Box<str>,
    /// The name's fencing counter, and where the previous layout kept it.
    counter: Box<str>,
    legacy_counter: Box<str>,
    /// How long a writer's mark lives, in milliseconds (writers only).
    mark_millis: u64,
}

impl Beside {
    fn new(name: &str, mark: Duration) -> Beside {
        Beside {
            readers: readers_key(name).into(),
            mark: mark_key(name).into(),
            counter: counter_key(name).into(),
            legacy_counter: legacy_counter_key(name).into(),
            mark_millis: whole_millis(mark),
        }
    }
}

/// A reader of a read-write lock: an entry in the name's readers, whose key holds the readers'
/// marker ([`RwLock::read`](crate::RwLock::read)).
pub(crate) struct ReadTarget {
    name: [Arc<str>; 1],
    beside: Beside,
    channels: Channels,
}

impl ReadTarget {
    pub(crate) fn new(name: Arc<str>) -> ReadTarget {
        ReadTarget {
            beside: Beside::new(&name, Duration::ZERO),
            name: [name],
            channels: Channels::default(),
        }
    }
}

impl Target for ReadTarget {
    fn names(&self) -> &[Arc<str>] {
        &self.name
    }

    fn primitive(&self) -> &'static str {
        "read"
    }

    fn check(&self) -> Result<(), Error> {
        check_rw_name(&self.name[0])
    }

    fn check_fencing(&self) -> Result<(), Error> {
        Err(Error::config(
            "fencing",
            "readers get no fencing tokens: they do not exclude each other",
        ))
    }

    /// No single command can tell: readers get in while the name's key is present.
    fn probe(&self, _name: &str) -> Option<(Cmd, i64)> {
        None
    }

    fn needs(&self, _op: Op) -> &'static Needs {
        &NEEDS
    }

    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
        let (verb, name, beside) = (Verb::from(delivery), &self.name[0], &self.beside);
        let mut cmd = Cmd::with_capacity(9, 96 + 5 * name.len() + value.len());
        match op {
            // Readers never fence (`check_fencing` refuses it), nor wait in a fair line: their
            // acquire answers 0 either way.
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter => {
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_ACQUIRE))
                    .arg(3)
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(&*beside.mark)
                    .arg(value)
                    .arg(millis);
            }
            // A raise is not reached for readers either; a renewal of the reader's entry is
            // harmless. A reader's entry is never repaired (see `Held::extend`): putting it
            // back is the read acquire's decision (no writer, no writer waiting).
            Op::Extend | Op::ExtendAndRepair | Op::Raise(_) => {
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_EXTEND))
                    .arg(2)
                    .arg(&**name)
                    .arg(&*beside.readers)
                    .arg(value)
                    .arg(millis);
            }
            Op::Release { notify, .. } => {
                // A name that can be read has a slot prefix (`check` asks), hence a mark.
                let mark = waiters_key(name, member).filter(|_| notify);
                cmd.arg(verb.word())
                    .arg(verb.script(&READ_RELEASE))
                    .arg(2 + usize::from(mark.is_some()))
                    .arg(&**name)
                    .arg(&*beside.readers);
                if let Some(mark) = &mark {
                    cmd.arg(mark);
                }
                cmd.arg(value);
                if mark.is_some() {
                    let (publish, channel) = self.channels.get(name, member);
                    cmd.arg(publish);
                    if let Some(channel) = channel {
                        cmd.arg(channel);
                    }
                }
            }
        }
        cmd
    }
}

impl fmt::Debug for ReadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = Some(self.beside.mark_millis);
        target::debug(f, format_args!("Read"), &self.name, mark)
    }
}

/// The writer of a read-write lock: the name's key holds the lock value, as for a mutex
/// ([`RwLock::write`](crate::RwLock::write)), so it shares the mutex's extend, release and raise;
/// only its acquire also looks at the readers.
pub(crate) struct WriteTarget {
    mutex: MutexTarget,
    beside: Beside,
}

impl WriteTarget {
    /// The writer's side over `name`, whose mark (left while readers hold) lives for `mark`.
    pub(crate) fn new(name: Arc<str>, mark: Duration) -> WriteTarget {
        WriteTarget {
            beside: Beside::new(&name, mark),
            mutex: MutexTarget::new(name),
        }
    }
}

impl Target for WriteTarget {
    fn names(&self) -> &[Arc<str>] {
        self.mutex.names()
    }

    fn primitive(&self) -> &'static str {
        "write"
    }

    fn check(&self) -> Result<(), Error> {
        check_rw_name(&self.first()[..])
    }

    fn needs(&self, _op: Op) -> &'static Needs {
        &NEEDS
    }

    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
        let (verb, name, beside) = (Verb::from(delivery), self.first(), &self.beside);
        let fenced = match op {
            // As for several names, a fair round here would be a plain acquire.
            Op::Acquire | Op::Round { .. } | Op::Enter => false,
            Op::AcquireFenced => true,
            // Where the name's key is gone, no reader is live there either (the readers' marker
            // outlives every entry, see read_acquire.lua): a writer repairs as a mutex does.
            Op::Extend | Op::ExtendAndRepair | Op::Release { .. } | Op::Raise(_) => {
                return self.mutex.command(op, delivery, member, value, millis);
            }
        };
        // The old counter is read on a standalone server only (see `mutex::target`).
        let legacy = fenced && member == Member::Standalone;
        let keys = 3 + usize::from(fenced) + usize::from(legacy);
        let mut cmd = Cmd::with_capacity(10, 96 + 6 * name.len() + value.len());
        cmd.arg(verb.word())
            .arg(verb.script(&WRITE_ACQUIRE))
            .arg(keys)
            .arg(&**name)
            .arg(&*beside.readers)
            .arg(&*beside.mark);
        if fenced {
            cmd.arg(&*beside.counter);
        }
        if legacy {
            cmd.arg(&*beside.legacy_counter);
        }
        cmd.arg(value).arg(millis).arg(beside.mark_millis);
        cmd
    }

    /// The writer's plain entry (an unfenced acquire): `SET NX PX GET` and `EXISTS` on the mark,
    /// in one write (on a cluster, one transaction: see `engine::target::entry_for`); the script
    /// only where readers' marker stands (see [`settle`](Self::settle)).
    fn entry(&self, op: Op, member: Member, value: &str, millis: u64) -> Option<Pipeline> {
        if op != Op::Acquire {
            return None;
        }
        let mut pipeline = Pipeline::with_capacity(2);
        pipeline
            .cmd("SET")
            .arg(&**self.first())
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(millis)
            .arg("GET");
        pipeline.cmd("EXISTS").arg(&*self.beside.mark);
        Some(target::entry_for(member, pipeline))
    }

    /// Reads the plain entry's reply as `write_acquire.lua` decides, the script's branches one by
    /// one:
    /// - *`SET NX` took the key* (the old value is nil): the script takes the name there the same
    ///   way, and then deletes the mark. Here the `DEL` follows on the same connection, not in
    ///   one step with the `SET`; nothing between them can matter: a mark is only ever set by a
    ///   write acquire that finds the readers' marker at the name, and the name holds our value
    ///   meanwhile (it lives for the whole expiry, far longer than one more command on the same
    ///   connection), and while a writer holds, readers are refused whether a mark stands or
    ///   not. So `DEL` removes what the script's would have. Where no mark stands (`EXISTS` 0),
    ///   the script's `DEL` does nothing, and none is sent.
    /// - *The name holds the readers' marker*: whether a live reader is left, and leaving the
    ///   mark, is the script's to decide (it reads the node's clock): it runs after all. Nothing
    ///   was written: the `SET` failed.
    /// - *The name holds any other value* (a writer's, a mutex's): the script answers -1 without
    ///   writing anything; so does this.
    /// - *A key of another type* at the name: `SET ... GET` fails with WRONGTYPE, as the script's
    ///   `GET` would: a node error either way.
    ///
    /// So the entry admits a writer exactly where the script would, and writes what it would;
    /// `tests/suite/rwlock.rs` (`the_plain_write_entry_decides_as_the_script`) fails if either
    /// check is left out.
    fn settle(&self, op: Op, reply: Value) -> Settled {
        if op != Op::Acquire {
            return Settled::Reply(reply);
        }
        let reply = target::executed(reply);
        let Value::Array(replies) = &reply else {
            return Settled::Reply(reply);
        };
        match replies.as_slice() {
            [Value::Nil, Value::Int(0)] => Settled::Reply(Value::Int(0)),
            [Value::Nil, Value::Int(_)] => {
                let mut del = Cmd::with_capacity(2, 8 + self.beside.mark.len());
                del.arg("DEL").arg(&*self.beside.mark);
                Settled::After(del, Value::Int(0))
            }
            [Value::BulkString(old), Value::Int(_)] if old == READERS_MARKER.as_bytes() => {
                Settled::Script
            }
            [Value::BulkString(_), Value::Int(_)] => Settled::Reply(Value::Int(-1)),
            _ => Settled::Reply(reply),
        }
    }
}

impl fmt::Debug for WriteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = Some(self.beside.mark_millis);
        target::debug(f, format_args!("Write"), self.names(), mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::words;
    use Member::{Cluster, Standalone};

    #[test]
    fn the_two_sides_of_a_read_write_lock() {
        let read = ReadTarget::new("n".into());
        let cmd = read.command(Op::Acquire, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(
            words(&cmd),
            [
                "EVALSHA",
                READ_ACQUIRE.digest(),
                "3",
                "n",
                "{n}:readers",
                "{n}:writer-waiting",
                "v",
                "8000"
            ]
        );
        let cmd = read.command(
            Op::Release {
                notify: false,
                hand_off: false,
                keep_marks: false,
            },
            Delivery::ByDigest,
            Standalone,
            "v",
            8000,
        );
        assert_eq!(
            words(&cmd)[1..],
            [READ_RELEASE.digest(), "2", "n", "{n}:readers", "v"]
        );
        assert!(read.probe("n").is_none());

        let write = WriteTarget::new("n".into(), Duration::from_millis(1450));
        let cmd = write.command(Op::AcquireFenced, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(
            words(&cmd)[1..],
            [
                WRITE_ACQUIRE.digest(),
                "5",
                "n",
                "{n}:readers",
                "{n}:writer-waiting",
                "{n}:fence",
                "n:fence",
                "v",
                "8000",
                "1450"
            ]
        );
        // On a cluster, without the old counter.
        let cmd = write.command(Op::AcquireFenced, Delivery::ByDigest, Cluster, "v", 8000);
        assert_eq!(
            words(&cmd)[2..8],
            [
                "4",
                "n",
                "{n}:readers",
                "{n}:writer-waiting",
                "{n}:fence",
                "v"
            ]
        );
        // Holding the name's key like a mutex, the writer shares its other scripts.
        let mutex = MutexTarget::new("n".into());
        for op in [
            Op::Extend,
            Op::Release {
                notify: true,
                hand_off: false,
                keep_marks: false,
            },
            Op::Raise(3),
        ] {
            for member in [Standalone, Cluster] {
                let write = write.command(op, Delivery::ByDigest, member, "v", 8000);
                let mutex = mutex.command(op, Delivery::ByDigest, member, "v", 8000);
                assert_eq!(words(&write), words(&mutex), "{op:?}");
            }
        }
        assert!(write.probe("n").is_some());
        assert!(write.check_fencing().is_ok());
        assert!(matches!(
            read.check_fencing(),
            Err(Error::Config { field, .. }) if field == "fencing"
        ));
    }

    #[test]
    fn the_writers_plain_entry_reads_as_the_script() {
        let write = WriteTarget::new("n".into(), Duration::from_millis(1450));
        let entry = write
            .entry(Op::Acquire, Standalone, "v", 8000)
            .expect("an unfenced acquire is plain");
        let sent: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(
            sent,
            [
                vec!["SET", "n", "v", "NX", "PX", "8000", "GET"],
                vec!["EXISTS", "{n}:writer-waiting"]
            ]
        );
        for op in [Op::AcquireFenced, Op::Extend, Op::Enter] {
            assert!(write.entry(op, Standalone, "v", 8000).is_none(), "{op:?}");
        }
        let reply = |old: Value, mark: i64| {
            write.settle(Op::Acquire, Value::Array(vec![old, Value::Int(mark)]))
        };
        assert!(matches!(
            reply(Value::Nil, 0),
            Settled::Reply(Value::Int(0))
        ));
        match reply(Value::Nil, 1) {
            Settled::After(cmd, Value::Int(0)) => {
                assert_eq!(words(&cmd), ["DEL", "{n}:writer-waiting"]);
            }
            other => panic!("expected the mark's DEL, got {other:?}"),
        }
        let marker = Value::BulkString(READERS_MARKER.into());
        assert!(matches!(reply(marker, 0), Settled::Script));
        let other = Value::BulkString(b"another".to_vec());
        assert!(matches!(reply(other, 1), Settled::Reply(Value::Int(-1))));
        // Errors go on as they came, and replies to other operations are left alone.
        let error = redis::parse_redis_value(b"-WRONGTYPE no\r\n").expect("an error");
        assert!(matches!(reply(error, 0), Settled::Reply(Value::Array(_))));
        assert!(matches!(
            write.settle(Op::Extend, Value::Int(1)),
            Settled::Reply(Value::Int(1))
        ));

        // On a cluster, one transaction, whose EXEC's replies read as the plain pipeline's.
        let entry = write
            .entry(Op::Acquire, Cluster, "v", 8000)
            .expect("an unfenced acquire is plain");
        let sent: Vec<Vec<String>> = entry.cmd_iter().map(words).collect();
        assert_eq!(sent.len(), 4);
        assert_eq!(
            (sent[0].as_slice(), sent[3].as_slice()),
            (&["MULTI".to_owned()][..], &["EXEC".to_owned()][..])
        );
        assert_eq!(sent[1][0], "SET");
        assert_eq!(sent[2], ["EXISTS", "{n}:writer-waiting"]);
        let queued = || Value::SimpleString("QUEUED".into());
        let executed = |old: Value, mark: i64| {
            let exec = Value::Array(vec![old, Value::Int(mark)]);
            write.settle(
                Op::Acquire,
                Value::Array(vec![Value::Okay, queued(), queued(), exec]),
            )
        };
        assert!(matches!(
            executed(Value::Nil, 0),
            Settled::Reply(Value::Int(0))
        ));
        assert!(matches!(executed(Value::Nil, 1), Settled::After(..)));
        let marker = Value::BulkString(READERS_MARKER.into());
        assert!(matches!(executed(marker, 0), Settled::Script));
        // A transaction the node aborted (EXECABORT) goes on as it came: an error.
        let aborted = redis::parse_redis_value(b"-EXECABORT discarded\r\n").expect("an error");
        let reply = Value::Array(vec![Value::Okay, queued(), queued(), aborted]);
        assert!(matches!(
            write.settle(Op::Acquire, reply),
            Settled::Reply(Value::Array(_))
        ));
    }

    #[test]
    fn a_reader_publishes_as_the_member_takes_it() {
        let read = ReadTarget::new("{t}x".into());
        let op = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: false,
        };
        let cmd = read.command(op, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(
            words(&cmd)[2..],
            ["3", "{t}x", "{t}x::readers", "{t}x:waiters", "v", "PUBLISH"]
        );
        let cmd = read.command(op, Delivery::ByDigest, Cluster, "v", 8000);
        assert_eq!(
            words(&cmd)[2..],
            [
                "3",
                "{t}x",
                "{t}x::readers",
                "{t}x::waiters",
                "v",
                "SPUBLISH",
                "redmutex:released:{t}x:"
            ]
        );
    }

    /// A writer that waited releases as such a mutex does, keeping the waiters' mark; a reader's
    /// release always takes it (its script counts the readers left first).
    #[test]
    fn a_writer_that_waited_keeps_the_mark_a_reader_takes_it() {
        let keep = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: true,
        };
        let write = WriteTarget::new("{t}x".into(), Duration::from_millis(1450));
        let cmd = write.command(keep, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(
            words(&cmd)[1],
            crate::primitives::mutex::target::RELEASE_KEEP.digest()
        );
        let read = ReadTarget::new("{t}x".into());
        let cmd = read.command(keep, Delivery::ByDigest, Standalone, "v", 8000);
        assert_eq!(words(&cmd)[1], READ_RELEASE.digest());
    }

    #[test]
    fn a_name_without_keys_beside_it_is_no_read_write_lock() {
        let refused = |target: &dyn Target| match target.check() {
            Err(Error::Config { field, rule }) => (field, rule),
            other => panic!("expected a config error, got {other:?}"),
        };
        for target in [
            &ReadTarget::new("a}b".into()) as &dyn Target,
            &WriteTarget::new("a}b".into(), Duration::ZERO),
        ] {
            let (field, rule) = refused(target);
            assert_eq!(field, "name");
            assert!(rule.contains("hash tag"), "{rule}");
        }
        assert!(ReadTarget::new("{a}b}".into()).check().is_ok());
    }
}
