//! A TCP proxy on loopback between one client and one node, for latency and partitions.
//!
//! Every proxy in the process runs on one background tokio runtime owned by this module, so the
//! proxies work the same under a test's own runtime (current-thread or not) and under none.

use std::fmt;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc as queue, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until};

use crate::Error;

/// The most bytes read at once; each chunk read is forwarded (or held) as a unit.
const CHUNK: usize = 16 * 1024;
/// How long dropping a proxy waits for its listener and connections to be closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (out of file descriptors, say), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// What a [`Proxy`] does with the bytes it reads, set with [`Proxy::set_mode`].
///
/// A mode applies to every byte read after [`set_mode`](Proxy::set_mode) returns, in both
/// directions unless it says otherwise, on current connections and new ones alike. Bytes already read and not yet forwarded
/// (because of a delay or a blackhole) are forwarded under the new mode.
///
/// # Default
///
/// [`Mode::Pass`], the mode of a new proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forwards bytes both ways as soon as they are read.
    #[default]
    Pass,
    /// Forwards each chunk of bytes no earlier than this long after it was read, in both
    /// directions, in order.
    ///
    /// This is latency, not a bandwidth limit: reading goes on while earlier chunks wait, so
    /// pipelined requests are not delayed one after another. A request and its reply are each
    /// delayed, so a round trip takes at least twice the delay. Opening a connection is not
    /// delayed.
    Delay(Duration),
    /// Forwards nothing, but keeps connections open and accepts new ones: the fault of a network
    /// partition, seen from a client.
    ///
    /// Bytes are held, not dropped, and forwarded in order once the mode lets bytes through again,
    /// as TCP retransmission delivers them after a real partition heals. So a request that a
    /// client gave up on (its timeout fired) still reaches the node later, and its reply still
    /// comes back on that connection. A chunk held under a blackhole and then released into a
    /// [`Delay`](Mode::Delay) is forwarded once the delay since it was read has passed (at once, if
    /// it was held longer than the delay).
    ///
    /// A connection accepted while blackholed is connected to the node only when the blackhole
    /// ends; until then its bytes wait unread in the kernel's buffers, so a delay counts from the
    /// end of the blackhole for them.
    Blackhole,
    /// Resets every current connection (both to the client and to the node, with a TCP `RST`),
    /// and every connection accepted while in this mode: the fault of a crashed middlebox or a
    /// peer that restarted.
    ///
    /// A new connection's handshake still completes (the kernel accepts it), then it is reset at
    /// once, so a client sees the error on its first read or write (a Redis client usually does
    /// one while connecting). Bytes held by a delay or a blackhole are discarded.
    Reset,
    /// Forwards the next `n` chunks of bytes that clients send, then holds what they send after
    /// them, as a [`Blackhole`](Mode::Blackhole) does; replies pass as they come. The fault of a
    /// partition that begins at a chosen request: the requests before it, and their replies, get
    /// through.
    ///
    /// Chunks are counted over all of the proxy's connections, from the moment the mode is set
    /// (setting it again starts a new count). A request a client writes on its own, such as one
    /// sent after the reply to the one before, is one chunk; requests written together may arrive
    /// as one. A connection accepted in this mode is connected to the node at once.
    HoldAfter(u32),
}

/// A TCP proxy on `127.0.0.1` in front of one node, whose [`Mode`] can be switched at run time.
///
/// It forwards to `127.0.0.1:TARGET_PORT`, connecting once per client connection, so it keeps
/// working across [`Node::restart`](crate::Node::restart), which reuses the port. If the node does
/// not accept the connection (it is down), the client's connection is reset.
///
/// The proxy runs on a background runtime of this crate: every method is synchronous, and can be
/// called from a test's own runtime or from plain threads. Dropping the proxy stops its listener
/// and resets its connections before `drop` returns.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use redmutex_testenv::{Cluster, Mode, Proxy};
///
/// let cluster = Cluster::start(1);
/// let proxy = Proxy::start(cluster.node(0).port());
///
/// let client = redis::Client::open(proxy.url()).unwrap();
/// let mut con = client.get_connection().unwrap();
/// con.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
/// redis::cmd("SET").arg("k").arg("v").exec(&mut con).unwrap();
/// assert_eq!(cluster.node(0).get("k").as_deref(), Some("v"));
///
/// proxy.set_mode(Mode::Blackhole);
/// // Times out: the proxy holds the request, and delivers it once the blackhole ends.
/// assert!(redis::cmd("DEL").arg("k").exec(&mut con).is_err());
/// assert!(cluster.node(0).exists("k"));
/// ```
pub struct Proxy {
    port: u16,
    target_port: u16,
    /// The only sender: dropping it tells the proxy's tasks to stop.
    mode: watch::Sender<Control>,
    /// How many connections were accepted so far; connections are numbered in that order.
    accepted: Arc<AtomicU64>,
    /// Under [`Mode::HoldAfter`], how many more chunks from clients may pass.
    requests: Arc<AtomicU32>,
    /// Disconnected once every task of the proxy has ended, so its sockets are closed. In a
    /// `Mutex` only to make the proxy `Sync`.
    stopped: Mutex<mpsc::Receiver<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, in [`Mode::Pass`], forwarding to
    /// `127.0.0.1:target_port`.
    ///
    /// Nothing needs to listen on the target port yet: each client connection is connected to it
    /// when it is accepted.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound; [`try_start`](Proxy::try_start) returns that error
    /// instead.
    pub fn start(target_port: u16) -> Proxy {
        Proxy::try_start(target_port).unwrap_or_else(|e| {
            panic!("testenv: could not start a proxy to 127.0.0.1:{target_port}: {e}")
        })
    }

