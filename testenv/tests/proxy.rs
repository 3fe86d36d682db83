//! The per-node TCP proxy: each mode, per-client proxies, and its life across restarts and drops.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use redmutex_testenv::{Cluster, Mode, Node, Proxies, Proxy};

/// A sync connection through `url`, with the given read timeout.
fn connect(url: &str, read_timeout: Duration) -> redis::Connection {
    let client = redis::Client::open(url).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    con.set_read_timeout(Some(read_timeout)).unwrap();
    con.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

fn ping(con: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(con)
}

/// A raw TCP connection to the proxy, with the given read timeout.
fn raw(proxy: &Proxy, read_timeout: Duration) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    stream.set_read_timeout(Some(read_timeout)).unwrap();
    stream
}

/// Reads until `expected` bytes have arrived; returns them and when each byte count in `marks`
/// was first reached.
fn read_replies(
    stream: &mut TcpStream,
    expected: usize,
    marks: &[usize],
) -> (String, Vec<Instant>) {
    let mut reply = Vec::new();
    let mut reached = Vec::new();
    let mut buf = [0u8; 256];
    while reply.len() < expected {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
        let now = Instant::now();
        while reached.len() < marks.len() && reply.len() >= marks[reached.len()] {
            reached.push(now);
        }
    }
    (String::from_utf8(reply).unwrap(), reached)
}

/// Asserts that nothing comes back on `stream` within its read timeout: the request is held.
fn assert_no_reply(stream: &mut TcpStream) {
    let err = stream.read(&mut [0u8; 64]).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
}

/// Waits up to 1 s for `condition`.
fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !condition() {
        assert!(Instant::now() < deadline, "not within 1 s: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn proxy_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Proxy>();
    assert_send_sync::<Proxies>();
    assert_send_sync::<redmutex_testenv::RestartHandle>();
}

#[test]
fn pass_forwards_commands_both_ways() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    assert_eq!(proxy.mode(), Mode::Pass);
    assert_eq!(Mode::default(), Mode::Pass);
    assert_eq!(proxy.target_port(), node.port());
    assert_ne!(proxy.port(), node.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));

    let mut con = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    redis::cmd("SET").arg("k").arg("v").exec(&mut con).unwrap();
    let got: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(got, "v");
    // The command reached the node itself.
    assert_eq!(node.get("k").as_deref(), Some("v"));

    // A large value crosses in many chunks, intact.
    let big = "x".repeat(1 << 20);
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .exec(&mut con)
        .unwrap();
    let back: String = redis::cmd("GET").arg("big").query(&mut con).unwrap();
    assert_eq!(back, big);

    let debug = format!("{proxy:?}");
    assert!(debug.contains("Pass"), "{debug}");
}

#[test]
fn delay_delays_each_direction() {
    let cluster = Cluster::start(1);
    let proxy = Proxy::start(cluster.node(0).port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2));

    proxy.set_mode(Mode::Delay(Duration::from_millis(150)));
    assert_eq!(proxy.mode(), Mode::Delay(Duration::from_millis(150)));
    let started = Instant::now();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    let round_trip = started.elapsed();
    // 150 ms for the request and 150 ms for the reply.
    assert!(round_trip >= Duration::from_millis(300), "{round_trip:?}");
    assert!(round_trip < Duration::from_secs(1), "{round_trip:?}");

    proxy.set_mode(Mode::Pass);
    let started = Instant::now();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    let round_trip = started.elapsed();
    assert!(round_trip < Duration::from_millis(300), "{round_trip:?}");
}

