//! An operator's view of degraded nodes and slips: the command says what is wrong and what to do
//! about it, with an exit code of its own.

use std::io::Read;
use std::process::Stdio;

use redmutex_testenv::Cluster;

use crate::support::{bare, eventually, present, redmutex, redmutex_with_nodes, run};

const SECRET: &str = "correct-horse-battery-staple";

/// One server listed twice would count twice (and, with the third node down, a run would wait
/// on itself for ever): refused at once, naming both entries, counted from 1.
#[test]
fn one_server_listed_twice_is_refused_at_once() {
    let cluster = Cluster::start(2);
    let urls = cluster.urls();
    let first = urls[0].replace("redis://", &format!("redis://:{SECRET}@"));
    let nodes = format!("{first},{},{}", urls[1], urls[0]);
    let ran = run(redmutex_with_nodes(&nodes), &["run", "job", "--", "true"]);
    assert_eq!(ran.code, Some(64), "{ran:?}");
    assert!(
        ran.stderr.contains("entry 1 (redis://***@127.0.0.1:")
            && ran.stderr.contains(&format!("entry 3 ({})", urls[0]))
            && ran.stderr.contains("same server"),
        "{ran:?}"
    );
    assert!(!ran.all().contains(SECRET), "{ran:?}");
}

/// Two names of one server (`localhost`, `127.0.0.1`) pass the check before connecting; once
/// connected, the server's `run_id` tells them apart: refused, both entries named, and COMMAND
/// never runs (nor does a leader's).
#[test]
fn two_names_of_one_server_are_refused_once_connected() {
    let cluster = Cluster::start(2);
    let (one, other) = (cluster.node(0).port(), cluster.node(1).port());
    let nodes = format!(
        "redis://:{SECRET}@127.0.0.1:{one},redis://:{SECRET}@localhost:{one},\
         redis://127.0.0.1:{other}"
    );
    cluster.node(0).config_set("requirepass", SECRET);
    for args in [
        &["run", "job", "--", "echo", "COMMAND ran"][..],
        &["elect", "--id", "a", "job", "--", "echo", "COMMAND ran"],
    ] {
        let ran = run(redmutex_with_nodes(&nodes), args);
        assert_eq!(ran.code, Some(64), "{ran:?}");
        assert!(
            ran.stderr.contains("reach the same server")
                && ran
                    .stderr
                    .contains(&format!("(redis://***@127.0.0.1:{one})"))
                && ran
                    .stderr
                    .contains(&format!("(redis://***@localhost:{one})")),
            "{ran:?}"
        );
        assert!(!ran.all().contains("COMMAND ran"), "{ran:?}");
        assert!(!ran.all().contains(SECRET), "{ran:?}");
    }
    // Released on the way out: a run with distinct members takes it at once.
    let nodes = format!("redis://:{SECRET}@127.0.0.1:{one},redis://127.0.0.1:{other}");
    let ran = run(
        redmutex_with_nodes(&nodes),
        &["run", "--no-wait", "job", "--", "true"],
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

#[test]
fn an_entry_without_its_scheme_is_named_with_the_form_to_use() {
    let ran = run(
        redmutex_with_nodes("redis://127.0.0.1:1,127.0.0.1:7101"),
        &["status", "job"],
    );
    assert_eq!(ran.code, Some(64), "{ran:?}");
    assert!(
        ran.stderr.contains("--nodes: entry 2 (127.0.0.1:7101)")
            && ran.stderr.contains("redis://host:port"),
        "{ran:?}"
    );
}

#[test]
fn a_command_without_dashes_gets_the_hint() {
    for args in [
        &["run", "job1", "echo", "hi"][..],
        &["elect", "--id", "a", "job1", "echo", "hi"],
    ] {
        let ran = run(redmutex_with_nodes("redis://127.0.0.1:1"), args);
        assert_eq!(ran.code, Some(64), "{ran:?}");
        assert!(
            ran.stderr.contains("unexpected argument")
                && ran.stderr.contains("hint: put `--` before the command"),
            "{ran:?}"
        );
    }
    // Other slips get clap's message alone.
    let ran = run(bare(), &["status", "--nope", "job"]);
    assert_eq!(ran.code, Some(64), "{ran:?}");
    assert!(!ran.stderr.contains("hint: put"), "{ran:?}");
}

#[test]
fn no_quorum_names_each_member_and_the_doctor() {
    let nodes = format!("redis://127.0.0.1:1,redis://:{SECRET}@127.0.0.1:2,redis://127.0.0.1:3");
    let ran = run(
        redmutex_with_nodes(&nodes),
        &["run", "--no-wait", "job", "--", "true"],
    );
    assert_eq!(ran.code, Some(69), "{ran:?}");
    assert!(
        ran.stderr.contains("redis://127.0.0.1:1: ")
            && ran.stderr.contains("redis://***@127.0.0.1:2: ")
            && ran.stderr.contains("run `redmutex doctor`"),
        "{ran:?}"
    );
    assert!(!ran.stderr.contains("node 0"), "{ran:?}");
    assert!(!ran.all().contains(SECRET), "{ran:?}");
}

/// Sets a password on every node of `cluster`.
fn require_password(cluster: &Cluster, password: &str) {
    for node in cluster.nodes() {
        node.config_set("requirepass", password);
    }
}

/// A wrong password (or none) on a quorum is named as an authentication refusal, exit 77, by
/// every command that talks to the nodes.
#[test]
fn refused_credentials_on_a_quorum_exit_77() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    require_password(&cluster, SECRET);
    let wrong: Vec<String> = urls
        .iter()
        .map(|url| url.replace("redis://", "redis://:not-it@"))
        .collect();
    for nodes in [urls.join(","), wrong.join(",")] {
        for args in [
            &["run", "job", "--", "true"][..],
            &["elect", "--id", "a", "job", "--", "true"],
            &["status", "job"],
            &["unlock", "--force", "job"],
            &["doctor"],
        ] {
            let ran = run(redmutex_with_nodes(&nodes), args);
            assert_eq!(ran.code, Some(77), "{args:?}: {ran:?}");
            assert!(
                ran.stderr
                    .contains("authentication refused by 3 of 3 nodes"),
                "{args:?}: {ran:?}"
            );
            assert!(!ran.all().contains("not-it"), "{ran:?}");
        }
    }
    let ran = run(redmutex_with_nodes(&wrong.join(",")), &["doctor"]);
    assert!(
        ran.stdout
            .lines()
            .any(|row| row.contains("reachable") && row.contains("authentication refused")),
        "{ran:?}"
    );
}

/// COMMAND gets the fingerprint `status` shows for its lock, and `--verbose` prints it.
#[test]
fn the_command_knows_its_fingerprint_as_status_shows_it() {
    let cluster = Cluster::start(3);
    let script = format!(
        r#"echo "$REDMUTEX_FINGERPRINT"; '{}' status --json fp:job"#,
        env!("CARGO_BIN_EXE_redmutex")
    );
    let ran = run(
        redmutex(&cluster),
        &["run", "--verbose", "fp:job", "--", "sh", "-c", &script],
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let mut lines = ran.stdout.lines();
    let fingerprint = lines.next().unwrap_or_default().to_owned();
    assert_eq!(fingerprint.len(), 12, "{ran:?}");
    let status: serde_json::Value = serde_json::from_str(lines.next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {ran:?}"));
    assert_eq!(status["fingerprint"], fingerprint.as_str(), "{ran:?}");
    assert!(
        ran.stderr
            .contains(&format!("fp:job: acquired, fingerprint {fingerprint}")),
        "{ran:?}"
    );
}

/// A forced unlock under a running command is named as what it was, not as an expiry; and the
/// time left before SIGKILL is rounded.
#[test]
fn a_forced_unlock_under_a_run_is_named_as_a_deletion() {
    let cluster = Cluster::start(3);
    let mut child = redmutex(&cluster)
        .args([
            "run",
            "--expiry",
            "3s",
            "--grace",
            "2s",
            "forced:job",
            "--",
            "sleep",
            "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("redmutex starts");
    eventually("the lock is held", || {
        present(&cluster, "forced:job").len() == 3
    });
    let ran = run(redmutex(&cluster), &["unlock", "--force", "forced:job"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let status = child.wait().expect("redmutex exits");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("the lock was deleted on 3 of 3 nodes before it expired (forced unlock?)"),
        "{stderr}"
    );
    let follows = stderr
        .split("SIGKILL follows in ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{stderr}"));
    let decimals = follows
        .trim_end_matches(['m', 's'])
        .split_once('.')
        .map_or(0, |(_, decimals)| decimals.len());
    assert!(decimals <= 2, "{follows}: {stderr}");
}

/// A member down while the lock is taken is named, with why; `--quiet` says nothing.
#[test]
fn a_member_down_at_the_start_is_warned_about() {
    let cluster = Cluster::start(2);
    let nodes = format!("{},redis://127.0.0.1:1/", cluster.urls().join(","));
    let ran = run(
        redmutex_with_nodes(&nodes),
        &["run", "warn:job", "--", "true"],
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stderr
            .contains("warning: warn:job: not held on redis://127.0.0.1:1/: Connection refused")
            && ran.stderr.contains("it holds on 2 of 3 members"),
        "{ran:?}"
    );
    for quiet in [
        &["run", "--quiet", "warn:job", "--", "true"][..],
        &["elect", "--quiet", "--id", "a", "warn:job", "--", "true"],
    ] {
        let ran = run(redmutex_with_nodes(&nodes), quiet);
        assert_eq!(ran.code, Some(0), "{ran:?}");
        assert_eq!(ran.stderr, "", "{ran:?}");
    }
}

/// A member that fails while the command runs is named when a renewal misses it, and again
/// when it is back.
#[test]
fn a_member_that_fails_and_comes_back_during_a_run_is_named() {
    let cluster = Cluster::start(3);
    let mut child = redmutex(&cluster)
        .args(["run", "--expiry", "1s", "flaky:job", "--", "sleep", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("redmutex starts");
    let lines = lines_of(child.stderr.take().expect("piped"));
    eventually("the lock is held", || {
        present(&cluster, "flaky:job").len() == 3
    });
    cluster.node(2).kill();
    let failed = wait_for_line(&lines, "a member failed");
    assert!(failed.contains(&cluster.node(2).url()), "{failed}");
    cluster.node(2).restart();
    let back = wait_for_line(&lines, "a member is back");
    assert!(back.contains(&cluster.node(2).url()), "{back}");
    let _ = terminate(&child);
    let _ = child.wait();
}

/// Ends `child` (redmutex) with SIGTERM, which it passes on to its command.
fn terminate(child: &std::process::Child) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status()
}

/// Every line of `stderr`, as it comes.
fn lines_of(stderr: std::process::ChildStderr) -> std::sync::mpsc::Receiver<String> {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// The first line from `lines` that contains `text` (within 10 s).
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, text: &str) -> String {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(line) if line.contains(text) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {text:?}; saw {seen:#?}"),
        }
    }
}

/// A run that waits says for whom, and how long the holder's lock has left.
#[tokio::test]
async fn a_waiting_run_names_the_holder() {
    let cluster = Cluster::start(3);
    let redlock = redmutex::Redlock::connect(cluster.urls()).await.unwrap();
    let lock = redlock
        .new_mutex("wait:job")
        .with_expiry(std::time::Duration::from_secs(30))
        .lock()
        .await
        .unwrap();
    let ran = run(
        redmutex(&cluster),
        &["run", "--wait", "1s", "wait:job", "--", "true"],
    );
    assert_eq!(ran.code, Some(75), "{ran:?}");
    let line = format!("waiting for wait:job: held by {}, ", lock.fingerprint());
    assert!(
        ran.stderr.contains(&line) && ran.stderr.contains("s left"),
        "{ran:?}"
    );
    let ran = run(
        redmutex(&cluster),
        &["run", "--quiet", "--wait", "1s", "wait:job", "--", "true"],
    );
    assert_eq!(ran.code, Some(75), "{ran:?}");
    assert!(!ran.stderr.contains("waiting for"), "{ran:?}");
    lock.unlock().await.unwrap();
}

/// A standby says who leads while it waits.
#[tokio::test]
async fn a_standby_names_the_leader() {
    let cluster = Cluster::start(3);
    let redlock = redmutex::Redlock::connect(cluster.urls()).await.unwrap();
    let leadership = redlock
        .new_election("standby:job")
        .campaign("host-a")
        .await
        .unwrap();
    let mut child = redmutex(&cluster)
        .args(["elect", "--id", "host-b", "standby:job", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("redmutex starts");
    let lines = lines_of(child.stderr.take().expect("piped"));
    let line = wait_for_line(&lines, "waiting for standby:job");
    assert!(
        line.contains(&format!("led by host-a (epoch {})", leadership.epoch())),
        "{line}"
    );
    let _ = terminate(&child);
    let _ = child.wait();
}

/// With one member far away, doctor says that a lock waits for it by default and what returns
/// at the quorum; with all near, it says nothing of it.
#[test]
fn doctor_names_a_far_member_and_fail_fast() {
    let cluster = Cluster::start(3);
    let proxies = cluster.proxies();
    proxies.set_mode(
        &[2],
        redmutex_testenv::Mode::Delay(std::time::Duration::from_millis(10)),
    );
    let urls = cluster.urls();
    let far = proxies.urls()[2].clone();
    let nodes = format!("{},{},{far}", urls[0], urls[1]);
    let ran = run(redmutex_with_nodes(&nodes), &["doctor"]);
    assert!(
        ran.stdout.contains(&format!(
            "round trips: the farthest member, {far}, answers in"
        )) && ran.stdout.contains("--fail-fast"),
        "{ran:?}"
    );
    let ran = run(redmutex_with_nodes(&nodes), &["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    assert_eq!(
        report["round_trips_ms"].as_array().map(Vec::len),
        Some(3),
        "{ran:?}"
    );
    assert!(report["advice"].is_string(), "{ran:?}");
    for command in ["run", "elect"] {
        let mut args = vec![command, "--fail-fast"];
        if command == "elect" {
            args.extend(["--id", "a"]);
        }
        args.extend(["far:job", "--", "true"]);
        let ran = run(redmutex_with_nodes(&nodes), &args);
        assert_eq!(ran.code, Some(0), "{ran:?}");
    }

    let ran = run(redmutex(&cluster), &["doctor"]);
    assert!(!ran.stdout.contains("round trips:"), "{ran:?}");
}

/// `--hold-at-least`: a job that ends at once leaves its lock to expire, taken with an expiry of
/// at least D, so a second host whose cron fires a moment later does not run it again.
#[test]
fn hold_at_least_leaves_the_lock_to_expire() {
    let cluster = Cluster::start(3);
    let args = [
        "run",
        "--no-wait",
        "--expiry",
        "1s",
        "--hold-at-least",
        "20s",
        "cron:job",
    ];
    let first = run(redmutex(&cluster), &[&args[..], &["--", "true"]].concat());
    assert_eq!(first.code, Some(0), "{first:?}");
    assert_eq!(present(&cluster, "cron:job").len(), 3, "{first:?}");
    // Taken for 20 s, not the 1 s expiry: nothing renews it, the nodes keep it.
    assert!(cluster.node(0).pttl("cron:job") > 10_000, "{first:?}");
    let second = run(redmutex(&cluster), &[&args[..], &["--", "true"]].concat());
    assert_eq!(second.code, Some(75), "{second:?}");

    // Without it, the lock is released when the job ends.
    let plain = ["run", "--no-wait", "cron:other", "--", "true"];
    assert_eq!(run(redmutex(&cluster), &plain).code, Some(0));
    assert!(present(&cluster, "cron:other").is_empty());
}

/// A natural election name that only ends like a key redmutex keeps works.
#[test]
fn an_election_named_app_leader_works() {
    let cluster = Cluster::start(3);
    let ran = run(
        redmutex(&cluster),
        &["elect", "--id", "a", "app:leader", "--", "true"],
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
}

/// `unlock --purge` removes what redmutex keeps for a retired name (its fencing counter, an
/// election's record), and refuses while the name is held.
#[tokio::test]
async fn purge_removes_the_kept_keys_and_refuses_while_held() {
    let cluster = Cluster::start(3);
    let fenced = ["run", "--fencing", "retired:job", "--", "true"];
    assert_eq!(run(redmutex(&cluster), &fenced).code, Some(0));
    let elected = ["elect", "--id", "a", "retired:job", "--", "true"];
    assert_eq!(run(redmutex(&cluster), &elected).code, Some(0));
    for key in ["{retired:job}:fence", "{retired:job}:leader"] {
        assert_eq!(present(&cluster, key).len(), 3, "{key}");
    }

    let redlock = redmutex::Redlock::connect(cluster.urls()).await.unwrap();
    let lock = redlock.new_mutex("retired:job").lock().await.unwrap();
    let ran = run(redmutex(&cluster), &["unlock", "--purge", "retired:job"]);
    assert_eq!(ran.code, Some(75), "{ran:?}");
    assert!(
        ran.stderr.contains("held or waited for on 3 of 3 nodes"),
        "{ran:?}"
    );
    assert_eq!(present(&cluster, "{retired:job}:fence").len(), 3);
    lock.unlock().await.unwrap();

    let ran = run(redmutex(&cluster), &["unlock", "--purge", "retired:job"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        ran.stdout.contains("retired:job: purged, 6 keys deleted"),
        "{ran:?}"
    );
    for key in ["{retired:job}:fence", "{retired:job}:leader"] {
        assert!(present(&cluster, key).is_empty(), "{key}");
    }
}

/// A cluster member given by several seeds in --nodes (`url|url`) runs while one seed is down,
/// with no warning: the member holds the lock.
#[test]
fn a_cluster_member_with_a_dead_seed_still_holds() {
    let standalone = Cluster::start(2);
    let cluster = redmutex_testenv::RedisCluster::start(3, 0);
    let nodes = format!(
        "{},redis://127.0.0.1:1/|{}",
        standalone.urls().join(","),
        cluster.urls()[1]
    );
    let ran = run(
        redmutex_with_nodes(&nodes),
        &["run", "seeds:job", "--", "true"],
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(!ran.stderr.contains("warning"), "{ran:?}");
}
