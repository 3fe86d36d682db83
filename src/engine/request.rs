//! One call to one node: what a request sends, and how its reply reads (bounded by the fan-out
//! that makes it).

use std::borrow::{Borrow, BorrowMut};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};

use crate::engine::quorum::whole_millis;
use crate::engine::settings::ReplicaAcks;
use crate::engine::tally::Tally;
use crate::engine::target::{Settled, Target, mark_commands};
use crate::error::NodeErrorKind;
use crate::nodes::Member;
use crate::nodes::connection::{NodeConnection, Packed};
use crate::nodes::hash_tag::key_slot;
use crate::nodes::version::{Needs, Version};

/// What a request that publishes a notice needs of a cluster member: `SPUBLISH` (7.0), whatever
/// the primitive needs of a standalone server (`PUBLISH` in scripts, 2.6). A cluster member's
/// version is the lowest of its masters'.
pub(crate) const SHARDED_NOTICES: Needs = Needs::new(
    "wake-up on release and fair waiting on a Redis Cluster",
    Version::new(7, 0, 0),
    "7.0",
);

/// What a request does to the lock's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Take the lock where it is free (`SET name value NX PX expiry` for a mutex).
    Acquire,
    /// Compare-and-PEXPIRE.
    Extend,
    /// Compare-and-PEXPIRE that also sets the key again (our value, `NX`) where it is gone: the
    /// extend of a lock still valid (see `Held::extend`). A target whose keys cannot be repaired
    /// so sends its extend.
    ExtendAndRepair,
    /// Compare-and-DEL; with `notify`, also a release notice for waiters (see `hub`), which with
    /// `keep_marks` leaves the waiters' mark where it found one (see `waiting::notices`); with
    /// `hand_off`, also leave the fair line and hand the lock to its head (see `waiting::fair`).
    Release {
        notify: bool,
        hand_off: bool,
        keep_marks: bool,
    },
    /// Acquire that also reads the fencing counter.
    AcquireFenced,
    /// Raise the fencing counter to a token where our value holds the lock.
    Raise(u64),
    /// A fair waiter's round: take the lock if it is our turn, else join the line with this
    /// ticket, or renew our place in it; grants to us go to `client`'s channel (see
    /// `nodes::listener::grant_channel`).
    Round { ticket: u64, client: u64 },
    /// A fair mutex's first try while its client saw no contention on the name: a plain `SET NX`,
    /// and whether anybody stands in line there (see `waiting::fair`).
    Enter,
}

/// How a script travels to the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// EVALSHA, falling back to EVAL on NOSCRIPT: the fast path, for calls whose replies are read.
    ByDigest,
    /// EVAL with the script's text. For releases that run in a task nobody awaits (a cancelled
    /// attempt's, a dropped lock's): the task may not outlive its runtime, so neither a fallback
    /// on NOSCRIPT nor a follow-up (`Request::follow_up`) may ever be sent, and the request a
    /// paused node has queued must work on its own once the node resumes.
    Inline,
}

/// What a request sends to a node.
enum Message {
    One(Cmd),
    /// Commands sent in one write, answered in order (see `Target::entry`).
    Pipeline(Pipeline),
    /// The request's own command (`one`) or pipeline in one write with what travels beside it
    /// (see [`Wrapping`]).
    Wrapped {
        pipeline: Pipeline,
        wrapping: Wrapping,
    },
}

/// What travels in one write beside a request's own command or pipeline: first the waiters'
/// marks of the target's names (`marks` commands, see [`Request::with_marks`]), last, with
/// `acked`, `WAIT` for the replicas' acknowledgement of the write (see
/// [`Request::with_replica_acks`]). The marks go before the write so that a release can only run
/// after them; `WAIT` goes after it, so that it counts the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wrapping {
    marks: usize,
    /// The request's own message is one command (else an entry's pipeline).
    one: bool,
    acked: bool,
}

/// One command (or pipeline), built once and sent to every node: in two variants, since a
/// standalone server and a cluster member take notices differently (see `Target::command`), each
/// picked by the member kind of the connection it goes out on (see [`call`]).
pub(crate) struct Request {
    op: Op,
    /// What the node must be able to run (see `nodes::version`).
    needs: &'static Needs,
    delivery: Delivery,
    /// What a standalone server receives, built with the request.
    message: Message,
    /// What a cluster member receives, built on first need (a client without cluster members
    /// never pays for it), or why that member refuses the request (see [`one_slot`]).
    cluster: OnceLock<Result<Message, NodeErrorKind>>,
    target: Arc<dyn Target>,
    value: Arc<str>,
    millis: u64,
    /// The replicas that must acknowledge a lock write before its member counts.
    replica_acks: Option<ReplicaAcks>,
    /// The release this request's attempt sends where it fails (see `Settled::Release`).
    release: Op,
    /// How long the waiters' marks sent before the request live, in milliseconds; 0 sends none.
    marks: u64,
}

impl Request {
    pub(crate) fn new(op: Op, target: &Arc<dyn Target>, value: &Arc<str>, millis: u64) -> Self {
        Request::with_delivery(op, target, value, millis, Delivery::ByDigest)
    }

    pub(crate) fn with_delivery(
        op: Op,
        target: &Arc<dyn Target>,
        value: &Arc<str>,
        millis: u64,
        delivery: Delivery,
    ) -> Self {
        let message = Request::build(
            op,
            target,
            value,
            millis,
            delivery,
            Member::Standalone,
            0,
            None,
        );
        Request {
            op,
            needs: target.needs(op),
            delivery,
            message,
            cluster: OnceLock::new(),
            target: Arc::clone(target),
            value: Arc::clone(value),
            millis,
            replica_acks: None,
            release: Op::Release {
                notify: false,
                hand_off: false,
                keep_marks: false,
            },
            marks: 0,
        }
    }