#[test]
fn delay_is_latency_not_a_queue() {
    let cluster = Cluster::start(1);
    let proxy = Proxy::start(cluster.node(0).port());
    proxy.set_mode(Mode::Delay(Duration::from_millis(400)));
    let mut stream = raw(&proxy, Duration::from_secs(2));

    let first_sent = Instant::now();
    stream.write_all(b"PING\r\n").unwrap();
    thread::sleep(Duration::from_millis(20));
    let second_sent = Instant::now();
    stream.write_all(b"PING\r\n").unwrap();
    let (reply, at) = read_replies(&mut stream, 14, &[7, 14]);
    assert_eq!(reply, "+PONG\r\n+PONG\r\n");
    // Each request's round trip is twice the delay, counted from its own send. A proxy that
    // delayed each chunk only after the one before had gone would answer the second request a
    // whole delay after the first: its round trip would be 380 ms longer. (Compared with the
    // first round trip rather than a fixed bound, so a loaded machine slowing both does not
    // matter.)
    let first = at[0] - first_sent;
    let second = at[1] - second_sent;
    assert!(first >= Duration::from_millis(800), "{first:?}");
    assert!(second >= Duration::from_millis(800), "{second:?}");
    assert!(
        second < first + Duration::from_millis(250),
        "first {first:?}, second {second:?}"
    );
}

#[test]
fn blackhole_times_out_requests_and_pass_delivers_them() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    let mut for_ping = connect(&proxy.url(), Duration::from_millis(300));
    let mut for_set = connect(&proxy.url(), Duration::from_millis(300));

    proxy.set_mode(Mode::Blackhole);
    let started = Instant::now();
    let err = ping(&mut for_ping).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    let err = redis::cmd("SET")
        .arg("held")
        .arg("v")
        .exec(&mut for_set)
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    // Held by the proxy, not lost and not yet delivered.
    assert!(!node.exists("held"));

    proxy.set_mode(Mode::Pass);
    eventually("the held SET reaches the node", || node.exists("held"));
    assert_eq!(node.get("held").as_deref(), Some("v"));
}

#[test]
fn blackhole_holds_new_connections_and_replies_come_back_in_order() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    proxy.set_mode(Mode::Blackhole);

    // Accepted while blackholed, as the kernel would.
    let mut stream = raw(&proxy, Duration::from_millis(200));
    stream
        .write_all(b"SET k first\r\nSET k second\r\nGET k\r\n")
        .unwrap();
    assert_no_reply(&mut stream);
    assert!(!node.exists("k"));

    proxy.set_mode(Mode::Pass);
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let expected = "+OK\r\n+OK\r\n$6\r\nsecond\r\n";
    let (reply, _) = read_replies(&mut stream, expected.len(), &[]);
    assert_eq!(reply, expected);
    assert_eq!(node.get("k").as_deref(), Some("second"));
}

#[test]
fn bytes_held_by_a_blackhole_follow_a_delay_after_it() {
    let cluster = Cluster::start(1);
    let proxy = Proxy::start(cluster.node(0).port());
    let mut stream = raw(&proxy, Duration::from_secs(2));
    stream.write_all(b"PING\r\n").unwrap();
    read_replies(&mut stream, 7, &[]);

    proxy.set_mode(Mode::Blackhole);
    stream.write_all(b"PING\r\n").unwrap();
    thread::sleep(Duration::from_millis(800));

    // The request was read 800 ms ago, longer than the delay: it goes at once. The reply is read
    // now, so it waits the whole delay. (Were the request delayed again, this would take 800 ms.)
    let released = Instant::now();
    proxy.set_mode(Mode::Delay(Duration::from_millis(400)));
    let (reply, at) = read_replies(&mut stream, 7, &[7]);
    assert_eq!(reply, "+PONG\r\n");
    let waited = at[0] - released;
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_millis(650), "{waited:?}");
}

