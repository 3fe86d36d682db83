//! The nemesis: faults at random from a seed, each recorded with when it began and ended. Most
//! come alone; two kinds put a node fault and a client fault together.
//!
//! At most one fault at a time makes a member forget locks it granted (a cluster master killed
//! or paused past the cluster's node timeout, whose replica takes over without the latest
//! writes): with four members and a quorum of three, one that forgets cannot admit a second
//! holder, two could. A standalone node restarted empty stays down longer than any lock's expiry,
//! so it forgets nothing that still counts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redmutex_testenv::{Mode, Node, RedisCluster};

use crate::BoxError;
use crate::client::{ACKED_NAMES, EXPIRY, NAMES};
use crate::history::{Event, monotonic};
use crate::processes::ClientProcess;
use crate::record::Recorder;

/// The client slot that is never killed, so that one client lives through the whole run and its
/// memory can be compared between the first and the last minute.
const LONG_LIVED: usize = 0;

pub struct Nemesis<'a> {
    nodes: &'a redmutex_testenv::Cluster,
    member: &'a RedisCluster,
    clients: &'a mut [ClientProcess],
    recorder: Recorder,
    rng: StdRng,
    /// When the last fault of the cluster member ended: the next waits for the cluster's masters
    /// to vote again (they vote on a shard at most once per twice the node timeout).
    cluster_calm: Option<Instant>,
    /// Faults injected, by kind.
    pub counts: BTreeMap<&'static str, u64>,
}

