//! What a call sends on a member's connection, and what it learns from the reply: a failed
//! connection to make again, or a redirection that shows a Redis Cluster.

use std::sync::Arc;

use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};

use super::slot::{Current, abandoned};
use super::{Link, Live, Reconnecting, node_error};
use crate::error::NodeErrorKind;
use crate::nodes::health::nanos_now;
use crate::nodes::version::{Needs, ServerVersion};

/// What a call sends: one command, or several pipelined.
#[derive(Clone, Copy)]
pub(crate) enum Packed<'a> {
    One(&'a Cmd),
    Pipeline(&'a Pipeline),
}

impl Reconnecting {
    /// Sends one command, connecting first if needed. Unbounded, like the redis crate's own
    /// calls: the fan-out races it against the node timeout. Ungated: the operator's questions
    /// (`probe`) go to every member, one that shares another's server too (see `servers`), so
    /// that `doctor` can name it.
    ///
    /// Cancel safety: dropping the call before the connection is ready never sends the command
    /// (the attempt to connect goes on in its own task); dropping it after hands the command to
    /// the connection or not, as for a `MultiplexedConnection`.
    pub(crate) async fn send(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        self.sending(Packed::One(cmd), |_| Ok(()), |error| error)
            .await
    }

    /// Sends one command or a pipeline (whose replies come as an array) of a primitive that
    /// `needs` a version, as [`send`](Self::send) does, unless the connection's node runs one too
    /// old (see `version`), or another member already reaches its server (see `servers`): then
    /// nothing is sent.
    pub(crate) async fn send_for(
        self: &Arc<Self>,
        needs: &'static Needs,
        packed: Packed<'_>,
    ) -> Result<Value, NodeErrorKind> {
        let gate = |live: &Live| match &live.same_as {
            Some(same) => Err(same.error()),
            None => live.version.allows(needs),
        };
        self.sending(packed, gate, node_error).await
    }

    /// The version of the node, as its current connection learned it (connecting first if
    /// needed).
    pub(crate) async fn version(self: &Arc<Self>) -> RedisResult<ServerVersion> {
        Ok(self.live().await?.version)
    }

    /// The connection to the whole cluster if the current connection reaches one (connecting
    /// first if needed).
    #[cfg(feature = "cluster")]
    pub(crate) async fn cluster(
        self: &Arc<Self>,
    ) -> RedisResult<Option<redis::cluster_async::ClusterConnection>> {
        Ok(match self.live().await?.link {
            Link::Cluster(connection) => Some(connection),
            Link::Node(_) => None,
        })
    }

    async fn live(self: &Arc<Self>) -> RedisResult<Live> {
        match self.current() {
            Current::Ready(live) => Ok(live),
            Current::Pending(pending) => pending.await.unwrap_or_else(|_| Err(abandoned())),
            Current::Failed(error) => Err(error),
        }
    }

    /// Sends `packed` on the current connection if `gate` lets it through (the node's version,
    /// a member that is another's server); one body for every call, so that none pays an async
    /// layer more.
    async fn sending<E>(
        self: &Arc<Self>,
        packed: Packed<'_>,
        gate: impl FnOnce(&Live) -> Result<(), E>,
        error: fn(RedisError) -> E,
    ) -> Result<Value, E> {
        let mut live = match self.current() {
            Current::Ready(live) => live,
            Current::Pending(pending) => pending
                .await
                .unwrap_or_else(|_| Err(abandoned()))
                .map_err(error)?,
            Current::Failed(failed) => return Err(error(failed)),
        };
        gate(&live)?;
        if live.health.sent(nanos_now) {
            self.probe(&live);
        }
        let reply = match (&mut live.link, packed) {
            (Link::Node(connection), Packed::One(cmd)) => connection.send_packed_command(cmd).await,
            (Link::Node(connection), Packed::Pipeline(pipeline)) => connection
                .send_packed_commands(pipeline, 0, pipeline.len())
                .await
                .map(Value::Array),
            #[cfg(feature = "cluster")]
            (Link::Cluster(connection), packed) => cluster_send(connection, packed).await,
        };
        match &reply {
            Err(failed) if failed.is_unrecoverable_error() => self.lost(&live, failed),
            Ok(reply) if matches!(live.link, Link::Node(_)) && redirected(reply) => {
                return Err(error(self.moved(&live)));
            }
            _ => live.health.answered(),
        }
        reply.map_err(error)
    }

    /// Starts connecting if there is no connection and no backoff in force; for the warm-up.
    pub(crate) async fn connect(self: &Arc<Self>) -> RedisResult<()> {
        match self.current() {
            Current::Ready(_) => Ok(()),
            Current::Pending(pending) => {
                pending.await.unwrap_or_else(|_| Err(abandoned())).map(drop)
            }
            Current::Failed(error) => Err(error),
        }
    }
}

/// Sends on a cluster connection: one boxed future whichever `packed` is (the crate boxes its
/// calls anyway), so that the cluster adds one small state to the future of every call, a
/// standalone member's too.
#[cfg(feature = "cluster")]
#[inline(never)]
fn cluster_send<'a>(
    connection: &'a mut redis::cluster_async::ClusterConnection,
    packed: Packed<'a>,
) -> redis::RedisFuture<'a, Value> {
    use redis::aio::ConnectionLike;
    match packed {
        Packed::One(cmd) => connection.req_packed_command(cmd),
        Packed::Pipeline(pipeline) => Box::pin(async move {
            connection
                .req_packed_commands(pipeline, 0, pipeline.len())
                .await
                .map(Value::Array)
        }),
    }
}