#[test]
fn hold_after_lets_n_requests_through_then_holds_the_rest() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    let mut stream = raw(&proxy, Duration::from_millis(200));
    // Before the mode is set: not counted.
    stream.write_all(b"PING\r\n").unwrap();
    read_replies(&mut stream, 7, &[]);

    proxy.set_mode(Mode::HoldAfter(2));
    assert_eq!(proxy.mode(), Mode::HoldAfter(2));
    // Two requests get through, and so do their replies.
    for key in ["a", "b"] {
        stream
            .write_all(format!("SET {key} 1\r\n").as_bytes())
            .unwrap();
        let (reply, _) = read_replies(&mut stream, 5, &[]);
        assert_eq!(reply, "+OK\r\n");
    }
    // The third is held, as a blackhole holds it.
    stream.write_all(b"SET c 1\r\n").unwrap();
    assert_no_reply(&mut stream);
    assert!(!node.exists("c"));

    // Setting the mode again starts a new count: the held request goes, in order.
    proxy.set_mode(Mode::HoldAfter(1));
    let (reply, _) = read_replies(&mut stream, 5, &[]);
    assert_eq!(reply, "+OK\r\n");
    assert!(node.exists("c"));

    // A new connection reaches the node at once (the node lists a connection that has sent no
    // command yet), but the count is the proxy's: nothing is left for its request.
    let mut second = raw(&proxy, Duration::from_millis(200));
    eventually("the new connection reaches the node", || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut node.connection())
            .unwrap();
        list.contains("cmd=NULL")
    });
    second.write_all(b"SET d 1\r\n").unwrap();
    assert_no_reply(&mut second);
    assert!(!node.exists("d"));

    proxy.set_mode(Mode::Pass);
    eventually("the held request reaches the node", || node.exists("d"));
}

#[test]
fn reset_breaks_current_connections_and_new_ones() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    let mut idle = raw(&proxy, Duration::from_secs(2));
    idle.write_all(b"PING\r\n").unwrap();
    read_replies(&mut idle, 7, &[]);

    proxy.set_mode(Mode::Reset);
    // An idle connection is reset too, without sending anything.
    let err = idle.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    let started = Instant::now();
    let err = ping(&mut con).unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // The handshake completes, then the connection is reset at once. (Read before writing: the
    // kernel reports the reset once, to whichever call comes first.)
    let mut stream = raw(&proxy, Duration::from_secs(2));
    let err = stream.read(&mut [0u8; 64]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    // A Redis client fails while connecting, or on its first command.
    let client = redis::Client::open(proxy.url()).unwrap();
    let result = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut con| ping(&mut con));
    let err = result.unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");

    // The node itself is untouched, and the proxy forwards again after Pass.
    assert_eq!(node.dbsize(), 0);
    proxy.set_mode(Mode::Pass);
    let mut con = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn proxies_of_two_clients_are_independent() {
    let cluster = Cluster::start(3);
    let a = cluster.proxies();
    let b = cluster.proxies();
    assert_eq!(a.len(), 3);
    assert!(!a.is_empty());
    for i in 0..3 {
        assert_eq!(a.proxy(i).target_port(), cluster.node(i).port());
        assert_eq!(b.proxy(i).target_port(), cluster.node(i).port());
        assert_eq!(a.urls()[i], a.proxy(i).url());
        assert_ne!(a.proxy(i).port(), b.proxy(i).port());
    }
    assert_ne!(a.urls(), cluster.urls());

    a.set_mode(&[0], Mode::Blackhole);
    assert_eq!(a.proxy(0).mode(), Mode::Blackhole);
    assert_eq!(a.proxy(1).mode(), Mode::Pass);
    assert_eq!(b.proxy(0).mode(), Mode::Pass);

    let mut through_b = connect(&b.urls()[0], Duration::from_secs(2));
    redis::cmd("SET")
        .arg("from-b")
        .arg("1")
        .exec(&mut through_b)
        .unwrap();
    assert!(cluster.node(0).exists("from-b"));

    let mut through_a = raw(a.proxy(0), Duration::from_millis(200));
    through_a.write_all(b"PING\r\n").unwrap();
    assert_no_reply(&mut through_a);
    let mut a1 = connect(&a.urls()[1], Duration::from_secs(2));
    assert_eq!(ping(&mut a1).unwrap(), "PONG");

    a.set_mode(&[1, 2], Mode::Reset);
    assert_eq!(a.proxy(2).mode(), Mode::Reset);
    assert_eq!(a.proxy(0).mode(), Mode::Blackhole);

    let out_of_range = std::panic::catch_unwind(|| a.set_mode(&[0, 3], Mode::Pass));
    let message = *out_of_range.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("out of range"), "{message}");
    // Nothing changed, not even the valid index.
    assert_eq!(a.proxy(0).mode(), Mode::Blackhole);
}

