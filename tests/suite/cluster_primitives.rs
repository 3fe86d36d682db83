//! Every primitive on a 3-master Redis Cluster member, alone and beside standalone members: a
//! semaphore's permits under contention, `inspect` and `force_unlock` of each primitive,
//! keep-alive, adopt, names with their own hash tag, and fencing tokens across a failover. What
//! `cluster_member` (routing, topology, checks) and `cluster_keys` (key layout, notices, fair
//! line) cover is not repeated here.
#![cfg(feature = "cluster")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redmutex::{Error, Holder, Redlock, Semaphore};
use redmutex_testenv::{Cluster, Node, RedisCluster, key_slot};

use crate::support::beside;

async fn member(cluster: &RedisCluster) -> Redlock {
    Redlock::connect([cluster.seed_url()])
        .await
        .expect("a cluster member")
}

/// A semaphore for heavy contention: quick jittered retries, tries enough that only a real
/// failure ends `acquire()`.
fn contended_semaphore(redlock: &Redlock, name: &str, permits: u32) -> Semaphore {
    redlock
        .new_semaphore(name, permits)
        .with_expiry(Duration::from_secs(5))
        .with_timeout_factor(0.1)
        .with_tries(100_000)
        .with_retry_delay_fn(|_| Duration::from_micros(500 + rand::random_range(0..4500)))
}

/// Every key a node holds, with the slot that the node itself computes for it (`CLUSTER KEYSLOT`).
fn keys_and_slots(node: &Node) -> Vec<(String, u16)> {
    let mut connection = node.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut connection)
        .expect("KEYS");
    keys.into_iter()
        .map(|key| {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query(&mut connection)
                .expect("CLUSTER KEYSLOT");
            (key, slot)
        })
        .collect()
}

/// Two permits, 8 tasks on 2 clients, 15 acquisitions each: never more than two holders at once,
/// on a cluster member alone and beside two standalone members; each permit's key is the name,
/// on the name's master, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_keeps_its_permits_exact_under_contention() {
    let cluster = RedisCluster::start(3, 0);
    let standalone = Cluster::start(2);
    let deployments = [
        vec![cluster.seed_url()],
        vec![
            standalone.urls()[0].clone(),
            cluster.seed_url(),
            standalone.urls()[1].clone(),
        ],
    ];
    for (round, urls) in deployments.iter().enumerate() {
        let name = format!("cluster-primitives:pool:{round}");
        let clients = [
            Redlock::connect(urls).await.expect("URLs"),
            Redlock::connect(urls).await.expect("URLs"),
        ];
        let (inside, most, taken) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let mut tasks = Vec::new();
        for task in 0..8 {
            let semaphore = contended_semaphore(&clients[task % 2], &name, 2);
            let (inside, most, taken) = (inside.clone(), most.clone(), taken.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..15 {
                    let permit = semaphore.acquire().await.expect("a permit in time");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    taken.fetch_add(1, Ordering::SeqCst);
                    // Widen the window in which a third holder would show.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.unlock().await.expect("give the permit back");
                }
            }));
        }
        for task in tasks {
            task.await.expect("task finished");
        }
        assert_eq!(taken.load(Ordering::SeqCst), 120, "{urls:?}");
        assert!(most.load(Ordering::SeqCst) <= 2, "{urls:?}: a third holder");
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "{urls:?}: contention happened"
        );
        assert!(!cluster.exists(&name), "{urls:?}: every permit given back");
    }
    // A permit's key is the name, on the master of its slot, and the only key there.
    let redlock = member(&cluster).await;
    let name = "{cluster-primitives:user:7}:jobs";
    let semaphore = redlock.new_semaphore(name, 3).with_wake_on_release(true);
    let permit = semaphore.acquire().await.expect("free");
    let owner = cluster.master_of_key(name);
    assert_eq!(keys_and_slots(owner), [(name.to_owned(), key_slot(name))]);
    assert_eq!(cluster.dbsize(), 1);
    permit.unlock().await.expect("unlock");
    assert_eq!(cluster.dbsize(), 0);
}