/// Whether a standalone connection's reply is a cluster's redirection, alone or in a pipeline's
/// replies.
fn redirected(reply: &Value) -> bool {
    let redirection = |value: &Value| matches!(value, Value::ServerError(error) if matches!(error.code(), "MOVED" | "ASK"));
    match reply {
        Value::Array(replies) => replies.iter().any(redirection),
        reply => redirection(reply),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use redis::Client;

    use super::*;
    use crate::nodes::Member;
    use crate::nodes::member::MemberClient;

    /// A user who may not run `INFO`: the cluster shows in the first `MOVED`, after which the
    /// connection is made again as the cluster's (or, without the feature, every call is refused,
    /// never sent on to follow redirections).
    #[tokio::test]
    async fn a_moved_reply_shows_a_cluster_that_info_did_not() {
        let cluster = redmutex_testenv::RedisCluster::start(3, 0);
        for node in cluster.nodes() {
            node.acl_setuser("app", &["on", ">pw", "~*", "&*", "+@all", "-info"]);
        }
        let seed = cluster.nodes()[0].port();
        let url = format!("redis://app:pw@127.0.0.1:{seed}/");
        let this = Arc::new(Reconnecting::new(
            MemberClient::Node(Client::open(url).expect("a URL")),
            &[],
            None,
        ));
        let other = cluster.masters().into_iter().find(|m| m.port() != seed);
        let elsewhere = cluster.key_on(other.expect("another master"), "moved:");
        let mut set = Cmd::new();
        set.arg("SET").arg(&elsewhere).arg("v");
        let first = this.send(&set).await;
        assert_eq!(
            this.member(),
            Member::Standalone,
            "INFO is refused: {first:?}"
        );
        let Err(first) = first else {
            panic!("a MOVED is the call's error, never a success");
        };
        assert!(first.to_string().contains("Redis Cluster node"), "{first}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let next = this.send(&set).await;
            #[cfg(feature = "cluster")]
            if let Ok(reply) = &next {
                assert_eq!(*reply, Value::Okay);
                assert_eq!(this.member(), Member::Cluster);
                assert_eq!(cluster.get(&elsewhere).as_deref(), Some("v"));
                return;
            }
            #[cfg(not(feature = "cluster"))]
            if let Err(error) = &next
                && matches!(node_error(error.clone()), NodeErrorKind::ClusterFeatureOff)
            {
                assert!(!cluster.exists(&elsewhere));
                return;
            }
            assert!(Instant::now() < deadline, "still {next:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
