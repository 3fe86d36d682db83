//! `RedisCluster` against real `redis-server` cluster nodes: forming, routing, resharding (whole and
//! halfway), failover, takeover and whole-cluster faults, checked against the servers' own answers
//! and the redis crate's cluster client.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redmutex_testenv::{Node, RedisCluster, key_in_slot, key_slot};

/// A connection of the redis crate's own cluster client (it routes by itself), seeded with one URL.
fn cluster_client(seed: &str) -> redis::cluster::ClusterConnection {
    ClusterClient::builder(vec![seed])
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
        .get_connection()
        .unwrap()
}

/// The error a plain connection to `node` gets for `GET key`, if any.
fn get_error(node: &Node, key: &str) -> Option<redis::RedisError> {
    let mut con = node.connection();
    redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut con)
        .err()
}

/// The `redis-server` port a `MOVED`/`ASK` error names.
fn redirect_port(err: &redis::RedisError) -> u16 {
    let (address, _) = err
        .redirect_node()
        .unwrap_or_else(|| panic!("not a redirect: {err}"));
    address.rsplit_once(':').unwrap().1.parse().unwrap()
}

fn ports(nodes: &[&Node]) -> Vec<u16> {
    nodes.iter().map(|node| node.port()).collect()
}

#[test]
fn redis_cluster_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisCluster>();
    assert_send_sync::<redmutex_testenv::Migration<'static>>();
}

#[test]
fn redis_cli_is_found() {
    let cli = redmutex_testenv::redis_cli_binary().unwrap();
    let output = std::process::Command::new(&cli)
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success(), "{cli:?}");
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("redis-cli "));
}

#[test]
fn key_slots_agree_with_cluster_keyslot() {
    // Two masters: the smallest shape joined by hand, and every node answers CLUSTER KEYSLOT.
    let cluster = RedisCluster::start(2, 0);
    let mut con = cluster.node(0).connection();
    let mut keys: Vec<Vec<u8>> = [
        "",
        "foo",
        "bar",
        "{",
        "}",
        "{}",
        "{}{x}",
        "{x}",
        "a{b}c",
        "a{b}{c}",
        "a{{b}}",
        "a{b",
        "lock:{orders}:fence",
        "lock:{orders}",
        "{user1000}.following",
        "ключ",
        "🔒{🔑}",
    ]
    .iter()
    .map(|key| key.as_bytes().to_vec())
    .collect();
    keys.push(vec![0, 0xff, b'{', 0x80, b'}', 0x7b]);
    keys.extend((0..2000).map(|i| format!("name:{i}").into_bytes()));
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
    }
    let answers: Vec<u16> = pipe.query(&mut con).unwrap();
    for (key, answer) in keys.iter().zip(answers) {
        assert_eq!(
            key_slot(key),
            answer,
            "key {:?}",
            String::from_utf8_lossy(key)
        );
    }

    let key = key_in_slot("probe:", 16383);
    let mut asked: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query(&mut con)
        .unwrap();
    assert_eq!(asked, 16383);
    asked = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("probe:{x}")
        .query(&mut con)
        .unwrap();
    assert_eq!(cluster.slot_of("probe:{x}"), asked);

    // The two masters split the slots; the first serves slot 0, the second slot 16383.
    let masters = cluster.masters();
    assert_eq!(
        ports(&masters),
        vec![cluster.node(0).port(), cluster.node(1).port()]
    );
    assert_eq!(cluster.master_of_slot(0).port(), masters[0].port());
    assert_eq!(cluster.master_of_slot(16383).port(), masters[1].port());
    assert!(cluster.replicas().is_empty());
}