    /// Starts a proxy on a free loopback port, in [`Mode::Pass`], forwarding to
    /// `127.0.0.1:target_port`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if no loopback port can be bound.
    ///
    /// # Panics
    ///
    /// If the background runtime cannot be started (the first time only).
    pub fn try_start(target_port: u16) -> Result<Proxy, Error> {
        let listener = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("binding 127.0.0.1:0 for a proxy", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("making a proxy's listener non-blocking", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading the address of a proxy's listener", e))?
            .port();

        let runtime = runtime();
        let listener = {
            // Registering the socket needs the runtime's context, not a task on it.
            let _context = runtime.enter();
            TcpListener::from_std(listener)
                .map_err(|e| Error::io("registering a proxy's listener", e))?
        };
        let (mode, mode_rx) = watch::channel(Control::default());
        let (stopped_tx, stopped) = mpsc::sync_channel(0);
        let target = SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
        let accepted = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU32::new(0));
        let counts = Counts {
            accepted: Arc::clone(&accepted),
            requests: Arc::clone(&requests),
        };
        runtime.spawn(accept_loop(listener, target, mode_rx, counts, stopped_tx));
        Ok(Proxy {
            port,
            target_port,
            mode,
            accepted,
            requests,
            stopped: Mutex::new(stopped),
        })
    }

    /// `redis://127.0.0.1:PORT/`, with the proxy's own port: the URL to give a client.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's own port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port on `127.0.0.1` it forwards to.
    pub fn target_port(&self) -> u16 {
        self.target_port
    }

    /// Switches the mode; it applies to every byte read after this returns.
    ///
    /// Switching to [`Mode::Reset`] resets the current connections shortly after (on the proxy's
    /// runtime), but no byte read after this returns is forwarded, and every connection accepted
    /// after it is reset.
    pub fn set_mode(&self, mode: Mode) {
        if let Mode::HoldAfter(n) = mode {
            // Before the mode, so that no chunk sees the mode with the old count.
            self.requests.store(n, Ordering::SeqCst);
        }
        self.mode.send_modify(|control| control.mode = mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode.borrow().mode
    }

    /// Leaves every connection accepted so far half-open, for good: from now on it forwards
    /// nothing either way and is never closed (until the proxy is dropped), whatever the mode,
    /// as when the peer's host vanished or a middlebox forgot the flow. Connections accepted
    /// later are served under the mode as usual.
    ///
    /// A client sees no error on a stranded connection, only silence, while a new connection to
    /// the same node works: the fault that only a client which gives up on a silent connection
    /// and makes a new one gets over.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex_testenv::{Cluster, Proxy};
    ///
    /// let cluster = Cluster::start(1);
    /// let proxy = Proxy::start(cluster.node(0).port());
    /// let client = redis::Client::open(proxy.url()).unwrap();
    /// let mut old = client.get_connection().unwrap();
    /// old.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    ///
    /// proxy.strand();
    /// assert!(redis::cmd("PING").exec(&mut old).is_err(), "silence on the old connection");
    /// let mut new = client.get_connection().unwrap();
    /// redis::cmd("PING").exec(&mut new).unwrap();
    /// ```
    pub fn strand(&self) {
        let accepted = self.accepted.load(Ordering::SeqCst);
        self.mode
            .send_modify(|control| control.stranded_before = accepted);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping the only sender stops every task; swap in an unconnected one to drop it now.
        drop(mem::replace(
            &mut self.mode,
            watch::Sender::new(Control::default()),
        ));
        // A bounded wait on the background runtime, which never waits on the caller's, so the port
        // is closed on return. Timing out means a task is stuck; the test still goes on.
        let stopped = self
            .stopped
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = stopped.recv_timeout(STOP_TIMEOUT);
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("target_port", &self.target_port)
            .field("mode", &self.mode())
            .field("stranded", &self.mode.borrow().stranded_before)
            .finish()
    }
}

/// One [`Proxy`] in front of each node of a [`Cluster`](crate::Cluster), for one client.
///
/// Made by [`Cluster::proxies`](crate::Cluster::proxies). Give each client its own `Proxies` to
/// fault the links of one client without touching another's: blackholing nodes 3 and 4 for client
/// A and nodes 0 and 1 for client B lets A see nodes 0, 1, 2 and B see 2, 3, 4.
///
/// # Examples
///
/// ```
/// use redmutex_testenv::{Cluster, Mode};
///
/// let cluster = Cluster::start(5);
/// let (a, b) = (cluster.proxies(), cluster.proxies());
/// a.set_mode(&[3, 4], Mode::Blackhole);
/// b.set_mode(&[0, 1], Mode::Blackhole);
/// let (urls_a, urls_b) = (a.urls(), b.urls()); // give these to two clients
/// assert_eq!(urls_a.len(), 5);
/// assert_ne!(urls_a, urls_b);
/// ```
#[derive(Debug)]
pub struct Proxies {
    proxies: Vec<Proxy>,
}

impl Proxies {
    pub(crate) fn new(proxies: Vec<Proxy>) -> Proxies {
        Proxies { proxies }
    }

    /// Each proxy's URL, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(Proxy::url).collect()
    }

    /// The proxy in front of node `i`.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn proxy(&self, i: usize) -> &Proxy {
        self.proxies.get(i).unwrap_or_else(|| {
            panic!(
                "testenv: proxy index {i} out of range for {} proxies",
                self.proxies.len()
            )
        })
    }