/// `inspect` tells each primitive's holders on a cluster member, and `force_unlock` breaks each
/// of them there (the held handles then find their keys gone), leaving fencing counters alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_unlock_every_primitive() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;

    let mutex = redlock
        .new_mutex("cluster-primitives:job")
        .with_fencing(true);
    let lock = mutex.lock().await.expect("free");
    let state = mutex.inspect().await.expect("inspect");
    assert!(matches!(state.holder(), Some(Holder::Exclusive { .. })));
    assert_eq!((state.holders(), state.quorum()), (1, 1));
    assert!(state.ttl().is_some());
    assert_eq!(mutex.force_unlock().await.expect("forced"), 1);
    assert!(!mutex.inspect().await.expect("inspect").is_held());
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
    let counter = beside("cluster-primitives:job", ":fence");
    let token = lock.token().expect("fenced").to_string();
    assert_eq!(cluster.get(&counter), Some(token), "counter kept");

    let rwlock = redlock.new_rwlock("cluster-primitives:prices");
    let readers = [
        rwlock.read().await.expect("free"),
        rwlock.read().await.expect("shared"),
    ];
    let state = rwlock.inspect().await.expect("inspect");
    assert!(
        matches!(state.holder(), Some(Holder::Readers { count: 2, .. })),
        "{state:?}"
    );
    assert_eq!(rwlock.force_unlock().await.expect("forced"), 1);
    assert!(!rwlock.inspect().await.expect("inspect").is_held());
    for reader in &readers {
        assert!(matches!(reader.extend().await, Err(Error::Expired)));
    }
    let writer = rwlock.write().await.expect("free again");
    let state = rwlock.inspect().await.expect("inspect");
    assert!(matches!(state.holder(), Some(Holder::Exclusive { .. })));
    assert_eq!(rwlock.force_unlock().await.expect("forced"), 1);
    assert!(matches!(writer.extend().await, Err(Error::Expired)));

    let semaphore = redlock.new_semaphore("cluster-primitives:slots", 3);
    let permits = [
        semaphore.acquire().await.expect("free"),
        semaphore.acquire().await.expect("free"),
    ];
    let state = semaphore.inspect().await.expect("inspect");
    assert!(
        matches!(
            state.holder(),
            Some(Holder::Permits {
                held: 2,
                permits: 3,
                ..
            })
        ),
        "{state:?}"
    );
    assert_eq!(semaphore.force_unlock().await.expect("forced"), 1);
    assert!(!semaphore.inspect().await.expect("inspect").is_held());
    for permit in &permits {
        assert!(matches!(permit.extend().await, Err(Error::Expired)));
    }

    let names = [
        "{cluster-primitives:acct}:from",
        "{cluster-primitives:acct}:to",
    ];
    let multi = redlock.new_multi_mutex(names);
    let both = multi.lock().await.expect("free");
    assert_eq!(multi.force_unlock().await.expect("forced"), 1);
    assert!(matches!(both.extend().await, Err(Error::Expired)));
    assert_eq!(cluster.dbsize(), 1, "only the fencing counter is left");
}

/// The first lock of a fresh client goes out in the cluster's form although its connection was
/// not made yet: a fenced acquire in the standalone form also reads the previous layout's counter,
/// in another slot, which the cluster refuses (`CROSSSLOT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_clients_first_fenced_lock_takes_the_clusters_form() {
    let cluster = RedisCluster::start(3, 0);
    for round in 0..3 {
        let redlock = member(&cluster).await;
        let name = format!("cluster-primitives:first:{round}");
        let lock = redlock
            .new_mutex(&name)
            .with_fencing(true)
            .with_tries(1)
            .lock()
            .await
            .unwrap_or_else(|error| panic!("the first lock: {error}"));
        assert!(lock.token().is_some());
        lock.unlock().await.expect("unlock");
    }
}

