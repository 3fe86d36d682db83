//! COMMAND never outlives its lock, whatever happens to the `redmutex` process itself: stopped
//! (SIGSTOP), suspended by the terminal (SIGTSTP, SIGTTOU), killed (SIGKILL), for `run`,
//! `run --fencing` and `elect`; and when the enforcer that keeps the deadline is killed.
//!
//! Each scenario runs a first holder A whose COMMAND is a shell script: it starts an inner shell
//! in the foreground, whose loop appends `A loop N` lines to a journal while a background
//! subshell of it (a grandchild of the script) appends `A child N` lines. Once A is stopped or
//! killed, a second holder B takes the lock and appends `B start`, waits half a second, and
//! appends `B end`.
//!
//! The journal's order is the clock: every line is one `write(2)` to a file opened with
//! `O_APPEND`, and the kernel appends such writes one after another under the file's lock, so a
//! line's position is its place in one total order that every process shares. It needs no clock
//! that shells could read (`date +%s%N` is wall-clock time, which can step; `/proc/uptime` has
//! ten-millisecond steps, and two stamps inside one step could not be ordered). A line of A
//! after `B start` was written while B held the lock, or later: a violation either way.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redmutex_testenv::Cluster;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};

use crate::support::{eventually, present, redmutex, run};

/// A's COMMAND: records its process group (its own pid) and its parent, then runs the inner
/// shell in the foreground. Each writer stops by itself after a minute at most, so that a
/// survivor of a failed run does not write forever.
const WRITERS: &str = r#"echo $$ > "$GROUP_FILE"; echo $PPID > "$PARENT_FILE"
sh -c '( i=0; while [ $i -lt 3000 ]; do echo "A child $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done ) &
i=0; while [ $i -lt 3000 ]; do echo "A loop $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done'"#;

/// [`WRITERS`] whose grandchild leaves the process group and the session (`setsid`), as a
/// daemon does; `$CHILD` is its loop.
const STRAY_WRITERS: &str = r#"echo $$ > "$GROUP_FILE"; echo $PPID > "$PARENT_FILE"
sh -c 'setsid sh -c "$CHILD" & i=0; while [ $i -lt 3000 ]; do echo "A loop $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done'"#;

/// The stray's loop, which records its pid first.
const CHILD: &str = r#"echo $$ > "$STRAY_FILE"
i=0; while [ $i -lt 3000 ]; do echo "A child $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done"#;

/// B's COMMAND.
const SECOND: &str = r#"echo "B start" >> "$JOURNAL"; sleep 0.5; echo "B end" >> "$JOURNAL""#;

/// One scenario's files and the first holder's process, which it kills (with what is left of
/// COMMAND's process group) when dropped, passed or not.
struct Scenario {
    dir: PathBuf,
    first: Option<Child>,
}

impl Scenario {
    fn new() -> Scenario {
        Scenario {
            dir: tempfile::tempdir().unwrap().keep(),
            first: None,
        }
    }

    fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `redmutex` with the scenario's files in the environment COMMAND inherits, and its
    /// stderr going to `stderr-<label>` (a file, which no survivor can hold open the way it
    /// would a pipe).
    fn command(&self, cluster: &Cluster, label: &str) -> Command {
        let mut command = redmutex(cluster);
        command
            .env("JOURNAL", self.journal())
            .env("GROUP_FILE", self.file("group"))
            .env("PARENT_FILE", self.file("parent"))
            .env("STRAY_FILE", self.file("stray"))
            .env("CHILD", CHILD)
            .stdout(Stdio::null())
            .stderr(File::create(self.file(&format!("stderr-{label}"))).unwrap());
        command
    }

