//! Judging what the nodes told the checks: pure, so that every verdict is tested without Redis.
//! The verdicts on how the nodes relate (`topology`) and on how each is set up (`setup`) are
//! apart.
//!
//! A Redis Cluster member gets one row per check, as a standalone one does, since it is one vote:
//! the set-up checks run on each of its masters (a lock key may land on any of them), and the
//! row takes the worst master's verdict and names every master that has it.

mod setup;
mod topology;

use setup::{cluster_version, eviction, permissions, persistence, version};
use topology::{Endpoint, distinct, distinct_cluster, independent, independent_cluster};

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::{CheckKind, CheckReport, CheckStatus, NodeCheck};
use crate::engine::quorum::quorum;
use crate::error::NodeErrorKind;
use crate::nodes::probe::{Answer, unexpected};
use crate::nodes::version::ServerVersion;

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
    /// For a Redis Cluster member, its masters (`ping`, `version` and `round` then are the
    /// member's; `info` and `appendfsync` unused).
    pub(super) cluster: Option<Answer<Vec<MasterFacts>>>,
}

/// What one master of a cluster member told us.
#[derive(Debug)]
pub(super) struct MasterFacts {
    /// `host:port`, as the cluster announces it.
    pub(super) address: String,
    /// Its cluster node ID.
    pub(super) id: String,
    pub(super) info: Answer<HashMap<String, String>>,
    pub(super) appendfsync: Answer<String>,
    /// The permissions round on a scratch key of its slots; `None` when no scratch name with
    /// the configured prefix lands there (the prefix has a hash tag of its own).
    pub(super) round: Option<Round>,
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
            cluster: None,
        }
    }
}

