//! A Redis Cluster as one member of the quorum (the `cluster` feature): the redis crate's cluster
//! client, and what redmutex asks of the whole cluster when it connects.
//!
//! The member holds a key where the master of the key's slot holds it, so every request goes
//! where the crate routes it: by its first key (a script's keys share one slot, see `hash_tag`).
//! The set-up asks every master, at once: its version (`INFO server`; the member's version is
//! the oldest master's, since a request may land on any of them) and the scripts (`SCRIPT LOAD`,
//! on replicas too, so that a promoted replica has them; the NOSCRIPT fallback covers a node
//! that joins or restarts later).

use futures::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo, SingleNodeRoutingInfo,
};
use redis::{Cmd, RedisError, RedisResult, Value};

use super::reconnect::{CONNECT_TIMEOUT, Link, Live};
use super::script::Script;
use super::version::{ServerVersion, info_run_id, info_server, script_version};

/// The cluster client of the cluster that `node`'s server belongs to, from the same connection
/// info: its credentials, TLS mode and protocol; the crate's response timeout is off, as for
/// every connection of redmutex's own (see [`config`]).
///
/// A `redis::Client` built with certificates of its own (a private CA, a client certificate)
/// cannot pass them on: the cluster client takes them only from `ClusterClientBuilder::certs`.
/// Such a member is refused with an error that says so, rather than connecting without them.
pub(crate) fn client_of(node: &redis::Client) -> RedisResult<ClusterClient> {
    ClusterClientBuilder::new([info_of(node)?]).build()
}

/// As [`client_of`], for a release listener: RESP3, whose pushes (the sharded notices, and the
/// `sunsubscribe` of a slot that moved) go to `pushes`.
pub(crate) fn listening_client_of(
    node: &redis::Client,
    pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> RedisResult<ClusterClient> {
    ClusterClientBuilder::new([info_of(node)?])
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(pushes)
        .build()
}

/// The connection info of `node`, unless it holds TLS certificates (see [`client_of`]).
fn info_of(node: &redis::Client) -> RedisResult<redis::ConnectionInfo> {
    let info = node.get_connection_info().clone();
    if let redis::ConnectionAddr::TcpTls {
        tls_params: Some(_),
        ..
    } = info.addr()
    {
        return Err(RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a Redis Cluster node reached with TLS certificates of the client's own",
            "the cluster client cannot take them from a redis::Client: pass a \
             redis::cluster::ClusterClient built with them (ClusterClientBuilder::certs) to \
             Redlock::from_clients"
                .to_owned(),
        )));
    }
    Ok(info)
}

/// How redmutex makes every connection of a cluster client: each node's connection is given up
/// after [`CONNECT_TIMEOUT`], and no response timeout (redmutex bounds each call by its node
/// timeout; a timeout of the crate's would also cut calls that a failover only delays).
pub(crate) fn config() -> ClusterConfig {
    ClusterConfig::new().set_connection_timeout(CONNECT_TIMEOUT)
}

/// Connects to the cluster, learns its version and loads the scripts (see the module docs).
pub(super) async fn open(client: &ClusterClient, scripts: &[Script]) -> RedisResult<Live> {
    let connection = client.get_async_connection_with_config(config()).await?;
    let mut asking = connection.clone();
    let facts = facts(&mut asking);
    let loads = load_scripts(&connection, scripts);
    let (facts, ()) = futures::join!(facts, loads);
    let (version, run_ids) = facts?;
    tracing::debug!(%version, "Redis Cluster connection made (the version of its oldest master)");
    Ok(Live::new(Link::Cluster(connection), version, run_ids))
}

/// Loads `scripts` on every node of the cluster; best effort, as on a standalone node: a request
/// sent by digest to a node without them falls back to the script's text.
pub(crate) async fn load_scripts(connection: &ClusterConnection, scripts: &[Script]) {
    let everywhere = RoutingInfo::MultiNode((
        MultipleNodeRoutingInfo::AllNodes,
        Some(ResponsePolicy::AllSucceeded),
    ));
    join_all(scripts.iter().map(|script| {
        let mut connection = connection.clone();
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script.text());
        let routing = everywhere.clone();
        async move { connection.route_command(load, routing).await }
    }))
    .await;
}

/// The version of the cluster's oldest master (see [`ServerVersion::lowest`]): `INFO server` on
/// every master, and a script on every master where one refused it.
pub(crate) async fn version(connection: &mut ClusterConnection) -> RedisResult<ServerVersion> {
    Ok(facts(connection).await?.0)
}

/// [`version`], and the `run_id` of each master whose `INFO` told it (see `servers`).
async fn facts(connection: &mut ClusterConnection) -> RedisResult<(ServerVersion, Vec<Box<str>>)> {
    let mut lowest = ServerVersion::Unknown;
    let mut refused = false;
    let mut run_ids = Vec::new();
    for (_, reply) in each_master(connection, info_server()).await? {
        run_ids.extend(info_run_id(&reply));
        match ServerVersion::from_info_reply(reply)? {
            Some(version) => lowest = lowest.lowest(version),
            None => refused = true,
        }
    }
    if refused {
        for (_, reply) in each_master(connection, script_version()).await? {
            lowest = lowest.lowest(ServerVersion::from_script_reply(reply)?);
        }
    }
    Ok((lowest, run_ids))
}

