//! Asking every node something outside the lock protocol (inspection, forced release, node checks):
//! one command or script per node, all nodes at once, each bounded by its own timeout.
//!
//! The lock operations go through `fanout`, which is built for their tally; these operations
//! need each node's raw reply instead.

use std::time::Duration;

use futures::future::join_all;
use redis::{Cmd, Value};

use crate::error::NodeErrorKind;
use crate::nodes::Node;
use crate::nodes::connection::NodeConnection;
use crate::nodes::reconnect::node_error;
use crate::nodes::script::Script;

/// One node's reply, or why there is none.
pub(crate) type Answer<T> = Result<T, NodeErrorKind>;

/// Runs `ask` on every node at once and returns the answers in node order; an answer not in within
/// `timeout` is [`NodeErrorKind::Timeout`].
pub(crate) async fn each_node<T, F, Fut>(
    nodes: &[Node],
    timeout: Duration,
    ask: F,
) -> Vec<Answer<T>>
where
    F: Fn(usize, NodeConnection) -> Fut,
    Fut: Future<Output = Answer<T>>,
{
    join_all(
        nodes
            .iter()
            .enumerate()
            .map(|(index, node)| bounded(timeout, ask(index, node.connection.clone()))),
    )
    .await
}

/// `question`'s answer, or [`NodeErrorKind::Timeout`] if it is not in within `timeout`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    question: impl Future<Output = Answer<T>>,
) -> Answer<T> {
    tokio::time::timeout(timeout, question)
        .await
        .unwrap_or(Err(NodeErrorKind::Timeout(timeout)))
}

/// Sends one command; an error reply is a [`NodeErrorKind::Redis`].
pub(crate) async fn send(connection: &mut NodeConnection, cmd: &Cmd) -> Answer<Value> {
    match connection.send(cmd).await {
        Ok(Value::ServerError(error)) => Err(NodeErrorKind::Redis(error.into())),
        Ok(reply) => reply.extract_error().map_err(NodeErrorKind::Redis),
        Err(error) => Err(node_error(error)),
    }
}

/// Runs a script by its digest, and by its text when the node does not have it cached.
pub(crate) async fn eval(
    connection: &mut NodeConnection,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> Answer<Value> {
    let build = |verb: &str, body: &str| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(body).arg(keys.len()).arg(keys).arg(args);
        cmd
    };
    match send(connection, &build("EVALSHA", script.digest())).await {
        Err(NodeErrorKind::Redis(error)) if error.code() == Some("NOSCRIPT") => {
            send(connection, &build("EVAL", script.text())).await
        }
        other => other,
    }
}

/// Whether `target` is in use on the node (see `Target::probe`): `None` if the node did not say
/// so within `timeout`.
pub(crate) async fn in_use(
    mut connection: NodeConnection,
    (cmd, from): (Cmd, i64),
    timeout: Duration,
) -> Option<bool> {
    match tokio::time::timeout(timeout, connection.send(&cmd)).await {
        Ok(Ok(Value::Int(count))) => Some(count >= from),
        _ => None,
    }
}

/// An unexpected reply, described briefly: long replies are cut so errors stay readable.
pub(crate) fn unexpected(reply: &Value) -> NodeErrorKind {
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
    NodeErrorKind::UnexpectedReply(text)
}
