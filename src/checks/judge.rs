//! Judging what the nodes told the checks: pure, so that every verdict is tested without Redis.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use redis::Value;

use super::{CheckKind, CheckReport, CheckStatus, NodeCheck};
use crate::engine::quorum::quorum;
use crate::error::NodeErrorKind;
use crate::nodes::probe::{Answer, unexpected};
use crate::nodes::version::{Needs, ServerVersion};
use crate::primitives::{self, mutex};

/// What one node told us.
#[derive(Debug)]
pub(super) struct Facts {
    /// The round trip of PING, or why it failed.
    pub(super) ping: Answer<Duration>,
    /// INFO's fields.
    pub(super) info: Answer<HashMap<String, String>>,
    /// CONFIG GET appendfsync.
    pub(super) appendfsync: Answer<String>,
    pub(super) round: Round,
    /// What the connection learned of the node's version.
    pub(super) version: Answer<ServerVersion>,
}

/// How the permissions round went.
#[derive(Debug)]
pub(super) enum Round {
    Done,
    /// Everything but the release notice worked.
    NoNotice(NodeErrorKind),
    Failed(&'static str, NodeErrorKind),
}

impl Facts {
    pub(super) fn unreachable(error: NodeErrorKind) -> Facts {
        Facts {
            ping: Err(error.clone()),
            info: Err(error.clone()),
            appendfsync: Err(error.clone()),
            round: Round::Failed("PING", error.clone()),
            version: Err(error),
        }
    }
}

/// INFO's `field:value` lines.
pub(super) fn parse_info(reply: &Value) -> Answer<HashMap<String, String>> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => return Err(unexpected(other)),
    };
    Ok(text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(field, value)| (field.to_owned(), value.trim().to_owned()))
        .collect())
}

/// The value of a one-parameter CONFIG GET reply.
pub(super) fn config_value(reply: &Value) -> Answer<String> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) if items.len() == 2 => text(&items[1]),
        Value::Map(pairs) if pairs.len() == 1 => text(&pairs[0].1),
        _ => None,
    }
    .ok_or_else(|| unexpected(reply))
}

/// Judges every node's facts: one row per node and check.
pub(super) fn judge(facts: &[Facts], addresses: Vec<Option<String>>) -> CheckReport {
    let endpoints: Vec<Option<Endpoint>> = addresses
        .iter()
        .map(|address| address.as_deref().and_then(Endpoint::from_address))
        .collect();
    let infos: Vec<Option<&HashMap<String, String>>> =
        facts.iter().map(|f| f.info.as_ref().ok()).collect();
    let mut checks = Vec::new();
    for (node, fact) in facts.iter().enumerate() {
        let mut row = |kind, (status, reason): (CheckStatus, String)| {
            checks.push(NodeCheck {
                node,
                address: addresses[node].clone(),
                kind,
                status,
                reason,
            })
        };
        match &fact.ping {
            Ok(rtt) => row(
                CheckKind::Reachable,
                pass(format!("PONG in {:.1} ms", rtt.as_secs_f64() * 1000.0)),
            ),
            Err(error) => {
                row(CheckKind::Reachable, fail(format!("no PONG: {error}")));
                for kind in [
                    CheckKind::Distinct,
                    CheckKind::Independent,
                    CheckKind::Eviction,
                    CheckKind::Persistence,
                    CheckKind::Permissions,
                    CheckKind::Version,
                ] {
                    let reason = "not checked: the node is unreachable".to_owned();
                    row(kind, (CheckStatus::Skip, reason));
                }
                continue;
            }
        }
        match &fact.info {
            Ok(info) => {
                row(CheckKind::Distinct, distinct(node, info, &infos));
                row(
                    CheckKind::Independent,
                    independent(node, info, &infos, &endpoints),
                );
                row(CheckKind::Eviction, eviction(info));
                row(CheckKind::Persistence, persistence(info, &fact.appendfsync));
            }
            Err(error) => {
                let reason = format!("not checked: INFO refused: {error}");
                for kind in [
                    CheckKind::Distinct,
                    CheckKind::Independent,
                    CheckKind::Eviction,
                    CheckKind::Persistence,
                ] {
                    row(kind, warn(reason.clone()));
                }
            }
        }
        row(CheckKind::Permissions, permissions(&fact.round));
        row(CheckKind::Version, version(&fact.version));
    }
    CheckReport {
        quorum: quorum(facts.len()),
        nodes: facts.len(),
        checks,
    }
}