/// A held lock kept alive past several expiries on a cluster member, then unlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_past_several_expiries() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let name = "cluster-primitives:kept";
    let mutex = redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(1))
        .with_timeout_factor(0.25);
    let lock = mutex.lock().await.expect("free");
    let keep = lock.keep_alive(Duration::from_millis(250));
    tokio::time::sleep(Duration::from_secs(3)).await; // three expiries
    assert!(keep.end().is_none(), "still kept: {:?}", keep.end());
    assert_eq!(cluster.get(name).as_deref(), Some(lock.value()));
    assert!(matches!(
        redlock.new_mutex(name).with_tries(1).lock().await,
        Err(Error::Taken { .. })
    ));
    lock.unlock().await.expect("unlock");
    assert!(!cluster.exists(name));
}

/// A lock taken by one client and adopted by another (by its value) on a cluster member: the
/// adopter extends and unlocks it; a read-write lock's writer likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_adopted_by_another_client() {
    let cluster = RedisCluster::start(3, 0);
    let (first, second) = (member(&cluster).await, member(&cluster).await);
    let name = "cluster-primitives:export";
    let original = first.new_mutex(name).lock().await.expect("free");
    let adopted = second.new_mutex(name).adopt(original.value());
    adopted.extend().await.expect("the adopter extends");
    assert_eq!(cluster.get(name).as_deref(), Some(original.value()));
    adopted.unlock().await.expect("the adopter unlocks");
    assert!(!cluster.exists(name));
    assert!(matches!(original.extend().await, Err(Error::Expired)));

    let name = "{cluster-primitives:user:3}:profile";
    let writer = first.new_rwlock(name).write().await.expect("free");
    let adopted = second.new_rwlock(name).adopt_write(writer.value());
    adopted.extend().await.expect("the adopter extends");
    adopted.unlock().await.expect("the adopter unlocks");
    assert_eq!(cluster.dbsize(), 0);
}

/// Names with their own hash tag lock together as one multi-name lock, and every key they use
/// (their lock keys, fencing counters, a read-write lock's readers, a fair line) is in the tag's
/// slot, on its master: `CLUSTER KEYSLOT` says so, and the other masters hold nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_their_own_tag_keep_every_key_in_its_slot() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let tag = "{cluster-primitives:user:1}";
    let slot = key_slot(tag);
    let names = [format!("{tag}:a"), format!("{tag}:b")];
    let both = redlock
        .new_multi_mutex(names.clone())
        .with_fencing(true)
        .with_wake_on_release(true)
        .lock()
        .await
        .expect("one slot");
    assert!(both.token().is_some());
    let rwlock = redlock.new_rwlock(format!("{tag}:c"));
    let reader = rwlock.read().await.expect("free");
    let fair = redlock
        .new_mutex(format!("{tag}:d"))
        .with_fair(true)
        .lock()
        .await
        .expect("free");

    let owner = cluster.master_of_key(tag);
    let keys = keys_and_slots(owner);
    for (key, key_slot) in &keys {
        assert_eq!(*key_slot, slot, "{key}");
    }
    let listed: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    for key in [
        names[0].clone(),
        names[1].clone(),
        beside(&names[0], ":fence"),
        beside(&names[1], ":fence"),
        beside(&format!("{tag}:c"), ":readers"),
        format!("{tag}:d"),
    ] {
        assert!(listed.contains(&key.as_str()), "{key} in {listed:?}");
    }
    for other in cluster.masters() {
        if other.port() != owner.port() {
            assert_eq!(other.dbsize(), 0, "keys on {}", other.port());
        }
    }
    both.unlock().await.expect("unlock");
    reader.unlock().await.expect("unlock");
    fair.unlock().await.expect("unlock");
}

