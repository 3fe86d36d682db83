//! Whether the nodes are distinct servers and independent masters: what each node's INFO says of
//! its peers.

use std::collections::HashMap;
use std::fmt;

use super::{MasterFacts, Verdict, fail, field, pass, warn};

/// Lists node indices as `node 1` or `nodes 1, 3`.
fn node_list(nodes: &[usize]) -> String {
    let list = nodes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if nodes.len() == 1 {
        format!("node {list}")
    } else {
        format!("nodes {list}")
    }
}

pub(super) fn distinct(
    node: usize,
    info: &HashMap<String, String>,
    infos: &[Option<&HashMap<String, String>>],
) -> Verdict {
    let Some(run_id) = field(info, "run_id").filter(|id| !id.is_empty()) else {
        return warn("not checked: INFO shows no run_id".to_owned());
    };
    let short = &run_id[..run_id.len().min(8)];
    let same: Vec<usize> = infos
        .iter()
        .enumerate()
        .filter(|&(other, info)| {
            other != node && info.and_then(|i| field(i, "run_id")) == Some(run_id)
        })
        .map(|(other, _)| other)
        .collect();
    if same.is_empty() {
        pass(format!("run_id {short}… is unique among the nodes"))
    } else {
        fail(format!(
            "same server as {} (run_id {short}…): it counts twice towards the quorum",
            node_list(&same)
        ))
    }
}