    /// The same request, preceded in the same write by the commands that mark the target's
    /// names as waited for, for `ttl` (see `target::mark_commands`): sent by a waiter's
    /// attempts, so that a release that comes after the attempt found the name taken sees the
    /// mark and notifies (see `waiting::notices`). The marks go first on the node's connection,
    /// so the holder's release can only run after them. Their replies are not read: a mark that
    /// failed costs its waiter a notice, never its attempt. `None` leaves the request as it is.
    pub(crate) fn with_marks(mut self, ttl: Option<Duration>) -> Self {
        if let Some(ttl) = ttl {
            self.marks = whole_millis(ttl).max(1);
            self.rebuild();
        }
        self
    }

    /// The same request, whose partial writes a plain entry leaves on a node are released with
    /// `release` (the release of a failed attempt, see `Settled::Release`).
    pub(crate) fn with_release(mut self, release: Op) -> Self {
        self.release = release;
        self
    }

    /// The same request, whose lock writes count only once `acks` replicas acknowledged them
    /// (see [`call`]); `None` leaves it as it is.
    ///
    /// `WAIT` counts the replicas that acknowledged everything its connection wrote so far, on
    /// the node that runs it: it says something of the write only on the node where the write
    /// ran. So it travels in one pipeline with the write, after it. A cluster client routes a
    /// pipeline by its first key and redirects it as a whole (`MOVED`, `ASK` with `ASKING` before
    /// it, a failover's new master, a request sent again after an I/O error), and `WAIT` has no
    /// key of its own: wherever the write runs, its `WAIT` runs there next. Sent apart, `WAIT` was
    /// routed by the name's slot, to the master the client's map named, while the write may have
    /// followed an `ASK` to a master importing the slot (or a `MOVED` the map had not caught up
    /// with): the member counted another master's replicas (`tests/suite/replica_acks.rs`, `a_
    /// write_that_followed_an_ask_is_acknowledged_where_it_landed`). On a standalone server the
    /// pipeline also saves `WAIT` its own round trip.
    pub(crate) fn with_replica_acks(mut self, acks: Option<ReplicaAcks>) -> Self {
        self.replica_acks = acks;
        if self.acks_for_ours().is_some() {
            self.rebuild();
        }
        self
    }

    /// What a reply that says "ours" must wait for: the acknowledgements of a lock write. Every
    /// operation that writes the lock's keys where our value holds them is one (the acquires,
    /// extend, and the fencing raise: a counter a failover lost would hand the next holder a
    /// token already given). A release is not: a lost release brings back a key of a value
    /// nobody holds, on the failed-over master only, which blocks the name there until it expires
    /// (as a release that never arrived does) and never lets a second holder in.
    fn acks_for_ours(&self) -> Option<ReplicaAcks> {
        match self.op {
            Op::Release { .. } => None,
            _ => self.replica_acks,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        op: Op,
        target: &Arc<dyn Target>,
        value: &str,
        millis: u64,
        delivery: Delivery,
        member: Member,
        marks: u64,
        acks: Option<ReplicaAcks>,
    ) -> Message {
        let message = match target.entry(op, member, value, millis) {
            Some(pipeline) => Message::Pipeline(pipeline),
            None => Message::One(target.command(op, delivery, member, value, millis)),
        };
        let marking = match marks {
            0 => Vec::new(),
            millis => mark_commands(target.names(), member, millis),
        };
        if marking.is_empty() && acks.is_none() {
            return message;
        }
        let wrapping = Wrapping {
            marks: marking.len(),
            one: matches!(message, Message::One(_)),
            acked: acks.is_some(),
        };
        let mut pipeline = Pipeline::with_capacity(wrapping.marks + 5);
        for mark in marking {
            pipeline.add_command(mark);
        }
        match message {
            Message::One(cmd) => {
                pipeline.add_command(cmd);
            }
            Message::Pipeline(entry) => {
                for cmd in entry.cmd_iter() {
                    pipeline.add_command(cmd.clone());
                }
            }
            wrapped @ Message::Wrapped { .. } => return wrapped,
        }
        if let Some(acks) = acks {
            pipeline.add_command(wait_cmd(acks));
        }
        Message::Wrapped { pipeline, wrapping }
    }

    /// Builds what a standalone server receives again, after a setting that changes it.
    fn rebuild(&mut self) {
        self.message = Request::build(
            self.op,
            &self.target,
            &self.value,
            self.millis,
            self.delivery,
            Member::Standalone,
            self.marks,
            self.acks_for_ours(),
        );
    }

    /// What a member of kind `member` must run for this request: on a cluster, a request that
    /// publishes also needs [`SHARDED_NOTICES`].
    fn needs_on(&self, member: Member) -> &'static Needs {
        self.needs_of(self.op, member)
    }

