//! A delay proxy for the zone rows of the comparison benchmark: a fixed one-way delay in each
//! direction between the client and one node, as if the node sat in another zone or region.
//!
//! testenv's proxy runs on tokio, whose timer rounds every sleep up to a whole millisecond: a
//! 0.1 ms delay would become 1 ms. This one uses plain threads (a reader and a writer per
//! direction of each connection), whose sleeps wake within tens of microseconds. The reader stamps
//! each chunk as it arrives and goes on reading; the writer forwards each chunk once its delay has
//! passed, in the order read. So the delay is latency, not a bandwidth limit: pipelined requests
//! are not delayed one after another, and bytes keep their order.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The most bytes read at once; each chunk read is forwarded as a unit.
const CHUNK: usize = 16 * 1024;

/// A TCP proxy on `127.0.0.1` in front of one node, delaying every byte by `one_way` in each
/// direction. Dropping it closes its listener and every connection.
pub struct DelayProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Both sockets of every connection, to shut them down on drop.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts a proxy on a free loopback port, forwarding to `127.0.0.1:target_port`.
    pub fn start(target_port: u16, one_way: Duration) -> io::Result<DelayProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, sockets) = (Arc::clone(&stop), Arc::clone(&sockets));
            thread::Builder::new()
                .name(format!("zone-proxy-{port}"))
                .spawn(move || accept_loop(listener, target_port, one_way, &stop, &sockets))?
        };
        Ok(DelayProxy {
            port,
            stop,
            sockets,
            accept: Some(accept),
        })
    }

    /// `redis://127.0.0.1:PORT/`, with the proxy's own port.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's own port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // Every reader then ends, and with it its writer.
        for socket in lock(&self.sockets).drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept_loop(
    listener: TcpListener,
    target_port: u16,
    one_way: Duration,
    stop: &AtomicBool,
    sockets: &Mutex<Vec<TcpStream>>,
) {
    for client in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(node) = TcpStream::connect((Ipv4Addr::LOCALHOST, target_port)) else {
            continue; // dropping `client` closes it: the node is down
        };
        // Requests are small: sending each chunk at once keeps Nagle's algorithm from adding
        // latency of its own.
        let _ = client.set_nodelay(true);
        let _ = node.set_nodelay(true);
        let clones = (|| {
            let mut held = lock(sockets);
            held.push(client.try_clone()?);
            held.push(node.try_clone()?);
            Ok::<_, io::Error>((client.try_clone()?, node.try_clone()?))
        })();
        let Ok((client_out, node_out)) = clones else {
            continue;
        };
        let _ = pump(client, node_out, one_way);
        let _ = pump(node, client_out, one_way);
    }
}

/// Forwards `from` to `to`, each chunk `delay` after it was read, with a reader and a writer
/// thread joined by a queue.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> io::Result<()> {
    let (chunks, pending) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::Builder::new()
        .name("zone-proxy-read".into())
        .spawn(move || {
            let mut buf = vec![0; CHUNK];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => return, // dropping `chunks` ends the writer
                    Ok(n) => {
                        if chunks.send((Instant::now(), buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        })?;
    thread::Builder::new()
        .name("zone-proxy-write".into())
        .spawn(move || {
            while let Ok((read_at, chunk)) = pending.recv() {
                let due = read_at + delay;
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// The round trip through a proxy as `redis-cli --latency` sees it, run for `secs` seconds: its
/// summary (without a terminal, `min max avg samples`, in ms), or why it could not be had.
pub fn redis_cli_latency(port: u16, secs: u32) -> String {
    let output = std::process::Command::new("timeout")
        .args([
            "-s",
            "INT",
            &secs.to_string(),
            "redis-cli",
            "--latency",
            "-p",
        ])
        .arg(port.to_string())
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.split(['\r', '\n'])
                .rfind(|line| !line.trim().is_empty())
                .map_or_else(
                    || text.trim().to_owned(),
                    |line| {
                        // Without a terminal the summary may carry escape sequences.
                        line.chars()
                            .filter(|c| !c.is_control())
                            .collect::<String>()
                            .replace("[0K", "")
                            .trim()
                            .to_owned()
                    },
                )
        }
        Err(error) => format!("redis-cli not run: {error}"),
    }
}