    /// The number of proxies, one per node.
    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    /// Whether there are no proxies (the cluster has no nodes).
    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    /// Sets `mode` on the proxies in front of each node in `nodes`.
    ///
    /// # Panics
    ///
    /// If an index is out of range; no mode is changed then.
    pub fn set_mode(&self, nodes: &[usize], mode: Mode) {
        let chosen: Vec<&Proxy> = nodes.iter().map(|&i| self.proxy(i)).collect();
        for proxy in chosen {
            proxy.set_mode(mode);
        }
    }
}

/// The runtime every proxy runs on: one worker thread, started on first use, never stopped.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testenv-proxy")
            .enable_io()
            .enable_time()
            .build()
            .unwrap_or_else(|e| panic!("testenv: could not start the proxies' runtime: {e}"))
    })
}

/// Accepts connections until the proxy is dropped, then waits for every connection to close.
///
/// Each task holds a clone of `stopped` until its sockets are closed.
async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mut mode: watch::Receiver<Control>,
    counts: Counts,
    stopped: mpsc::SyncSender<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            next = listener.accept() => match next {
                Ok((client, _)) => {
                    let born = counts.accepted.fetch_add(1, Ordering::SeqCst);
                    let requests = Arc::clone(&counts.requests);
                    let mode = View { control: mode.clone(), born, requests };
                    let stopped = stopped.clone();
                    connections.spawn(async move {
                        serve(client, target, mode).await;
                        drop(stopped);
                    });
                }
                // A failed accept concerns one connection (or a passing lack of descriptors).
                Err(_) => sleep(ACCEPT_BACKOFF).await,
            },
            // Reaps finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            changed = mode.changed() => if changed.is_err() {
                break;
            },
        }
    }
    drop(listener);
    // Each connection sees the proxy dropped too, and resets its sockets.
    while connections.join_next().await.is_some() {}
}

/// Relays one client connection to the target until either side ends it, the mode becomes
/// [`Mode::Reset`] or the proxy is dropped.
async fn serve(mut client: TcpStream, target: SocketAddr, mode: View) {
    let mut watcher = mode.clone();
    // Until connected, the client's bytes wait in the kernel's buffers: held, like a blackhole's.
    let upstream = tokio::select! {
        upstream = connect_when_open(target, mode.clone()) => upstream,
        () = closing(&mut watcher) => None,
    };
    let Some(mut upstream) = upstream else {
        reset(&client);
        return;
    };
    // Requests are small: sending each chunk at once keeps Nagle's algorithm from adding latency.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tokio::select! {
        _ = relay(&mut client, &mut upstream, &mode) => {}
        () = closing(&mut watcher) => {}
    }
    // Decided from the mode, not from the branch: a relay that fails because it saw the reset
    // may finish first.
    if watcher.control.has_changed().is_err() || watcher.mode() == Mode::Reset {
        reset(&client);
        reset(&upstream);
    }
}

/// Connects to the target once the mode lets bytes through; `None` if the node refuses, or the
/// proxy is dropped first.
async fn connect_when_open(target: SocketAddr, mut mode: View) -> Option<TcpStream> {
    let now = mode.wait_for(|m| m != Mode::Blackhole).await?;
    if now == Mode::Reset {
        return None;
    }
    TcpStream::connect(target).await.ok()
}

