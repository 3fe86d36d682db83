//! Multi-name locks (`Redlock::new_multi_mutex`): every name or none, on real nodes. The tables of
//! masks and the concurrent transfers, through both entries, are in `entries.rs`.

use std::time::{Duration, Instant};

use redmutex::{Error, Mutex, Redlock};
use redmutex_testenv::Cluster;

use crate::support;
use crate::support::{cleared_within, client, eventually, holders, present, within};

/// A multi-name mutex with the quick settings of `support::quick`.
fn quick_multi(redlock: &Redlock, names: &[&str]) -> Mutex {
    redlock
        .new_multi_mutex(names.iter().copied())
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
}

fn mutex(redlock: &Redlock, name: &str) -> Mutex {
    support::quick(redlock, name)
}

#[tokio::test]
async fn overlapping_sets_exclude_and_disjoint_sets_run_in_parallel() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let other = client(&cluster).await;
    let ab = quick_multi(&redlock, &["multi:a", "multi:b"])
        .lock()
        .await
        .expect("free names");
    match quick_multi(&other, &["multi:b", "multi:c"])
        .try_lock()
        .await
    {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2, 3, 4]),
        other => panic!("expected Taken, got {other:?}"),
    }
    // Refused everywhere: nothing of the refused set was written, not even the free name.
    assert!(present(&cluster, "multi:c").is_empty());
    let cd = quick_multi(&other, &["multi:c", "multi:d"])
        .try_lock()
        .await
        .expect("a disjoint set is free");
    assert!(ab.valid_until() > Instant::now() && cd.valid_until() > Instant::now());
    ab.unlock().await.expect("unlock");
    let bc = quick_multi(&other, &["multi:b", "multi:e"])
        .try_lock()
        .await
        .expect("b is free again");
    cd.unlock().await.expect("unlock");
    bc.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_multi_lock_and_a_mutex_on_a_member_exclude_each_other() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["multi:m1", "multi:m2", "multi:m3"];
    let multi = quick_multi(&redlock, &names);
    let held = multi.lock().await.expect("free");
    for name in names {
        assert!(
            matches!(
                mutex(&redlock, name).try_lock().await,
                Err(Error::Taken { .. })
            ),
            "{name}"
        );
    }
    held.unlock().await.expect("unlock");
    let member = mutex(&redlock, "multi:m2").lock().await.expect("free");
    assert!(matches!(multi.try_lock().await, Err(Error::Taken { .. })));
    assert!(present(&cluster, "multi:m1").is_empty());
    assert!(present(&cluster, "multi:m3").is_empty());
    member.unlock().await.expect("unlock");
    multi
        .try_lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

/// Extend counts a node only if every name still holds the lock's value there; a node that lost a
/// name gets it back while the rest hold the lock, and does not when they do not.
#[tokio::test]
async fn extend_fails_where_one_key_was_lost() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let multi = quick_multi(&redlock, &["multi:x", "multi:y"]);
    let lock = multi.lock().await.expect("free");
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.node(0).del("multi:y");
    lock.extend().await.expect("nodes 1 and 2 hold both names");
    // Node 0 was repaired: both names hold the value again, for the whole expiry.
    for node in [0, 1, 2] {
        assert!(cluster.node(node).pttl("multi:x") > 1900);
        assert!(cluster.node(node).pttl("multi:y") > 1900);
    }
    // Two nodes of three each lose a name: neither counts, so the lock is gone, and what the
    // extend set again there is taken back.
    cluster.node(0).del("multi:x");
    cluster.node(1).del("multi:y");
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    for node in [0, 1] {
        assert!(!cluster.node(node).exists("multi:x"), "node {node}");
        assert!(!cluster.node(node).exists("multi:y"), "node {node}");
    }
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
    // The unlock still removed every key that held our value.
    assert!(present(&cluster, "multi:x").is_empty());
    assert!(present(&cluster, "multi:y").is_empty());
}

#[tokio::test]
async fn drop_and_cancellation_release_every_key() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let names = ["multi:drop:1", "multi:drop:2", "multi:drop:3"];
    let multi = redlock
        .new_multi_mutex(names)
        .with_expiry(Duration::from_secs(30));
    let lock = multi.lock().await.expect("free");
    for name in names {
        assert_eq!(holders(&cluster, name, lock.value()).len(), 5);
    }
    drop(lock);
    for name in names {
        cleared_within(Duration::from_secs(2), &cluster, name).await;
    }
    // Cancelled at every point of the call: before, during and after its attempts.
    let blocker = mutex(&redlock, "multi:drop:2").lock().await.expect("free");
    for micros in (0..3000).step_by(100) {
        let attempt = multi.clone().with_retry_delay(Duration::from_millis(1));
        let _ = tokio::time::timeout(Duration::from_micros(micros), attempt.lock()).await;
    }
    for name in [names[0], names[2]] {
        cleared_within(Duration::from_secs(2), &cluster, name).await;
    }
    blocker.unlock().await.expect("unlock");
    for micros in (0..3000).step_by(100) {
        let result = tokio::time::timeout(Duration::from_micros(micros), multi.lock()).await;
        if let Ok(lock) = result {
            lock.expect("free").unlock().await.expect("unlock");
        }
        for name in names {
            cleared_within(Duration::from_secs(2), &cluster, name).await;
        }
    }
}

