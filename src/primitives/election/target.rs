//! An election as the engine sees it: a fenced mutex over the election's name whose raise also
//! writes the leader's record, `{<name>}:leader`, beside the name in its slot (`raise_lead.lua`);
//! and the reading of that record from a quorum (`read_leader.lua`), whose judgment is pure.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};

use crate::engine::request::{Delivery, Op};
use crate::engine::target::{self, Settled, Target, Verb, beside};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::nodes::Member;
use crate::nodes::probe::{Answer, unexpected};
use crate::nodes::script::{Script, lua};
use crate::nodes::version::Needs;
use crate::primitives::mutex::{MutexTarget, counter_key};

/// The suffix of an election's record (see [`record_key`]).
pub(crate) const SUFFIXES: &[&str] = &[":leader"];

/// The raise that writes the leader's record (`raise_lead.lua`).
pub(crate) const RAISE_LEAD: Script = lua!("primitives/election/raise_lead.lua");
/// Who leads, on one node (`read_leader.lua`).
pub(crate) const READ_LEADER: Script = lua!("primitives/election/read_leader.lua");
/// A leader's release, which notifies whether or not a waiter marked the name (`release.lua`).
pub(crate) const RELEASE: Script = lua!("primitives/election/release.lua");

/// The election's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[RAISE_LEAD, READ_LEADER, RELEASE];

/// The key of an election's record, `{<name>}:leader`: beside the name in its slot, so one
/// script writes it with the raise on a Redis Cluster member too.
pub(crate) fn record_key(name: &str) -> String {
    beside(name, ":leader")
}

/// A campaign of one candidate: the election's mutex, with the candidate's identity for the
/// record its raise writes. Everything but the raise is the mutex's.
pub(crate) struct ElectionTarget {
    mutex: MutexTarget,
    identity: Arc<str>,
}

impl ElectionTarget {
    pub(crate) fn new(name: Arc<str>, identity: Arc<str>) -> ElectionTarget {
        ElectionTarget {
            mutex: MutexTarget::new(name),
            identity,
        }
    }
}

impl Target for ElectionTarget {
    fn names(&self) -> &[Arc<str>] {
        self.mutex.names()
    }

    fn check(&self) -> Result<(), Error> {
        self.mutex.check()?;
        check_identity(&self.identity)
    }

    fn needs(&self, op: Op) -> &'static Needs {
        self.mutex.needs(op)
    }

    fn primitive(&self) -> &'static str {
        // Its own series: a leader's term and a candidate's wait read differently from a lock's.
        "election"
    }

    fn is_script(&self, op: Op) -> bool {
        self.mutex.is_script(op)
    }

    /// The mutex's, but for the raise, which writes the record, and the release with notice,
    /// which notifies the election's watchers, who leave no marks.
    fn command(&self, op: Op, delivery: Delivery, member: Member, value: &str, millis: u64) -> Cmd {
        let token = match op {
            Op::Raise(token) => token,
            Op::Release { notify: true, .. } => {
                return self.mutex.release_with(
                    &RELEASE,
                    Verb::from(delivery),
                    member,
                    value,
                    None,
                );
            }
            _ => return self.mutex.command(op, delivery, member, value, millis),
        };
        let name = &self.mutex.names()[0];
        let verb = Verb::from(delivery);
        let script = verb.script(&RAISE_LEAD);
        let (counter, record) = (counter_key(name), record_key(name));
        let mut cmd = Cmd::with_capacity(
            9,
            64 + script.len() + 3 * name.len() + value.len() + self.identity.len(),
        );
        cmd.arg(verb.word())
            .arg(script)
            .arg(3)
            .arg(&**name)
            .arg(counter)
            .arg(record)
            .arg(value)
            .arg(token)
            .arg(&*self.identity);
        cmd
    }

    fn entry(&self, op: Op, member: Member, value: &str, millis: u64) -> Option<Pipeline> {
        self.mutex.entry(op, member, value, millis)
    }

    fn settle(&self, op: Op, reply: Value) -> Settled {
        self.mutex.settle(op, reply)
    }
}

impl fmt::Debug for ElectionTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        target::debug(f, format_args!("Election"), self.mutex.names(), None)
    }
}

/// An identity is public and travels in the record: it must say who leads.
pub(crate) fn check_identity(identity: &str) -> Result<(), Error> {
    if identity.is_empty() {
        return Err(Error::config("identity", "must not be empty"));
    }
    Ok(())
}