/// Returns once the mode is [`Mode::Reset`] or the proxy is dropped.
async fn closing(mode: &mut View) {
    // `None` means the sender is gone: the proxy was dropped.
    let _ = mode.wait_for(|m| m == Mode::Reset).await;
}

/// Makes dropping the socket send a TCP `RST` instead of a `FIN`.
fn reset(stream: &TcpStream) {
    // Failing leaves an ordinary close, which the peer sees as an error too.
    let _ = stream.set_zero_linger();
}

/// Forwards both ways until both directions have ended, or either fails.
async fn relay(client: &mut TcpStream, upstream: &mut TcpStream, mode: &View) -> io::Result<()> {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_node, mut to_node) = upstream.split();
    tokio::try_join!(
        pump(&mut from_client, &mut to_node, mode.clone(), true),
        pump(&mut from_node, &mut to_client, mode.clone(), false),
    )?;
    Ok(())
}

/// Forwards one direction: reads chunks as they come and writes each when the mode allows; at the
/// end of the input, writes what is left and ends the output.
///
/// Reading and writing are separate, joined by a queue, so a delayed or held chunk never stops the
/// chunks after it from being read (and timed from their own reads). `from_client` says the
/// direction: only chunks from the client count under [`Mode::HoldAfter`].
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut mode: View,
    from_client: bool,
) -> io::Result<()> {
    let (chunks, mut pending) = queue::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                // Dropping `chunks` lets the writer drain the queue and end.
                return Ok::<_, io::Error>(());
            }
            // The writer lives as long as this future (both are joined), so sending cannot fail.
            let _ = chunks.send((Instant::now(), buf[..n].to_vec()));
        }
    };
    let write = async move {
        while let Some((read_at, chunk)) = pending.recv().await {
            wait_to_forward(&mut mode, read_at, from_client).await?;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write)?;
    Ok(())
}

/// Waits until a chunk read at `read_at` may be forwarded under the mode, which may change
/// meanwhile. A chunk from the client that passes under [`Mode::HoldAfter`] takes one from its
/// count.
///
/// # Errors
///
/// If the mode becomes [`Mode::Reset`] or the proxy is dropped: the chunk must not be forwarded.
async fn wait_to_forward(mode: &mut View, read_at: Instant, from_client: bool) -> io::Result<()> {
    loop {
        // `None`: held until the mode changes.
        let forward_at = match mode.mode_and_update() {
            Mode::Pass => return Ok(()),
            Mode::HoldAfter(_) if !from_client || take_one(&mode.requests) => return Ok(()),
            Mode::HoldAfter(_) => None,
            Mode::Delay(delay) => read_at.checked_add(delay),
            Mode::Blackhole => None,
            Mode::Reset => return Err(io::ErrorKind::ConnectionReset.into()),
        };
        let due = async {
            match forward_at {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = due => return Ok(()),
            changed = mode.control.changed() => if changed.is_err() {
                return Err(io::ErrorKind::ConnectionAborted.into());
            },
        }
    }
}

/// What the proxy's tasks are told: the mode, and which connections are stranded.
#[derive(Debug, Clone, Copy, Default)]
struct Control {
    mode: Mode,
    /// Connections numbered below this are stranded (see [`Proxy::strand`]).
    stranded_before: u64,
}

/// One connection's view of the proxy's [`Control`]: a stranded connection sees a blackhole that
/// never ends.
#[derive(Clone)]
struct View {
    control: watch::Receiver<Control>,
    /// The connection's number, in order of acceptance.
    born: u64,
    /// The proxy's count of chunks that may still pass under [`Mode::HoldAfter`].
    requests: Arc<AtomicU32>,
}

/// The proxy's counters, shared with its tasks.
struct Counts {
    /// Connections accepted so far.
    accepted: Arc<AtomicU64>,
    /// Chunks from clients that may still pass under [`Mode::HoldAfter`].
    requests: Arc<AtomicU32>,
}

/// Takes one from `left` unless it is 0; whether it did.
fn take_one(left: &AtomicU32) -> bool {
    left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl View {
    fn mode_of(&self, control: &Control) -> Mode {
        if self.born < control.stranded_before {
            Mode::Blackhole
        } else {
            control.mode
        }
    }

    fn mode(&self) -> Mode {
        self.mode_of(&self.control.borrow())
    }

    fn mode_and_update(&mut self) -> Mode {
        let control = *self.control.borrow_and_update();
        self.mode_of(&control)
    }

    /// Waits until this connection's mode satisfies `done`, and returns it; `None` if the proxy
    /// was dropped.
    async fn wait_for(&mut self, done: impl Fn(Mode) -> bool) -> Option<Mode> {
        loop {
            let mode = self.mode_and_update();
            if done(mode) {
                return Some(mode);
            }
            self.control.changed().await.ok()?;
        }
    }
}
