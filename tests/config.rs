//! Bad input gets a clear error before any I/O, never a panic; passwords never leak.

mod support;

use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock};
use support::client;
use testenv::Cluster;

fn total_commands(cluster: &Cluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query(&mut node.connection())
                .expect("INFO");
            info.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("INFO stats has total_commands_processed")
        })
        .collect()
}

fn field(result: Result<impl std::fmt::Debug, Error>) -> String {
    match result {
        Err(Error::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_settings_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("config:ok");
    // Let the connection warm-up finish so it is not counted.
    drop(mutex.lock().await.expect("valid settings lock"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = total_commands(&cluster);

    assert_eq!(field(redlock.new_mutex("").lock().await), "name");
    assert_eq!(
        field(mutex.clone().with_expiry(Duration::ZERO).lock().await),
        "expiry"
    );
    assert_eq!(
        field(
            mutex
                .clone()
                .with_expiry(Duration::from_micros(999))
                .try_lock()
                .await
        ),
        "expiry"
    );
    assert_eq!(field(mutex.clone().with_tries(0).lock().await), "tries");
    for bad in [-0.01, 1.0, f64::NAN] {
        assert_eq!(
            field(mutex.clone().with_drift_factor(bad).lock().await),
            "drift_factor"
        );
    }
    for bad in [0.0, 1.0, 7.0] {
        assert_eq!(
            field(mutex.clone().with_timeout_factor(bad).lock().await),
            "timeout_factor"
        );
    }
    assert_eq!(
        field(mutex.clone().with_value_fn(String::new).lock().await),
        "value"
    );
    let adopted = mutex.clone().with_tries(0).adopt("some-value");
    assert_eq!(field(adopted.extend().await), "tries");
    assert_eq!(field(adopted.unlock().await), "tries");

    // INFO itself is one command per node; nothing else reached the nodes.
    let after = total_commands(&cluster);
    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b - 1).collect();
    assert_eq!(sent, [0, 0, 0]);
}

/// Names every primitive refuses, before any I/O: empty names, an empty list, and names that
/// could be another name's auxiliary key (`x:fence`, `x:readers`, `x:line`, ...). Duplicate
/// names collapse. The readers' marker is no lock value.
#[tokio::test]
async fn bad_names_of_every_primitive_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    drop(
        redlock
            .new_mutex("config:names")
            .lock()
            .await
            .expect("warm-up"),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = total_commands(&cluster);

    let none: [&str; 0] = [];
    assert_eq!(field(redlock.new_multi_mutex(none).lock().await), "names");
    assert_eq!(
        field(redlock.new_multi_mutex(none).try_lock().await),
        "names"
    );
    assert_eq!(
        field(redlock.new_multi_mutex(none).adopt("v").unlock().await),
        "names"
    );
    assert_eq!(
        field(redlock.new_multi_mutex(["a", ""]).lock().await),
        "names[1]"
    );
    assert_eq!(field(redlock.new_rwlock("").read().await), "name");
    assert_eq!(field(redlock.new_rwlock("").try_write().await), "name");
    let suffixes = [
        ":fence",
        ":readers",
        ":writer-waiting",
        ":line",
        ":line:until",
        ":ticket",
    ];
    for suffix in suffixes {
        let aux = format!("prices{suffix}");
        assert_eq!(field(redlock.new_mutex(aux.as_str()).lock().await), "name");
        assert_eq!(
            field(redlock.new_mutex(aux.as_str()).with_fair(true).lock().await),
            "name"
        );
        assert_eq!(field(redlock.new_rwlock(aux.as_str()).read().await), "name");
        assert_eq!(
            field(redlock.new_rwlock(aux.as_str()).write().await),
            "name"
        );
        let multi = redlock.new_multi_mutex(["prices", aux.as_str()]);
        assert_eq!(field(multi.try_lock().await), "names[1]");
        let Err(Error::Config { rule, .. }) = multi.lock().await else {
            panic!("a reserved suffix is a config error");
        };
        assert!(rule.contains(suffix), "the rule names the suffix: {rule}");
    }
    let marker = || "redmutex:readers".to_owned();
    let rwlock = redlock.new_rwlock("config:marker");
    assert_eq!(
        field(rwlock.clone().with_value_fn(marker).read().await),
        "value"
    );
    assert_eq!(
        field(rwlock.clone().with_value_fn(marker).write().await),
        "value"
    );
    assert_eq!(field(rwlock.adopt_write(marker()).unlock().await), "value");
    assert_eq!(
        field(
            redlock
                .new_mutex("config:marker")
                .adopt(marker())
                .extend()
                .await
        ),
        "value"
    );

    let sent: Vec<u64> = total_commands(&cluster)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b - 1)
        .collect();
    assert_eq!(sent, [0, 0, 0], "nothing reached the nodes");

    // Duplicates collapse: one key per name, and the lock lists each name once.
    let multi = redlock.new_multi_mutex(["config:dup", "config:dup", "config:other", "config:dup"]);
    assert_eq!(
        multi.names().collect::<Vec<_>>(),
        ["config:dup", "config:other"]
    );
    let lock = multi.lock().await.expect("free");
    assert_eq!(
        lock.names().collect::<Vec<_>>(),
        ["config:dup", "config:other"]
    );
    assert_eq!(lock.name(), "config:dup");
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn invalid_node_lists_are_config_errors() {
    let none: [&str; 0] = [];
    assert_eq!(field(Redlock::connect(none).await), "nodes");
    let no_connections: Vec<redis::aio::MultiplexedConnection> = Vec::new();
    assert_eq!(field(Redlock::new(no_connections)), "nodes");
    assert_eq!(
        field(Redlock::connect(["redis://127.0.0.1:1/", "http//:nope"]).await),
        "urls[1]"
    );
    assert_eq!(field(Redlock::connect([""]).await), "urls[0]");
}

#[tokio::test]
async fn passwords_never_appear_in_errors_or_debug() {
    let secret = "correct-horse-battery-staple";
    let bad_url = format!("redis://:{secret}@127.0.0.1:notaport/");
    let error = Redlock::connect([bad_url.as_str()])
        .await
        .expect_err("bad port");
    assert!(!error.to_string().contains(secret), "{error}");
    assert!(!format!("{error:?}").contains(secret), "{error:?}");
    // Unencoded '/', '#', '?' or '@' in a password (base64 secrets have '/') must not end the
    // redaction early, whether or not the URL parses.
    for password in ["abc/def+ghi=", "p#ss", "p@ss/word", "a?b"] {
        let url = format!("redis://:{password}@127.0.0.1:notaport/");
        match Redlock::connect([url.as_str()]).await {
            Err(error) => {
                assert!(!error.to_string().contains(password), "{error}");
                assert!(!format!("{error:?}").contains(password), "{error:?}");
            }
            Ok(redlock) => assert!(!format!("{redlock:?}").contains(password), "{redlock:?}"),
        }
    }

    // A node that requires a password, reached with a wrong one.
    let cluster = Cluster::start(3);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("the-real-password")
        .query(&mut cluster.node(0).connection())
        .expect("CONFIG SET");
    let mut urls = cluster.urls();
    urls[0] = urls[0].replace("redis://", &format!("redis://:{secret}@"));
    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    assert!(!format!("{redlock:?}").contains(secret), "{redlock:?}");
    let mutex = redlock.new_mutex("config:password").with_tries(1);
    assert!(!format!("{mutex:?}").contains(secret));

    let lock = mutex.lock().await.expect("nodes 1 and 2 suffice");
    assert!(!format!("{lock:?}").contains(secret));
    lock.unlock().await.expect("unlock");

    // With node 1 down too, the wrong password is the reported reason, without the password.
    cluster.node(1).kill();
    let error = mutex.lock().await.expect_err("1 of 3 is not a quorum");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(failures[0].node, 0);
    assert!(
        matches!(failures[0].kind, NodeErrorKind::Redis(_)),
        "{:?}",
        failures[0]
    );
    assert!(!error.to_string().contains(secret), "{error}");
    assert!(!format!("{error:?}").contains(secret), "{error:?}");
}

#[tokio::test]
async fn unreachable_nodes_fail_without_hanging() {
    // Port 1 on loopback refuses connections.
    let redlock = Redlock::connect(["redis://127.0.0.1:1/", "redis://127.0.0.1:2/"])
        .await
        .expect("URLs parse");
    let mutex = redlock
        .new_mutex("config:unreachable")
        .with_expiry(Duration::from_secs(2))
        .with_tries(2)
        .with_retry_delay(Duration::from_millis(1));
    let error = mutex.lock().await.expect_err("nothing is listening");
    let Error::NoQuorum { ok, failures, .. } = error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(ok, 0);
    assert_eq!(failures.len(), 2);
}

#[tokio::test]
async fn odd_names_and_extreme_expiries_work() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let long_name = "n".repeat(1 << 20);
    for name in [long_name.as_str(), "ключ:🔒\u{0}\u{feff}", " "] {
        let lock = redlock
            .new_mutex(name)
            .try_lock()
            .await
            .expect("any non-empty name");
        lock.unlock().await.expect("unlock");
    }
    let ten_days = redlock
        .new_mutex("config:ten-days")
        .with_expiry(Duration::from_secs(10 * 24 * 3600));
    let lock = ten_days.try_lock().await.expect("long expiry");
    assert!(cluster.node(0).pttl("config:ten-days") > 863_000_000);
    lock.unlock().await.expect("unlock");
}

/// A key of another type (a hash) makes the scripts fail on that node with the server's error,
/// reported per node; no panic, no hang.
#[tokio::test]
async fn a_key_of_another_type_is_a_node_error() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("config:hash").with_tries(1);
    let lock = mutex.lock().await.expect("free lock");
    // Node 0's key is replaced by a hash (another program wrote to the lock's name).
    cluster.node(0).del("config:hash");
    let _: () = redis::cmd("HSET")
        .arg("config:hash")
        .arg("f")
        .arg("v")
        .query(&mut cluster.node(0).connection())
        .expect("HSET");
    lock.extend().await.expect("nodes 1 and 2 suffice");
    cluster.node(1).del("config:hash");
    let error = lock
        .unlock()
        .await
        .expect_err("only node 2 holds our value");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    let wrongtype = failures
        .iter()
        .find(|f| f.node == 0)
        .expect("node 0 failed");
    assert!(
        matches!(&wrongtype.kind, NodeErrorKind::Redis(e) if e.to_string().contains("WRONGTYPE")),
        "{wrongtype:?}"
    );
    // The hash is untouched.
    let kind: String = redis::cmd("TYPE")
        .arg("config:hash")
        .query(&mut cluster.node(0).connection())
        .expect("TYPE");
    assert_eq!(kind, "hash");
}

#[tokio::test]
async fn a_one_millisecond_expiry_is_handled() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("config:one-ms")
        .with_expiry(Duration::from_millis(1))
        .with_tries(3)
        .with_retry_delay(Duration::from_millis(2));
    // Either outcome is correct; a lock handed out was valid for less than 1 ms from the start of
    // its attempt, which began before `lock()` returned.
    match mutex.lock().await {
        Ok(lock) => assert!(lock.valid_until() <= Instant::now() + Duration::from_millis(1)),
        Err(error) => assert!(
            matches!(error, Error::Expired | Error::NoQuorum { .. }),
            "{error:?}"
        ),
    }
}