/// Who leads as one node sees it (`read_leader.lua`'s reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) epoch: u64,
    pub(crate) identity: String,
    /// The name's time to live on the node; `None` where it has none (not a lock of ours).
    pub(crate) left: Option<Duration>,
}

/// Reads `read_leader.lua`'s reply: `None` where nobody leads on the node.
pub(crate) fn read_seen(reply: Value) -> Answer<Option<Seen>> {
    // Kept for the message: leaders are read seldom.
    let shown = reply.clone();
    let Value::Array(items) = reply else {
        return Err(unexpected(&shown));
    };
    let [epoch, identity, left] = match <[Value; 3]>::try_from(items) {
        Ok(three) => three,
        Err(items) if items.is_empty() => return Ok(None),
        Err(_) => return Err(unexpected(&shown)),
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let epoch = text(&epoch).and_then(|e| e.parse::<u64>().ok());
    let (Some(epoch), Some(identity), Value::Int(left)) = (epoch, text(&identity), &left) else {
        return Err(unexpected(&shown));
    };
    let left = u64::try_from(*left).ok().map(Duration::from_millis);
    Ok(Some(Seen {
        epoch,
        identity,
        left,
    }))
}

/// Who leads according to the nodes' answers (in node order), read in `elapsed`: the leader a
/// quorum of nodes names, with the time until fewer than a quorum still hold it; `None` when no
/// leader can have a quorum even counting the nodes that did not answer; otherwise
/// [`Error::NoQuorum`], since the nodes that did not answer may complete one.
pub(crate) fn judge(
    answers: Vec<Answer<Option<Seen>>>,
    quorum: usize,
    elapsed: Duration,
) -> Result<Option<(u64, String, Duration)>, Error> {
    let total = answers.len();
    let mut groups: HashMap<(u64, &str), Vec<Option<Duration>>> = HashMap::new();
    let mut failures = Vec::new();
    for (node, answer) in answers.iter().enumerate() {
        match answer {
            Ok(Some(seen)) => groups
                .entry((seen.epoch, &seen.identity))
                .or_default()
                .push(seen.left),
            Ok(None) => failures.push(NodeError::new(node, NodeErrorKind::Missing)),
            Err(kind) => failures.push(NodeError::new(node, kind.clone())),
        }
    }
    let unanswered = answers.iter().filter(|a| a.is_err()).count();
    let best = groups
        .iter()
        .max_by_key(|(key, lefts)| (lefts.len(), key.0))
        .map(|(key, lefts)| (*key, lefts.clone()));
    let best_count = best.as_ref().map_or(0, |(_, lefts)| lefts.len());
    if let Some(((epoch, identity), mut lefts)) = best.filter(|_| best_count >= quorum) {
        // Longest first: the quorum-th is when the leader stops holding a quorum. A key without
        // a time to live counts as the longest.
        lefts.sort_by(|a, b| b.unwrap_or(Duration::MAX).cmp(&a.unwrap_or(Duration::MAX)));
        let left = lefts
            .get(quorum.saturating_sub(1))
            .copied()
            .flatten()
            .unwrap_or(Duration::MAX)
            .saturating_sub(elapsed);
        return Ok(Some((epoch, identity.to_owned(), left)));
    }
    if best_count + unanswered < quorum {
        return Ok(None);
    }
    Err(Error::NoQuorum {
        ok: best_count,
        quorum,
        total,
        failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::words;
    use Member::{Cluster, Standalone};

    fn target() -> ElectionTarget {
        ElectionTarget::new("jobs".into(), "host a".into())
    }

    fn seen(epoch: u64, identity: &str, left: u64) -> Answer<Option<Seen>> {
        Ok(Some(Seen {
            epoch,
            identity: identity.to_owned(),
            left: Some(Duration::from_millis(left)),
        }))
    }

    fn timeout() -> Answer<Option<Seen>> {
        Err(NodeErrorKind::Timeout(Duration::from_millis(5)))
    }

    #[test]
    fn the_raise_writes_the_record_beside_the_name() {
        for member in [Standalone, Cluster] {
            let cmd = target().command(Op::Raise(7), Delivery::ByDigest, member, "v", 8000);
            assert_eq!(
                words(&cmd),
                [
                    "EVALSHA",
                    RAISE_LEAD.digest(),
                    "3",
                    "jobs",
                    "{jobs}:fence",
                    "{jobs}:leader",
                    "v",
                    "7",
                    "host a"
                ]
            );
            for key in &words(&cmd)[3..6] {
                assert_eq!(
                    redmutex_testenv::key_slot(key),
                    redmutex_testenv::key_slot("jobs"),
                    "{key}"
                );
            }
        }
        assert_eq!(record_key("{user:1}:cron"), "{user:1}:cron::leader");
    }

    /// The acquire and extend are the mutex's; so is the release with notice, but for its
    /// script, which notifies whether or not a waiter marked the name (watchers leave no marks).
    #[test]
    fn everything_but_the_raise_is_the_mutex_s() {
        let mutex = MutexTarget::new("jobs".into());
        let release = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: false,
        };
        for op in [Op::AcquireFenced, Op::Extend, release] {
            for member in [Standalone, Cluster] {
                let ours = words(&target().command(op, Delivery::ByDigest, member, "v", 8));
                let its = words(&mutex.command(op, Delivery::ByDigest, member, "v", 8));
                if op == release {
                    assert_eq!(ours[1], RELEASE.digest());
                    assert_eq!(ours[2..], its[2..], "{member:?}");
                } else {
                    assert_eq!(ours, its, "{op:?}");
                }
            }
        }
        assert!(
            RELEASE
                .text()
                .contains("redis.call('DEL', name, KEYS[2] or name .. ':waiters')\n")
        );
    }

    #[test]
    fn an_empty_identity_is_a_config_error() {
        let target = ElectionTarget::new("jobs".into(), "".into());
        assert!(matches!(target.check(), Err(Error::Config { field, .. }) if field == "identity"));
        let target = ElectionTarget::new("".into(), "a".into());
        assert!(matches!(target.check(), Err(Error::Config { field, .. }) if field == "name"));
    }

    #[test]
    fn replies_are_read_or_refused() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(read_seen(Value::Array(vec![])).unwrap(), None);
        let reply = Value::Array(vec![bulk("12"), bulk("pod 7"), Value::Int(900)]);
        assert_eq!(
            read_seen(reply).unwrap(),
            Some(Seen {
                epoch: 12,
                identity: "pod 7".into(),
                left: Some(Duration::from_millis(900)),
            })
        );
        let reply = Value::Array(vec![bulk("12"), bulk("pod"), Value::Int(-1)]);
        assert_eq!(read_seen(reply).unwrap().unwrap().left, None);
        for bad in [
            Value::Int(1),
            Value::Array(vec![bulk("x"), bulk("pod"), Value::Int(1)]),
            Value::Array(vec![bulk("1"), bulk("pod")]),
            Value::Array(vec![bulk("1"), Value::Int(3), Value::Int(1)]),
        ] {
            assert!(
                matches!(
                    read_seen(bad.clone()),
                    Err(NodeErrorKind::UnexpectedReply(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_leader_needs_a_quorum_and_lasts_while_a_quorum_holds_it() {
        let ms = Duration::from_millis;
        let leader = judge(
            vec![seen(3, "a", 900), seen(3, "a", 500), seen(3, "a", 700)],
            2,
            ms(100),
        );
        assert_eq!(leader.unwrap(), Some((3, "a".to_owned(), ms(600))));
        // A former leader's record on one node does not outvote the quorum.
        let leader = judge(
            vec![seen(2, "b", 100), seen(3, "a", 500), seen(3, "a", 700)],
            2,
            ms(0),
        );
        assert_eq!(leader.unwrap(), Some((3, "a".to_owned(), ms(500))));
        // Nobody anywhere, or too few nodes left to make a quorum: no leader.
        assert_eq!(
            judge(vec![Ok(None), Ok(None), Ok(None)], 2, ms(0)).unwrap(),
            None
        );
        assert_eq!(
            judge(vec![seen(3, "a", 500), Ok(None), Ok(None)], 2, ms(0)).unwrap(),
            None
        );
        // One node names a leader and one did not answer: it may lead; nobody can tell.
        match judge(vec![seen(3, "a", 500), Ok(None), timeout()], 2, ms(0)) {
            Err(Error::NoQuorum {
                ok,
                quorum,
                total,
                failures,
            }) => {
                assert_eq!((ok, quorum, total), (1, 2, 3));
                assert_eq!(failures.iter().map(|f| f.node).collect::<Vec<_>>(), [1, 2]);
            }
            other => panic!("{other:?}"),
        }
        // Time already spent reading leaves none, never less.
        let leader = judge(vec![seen(3, "a", 5), seen(3, "a", 5), timeout()], 2, ms(50));
        assert_eq!(leader.unwrap(), Some((3, "a".to_owned(), Duration::ZERO)));
    }
}