#[test]
fn proxies_of_an_empty_cluster_are_empty() {
    let cluster = Cluster::try_start(0).unwrap();
    let proxies = cluster.proxies();
    assert!(proxies.is_empty());
    assert!(proxies.urls().is_empty());
    proxies.set_mode(&[], Mode::Reset);
}

#[test]
fn proxy_follows_its_node_across_restarts() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    let mut con = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    // A node that is down resets the connections made through the proxy.
    node.kill();
    let mut stream = raw(&proxy, Duration::from_secs(2));
    let err = stream.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);

    node.restart();
    let mut con = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn dropping_a_proxy_closes_its_port_and_its_connections() {
    let cluster = Cluster::start(1);
    let proxy = Proxy::start(cluster.node(0).port());
    let port = proxy.port();
    let mut stream = raw(&proxy, Duration::from_secs(2));
    stream.write_all(b"PING\r\n").unwrap();
    let (reply, _) = read_replies(&mut stream, 7, &[]);
    assert_eq!(reply, "+PONG\r\n");

    drop(proxy);
    let err = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    // Closed, not left hanging: an error or the end of the stream, at once.
    let started = Instant::now();
    match stream.read(&mut [0u8; 16]) {
        Ok(n) => assert_eq!(n, 0),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    // The node is untouched.
    assert_eq!(cluster.node(0).dbsize(), 0);
}

#[test]
fn a_proxy_to_nothing_resets_its_connections() {
    // A port bound but not listening, so it refuses connections and no one else can take it.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let proxy = Proxy::start(reserved.local_addr().unwrap().port());
    let mut stream = raw(&proxy, Duration::from_secs(2));
    let err = stream.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
}

/// Proxies are used from `#[tokio::test]`s: starting, switching and dropping one inside a
/// current-thread runtime must neither panic nor block that runtime.
#[tokio::test]
async fn proxies_work_inside_a_current_thread_runtime() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let cluster = Cluster::start(1);
    let node: &Node = cluster.node(0);
    let proxies = cluster.proxies();
    proxies.set_mode(&[0], Mode::Delay(Duration::from_millis(20)));

    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", proxies.proxy(0).port()))
        .await
        .unwrap();
    let started = Instant::now();
    stream.write_all(b"PING\r\n").await.unwrap();
    let mut reply = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
    assert!(started.elapsed() >= Duration::from_millis(40));

    proxies.set_mode(&[0], Mode::Reset);
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut reply)).await;
    assert!(
        matches!(read, Ok(Err(_)) | Ok(Ok(0))),
        "reset not seen: {read:?}"
    );
    drop(proxies);
    assert!(node.is_running());
}

#[test]
fn strand_silences_current_connections_for_good_and_serves_new_ones() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let proxy = Proxy::start(node.port());
    let mut old = connect(&proxy.url(), Duration::from_millis(200));
    redis::cmd("SET").arg("k").arg("1").exec(&mut old).unwrap();

    proxy.strand();
    assert!(
        redis::cmd("SET").arg("k").arg("2").exec(&mut old).is_err(),
        "a stranded connection answers nothing"
    );
    let mut new = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(
        ping(&mut new).unwrap(),
        "PONG",
        "a new connection is served"
    );

    // No mode brings the stranded connection back, or closes it: its request never arrives.
    for mode in [Mode::Blackhole, Mode::Pass, Mode::Reset, Mode::Pass] {
        proxy.set_mode(mode);
    }
    thread::sleep(Duration::from_millis(200));
    assert_eq!(node.get("k").as_deref(), Some("1"));
    assert_eq!(proxy.mode(), Mode::Pass);
    let error = ping(&mut old).unwrap_err();
    assert!(error.is_timeout(), "silence, not a reset: {error}");
    let mut later = connect(&proxy.url(), Duration::from_secs(2));
    assert_eq!(ping(&mut later).unwrap(), "PONG");
}