#[test]
fn three_masters_hold_keys_on_every_shard() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 0);
    eprintln!("RedisCluster::start(3, 0) took {:?}", started.elapsed());

    assert_eq!(cluster.len(), 3);
    assert!(!cluster.is_empty());
    assert_eq!(cluster.urls().len(), 3);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    assert!(cluster.replicas().is_empty());
    assert_eq!(cluster.master_of_slot(0).port(), masters[0].port());
    assert!(
        masters
            .iter()
            .all(|m| cluster.is_master(m) && cluster.replicas_of(m).is_empty())
    );
    let ids: BTreeSet<String> = masters.iter().map(|m| cluster.node_id(m)).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| id.len() == 40), "{ids:?}");
    let seed = cluster.seed_url();
    assert!(cluster.urls().contains(&seed), "{seed}");

    // Written through the redis crate's cluster client, which follows MOVED by itself.
    let mut con = cluster_client(&seed);
    let names: Vec<String> = (0..300).map(|i| format!("lock:{i}")).collect();
    for name in &names {
        redis::cmd("SET")
            .arg(name)
            .arg(name)
            .arg("PX")
            .arg(60_000)
            .query::<()>(&mut con)
            .unwrap();
    }
    let mut per_master = vec![0; 3];
    for name in &names {
        let owner = cluster.master_of_key(name);
        assert_eq!(owner.get(name).as_deref(), Some(name.as_str()));
        assert!(owner.pttl(name) > 0);
        assert_eq!(cluster.get(name).as_deref(), Some(name.as_str()));
        for other in masters.iter().filter(|m| m.port() != owner.port()) {
            // The others send a client to the owner: our slot map is the servers' one.
            let err = get_error(other, name).expect("a non-owner must redirect");
            assert_eq!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
            );
            assert_eq!(redirect_port(&err), owner.port(), "{name}");
        }
        per_master[masters
            .iter()
            .position(|m| m.port() == owner.port())
            .unwrap()] += 1;
    }
    assert!(per_master.iter().all(|&n| n > 50), "{per_master:?}");
    assert_eq!(cluster.dbsize(), 300);

    // Keys placed by us are where the cluster client reads them.
    for (i, master) in masters.iter().enumerate() {
        let key = cluster.key_on(master, &format!("placed{i}:"));
        assert_eq!(cluster.master_of_key(&key).port(), master.port());
        master.set(&key, "here");
        let value: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert_eq!(value, "here");
        let mut direct = cluster.connection_for_key(&key);
        let value: String = redis::cmd("GET").arg(&key).query(&mut direct).unwrap();
        assert_eq!(value, "here");
    }

    // The routed helpers, on a tagged key.
    cluster.set_px("{t}:x", "1", Duration::from_secs(30));
    assert!(cluster.exists("{t}:x"));
    assert!(cluster.pttl("{t}:x") > 0);
    cluster.set("{t}:y", "2");
    assert_eq!(cluster.pttl("{t}:y"), -1);
    cluster.del("{t}:x");
    assert!(!cluster.exists("{t}:x"));
    assert_eq!(cluster.pttl("{t}:x"), -2);

    let debug = format!("{cluster:?}");
    assert!(debug.contains(&masters[2].port().to_string()), "{debug}");
}

#[test]
fn a_migrated_slot_takes_its_keys_to_the_new_master() {
    let cluster = RedisCluster::start(3, 0);
    let slot = key_slot("{moving}");
    let keys: Vec<String> = (0..250).map(|i| format!("{{moving}}:{i}")).collect();
    for key in &keys {
        cluster.set_px(key, "v", Duration::from_secs(60));
    }
    let bystander = key_in_slot("still:", slot.wrapping_add(1) % redmutex_testenv::SLOTS);
    cluster.set(&bystander, "stays");
    let source = cluster.master_of_slot(slot);
    let bystander_owner = cluster.master_of_key(&bystander).port();
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.port() != source.port())
        .unwrap();

    // 250 keys: more than one batch of MIGRATE.
    cluster.migrate_slot(slot, target);

    assert_eq!(cluster.master_of_slot(slot).port(), target.port());
    for key in &keys {
        assert_eq!(target.get(key).as_deref(), Some("v"), "{key}");
        let pttl = target.pttl(key);
        assert!(0 < pttl && pttl <= 60_000, "{key}: {pttl}");
    }
    assert_eq!(source.dbsize() + target.dbsize(), cluster.dbsize());
    let err = get_error(source, &keys[0]).expect("the source must redirect now");
    assert_eq!(redirect_port(&err), target.port());
    // Every node agrees, and other slots stayed where they were.
    for node in cluster.nodes() {
        let mut con = node.connection();
        let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
        assert!(format!("{slots:?}").contains(&target.port().to_string()));
    }
    assert_eq!(cluster.master_of_key(&bystander).port(), bystander_owner);
    assert_eq!(cluster.get(&bystander).as_deref(), Some("stays"));

    // The cluster client finds the keys at their new home.
    let mut con = cluster_client(&cluster.seed_url());
    let value: String = redis::cmd("GET").arg(&keys[7]).query(&mut con).unwrap();
    assert_eq!(value, "v");

    // And the slot can go back.
    cluster.migrate_slot(slot, source);
    assert_eq!(cluster.master_of_slot(slot).port(), source.port());
    assert_eq!(source.get(&keys[0]).as_deref(), Some("v"));
}

