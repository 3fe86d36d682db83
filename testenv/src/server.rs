//! One `redis-server` process: starting it, checking it is ready, faulting it, inspecting it.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tempfile::TempDir;

use crate::error::tail;
use crate::port::{free_cluster_port, free_port};
use crate::tls::ServerFiles;
use crate::{Error, Tls, redis_server_binary};

/// How long a new process may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Bound on one readiness probe, so a wedged process cannot stall the loop past its deadline.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Fresh ports tried by [`Node::start`] when a process exits early (the port was taken meanwhile).
const START_ATTEMPTS: usize = 5;
/// How long [`Node::restart`] keeps trying its own port while something else briefly holds it.
const RESTART_WINDOW: Duration = Duration::from_secs(5);
/// Connect, read and write timeout of inspection connections: a paused node fails a test, never hangs it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `pause` and `resume` wait for the kernel to report the new process state.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Lines of log quoted in errors.
const LOG_TAIL_LINES: usize = 30;

const LOG_FILE: &str = "redis.log";
/// The process's own stdout and stderr: empty unless it fails before opening its log file
/// (a bad option, say), and then the only place that says why.
const OUTPUT_FILE: &str = "redis.out";
/// A cluster node's own view of the cluster, kept across restarts so the node rejoins as itself.
const CLUSTER_CONFIG_FILE: &str = "nodes.conf";
/// Where `SHUTDOWN SAVE` writes the data (Redis's default `dbfilename`, in `--dir`), and where a
/// starting node loads it from.
const SNAPSHOT_FILE: &str = "dump.rdb";

/// One `redis-server` process on `127.0.0.1`, with its own temporary directory and log file.
///
/// Persistence is off (`--save ""`, `--appendonly no`), so a restarted node starts empty, like a
/// Redlock node restarted without `appendfsync always`. All methods take `&self`, so a node can be
/// shared between threads or tasks (through the [`Cluster`](crate::Cluster) in an `Arc`).
///
/// Dropping the node kills and reaps the process and removes its directory.
///
/// The inspection helpers ([`get`](Node::get), [`set`](Node::set), ...) open a new connection per
/// call, so they work across restarts, and panic with a clear message on any error, including the
/// 2 s timeout of a paused or killed node.
pub struct Node {
    port: u16,
    /// For a TLS node: its TLS port and the files it was started with.
    tls: Option<(u16, ServerFiles)>,
    /// For a Redis Cluster node: its `cluster-node-timeout`.
    cluster: Option<Duration>,
    binary: PathBuf,
    dir: TempDir,
    /// Shared with the thread of a pending [`restart_after`](Node::restart_after).
    shared: Arc<Shared>,
}

/// The node's state, and a way to wake a delayed restart that waits on it.
struct Shared {
    state: Mutex<State>,
    /// Notified when a delayed restart is superseded or the node is dropped.
    changed: Condvar,
}

/// What changes when the node is faulted.
struct State {
    /// `None` once killed. A child that exited by itself is reaped and set to `None` when noticed,
    /// so a signal never reaches a recycled pid.
    child: Option<Child>,
    /// Set by `pause`, cleared by `resume`, `kill` and `restart`.
    paused: bool,
    /// Bumped by `kill`, `restart` and `restart_after`: a delayed restart goes ahead only if the
    /// generation is still the one it was scheduled in.
    generation: u64,
    /// Set by `Drop` before it kills the process; no process is started once it is set, so a
    /// delayed restart cannot leave an orphan.
    dropped: bool,
}

/// A delayed restart scheduled by [`Node::restart_after`].
///
/// Dropping the handle does not cancel the restart; it only gives up the chance to wait for it.
#[derive(Debug)]
pub struct RestartHandle {
    port: u16,
    thread: JoinHandle<Result<bool, Error>>,
}