impl Facts {
    /// A cluster member's facts: its `masters`' (their own `round`s), or, when they are unknown,
    /// the one `round` made where the scratch key landed.
    #[cfg(feature = "cluster")]
    pub(super) fn cluster(
        ping: Answer<Duration>,
        version: Answer<ServerVersion>,
        round: Round,
        masters: Answer<Vec<MasterFacts>>,
    ) -> Facts {
        let unused = || NodeErrorKind::UnexpectedReply("asked of each master".to_owned());
        Facts {
            ping,
            info: Err(unused()),
            appendfsync: Err(unused()),
            round,
            version,
            cluster: Some(masters),
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
    // A cluster member's INFO is its masters', judged apart.
    let infos: Vec<Option<&HashMap<String, String>>> = facts
        .iter()
        .map(|f| f.info.as_ref().ok().filter(|_| f.cluster.is_none()))
        .collect();
    let clusters: Vec<Option<&[MasterFacts]>> = facts
        .iter()
        .map(|f| match &f.cluster {
            Some(Ok(masters)) => Some(masters.as_slice()),
            _ => None,
        })
        .collect();
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
                let (reason, skipped) = if error.is_authentication_refusal() {
                    let reason = format!(
                        "authentication refused: {error}: check the user and password in the \
                         node's URL"
                    );
                    (reason, "not checked: the node refused the credentials")
                } else {
                    let reason = format!("no PONG: {error}");
                    (reason, "not checked: the node is unreachable")
                };
                row(CheckKind::Reachable, fail(reason));
                for kind in [
                    CheckKind::Distinct,
                    CheckKind::Independent,
                    CheckKind::Eviction,
                    CheckKind::Persistence,
                    CheckKind::Permissions,
                    CheckKind::Version,
                ] {
                    row(kind, (CheckStatus::Skip, skipped.to_owned()));
                }
                continue;
            }
        }
        if let Some(masters) = &fact.cluster {
            let masters = match masters {
                Ok(masters) => masters,
                Err(error) => {
                    let reason = format!("not checked: the cluster's masters unknown: {error}");
                    for kind in [
                        CheckKind::Distinct,
                        CheckKind::Independent,
                        CheckKind::Eviction,
                        CheckKind::Persistence,
                    ] {
                        row(kind, warn(reason.clone()));
                    }
                    row(CheckKind::Permissions, permissions(&fact.round));
                    row(CheckKind::Version, cluster_version(&fact.version));
                    continue;
                }
            };
            row(
                CheckKind::Distinct,
                distinct_cluster(node, masters, &infos, &clusters),
            );
            row(
                CheckKind::Independent,
                independent_cluster(node, masters, &clusters),
            );
            row(
                CheckKind::Eviction,
                over_masters(masters, |master| match &master.info {
                    Ok(info) => eviction(info),
                    Err(error) => warn(format!("not checked: INFO refused: {error}")),
                }),
            );
            row(
                CheckKind::Persistence,
                over_masters(masters, |master| match &master.info {
                    Ok(info) => persistence(info, &master.appendfsync),
                    Err(error) => warn(format!("not checked: INFO refused: {error}")),
                }),
            );
            row(
                CheckKind::Permissions,
                over_masters(masters, |master| match &master.round {
                    Some(round) => permissions(round),
                    None => warn(
                        "not checked: no scratch name with this prefix lands on this master \
                         (the prefix has a hash tag)"
                            .to_owned(),
                    ),
                }),
            );
            row(CheckKind::Version, cluster_version(&fact.version));
            continue;
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
    let refused_authentication = facts
        .iter()
        .filter(|f| {
            f.ping
                .as_ref()
                .is_err_and(NodeErrorKind::is_authentication_refusal)
        })
        .count();
    CheckReport {
        quorum: quorum(facts.len()),
        nodes: facts.len(),
        checks,
        refused_authentication,
        round_trips: facts
            .iter()
            .map(|f| f.ping.as_ref().ok().copied())
            .collect(),
    }
}

type Verdict = (CheckStatus, String);

/// A cluster member's verdict from each master's: the worst, with the masters that have it (or
/// the one reason every master shares).
fn over_masters(masters: &[MasterFacts], judge: impl Fn(&MasterFacts) -> Verdict) -> Verdict {
    let verdicts: Vec<(&str, Verdict)> = masters
        .iter()
        .map(|master| (master.address.as_str(), judge(master)))
        .collect();
    let Some(worst) = verdicts.iter().map(|(_, (status, _))| *status).max() else {
        return warn("not checked: the cluster has no master serving slots".to_owned());
    };
    let first = &verdicts[0].1;
    if verdicts.iter().all(|(_, verdict)| verdict == first) {
        return (
            worst,
            format!("every master ({}): {}", masters.len(), first.1),
        );
    }
    let named: Vec<String> = verdicts
        .iter()
        .filter(|(_, (status, _))| *status == worst)
        .map(|(address, (_, reason))| format!("{address}: {reason}"))
        .collect();
    let count = named.len();
    (
        worst,
        format!("{count} of {} masters: {}", masters.len(), named.join("; ")),
    )
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::version::Version;

    pub(super) fn info(lines: &str) -> HashMap<String, String> {
        parse_info(&Value::BulkString(lines.as_bytes().to_vec())).unwrap()
    }

    pub(super) const HEALTHY: &str = "# Server\r\nrun_id:aaaa\r\n# Memory\r\nmaxmemory:0\r\n\
        maxmemory_policy:noeviction\r\n# Persistence\r\naof_enabled:1\r\n\
        # Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
        master_replid:1111\r\n# Cluster\r\ncluster_enabled:0\r\n";

    pub(super) fn facts(info_text: &str) -> Facts {
        Facts {
            ping: Ok(Duration::from_micros(300)),
            info: Ok(info(info_text)),
            appendfsync: Ok("always".to_owned()),
            round: Round::Done,
            version: Ok(ServerVersion::Redis(Version::new(7, 0, 15))),
            cluster: None,
        }
    }

    /// A cluster member whose masters answer `infos` (one per master), with node IDs `ids`.
    pub(super) fn cluster_facts(infos: &[&str], ids: &[&str]) -> Facts {
        let masters = infos
            .iter()
            .zip(ids)
            .enumerate()
            .map(|(i, (text, id))| MasterFacts {
                address: format!("10.0.0.{i}:7000"),
                id: (*id).to_owned(),
                info: Ok(info(text)),
                appendfsync: Ok("always".to_owned()),
                round: Some(Round::Done),
            })
            .collect();
        Facts {
            cluster: Some(Ok(masters)),
            ..facts("")
        }
    }

    pub(super) fn healthy(run_id: &str, replid: &str) -> Facts {
        facts(
            &HEALTHY
                .replace("aaaa", run_id)
                .replace("master_replid:1111", &format!("master_replid:{replid}")),
        )
    }

    pub(super) fn address(port: u16) -> Option<String> {
        Some(format!("redis://127.0.0.1:{port}/"))
    }

    pub(super) fn verdict(
        report: &CheckReport,
        node: usize,
        kind: CheckKind,
    ) -> (CheckStatus, String) {
        let check = report
            .checks()
            .iter()
            .find(|c| c.node == node && c.kind == kind)
            .unwrap();
        (check.status, check.reason.clone())
    }

    pub(super) fn status_of(report: &CheckReport, node: usize, kind: CheckKind) -> CheckStatus {
        verdict(report, node, kind).0
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
}
