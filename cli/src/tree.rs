//! COMMAND's process tree: its process group, and on Linux every descendant that left the group.
//!
//! COMMAND leads its own process group, which every process it starts joins unless it leaves
//! (`setsid`, `setpgid`): `kill(-group)` reaches them all at once, the processes that a shell
//! script runs in the foreground and its background jobs alike. On Linux the process that
//! started COMMAND is also a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): a descendant whose
//! parent dies is handed to it rather than to init. So a process that left the group comes back
//! as its child once whatever started it is gone, and signalling the group and every child
//! (`strays`), again as orphans arrive, reaches the whole tree, double-forked daemons included.
//! Only a process that something else adopts escapes: a descendant that is itself a subreaper
//! keeps its orphans until it dies (and then they come here), and processes that are not
//! descendants at all (a service that a client asks to start something) were never ours.

use std::io;

use rustix::io::Errno;
use rustix::process::{
    Pid, Signal, WaitId, WaitIdOptions, WaitOptions, WaitStatus, kill_process, kill_process_group,
    test_kill_process_group, wait, waitid,
};

/// Makes this process the parent of its descendants' orphans, where the system can.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn adopt_orphans() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Makes this process the parent of its descendants' orphans, where the system can: not here.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn adopt_orphans() -> io::Result<()> {
    Ok(())
}

/// COMMAND's tree, seen from its parent.
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    group: Pid,
}

impl Tree {
    /// The tree whose process group is `group` (COMMAND's pid).
    pub fn new(group: Pid) -> Tree {
        Tree { group }
    }

    /// Sends `signal` to the process group; one that is gone already is no error.
    pub fn signal_group(&self, signal: Signal) {
        let _ = kill_process_group(self.group, signal);
    }

    /// Sends `signal` to the process group and to every child of this process outside it.
    pub fn signal_all(&self, signal: Signal) {
        self.signal_group(signal);
        for stray in self.strays() {
            let _ = kill_process(stray, signal);
        }
    }

    /// Whether anything of the tree is left: a member of the group, or a child of this process
    /// (exited children must have been reaped first).
    pub fn is_alive(&self) -> bool {
        let group = !matches!(test_kill_process_group(self.group), Err(Errno::SRCH));
        group || has_children()
    }

    /// This process's children outside the group: orphans adopted as subreaper.
    fn strays(&self) -> Vec<Pid> {
        children()
            .into_iter()
            .filter(|&child| rustix::process::getpgid(Some(child)).ok() != Some(self.group))
            .collect()
    }
}

/// Every child that has exited, reaped, without waiting.
pub fn reap() -> Vec<(Pid, WaitStatus)> {
    let mut reaped = Vec::new();
    // `wait`, any child: `waitpid(None)` would be only those of this process's own group.
    while let Ok(Some(exited)) = wait(WaitOptions::NOHANG) {
        reaped.push(exited);
    }
    reaped
}

/// Whether this process has any child, running or exited.
fn has_children() -> bool {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    !matches!(waitid(WaitId::All, options), Err(Errno::CHILD))
}

/// This process's children, from `/proc`: each thread's `children` list where the kernel keeps
/// one, else every process's parent.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn children() -> Vec<Pid> {
    use std::fs;

    let me = rustix::process::getpid();
    let numbers = |text: &str| -> Vec<Pid> {
        text.split_whitespace()
            .filter_map(|number| number.parse().ok())
            .filter_map(Pid::from_raw)
            .collect()
    };
    let task = format!("/proc/{}/task", me.as_raw_nonzero());
    if let Ok(threads) = fs::read_dir(&task) {
        let mut found = Vec::new();
        let mut listed = false;
        for thread in threads.flatten() {
            if let Ok(text) = fs::read_to_string(thread.path().join("children")) {
                listed = true;
                found.extend(numbers(&text));
            }
        }
        if listed {
            return found;
        }
    }
    let Ok(processes) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter_map(Pid::from_raw)
        .filter(|&pid| parent(pid) == Some(me))
        .collect()
}

/// A process's parent, from `/proc/PID/stat`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn parent(pid: Pid) -> Option<Pid> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    // After the command name, which may hold spaces and parentheses: " S ppid ...".
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    Pid::from_raw(fields.nth(1)?.parse().ok()?)
}

/// This process's children: without a subreaper none outside the group ever come back here.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn children() -> Vec<Pid> {
    Vec::new()
}