/// One client connection of a node, from `CLIENT LIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The connection's unique id on this node.
    pub id: u64,
    /// How long the connection has been open (whole seconds).
    pub age: Duration,
    /// The last command it ran, lower case, with the subcommand after a `|` (`client|list`).
    pub last_command: String,
    /// The ACL user it authenticated as.
    pub user: String,
}

/// Why one attempt to start a process failed.
enum StartFailure {
    /// The process exited before it was ready, most often because another process took the port
    /// in between: trying again may help.
    Exited(Error),
    /// Anything else: trying again would not help.
    Fatal(Error),
}

impl Node {
    /// Starts a node on a free port and waits until it answers `PING`; with `tls`, it also
    /// serves TLS on a second port, with a server certificate signed by that CA.
    pub(crate) fn start(tls: Option<&Tls>) -> Result<Node, Error> {
        Node::start_with(redis_server_binary()?, tls, None)
    }

    /// Starts a node of `binary`, as [`start`](Node::start) does.
    pub(crate) fn start_binary(binary: PathBuf, tls: Option<&Tls>) -> Result<Node, Error> {
        Node::start_with(binary, tls, None)
    }

    /// Starts a node of `binary` as [`start`](Node::start) does; with `cluster`, as a Redis
    /// Cluster node with that `cluster-node-timeout`, on a port whose cluster bus port (+10000)
    /// was free too.
    pub(crate) fn start_with(
        binary: PathBuf,
        tls: Option<&Tls>,
        cluster: Option<Duration>,
    ) -> Result<Node, Error> {
        let dir = tempfile::Builder::new()
            .prefix("testenv-redis-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary directory for redis-server", e))?;
        let files = tls
            .map(|tls| tls.write_server_files(dir.path()))
            .transpose()?;
        let mut attempt = 1;
        loop {
            let port = match cluster {
                Some(_) => free_cluster_port()?,
                None => free_port()?,
            };
            let tls = match &files {
                Some(files) => Some((free_port()?, files.clone())),
                None => None,
            };
            match spawn_ready(&binary, port, tls.as_ref(), cluster, dir.path()) {
                Ok(child) => {
                    return Ok(Node {
                        port,
                        tls,
                        cluster,
                        binary,
                        dir,
                        shared: Arc::new(Shared {
                            state: Mutex::new(State {
                                child: Some(child),
                                paused: false,
                                generation: 0,
                                dropped: false,
                            }),
                            changed: Condvar::new(),
                        }),
                    });
                }
                Err(StartFailure::Exited(_)) if attempt < START_ATTEMPTS => attempt += 1,
                Err(StartFailure::Exited(e) | StartFailure::Fatal(e)) => return Err(e),
            }
        }
    }

    /// The TCP port on `127.0.0.1`; it never changes, even across [`restart`](Node::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The node's URL, `redis://127.0.0.1:PORT/`.
    ///
    /// A TLS node serves plain TCP on this port too, for testenv's own readiness probes and
    /// inspection helpers; give the client under test [`tls_url`](Node::tls_url).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TLS port on `127.0.0.1` of a node started by
    /// [`Cluster::start_tls`](crate::Cluster::start_tls), `None` for a plain node. It never
    /// changes, even across [`restart`](Node::restart).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|(port, _)| *port)
    }

    /// The node's TLS URL, `rediss://127.0.0.1:PORT/`, with its TLS port.
    ///
    /// # Panics
    ///
    /// If the node was not started with TLS.
    pub fn tls_url(&self) -> String {
        let port = self.tls_port().unwrap_or_else(|| {
            panic!(
                "testenv: node on port {} was not started with TLS (see Cluster::start_tls)",
                self.port
            )
        });
        format!("rediss://127.0.0.1:{port}/")
    }

    /// The pid of the current process, or `None` if it is not running.
    pub fn pid(&self) -> Option<u32> {
        let mut state = self.lock();
        state.reap_if_exited();
        state.child.as_ref().map(Child::id)
    }

    /// The node's log file (kept across restarts, removed on drop).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// Kills the process with `SIGKILL` and reaps it; does nothing if it is not running.
    ///
    /// Its port refuses connections afterwards, until [`restart`](Node::restart). A pending
    /// [`restart_after`](Node::restart_after) is cancelled.
    pub fn kill(&self) {
        let mut state = self.lock();
        state.stop_child();
        self.supersede(&mut state);
    }

    /// Freezes the process with `SIGSTOP`, and waits until the kernel reports it stopped.
    ///
    /// Connections stay open and new ones are still accepted by the kernel, but nothing is answered:
    /// the fault of a node stuck in a long GC pause or swapped out.
    ///
    /// # Panics
    ///
    /// If the node is not running: pausing a dead node is a mistake in the test.
    pub fn pause(&self) {
        let mut state = self.lock();
        let pid = state.running_pid().unwrap_or_else(|| {
            panic!(
                "testenv: cannot pause node on port {}: it is not running",
                self.port
            )
        });
        send_signal(pid, Signal::STOP, self.port);
        wait_for_process_state(pid, true, self.port);
        state.paused = true;
    }

    /// Lets a paused process go on with `SIGCONT`; does nothing if it is not running.
    ///
    /// Requests sent while it was paused are answered now.
    pub fn resume(&self) {
        let mut state = self.lock();
        if let Some(pid) = state.running_pid() {
            send_signal(pid, Signal::CONT, self.port);
            wait_for_process_state(pid, false, self.port);
        }
        state.paused = false;
    }

    /// Kills the process if it runs, then starts a new one on the same port with empty data, and
    /// waits until it answers `PING`.
    ///
    /// Clients holding the node's URL can reconnect. If the port is briefly held by something
    /// else, this keeps trying for up to 5 s. A pending [`restart_after`](Node::restart_after) is
    /// cancelled.
    ///
    /// # Panics
    ///
    /// If the new process does not become ready; the message quotes the log.
    pub fn restart(&self) {
        let mut state = self.lock();
        self.supersede(&mut state);
        self.respawn(&mut state);
    }

    /// [`respawn`] of this node, under its lock; panics if the new process does not come up.
    fn respawn(&self, state: &mut State) {
        respawn(
            state,
            &self.binary,
            self.port,
            self.tls.as_ref(),
            self.cluster,
            self.dir.path(),
        )
        .unwrap_or_else(|e| panic!("testenv: restarting node on port {}: {e}", self.port));
    }

    /// Stops the process with `SHUTDOWN SAVE` (which writes every key, each with its absolute
    /// expiry, to a snapshot in the node's directory before it exits), then starts a new one on
    /// the same port that loads the snapshot, and waits until it answers `PING`: a restart of a
    /// node with persistence that lost nothing. The snapshot is deleted once loaded, so a later
    /// [`restart`](Node::restart) still starts empty. Keys whose expiry passed meanwhile are gone.
    ///
    /// A paused node is resumed first. A pending [`restart_after`](Node::restart_after) is
    /// cancelled.
    ///
    /// # Panics
    ///
    /// If the node is not running, does not exit within 10 s of `SHUTDOWN SAVE`, or the new
    /// process does not become ready.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let node = cluster.node(0);
    /// node.set_px("lock", "mine", Duration::from_secs(30));
    /// node.restart_keeping_data();
    /// assert_eq!(node.get("lock").as_deref(), Some("mine"));
    /// assert!(node.pttl("lock") > 0);
    /// node.restart();
    /// assert_eq!(node.get("lock"), None);
    /// ```
    pub fn restart_keeping_data(&self) {
        let mut state = self.lock();
        self.supersede(&mut state);
        let pid = state.running_pid().unwrap_or_else(|| {
            panic!(
                "testenv: cannot restart node on port {} keeping its data: it is not running",
                self.port
            )
        });
        if state.paused {
            send_signal(pid, Signal::CONT, self.port);
            wait_for_process_state(pid, false, self.port);
            state.paused = false;
        }
        // The connection closes as the server exits: the reply is an error whatever happens, and
        // the process's exit is what says the snapshot was written.
        let _ = self
            .try_connection()
            .and_then(|mut con| redis::cmd("SHUTDOWN").arg("SAVE").query::<()>(&mut con));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = state.child.as_mut().expect("running above");
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                outcome => panic!(
                    "testenv: node on port {} did not stop cleanly on SHUTDOWN SAVE: {outcome:?}",
                    self.port
                ),
            }
        }
        state.child = None;
        self.respawn(&mut state);
        let snapshot = self.dir.path().join(SNAPSHOT_FILE);
        fs::remove_file(&snapshot).unwrap_or_else(|e| {
            panic!("testenv: removing the snapshot {}: {e}", snapshot.display())
        });
    }

    /// Kills the process now, and starts a new one on the same port with empty data after `delay`,
    /// from a background thread; returns at once.
    ///
    /// This keeps a node down for a chosen time, longer than a lock's expiry say, while the test
    /// goes on. Call [`RestartHandle::wait`] to wait until the node answers again. A later
    /// [`kill`](Node::kill), [`restart`](Node::restart) or `restart_after` cancels this restart,
    /// and so does dropping the node: no process is started after the node is dropped, and one
    /// being started while it is dropped is killed.
    ///
    /// # Panics
    ///
    /// If the thread cannot be spawned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let cluster = redmutex_testenv::Cluster::start(1);
    /// let node = cluster.node(0);
    /// let start = Instant::now();
    /// let restart = node.restart_after(Duration::from_millis(100));
    /// assert!(!node.is_running());
    /// assert!(restart.wait());
    /// assert!(start.elapsed() >= Duration::from_millis(100));
    /// assert!(node.is_running());
    /// ```
    pub fn restart_after(&self, delay: Duration) -> RestartHandle {
        let generation = {
            let mut state = self.lock();
            state.stop_child();
            self.supersede(&mut state);
            state.generation
        };
        // `None`: a delay too long to represent, so never (until cancelled).
        let due = Instant::now().checked_add(delay);
        let shared = Arc::clone(&self.shared);
        let (binary, port, dir) = (self.binary.clone(), self.port, self.dir.path().to_owned());
        let tls = self.tls.clone();
        let cluster = self.cluster;
        let thread = thread::Builder::new()
            .name(format!("testenv-restart-{port}"))
            .spawn(move || {
                let mut state = shared.lock();
                loop {
                    if state.dropped || state.generation != generation {
                        return Ok(false);
                    }
                    let now = Instant::now();
                    state = match due {
                        Some(due) if now >= due => break,
                        Some(due) => {
                            shared
                                .changed
                                .wait_timeout(state, due - now)
                                .unwrap_or_else(PoisonError::into_inner)
                                .0
                        }
                        None => shared
                            .changed
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner),
                    };
                }
                // Still under the lock that `Drop` takes before it kills the process.
                let restarted = respawn(&mut state, &binary, port, tls.as_ref(), cluster, &dir);
                if let Err(e) = &restarted {
                    // Said here too, in case nobody waits on the handle.
                    eprintln!("testenv: delayed restart of node on port {port} failed: {e}");
                }
                restarted.map(|()| true)
            })
            .unwrap_or_else(|e| {
                panic!("testenv: spawning the delayed restart of node on port {port}: {e}")
            });
        RestartHandle { port, thread }
    }

    /// Whether the process is paused by [`pause`](Node::pause) (and not resumed, killed or
    /// restarted since).
    pub fn is_paused(&self) -> bool {
        let mut state = self.lock();
        state.reap_if_exited();
        state.paused
    }

    /// Whether the process is alive (a paused process is alive).
    pub fn is_running(&self) -> bool {
        let mut state = self.lock();
        state.reap_if_exited();
        state.child.is_some()
    }

    /// Opens a plain synchronous connection for inspection, with connect, read and write
    /// timeouts of 2 s.
    ///
    /// # Panics
    ///
    /// If the connection cannot be made within the timeout.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("testenv: connecting to node at {}: {e}", self.url()))
    }

    /// [`connection`](Node::connection), with the error returned instead of a panic: for probes
    /// of nodes that may be down.
    pub(crate) fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(CLIENT_TIMEOUT)?;
        con.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        con.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        Ok(con)
    }

    /// `GET key`: the value, or `None` if the key does not exist.
    pub fn get(&self, key: &str) -> Option<String> {
        self.query(&format!("GET {key}"), redis::cmd("GET").arg(key))
    }

    /// `SET key value`, with no expiry.
    pub fn set(&self, key: &str, value: &str) {
        self.query::<()>(&format!("SET {key}"), redis::cmd("SET").arg(key).arg(value));
    }

    /// `SET key value PX ttl`, with `ttl` in whole milliseconds (it must be at least 1 ms).
    pub fn set_px(&self, key: &str, value: &str, ttl: Duration) {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.query::<()>(
            &format!("SET {key} PX {millis}"),
            redis::cmd("SET").arg(key).arg(value).arg("PX").arg(millis),
        );
    }

    /// `PTTL key`, the raw reply: milliseconds left, `-1` if the key has no expiry, `-2` if it does
    /// not exist.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(&format!("PTTL {key}"), redis::cmd("PTTL").arg(key))
    }

    /// `EXISTS key`.
    pub fn exists(&self, key: &str) -> bool {
        let count: i64 = self.query(&format!("EXISTS {key}"), redis::cmd("EXISTS").arg(key));
        count > 0
    }

    /// `DEL key`; deleting a missing key is not an error.
    pub fn del(&self, key: &str) {
        self.query::<i64>(&format!("DEL {key}"), redis::cmd("DEL").arg(key));
    }

    /// `PEXPIRE key ttl`: sets the key's time to live to `ttl`, in whole milliseconds (rounded
    /// down); returns whether the key exists.
    ///
    /// Shortening a key's time to live stands in for the node's clock jumping forward: the key
    /// expires early on this node only. A `ttl` under 1 ms deletes the key at once. The new time to
    /// live replaces the old one even if it is longer.
    pub fn shorten(&self, key: &str, ttl: Duration) -> bool {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let set: i64 = self.query(
            &format!("PEXPIRE {key} {millis}"),
            redis::cmd("PEXPIRE").arg(key).arg(millis),
        );
        set == 1
    }

    /// `DBSIZE`: the number of keys.
    pub fn dbsize(&self) -> i64 {
        self.query("DBSIZE", &redis::cmd("DBSIZE"))
    }

    /// How many times clients called `command` (lower case, e.g. `"set"`) since the node started,
    /// from `INFO commandstats`; 0 if never. Commands that scripts run count under their own
    /// names too.
    pub fn calls(&self, command: &str) -> u64 {
        let stats: String = self.query("INFO commandstats", redis::cmd("INFO").arg("commandstats"));
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }

    /// `PUBSUB NUMSUB channel`: how many connections are subscribed to `channel`.
    pub fn subscribers(&self, channel: &str) -> i64 {
        let reply: (String, i64) = self.query(
            &format!("PUBSUB NUMSUB {channel}"),
            redis::cmd("PUBSUB").arg("NUMSUB").arg(channel),
        );
        reply.1
    }

    /// `ACL SETUSER user rule...`: creates the user or changes its rules, e.g.
    /// `node.acl_setuser("app", &["on", ">secret", "~lock:*", "+set"])`.
    ///
    /// The default user (which testenv's helpers use) is never touched by tests that call this
    /// for other users, so inspection keeps working.
    pub fn acl_setuser(&self, user: &str, rules: &[&str]) {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(user).arg(rules);
        self.query::<()>(&format!("ACL SETUSER {user}"), &cmd);
    }

    /// `ACL DELUSER user`: removes the user, and closes its connections.
    pub fn acl_deluser(&self, user: &str) {
        self.query::<i64>(
            &format!("ACL DELUSER {user}"),
            redis::cmd("ACL").arg("DELUSER").arg(user),
        );
    }

    /// `CONFIG SET parameter value`, e.g. `node.config_set("maxclients", "10")`. A restart
    /// forgets it.
    pub fn config_set(&self, parameter: &str, value: &str) {
        self.query::<()>(
            &format!("CONFIG SET {parameter}"),
            redis::cmd("CONFIG").arg("SET").arg(parameter).arg(value),
        );
    }

    /// The node's client connections (`CLIENT LIST`), except the one that asks.
    pub fn clients(&self) -> Vec<ClientInfo> {
        let list: String = self.query("CLIENT LIST", redis::cmd("CLIENT").arg("LIST"));
        parse_client_list(&list)
            .into_iter()
            .filter(|client| client.last_command != "client|list")
            .collect()
    }

    /// Runs one command on a new connection, panicking with `what` and the error on failure.
    fn query<T: redis::FromRedisValue>(&self, what: &str, cmd: &redis::Cmd) -> T {
        let mut con = self.connection();
        cmd.query(&mut con)
            .unwrap_or_else(|e| panic!("testenv: {what} on node at {}: {e}", self.url()))
    }

    /// Cancels a pending delayed restart, and wakes its thread so it ends now.
    fn supersede(&self, state: &mut State) {
        state.generation += 1;
        self.shared.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked mid-call must not stop the others (or `Drop`) from using the node.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RestartHandle {
    /// Waits until the delayed restart is done: the new process answers `PING`.
    ///
    /// Returns `true` if the node was restarted, `false` if the restart was cancelled (by
    /// [`Node::kill`], [`Node::restart`], another [`Node::restart_after`], or dropping the node).
    ///
    /// # Panics
    ///
    /// If the new process did not become ready; the message quotes the log.
    pub fn wait(self) -> bool {
        match self.thread.join() {
            Ok(Ok(restarted)) => restarted,
            Ok(Err(e)) => panic!(
                "testenv: delayed restart of node on port {}: {e}",
                self.port
            ),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Whether the restart is done or cancelled, so [`wait`](RestartHandle::wait) would not block.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

impl State {
    /// Reaps the child if it exited by itself.
    fn reap_if_exited(&mut self) {
        if let Some(child) = &mut self.child {
            // An error here means the child is already gone: treat it like an exit.
            if !matches!(child.try_wait(), Ok(None)) {
                self.child = None;
                self.paused = false;
            }
        }
    }

    /// The pid of the child, if it is still running.
    fn running_pid(&mut self) -> Option<Pid> {
        self.reap_if_exited();
        self.child.as_ref().map(Pid::from_child)
    }

    /// Kills and reaps the child, if any.
    fn stop_child(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.paused {
            // SIGKILL works on a stopped process too, but a running one dies the ordinary way.
            let _ = kill_process(Pid::from_child(&child), Signal::CONT);
            self.paused = false;
        }
        // Errors mean the child already exited; `wait` still reaps it.
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let mut state = self.lock();
        // A delayed restart checks this under the same lock before it starts a process, and one
        // that is starting a process holds the lock until it is ready, so it is killed below.
        state.dropped = true;
        state.stop_child();
        self.supersede(&mut state);
        // `dir` is removed after this, once the process no longer writes to it.
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Node")
            .field("port", &self.port)
            .field("pid", &state.child.as_ref().map(Child::id))
            .field("paused", &state.paused)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Kills the process if it runs, then starts a new one on the same port, retrying for a while if
/// the port is briefly held by something else.
fn respawn(
    state: &mut State,
    binary: &Path,
    port: u16,
    tls: Option<&(u16, ServerFiles)>,
    cluster: Option<Duration>,
    dir: &Path,
) -> Result<(), Error> {
    state.stop_child();
    let deadline = Instant::now() + RESTART_WINDOW;
    loop {
        match spawn_ready(binary, port, tls, cluster, dir) {
            Ok(child) => {
                state.child = Some(child);
                return Ok(());
            }
            Err(StartFailure::Exited(_)) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(StartFailure::Exited(e) | StartFailure::Fatal(e)) => return Err(e),
        }
    }
}

/// Spawns `redis-server` on `port` (and with `tls`, TLS on a second port; with `cluster`, as a
/// Redis Cluster node with that node timeout) and waits until it is ready.
fn spawn_ready(
    binary: &Path,
    port: u16,
    tls: Option<&(u16, ServerFiles)>,
    cluster: Option<Duration>,
    dir: &Path,
) -> Result<Child, StartFailure> {
    let log = dir.join(LOG_FILE);
    let output = File::options()
        .create(true)
        .append(true)
        .open(dir.join(OUTPUT_FILE))
        .map_err(|e| StartFailure::Fatal(Error::io("opening the redis-server output file", e)))?;
    let output_err = output
        .try_clone()
        .map_err(|e| StartFailure::Fatal(Error::io("duplicating a file handle", e)))?;
    let mut command = Command::new(binary);
    command.arg("--port").arg(port.to_string());
    if let Some((tls_port, files)) = tls {
        let auth_clients = if files.require_client_certs {
            "yes"
        } else {
            "no"
        };
        command
            .arg("--tls-port")
            .arg(tls_port.to_string())
            .arg("--tls-cert-file")
            .arg(&files.cert)
            .arg("--tls-key-file")
            .arg(&files.key)
            .arg("--tls-ca-cert-file")
            .arg(&files.ca)
            .args(["--tls-auth-clients", auth_clients]);
    }
    if let Some(node_timeout) = cluster {
        // The bus port is the default, port + 10000, which the port was picked for.
        command
            .args(["--cluster-enabled", "yes"])
            .arg("--cluster-config-file")
            .arg(dir.join(CLUSTER_CONFIG_FILE))
            .arg("--cluster-node-timeout")
            .arg(node_timeout.as_millis().max(1).to_string())
            // A master otherwise waits 5 s for more replicas before it serves a full sync, which
            // every new replica (and every restarted node that rejoins as one) needs.
            .args(["--repl-diskless-sync-delay", "0"]);
    }
    let mut child = command
        .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(["--daemonize", "no", "--loglevel", "notice"])
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output_err)
        .spawn()
        .map_err(|e| StartFailure::Fatal(Error::io(format!("spawning {}", binary.display()), e)))?;

    match wait_ready(&mut child, port) {
        Ok(()) => Ok(child),
        Err(Readiness::Exited(reason)) => {
            let _ = child.wait();
            Err(StartFailure::Exited(start_error(port, reason, dir)))
        }
        Err(Readiness::TimedOut(reason)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartFailure::Fatal(start_error(port, reason, dir)))
        }
    }
}

/// Why a process never became ready.
enum Readiness {
    Exited(String),
    TimedOut(String),
}

/// Probes the port until our own process answers, it exits, or the deadline passes.
fn wait_ready(child: &mut Child, port: u16) -> Result<(), Readiness> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(Readiness::Exited(format!("exited early ({status})"))),
            Ok(None) => {}
            Err(e) => {
                return Err(Readiness::Exited(format!(
                    "could not check the process: {e}"
                )));
            }
        }
        let last_probe = match probe(port) {
            // The pid check rules out another server that took the port between our pick and
            // our bind: it would answer PING too, while ours is about to exit.
            Ok(pid) if pid == child.id() => return Ok(()),
            Ok(pid) => format!("another process (pid {pid}) answers on the port"),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(Readiness::TimedOut(format!(
                "not ready after {READY_TIMEOUT:?}; last probe: {last_probe}"
            )));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Sends `PING` and `INFO server` over plain TCP; returns the server's pid if it answered `+PONG`.
fn probe(port: u16) -> io::Result<u32> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    stream.write_all(b"PING\r\nINFO server\r\n")?;

    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    // INFO server is a few kilobytes; the cap keeps a misbehaving peer from growing this forever.
    while reply.len() < 64 * 1024 {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        if reply.len() >= 7 && !text.starts_with("+PONG\r\n") {
            let first_line = text.lines().next().unwrap_or_default();
            return Err(io::Error::other(format!("PING answered {first_line:?}")));
        }
        if let Some(pid) = parse_process_id(&text) {
            return Ok(pid);
        }
    }
    Err(io::Error::other(
        "connection closed before a full PING and INFO reply",
    ))
}

/// Reads `CLIENT LIST` lines (`id=3 addr=... age=5 ... cmd=get user=default ...`).
fn parse_client_list(list: &str) -> Vec<ClientInfo> {
    list.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or_default()
            };
            ClientInfo {
                id: field("id").parse().unwrap_or_default(),
                age: Duration::from_secs(field("age").parse().unwrap_or_default()),
                last_command: field("cmd").to_owned(),
                user: field("user").to_owned(),
            }
        })
        .collect()
}