/// With fencing, one token for the set, larger than every earlier token of any of its names,
/// and the next token of any member is larger still. One name's counter is ahead of the other's
/// (and of the nodes' clocks, which would otherwise decide every token).
#[tokio::test]
async fn one_fencing_token_above_every_member() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let fenced = |name: &str| mutex(&redlock, name).with_fencing(true);
    for node in cluster.nodes() {
        node.set("{multi:fence:b}:fence", &crate::support::AHEAD.to_string());
    }
    let lock = fenced("multi:fence:b").lock().await.expect("free");
    let last_b = lock.token().expect("fenced");
    lock.unlock().await.expect("unlock");
    let a = fenced("multi:fence:a").lock().await.expect("free");
    let last_a = a.token().expect("fenced");
    a.unlock().await.expect("unlock");
    assert!(last_b > last_a);

    let multi = quick_multi(&redlock, &["multi:fence:a", "multi:fence:b"]).with_fencing(true);
    let both = multi.lock().await.expect("free");
    let token = both.token().expect("fenced");
    assert!(
        token > last_a && token > last_b,
        "{token} after {last_a}, {last_b}"
    );
    for node in cluster.nodes() {
        for counter in ["{multi:fence:a}:fence", "{multi:fence:b}:fence"] {
            assert_eq!(node.get(counter), Some(token.to_string()), "{counter}");
        }
    }
    both.unlock().await.expect("unlock");
    let next = fenced("multi:fence:a").lock().await.expect("free");
    assert!(next.token().expect("fenced") > token);
    next.unlock().await.expect("unlock");
}

/// A waiting multi-name lock wakes on the release of any of its names.
#[tokio::test]
async fn a_waiter_wakes_on_the_release_of_any_name() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let waking = |mutex: Mutex| {
        mutex
            .with_expiry(Duration::from_secs(30))
            .with_retry_delay(Duration::from_secs(60))
            .with_tries(100)
            .with_wake_on_release(true)
    };
    let names = ["multi:wake:1", "multi:wake:2"];
    let holder = waking(redlock.new_mutex(names[1]))
        .lock()
        .await
        .expect("free");
    let multi = waking(redlock.new_multi_mutex(names));
    let waiter = tokio::spawn(async move { multi.lock().await });
    // The waiter made its attempts and listens.
    eventually("the waiter subscribed to every name", || {
        names.iter().all(|name| {
            let channel = format!("redmutex:released:{name}");
            cluster
                .nodes()
                .iter()
                .all(|node| node.subscribers(&channel) == 1)
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    holder.unlock().await.expect("unlock");
    let lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, not its minute-long delay")
        .expect("task")
        .expect("locked");
    assert!(released.elapsed() < Duration::from_secs(20));
    assert_eq!(lock.names().collect::<Vec<_>>(), names);
    lock.unlock().await.expect("unlock");
    within(Duration::from_secs(2), "keys released", || {
        names.iter().all(|name| present(&cluster, name).is_empty())
    })
    .await;
}

/// Every key on node `node` with the value it holds (a key of another type shows as its type).
fn keys_on(cluster: &Cluster, node: usize) -> Vec<(String, String)> {
    let mut connection = cluster.node(node).connection();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut connection)
        .expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query(&mut connection)
                .expect("TYPE");
            let value = match kind.as_str() {
                "string" => redis::cmd("GET")
                    .arg(&key)
                    .query(&mut connection)
                    .expect("GET"),
                other => format!("a {other}"),
            };
            (key, value)
        })
        .collect()
}

/// How many scripts node `node` ran (`EVALSHA` and `EVAL` calls).
fn scripts_run(cluster: &Cluster, node: usize) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut cluster.node(node).connection())
        .expect("INFO");
    ["evalsha", "eval"]
        .iter()
        .map(|command| {
            let prefix = format!("cmdstat_{command}:calls=");
            info.lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse().expect("a count"))
        })
        .sum()
}

