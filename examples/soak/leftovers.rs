//! After the run and a quiet period, what redmutex left on the nodes: only the documented
//! counters and records may stay (doc/keys.md); anything else is a leak.

use std::time::Duration;

/// Suffixes of the keys that stay by design: fencing counters, a fair line's ticket counter, an
/// election's leader record.
const KEPT: [&str; 3] = [":fence", ":ticket", ":leader"];

/// Whether `key` may stay on a node after every holder and waiter is gone.
pub fn may_stay(key: &str) -> bool {
    KEPT.iter().any(|suffix| key.ends_with(suffix))
}

/// Every key of every standalone node and every master of the cluster member that may not stay,
/// as `(node, key, its PTTL)`.
pub fn find(
    nodes: &redmutex_testenv::Cluster,
    member: &redmutex_testenv::RedisCluster,
) -> Vec<(String, String, i64)> {
    let standalone = nodes
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, node)| (format!("node-{i}"), node));
    let masters = member
        .masters()
        .into_iter()
        .map(|node| (format!("cluster master {}", node.port()), node));
    let mut found = Vec::new();
    for (i, node) in standalone.chain(masters) {
        let mut connection = node.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut connection)
            .expect("KEYS answers");
        for key in keys.into_iter().filter(|key| !may_stay(key)) {
            let ttl = node.pttl(&key);
            found.push((i.clone(), key, ttl));
        }
    }
    found
}

/// How long a waiter's mark lives, whoever sets it (doc/keys.md): one set as the clients stop
/// outlives every lock of theirs.
const MARK_LIFE: Duration = Duration::from_secs(10);

/// How long after the last client stopped every key of theirs has expired: the longest expiry,
/// and the keys that outlive it (a waiting writer's mark lives at most an expiry), twice over; and
/// never less than a waiter's mark lives, and a second.
pub fn quiet(expiry: Duration) -> Duration {
    (expiry * 4).max(MARK_LIFE + Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quiet_period_outlasts_a_waiters_mark() {
        assert!(quiet(Duration::from_secs(1)) > MARK_LIFE);
        assert_eq!(quiet(Duration::from_secs(5)), Duration::from_secs(20));
    }

    #[test]
    fn only_counters_and_records_may_stay() {
        for key in ["{a}:fence", "{a}:ticket", "{lead}:leader", "{lead}:fence"] {
            assert!(may_stay(key), "{key}");
        }
        for key in [
            "a",
            "sem",
            "{a}:readers",
            "{a}:writer-waiting",
            "{a}:line",
            "a:waiters",
        ] {
            assert!(!may_stay(key), "{key}");
        }
    }
}