pub(super) fn independent(
    node: usize,
    info: &HashMap<String, String>,
    infos: &[Option<&HashMap<String, String>>],
    endpoints: &[Option<Endpoint>],
) -> Verdict {
    if field(info, "cluster_enabled") == Some("1") {
        // redmutex's own connections reach a cluster node's whole cluster (judged apart): this
        // is a connection the caller built to one node.
        return fail(
            "a Redis Cluster node reached by a standalone connection: it sees the keys of its \
             own slots only (give its URL, a ClusterClient or a ClusterConnection instead)"
                .to_owned(),
        );
    }
    let configured = |endpoint: &Endpoint| {
        endpoints
            .iter()
            .position(|e| e.as_ref() == Some(endpoint))
            .filter(|&other| other != node)
    };
    if field(info, "role") == Some("slave") {
        let master = Endpoint::from_parts(field(info, "master_host"), field(info, "master_port"));
        let which = match master.as_ref().and_then(configured) {
            Some(other) => format!(" (node {other})"),
            None => String::new(),
        };
        let address = master.map_or_else(|| "an unknown master".to_owned(), |m| m.to_string());
        return fail(format!(
            "a replica of {address}{which}: a replica is not an independent master, and a \
             failover to one can hand a lock out twice"
        ));
    }
    let replicas: Vec<Endpoint> = (0..)
        .map_while(|i| info.get(&format!("slave{i}")))
        .filter_map(|entry| Endpoint::from_replica_entry(entry))
        .collect();
    let own = endpoints[node].as_ref();
    let mut linked: Vec<usize> = replicas.iter().filter_map(configured).collect();
    // A configured replica whose master is this node, though it announces another address.
    let run_id = field(info, "run_id");
    for (other, other_info) in infos.iter().enumerate() {
        // The same server listed twice is the `distinct` check's failure, not replication.
        let Some(other_info) = other_info
            .filter(|_| other != node)
            .filter(|i| run_id.is_none() || field(i, "run_id") != run_id)
        else {
            continue;
        };
        let master = Endpoint::from_parts(
            field(other_info, "master_host"),
            field(other_info, "master_port"),
        );
        let replica_of_this = field(other_info, "role") == Some("slave")
            && master.is_some()
            && master.as_ref() == own;
        // Nodes of one replication group share its ID once they have synchronised, whatever
        // addresses they announce.
        let replid = field(info, "master_replid").filter(|id| !id.is_empty() && !is_zeros(id));
        let same_group = replid.is_some() && field(other_info, "master_replid") == replid;
        if (replica_of_this || same_group) && !linked.contains(&other) {
            linked.push(other);
        }
    }
    linked.sort_unstable();
    if !linked.is_empty() {
        return fail(format!(
            "replicates with {}: they are one data set, not independent votes",
            node_list(&linked)
        ));
    }
    let outside: usize = field(info, "connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(replicas.len());
    if outside > 0 {
        return warn(format!(
            "a master with {outside} replica(s) outside the configured nodes: a failover to one \
             can lose locks"
        ));
    }
    pass("an independent master".to_owned())
}

/// Whether a cluster member shares a server with another member: the same `run_id` among its
/// masters and the other's (two cluster members that share one are the `independent` check's
/// failure too; a standalone server is never a cluster's master).
pub(super) fn distinct_cluster(
    node: usize,
    masters: &[MasterFacts],
    infos: &[Option<&HashMap<String, String>>],
    clusters: &[Option<&[MasterFacts]>],
) -> Verdict {
    let run_ids = |masters: &[MasterFacts]| -> Vec<String> {
        masters
            .iter()
            .filter_map(|master| master.info.as_ref().ok())
            .filter_map(|info| field(info, "run_id").filter(|id| !id.is_empty()))
            .map(str::to_owned)
            .collect()
    };
    let own = run_ids(masters);
    if own.is_empty() {
        return warn("not checked: no master's INFO shows a run_id".to_owned());
    }
    let same: Vec<usize> = (0..infos.len().max(clusters.len()))
        .filter(|&other| other != node)
        .filter(|&other| {
            let standalone = infos
                .get(other)
                .copied()
                .flatten()
                .and_then(|info| field(info, "run_id"));
            let theirs = clusters.get(other).copied().flatten().map(run_ids);
            standalone.is_some_and(|id| own.iter().any(|own| own == id))
                || theirs.is_some_and(|ids| ids.iter().any(|id| own.contains(id)))
        })
        .collect();
    if same.is_empty() {
        pass(format!(
            "the run_ids of its {} masters are unique among the nodes",
            own.len()
        ))
    } else {
        fail(format!(
            "shares servers with {}: it counts twice towards the quorum",
            node_list(&same)
        ))
    }
}

/// Whether a cluster member is independent of the other members: no master of another cluster
/// member shares a node ID with its masters (two URLs of one cluster are one keyspace). Its own
/// replicas warn, as a standalone master's do: a failover to one can lose locks written just
/// before.
pub(super) fn independent_cluster(
    node: usize,
    masters: &[MasterFacts],
    clusters: &[Option<&[MasterFacts]>],
) -> Verdict {
    let ids: Vec<&str> = masters
        .iter()
        .map(|master| master.id.as_str())
        .filter(|id| !id.is_empty())
        .collect();
    let same: Vec<usize> = clusters
        .iter()
        .enumerate()
        .filter(|&(other, _)| other != node)
        .filter(|(_, theirs)| {
            theirs.is_some_and(|theirs| theirs.iter().any(|m| ids.contains(&m.id.as_str())))
        })
        .map(|(other, _)| other)
        .collect();
    if !same.is_empty() {
        return fail(format!(
            "the same Redis Cluster as {} (shared node IDs): one keyspace, not independent votes",
            node_list(&same)
        ));
    }
    let replicas: usize = masters
        .iter()
        .filter_map(|master| master.info.as_ref().ok())
        .filter_map(|info| field(info, "connected_slaves")?.parse::<usize>().ok())
        .sum();
    let what = format!("a Redis Cluster of {} masters, one member", masters.len());
    if replicas > 0 {
        warn(format!(
            "{what}, with {replicas} replica(s): a failover to one can lose locks written just \
             before it"
        ))
    } else {
        pass(what)
    }
}

fn is_zeros(id: &str) -> bool {
    id.bytes().all(|b| b == b'0')
}

/// A host and port, as configured or as a node reports a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    host: String,
    port: u16,
}

impl Endpoint {
    /// From a (redacted) node URL: `redis://[***@]host[:port][/db]`.
    pub(super) fn from_address(address: &str) -> Option<Endpoint> {
        let rest = address.split_once("://")?.1;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
        let authority = rest.split(['/', '?']).next()?;
        let (host, port) = match authority.rsplit_once(':') {
            // An IPv6 literal without a port, such as `[::1]`.
            Some((host, port)) if !port.ends_with(']') => (host, port.parse().ok()?),
            _ => (authority, 6379),
        };
        Endpoint::new(host, port)
    }

