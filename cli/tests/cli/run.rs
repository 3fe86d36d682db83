//! `redmutex run`, with real nodes and real child processes.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redmutex::Redlock;
use redmutex_testenv::Cluster;
use rustix::process::{Pid, Signal, kill_process};

use crate::support::{eventually, present, redmutex, run};

/// A file the command creates when it runs, to tell whether it ever started.
fn marker(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("ran");
    let script = format!("echo ran > '{}'", path.display());
    (path, script)
}

async fn holder(cluster: &Cluster, name: &str) -> redmutex::Lock {
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(30))
        .with_wake_on_release(true)
        .lock()
        .await
        .unwrap()
}

#[test]
fn the_commands_status_comes_back_and_the_lock_is_gone_afterwards() {
    let cluster = Cluster::start(3);
    let mut child = redmutex(&cluster)
        .args(["run", "job", "--", "sh", "-c"])
        .arg(r#"test "$REDMUTEX_NAME" = job || exit 99; read line; exit 7"#)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // While the command runs, every node holds the lock, with the expiry of the default 8 s.
    eventually("the lock is held", || present(&cluster, "job").len() == 3);
    let pttl = cluster.node(0).pttl("job");
    assert!(pttl > 0 && pttl <= 8000, "{pttl}");
    drop(child.stdin.take()); // `read` ends
    assert_eq!(child.wait().unwrap().code(), Some(7));
    assert!(present(&cluster, "job").is_empty());

    // A command that dies of a signal: 128 + its number, as shells say.
    let ran = run(
        redmutex(&cluster),
        &["run", "job", "--", "sh", "-c", "kill -TERM $$"],
    );
    assert_eq!(ran.code, Some(128 + 15), "{ran:?}");
    assert!(present(&cluster, "job").is_empty());
}

#[tokio::test]
async fn no_wait_on_a_held_name_exits_75_without_running_the_command() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ran_file, script) = marker(dir.path());
    let held = holder(&cluster, "busy").await;
    let ran = run(
        redmutex(&cluster),
        &["run", "--no-wait", "busy", "--", "sh", "-c", &script],
    );
    assert_eq!(ran.code, Some(75), "{ran:?}");
    assert!(ran.stderr.contains("busy: held elsewhere"), "{ran:?}");
    assert!(!ran_file.exists());
    // The holder's lock is untouched.
    assert_eq!(present(&cluster, "busy").len(), 3);
    held.unlock().await.unwrap();
}

#[test]
fn a_majority_of_nodes_down_exits_69_without_running_the_command() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ran_file, script) = marker(dir.path());
    cluster.node(1).kill();
    cluster.node(2).kill();
    for mode in [&["--no-wait"][..], &[][..], &["--wait", "5s"][..]] {
        let mut args = vec!["run"];
        args.extend_from_slice(mode);
        args.extend_from_slice(&["down", "--", "sh", "-c", &script]);
        let ran = run(redmutex(&cluster), &args);
        assert_eq!(ran.code, Some(69), "{mode:?}: {ran:?}");
        assert!(ran.stderr.contains("no quorum"), "{ran:?}");
    }
    assert!(!ran_file.exists());
    assert!(present(&cluster, "down").is_empty());
}

#[tokio::test]
async fn wait_gets_the_lock_once_the_holder_releases_it() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ran_file, script) = marker(dir.path());
    let held = holder(&cluster, "queue").await;
    let mut waiting = redmutex(&cluster)
        .args(["run", "--wait", "20s", "queue", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    // It waits: subscribed to the release notices on every node, and the command not started.
    eventually("the waiter listens", || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.subscribers("redmutex:released:queue") == 1)
    });
    assert!(!ran_file.exists());
    assert!(waiting.try_wait().unwrap().is_none());
    let released = Instant::now();
    held.unlock().await.unwrap();
    let status = tokio::task::spawn_blocking(move || waiting.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(ran_file.exists());
    // The release notice woke it, not its fallback delay (a second at most) nor the 20 s.
    assert!(released.elapsed() < Duration::from_secs(10));
    assert!(present(&cluster, "queue").is_empty());
}

