//! One server, one vote: the check, once connected, that no two members of a `Redlock` reach the
//! same Redis server under different addresses.
//!
//! `Redlock::connect` refuses two entries with one host and port before any I/O, but aliases
//! pass that check: `localhost` and `127.0.0.1`, a DNS name and its address, two seeds of one
//! Redis Cluster. Such a server would count twice towards every quorum: with three members, it
//! alone would decide. So each member's connection, when it is made, tells the server it reached
//! by the `run_id` of `INFO server` (a cluster member: the run_ids of all its masters), in the
//! round trip that already asks the version, and registers it here. A member whose server is
//! already registered by another member that was accepted is refused: no request of a lock is
//! sent on its connection (`Reconnecting::send_for`), and each reports
//! [`SameServer`](crate::NodeErrorKind::SameServer), a refusal. The operator's questions
//! (`status`, `doctor`) still reach it.
//!
//! **At most one member per server counts.** Registration and the verdict happen under one lock,
//! before the connection is used; an accepted member's entry stays until that member registers
//! a new connection, so two accepted entries never share a run_id, and a member only sends on a
//! connection whose verdict was to accept. Which of two aliases is accepted is the one whose
//! connection was made first; the other stays refused until the first one reconnects to another
//! server. A restarted server has a new run_id: whichever alias reconnects first is accepted, and
//! the other's connection, to the old run, is already dead.
//!
//! Not checked: a node that refuses `INFO` (the least-privilege ACL user of the README) tells no
//! run_id, and connections the caller built (`Redlock::new`) are not registered. `redmutex
//! doctor`'s `distinct` check reports what this one cannot see.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::NodeErrorKind;

/// What the members of one `Redlock` reached: shared by their connections.
#[derive(Debug)]
pub(crate) struct Servers {
    /// Each member's address for messages (without credentials), in order.
    addresses: Vec<String>,
    entries: Mutex<Vec<Entry>>,
}

/// What a member's latest connection reached.
#[derive(Debug, Default, Clone)]
struct Entry {
    run_ids: Vec<Box<str>>,
    accepted: bool,
}

/// A member's place in its [`Servers`].
#[derive(Debug, Clone)]
pub(crate) struct Seat {
    servers: Arc<Servers>,
    index: usize,
}

/// Why a member is refused: the member it shares a server with, for its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SameServer {
    /// The accepted member, counted from 1 as an operator lists them.
    pub(crate) entry: usize,
    pub(crate) address: String,
    /// The shared run_id, shortened.
    pub(crate) run_id: String,
}

impl Servers {
    /// The seats of members at `addresses`, in order.
    pub(crate) fn seats(addresses: Vec<String>) -> Vec<Seat> {
        let count = addresses.len();
        let servers = Arc::new(Servers {
            addresses,
            entries: Mutex::new(vec![Entry::default(); count]),
        });
        (0..count)
            .map(|index| Seat {
                servers: Arc::clone(&servers),
                index,
            })
            .collect()
    }
}

impl Seat {
    /// A new connection of this member reached the servers with `run_ids` (empty when the node
    /// did not tell): `None` if it may be used, else the accepted member it shares a server with.
    pub(crate) fn register(&self, run_ids: &[Box<str>]) -> Option<SameServer> {
        let servers = &self.servers;
        let mut entries = servers
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let shared = entries.iter().enumerate().find_map(|(other, entry)| {
            let shared = entry
                .run_ids
                .iter()
                .find(|id| run_ids.contains(id))
                .filter(|_| other != self.index && entry.accepted)?;
            Some((other, shared.clone()))
        });
        entries[self.index] = Entry {
            run_ids: run_ids.to_vec(),
            accepted: shared.is_none(),
        };
        let (other, run_id) = shared?;
        let same = SameServer {
            entry: other + 1,
            address: servers.addresses[other].clone(),
            run_id: run_id.chars().take(8).collect(),
        };
        // Said once per connection, not per call: the operator's list of nodes is to be fixed.
        tracing::warn!(
            member = self.index + 1,
            address = %servers.addresses[self.index],
            "{}",
            same.error()
        );
        Some(same)
    }
}

impl SameServer {
    pub(crate) fn error(&self) -> NodeErrorKind {
        NodeErrorKind::SameServer {
            entry: self.entry,
            address: self.address.clone(),
            run_id: self.run_id.clone(),
        }
    }
}

/// The `run_id` field of `INFO server`'s text, if it shows one.
pub(crate) fn run_id(info: &str) -> Option<Box<str>> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(Box::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<Box<str>> {
        ids.iter().map(|&id| Box::from(id)).collect()
    }

    fn seats(count: usize) -> Vec<Seat> {
        Servers::seats((1..=count).map(|n| format!("redis://h{n}:6379")).collect())
    }

    #[test]
    fn the_second_member_to_reach_a_server_is_refused() {
        let seats = seats(3);
        assert_eq!(seats[1].register(&ids(&["aaaa"])), None);
        assert_eq!(seats[2].register(&ids(&["bbbb"])), None);
        let refused = seats[0].register(&ids(&["aaaa"])).expect("an alias");
        assert_eq!(refused.entry, 2);
        assert_eq!(refused.address, "redis://h2:6379");
        // Reconnecting to the same server changes nothing: the accepted one keeps its seat.
        assert!(seats[0].register(&ids(&["aaaa"])).is_some());
        assert_eq!(seats[1].register(&ids(&["aaaa"])), None);
    }

    #[test]
    fn a_refused_member_blocks_nobody() {
        let seats = seats(2);
        assert_eq!(seats[0].register(&ids(&["aaaa"])), None);
        assert!(seats[1].register(&ids(&["aaaa"])).is_some());
        // The accepted one reconnects to the same server: still accepted, not refused by the
        // refused alias's entry.
        assert_eq!(seats[0].register(&ids(&["aaaa"])), None);
    }

    #[test]
    fn a_restarted_server_goes_to_whichever_alias_comes_back_first() {
        let seats = seats(2);
        assert_eq!(seats[0].register(&ids(&["old"])), None);
        assert!(seats[1].register(&ids(&["old"])).is_some());
        assert_eq!(seats[1].register(&ids(&["new"])), None);
        assert!(seats[0].register(&ids(&["new"])).is_some());
    }

    #[test]
    fn clusters_share_a_server_when_any_master_is_shared() {
        let seats = seats(3);
        assert_eq!(seats[0].register(&ids(&["m1", "m2", "m3"])), None);
        assert_eq!(seats[1].register(&ids(&["s1"])), None);
        // After a failover another seed sees one new master among the old ones.
        let refused = seats[2]
            .register(&ids(&["m4", "m2", "m3"]))
            .expect("one cluster");
        assert_eq!((refused.entry, refused.run_id.as_str()), (1, "m2"));
    }

    #[test]
    fn a_server_that_tells_no_run_id_is_not_judged() {
        let seats = seats(2);
        assert_eq!(seats[0].register(&[]), None);
        assert_eq!(seats[1].register(&[]), None);
    }

    #[test]
    fn run_ids_are_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:3f2a1b2c4d5e\r\ntcp_port:7000\r\n";
        assert_eq!(run_id(info).as_deref(), Some("3f2a1b2c4d5e"));
        assert_eq!(run_id("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(run_id("# Server\r\n"), None);
    }
}
