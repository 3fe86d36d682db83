//! `redmutex elect`, with real nodes and real candidate processes.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use redmutex_testenv::Cluster;

use crate::support::{eventually, redmutex, run};

/// A candidate that, once it leads, appends `<id> <epoch>` to `log` and then waits.
fn candidate(cluster: &Cluster, name: &str, id: &str, log: &Path) -> Child {
    let script = format!(
        r#"echo "$REDMUTEX_ID $REDMUTEX_EPOCH" >> '{}'; exec sleep 600"#,
        log.display()
    );
    redmutex(cluster)
        .args([
            "elect", "--id", id, "--expiry", "1s", name, "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("redmutex starts")
}

/// The `<id> <epoch>` lines of `log`.
fn terms(log: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(id, epoch)| (id.to_owned(), epoch.parse().expect("an epoch")))
        .collect()
}

#[test]
fn a_standby_takes_over_when_the_leader_process_is_killed() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("terms");
    let mut candidates: Vec<(String, Child)> = ["a", "b"]
        .into_iter()
        .map(|id| (id.to_owned(), candidate(&cluster, "el:cli", id, &log)))
        .collect();
    eventually("a leader runs the command", || terms(&log).len() == 1);
    std::thread::sleep(Duration::from_secs(2)); // two leases: the standby stays one
    let first = terms(&log);
    assert_eq!(first.len(), 1, "{first:?}");
    let (leader, epoch) = first[0].clone();

    // `status` names the leader.
    let status = run(redmutex(&cluster), &["status", "el:cli"]);
    assert!(
        status
            .stdout
            .contains(&format!("leader {leader} (epoch {epoch})")),
        "{status:?}"
    );
    let json = run(redmutex(&cluster), &["status", "--json", "el:cli"]);
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(json["leader"]["identity"], leader.as_str());
    assert_eq!(json["leader"]["epoch"], epoch);

    let index = candidates.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, mut killed) = candidates.remove(index);
    killed.kill().unwrap(); // SIGKILL: the command dies with it, the lease runs out
    killed.wait().unwrap();
    eventually("the standby leads", || terms(&log).len() == 2);
    let second = terms(&log)[1].clone();
    assert_ne!(second.0, leader);
    assert!(second.1 > epoch, "{epoch} then {}", second.1);
    for (_, mut child) in candidates {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn exit_codes_are_run_s() {
    let cluster = Cluster::start(3);
    let elect = |args: &[&str]| {
        let mut all = vec!["elect", "--id", "a", "el:codes", "--"];
        all.extend(args);
        run(redmutex(&cluster), &all)
    };
    let ran = elect(&[
        "sh",
        "-c",
        r#"test "$REDMUTEX_EPOCH" -gt 0 || exit 99; exit 7"#,
    ]);
    assert_eq!(ran.code, Some(7), "{ran:?}");
    let ran = elect(&["sh", "-c", "kill -TERM $$"]);
    assert_eq!(ran.code, Some(128 + 15), "{ran:?}");
    let ran = elect(&["/nonexistent/command"]);
    assert_eq!(ran.code, Some(127), "{ran:?}");
    // The leader resigned each time: the next one ran at once.
    let ran = run(
        redmutex(&cluster),
        &["elect", "--id", "", "el:codes", "--", "true"],
    );
    assert_eq!(ran.code, Some(64), "{ran:?}");
}

/// With `--restart`, a leader whose command ended campaigns again: each run gets a greater
/// epoch.
#[test]
fn restart_campaigns_again_after_the_command_ends() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("terms");
    let script = format!(
        r#"echo "$REDMUTEX_ID $REDMUTEX_EPOCH" >> '{}'"#,
        log.display()
    );
    let mut child = redmutex(&cluster)
        .args([
            "elect",
            "--restart",
            "--id",
            "a",
            "el:restart",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("three terms", || terms(&log).len() >= 3);
    child.kill().unwrap();
    child.wait().unwrap();
    let epochs: Vec<u64> = terms(&log).into_iter().map(|(_, epoch)| epoch).collect();
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
}

/// A signal passed on to COMMAND ends `elect --restart` too: it exits as COMMAND did, and does
/// not campaign again.
#[test]
fn a_signal_ends_restarting() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("terms");
    let script = format!(
        r#"echo "$REDMUTEX_ID $REDMUTEX_EPOCH" >> '{}'; exec sleep 600"#,
        log.display()
    );
    let mut child = Reaped(
        redmutex(&cluster)
            .args([
                "elect",
                "--restart",
                "--id",
                "a",
                "el:signal",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    eventually("a term", || terms(&log).len() == 1);
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut status = None;
    eventually("redmutex exits", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.and_then(|s| s.code()), Some(128 + 15));
    assert_eq!(terms(&log).len(), 1, "campaigned again after the signal");
}

/// A child killed and reaped when the test ends, passed or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