impl<'a> Nemesis<'a> {
    pub fn new(
        nodes: &'a redmutex_testenv::Cluster,
        member: &'a RedisCluster,
        clients: &'a mut [ClientProcess],
        recorder: Recorder,
        seed: u64,
    ) -> Nemesis<'a> {
        Nemesis {
            nodes,
            member,
            clients,
            recorder,
            rng: StdRng::seed_from_u64(seed),
            cluster_calm: None,
            counts: BTreeMap::new(),
        }
    }

    /// Injects faults until `deadline` (CLOCK_MONOTONIC nanoseconds).
    pub fn run_until(&mut self, deadline: u64) -> Result<(), BoxError> {
        loop {
            let quiet = Duration::from_millis(self.rng.random_range(200..1500));
            std::thread::sleep(quiet);
            if monotonic() >= deadline {
                return Ok(());
            }
            self.one()?;
        }
    }

    fn one(&mut self) -> Result<(), BoxError> {
        let node = self.rng.random_range(0..self.nodes.len());
        let slot = self.rng.random_range(0..self.clients.len());
        let lasting = Duration::from_millis(self.rng.random_range(100..2500));
        let choice = self.rng.random_range(0..15u32);
        // Drawn for every fault, so that the sequence a seed gives does not depend on the kinds.
        let pick = self.rng.random_range(0..1000usize);
        let start = monotonic();
        let (kind, targets) = match choice {
            0 => {
                // Empty on its return, so it stays down longer than any lock's expiry (the
                // delayed restart Redlock needs without persistence).
                let node_ref = self.nodes.node(node);
                let down = EXPIRY * 2 + lasting;
                if !node_ref.restart_after(down).wait() {
                    return Err(format!("node {node} did not come back").into());
                }
                ("restart-node", vec![format!("node-{node}")])
            }
            1 => {
                // With its data, as a node with persistence: back at once.
                self.nodes.node(node).restart_keeping_data();
                ("restart-node-kept", vec![format!("node-{node}")])
            }
            2 => {
                let node_ref = self.nodes.node(node);
                node_ref.pause();
                std::thread::sleep(lasting);
                node_ref.resume();
                ("pause-node", vec![format!("node-{node}")])
            }
            3 => {
                self.partition(node, Mode::Blackhole);
                std::thread::sleep(lasting);
                self.partition(node, Mode::Pass);
                ("partition-node", vec![format!("node-{node}")])
            }
            4 => {
                let client = &mut self.clients[slot];
                client.pause()?;
                std::thread::sleep(lasting);
                client.resume()?;
                ("pause-client", vec![client.name.clone()])
            }
            5 => {
                let slot = self.killable(slot);
                let killed = self.clients[slot].kill_and_replace()?;
                ("kill-client", vec![killed])
            }
            6 => {
                let delay = Duration::from_millis(self.rng.random_range(5..200));
                self.link(slot, node, Mode::Delay(delay), lasting);
                ("delay-link", vec![self.link_name(slot, node)])
            }
            7 => {
                self.link(slot, node, Mode::Blackhole, lasting);
                ("cut-link", vec![self.link_name(slot, node)])
            }
            8 => {
                self.link(slot, node, Mode::Reset, Duration::from_millis(50));
                ("reset-link", vec![self.link_name(slot, node)])
            }
            9 => {
                // Two at once: a node frozen while a client is.
                let node_ref = self.nodes.node(node);
                node_ref.pause();
                self.clients[slot].pause()?;
                std::thread::sleep(lasting);
                self.clients[slot].resume()?;
                node_ref.resume();
                let client = self.clients[slot].name.clone();
                (
                    "pause-node+pause-client",
                    vec![format!("node-{node}"), client],
                )
            }
            10 => {
                // Two at once: a node cut off from every client while a client is frozen.
                self.partition(node, Mode::Blackhole);
                self.clients[slot].pause()?;
                std::thread::sleep(lasting);
                self.clients[slot].resume()?;
                self.partition(node, Mode::Pass);
                let client = self.clients[slot].name.clone();
                (
                    "partition-node+pause-client",
                    vec![format!("node-{node}"), client],
                )
            }
            _ => return self.cluster_fault(choice, pick, lasting),
        };
        self.record(kind, targets, start);
        Ok(())
    }

    /// A fault of the cluster member, after the cluster has been calm for long enough.
    fn cluster_fault(
        &mut self,
        choice: u32,
        pick: usize,
        lasting: Duration,
    ) -> Result<(), BoxError> {
        if let Some(calm) = self.cluster_calm {
            let wait = self.member.node_timeout() * 2 + Duration::from_millis(500);
            std::thread::sleep((calm + wait).saturating_duration_since(Instant::now()));
        }
        let start = monotonic();
        let member = self.member;
        let masters = member.masters();
        let master = masters[pick % masters.len()];
        // Each master has its replica back by the end of every cluster fault (`wait_ok` waits
        // for it to be in sync); without one, its master is paused instead.
        let replica = member.replicas_of(master).first().copied();
        let choice = if replica.is_none() { 14 } else { choice };
        let (kind, target) = match (choice, replica) {
            (11, Some(replica)) => {
                // CLUSTER FAILOVER: the replica takes over once it has every write.
                member.failover(replica);
                ("cluster-failover", port_name("replica", replica))
            }
            (12, _) => {
                // One name's slot (and every key of the name, which share it) to another master.
                let names: Vec<&str> = NAMES.iter().chain(&ACKED_NAMES).copied().collect();
                let name = names[pick % names.len()];
                let slot = redmutex_testenv::key_slot(name);
                let from = member.master_of_slot(slot).port();
                let others: Vec<&Node> = masters
                    .iter()
                    .copied()
                    .filter(|m| m.port() != from)
                    .collect();
                let to = others[pick % others.len()];
                member.migrate_slot(slot, to);
                (
                    "cluster-migrate-slot",
                    format!("{name} (slot {slot}) to {}", to.port()),
                )
            }
            (13, Some(replica)) => {
                // A master dies and its replica takes over at once, without the writes it had
                // not received; the master comes back empty (as a replica) after the expiry.
                let target = port_name("master", master);
                master.kill();
                member.takeover(replica);
                if !master.restart_after(EXPIRY * 2 + lasting).wait() {
                    return Err(format!("{target} did not come back").into());
                }
                member.wait_ok();
                ("cluster-kill-master", target)
            }
            _ => {
                // Past the node timeout (2 s), its replica may take over meanwhile.
                master.pause();
                std::thread::sleep(lasting);
                master.resume();
                member.wait_ok();
                ("cluster-pause-master", port_name("master", master))
            }
        };
        self.record(kind, vec![target], start);
        self.cluster_calm = Some(Instant::now());
        Ok(())
    }

    fn record(&mut self, kind: &'static str, targets: Vec<String>, start: u64) {
        let end = monotonic();
        for target in targets {
            self.recorder.record(&Event::Fault {
                kind: kind.to_owned(),
                target,
                start,
                end,
            });
        }
        *self.counts.entry(kind).or_default() += 1;
    }

    /// `slot`, or the next one if it is the client that is never killed.
    fn killable(&self, slot: usize) -> usize {
        if slot == LONG_LIVED {
            (slot + 1) % self.clients.len()
        } else {
            slot
        }
    }

    fn link_name(&self, slot: usize, node: usize) -> String {
        format!("{}->node-{node}", self.clients[slot].name)
    }

    fn link(&self, slot: usize, node: usize, mode: Mode, lasting: Duration) {
        let proxies = &self.clients[slot].proxies;
        proxies.set_mode(&[node], mode);
        std::thread::sleep(lasting);
        proxies.set_mode(&[node], Mode::Pass);
    }

    /// Every client's link to `node` (the proxies stay with the slot across kills).
    fn partition(&self, node: usize, mode: Mode) {
        for client in self.clients.iter() {
            client.proxies.set_mode(&[node], mode);
        }
    }
}

fn port_name(role: &str, node: &Node) -> String {
    format!("cluster {role} {}", node.port())
}
