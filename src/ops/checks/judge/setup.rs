//! How each node is set up: eviction, persistence, permissions and version.

use std::collections::HashMap;

use super::super::CheckStatus;
use super::{Answer, Round, Verdict, fail, field, pass, warn};
use crate::error::NodeErrorKind;
use crate::nodes::version::{CLUSTER_NOTICES, Needs, ServerVersion};
use crate::primitives::{self, mutex};

pub(super) fn eviction(info: &HashMap<String, String>) -> Verdict {
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

pub(super) fn persistence(info: &HashMap<String, String>, appendfsync: &Answer<String>) -> Verdict {
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

pub(super) fn permissions(round: &Round) -> Verdict {
    match round {
        Round::Done => pass("lock, extend and unlock (with release notice) work".to_owned()),
        Round::NoNotice(error) => warn(format!(
            "lock, extend and unlock work, but a waiter's mark (PSETEX) or the release notice \
             (PUBLISH) it makes the unlock send was refused: {error}; wake-up on release cannot \
             work here"
        )),
        Round::Failed(what, error) => fail(format!("{what} refused: {error}")),
    }
}

/// Whether the node runs every primitive; those it cannot run are refused there, so they lose
/// this node's vote.
pub(super) fn version(version: &Answer<ServerVersion>) -> Verdict {
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

/// A cluster member's version row: its oldest master's, judged as a node's, and its release
/// notices, which need `SPUBLISH` (see `version::CLUSTER_NOTICES`).
pub(super) fn cluster_version(version: &Answer<ServerVersion>) -> Verdict {
    let verdict = self::version(version);
    let Ok(known) = version else {
        return verdict;
    };
    match known.allows(&CLUSTER_NOTICES) {
        Err(refused) if verdict.0 == CheckStatus::Pass => warn(format!(
            "{known}: {}, refused on this member; every other primitive runs",
            refused_needs(&refused)
        )),
        Err(refused) if verdict.0 == CheckStatus::Warn => {
            warn(format!("{}; {}", verdict.1, refused_needs(&refused)))
        }
        _ => verdict,
    }
}

/// "... need 7.0 or later", from a refusal of the version gate.
fn refused_needs(refused: &NodeErrorKind) -> String {
    match refused {
        NodeErrorKind::TooOld { what, needs, .. } => format!("{what} need {needs} or later"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;
    use crate::nodes::version::Version;

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
}
