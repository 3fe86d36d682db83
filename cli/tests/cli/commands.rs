//! `redmutex status`, `unlock`, `doctor`, and bad input, with real nodes.

use std::time::Duration;

use redmutex::{Error, Redlock};
use redmutex_testenv::Cluster;
use serde_json::Value;

use crate::support::{bare, eventually, present, redmutex, redmutex_with_nodes, run};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn status_of_a_free_name() {
    let cluster = Cluster::start(3);
    let ran = run(redmutex(&cluster), &["status", "report"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.starts_with("report: free\n"), "{ran:?}");
    assert_eq!(ran.stdout.matches(" free").count(), 4, "{ran:?}");

    let ran = run(redmutex(&cluster), &["status", "--json", "report"]);
    let state = json(&ran.stdout);
    assert_eq!(state["name"], "report");
    assert_eq!(state["held"], false);
    assert!(state["ttl_ms"].is_null());
    let nodes = state["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for (index, node) in nodes.iter().enumerate() {
        assert_eq!(node["node"], index);
        assert_eq!(node["state"], "free");
        assert_eq!(node["address"], cluster.node(index).url());
    }
}

#[tokio::test]
async fn status_of_a_held_name_never_shows_the_value() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    let lock = redlock
        .new_mutex("report")
        .with_expiry(Duration::from_secs(20))
        .lock()
        .await
        .unwrap();
    let text = run(redmutex(&cluster), &["status", "report"]);
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(text.stdout.starts_with("report: held, ttl "), "{text:?}");
    assert!(
        text.stdout.contains("on 3 of 3 nodes, quorum 2"),
        "{text:?}"
    );

    let ran = run(redmutex(&cluster), &["status", "--json", "report"]);
    let state = json(&ran.stdout);
    assert_eq!(state["held"], true);
    let ttl = state["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 10_000 && ttl <= 20_000, "{ttl}");
    let fingerprint = state["fingerprint"].as_str().unwrap();
    for node in state["nodes"].as_array().unwrap() {
        assert_eq!(node["state"], "held");
        assert_eq!(node["fingerprint"], fingerprint);
    }
    for output in [text.all(), ran.all()] {
        assert!(!output.contains(lock.value()), "{output}");
    }
    lock.unlock().await.unwrap();
}

/// Readers leave a marker in the name's key, which `status` once showed as one holder's value.
#[tokio::test]
async fn status_of_a_name_readers_hold_counts_them() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    let rwlock = redlock
        .new_rwlock("report")
        .with_expiry(Duration::from_secs(20))
        .with_tries(1);
    let readers = [rwlock.read().await.unwrap(), rwlock.read().await.unwrap()];
    // A writer found them and waits: its mark refuses new readers.
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    let text = run(redmutex(&cluster), &["status", "report"]);
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(
        text.stdout.starts_with("report: held by 2 readers, ttl "),
        "{text:?}"
    );
    assert!(!text.stdout.contains("fingerprint"), "{text:?}");
    assert_eq!(text.stdout.matches("a writer waits").count(), 3, "{text:?}");

    let ran = run(redmutex(&cluster), &["status", "--json", "report"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let state = json(&ran.stdout);
    assert_eq!(state["held"], true);
    assert_eq!(state["kind"], "readers");
    assert_eq!(state["readers"], 2);
    assert!(state["fingerprint"].is_null());
    for node in state["nodes"].as_array().unwrap() {
        assert_eq!(node["state"], "readers");
        assert_eq!(node["readers"], 2);
        assert!(node["writer_waiting_ms"].as_u64().unwrap() > 0, "{node}");
    }
    for output in [text.all(), ran.all()] {
        assert!(
            readers.iter().all(|r| !output.contains(r.value())),
            "{output}"
        );
    }
}

/// A semaphore's name is a sorted set: `status` once met `GET`'s type error on every node and
/// said "no quorum" (exit 69).
#[tokio::test]
async fn status_of_a_name_a_semaphore_holds_shows_its_permits() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    let semaphore = redlock
        .new_semaphore("report", 3)
        .with_expiry(Duration::from_secs(20));
    let permits = [
        semaphore.acquire().await.unwrap(),
        semaphore.acquire().await.unwrap(),
    ];
    let text = run(redmutex(&cluster), &["status", "report"]);
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(
        text.stdout
            .starts_with("report: held by a semaphore, 2 of 3 permits, ttl "),
        "{text:?}"
    );
    assert!(text.stdout.contains("quorum 3"), "{text:?}");

    let ran = run(redmutex(&cluster), &["status", "--json", "report"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let state = json(&ran.stdout);
    assert_eq!(state["held"], true);
    assert_eq!(state["kind"], "semaphore");
    assert_eq!(
        (&state["permits_held"], &state["permits"]),
        (&2.into(), &3.into())
    );
    assert_eq!(state["quorum"], 3);
    for node in state["nodes"].as_array().unwrap() {
        assert_eq!(node["state"], "semaphore");
        assert_eq!(node["permits_held"], 2);
    }
    for output in [text.all(), ran.all()] {
        assert!(
            permits.iter().all(|p| !output.contains(p.value())),
            "{output}"
        );
    }

    let ran = run(redmutex(&cluster), &["unlock", "--force", "report"]);
    assert_eq!(ran.stdout, "report: deleted on 3 of 3 nodes\n", "{ran:?}");
    assert!(present(&cluster, "report").is_empty());
    assert!(matches!(permits[0].extend().await, Err(Error::Expired)));
}

#[tokio::test]
async fn unlock_force_frees_a_lock_held_by_another_process_whose_extend_then_fails() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::connect(cluster.urls()).await.unwrap();
    let lock = redlock
        .new_mutex("hung")
        .with_expiry(Duration::from_secs(20))
        .lock()
        .await
        .unwrap();

    // Refused without --force, with the reason.
    let ran = run(redmutex(&cluster), &["unlock", "hung"]);
    assert_eq!(ran.code, Some(64), "{ran:?}");
    assert!(ran.stderr.contains("without --force"), "{ran:?}");
    assert_eq!(present(&cluster, "hung").len(), 3);

    let ran = run(redmutex(&cluster), &["unlock", "--force", "hung"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(ran.stdout, "hung: deleted on 3 of 3 nodes\n");
    assert!(present(&cluster, "hung").is_empty());
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
}

#[test]
fn unlock_force_without_a_quorum_exits_69() {
    let cluster = Cluster::start(3);
    cluster.node(0).kill();
    cluster.node(1).kill();
    let ran = run(redmutex(&cluster), &["unlock", "--force", "x"]);
    assert_eq!(ran.code, Some(69), "{ran:?}");
    assert!(ran.stderr.contains("no quorum"), "{ran:?}");
}

/// The doctor's table rows for `node` and `check`.
fn row<'a>(table: &'a str, node: usize, check: &str) -> &'a str {
    table
        .lines()
        .find(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some(&node.to_string()) && words.nth(1) == Some(check)
        })
        .unwrap_or_else(|| panic!("no row for node {node} {check}:\n{table}"))
}

#[test]
fn doctor_passes_healthy_nodes() {
    let cluster = Cluster::start(3);
    let ran = run(redmutex(&cluster), &["doctor"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.starts_with("NODE  ADDRESS"), "{ran:?}");
    for node in 0..3 {
        let reachable = row(&ran.stdout, node, "reachable");
        assert!(
            reachable.contains(" pass ") && reachable.contains("PONG in"),
            "{ran:?}"
        );
        assert!(
            row(&ran.stdout, node, "persistence").contains(" warn "),
            "{ran:?}"
        );
    }
    assert!(
        ran.stdout
            .contains("no check failed: 3 of 3 nodes sound, a lock needs 2"),
        "{ran:?}"
    );

    let ran = run(redmutex(&cluster), &["doctor", "--json"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let report = json(&ran.stdout);
    assert_eq!(report["ok"], true);
    assert_eq!(report["checks"].as_array().unwrap().len(), 21);
}

#[test]
fn doctor_names_each_nodes_version_and_what_it_cannot_run() {
    let old = redmutex_testenv::release_binary(redmutex_testenv::Release::Redis6_2)
        .unwrap_or_else(|e| panic!("{e}"));
    let installed = redmutex_testenv::redis_server_binary().expect("redis-server");
    let cluster = Cluster::start_with([installed, old]);
    let ran = run(redmutex(&cluster), &["doctor"]);
    // Too old for some primitives is a warning: the node still serves the others.
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let new = row(&ran.stdout, 0, "version");
    assert!(
        new.contains(" pass ") && new.contains("Redis 7."),
        "{ran:?}"
    );
    let old = row(&ran.stdout, 1, "version");
    assert!(
        old.contains(" warn ")
            && old.contains(
                "Redis 6.2.14: read-write locks and semaphores need 7.0 or later; refused on \
                 this node"
            ),
        "{ran:?}"
    );
}

#[test]
fn doctor_fails_the_same_server_listed_twice() {
    let cluster = Cluster::start(2);
    let urls = cluster.urls();
    // The same server under a second name (one address twice is refused before any check).
    let alias = urls[0].replace("127.0.0.1", "localhost");
    let nodes = format!("{},{},{}", urls[0], urls[1], alias);
    let ran = run(redmutex_with_nodes(&nodes), &["doctor"]);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let row = row(&ran.stdout, 2, "distinct");
    assert!(
        row.contains(" fail ") && row.contains("same server as node 0"),
        "{ran:?}"
    );
}

#[test]
fn doctor_fails_a_replica_of_another_listed_node() {
    let cluster = Cluster::start(3);
    let master = cluster.node(0).port().to_string();
    let _: redis::Value = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&master)
        .query(&mut cluster.node(1).connection())
        .unwrap();
    eventually("the master lists its replica", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut cluster.node(0).connection())
            .unwrap();
        info.contains("slave0:")
    });
    let ran = run(redmutex(&cluster), &["doctor"]);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let replica = row(&ran.stdout, 1, "independent");
    assert!(
        replica.contains(" fail ")
            && replica.contains(&format!("replica of 127.0.0.1:{master} (node 0)")),
        "{ran:?}"
    );
    let master_row = row(&ran.stdout, 0, "independent");
    assert!(
        master_row.contains(" fail ") && master_row.contains("node 1"),
        "{ran:?}"
    );
    assert!(
        row(&ran.stdout, 2, "independent").contains(" pass "),
        "{ran:?}"
    );
}

#[test]
fn doctor_fails_maxmemory_with_allkeys_lru() {
    let cluster = Cluster::start(3);
    let _: redis::Value = redis::cmd("CONFIG")
        .arg(&[
            "SET",
            "maxmemory",
            "100mb",
            "maxmemory-policy",
            "allkeys-lru",
        ])
        .query(&mut cluster.node(2).connection())
        .unwrap();
    let ran = run(redmutex(&cluster), &["doctor"]);
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let row = row(&ran.stdout, 2, "eviction");
    assert!(
        row.contains(" fail ") && row.contains("allkeys-lru"),
        "{ran:?}"
    );
    let ran = run(redmutex(&cluster), &["doctor", "--json"]);
    assert_eq!(json(&ran.stdout)["ok"], false);
}

#[test]
fn bad_input_is_a_clear_usage_error() {
    let cluster = Cluster::start(1);
    let url = cluster.node(0).url();
    let cases: Vec<(Vec<String>, Option<&str>, &str)> = vec![
        (vec!["status".into(), "x".into()], None, "no nodes"),
        (
            vec!["status".into(), "x".into()],
            Some("not a url"),
            "not a valid Redis URL",
        ),
        (
            vec!["status".into(), "x".into()],
            Some("redis://:hunter2@127.0.0.1:notaport"),
            "redis://***@127.0.0.1:notaport",
        ),
        (
            vec![
                "--nodes".into(),
                "redis://:hunter2@127.0.0.1:notaport".into(),
                "status".into(),
                "x".into(),
            ],
            None,
            "not a valid Redis URL",
        ),
        // The password in a URL that lands where clap echoes it.
        (
            vec!["redis://:hunter2@host:1".into()],
            Some(&url),
            "redis://***@host:1",
        ),
        (
            vec!["status".into(), "".into()],
            Some(&url),
            "name: must not be empty",
        ),
        (
            vec!["run".into(), "".into(), "--".into(), "true".into()],
            Some(&url),
            "NAME must not be empty",
        ),
        (
            vec![
                "run".into(),
                "--wait".into(),
                "1s".into(),
                "--no-wait".into(),
                "x".into(),
                "--".into(),
                "true".into(),
            ],
            Some(&url),
            "cannot be used with",
        ),
        (vec!["run".into(), "x".into()], Some(&url), "<COMMAND>"),
        (
            vec!["run".into(), "x".into(), "--".into()],
            Some(&url),
            "<COMMAND>",
        ),
        (
            vec![
                "run".into(),
                "--expiry".into(),
                "8".into(),
                "x".into(),
                "--".into(),
                "true".into(),
            ],
            Some(&url),
            "500ms, 8s, 2m, 1h",
        ),
        (
            vec![
                "run".into(),
                "--expiry".into(),
                "0ms".into(),
                "x".into(),
                "--".into(),
                "true".into(),
            ],
            Some(&url),
            "expiry: must be between 1ms and 365 days",
        ),
        (
            vec!["unlock".into(), "x".into()],
            Some(&url),
            "without --force",
        ),
        (
            vec!["frobnicate".into()],
            Some(&url),
            "unrecognized subcommand",
        ),
    ];
    for (args, nodes, expected) in cases {
        let command = match nodes {
            Some(nodes) => redmutex_with_nodes(nodes),
            None => bare(),
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = run(command, &args);
        assert_eq!(ran.code, Some(64), "{args:?}: {ran:?}");
        assert!(ran.stderr.contains(expected), "{args:?}: {ran:?}");
        assert!(!ran.all().contains("hunter2"), "{args:?}: {ran:?}");
    }
}

#[test]
fn a_wrong_password_never_shows_and_reads_as_refused() {
    let cluster = Cluster::start(1);
    let url = cluster
        .node(0)
        .url()
        .replace("redis://", "redis://:hunter2@");
    // A password the node does not expect (it has none) is refused as a wrong one is (issue 38:
    // exit 77, EX_NOPERM, where it was 69 and 1).
    let ran = run(redmutex_with_nodes(&url), &["status", "x"]);
    assert_eq!(ran.code, Some(77), "{ran:?}");
    assert!(!ran.all().contains("hunter2"), "{ran:?}");
    let ran = run(redmutex_with_nodes(&url), &["doctor"]);
    assert_eq!(ran.code, Some(77), "{ran:?}");
    assert!(
        row(&ran.stdout, 0, "reachable").contains(" fail    authentication refused"),
        "{ran:?}"
    );
    assert!(ran.stdout.contains("redis://***@127.0.0.1"), "{ran:?}");
    assert!(!ran.all().contains("hunter2"), "{ran:?}");
}

#[test]
fn help_reads_well_and_exits_0() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["unlock", "--help"],
        &["doctor", "--help"],
    ] {
        let ran = run(bare(), args);
        assert_eq!(ran.code, Some(0), "{args:?}: {ran:?}");
        assert!(ran.stdout.contains("Usage: redmutex"), "{args:?}: {ran:?}");
    }
    let ran = run(bare(), &["run", "--help"]);
    for documented in [
        "--no-wait",
        "--wait",
        "--fencing",
        "--grace",
        "--expiry",
        "REDMUTEX_TOKEN",
        "75",
    ] {
        assert!(ran.stdout.contains(documented), "{documented}: {ran:?}");
    }
}

/// A Redis Cluster is one member: one row per check, run on every master, and passing.
#[test]
fn doctor_passes_a_redis_cluster_member() {
    let standalone = Cluster::start(2);
    let cluster = redmutex_testenv::RedisCluster::start(3, 0);
    let urls = standalone.urls();
    let nodes = format!("{},{},{}", urls[0], cluster.seed_url(), urls[1]);
    let ran = run(redmutex_with_nodes(&nodes), &["doctor"]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let independent = row(&ran.stdout, 1, "independent");
    assert!(
        independent.contains(" pass ") && independent.contains("Redis Cluster of 3 masters"),
        "{ran:?}"
    );
    assert!(
        row(&ran.stdout, 1, "permissions").contains("every master (3)"),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("no check failed: 3 of 3 nodes sound, a lock needs 2"),
        "{ran:?}"
    );
}
