//! What [`Redlock::from_clients`](crate::Redlock::from_clients) takes for each member of the
//! quorum: a client of one node, or a caller's cluster client.

use std::fmt;

use super::reconnect::address_of;

/// A client of the node at `url` whose connections send each request at once (`TCP_NODELAY`).
///
/// Every lock of a `Redlock` shares one connection per node, so requests of several locks go out
/// back to back. Under Nagle's algorithm (the redis crate's default) a request written while an
/// earlier one is unacknowledged waits for that acknowledgement, which a node in another zone sends
/// with its reply: the request pays that node's round trip twice.
pub(crate) fn node_client(url: &str) -> redis::RedisResult<redis::Client> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    redis::Client::open(info.set_tcp_settings(tcp))
}

/// Splits a `connect` entry into its seed URLs: `redis://a:7000|redis://b:7000` names one Redis
/// Cluster by several of its nodes. A `|` counts only before a scheme (`redis://`, `rediss://`,
/// `valkey://`, `valkeys://`), so a password that holds one is not split.
pub(crate) fn seeds(entry: &str) -> Vec<&str> {
    let mut seeds = Vec::new();
    let mut start = 0;
    for (at, _) in entry.match_indices('|') {
        let after = entry[at + 1..].to_ascii_lowercase();
        let scheme = ["redis://", "rediss://", "valkey://", "valkeys://"];
        if scheme.iter().any(|s| after.starts_with(s)) {
            seeds.push(&entry[start..at]);
            start = at + 1;
        }
    }
    seeds.push(&entry[start..]);
    seeds
}

/// A cluster client over the seed nodes at `urls`, built as [`MemberClient`] says a caller's
/// should be: no response timeout (the default of a cluster client), masters only, RESP3 for
/// wake-up on release, and `TCP_NODELAY` as [`node_client`] sets it.
#[cfg(feature = "cluster")]
pub(crate) fn seeded_cluster_client(urls: &[&str]) -> redis::RedisResult<MemberClient> {
    use redis::IntoConnectionInfo;
    let mut infos = Vec::with_capacity(urls.len());
    for url in urls {
        let info = url.into_connection_info()?;
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        infos.push(info.set_tcp_settings(tcp));
    }
    let client = redis::cluster::ClusterClientBuilder::new(infos)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .build()?;
    Ok(MemberClient::Cluster(client))
}

/// One member of the quorum, as [`Redlock::from_clients`](crate::Redlock::from_clients) takes
/// it: a `redis::Client` of one node, or (with the `cluster` feature, on by default) a
/// `redis::cluster::ClusterClient` of a whole Redis Cluster. Both convert with `into()`, so a
/// list of either kind, or of both through this enum, is accepted as is.
///
/// A `Node` whose server runs Redis Cluster stands for its whole cluster: redmutex notices when
/// it connects (`INFO cluster`) and talks to the cluster through the redis crate's cluster
/// client, made from the node's connection info (credentials, TLS mode, protocol). Pass a
/// `Cluster` instead when that info is not enough: TLS with a private CA or a client certificate
/// (`ClusterClientBuilder::certs`, which a `redis::Client`'s certificates do not carry over to),
/// several seed nodes, or other settings of the cluster client. Build it without a response
/// timeout (redmutex bounds every call itself), without reading from replicas (the default: a
/// replica may lag behind its master), and with `use_protocol(ProtocolVersion::RESP3)` for
/// wake-up on release, whose sharded notices reach a cluster client only as RESP3 pushes.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use redis::cluster::ClusterClient;
/// use redmutex::{MemberClient, Redlock};
///
/// // Local test nodes (redmutex-testenv); production code passes its own URLs.
/// let standalone = redmutex_testenv::Cluster::start(2);
/// let cluster = redmutex_testenv::RedisCluster::start(3, 0);
/// // Two standalone servers and one Redis Cluster: three members, a quorum of two.
/// let members: Vec<MemberClient> = vec![
///     redis::Client::open(standalone.urls()[0].as_str())?.into(),
///     redis::Client::open(standalone.urls()[1].as_str())?.into(),
///     ClusterClient::builder(cluster.urls())
///         .use_protocol(redis::ProtocolVersion::RESP3)
///         .build()?
///         .into(),
/// ];
/// let redlock = Redlock::from_clients(members).await?;
/// assert_eq!(redlock.len(), 3);
/// let lock = redlock.new_mutex("report:weekly").lock().await?;
/// lock.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[non_exhaustive]
#[allow(clippy::large_enum_variant)] // one per member, made once: boxing would only cost callers
pub enum MemberClient {
    /// A client of one node: a standalone server, or any node of a Redis Cluster, which then
    /// stands for its whole cluster.
    Node(redis::Client),
    /// A Redis Cluster, through a cluster client the caller built.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster::ClusterClient),
}

impl From<redis::Client> for MemberClient {
    fn from(client: redis::Client) -> Self {
        MemberClient::Node(client)
    }
}

#[cfg(feature = "cluster")]
impl From<redis::cluster::ClusterClient> for MemberClient {
    fn from(client: redis::cluster::ClusterClient) -> Self {
        MemberClient::Cluster(client)
    }
}

impl MemberClient {
    /// The member's address for messages, without credentials: the node's URL, or, for a cluster
    /// client (which does not tell its seed nodes), what it is.
    pub(crate) fn address(&self) -> String {
        match self {
            MemberClient::Node(client) => address_of(client),
            #[cfg(feature = "cluster")]
            MemberClient::Cluster(_) => "a Redis Cluster (ClusterClient)".to_owned(),
        }
    }

    /// The server a node client reaches, normalised so that two spellings of one address compare
    /// equal (`redis://Host:6379/0` and `rediss://host:6379/1`); `None` for a cluster client,
    /// which does not tell its seed nodes. Names are not resolved: `localhost` and `127.0.0.1`
    /// differ here (once connected, `servers` compares `run_id`s).
    pub(crate) fn server(&self) -> Option<String> {
        let client = match self {
            MemberClient::Node(client) => client,
            #[cfg(feature = "cluster")]
            MemberClient::Cluster(_) => return None,
        };
        Some(match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                let host = host.trim_end_matches('.').to_ascii_lowercase();
                format!("{host}:{port}")
            }
            other => other.to_string(),
        })
    }

    /// Whether it is known to reach a cluster before any connection is made.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            MemberClient::Node(_) => false,
            #[cfg(feature = "cluster")]
            MemberClient::Cluster(_) => true,
        }
    }
}

impl fmt::Debug for MemberClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The redis crate's own output holds the connection info: show the address only.
        match self {
            MemberClient::Node(_) => write!(f, "Node({})", self.address()),
            #[cfg(feature = "cluster")]
            MemberClient::Cluster(_) => f.write_str("Cluster(ClusterClient)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_splits_into_seeds_before_a_scheme_only() {
        assert_eq!(seeds("redis://a:1"), ["redis://a:1"]);
        assert_eq!(
            seeds("redis://a:1|REDIS://b:2|rediss://c:3"),
            ["redis://a:1", "REDIS://b:2", "rediss://c:3"]
        );
        assert_eq!(seeds("redis://:p|w@a:1"), ["redis://:p|w@a:1"]);
    }

    #[test]
    fn node_clients_send_each_request_at_once() {
        for url in [
            "redis://127.0.0.1:6379/",
            "redis://:secret@127.0.0.1:6379/2",
        ] {
            let client = node_client(url).expect("a URL");
            assert!(
                client.get_connection_info().tcp_settings().nodelay(),
                "{url}"
            );
        }
    }
}