type Verdict = (CheckStatus, String);

fn pass(reason: String) -> Verdict {
    (CheckStatus::Pass, reason)
}

fn warn(reason: String) -> Verdict {
    (CheckStatus::Warn, reason)
}

fn fail(reason: String) -> Verdict {
    (CheckStatus::Fail, reason)
}

fn field<'a>(info: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    info.get(name).map(String::as_str)
}

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

fn distinct(
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

fn independent(
    node: usize,
    info: &HashMap<String, String>,
    infos: &[Option<&HashMap<String, String>>],
    endpoints: &[Option<Endpoint>],
) -> Verdict {
    if field(info, "cluster_enabled") == Some("1") {
        return fail(
            "a Redis Cluster node: its keyspace is shared, it is not an independent vote"
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

fn is_zeros(id: &str) -> bool {
    id.bytes().all(|b| b == b'0')
}

fn eviction(info: &HashMap<String, String>) -> Verdict {
    let maxmemory = field(info, "maxmemory").and_then(|m| m.parse::<u64>().ok());
    let policy = field(info, "maxmemory_policy");
    match (maxmemory, policy) {
        (Some(0), _) => pass("no maxmemory limit: nothing is evicted".to_owned()),
        (Some(bytes), Some("noeviction")) => pass(format!(
            "maxmemory {} with noeviction: writes fail when full, no key is evicted",
            bytes_text(bytes)
        )),
        (Some(bytes), Some(policy)) => fail(format!(
            "maxmemory {} with maxmemory-policy {policy}: lock keys can be evicted before they \
             expire (set noeviction)",
            bytes_text(bytes)
        )),
        _ => warn("not checked: INFO shows no maxmemory or maxmemory_policy".to_owned()),
    }
}

fn bytes_text(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    if bytes >= MB && bytes.is_multiple_of(MB) {
        format!("{}mb", bytes / MB)
    } else {
        format!("{bytes} bytes")
    }
}

fn persistence(info: &HashMap<String, String>, appendfsync: &Answer<String>) -> Verdict {
    const DELAYED: &str = "after a restart keep the node out longer than the longest expiry \
                           (delayed restart)";
    match (field(info, "aof_enabled"), appendfsync) {
        (Some("1"), Ok(fsync)) if fsync == "always" => {
            pass("appendonly yes, appendfsync always: a restart keeps the locks".to_owned())
        }
        (Some("1"), Ok(fsync)) => warn(format!(
            "appendonly yes but appendfsync {fsync}: a crash can lose recent locks; {DELAYED}"
        )),
        (Some("1"), Err(error)) => warn(format!(
            "appendonly yes, appendfsync unknown (CONFIG GET refused: {error}); unless it is \
             always, {DELAYED}"
        )),
        (Some(_), _) => warn(format!(
            "appendonly no: a restarted node forgets its locks; {DELAYED}"
        )),
        (None, _) => warn(format!("not checked: INFO shows no aof_enabled; {DELAYED}")),
    }
}

fn permissions(round: &Round) -> Verdict {
    match round {
        Round::Done => pass("lock, extend and unlock (with release notice) work".to_owned()),
        Round::NoNotice(error) => warn(format!(
            "lock, extend and unlock work, but the unlock with release notice (PUBLISH) was \
             refused: {error}; wake-up on release cannot work here"
        )),
        Round::Failed(what, error) => fail(format!("{what} refused: {error}")),
    }
}

/// Whether the node runs every primitive; those it cannot run are refused there, so they lose
/// this node's vote.
fn version(version: &Answer<ServerVersion>) -> Verdict {
    let version = match version {
        Ok(version) => *version,
        Err(error) => return warn(format!("not checked: {error}")),
    };
    if version == ServerVersion::Unknown {
        return warn(format!(
            "not checked: {version}; a primitive the node is too old for fails in its scripts"
        ));
    }
    let refused: Vec<&Needs> = primitives::NEEDS
        .into_iter()
        .filter(|needs| version.allows(needs).is_err())
        .collect();
    if refused.is_empty() {
        return pass(format!("{version}: runs every primitive"));
    }
    // "fair mutexes need 5.0 or later, read-write locks and semaphores need 7.0 or later"
    let mut needs: Vec<(&str, Vec<&str>)> = Vec::new();
    for primitive in &refused {
        let minimum = primitive.text;
        match needs.iter_mut().find(|(version, _)| *version == minimum) {
            Some((_, names)) => names.push(primitive.what),
            None => needs.push((minimum, vec![primitive.what])),
        }
    }
    let needs: Vec<String> = needs
        .iter()
        .map(|(minimum, names)| format!("{} need {minimum} or later", names.join(" and ")))
        .collect();
    let reason = format!("{version}: {}; refused on this node", needs.join(", "));
    if refused.contains(&&mutex::NEEDS) {
        fail(reason)
    } else {
        warn(reason)
    }
}

/// A host and port, as configured or as a node reports a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    host: String,
    port: u16,
}

impl Endpoint {
    /// From a (redacted) node URL: `redis://[***@]host[:port][/db]`.
    fn from_address(address: &str) -> Option<Endpoint> {
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
    use super::*;
    use crate::nodes::version::Version;

    fn info(lines: &str) -> HashMap<String, String> {
        parse_info(&Value::BulkString(lines.as_bytes().to_vec())).unwrap()
    }

    const HEALTHY: &str = "# Server\r\nrun_id:aaaa\r\n# Memory\r\nmaxmemory:0\r\n\
        maxmemory_policy:noeviction\r\n# Persistence\r\naof_enabled:1\r\n\
        # Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
        master_replid:1111\r\n# Cluster\r\ncluster_enabled:0\r\n";

    fn facts(info_text: &str) -> Facts {
        Facts {
            ping: Ok(Duration::from_micros(300)),
            info: Ok(info(info_text)),
            appendfsync: Ok("always".to_owned()),
            round: Round::Done,
            version: Ok(ServerVersion::Redis(Version::new(7, 0, 15))),
        }
    }

    fn healthy(run_id: &str, replid: &str) -> Facts {
        facts(
            &HEALTHY
                .replace("aaaa", run_id)
                .replace("master_replid:1111", &format!("master_replid:{replid}")),
        )
    }

    fn address(port: u16) -> Option<String> {
        Some(format!("redis://127.0.0.1:{port}/"))
    }

    fn verdict(report: &CheckReport, node: usize, kind: CheckKind) -> (CheckStatus, String) {
        let check = report
            .checks()
            .iter()
            .find(|c| c.node == node && c.kind == kind)
            .unwrap();
        (check.status, check.reason.clone())
    }

    #[test]
    fn healthy_nodes_pass_every_check() {
        let report = judge(
            &[healthy("a", "1"), healthy("b", "2"), healthy("c", "3")],
            vec![address(1), address(2), address(3)],
        );
        assert_eq!(report.checks().len(), 3 * 7);
        assert!(
            report
                .checks()
                .iter()
                .all(|c| c.status == CheckStatus::Pass),
            "{:#?}",
            report.checks()
        );
        assert_eq!(report.sound_nodes(), 3);
    }

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

    fn status_of(report: &CheckReport, node: usize, kind: CheckKind) -> CheckStatus {
        verdict(report, node, kind).0
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
    fn eviction_policies() {
        let with = |max: &str, policy: &str| {
            eviction(&info(&format!(
                "maxmemory:{max}\r\nmaxmemory_policy:{policy}\r\n"
            )))
            .0
        };
        assert_eq!(with("0", "allkeys-lru"), CheckStatus::Pass);
        assert_eq!(with("104857600", "noeviction"), CheckStatus::Pass);
        assert_eq!(with("104857600", "allkeys-lru"), CheckStatus::Fail);
        assert_eq!(with("104857600", "volatile-ttl"), CheckStatus::Fail);
        assert_eq!(eviction(&info("")).0, CheckStatus::Warn);
        let (_, reason) = eviction(&info(
            "maxmemory:104857600\r\nmaxmemory_policy:volatile-lru",
        ));
        assert!(
            reason.contains("100mb") && reason.contains("volatile-lru"),
            "{reason}"
        );
    }

    #[test]
    fn persistence_warns_unless_every_write_is_synced() {
        let aof = info("aof_enabled:1");
        let no_aof = info("aof_enabled:0");
        let refused = Err(NodeErrorKind::UnexpectedReply("x".into()));
        assert_eq!(persistence(&aof, &Ok("always".into())).0, CheckStatus::Pass);
        assert_eq!(
            persistence(&aof, &Ok("everysec".into())).0,
            CheckStatus::Warn
        );
        assert_eq!(persistence(&aof, &refused).0, CheckStatus::Warn);
        assert_eq!(
            persistence(&no_aof, &Ok("always".into())).0,
            CheckStatus::Warn
        );
        assert!(persistence(&no_aof, &refused).1.contains("delayed restart"));
    }

    #[test]
    fn refused_questions_warn_and_unreachable_nodes_skip() {
        let mut refused = healthy("a", "1");
        refused.info = Err(NodeErrorKind::UnexpectedReply("NOPERM".into()));
        let down = Facts::unreachable(NodeErrorKind::Timeout(Duration::from_secs(2)));
        let report = judge(&[refused, down], vec![address(1), address(2)]);
        for kind in [CheckKind::Distinct, CheckKind::Eviction] {
            let (status, reason) = verdict(&report, 0, kind);
            assert_eq!(status, CheckStatus::Warn);
            assert!(reason.contains("INFO refused"), "{reason}");
        }
        assert_eq!(
            status_of(&report, 1, CheckKind::Reachable),
            CheckStatus::Fail
        );
        assert_eq!(
            status_of(&report, 1, CheckKind::Eviction),
            CheckStatus::Skip
        );
        assert!(report.has_failures());
        assert_eq!(report.sound_nodes(), 1);
    }

    #[test]
    fn permission_failures_name_the_command() {
        let error = NodeErrorKind::UnexpectedReply("NOPERM".into());
        let (status, reason) = permissions(&Round::Failed("the extend script", error.clone()));
        assert_eq!(status, CheckStatus::Fail);
        assert!(reason.starts_with("the extend script refused"), "{reason}");
        assert_eq!(permissions(&Round::NoNotice(error)).0, CheckStatus::Warn);
    }

    #[test]
    fn old_versions_warn_with_what_they_cannot_run() {
        let at = |major, minor, patch| Ok(ServerVersion::Redis(Version::new(major, minor, patch)));
        assert_eq!(
            version(&at(7, 0, 15)),
            pass("Redis 7.0.15: runs every primitive".to_owned())
        );
        assert_eq!(
            version(&at(6, 2, 14)),
            warn(
                "Redis 6.2.14: read-write locks and semaphores need 7.0 or later; refused on \
                 this node"
                    .to_owned()
            )
        );
        let (status, reason) = version(&at(4, 0, 14));
        assert_eq!(status, CheckStatus::Warn);
        assert!(
            reason.contains(
                "fair mutexes need 5.0 or later, read-write locks and semaphores need 7.0"
            ),
            "{reason}"
        );
        assert_eq!(version(&at(2, 6, 0)).0, CheckStatus::Fail);
        let (status, reason) = version(&Ok(ServerVersion::Before(Version::new(7, 0, 0))));
        assert_eq!(status, CheckStatus::Warn);
        assert!(reason.contains("INFO refused"), "{reason}");
        assert_eq!(version(&Ok(ServerVersion::Unknown)).0, CheckStatus::Warn);
        let timeout = Err(NodeErrorKind::Timeout(Duration::from_secs(2)));
        assert_eq!(version(&timeout).0, CheckStatus::Warn);
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