/// The node whose URL made the member dies, and its replica takes over: the member follows the
/// cluster to the new master rather than waiting for that node to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_node_may_die() {
    let cluster = RedisCluster::start(3, 1);
    let name = "cluster-primitives:seed";
    let seed = cluster.master_of_key(name);
    let redlock = Redlock::connect([seed.url()]).await.expect("a URL");
    let mutex = redlock
        .new_mutex(name)
        .with_timeout_factor(0.1)
        .with_tries(1);
    let lock = mutex.lock().await.expect("free");
    lock.unlock().await.expect("unlock");
    let replica = cluster.replicas_of(seed)[0];
    seed.kill();
    cluster.takeover(replica);
    let mut last = None;
    for _ in 0..100 {
        match mutex.lock().await {
            Ok(lock) => {
                assert_eq!(replica.get(name).as_deref(), Some(lock.value()));
                lock.unlock().await.expect("unlock");
                return;
            }
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no lock on the new master: {last:?}");
}

/// Fencing tokens across a failover that loses a write. A master replicates asynchronously: here
/// its replica stops (SIGSTOP) and the master drops it (`repl-timeout 1`), a fenced lock raises the
/// counter on the master alone, and the master dies; the replica takes over with the older
/// counter. The tokens handed out by this one member are returned, in order.
async fn tokens_across_a_lost_write(replica_acks: u32) -> Vec<u64> {
    let cluster = RedisCluster::start(3, 1);
    let name = "cluster-primitives:fenced";
    let master = cluster.master_of_key(name);
    let replica = cluster.replicas_of(master)[0];
    let redlock = member(&cluster).await;
    let fenced = |replica_acks| {
        redlock
            .new_mutex(name)
            .with_fencing(true)
            .with_expiry(Duration::from_secs(30))
            .with_timeout_factor(0.02)
            .with_tries(1)
            .with_replica_acks(replica_acks)
    };
    let mutex = fenced(replica_acks);
    let mut tokens = Vec::new();
    let lock = mutex.lock().await.expect("free");
    tokens.extend(lock.token());
    lock.unlock().await.expect("unlock");
    let counter = beside(name, ":fence");
    let first = tokens[0].to_string();
    let replicated = || {
        let mut connection = replica.connection();
        redis::cmd("READONLY")
            .query::<()>(&mut connection)
            .expect("READONLY");
        let value: Option<String> = redis::cmd("GET")
            .arg(&counter)
            .query(&mut connection)
            .expect("GET");
        value.as_deref() == Some(first.as_str())
    };
    crate::support::within(
        Duration::from_secs(10),
        "the counter replicated",
        replicated,
    )
    .await;

    master.config_set("repl-timeout", "1");
    replica.pause();
    let dropped = || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut master.connection())
            .expect("INFO");
        info.lines().any(|line| line.trim() == "connected_slaves:0")
    };
    crate::support::within(Duration::from_secs(20), "the replica dropped", dropped).await;
    // Raised on the master alone: no replica is connected to receive it.
    if let Ok(lock) = mutex.lock().await {
        tokens.extend(lock.token());
        lock.unlock().await.expect("unlock");
    }
    master.kill();
    replica.resume();
    cluster.takeover(replica);
    // The new master has no replica until one joins it, so acks would refuse every lock here.
    let mutex = fenced(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let lock = loop {
        match mutex.lock().await {
            Ok(lock) => break lock,
            Err(error) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no lock on the new master: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(cluster.master_of_key(name).port(), replica.port());
    tokens.extend(lock.token());
    lock.unlock().await.expect("unlock");
    tokens
}

/// A failover that loses the counter's last raise brings back an older counter, as a restart
/// without persistence brings back none: the next token must still be greater than every token
/// handed out before, which the nodes' clocks give (each counter read is at least the master's
/// time in microseconds, later than the lost raise's token). Without replica acks the lost
/// raise's token was handed out; with `with_replica_acks(1)` it never counted, so only two tokens
/// are handed out. Tokens strictly increase either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_a_failover() {
    let unacked = tokens_across_a_lost_write(0).await;
    assert_eq!(unacked.len(), 3, "{unacked:?}");
    assert!(
        unacked.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase across the failover that lost a raise: {unacked:?}"
    );
    let acked = tokens_across_a_lost_write(1).await;
    assert_eq!(
        acked.len(),
        2,
        "the unacknowledged raise handed out nothing: {acked:?}"
    );
    assert!(
        acked.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase: {acked:?}"
    );
}

/// The redis crate's cluster client sends a request again after an I/O error. Here the one master
/// of a cluster announces a proxy as its address, so that the client's connection to it goes
/// through the proxy (the client found the cluster through the node's own address); the proxy
/// delays bytes by 1 s and, once the write has landed on the node (read there directly) but before
/// its reply is back, resets the connection, while the node announces its own address again. The
/// client asks the cluster for its map, connects to the node directly and sends the write again,
/// which finds the name taken by the attempt's own value, so the member answers "taken": every
/// member said so, yet the attempt must release, or the name stays blocked by a value nobody holds
/// until it expires (20 s here). For each acquire that writes plainly or by script: a mutex, a
/// fenced mutex, a multi-name lock (its MULTI/EXEC entry) and a read-write lock's writer (its plain
/// entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_sent_again_after_a_reset_leaves_nothing_behind() {
    let cluster = RedisCluster::start(1, 0);
    let node = cluster.node(0);
    let proxy = redmutex_testenv::Proxy::start(node.port());
    let tag = "{cluster-primitives:resent}";
    let mut blocked = Vec::new();
    for case in ["mutex", "fenced mutex", "multi-name lock", "writer"] {
        proxy.set_mode(redmutex_testenv::Mode::Pass);
        node.config_set("cluster-announce-port", &proxy.port().to_string());
        let redlock = Redlock::connect([node.url()]).await.expect("a URL");
        let mutex = |mutex: redmutex::Mutex| {
            mutex
                .with_expiry(Duration::from_secs(20))
                .with_timeout_factor(0.25)
                .with_tries(1)
        };
        let (lock, key): (redmutex::Mutex, _) = match case {
            "mutex" => (redlock.new_mutex(format!("{tag}:plain")), "plain"),
            "fenced mutex" => (
                redlock
                    .new_mutex(format!("{tag}:fenced"))
                    .with_fencing(true),
                "fenced",
            ),
            "multi-name lock" => (
                redlock.new_multi_mutex([format!("{tag}:a"), format!("{tag}:b")]),
                "a",
            ),
            _ => (redlock.new_mutex("unused"), "rw"),
        };
        let lock = mutex(lock);
        let writer = redlock
            .new_rwlock(format!("{tag}:rw"))
            .with_expiry(Duration::from_secs(20))
            .with_timeout_factor(0.25)
            .with_tries(1);
        let key = format!("{tag}:{key}");
        let attempt = || {
            let (lock, writer) = (lock.clone(), writer.clone());
            async move {
                if case == "writer" {
                    writer.write().await.map(|held| held.value().to_owned())
                } else {
                    lock.lock().await.map(|held| held.value().to_owned())
                }
            }
        };
        // Connected through the proxy, scripts loaded, before the fault.
        attempt().await.expect("free");
        node.del(&key);
        proxy.set_mode(redmutex_testenv::Mode::Delay(Duration::from_secs(1)));
        let attempt = tokio::spawn(attempt());
        crate::support::within(Duration::from_secs(5), "the write landed", || {
            node.exists(&key)
        })
        .await;
        // The reply is still on its way back through the proxy: it is lost with the connection.
        node.config_set("cluster-announce-port", "0");
        proxy.set_mode(redmutex_testenv::Mode::Reset);
        let outcome = attempt.await.expect("the attempt ends");
        assert!(
            outcome.is_err(),
            "{case}: the reply came back before the reset, so nothing was sent again"
        );
        if node.exists(&key) {
            blocked.push(format!(
                "{case}: the attempt ended ({outcome:?}) leaving its own value at {key} (PTTL {} \
                 ms)",
                node.pttl(&key)
            ));
        }
    }
    assert!(
        blocked.is_empty(),
        "names blocked until they expire:\n{}",
        blocked.join("\n")
    );
}