/// Sends `cmd` to every master at once: each one's address (`host:port`) and reply, error
/// replies included.
pub(crate) async fn each_master(
    connection: &mut ClusterConnection,
    cmd: Cmd,
) -> RedisResult<Vec<(String, Value)>> {
    let masters = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    match connection.route_command(cmd, masters).await? {
        Value::Map(replies) => Ok(replies
            .into_iter()
            .map(|(address, reply)| (text(&address).unwrap_or_default(), reply))
            .collect()),
        other => Err(unexpected("a reply per master", &other)),
    }
}

/// `PING` on every master: what the probe of a suspect cluster connection sends (see `health`).
pub(super) async fn ping(mut connection: ClusterConnection) -> RedisResult<Value> {
    let masters = RoutingInfo::MultiNode((
        MultipleNodeRoutingInfo::AllMasters,
        Some(ResponsePolicy::AllSucceeded),
    ));
    connection.route_command(redis::cmd("PING"), masters).await
}

/// One master of a cluster, as `CLUSTER SLOTS` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Master {
    /// `host:port`, as the cluster announces it.
    pub(crate) address: String,
    /// Its node ID, unique to the node for its life.
    pub(crate) id: String,
    /// The ranges of slots it serves, inclusive.
    pub(crate) slots: Vec<(u16, u16)>,
}

impl Master {
    /// Whether it serves `slot`.
    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

/// The masters that serve slots, ordered by their first slot (`CLUSTER SLOTS` of any node).
pub(crate) async fn masters(connection: &mut ClusterConnection) -> RedisResult<Vec<Master>> {
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    let reply = redis::aio::ConnectionLike::req_packed_command(connection, &slots).await?;
    parse_slots(&reply).ok_or_else(|| unexpected("CLUSTER SLOTS", &reply))
}

/// Sends `cmd` to the node at `address` (`host:port`, as [`Master::address`] has it).
pub(crate) async fn send_to(
    connection: &mut ClusterConnection,
    address: &str,
    cmd: Cmd,
) -> RedisResult<Value> {
    let (host, port) = address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse().ok()?)))
        .ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Client,
                "not a node address",
                address.to_owned(),
            ))
        })?;
    let node = SingleNodeRoutingInfo::ByAddress {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    };
    connection
        .route_command(cmd, RoutingInfo::SingleNode(node))
        .await
}

/// `CLUSTER SLOTS`' ranges, grouped by master: `[first, last, [host, port, id, ...], replicas...]`.
fn parse_slots(reply: &Value) -> Option<Vec<Master>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut masters: Vec<Master> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let slot = |value: &Value| match value {
            Value::Int(slot) => u16::try_from(*slot).ok(),
            _ => None,
        };
        let (first, last) = (slot(fields.first()?)?, slot(fields.get(1)?)?);
        let Value::Array(node) = fields.get(2)? else {
            return None;
        };
        let host = text(node.first()?)?;
        let Value::Int(port) = node.get(1)? else {
            return None;
        };
        let id = node.get(2).and_then(text).unwrap_or_default();
        let address = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        match masters.iter_mut().find(|master| master.address == address) {
            Some(master) => master.slots.push((first, last)),
            None => masters.push(Master {
                address,
                id,
                slots: vec![(first, last)],
            }),
        }
    }
    masters.sort_by_key(|master| master.slots.iter().map(|&(first, _)| first).min());
    Some(masters)
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn unexpected(what: &'static str, reply: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
        format!("{reply:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn range(first: i64, last: i64, host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk(host), Value::Int(port), bulk(id)]),
            Value::Array(vec![bulk(host), Value::Int(port + 3), bulk("replica")]),
        ])
    }

    #[test]
    fn cluster_slots_are_grouped_by_master() {
        let reply = Value::Array(vec![
            range(5461, 10922, "10.0.0.2", 7001, "b"),
            range(0, 5460, "10.0.0.1", 7000, "a"),
            range(10923, 16383, "::1", 7002, "c"),
            range(16000, 16000, "10.0.0.1", 7000, "a"),
        ]);
        let masters = parse_slots(&reply).unwrap();
        let addresses: Vec<&str> = masters.iter().map(|m| m.address.as_str()).collect();
        assert_eq!(addresses, ["10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"]);
        assert_eq!(masters[0].slots, [(0, 5460), (16000, 16000)]);
        assert_eq!(masters[0].id, "a");
        assert!(masters[0].serves(16000) && !masters[0].serves(5461));
        assert_eq!(parse_slots(&bulk("nope")), None);
    }
}