    /// What a member of kind `member` must run for `op` on this request's target.
    fn needs_of(&self, op: Op, member: Member) -> &'static Needs {
        let publishes = match op {
            Op::Release {
                notify, hand_off, ..
            } => notify || hand_off,
            Op::Round { .. } => true,
            _ => false,
        };
        if member == Member::Cluster && publishes && self.needs.version < SHARDED_NOTICES.version {
            &SHARDED_NOTICES
        } else {
            self.needs
        }
    }

    /// What a member of kind `member` receives, or why it refuses the request.
    fn message(&self, member: Member) -> Result<&Message, &NodeErrorKind> {
        match member {
            Member::Standalone => Ok(&self.message),
            Member::Cluster => self
                .cluster
                .get_or_init(|| {
                    self.cluster_refusal()?;
                    Ok(Request::build(
                        self.op,
                        &self.target,
                        &self.value,
                        self.millis,
                        self.delivery,
                        Member::Cluster,
                        self.marks,
                        self.acks_for_ours(),
                    ))
                })
                .as_ref(),
        }
    }

    /// Why a cluster member refuses the request before anything is sent to it: the target's names
    /// hash to different slots of the cluster.
    ///
    /// Only a multi-name lock can have such names (every other target has one name, whose keys
    /// all carry its slot). Its names in one slot are one script on the shard that owns the
    /// slot, all or nothing, exactly as on a standalone server. Across slots, one script cannot
    /// do it (Redis refuses a script whose keys span slots, `CROSSSLOT`), and the alternative,
    /// one script per shard with the member counting only where every shard set every name it
    /// owns (releasing partial sets), is a second lock protocol inside the member: its own
    /// timeouts and partial failures, a member that is only as available as all its shards at
    /// once, and a release that must reach shards which may have moved slots meanwhile. A
    /// refusal that names the hash-tag rule costs the user a rename, and every name stays free
    /// to move with its slot. It is a refusal (`NodeErrorKind::is_refusal`), as the version
    /// gate's: another attempt would fail the same way, so `lock()` stops retrying once
    /// refusals leave too few members for a quorum, while the other members still count.
    fn cluster_refusal(&self) -> Result<(), NodeErrorKind> {
        if one_slot(self.target.names()) {
            Ok(())
        } else {
            Err(NodeErrorKind::CrossSlot)
        }
    }

    /// An empty tally for this request's replies from `nodes` nodes (see `Target::tally`).
    pub(crate) fn tally(&self, nodes: usize) -> Tally {
        self.target.tally(nodes)
    }

    /// Whether the tally must list which nodes said "ours": for a fenced acquisition (which nodes
    /// counted into the token) and for a fair round (where we stand).
    pub(crate) fn tracks_nodes(&self) -> bool {
        matches!(self.op, Op::AcquireFenced | Op::Raise(_) | Op::Round { .. })
    }

    /// What the request does, for traces.
    pub(crate) fn op_name(&self) -> &'static str {
        match self.op {
            Op::Acquire | Op::AcquireFenced | Op::Round { .. } | Op::Enter => "acquire",
            Op::Extend | Op::ExtendAndRepair => "extend",
            Op::Release { .. } => "release",
            Op::Raise(_) => "raise",
        }
    }

    /// `op`'s script on this request's target, sent in full to a member of kind `member`, for a
    /// node that does not have it cached (NOSCRIPT). `None` when `op` runs no script, or the
    /// member refuses it.
    fn eval_cmd(&self, op: Op, member: Member) -> Option<Cmd> {
        if !self.target.is_script(op)
            || (member == Member::Cluster && self.cluster_refusal().is_err())
        {
            return None;
        }
        let (value, millis) = (&self.value, self.millis);
        Some(
            self.target
                .command(op, Delivery::Inline, member, value, millis),
        )
    }

    /// After a release by digest timed out: the EVALSHA may still be queued at a stalled node, which
    /// will answer NOSCRIPT if it lost its script cache, and nobody is left to send the fallback.
    /// An EVAL queued behind it on the same connection releases the key either way (and finds
    /// nothing to do if the first one did). Bounded by the expiry, after which the key is gone.
    pub(crate) fn follow_up(&self, mut connection: NodeConnection) {
        if !matches!(self.op, Op::Release { .. }) || self.delivery != Delivery::ByDigest {
            return;
        }
        let member = connection.member();
        let eval = self.eval_cmd(self.op, member);
        let (Some(eval), Ok(runtime)) = (eval, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (bound, needs) = (Duration::from_millis(self.millis), self.needs_on(member));
        runtime.spawn(async move {
            let sent = connection.send_for(needs, Packed::One(&eval));
            let _ = tokio::time::timeout(bound, sent).await;
        });
    }

    /// Reads a node's reply as "ours" (with the fencing counter, 0 where not asked for), "taken",
    /// "missing" or a failure.
    ///
    /// One convention for every target: a plain SET answers OK or nil; an acquire script answers
    /// the fencing counter (0 or more) when it took the lock and -1 when another owner holds it;
    /// every other script answers 1 when it acted on our value, 0 when the key is gone and -1 when
    /// it holds another owner's value; an extend that repairs answers 2 where the key was gone and
    /// it set it again. A script that refuses for any other reason answers an error.
    fn interpret(&self, reply: Value) -> Result<u64, NodeErrorKind> {
        match (self.op, reply) {
            (Op::Acquire, Value::Okay) => Ok(0),
            (Op::Acquire, Value::Nil) => Err(NodeErrorKind::Taken),
            (Op::Acquire | Op::AcquireFenced, Value::Int(-1)) => Err(NodeErrorKind::Taken),
            (Op::Acquire | Op::AcquireFenced, Value::Int(counter)) if counter >= 0 => {
                Ok(counter.unsigned_abs())
            }
            (Op::Enter, Value::Array(reply)) => match reply.as_slice() {
                [Value::Okay, Value::Int(0)] => Ok(0),
                [Value::Okay, Value::Int(1)] => Err(NodeErrorKind::LineAhead),
                [Value::Nil, Value::Int(_)] => Err(NodeErrorKind::Taken),
                _ => match reply
                    .iter()
                    .find_map(|reply| reply.clone().extract_error().err())
                {
                    Some(error) => Err(NodeErrorKind::Redis(error)),
                    None => Err(NodeErrorKind::UnexpectedReply(describe(&Value::Array(
                        reply,
                    )))),
                },
            },
            (Op::Round { .. }, Value::Array(reply)) if reply.len() == 2 => {
                match (&reply[0], &reply[1]) {
                    (Value::Int(1), _) => Ok(0),
                    (Value::Int(0), Value::Int(ticket)) if *ticket > 0 => {
                        Err(NodeErrorKind::InLine {
                            ticket: ticket.unsigned_abs(),
                        })
                    }
                    _ => Err(NodeErrorKind::UnexpectedReply(describe(&Value::Array(
                        reply,
                    )))),
                }
            }
            (
                Op::Extend | Op::ExtendAndRepair | Op::Release { .. } | Op::Raise(_),
                Value::Int(1),
            ) => Ok(0),
            (
                Op::Extend | Op::ExtendAndRepair | Op::Release { .. } | Op::Raise(_),
                Value::Int(0),
            ) => Err(NodeErrorKind::Missing),
            (
                Op::Extend | Op::ExtendAndRepair | Op::Release { .. } | Op::Raise(_),
                Value::Int(-1),
            ) => Err(NodeErrorKind::Taken),
            (Op::ExtendAndRepair, Value::Int(2)) => Err(NodeErrorKind::Repaired),
            (_, Value::ServerError(error)) => Err(NodeErrorKind::Redis(error.into())),
            // An error nested in an aggregate (say, from a proxy) is still the node's error.
            (_, other) => match other.extract_error() {
                Err(error) => Err(NodeErrorKind::Redis(error)),
                Ok(other) => Err(NodeErrorKind::UnexpectedReply(describe(&other))),
            },
        }
    }
}

