//! The nemesis: faults at random from a seed, one at a time, each recorded with when it began
//! and ended.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::BoxError;
use crate::client::EXPIRY;
use crate::history::{Event, monotonic};
use crate::processes::ClientProcess;
use crate::record::Recorder;

pub struct Nemesis<'a> {
    nodes: &'a redmutex_testenv::Cluster,
    clients: &'a mut [ClientProcess],
    recorder: Recorder,
    rng: StdRng,
    /// Faults injected, by kind.
    pub counts: BTreeMap<&'static str, u64>,
}

impl<'a> Nemesis<'a> {
    pub fn new(
        nodes: &'a redmutex_testenv::Cluster,
        clients: &'a mut [ClientProcess],
        recorder: Recorder,
        seed: u64,
    ) -> Nemesis<'a> {
        Nemesis {
            nodes,
            clients,
            recorder,
            rng: StdRng::seed_from_u64(seed),
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
        let start = monotonic();
        let (kind, target) = match self.rng.random_range(0..7u32) {
            0 => {
                // Empty on its return, so it stays down longer than any lock's expiry (the
                // delayed restart Redlock needs without persistence).
                let node_ref = self.nodes.node(node);
                let down = EXPIRY * 2 + lasting;
                if !node_ref.restart_after(down).wait() {
                    return Err(format!("node {node} did not come back").into());
                }
                ("restart-node", format!("node-{node}"))
            }
            1 => {
                let node_ref = self.nodes.node(node);
                node_ref.pause();
                std::thread::sleep(lasting);
                node_ref.resume();
                ("pause-node", format!("node-{node}"))
            }
            2 => {
                let client = &mut self.clients[slot];
                client.pause()?;
                std::thread::sleep(lasting);
                client.resume()?;
                ("pause-client", client.name.clone())
            }
            3 => {
                let killed = self.clients[slot].kill_and_replace()?;
                ("kill-client", killed)
            }
            4 => {
                let delay = Duration::from_millis(self.rng.random_range(5..200));
                self.link(slot, node, redmutex_testenv::Mode::Delay(delay), lasting);
                (
                    "delay-link",
                    format!("{}->node-{node}", self.clients[slot].name),
                )
            }
            5 => {
                self.link(slot, node, redmutex_testenv::Mode::Blackhole, lasting);
                (
                    "cut-link",
                    format!("{}->node-{node}", self.clients[slot].name),
                )
            }
            _ => {
                self.link(
                    slot,
                    node,
                    redmutex_testenv::Mode::Reset,
                    Duration::from_millis(50),
                );
                (
                    "reset-link",
                    format!("{}->node-{node}", self.clients[slot].name),
                )
            }
        };
        self.recorder.record(&Event::Fault {
            kind: kind.to_owned(),
            target,
            start,
            end: monotonic(),
        });
        *self.counts.entry(kind).or_default() += 1;
        Ok(())
    }

    fn link(&self, slot: usize, node: usize, mode: redmutex_testenv::Mode, lasting: Duration) {
        let proxies = &self.clients[slot].proxies;
        proxies.set_mode(&[node], mode);
        std::thread::sleep(lasting);
        proxies.set_mode(&[node], redmutex_testenv::Mode::Pass);
    }
}