/// The plain entry (`SET NX PX` for every name in one `MULTI`/`EXEC`) decides as `acquire.lua`
/// would, in each state it can find: every name free (taken on every node, no script), one name
/// held by another owner or by a key of another type on every node (refused everywhere, and the
/// names it did set are gone from every node before the attempt returns: the attempt, refused
/// everywhere, sends no release of its own), and a fenced acquire (the script, as before).
#[tokio::test]
async fn the_plain_multi_entry_decides_as_the_script() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let names = ["plain:a", "plain:b", "plain:c"];
    // Waits for every node's reply, so that the refusal below is every node's, and nothing of
    // the attempt is left in flight when it returns.
    let multi = quick_multi(&redlock, &names).with_tries(1);

    let scripts = scripts_run(&cluster, 0);
    let lock = multi.try_lock().await.expect("free names");
    assert_eq!(
        scripts_run(&cluster, 0),
        scripts,
        "free names take no script"
    );
    for name in names {
        assert_eq!(holders(&cluster, name, lock.value()), [0, 1, 2, 3, 4]);
    }
    lock.unlock().await.expect("unlock");

    // One name held by another owner: every node refuses, and keeps only that owner's key.
    for node in cluster.nodes() {
        node.set_px(names[1], "someone-else", Duration::from_secs(60));
    }
    match multi.try_lock().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2, 3, 4]),
        other => panic!("expected Taken, got {other:?}"),
    }
    let only_other = vec![(names[1].to_owned(), "someone-else".to_owned())];
    for node in 0..5 {
        assert_eq!(
            keys_on(&cluster, node),
            only_other,
            "node {node}: nothing of the refused attempt is left"
        );
    }

    // A key of another type at a name: taken, as the script's EXISTS finds it.
    for node in 0..5 {
        let mut connection = cluster.node(node).connection();
        let _: () = redis::cmd("DEL")
            .arg(names[1])
            .query(&mut connection)
            .expect("DEL");
        let _: () = redis::cmd("HSET")
            .arg(names[2])
            .arg("field")
            .arg("x")
            .query(&mut connection)
            .expect("HSET");
    }
    match multi.try_lock().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2, 3, 4]),
        other => panic!("expected Taken, got {other:?}"),
    }
    let only_hash = vec![(names[2].to_owned(), "a hash".to_owned())];
    for node in 0..5 {
        assert_eq!(keys_on(&cluster, node), only_hash, "node {node}");
    }
    for node in cluster.nodes() {
        let _: () = redis::cmd("DEL")
            .arg(names[2])
            .query(&mut node.connection())
            .expect("DEL");
    }

    // Fenced: the script, which reads the counters.
    let scripts = scripts_run(&cluster, 0);
    let lock = multi
        .with_fencing(true)
        .try_lock()
        .await
        .expect("free names");
    assert!(lock.token().is_some());
    assert!(
        scripts_run(&cluster, 0) > scripts,
        "a fenced acquire runs the script"
    );
    for name in names {
        assert_eq!(holders(&cluster, name, lock.value()), [0, 1, 2, 3, 4]);
    }
    lock.unlock().await.expect("unlock");
}

/// A multi-name lock over one name takes the plain entry too (the `SET` alone), and decides as
/// a mutex does.
#[tokio::test]
async fn a_multi_name_lock_over_one_name_is_a_plain_set() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let multi = quick_multi(&redlock, &["plain:one"]).with_tries(1);
    let scripts = scripts_run(&cluster, 0);
    let lock = multi.try_lock().await.expect("free");
    assert_eq!(scripts_run(&cluster, 0), scripts, "no script");
    assert_eq!(holders(&cluster, "plain:one", lock.value()), [0, 1, 2]);
    assert!(matches!(multi.try_lock().await, Err(Error::Taken { .. })));
    lock.unlock().await.expect("unlock");
    assert!(present(&cluster, "plain:one").is_empty());
}

/// The names a plain entry took on a node where another was taken are released with a notice for
/// each name freed, where wake-up on release is on and a waiter marked the names, as a failed
/// attempt's release sends them: a waiter on such a name would otherwise sleep out its retry
/// delay. Names held by others get none.
#[tokio::test]
async fn the_released_part_of_a_plain_entry_sends_its_notices() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["part:a", "part:b"];
    let channels = names.map(|name| format!("redmutex:released:{name}"));
    for node in cluster.nodes() {
        node.set_px(names[1], "someone-else", Duration::from_secs(60));
    }
    for name in names {
        support::mark_waited(&cluster, name);
    }
    let mut connections: Vec<redis::Connection> =
        (0..3).map(|node| cluster.node(node).connection()).collect();
    let mut subscribers: Vec<redis::PubSub<'_>> = connections
        .iter_mut()
        .map(|connection| {
            let mut pubsub = connection.as_pubsub();
            pubsub
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("read timeout");
            for channel in &channels {
                pubsub.subscribe(channel).expect("SUBSCRIBE");
            }
            pubsub
        })
        .collect();

    let multi = quick_multi(&redlock, &names)
        .with_tries(1)
        .with_wake_on_release(true);
    match multi.try_lock().await {
        Err(Error::Taken { nodes }) => assert_eq!(nodes, [0, 1, 2]),
        other => panic!("expected Taken, got {other:?}"),
    }
    for (node, pubsub) in subscribers.iter_mut().enumerate() {
        let notice = pubsub.get_message().expect("a notice");
        assert_eq!(
            notice.get_channel_name(),
            channels[0],
            "node {node}: the freed name's notice"
        );
        // A marker published now on the other name's channel comes next: no notice for the
        // name another owner holds came before it.
        let mut publisher = cluster.node(node).connection();
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channels[1])
            .arg("marker")
            .query(&mut publisher)
            .expect("PUBLISH");
        let next = pubsub.get_message().expect("the marker");
        assert_eq!(
            (next.get_channel_name(), next.get_payload::<String>().ok()),
            (channels[1].as_str(), Some("marker".to_owned())),
            "node {node}"
        );
    }
}