#[tokio::test]
async fn wait_gives_up_with_75_when_the_lock_stays_held() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ran_file, script) = marker(dir.path());
    let held = holder(&cluster, "stuck").await;
    let started = Instant::now();
    let ran = tokio::task::spawn_blocking({
        let command = redmutex(&cluster);
        move || {
            run(
                command,
                &["run", "--wait", "700ms", "stuck", "--", "sh", "-c", &script],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(ran.code, Some(75), "{ran:?}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert!(
        ran.stderr.contains("still held after waiting 700ms"),
        "{ran:?}"
    );
    assert!(!ran_file.exists());
    // Only the holder's value is there: nothing of the waiter's attempts was left behind.
    for node in cluster.nodes() {
        assert_eq!(node.get("stuck").as_deref(), Some(held.value()));
    }
    held.unlock().await.unwrap();
}

#[test]
fn fencing_tokens_grow_from_run_to_run() {
    let cluster = Cluster::start(3);
    let print = ["sh", "-c", "echo \"token=${REDMUTEX_TOKEN-none}\""];
    let token = |fencing: bool| {
        let mut args = vec!["run"];
        if fencing {
            args.push("--fencing");
        }
        args.push("fenced");
        args.push("--");
        args.extend_from_slice(&print);
        let ran = run(redmutex(&cluster), &args);
        assert_eq!(ran.code, Some(0), "{ran:?}");
        ran.stdout.trim().strip_prefix("token=").unwrap().to_owned()
    };
    let tokens: Vec<u64> = (0..3).map(|_| token(true).parse().unwrap()).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(token(false), "none");
}

/// Makes a named pipe: the command holds its write end open, so the test's read end sees EOF
/// the moment every process of the command is gone.
fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("alive");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    path
}

/// Reads the pipe in a thread: reports once the command opened it, then the instant of EOF.
fn watch_pipe(path: PathBuf) -> (mpsc::Receiver<()>, mpsc::Receiver<Instant>) {
    let (opened_tx, opened) = mpsc::channel();
    let (dead_tx, dead) = mpsc::channel();
    thread::spawn(move || {
        let mut pipe = File::open(&path).unwrap(); // blocks until the command opens its end
        let _ = opened_tx.send(());
        let mut buffer = [0u8; 16];
        while pipe.read(&mut buffer).unwrap() > 0 {}
        let _ = dead_tx.send(Instant::now());
    });
    (opened, dead)
}

/// Starts `redmutex run` with a 2 s expiry and a 30 s grace over `script`, and waits until the
/// script runs (it opens the pipe).
fn start_lost_lock_run(
    cluster: &Cluster,
    name: &str,
    script: &str,
) -> (Child, mpsc::Receiver<Instant>) {
    start_lost_lock_run_with_grace(cluster, name, "30s", script)
}

/// [`start_lost_lock_run`] with another `--grace`.
fn start_lost_lock_run_with_grace(
    cluster: &Cluster,
    name: &str,
    grace: &str,
    script: &str,
) -> (Child, mpsc::Receiver<Instant>) {
    let dir = tempfile::tempdir().unwrap().keep();
    let pipe = fifo(&dir);
    let (opened, dead) = watch_pipe(pipe.clone());
    let script = script.replace("PIPE", &pipe.display().to_string());
    let child = redmutex(cluster)
        .args([
            "run", "--expiry", "2s", "--grace", grace, name, "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    opened
        .recv_timeout(Duration::from_secs(10))
        .expect("the command starts");
    (child, dead)
}

/// Pauses a majority of the 3 nodes; returns when both are stopped.
fn pause_majority(cluster: &Cluster) -> Instant {
    cluster.node(0).pause();
    cluster.node(1).pause();
    Instant::now()
}

fn finish(cluster: &Cluster, mut child: Child) -> (Option<i32>, String) {
    let status = child.wait().unwrap();
    cluster.node(0).resume();
    cluster.node(1).resume();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

#[test]
fn a_lost_lock_kills_even_a_command_that_ignores_sigterm_before_the_validity_ends() {
    let cluster = Cluster::start(3);
    // Ignores SIGTERM (and so do the `sleep`s it starts, which inherit that): only SIGKILL ends it.
    let script = r#"trap "" TERM; exec 3>"PIPE"; while :; do sleep 0.05; done"#;
    let (child, dead) = start_lost_lock_run(&cluster, "lost", script);
    // Into the lock, but before its first extension (a third of the expiry).
    thread::sleep(Duration::from_millis(100));
    let paused = pause_majority(&cluster);
    let died = dead
        .recv_timeout(Duration::from_secs(40))
        .expect("the command ends");
    let (code, stderr) = finish(&cluster, child);
    // Every extension that could still succeed started before the pause, so the lock's validity
    // ended less than one expiry after it. The 30 s grace plays no part.
    let lived = died.duration_since(paused);
    assert!(
        lived <= Duration::from_secs(2),
        "the command ran {lived:?} after the pause, past the lock's validity\n{stderr}"
    );
    assert_eq!(code, Some(70), "{stderr}");
    assert!(stderr.contains("lost the lock lost"), "{stderr}");
}

#[test]
fn a_lost_lock_sends_sigterm_at_once() {
    let cluster = Cluster::start(3);
    let script = r#"trap "exit 0" TERM; exec 3>"PIPE"; while :; do sleep 0.05; done"#;
    let (child, dead) = start_lost_lock_run(&cluster, "lost-term", script);
    let paused = pause_majority(&cluster);
    let died = dead
        .recv_timeout(Duration::from_secs(40))
        .expect("the command ends");
    let (code, stderr) = finish(&cluster, child);
    assert!(
        died.duration_since(paused) <= Duration::from_secs(2),
        "{stderr}"
    );
    // The command exited 0 on its own, but it was cut short: the lock was lost.
    assert_eq!(code, Some(70), "{stderr}");
    assert!(stderr.contains("an extension failed"), "{stderr}");
}

/// A grace longer than the clock can count from now (the parser takes up to billions of hours)
/// lasts until the lock's validity ends, like any long grace: the command's SIGTERM handler
/// gets its time, rather than a SIGKILL at once.
#[test]
fn a_grace_beyond_the_clock_still_lets_the_command_finish() {
    let cluster = Cluster::start(3);
    let done = tempfile::tempdir().unwrap().keep().join("done");
    let script = r#"trap 'sleep 0.2; echo done > "DONE"; exit 0' TERM; exec 3>"PIPE"; while :; do sleep 0.05; done"#
        .replace("DONE", &done.display().to_string());
    let huge = format!("{}h", u64::MAX / 3600);
    let (child, dead) = start_lost_lock_run_with_grace(&cluster, "lost-grace", &huge, &script);
    pause_majority(&cluster);
    dead.recv_timeout(Duration::from_secs(40))
        .expect("the command ends");
    let (code, stderr) = finish(&cluster, child);
    assert_eq!(code, Some(70), "{stderr}");
    assert!(
        done.exists(),
        "the command was killed before its SIGTERM handler ended\n{stderr}"
    );
}

#[test]
fn sigterm_to_redmutex_reaches_the_command_and_the_lock_is_released_after_it_exits() {
    let cluster = Cluster::start(3);
    let script =
        r#"trap 'echo got TERM; sleep 0.5; exit 3' TERM; echo ready; while :; do sleep 0.05; done"#;
    let mut child = redmutex(&cluster)
        .args(["run", "term", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Read in a thread, so that a missing line fails the test instead of hanging it.
    let (line_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = line_tx.send(line.unwrap());
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(10)).expect("a line");
    assert_eq!(next(), "ready");
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    assert_eq!(next(), "got TERM");
    // The command is still finishing: the lock stays until it has exited.
    assert_eq!(present(&cluster, "term").len(), 3);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert!(present(&cluster, "term").is_empty());
}

#[test]
fn a_command_that_cannot_start_exits_127_and_releases_the_lock() {
    let cluster = Cluster::start(3);
    let ran = run(
        redmutex(&cluster),
        &["run", "missing", "--", "/nonexistent/command"],
    );
    assert_eq!(ran.code, Some(127), "{ran:?}");
    assert!(
        ran.stderr.contains("cannot run /nonexistent/command"),
        "{ran:?}"
    );
    assert!(present(&cluster, "missing").is_empty());
}

#[tokio::test]
async fn a_signal_while_waiting_ends_redmutex_without_running_the_command() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ran_file, script) = marker(dir.path());
    let held = holder(&cluster, "patience").await;
    let mut waiting = redmutex(&cluster)
        .args(["run", "patience", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    eventually("the waiter listens", || {
        cluster
            .nodes()
            .iter()
            .all(|node| node.subscribers("redmutex:released:patience") == 1)
    });
    let pid = Pid::from_raw(i32::try_from(waiting.id()).unwrap()).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    let status = tokio::task::spawn_blocking(move || waiting.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(128 + 2));
    assert!(!ran_file.exists());
    for node in cluster.nodes() {
        assert_eq!(node.get("patience").as_deref(), Some(held.value()));
    }
    held.unlock().await.unwrap();
}

#[test]
fn sigkill_of_redmutex_takes_the_command_with_it() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let pipe = fifo(dir.path());
    let (opened, dead) = watch_pipe(pipe.clone());
    // `exec` keeps the shell's process: `sleep` is redmutex's child itself, holding the pipe.
    let script = format!(r#"exec 3>"{}"; exec sleep 60"#, pipe.display());
    let mut child = redmutex(&cluster)
        .args(["run", "orphan", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    opened
        .recv_timeout(Duration::from_secs(10))
        .expect("the command starts");
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, Signal::KILL).unwrap();
    child.wait().unwrap();
    // Unless the enforcer ended it, the sleep would hold the pipe for its whole minute.
    dead.recv_timeout(Duration::from_secs(10))
        .expect("the command ends with redmutex, not 60 s later");
}

#[tokio::test]
async fn metrics_file_holds_the_runs_outcome_and_the_librarys_series() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redmutex.prom");
    let file = path.to_str().unwrap();
    let ran = run(
        redmutex(&cluster),
        &[
            "--metrics-file",
            file,
            "run",
            "nightly-job",
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
    );
    assert_eq!(ran.code, Some(7), "{ran:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    for series in [
        "redmutex_run_total{outcome=\"7\"} 1",
        "redmutex_attempts_total{primitive=\"mutex\",outcome=\"acquired\"} 1",
        "redmutex_acquire_seconds_bucket{primitive=\"mutex\",outcome=\"acquired\",le=",
        "redmutex_held_seconds_count{primitive=\"mutex\",end=\"unlocked\"} 1",
        "redmutex_held{primitive=\"mutex\"} 0",
        "redmutex_node_requests_total{node=\"2\",outcome=\"ok\"}",
        "redmutex_node_seconds_bucket{node=\"0\",le=",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    assert!(!text.contains("nightly-job"), "a lock name in:\n{text}");
    // Renamed into place: nothing else is left in the directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // A run that never started its command says why.
    let held = holder(&cluster, "nightly-job").await;
    let ran = run(
        redmutex(&cluster),
        &[
            "--metrics-file",
            file,
            "run",
            "--no-wait",
            "nightly-job",
            "--",
            "true",
        ],
    );
    assert_eq!(ran.code, Some(75), "{ran:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("redmutex_run_total{outcome=\"held\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("redmutex_attempts_total{primitive=\"mutex\",outcome=\"taken\"} 1"),
        "{text}"
    );
    held.unlock().await.unwrap();
}
