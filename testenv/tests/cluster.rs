//! Starting nodes, inspecting them, and every fault `Node` injects, against real redis-server processes.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use redmutex_testenv::{Cluster, Node};

/// Sends `PING` on a fresh raw connection and reads the reply, waiting at most `timeout`.
fn raw_ping(node: &Node, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", node.port()))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn cluster_and_node_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Cluster>();
    assert_send_sync::<Node>();
}

#[test]
fn three_independent_nodes_answer_commands() {
    let cluster = Cluster::start(3);
    assert_eq!(cluster.len(), 3);
    assert!(!cluster.is_empty());
    assert_eq!(cluster.nodes().len(), 3);

    let urls = cluster.urls();
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(urls[i], format!("redis://127.0.0.1:{}/", node.port()));
        assert_eq!(node.url(), urls[i]);
        assert!(node.is_running());
    }
    let mut ports: Vec<u16> = cluster.nodes().iter().map(Node::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "ports must differ: {urls:?}");

    let node = cluster.node(0);
    node.set("plain", "v1");
    assert_eq!(node.get("plain").as_deref(), Some("v1"));
    assert_eq!(node.pttl("plain"), -1);
    assert!(node.exists("plain"));
    // Nodes are independent masters: nothing is replicated.
    assert_eq!(cluster.node(1).get("plain"), None);
    assert_eq!(cluster.node(1).dbsize(), 0);

    node.set_px("expiring", "v2", Duration::from_secs(5));
    let pttl = node.pttl("expiring");
    assert!(0 < pttl && pttl <= 5000, "pttl {pttl}");
    assert_eq!(node.dbsize(), 2);

    node.del("plain");
    node.del("plain");
    assert!(!node.exists("plain"));
    assert_eq!(node.pttl("plain"), -2);
    assert_eq!(node.dbsize(), 1);

    let mut con = cluster.node(2).connection();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    let debug = format!("{cluster:?}");
    assert!(
        debug.contains(&cluster.node(2).port().to_string()),
        "{debug}"
    );
}

#[test]
fn empty_cluster_is_allowed() {
    let cluster = Cluster::try_start(0).unwrap();
    assert!(cluster.is_empty());
    assert!(cluster.urls().is_empty());
}

#[test]
fn pause_silences_the_node_and_resume_answers_what_waited() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.pause();
    assert!(node.is_running(), "a paused node is still alive");

    let mut stream = TcpStream::connect(("127.0.0.1", node.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    stream.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let err = stream.read(&mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );

    node.resume();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let n = stream.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    assert_eq!(raw_ping(node, Duration::from_secs(2)).unwrap(), "+PONG\r\n");
}

#[test]
fn inspection_of_a_paused_node_fails_within_the_timeout() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.pause();
    let started = Instant::now();
    let result = std::panic::catch_unwind(|| node.get("k"));
    let elapsed = started.elapsed();
    node.resume();
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("testenv:"), "{message}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn kill_makes_the_port_refuse_and_is_idempotent() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.kill();
    assert!(!node.is_running());
    assert_eq!(node.pid(), None);
    let err = TcpStream::connect(("127.0.0.1", node.port())).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    node.kill();
    node.resume();
    assert!(!node.is_running());
}

#[test]
fn kill_of_a_paused_node_works() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let pid = node.pid().unwrap();
    node.pause();
    node.kill();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn pause_of_a_killed_node_panics() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.kill();
    let message = *std::panic::catch_unwind(|| node.pause())
        .unwrap_err()
        .downcast::<String>()
        .unwrap();
    assert!(message.contains("not running"), "{message}");
}

#[test]
fn restart_keeps_the_port_and_forgets_the_data() {
    let cluster = Cluster::start(2);
    let node = cluster.node(1);
    let port = node.port();
    let url = node.url();
    node.set("k", "v");
    let first_pid = node.pid().unwrap();

    node.restart();
    assert_eq!(node.port(), port);
    assert_eq!(node.url(), url);
    assert_ne!(node.pid().unwrap(), first_pid);
    assert!(!Path::new(&format!("/proc/{first_pid}")).exists());
    assert_eq!(node.get("k"), None);
    assert_eq!(node.dbsize(), 0);

    // From killed, and from paused.
    node.kill();
    node.restart();
    assert_eq!(raw_ping(node, Duration::from_secs(2)).unwrap(), "+PONG\r\n");
    node.pause();
    node.restart();
    assert_eq!(raw_ping(node, Duration::from_secs(2)).unwrap(), "+PONG\r\n");
    assert_eq!(node.port(), port);

    // The other node was untouched.
    assert!(cluster.node(0).is_running());
}

#[test]
fn drop_kills_every_process_and_removes_the_directories() {
    let cluster = Cluster::start(3);
    cluster.node(1).pause();
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid().unwrap()).collect();
    let dirs: Vec<_> = cluster
        .nodes()
        .iter()
        .map(|n| n.log_path().parent().unwrap().to_path_buf())
        .collect();
    for dir in &dirs {
        assert!(dir.exists());
    }
    drop(cluster);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still there"
        );
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} still there", dir.display());
    }
}

#[test]
fn log_records_the_start() {
    let cluster = Cluster::start(1);
    let log = std::fs::read_to_string(cluster.node(0).log_path()).unwrap();
    assert!(!log.is_empty());
}

