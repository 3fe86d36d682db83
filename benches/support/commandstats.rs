//! What the nodes ran in a window, from `INFO commandstats`: the commands clients sent, apart
//! from those the library's scripts ran inside EVALSHA or EVAL, which the same counts include.
//! Shared by the compare bench's hand-off rows (`handoff.rs`) and the scale bench.

use std::collections::BTreeMap;

/// Commands the library's scripts run inside EVALSHA or EVAL. `INFO commandstats` counts them
/// too, although no client sent them over the network, so they are counted apart (see
/// [`Counts`]).
const IN_SCRIPTS: [&str; 14] = [
    "get",
    "del",
    "publish",
    "pexpire",
    "pexpireat",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zscore",
    "time",
    "hset",
    "hget",
    "hdel",
];

/// The commands all nodes received in a window, from `INFO commandstats` (whose `calls` count
/// a command run inside a script as well as one sent by a client).
///
/// `sent` counts every command except the probe's own and the commands scripts run
/// ([`IN_SCRIPTS`]), so that a command a client sends is counted even if nobody thought of it
/// here (SCRIPT LOAD, a reconnect's handshake, a health PING). SET and EXISTS are the commands
/// both sides use. A plain mutex sends `SET NX PX` to take the lock, a woken waiter of
/// wake-on-release sends EXISTS (its look at one node), and no script of an unfenced plain mutex
/// runs either: in the rows without fair waiting both count as sent. A fair mutex sends both, as
/// a pair, in a plain entry (its first try while its client saw nobody wait for the name), and
/// its scripts run them too: every fair script (round or release) runs exactly one EXISTS, and
/// SET to take or hand over the lock and to raise the ticket counter. So with fair waiting the
/// entries are the EXISTS beyond one per script call (EVALSHA and EVAL), each with its SET, and
/// the other SET and EXISTS calls ran inside scripts. Since issue 42 the fair release runs no
/// EXISTS (it looks for the waiters' mark instead), so only a round does, and the entries, counted
/// as the EXISTS beyond one per script call, come out as none where they are a few: in rows
/// where waiters stand in line, what the hand-off rows and the scale bench measure, a client
/// sees somebody wait and sends rounds, not entries. PSETEX is a waiter's mark, which a client
/// sends with a waiting attempt in the rows without fair waiting; fair waiters send none, and
/// the fair scripts run it (the line's mark), so with fair waiting it counts as run inside.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Commands sent by clients.
    pub sent: u64,
    /// Commands run inside scripts.
    pub in_scripts: u64,
    /// Every command by name (both kinds).
    pub by_name: BTreeMap<String, u64>,
}

impl Counts {
    /// The commands run between two [`read`]s; `fair` if the waiters wait in a fair line.
    pub fn between(
        before: &BTreeMap<String, u64>,
        after: &BTreeMap<String, u64>,
        fair: bool,
    ) -> Counts {
        let mut counts = Counts::default();
        let delta = |name: &str| {
            let after = after.get(name).copied().unwrap_or(0);
            after.saturating_sub(before.get(name).copied().unwrap_or(0))
        };
        // With fair waiting: the entries' SET + EXISTS pairs (see above).
        let entries = if fair {
            delta("exists").saturating_sub(delta("evalsha") + delta("eval"))
        } else {
            0
        };
        for name in after.keys() {
            let calls = delta(name);
            if calls == 0 {
                continue;
            }
            let inside = match name.as_str() {
                "set" | "exists" if fair => calls.saturating_sub(entries),
                "psetex" if fair => calls,
                name if IN_SCRIPTS.contains(&name) => calls,
                _ => 0,
            };
            counts.in_scripts += inside;
            counts.sent += calls - inside;
            counts.by_name.insert(name.clone(), calls);
        }
        counts
    }
}

/// Calls per command name over `nodes` so far, without the probe's own: INFO, and PUBSUB (the
/// scale bench's subscription counts). Read over connections made before the window, so that
/// opening them counts for nothing.
pub fn read(nodes: &mut [redis::Connection]) -> Result<BTreeMap<String, u64>, String> {
    let mut calls = BTreeMap::new();
    for node in nodes {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(node)
            .map_err(|e| format!("INFO commandstats: {e}"))?;
        for line in stats.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|line| line.split_once(":calls="))
            else {
                continue;
            };
            if name == "info" || name.starts_with("pubsub") {
                continue;
            }
            let count: u64 = rest
                .split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("unreadable commandstats line {line:?}"))?;
            *calls.entry(name.to_owned()).or_default() += count;
        }
    }
    Ok(calls)
}
