//! Helpers shared by the command's tests: the binary, run against a testenv cluster.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use redmutex_testenv::Cluster;

/// `redmutex` with `REDMUTEX_NODES` set to the cluster's nodes.
pub fn redmutex(cluster: &Cluster) -> Command {
    redmutex_with_nodes(&cluster.urls().join(","))
}

/// `redmutex` with `REDMUTEX_NODES` set to `nodes`.
pub fn redmutex_with_nodes(nodes: &str) -> Command {
    let mut command = bare();
    command.env("REDMUTEX_NODES", nodes);
    command
}

/// `redmutex` without nodes.
pub fn bare() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    command.env_remove("REDMUTEX_NODES").stdin(Stdio::null());
    command
}

/// What a finished run said and returned.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Everything printed, for checks that something never appears.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `command` to its end with `args`.
pub fn run(mut command: Command, args: &[&str]) -> Ran {
    let Output {
        status,
        stdout,
        stderr,
    } = command.args(args).output().expect("redmutex starts");
    let ran = Ran {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert!(!ran.stderr.contains("panicked"), "{ran:?}");
    ran
}

/// The running nodes where `name` exists.
pub fn present(cluster: &Cluster, name: &str) -> Vec<usize> {
    (0..cluster.len())
        .filter(|&i| cluster.node(i).is_running() && cluster.node(i).exists(name))
        .collect()
}

/// Waits (up to 10 s) until `condition` holds.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