/// While a name's slot migrates (`CLUSTER SETSLOT ... MIGRATING` on its master, `IMPORTING` on
/// the target), the source answers `ASK` for a name it does not hold, and the cluster client sends
/// the request again to the target after `ASKING`, which covers the next command only (or a whole
/// transaction). An entry that sends several commands (the writer's `SET ... GET` and `EXISTS` of
/// its mark, the fair mutex's `SET` and `EXISTS` of its line) must not see its second command sent
/// back to the source (`MOVED`) until the client gives up: it must wait as a script does, which
/// the target answers `TRYAGAIN` while the keys it names are not all there, until the migration
/// ends. Each kind of entry starts on a fresh name of the slot while it migrates, the migration
/// ends a second later, and each one holds its name on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_takes_a_name_whose_slot_is_migrating() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = member(&cluster).await;
    let tag = "cluster-primitives:migrating";
    let slot = key_slot(tag);
    let source = cluster.master_of_slot(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|master| master.port() != source.port())
        .expect("another master");
    let name = |what: &str| format!("{{{tag}}}:{what}");
    // Room for the cluster client's pauses after `TRYAGAIN` (over a second each) until the
    // migration has ended everywhere, on a loaded machine: a 15 s node timeout.
    let patient = |mutex: redmutex::Mutex| {
        mutex
            .with_expiry(Duration::from_secs(60))
            .with_timeout_factor(0.25)
            .with_tries(1)
    };
    // Connected to every master, scripts loaded, before the migration.
    for master in cluster.masters() {
        let warm = redlock.new_mutex(cluster.key_on(master, "cluster-primitives:warm:"));
        let lock = patient(warm).lock().await.expect("free");
        lock.unlock().await.expect("unlock");
    }
    let entries = [
        ("mutex", patient(redlock.new_mutex(name("plain")))),
        (
            "fenced mutex",
            patient(redlock.new_mutex(name("fenced")).with_fencing(true)),
        ),
        (
            "multi-name lock",
            patient(redlock.new_multi_mutex([name("a"), name("b")])),
        ),
        (
            "fair mutex",
            patient(redlock.new_mutex(name("fair")).with_fair(true)),
        ),
    ];
    let writer = redlock
        .new_rwlock(name("rw"))
        .with_expiry(Duration::from_secs(60))
        .with_timeout_factor(0.25)
        .with_tries(1);

    let migration = cluster.begin_migration(slot, target);
    let mut attempts = Vec::new();
    for (what, mutex) in entries {
        let attempt = async move {
            mutex
                .lock()
                .await
                .map(|lock| (lock.name().to_owned(), lock))
        };
        attempts.push((what, tokio::spawn(attempt)));
    }
    let attempt = async move {
        let lock = writer.write().await?;
        Ok((lock.name().to_owned(), lock))
    };
    attempts.push(("writer", tokio::spawn(attempt)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| migration.finish());

    let mut failed = Vec::new();
    for (what, attempt) in attempts {
        match attempt.await.expect("the attempt ends") {
            Ok((name, lock)) => {
                assert_eq!(target.get(&name).as_deref(), Some(lock.value()), "{what}");
                lock.unlock().await.expect("unlock");
            }
            Err::<_, Error>(error) => failed.push(format!("{what}: {error}")),
        }
    }
    assert!(
        failed.is_empty(),
        "entries that failed while the slot migrated:\n{}",
        failed.join("\n")
    );
}