    /// Starts the first holder with `args` (up to `--`, the script follows) and waits until
    /// both of its writers have written.
    fn start_first(&mut self, cluster: &Cluster, args: &[&str], script: &str) {
        // A process group of its own, whose parent (this test) is in another group of the same
        // session, as a shell's job is: the kernel discards SIGTTOU (and SIGTSTP, SIGTTIN) sent to
        // a process of an orphaned group, which this test's group may be where it runs without a
        // terminal, and the first `redmutex` would never stop.
        let child = self
            .command(cluster, "first")
            .process_group(0)
            .args(args)
            .args(["--", "sh", "-c", script])
            .spawn()
            .unwrap();
        self.first = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let lines = self.lines();
            let written = |prefix: &str| lines.iter().filter(|l| l.starts_with(prefix)).count();
            if written("A loop") >= 3 && written("A child") >= 3 {
                return;
            }
            if Instant::now() >= deadline {
                let exited = self.first.as_mut().expect("started").try_wait().unwrap();
                let stderr = std::fs::read_to_string(self.file("stderr-first")).unwrap_or_default();
                panic!(
                    "timed out waiting until both writers of the first COMMAND write: {} loop and \
                     {} child lines; the first redmutex exited: {exited:?}; its stderr:\n{stderr}",
                    written("A loop"),
                    written("A child"),
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn first_pid(&self) -> Pid {
        let id = self.first.as_ref().expect("started").id();
        Pid::from_raw(i32::try_from(id).unwrap()).unwrap()
    }

    /// Sends `signal` to the first `redmutex` (not to COMMAND).
    fn signal_first(&self, signal: Signal) {
        kill_process(self.first_pid(), signal).unwrap();
    }

    /// Waits (up to 20 s) for the first `redmutex` to exit; its exit code and stderr.
    fn wait_first(&mut self) -> (Option<i32>, String) {
        let child = self.first.as_mut().expect("started");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the first redmutex did not exit");
            thread::sleep(Duration::from_millis(10));
        };
        (status.code(), self.stderr("first"))
    }

    fn stderr(&self, label: &str) -> String {
        std::fs::read_to_string(self.file(&format!("stderr-{label}"))).unwrap_or_default()
    }

    /// The pid written to `name` by the script.
    fn pid_in(&self, name: &str) -> Pid {
        let text = std::fs::read_to_string(self.file(name)).unwrap();
        Pid::from_raw(text.trim().parse().unwrap()).unwrap()
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.journal())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Runs the second holder `args` to its end; it must have run its COMMAND.
    fn second(&self, cluster: &Cluster, args: &[&str]) {
        let mut command = self.command(cluster, "second");
        command.args(args).args(["--", "sh", "-c", SECOND]);
        let ran = run(command, &[]);
        assert_eq!(ran.code, Some(0), "{}", self.stderr("second"));
    }

    /// No line of A's tree comes after `B start`: none was written while B held the lock, nor
    /// later. Waits a little first, for a survivor to show itself.
    fn assert_no_overlap(&self) {
        thread::sleep(Duration::from_millis(300));
        let lines = self.lines();
        let start = lines
            .iter()
            .position(|line| line == "B start")
            .expect("the second holder ran");
        assert!(lines.contains(&"B end".to_owned()), "{lines:?}");
        let before = &lines[..start];
        assert!(before.iter().any(|l| l.starts_with("A loop")), "{lines:?}");
        assert!(before.iter().any(|l| l.starts_with("A child")), "{lines:?}");
        let after: Vec<&String> = lines[start..]
            .iter()
            .filter(|line| line.starts_with('A'))
            .collect();
        assert!(
            after.is_empty(),
            "{} lines of the first COMMAND's tree after the second holder took the lock: {:?}",
            after.len(),
            &after[..after.len().min(5)]
        );
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if let Some(mut child) = self.first.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever a failed run left of COMMAND's group.
        if let Ok(text) = std::fs::read_to_string(self.file("group"))
            && let Some(group) = text.trim().parse().ok().and_then(Pid::from_raw)
        {
            let _ = kill_process_group(group, Signal::KILL);
        }
        if let Ok(text) = std::fs::read_to_string(self.file("stray"))
            && let Some(stray) = text.trim().parse().ok().and_then(Pid::from_raw)
        {
            let _ = kill_process(stray, Signal::KILL);
        }
    }
}

/// `run --expiry 1s` stopped by `signal` (not caught, or caught and passed on as a suspension):
/// COMMAND ends before the lock's validity does, and a SIGCONT to `redmutex` later does not
/// bring it back; `redmutex` then exits 70, the lock being lost.
fn stopped_run_loses_its_command(signal: Signal, script: &str) {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:stop";
    scenario.start_first(
        &cluster,
        &["run", "--expiry", "1s", "--grace", "30s", name],
        script,
    );
    scenario.signal_first(signal);
    scenario.second(&cluster, &["run", "--wait", "20s", "--expiry", "1s", name]);
    scenario.signal_first(Signal::CONT);
    let (code, stderr) = scenario.wait_first();
    scenario.assert_no_overlap();
    assert_eq!(code, Some(70), "{stderr}");
    assert!(stderr.contains("lost the lock enforce:stop"), "{stderr}");
}

#[test]
fn sigstop_of_redmutex_never_lets_command_run_past_the_lock() {
    stopped_run_loses_its_command(Signal::STOP, WRITERS);
}

#[test]
fn sigtstp_of_redmutex_never_lets_command_run_past_the_lock() {
    stopped_run_loses_its_command(Signal::TSTP, WRITERS);
}

#[test]
fn sigttou_of_redmutex_never_lets_command_run_past_the_lock() {
    stopped_run_loses_its_command(Signal::TTOU, WRITERS);
}

/// A COMMAND whose processes all ignore SIGTERM is killed all the same, by the lock's end.
#[test]
fn a_command_that_ignores_sigterm_is_killed_while_redmutex_is_stopped() {
    stopped_run_loses_its_command(Signal::STOP, &format!("trap '' TERM\n{WRITERS}"));
}

/// A process that left COMMAND's process group and session comes back to the enforcer as an
/// orphan once its parent is killed (the enforcer is a child subreaper), and is killed too.
#[test]
fn a_process_that_left_the_group_is_killed_too() {
    stopped_run_loses_its_command(Signal::STOP, STRAY_WRITERS);
}

/// What COMMAND leaves running when it exits goes before the lock is released.
#[test]
fn what_command_leaves_running_goes_before_the_lock_is_released() {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:leftover";
    let script = r#"echo $$ > "$GROUP_FILE"; echo $PPID > "$PARENT_FILE"
( i=0; while [ $i -lt 3000 ]; do echo "A child $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done ) &
setsid sh -c "$CHILD" &
i=0; while [ $i -lt 10 ]; do echo "A loop $i" >> "$JOURNAL"; i=$((i+1)); sleep 0.02; done"#;
    scenario.start_first(&cluster, &["run", "--expiry", "1s", name], script);
    let (code, stderr) = scenario.wait_first();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(present(&cluster, name).is_empty(), "{stderr}");
    let ended = scenario.lines().len();
    thread::sleep(Duration::from_millis(300));
    let lines = scenario.lines();
    assert_eq!(
        lines.len(),
        ended,
        "what the command left running wrote after the lock was released: {:?}",
        &lines[ended..]
    );
}

#[test]
fn sigkill_of_redmutex_run_fencing_kills_the_whole_command() {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:kill";
    scenario.start_first(
        &cluster,
        &["run", "--fencing", "--expiry", "1s", "--grace", "30s", name],
        WRITERS,
    );
    scenario.signal_first(Signal::KILL);
    scenario.second(
        &cluster,
        &["run", "--fencing", "--wait", "20s", "--expiry", "1s", name],
    );
    scenario.assert_no_overlap();
}

#[test]
fn sigkill_of_an_elect_leader_kills_the_whole_command() {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:elect";
    scenario.start_first(
        &cluster,
        &[
            "elect", "--id", "a", "--expiry", "1s", "--grace", "30s", name,
        ],
        WRITERS,
    );
    scenario.signal_first(Signal::KILL);
    scenario.second(&cluster, &["elect", "--id", "b", "--expiry", "1s", name]);
    scenario.assert_no_overlap();
}

/// Ctrl-Z suspends COMMAND's process group with `redmutex`, and `fg` (SIGCONT) resumes it while
/// the lock still holds.
#[test]
fn sigtstp_suspends_command_and_sigcont_resumes_it_while_the_lock_holds() {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:suspend";
    scenario.start_first(&cluster, &["run", "--expiry", "5s", name], WRITERS);
    let group = scenario.pid_in("group");
    scenario.signal_first(Signal::TSTP);
    eventually("redmutex and COMMAND's group are stopped", || {
        state(scenario.first_pid()) == Some('T')
            && !members(group).is_empty()
            && members(group).iter().all(|&pid| state(pid) == Some('T'))
    });
    let suspended = scenario.lines().len();
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        scenario.lines().len(),
        suspended,
        "COMMAND wrote while redmutex was suspended"
    );
    scenario.signal_first(Signal::CONT);
    eventually("COMMAND writes again", || {
        scenario.lines().len() > suspended + 4
    });
    // The lock held throughout: it is still there, and a SIGTERM ends the run as usual.
    assert_eq!(present(&cluster, name).len(), 3);
    scenario.signal_first(Signal::TERM);
    let (code, stderr) = scenario.wait_first();
    assert_eq!(code, Some(128 + 15), "{stderr}");
    assert!(present(&cluster, name).is_empty(), "{stderr}");
}

/// The enforcer killed: `redmutex` says so, kills COMMAND's group itself and releases the lock.
#[test]
fn a_killed_enforcer_ends_the_command_and_the_run_with_an_error() {
    let cluster = Cluster::start(3);
    let mut scenario = Scenario::new();
    let name = "enforce:enforcer";
    scenario.start_first(&cluster, &["run", "--expiry", "2s", name], WRITERS);
    // COMMAND's parent is the enforcer.
    let enforcer = scenario.pid_in("parent");
    kill_process(enforcer, Signal::KILL).unwrap();
    let (code, stderr) = scenario.wait_first();
    assert_eq!(code, Some(71), "{stderr}");
    assert!(stderr.contains("the enforcer"), "{stderr}");
    assert!(present(&cluster, name).is_empty(), "{stderr}");
    let ended = scenario.lines().len();
    thread::sleep(Duration::from_millis(300));
    assert_eq!(scenario.lines().len(), ended, "COMMAND ran on");
}

/// A process's state letter (`R`, `S`, `T`, ...), or none once it is gone.
fn state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    // After the command name, which may hold spaces and parentheses: " S ppid pgrp ...".
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The processes of the process group `group`.
fn members(group: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(Pid::from_raw)
        .filter(|&pid| pgrp(pid) == Some(group))
        .collect()
}

fn pgrp(pid: Pid) -> Option<Pid> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Pid::from_raw(fields.get(2)?.parse().ok()?)
}
