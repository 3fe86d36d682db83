//! Making a member's connection: the redis crate's set-up, then one round trip that checks the
//! node serves it, learns its version and whether it runs Redis Cluster, and loads the scripts.

use std::time::Duration;

use futures::future::join_all;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, Value};

#[cfg(not(feature = "cluster"))]
use super::cluster_node_error;
use super::{Link, Live, address_of};
use crate::nodes::member::MemberClient;
use crate::nodes::script::Script;
use crate::nodes::version::{
    ServerVersion, cluster_enabled, info_cluster, info_run_id, info_server, script_version,
};

/// Bound on making a connection: TCP (and TLS) handshake, the redis crate's set-up (AUTH, SELECT,
/// CLIENT SETINFO), our PING and the question of the node's version. Calls never wait this long
/// (their node timeout bounds them); it only decides when an attempt that hangs is given up, so
/// that a later call can start another.
pub(in crate::nodes) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The same bound on making a connection to a whole cluster: the seed node's, the cluster's map
/// of slots, a connection to each of its nodes (each bounded by [`CONNECT_TIMEOUT`], all at
/// once), its masters' versions and the scripts. A node that does not answer (a host gone, not
/// yet failed over) costs its own bound, not the cluster's.
pub(crate) const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes a connection and checks that the node serves it: the redis crate's set-up (AUTH and
/// SELECT as the client says), then one round trip that carries a PING, asks the node's version
/// (`INFO server`; a second round trip asks a script where `INFO` is refused, see `version`) and
/// whether it runs Redis Cluster (`INFO cluster`), and loads the scripts. A cluster node's
/// connection is then made again as the whole cluster's (see `cluster`), as is one after a
/// `MOVED` reply (`moved`). Bounded by [`CONNECT_TIMEOUT`], and [`CLUSTER_CONNECT_TIMEOUT`] for a
/// cluster. No timeouts of the driver's own on calls: the node timeout of each call is the only
/// bound (see [`NodeConnection`](crate::NodeConnection)).
pub(in crate::nodes) async fn open(
    client: &MemberClient,
    scripts: &[Script],
    moved: bool,
) -> RedisResult<Live> {
    // Without the `cluster` feature a node's client is the only kind.
    #[cfg_attr(
        not(feature = "cluster"),
        allow(clippy::infallible_destructuring_match)
    )]
    let client = match client {
        MemberClient::Node(client) => client,
        #[cfg(feature = "cluster")]
        MemberClient::Cluster(cluster) => {
            let opened = crate::nodes::cluster::open(cluster, scripts);
            return bounded(CLUSTER_CONNECT_TIMEOUT, opened).await;
        }
    };
    if !moved {
        match bounded(CONNECT_TIMEOUT, open_node(client, scripts)).await? {
            Opened::Node(live) => return Ok(live),
            Opened::Cluster => {}
        }
    }
    bounded(CLUSTER_CONNECT_TIMEOUT, open_cluster_of(client, scripts)).await
}

/// `attempt`'s outcome, or a timeout's error after `limit`.
async fn bounded<T>(
    limit: Duration,
    attempt: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or_else(|_| Err(timed_out(limit)))
}

/// What a connection to a node found.
enum Opened {
    Node(Live),
    /// The node runs Redis Cluster: the connection is to be made as the cluster's.
    Cluster,
}

/// The connection to a node as a standalone server, unless it runs Redis Cluster.
async fn open_node(client: &Client, scripts: &[Script]) -> RedisResult<Opened> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    let connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let ping = redis::cmd("PING");
    let loads: Vec<Cmd> = scripts
        .iter()
        .map(|script| redis::cmd("SCRIPT").arg("LOAD").arg(script.text()).clone())
        .collect();
    let send = |cmd: &Cmd| {
        let mut connection = connection.clone();
        let cmd = cmd.clone();
        async move { connection.send_packed_command(&cmd).await }
    };
    let (info, cluster) = (info_server(), info_cluster());
    // Issued in this order on the one connection: the PING first, then INFO and the loads.
    let (pong, info, cluster, _) = futures::join!(
        send(&ping),
        send(&info),
        send(&cluster),
        join_all(loads.iter().map(send))
    );
    check_pong(pong?)?;
    if cluster_enabled(&cluster?) {
        return Ok(Opened::Cluster);
    }
    let info = info?;
    let run_ids = info_run_id(&info).into_iter().collect();
    let version = match ServerVersion::from_info_reply(info)? {
        Some(version) => version,
        None => ServerVersion::from_script_reply(send(&script_version()).await?)?,
    };
    tracing::debug!(node = %address_of(client), %version, "node version");
    Ok(Opened::Node(Live::new(
        Link::Node(connection),
        version,
        run_ids,
    )))
}

/// The connection to the whole cluster that `client`'s node belongs to; without the `cluster`
/// feature, the error that names it.
async fn open_cluster_of(client: &Client, scripts: &[Script]) -> RedisResult<Live> {
    #[cfg(feature = "cluster")]
    {
        let cluster = crate::nodes::cluster::client_of(client)?;
        crate::nodes::cluster::open(&cluster, scripts).await
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (client, scripts);
        Err(cluster_node_error())
    }
}

/// Whether a PING's reply shows a connection the node serves. A node that refuses the PING for
/// lack of permission still serves the connection; any other error (`NOAUTH`, `LOADING`, `ERR max
/// number of clients reached`) means it does not, for now.
fn check_pong(reply: Value) -> RedisResult<()> {
    match reply {
        Value::ServerError(error) if error.code() != "NOPERM" => Err(error.into()),
        _ => Ok(()),
    }
}

fn timed_out(after: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("connecting timed out after {after:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(not(feature = "cluster"))]
    use crate::error::NodeErrorKind;
    #[cfg(feature = "cluster")]
    use crate::nodes::Member;
    #[cfg(not(feature = "cluster"))]
    use crate::nodes::reconnect::node_error;

    #[test]
    fn a_pong_or_a_permission_error_is_a_served_connection() {
        let error = |text: &[u8]| redis::parse_redis_value(text).unwrap();
        assert!(check_pong(Value::SimpleString("PONG".into())).is_ok());
        assert!(check_pong(error(b"-NOPERM no permissions to run 'ping'\r\n")).is_ok());
        for refusal in [
            &b"-ERR max number of clients reached\r\n"[..],
            b"-NOAUTH Authentication required.\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
        ] {
            assert!(check_pong(error(refusal)).is_err());
        }
    }

    /// A URL of a cluster node: the whole cluster with the `cluster` feature, else an error that
    /// names it. `cargo test --lib --no-default-features -- nodes::reconnect` runs the other side.
    #[tokio::test]
    async fn a_cluster_node_stands_for_its_cluster_or_names_the_feature() {
        let cluster = redmutex_testenv::RedisCluster::start(1, 0);
        let client = MemberClient::Node(Client::open(cluster.seed_url()).expect("a URL"));
        let opened = open(&client, &[], false).await;
        #[cfg(feature = "cluster")]
        {
            let live = opened.unwrap_or_else(|error| panic!("the cluster connects: {error}"));
            assert_eq!(live.member(), Member::Cluster);
            assert!(
                matches!(live.version, ServerVersion::Redis(_)),
                "{}",
                live.version
            );
        }
        #[cfg(not(feature = "cluster"))]
        {
            let Err(error) = opened else {
                panic!("a cluster node is refused without the feature");
            };
            let error = node_error(error);
            assert!(matches!(error, NodeErrorKind::ClusterFeatureOff), "{error}");
            assert!(error.to_string().contains("`cluster` feature"), "{error}");
            assert!(error.is_refusal());
        }
    }
}