    fn from_parts(host: Option<&str>, port: Option<&str>) -> Option<Endpoint> {
        Endpoint::new(host?, port?.parse().ok()?)
    }

    /// From a master's `slaveN:ip=...,port=...,state=...` INFO entry.
    fn from_replica_entry(entry: &str) -> Option<Endpoint> {
        let value = |name: &str| {
            entry
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value)
        };
        Endpoint::from_parts(value("ip"), value("port"))
    }

    fn new(host: &str, port: u16) -> Option<Endpoint> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return None;
        }
        // One machine's loopback names, so `localhost` in a URL matches the IP a replica reports.
        let host = match host {
            "localhost" | "::1" => "127.0.0.1",
            other => other,
        };
        Some(Endpoint {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    #[test]
    fn the_same_server_twice_fails_on_both() {
        let report = judge(
            &[healthy("a", "1"), healthy("b", "2"), healthy("a", "1")],
            vec![address(1), address(2), address(1)],
        );
        let (status, reason) = verdict(&report, 0, CheckKind::Distinct);
        assert_eq!(status, CheckStatus::Fail);
        assert!(reason.contains("node 2"), "{reason}");
        assert_eq!(
            status_of(&report, 2, CheckKind::Distinct),
            CheckStatus::Fail
        );
        assert_eq!(
            status_of(&report, 1, CheckKind::Distinct),
            CheckStatus::Pass
        );
        // One server shares its replication ID with itself: that is not replication.
        assert_eq!(
            status_of(&report, 0, CheckKind::Independent),
            CheckStatus::Pass
        );
        assert_eq!(report.sound_nodes(), 1);
    }

    #[test]
    fn replicas_and_their_masters_fail() {
        let master = facts(&HEALTHY.replace(
            "connected_slaves:0",
            "connected_slaves:1\r\nslave0:ip=127.0.0.1,port=3,state=online,offset=1,lag=0",
        ));
        let replica = facts(
            &HEALTHY
                .replace("aaaa", "cccc")
                .replace("master_replid:1111", "master_replid:9999")
                .replace(
                    "role:master",
                    "role:slave\r\nmaster_host:localhost\r\nmaster_port:1",
                ),
        );
        let report = judge(
            &[master, healthy("b", "2"), replica],
            vec![address(1), address(2), address(3)],
        );
        let (status, reason) = verdict(&report, 0, CheckKind::Independent);
        assert_eq!(status, CheckStatus::Fail);
        assert!(reason.contains("node 2"), "{reason}");
        let (status, reason) = verdict(&report, 2, CheckKind::Independent);
        assert_eq!(status, CheckStatus::Fail);
        assert!(
            reason.contains("replica of 127.0.0.1:1 (node 0)"),
            "{reason}"
        );
        assert_eq!(
            status_of(&report, 1, CheckKind::Independent),
            CheckStatus::Pass
        );
    }

    #[test]
    fn a_shared_replication_id_links_nodes_whatever_their_addresses() {
        let report = judge(
            &[
                healthy("a", "feed"),
                healthy("b", "feed"),
                healthy("c", "3"),
            ],
            vec![address(1), address(2), address(3)],
        );
        assert_eq!(
            status_of(&report, 0, CheckKind::Independent),
            CheckStatus::Fail
        );
        assert_eq!(
            status_of(&report, 1, CheckKind::Independent),
            CheckStatus::Fail
        );
        assert_eq!(
            status_of(&report, 2, CheckKind::Independent),
            CheckStatus::Pass
        );
    }

    #[test]
    fn replicas_outside_warn_and_cluster_nodes_fail() {
        let with_outside = facts(&HEALTHY.replace(
            "connected_slaves:0",
            "connected_slaves:1\r\nslave0:ip=10.9.9.9,port=6379,state=online",
        ));
        let cluster = facts(
            &HEALTHY
                .replace("master_replid:1111", "master_replid:2222")
                .replace("cluster_enabled:0", "cluster_enabled:1"),
        );
        let report = judge(&[with_outside, cluster], vec![address(1), address(2)]);
        assert_eq!(
            status_of(&report, 0, CheckKind::Independent),
            CheckStatus::Warn
        );
        assert_eq!(
            status_of(&report, 1, CheckKind::Independent),
            CheckStatus::Fail
        );
    }

    #[test]
    fn a_cluster_member_is_independent_unless_another_member_is_its_cluster() {
        let masters = [HEALTHY, &HEALTHY.replace("aaaa", "bbbb")];
        let other = [
            &*HEALTHY.replace("aaaa", "cccc"),
            &HEALTHY.replace("aaaa", "dddd"),
        ];
        let masters: Vec<String> = masters
            .iter()
            .map(|m| m.replace("cluster_enabled:0", "cluster_enabled:1"))
            .collect();
        let masters: Vec<&str> = masters.iter().map(String::as_str).collect();
        let report = judge(
            &[
                cluster_facts(&masters, &["id1", "id2"]),
                healthy("e", "5"),
                cluster_facts(&other, &["id3", "id4"]),
            ],
            vec![address(1), address(2), address(3)],
        );
        for kind in [
            CheckKind::Distinct,
            CheckKind::Independent,
            CheckKind::Eviction,
        ] {
            let (status, reason) = verdict(&report, 0, kind);
            assert_eq!(status, CheckStatus::Pass, "{kind}: {reason}");
        }
        let (_, reason) = verdict(&report, 0, CheckKind::Independent);
        assert!(reason.contains("Redis Cluster of 2 masters"), "{reason}");
        assert!(!report.has_failures(), "{:#?}", report.checks());

        // Two URLs of one cluster: the same masters behind both.
        let report = judge(
            &[
                cluster_facts(&masters, &["id1", "id2"]),
                healthy("e", "5"),
                cluster_facts(&masters, &["id2", "id1"]),
            ],
            vec![address(1), address(2), address(3)],
        );
        for node in [0, 2] {
            let (status, reason) = verdict(&report, node, CheckKind::Independent);
            assert_eq!(status, CheckStatus::Fail);
            assert!(
                reason.contains("the same Redis Cluster as node"),
                "{reason}"
            );
            assert_eq!(
                status_of(&report, node, CheckKind::Distinct),
                CheckStatus::Fail
            );
        }
        assert_eq!(
            status_of(&report, 1, CheckKind::Independent),
            CheckStatus::Pass
        );
        assert_eq!(report.sound_nodes(), 1);
    }

    #[test]
    fn a_cluster_with_replicas_warns() {
        let master = HEALTHY.replace(
            "connected_slaves:0",
            "connected_slaves:1\r\nslave0:ip=10.0.0.9,port=7003,state=online",
        );
        let report = judge(&[cluster_facts(&[&master], &["id1"])], vec![address(1)]);
        let (status, reason) = verdict(&report, 0, CheckKind::Independent);
        assert_eq!(status, CheckStatus::Warn);
        assert!(reason.contains("1 replica(s)"), "{reason}");
    }

    #[test]
    fn endpoints_come_from_urls_and_replica_entries() {
        let parse = Endpoint::from_address;
        let at = |host: &str, port| {
            Some(Endpoint {
                host: host.into(),
                port,
            })
        };
        assert_eq!(parse("redis://***@Host:7000/2"), at("host", 7000));
        assert_eq!(parse("redis://host"), at("host", 6379));
        assert_eq!(parse("rediss://localhost:1/?***"), at("127.0.0.1", 1));
        assert_eq!(parse("redis://[::1]:5/"), at("127.0.0.1", 5));
        assert_eq!(parse("redis://[fe80::1]/"), at("fe80::1", 6379));
        assert_eq!(parse("<not a URL>"), None);
        assert_eq!(
            Endpoint::from_replica_entry("ip=10.0.0.2,port=6380,state=online"),
            at("10.0.0.2", 6380)
        );
        assert_eq!(
            config_value(&Value::Array(vec![
                Value::BulkString(b"appendfsync".to_vec()),
                Value::BulkString(b"always".to_vec()),
            ]))
            .unwrap(),
            "always"
        );
    }
}