#[test]
fn a_half_done_migration_gives_ask_and_tryagain() {
    let cluster = RedisCluster::start(3, 0);
    let slot = key_slot("{half}");
    let keys: Vec<String> = (0..10).map(|i| format!("{{half}}:{i}")).collect();
    for key in &keys {
        cluster.set(key, key);
    }
    let source = cluster.master_of_slot(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.port() != source.port())
        .unwrap();

    let migration = cluster.begin_migration(slot, target);
    assert_eq!(migration.slot(), slot);
    assert_eq!(migration.source().port(), source.port());
    assert_eq!(migration.target().port(), target.port());
    assert_eq!(migration.keys_left().len(), 10);
    migration.move_keys(&[&keys[0]]);
    let moved = migration.move_some(3);
    assert_eq!(moved.len(), 3);
    assert!(!moved.contains(&keys[0]), "{moved:?}");
    assert_eq!(migration.keys_left().len(), 6);
    assert!(format!("{migration:?}").contains(&slot.to_string()));

    // The source still serves the slot, and sends moved (and new) keys to the target with ASK.
    assert_eq!(cluster.master_of_slot(slot).port(), source.port());
    let err = get_error(source, &keys[0]).expect("a moved key must be redirected");
    assert_eq!(
        err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Ask)
    );
    assert_eq!(redirect_port(&err), target.port());
    let left = migration.keys_left();
    assert_eq!(source.get(&left[0]), Some(left[0].clone()));
    // The target answers for the moved key only after ASKING.
    let err = get_error(target, &keys[0]).expect("the target must refuse without ASKING");
    assert_eq!(
        err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
    );
    let mut con = target.connection();
    let (_, value): ((), Option<String>) = redis::pipe()
        .cmd("ASKING")
        .cmd("GET")
        .arg(&keys[0])
        .query(&mut con)
        .unwrap();
    assert_eq!(value.as_deref(), Some(keys[0].as_str()));
    // Routed helpers follow the ASK.
    assert_eq!(cluster.get(&keys[0]).as_deref(), Some(keys[0].as_str()));
    assert_eq!(cluster.get(&left[0]).as_deref(), Some(left[0].as_str()));
    // A multi-key command over both sides cannot run on either: TRYAGAIN on the source.
    let mut con = source.connection();
    let err = redis::cmd("MGET")
        .arg(&keys[0])
        .arg(&left[0])
        .query::<Vec<Option<String>>>(&mut con)
        .unwrap_err();
    assert_eq!(
        err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
        "{err}"
    );

    migration.finish();
    assert_eq!(cluster.master_of_slot(slot).port(), target.port());
    for key in &keys {
        assert_eq!(target.get(key).as_deref(), Some(key.as_str()));
    }
    assert_eq!(source.dbsize(), 0);
}

