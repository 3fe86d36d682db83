//! Starting nodes, inspecting them, and every fault `Node` injects, against real redis-server processes.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use testenv::{Cluster, Node};

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