/// Finds `process_id:N` in an `INFO` reply, once its line is complete.
fn parse_process_id(info: &str) -> Option<u32> {
    let rest = &info[info.find("\r\nprocess_id:")? + "\r\nprocess_id:".len()..];
    let end = rest.find("\r\n")?;
    rest[..end].trim().parse().ok()
}

fn start_error(port: u16, reason: String, dir: &Path) -> Error {
    let log = dir.join(LOG_FILE);
    let mut log_tail = fs::read_to_string(&log)
        .map(|text| tail(&text, LOG_TAIL_LINES))
        .unwrap_or_else(|e| format!("(no log: {e})"));
    let output = fs::read_to_string(dir.join(OUTPUT_FILE)).unwrap_or_default();
    if !output.trim().is_empty() {
        log_tail.push_str("\n--- process output ---\n");
        log_tail.push_str(&tail(&output, LOG_TAIL_LINES));
    }
    Error::Start {
        port,
        reason,
        log,
        log_tail,
    }
}

fn send_signal(pid: Pid, signal: Signal, port: u16) {
    kill_process(pid, signal).unwrap_or_else(|e| {
        panic!("testenv: sending {signal:?} to node on port {port} (pid {pid:?}): {e}")
    });
}

/// Waits until `/proc` reports the process stopped (or not), so the fault is in force on return.
fn wait_for_process_state(pid: Pid, stopped: bool, port: u16) {
    let deadline = Instant::now() + SIGNAL_TIMEOUT;
    while is_stopped(pid) != stopped {
        if Instant::now() >= deadline {
            panic!(
                "testenv: node on port {port} (pid {pid:?}) did not change state after a signal"
            );
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Whether the process is in the stopped state (`T`), per `/proc/PID/stat`.
fn is_stopped(pid: Pid) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may itself hold spaces.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|state| state == "T")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_pid_from_info() {
        let info =
            "+PONG\r\n$100\r\n# Server\r\nredis_version:7.0.0\r\nprocess_id:4242\r\nrun_id:x\r\n";
        assert_eq!(parse_process_id(info), Some(4242));
    }

    #[test]
    fn reads_client_list_lines() {
        let list = "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6 fd=8 name= age=12 idle=0 flags=N \
                    cmd=evalsha user=app\nid=4 addr=x age=0 cmd=client|list user=default\n";
        let clients = parse_client_list(list);
        assert_eq!(clients.len(), 2);
        assert_eq!(clients[0].id, 3);
        assert_eq!(clients[0].age, Duration::from_secs(12));
        assert_eq!(clients[0].last_command, "evalsha");
        assert_eq!(clients[0].user, "app");
        assert_eq!(clients[1].last_command, "client|list");
    }

    #[test]
    fn waits_for_the_end_of_the_pid_line() {
        assert_eq!(parse_process_id("# Server\r\nprocess_id:42"), None);
        assert_eq!(parse_process_id("# Server\r\n"), None);
    }
}