#[test]
fn three_masters_with_a_replica_each_fail_over() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("RedisCluster::start(3, 1) took {:?}", started.elapsed());

    assert_eq!(cluster.len(), 6);
    let masters = cluster.masters();
    let replicas = cluster.replicas();
    assert_eq!((masters.len(), replicas.len()), (3, 3));
    // redis-cli makes masters of the first nodes it is given.
    let first_three: Vec<&Node> = cluster.nodes()[..3].iter().collect();
    assert_eq!(ports(&masters), ports(&first_three));
    for master in &masters {
        let of = cluster.replicas_of(master);
        assert_eq!(of.len(), 1, "master on port {}", master.port());
        assert_eq!(cluster.master_of_replica(of[0]).port(), master.port());
        assert!(!cluster.is_master(of[0]));
    }

    let name = "lock:held";
    cluster.set_px(name, "token", Duration::from_secs(60));
    let old_master = cluster.master_of_key(name);
    let replica = cluster.replicas_of(old_master)[0];
    // A manual failover waits until the replica has every write, so the key survives it.
    cluster.failover(replica);

    assert!(cluster.is_master(replica));
    assert!(!cluster.is_master(old_master));
    assert_eq!(cluster.master_of_replica(old_master).port(), replica.port());
    assert_eq!(cluster.master_of_key(name).port(), replica.port());
    assert_eq!(replica.get(name).as_deref(), Some("token"));
    assert!(replica.pttl(name) > 0);
    let err = get_error(old_master, name).expect("the old master must redirect");
    assert_eq!(redirect_port(&err), replica.port());
    assert_eq!(cluster.masters().len(), 3);
    assert!(ports(&cluster.masters()).contains(&replica.port()));

    // Back again, through the redis crate's cluster client this time.
    cluster.failover(old_master);
    assert_eq!(cluster.master_of_key(name).port(), old_master.port());
    let mut con = cluster_client(&cluster.seed_url());
    let value: String = redis::cmd("GET").arg(name).query(&mut con).unwrap();
    assert_eq!(value, "token");

    // A killed master: the other masters agree it failed, and its replica is elected in its place.
    // A master votes on the failover of one shard at most once in twice the node timeout, and the
    // failovers above just took its votes; a replica that starts an election inside that window
    // may promote itself on its earlier term's votes with a config epoch that the others reject,
    // leaving them in `cluster_state:fail`. So the kill waits the window out, as a real outage
    // would seldom follow two failovers within seconds.
    std::thread::sleep(cluster.node_timeout() * 2 + Duration::from_millis(500));
    old_master.kill();
    cluster.wait_ok();
    assert_eq!(cluster.master_of_key(name).port(), replica.port());
    assert_eq!(cluster.masters().len(), 3);
    assert!(cluster.replicas_of(replica).is_empty());
}

#[test]
fn a_replica_takes_over_a_dead_master() {
    let cluster = RedisCluster::start(1, 1);
    let master = cluster.masters()[0];
    let replica = cluster.replicas_of(master)[0];
    // WAIT counts the writes of its own connection: the replica has the key before the kill.
    let mut con = master.connection();
    let ((), acked): ((), i64) = redis::pipe()
        .cmd("SET")
        .arg("k")
        .arg("v")
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);

    master.kill();
    // With the only master gone no vote can be won: only a takeover promotes the replica.
    cluster.takeover(replica);
    assert!(cluster.is_master(replica));
    assert_eq!(ports(&cluster.masters()), vec![replica.port()]);
    assert_eq!(cluster.seed_url(), replica.url());
    assert_eq!(cluster.get("k").as_deref(), Some("v"));

    // The old master comes back empty, as a replica of the new one.
    master.restart();
    cluster.wait_ok();
    assert_eq!(cluster.master_of_replica(master).port(), replica.port());
}

#[test]
fn whole_cluster_faults() {
    let cluster = RedisCluster::start(1, 1);
    let master = cluster.masters()[0];
    let id = cluster.node_id(master);
    cluster.set("k", "v");

    cluster.pause_all();
    assert!(cluster.nodes().iter().all(Node::is_paused));
    cluster.resume_all();
    assert!(cluster.nodes().iter().all(|node| !node.is_paused()));
    assert_eq!(cluster.get("k").as_deref(), Some("v"));

    cluster.kill_all();
    assert!(cluster.nodes().iter().all(|node| !node.is_running()));
    // Nobody answers, yet the seed is still a URL of ours.
    assert!(cluster.urls().contains(&cluster.seed_url()));

    // Back with the same ids and roles, without data.
    cluster.restart_all();
    assert_eq!(cluster.node_id(master), id);
    assert!(cluster.is_master(master));
    assert_eq!(cluster.get("k"), None);
    assert_eq!(cluster.dbsize(), 0);
}

#[test]
fn a_dead_shard_takes_the_cluster_down_until_it_returns() {
    let cluster = RedisCluster::start(2, 0);
    let key = cluster.key_on(cluster.masters()[1], "k");
    let other = cluster.key_on(cluster.masters()[0], "k");
    let dead = cluster.masters()[1];
    dead.kill();
    // Alone, the survivor is a minority of the masters: it refuses every key once it notices.
    let survivor = cluster.masters()[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut con = survivor.connection();
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        if info.contains("cluster_state:fail") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the survivor never noticed: {info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = get_error(survivor, &other).expect("a failed cluster refuses reads");
    assert_eq!(
        err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
    );

    dead.restart();
    cluster.wait_ok();
    assert_eq!(cluster.get(&key), None);
    cluster.set(&other, "back");
    assert_eq!(cluster.get(&other).as_deref(), Some("back"));
}