/// Whether every one of `names` is in one hash slot of a Redis Cluster: the slot of a key is CRC16
/// (XMODEM) of its hash tag where it has one, else of the whole key, modulo 16384, as the cluster
/// specification says and `CLUSTER KEYSLOT` answers. Names with one hash tag share a slot, but
/// so may others, by chance: the cluster accepts them in one script, and so does this.
fn one_slot(names: &[Arc<str>]) -> bool {
    // One name is one slot: nothing to hash on the way of a plain lock.
    match names.split_first() {
        Some((first, rest)) if !rest.is_empty() => {
            let first = key_slot(first);
            rest.iter().all(|name| key_slot(name) == first)
        }
        _ => true,
    }
}

/// A short description of an unexpected reply; long replies are cut so errors stay readable.
fn describe(reply: &Value) -> String {
    const LIMIT: usize = 120;
    let mut text = format!("{reply:?}");
    if text.len() > LIMIT {
        let mut end = LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// Sends `request` to one node and reads the reply. Unbounded: the fan-out that starts the call
/// races it against its deadline (see `fanout`). One async layer only, for the reason given at
/// `NodeConnection::send`; generic so that calls which borrow their connection and request and
/// calls which own them (to outlive their fan-out) need no wrapper around it.
pub(crate) async fn call(
    mut connection: impl BorrowMut<NodeConnection>,
    request: impl Borrow<Request>,
) -> Result<u64, NodeErrorKind> {
    let (connection, request) = (connection.borrow_mut(), request.borrow());
    let member = match connection.known_member() {
        Some(member) => member,
        // The first call on a connection not made yet: made first, so that the request goes out
        // in its member's form.
        None => connection.learn_member().await?,
    };
    let message = request.message(member).map_err(NodeErrorKind::clone)?;
    let (packed, entry, wrapping) = match message {
        Message::One(cmd) => (Packed::One(cmd), false, None),
        Message::Pipeline(pipeline) => (Packed::Pipeline(pipeline), true, None),
        Message::Wrapped { pipeline, wrapping } => {
            (Packed::Pipeline(pipeline), !wrapping.one, Some(*wrapping))
        }
    };
    let needs = request.needs_on(member);
    let replied = Replied::read(connection.send_for(needs, packed).await?, wrapping)?;
    let replied = match replied.reply {
        // EVAL also caches the script, so later EVALSHA calls to this node find it.
        Value::ServerError(error) if error.code() == "NOSCRIPT" => {
            match request.eval_cmd(request.op, member) {
                Some(eval) => send_acked(connection, needs, &eval, request.acks_for_ours()).await?,
                None => Replied {
                    reply: Value::ServerError(error),
                    ..replied
                },
            }
        }
        _ => replied,
    };
    // A plain entry (always a pipeline) decides what the node's state lets it decide, the script
    // the rest. Boxed: the rest is rare, and must not grow every call's future.
    let replied = if entry {
        match request.target.settle(request.op, replied.reply) {
            Settled::Reply(reply) => Replied { reply, ..replied },
            settled => Box::pin(settle(connection, request, member, settled, replied.wait)).await?,
        }
    } else {
        replied
    };
    let ours = request.interpret(replied.reply)?;
    if let Some(acks) = request.acks_for_ours() {
        acknowledged(replied.wait.unwrap_or(Value::Nil), acks)?;
    }
    Ok(ours)
}

/// A node's reply to a request, and `WAIT`'s reply where the request's write carried one.
struct Replied {
    reply: Value,
    wait: Option<Value>,
}

impl Replied {
    /// Reads the reply to a message: with `wrapping`, the array of the marks' replies (dropped,
    /// whatever they say: a mark that failed costs its waiter a notice, never its attempt), the
    /// write's (one command's, or an entry's several) and, where acked, `WAIT`'s.
    fn read(reply: Value, wrapping: Option<Wrapping>) -> Result<Replied, NodeErrorKind> {
        let Some(Wrapping { marks, one, acked }) = wrapping else {
            return Ok(Replied { reply, wait: None });
        };
        let mut replies = match reply {
            Value::Array(replies) if replies.len() > marks + usize::from(acked) => replies,
            // A pipeline refused as a whole: the refusal is the reply, with no WAIT to read.
            refused @ Value::ServerError(_) => {
                return Ok(Replied {
                    reply: refused,
                    wait: None,
                });
            }
            other => return Err(NodeErrorKind::UnexpectedReply(describe(&other))),
        };
        let wait = if acked { replies.pop() } else { None };
        replies.drain(..marks);
        let reply = match <[Value; 1]>::try_from(replies) {
            Ok([reply]) if one => reply,
            Ok(reply) => Value::Array(reply.into()),
            Err(replies) if one => {
                return Err(NodeErrorKind::UnexpectedReply(describe(&Value::Array(
                    replies,
                ))));
            }
            Err(replies) => Value::Array(replies),
        };
        Ok(Replied { reply, wait })
    }
}

/// `WAIT replicas timeout`: how many replicas acknowledged what the connection wrote so far.
fn wait_cmd(acks: ReplicaAcks) -> Cmd {
    let mut wait = redis::cmd("WAIT");
    wait.arg(acks.replicas).arg(whole_millis(acks.timeout));
    wait
}

/// Sends `cmd`, followed by its `WAIT` in one pipeline where `acks` asks for one.
async fn send_acked(
    connection: &mut NodeConnection,
    needs: &'static Needs,
    cmd: &Cmd,
    acks: Option<ReplicaAcks>,
) -> Result<Replied, NodeErrorKind> {
    let Some(acks) = acks else {
        let reply = connection.send_for(needs, Packed::One(cmd)).await?;
        return Ok(Replied { reply, wait: None });
    };
    let mut pipeline = Pipeline::with_capacity(2);
    pipeline
        .add_command(cmd.clone())
        .add_command(wait_cmd(acks));
    let reply = connection
        .send_for(needs, Packed::Pipeline(&pipeline))
        .await?;
    Replied::read(
        reply,
        Some(Wrapping {
            marks: 0,
            one: true,
            acked: true,
        }),
    )
}

/// What a plain entry left to do on a node (see `Target::settle`), on the connection the entry
/// went out on: the reply the node's state gives, as the operation's script's, and the `WAIT`
/// reply that follows the write that decided it (`wait`, the entry's, unless the script decides).
async fn settle(
    connection: &mut NodeConnection,
    request: &Request,
    member: Member,
    settled: Settled,
    wait: Option<Value>,
) -> Result<Replied, NodeErrorKind> {
    let needs = request.needs_on(member);
    match settled {
        Settled::Reply(reply) => Ok(Replied { reply, wait }),
        Settled::After(cmd, reply) => {
            let done = connection.send_for(needs, Packed::One(&cmd)).await?;
            done.extract_error().map_err(NodeErrorKind::Redis)?;
            Ok(Replied { reply, wait })
        }
        Settled::Release(reply) => {
            let (op, needs) = (request.release, request.needs_of(request.release, member));
            let (value, millis) = (&request.value, request.millis);
            let cmd = request
                .target
                .command(op, Delivery::ByDigest, member, value, millis);
            let done = match connection.send_for(needs, Packed::One(&cmd)).await? {
                Value::ServerError(error) if error.code() == "NOSCRIPT" => {
                    match request.eval_cmd(op, member) {
                        Some(eval) => connection.send_for(needs, Packed::One(&eval)).await?,
                        None => Value::ServerError(error),
                    }
                }
                done => done,
            };
            done.extract_error().map_err(NodeErrorKind::Redis)?;
            Ok(Replied { reply, wait })
        }
        Settled::Script => {
            let (value, millis) = (&request.value, request.millis);
            let target = &request.target;
            let cmd = target.command(request.op, request.delivery, member, value, millis);
            let acks = request.acks_for_ours();
            let replied = send_acked(connection, needs, &cmd, acks).await?;
            Ok(match replied.reply {
                Value::ServerError(error) if error.code() == "NOSCRIPT" => {
                    match request.eval_cmd(request.op, member) {
                        Some(eval) => send_acked(connection, needs, &eval, acks).await?,
                        None => Replied {
                            reply: Value::ServerError(error),
                            ..replied
                        },
                    }
                }
                _ => replied,
            })
        }
    }
}

/// Reads WAIT's reply: the member counts only if at least the replicas asked for acknowledged the
/// write. One that did not keeps the write, which a failed attempt releases with the rest.
fn acknowledged(reply: Value, acks: ReplicaAcks) -> Result<(), NodeErrorKind> {
    match reply {
        Value::Int(count) if count >= i64::from(acks.replicas) => Ok(()),
        Value::Int(count) => Err(NodeErrorKind::Unreplicated {
            acknowledged: count.max(0).unsigned_abs(),
            wanted: acks.replicas,
            within: acks.timeout,
        }),
        other => match other.extract_error() {
            Err(error) => Err(NodeErrorKind::Redis(error)),
            Ok(other) => Err(NodeErrorKind::UnexpectedReply(describe(&other))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::target::tests::OneName;

    fn request(op: Op) -> Request {
        let target: Arc<dyn Target> = Arc::new(OneName::new("name"));
        Request::new(op, &target, &Arc::from("value"), 8000)
    }

    #[test]
    fn a_write_counts_once_enough_replicas_acknowledged_it() {
        let acks = ReplicaAcks {
            replicas: 2,
            timeout: Duration::from_millis(200),
        };
        assert!(acknowledged(Value::Int(2), acks).is_ok());
        assert!(acknowledged(Value::Int(3), acks).is_ok());
        let short = acknowledged(Value::Int(1), acks).expect_err("one of two");
        assert_eq!(
            short.to_string(),
            "1 of 2 replicas acknowledged the write within 200ms (with_replica_acks)"
        );
        assert!(!short.is_refusal());
        let refused = redis::parse_redis_value(b"-NOPERM no WAIT for you\r\n").unwrap();
        assert!(
            acknowledged(refused, acks)
                .expect_err("refused")
                .is_refusal()
        );
        assert!(matches!(
            acknowledged(Value::Okay, acks),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        // Releases never wait; every lock write does.
        let release = Op::Release {
            notify: false,
            hand_off: false,
            keep_marks: false,
        };
        for (op, waits) in [
            (Op::Acquire, true),
            (Op::Extend, true),
            (Op::Raise(2), true),
            (release, false),
        ] {
            let request = request(op).with_replica_acks(Some(acks));
            assert_eq!(request.acks_for_ours().is_some(), waits, "{op:?}");
        }
    }

    /// Every lock write carries its `WAIT` in its own pipeline, after it, on both kinds of member,
    /// and its reply reads apart from the write's; a release carries none.
    #[test]
    fn a_write_and_its_wait_travel_together() {
        use crate::primitives::words;
        let acks = ReplicaAcks {
            replicas: 1,
            timeout: Duration::from_millis(150),
        };
        let target: Arc<dyn Target> = Arc::new(crate::primitives::mutex::MutexTarget::new(
            Arc::from("name"),
        ));
        let release = Op::Release {
            notify: false,
            hand_off: false,
            keep_marks: false,
        };
        for op in [
            Op::Acquire,
            Op::AcquireFenced,
            Op::Extend,
            Op::Raise(7),
            Op::Enter,
        ] {
            let request =
                Request::new(op, &target, &Arc::from("v"), 8000).with_replica_acks(Some(acks));
            for member in [Member::Standalone, Member::Cluster] {
                let Ok(Message::Wrapped { pipeline, wrapping }) = request.message(member) else {
                    panic!("{op:?} on {member:?}: no WAIT in the write's pipeline");
                };
                let sent: Vec<Vec<String>> = pipeline.cmd_iter().map(words).collect();
                assert_eq!(
                    sent.last().map(Vec::as_slice),
                    Some(&["WAIT".to_owned(), "1".to_owned(), "150".to_owned()][..]),
                    "{op:?}"
                );
                assert_eq!(!wrapping.one, op == Op::Enter, "{op:?}");
                // An entry's SET and EXISTS (in MULTI/EXEC on a cluster), one command else.
                let write = match (op, member) {
                    (Op::Enter, Member::Standalone) => 2,
                    (Op::Enter, Member::Cluster) => 4,
                    _ => 1,
                };
                assert_eq!(sent.len(), write + 1, "{op:?} {sent:?}");
            }
        }
        let quiet =
            Request::new(release, &target, &Arc::from("v"), 8000).with_replica_acks(Some(acks));
        for member in [Member::Standalone, Member::Cluster] {
            assert!(matches!(quiet.message(member), Ok(Message::One(_))));
        }
        let acked = |one| {
            Some(Wrapping {
                marks: 0,
                one,
                acked: true,
            })
        };
        let one = Replied::read(Value::Array(vec![Value::Okay, Value::Int(1)]), acked(true));
        let one = one.unwrap();
        assert_eq!((one.reply, one.wait), (Value::Okay, Some(Value::Int(1))));
        let entry = Replied::read(
            Value::Array(vec![Value::Okay, Value::Int(0), Value::Int(1)]),
            acked(false),
        )
        .unwrap();
        assert_eq!(entry.reply, Value::Array(vec![Value::Okay, Value::Int(0)]));
        assert_eq!(entry.wait, Some(Value::Int(1)));
        // An error for the whole pipeline stays the reply, with no WAIT to read.
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        let whole = Replied::read(refused.clone(), acked(true)).unwrap();
        assert_eq!((whole.reply, whole.wait), (refused, None));
    }

    /// A waiter's attempt sends the marks first, then its command, in one write; the marks'
    /// replies are dropped, whatever they say, and the command's reply is read as without them.
    #[test]
    fn marks_go_first_and_their_replies_are_dropped() {
        let marked = request(Op::Acquire).with_marks(Some(Duration::from_millis(1500)));
        let Ok(Message::Wrapped { pipeline, wrapping }) = marked.message(Member::Standalone) else {
            panic!("a marked request is a pipeline");
        };
        let sent: Vec<Vec<String>> = pipeline.cmd_iter().map(crate::primitives::words).collect();
        assert_eq!(
            sent,
            [
                vec!["PSETEX", "name:waiters", "1500", "1"],
                vec!["SET", "name", "value", "NX", "PX", "8000"]
            ]
        );
        let expected = Wrapping {
            marks: 1,
            one: true,
            acked: false,
        };
        assert_eq!(*wrapping, expected);
        let refused = redis::parse_redis_value(b"-NOPERM no PSETEX\r\n").unwrap();
        let reply = Value::Array(vec![refused, Value::Nil]);
        assert_eq!(
            Replied::read(reply, Some(expected)).unwrap().reply,
            Value::Nil
        );
        let entry = Value::Array(vec![Value::Okay, Value::Okay, Value::Int(0)]);
        let entry_wrapping = Wrapping {
            one: false,
            ..expected
        };
        assert_eq!(
            Replied::read(entry, Some(entry_wrapping)).unwrap().reply,
            Value::Array(vec![Value::Okay, Value::Int(0)])
        );
        assert!(Replied::read(Value::Okay, Some(expected)).is_err());
        // Marks and WAIT around one write: the marks' replies first, WAIT's last.
        let acks = ReplicaAcks {
            replicas: 1,
            timeout: Duration::from_millis(150),
        };
        let both = request(Op::Acquire)
            .with_marks(Some(Duration::from_millis(1500)))
            .with_replica_acks(Some(acks));
        let Ok(Message::Wrapped { pipeline, wrapping }) = both.message(Member::Standalone) else {
            panic!("a marked and acked request is a pipeline");
        };
        let sent: Vec<Vec<String>> = pipeline.cmd_iter().map(crate::primitives::words).collect();
        assert_eq!(sent.len(), 3);
        assert_eq!(
            (sent[0][0].as_str(), sent[2][0].as_str()),
            ("PSETEX", "WAIT")
        );
        let reply = Value::Array(vec![Value::Okay, Value::Okay, Value::Int(1)]);
        let read = Replied::read(reply, Some(*wrapping)).unwrap();
        assert_eq!((read.reply, read.wait), (Value::Okay, Some(Value::Int(1))));
        // Unmarked requests are left as they are.
        let plain = request(Op::Acquire).with_marks(None);
        assert!(matches!(
            plain.message(Member::Standalone),
            Ok(Message::One(_))
        ));
    }

    #[test]
    fn replies_map_to_outcomes() {
        let acquire = request(Op::Acquire);
        assert!(acquire.interpret(Value::Okay).is_ok());
        assert!(matches!(
            acquire.interpret(Value::Nil),
            Err(NodeErrorKind::Taken)
        ));
        for op in [
            Op::Extend,
            Op::Release {
                notify: false,
                hand_off: false,
                keep_marks: false,
            },
        ] {
            let r = request(op);
            assert!(r.interpret(Value::Int(1)).is_ok());
            assert!(matches!(
                r.interpret(Value::Int(0)),
                Err(NodeErrorKind::Missing)
            ));
            assert!(matches!(
                r.interpret(Value::Int(-1)),
                Err(NodeErrorKind::Taken)
            ));
            assert!(matches!(
                r.interpret(Value::Okay),
                Err(NodeErrorKind::UnexpectedReply(_))
            ));
        }
    }

    /// An extend asked to repair answers 2 where it set a gone key again: gone, for the verdict;
    /// a plain extend never answers it.
    #[test]
    fn a_repair_reads_as_its_own_answer() {
        let repair = request(Op::ExtendAndRepair);
        assert!(matches!(
            repair.interpret(Value::Int(2)),
            Err(NodeErrorKind::Repaired)
        ));
        assert!(repair.interpret(Value::Int(1)).is_ok());
        assert!(matches!(
            repair.interpret(Value::Int(0)),
            Err(NodeErrorKind::Missing)
        ));
        assert!(matches!(
            request(Op::Extend).interpret(Value::Int(2)),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        assert_eq!(repair.op_name(), "extend");
    }

    #[test]
    fn error_replies_are_redis_errors() {
        // The node's own errors arrive as values (see `NodeConnection::send`).
        let reply = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap();
        let nested = Value::Array(vec![Value::Int(1), reply.clone()]);
        for op in [
            Op::Acquire,
            Op::Extend,
            Op::Release {
                notify: true,
                hand_off: false,
                keep_marks: false,
            },
        ] {
            for reply in [&reply, &nested] {
                match request(op).interpret(reply.clone()) {
                    Err(NodeErrorKind::Redis(error)) => assert_eq!(error.code(), Some("WRONGTYPE")),
                    other => panic!("{op:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn an_entry_is_ours_only_where_nobody_stands_in_line() {
        let entry = request(Op::Enter);
        let reply = |set: Value, line: i64| Value::Array(vec![set, Value::Int(line)]);
        assert!(entry.interpret(reply(Value::Okay, 0)).is_ok());
        assert!(matches!(
            entry.interpret(reply(Value::Okay, 1)),
            Err(NodeErrorKind::LineAhead)
        ));
        for line in [0, 1] {
            assert!(matches!(
                entry.interpret(reply(Value::Nil, line)),
                Err(NodeErrorKind::Taken)
            ));
        }
        let refused = redis::parse_redis_value(b"-NOPERM no permissions\r\n").unwrap();
        match entry.interpret(Value::Array(vec![refused, Value::Int(0)])) {
            Err(NodeErrorKind::Redis(error)) => assert_eq!(error.code(), Some("NOPERM")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            entry.interpret(Value::Okay),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
    }

    /// A request builds what a standalone server receives at once, and what a cluster member
    /// receives only once one is sent to (never, where no member is a cluster); each publishes
    /// as its member takes notices, the NOSCRIPT fallback too.
    #[test]
    fn each_member_kind_gets_its_variant_and_a_cluster_only_on_need() {
        use crate::primitives::words;
        let notify = Op::Release {
            notify: true,
            hand_off: false,
            keep_marks: false,
        };
        let request = request(notify);
        let sent = |member| match request.message(member) {
            Ok(Message::One(cmd)) => words(cmd),
            _ => panic!("one command"),
        };
        assert_eq!(
            sent(Member::Standalone).last().map(String::as_str),
            Some("PUBLISH")
        );
        assert!(
            request.cluster.get().is_none(),
            "no cluster variant until needed"
        );
        assert_eq!(
            sent(Member::Cluster).last().map(String::as_str),
            Some("SPUBLISH")
        );
        assert!(request.cluster.get().is_some());
        for (member, verb) in [
            (Member::Standalone, "PUBLISH"),
            (Member::Cluster, "SPUBLISH"),
        ] {
            let eval = words(&request.eval_cmd(request.op, member).expect("a script"));
            assert_eq!(eval[0], "EVAL");
            assert_eq!(eval.last().map(String::as_str), Some(verb));
        }
    }

    /// `SPUBLISH` came with Redis 7.0: a cluster member older than that is refused what publishes
    /// (by the version gate, before anything is sent), and nothing else.
    #[test]
    fn notices_on_a_cluster_need_redis_7() {
        let release = |notify, hand_off| {
            request(Op::Release {
                notify,
                hand_off,
                keep_marks: false,
            })
        };
        for publishes in [
            release(true, false),
            release(true, true),
            request(Op::Round {
                ticket: 1,
                client: 7,
            }),
        ] {
            assert_eq!(publishes.needs_on(Member::Cluster), &SHARDED_NOTICES);
            assert_ne!(publishes.needs_on(Member::Standalone), &SHARDED_NOTICES);
        }
        for quiet in [
            release(false, false),
            request(Op::Extend),
            request(Op::Acquire),
        ] {
            assert_ne!(quiet.needs_on(Member::Cluster), &SHARDED_NOTICES);
        }
        let old = crate::nodes::version::ServerVersion::Redis(Version::new(6, 2, 14));
        let refusal = old.allows(&SHARDED_NOTICES).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "wake-up on release and fair waiting on a Redis Cluster need Redis 7.0 or later; \
             this node runs Redis 6.2.14"
        );
    }

    /// Names in different slots are refused by a cluster member before anything is sent (see
    /// `cluster_refusal`), a refusal that names the hash-tag rule; names in one slot, and any
    /// names on a standalone server, go as one script.
    #[test]
    fn a_cluster_member_refuses_names_across_slots() {
        let build = |names: &[&str]| {
            let target: Arc<dyn Target> = Arc::new(OneName::several(names));
            Request::new(Op::Extend, &target, &Arc::from("v"), 8000)
        };
        let across = build(&["a", "b"]);
        assert_ne!(
            redmutex_testenv::key_slot("a"),
            redmutex_testenv::key_slot("b")
        );
        assert!(across.message(Member::Standalone).is_ok());
        match across.message(Member::Cluster) {
            Err(refusal @ NodeErrorKind::CrossSlot) => {
                assert!(refusal.is_refusal());
                assert!(refusal.to_string().contains("hash tag"), "{refusal}");
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("sent across slots"),
        }
        assert!(
            across.eval_cmd(across.op, Member::Cluster).is_none(),
            "no fallback either"
        );
        assert!(across.eval_cmd(across.op, Member::Standalone).is_some());
        for names in [&["{o}:a", "{o}:b", "o"][..], &["a"], &["a", "a"]] {
            assert!(build(names).message(Member::Cluster).is_ok(), "{names:?}");
        }
    }

    /// The slots the engine computes are the cluster's (`redmutex_testenv::key_slot` follows the
    /// specification, and its own tests check it against `CLUSTER KEYSLOT`).
    #[test]
    fn slots_are_the_cluster_specification() {
        let names: Vec<String> = (0..2000)
            .map(|i| match i % 4 {
                0 => format!("order:{i}"),
                1 => format!("{{user:{}}}:cart:{i}", i % 7),
                2 => format!("x{{}}y{{{i}}}"),
                _ => format!("é}}{{{i}"),
            })
            .collect();
        let pair = |a: &str, b: &str| one_slot(&[Arc::from(a), Arc::from(b)]);
        // Names of different hash tags that share a slot by chance are one slot too: with 2000
        // names in 16384 slots, there are a hundred such pairs or so.
        let mut first_in_slot = std::collections::HashMap::new();
        let mut shared = 0;
        for name in &names {
            let slot = redmutex_testenv::key_slot(name);
            let first: &String = first_in_slot.entry(slot).or_insert(name);
            assert!(pair(first, name), "{first} {name}");
            shared += usize::from(first != name);
            let other = &names[0];
            assert_eq!(
                pair(other, name),
                slot == redmutex_testenv::key_slot(other),
                "{name}"
            );
        }
        assert!(shared > 10, "{shared}");
        let tagged: Vec<Arc<str>> = (0..50).map(|i| format!("{{user:1}}:{i}").into()).collect();
        assert!(one_slot(&tagged));
    }

    #[test]
    fn long_unexpected_replies_are_cut() {
        let reply = Value::BulkString(vec![b'x'; 10_000]);
        assert!(describe(&reply).len() <= 123);
    }
}