#[test]
fn restart_waits_for_its_port_to_be_released() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.kill();
    // Someone else holds the port for a moment, as a client socket or a slow close might.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", node.port())).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(squatter);
    });
    node.restart();
    release.join().unwrap();
    assert_eq!(raw_ping(node, Duration::from_secs(2)).unwrap(), "+PONG\r\n");
}

/// A live `redis-server` started in `dir`, per `/proc/*/cwd` (it changes to its `--dir`): unlike
/// the port, the directory cannot be taken by another test's node.
fn redis_server_in(dir: &Path) -> Option<u32> {
    std::fs::read_dir("/proc").unwrap().find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        // A removed directory reads as "PATH (deleted)".
        let is_ours = cwd.to_string_lossy().starts_with(&*dir.to_string_lossy());
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (is_ours && comm.trim() == "redis-server").then_some(pid)
    })
}

#[test]
fn restart_after_keeps_the_node_down_for_the_delay() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let port = node.port();
    node.set("k", "v");
    let first_pid = node.pid().unwrap();

    let started = Instant::now();
    let restart = node.restart_after(Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "it returns at once"
    );
    assert!(!node.is_running());
    assert!(!Path::new(&format!("/proc/{first_pid}")).exists());
    thread_sleep_ms(150);
    assert!(!restart.is_finished());
    let err = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);

    assert!(restart.wait());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(node.is_running());
    assert_eq!(node.port(), port);
    assert_eq!(raw_ping(node, Duration::from_secs(2)).unwrap(), "+PONG\r\n");
    assert_eq!(node.get("k"), None);
}

#[test]
fn restart_keeping_data_keeps_keys_and_their_expiry_even_from_a_paused_node() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let first_pid = node.pid().unwrap();
    node.set("kept", "v");
    node.set_px("expiring", "v", Duration::from_secs(60));
    node.set_px("gone", "v", Duration::from_millis(300));
    node.pause();

    node.restart_keeping_data();
    assert_ne!(node.pid().unwrap(), first_pid, "a new process");
    assert!(!node.is_paused());
    assert_eq!(node.get("kept").as_deref(), Some("v"));
    assert_eq!(node.pttl("kept"), -1);
    let left = node.pttl("expiring");
    assert!(left > 50_000 && left <= 60_000, "{left}");
    thread_sleep_ms(400);
    assert_eq!(
        node.get("gone"),
        None,
        "its expiry ran on across the restart"
    );

    // The snapshot was loaded once: an ordinary restart is empty again.
    node.restart();
    assert_eq!(node.dbsize(), 0);
}

#[test]
fn restart_after_is_cancelled_by_kill_restart_and_another_restart_after() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);

    let restart = node.restart_after(Duration::from_millis(100));
    node.kill();
    assert!(!restart.wait(), "kill cancels it");
    assert!(!node.is_running());

    let restart = node.restart_after(Duration::from_secs(3600));
    let started = Instant::now();
    node.restart();
    assert!(!restart.wait(), "restart cancels it");
    assert!(started.elapsed() < Duration::from_secs(1), "and wakes it");
    assert!(node.is_running());

    let first = node.restart_after(Duration::from_secs(3600));
    let second = node.restart_after(Duration::ZERO);
    assert!(!first.wait());
    assert!(second.wait());
    assert!(node.is_running());
}

#[test]
fn dropping_a_cluster_cancels_a_pending_restart_after() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let dir = node.log_path().parent().unwrap().to_path_buf();
    assert!(
        redis_server_in(&dir).is_some(),
        "the check finds a live node"
    );
    let restart = node.restart_after(Duration::from_millis(200));

    let started = Instant::now();
    drop(cluster);
    assert!(!restart.wait());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "woken by the drop"
    );
    thread_sleep_ms(250);
    assert_eq!(redis_server_in(&dir), None);
    assert!(!dir.exists());
}

#[test]
fn dropping_a_cluster_while_a_delayed_restart_starts_the_node_leaves_no_process() {
    // The drop lands before, during or after the new process starts (a few ms to start).
    for delay_ms in [0, 2, 5, 10, 20] {
        let cluster = Cluster::start(1);
        let dir = cluster.node(0).log_path().parent().unwrap().to_path_buf();
        let restart = cluster
            .node(0)
            .restart_after(Duration::from_millis(delay_ms));
        thread_sleep_ms(5);
        drop(cluster);
        // Started and killed by the drop, or never started.
        let _ = restart.wait();
        assert_eq!(redis_server_in(&dir), None, "delay {delay_ms} ms");
    }
}

#[test]
fn shorten_sets_a_shorter_ttl_as_a_clock_jump_would() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    node.set_px("k", "v", Duration::from_secs(30));
    assert!(node.shorten("k", Duration::from_millis(500)));
    let pttl = node.pttl("k");
    assert!(0 < pttl && pttl <= 500, "pttl {pttl}");

    node.set("no-ttl", "v");
    assert!(node.shorten("no-ttl", Duration::from_secs(1)));
    assert!(node.pttl("no-ttl") > 0);

    assert!(!node.shorten("missing", Duration::from_secs(1)));
    assert!(!node.exists("missing"));

    assert!(node.shorten("k", Duration::ZERO));
    assert!(!node.exists("k"), "a zero TTL expires the key at once");
}

fn thread_sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}
