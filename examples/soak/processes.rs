//! The client processes: this program again, with `--client`, each reaching the nodes through
//! proxies of its own so that the nemesis can delay or cut off one client's links alone.

use std::path::PathBuf;
use std::process::{Child, Command};

use rustix::process::{Pid, Signal, kill_process};

use crate::BoxError;
use crate::history::Nanos;

/// What every client process is told, whatever its slot.
#[derive(Debug, Clone)]
pub struct Run {
    /// The Redis Cluster member, as one `connect` entry.
    pub cluster: String,
    /// Whether the clients also lock on the cluster member alone, with replica acks.
    pub acks: bool,
    /// The resources' node.
    pub store: String,
    /// Where the histories go.
    pub dir: PathBuf,
    pub deadline: Nanos,
    pub seed: u64,
}

/// One client slot: the process now running in it (a killed one is replaced by the next
/// generation), and its proxies.
pub struct ClientProcess {
    pub slot: usize,
    pub generation: usize,
    pub name: String,
    child: Option<Child>,
    pub proxies: redmutex_testenv::Proxies,
    run: Run,
}

impl ClientProcess {
    pub fn spawn(
        slot: usize,
        proxies: redmutex_testenv::Proxies,
        run: Run,
    ) -> Result<ClientProcess, BoxError> {
        let mut process = ClientProcess {
            slot,
            generation: 0,
            name: String::new(),
            child: None,
            proxies,
            run,
        };
        process.start()?;
        Ok(process)
    }

    fn start(&mut self) -> Result<(), BoxError> {
        self.name = format!("client-{}-{}", self.slot, self.generation);
        let run = &self.run;
        let history = run.dir.join(format!("{}.jsonl", self.name));
        let seed = run.seed ^ ((self.slot as u64) << 32) ^ self.generation as u64;
        let child = Command::new(std::env::current_exe()?)
            .arg("--client")
            .arg(&self.name)
            .arg(history)
            .arg(self.proxies.urls().join(","))
            .arg(&run.cluster)
            .arg(if run.acks { "acks" } else { "no-acks" })
            .arg(&run.store)
            .arg(run.deadline.to_string())
            .arg(seed.to_string())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("started in spawn")
    }

    /// SIGKILL, and a new process in the slot; returns the killed process's name.
    pub fn kill_and_replace(&mut self) -> Result<String, BoxError> {
        let killed = self.name.clone();
        self.child().kill()?;
        self.child().wait()?;
        self.generation += 1;
        self.start()?;
        Ok(killed)
    }

    pub fn pause(&mut self) -> Result<(), BoxError> {
        Ok(kill_process(Pid::from_child(self.child()), Signal::STOP)?)
    }

    pub fn resume(&mut self) -> Result<(), BoxError> {
        Ok(kill_process(Pid::from_child(self.child()), Signal::CONT)?)
    }

    /// Waits up to `grace` for the process to end on its own; kills it otherwise and says so.
    pub fn finish(&mut self, grace: std::time::Duration) -> Result<bool, BoxError> {
        let until = std::time::Instant::now() + grace;
        loop {
            if self.child().try_wait()?.is_some() {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                self.child().kill()?;
                self.child().wait()?;
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
