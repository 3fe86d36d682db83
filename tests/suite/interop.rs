//! node-redlock and redmutex on the same names exclude each other: redmutex's lock key of a name is
//! the name itself, byte for byte, and its value a random token, as node-redlock's (the npm
//! package `redlock` with `ioredis` clients, the exact versions in tests/interop/package-lock.json).
//! On three standalone nodes (each a member of both clients' quorums) and on a 3-master Redis
//! Cluster (one member; node-redlock takes an ioredis `Cluster` as one client), including names
//! with a `{tag}` and names on every shard.
//!
//! node-redlock runs as `node tests/interop/peer.js`, one request at a time over its stdin and
//! stdout. The tests install its dependencies themselves (`npm ci` into tests/interop/node_modules)
//! and need Node.js 20 or later and npm, which everyday `cargo test` does not: so they are ignored
//! there, and `.ci/run` runs them in a step of their own (`cargo test --test suite interop:: --
//! --ignored`).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use redis::Commands;
use redmutex::{Error, Redlock};
use redmutex_testenv::{Cluster, RedisCluster};

/// What to install when the tests cannot run node-redlock, said once and the same everywhere.
const NEEDS: &str = "the interop tests (tests/suite/interop.rs) run node-redlock and need Node.js \
                     20 or later with npm on the PATH: install them (Debian/Ubuntu: apt-get install \
                     nodejs npm, if its nodejs is 20 or later; else from https://nodejs.org), then \
                     the tests run `npm ci` in tests/interop themselves";

/// How long redmutex's locks live: long enough that none expires during a test (peer.js gives
/// node-redlock's the same).
const TTL: Duration = Duration::from_secs(30);

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// Checks node and npm, then `npm ci` once per test process (the tests of this module share it).
fn install() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        let node = Command::new("node")
            .arg("--version")
            .output()
            .map_err(|e| format!("`node --version` failed ({e}): {NEEDS}"))?;
        let version = String::from_utf8_lossy(&node.stdout).trim().to_owned();
        let major = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse::<u32>().ok());
        if !node.status.success() || major.is_none_or(|major| major < 20) {
            return Err(format!("`node --version` says {version:?}: {NEEDS}"));
        }
        let npm = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
            .current_dir(interop_dir())
            .output()
            .map_err(|e| format!("`npm ci` could not start ({e}): {NEEDS}"))?;
        if !npm.status.success() {
            return Err(format!(
                "`npm ci` in tests/interop failed (it needs the npm registry, or its packages in \
                 npm's cache):\n{}{}",
                String::from_utf8_lossy(&npm.stdout),
                String::from_utf8_lossy(&npm.stderr)
            ));
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

/// node-redlock in a child process: `peer.js` with its clients connected.
struct NodeRedlock {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl NodeRedlock {
    /// One ioredis client per standalone node, each a member of node-redlock's quorum.
    fn standalone(urls: &[String]) -> NodeRedlock {
        NodeRedlock::start("standalone", urls)
    }

    /// One ioredis `Cluster` seeded with `seed`: a single member.
    fn cluster(seed: &str) -> NodeRedlock {
        NodeRedlock::start("cluster", &[seed.to_owned()])
    }

    fn start(mode: &str, urls: &[String]) -> NodeRedlock {
        install();
        let mut child = Command::new("node")
            .arg(interop_dir().join("peer.js"))
            .arg(mode)
            .args(urls)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("node peer.js could not start ({e}): {NEEDS}"));
        let input = child.stdin.take().expect("piped");
        let output = BufReader::new(child.stdout.take().expect("piped"));
        let mut peer = NodeRedlock {
            child,
            input,
            output,
        };
        let ready = peer.read();
        assert_eq!(ready, "ready", "peer.js did not start");
        peer
    }

    /// The next line peer.js writes.
    fn read(&mut self) -> String {
        let mut line = String::new();
        // Blocking, but peer.js answers each request at once; a dead one ends the stream.
        let read = tokio::task::block_in_place(|| self.output.read_line(&mut line));
        match read {
            Ok(n) if n > 0 => line.trim_end().to_owned(),
            _ => panic!(
                "peer.js ended (status {:?}); its stderr is above",
                self.child.try_wait()
            ),
        }
    }

    /// One request about `name`, which travels as its bytes in hex, and the reply.
    fn request(&mut self, op: &str, name: &str) -> Result<Option<String>, String> {
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        writeln!(self.input, "{op} {hex}").expect("peer.js reads its stdin");
        let reply = self.read();
        match reply.split_once(' ') {
            _ if reply == "ok" => Ok(None),
            Some(("ok", value)) => Ok(Some(value.to_owned())),
            _ => Err(reply),
        }
    }

    /// node-redlock's single attempt to lock `name`: its value, or its error.
    fn lock(&mut self, name: &str) -> Result<String, String> {
        match self.request("lock", name)? {
            Some(value) => Ok(value),
            None => Err("peer.js locked without a value".into()),
        }
    }

    /// node-redlock's release of the lock it holds on `name`.
    fn unlock(&mut self, name: &str) -> Result<(), String> {
        self.request("unlock", name).map(drop)
    }
}

impl Drop for NodeRedlock {
    fn drop(&mut self) {
        // Closing stdin ends peer.js's loop; kill in case it hangs on a connection.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The four exchanges on one pair of names: redmutex holds `a`, node-redlock holds `b`, each
/// refused the other's name, then each released and taken by the other. `values(name)` reads the
/// name's key on every member, to check that the key is the name and the value the holder's.
async fn exchange(
    redlock: &Redlock,
    peer: &mut NodeRedlock,
    a: &str,
    b: &str,
    values: &dyn Fn(&str) -> Vec<Option<String>>,
) {
    let mutex = |name: &str| redlock.new_mutex(name).with_expiry(TTL).with_tries(1);

    let held = mutex(a).lock().await.expect("redmutex locks a free name");
    let refused = peer.lock(a);
    assert!(
        refused.is_err(),
        "node-redlock locked {a:?} while redmutex held it: {refused:?}"
    );
    let on_members = values(a);
    assert!(
        on_members
            .iter()
            .all(|v| v.as_deref() == Some(held.value())),
        "redmutex's key of {a:?} is the name itself, holding its value {:?}: {on_members:?}",
        held.value()
    );

    let value = peer.lock(b).expect("node-redlock locks a free name");
    assert!(
        values(b)
            .iter()
            .all(|v| v.as_deref() == Some(value.as_str())),
        "node-redlock's key of {b:?} is the name, holding {value:?}"
    );
    let refused = mutex(b).lock().await;
    assert!(
        matches!(refused, Err(Error::Taken { .. } | Error::NoQuorum { .. })),
        "redmutex locked {b:?} while node-redlock held it: {refused:?}"
    );
    assert!(
        values(b)
            .iter()
            .all(|v| v.as_deref() == Some(value.as_str())),
        "redmutex's refused attempt left node-redlock's lock on {b:?} alone"
    );

    peer.unlock(b).expect("node-redlock unlocks what it holds");
    let taken = mutex(b)
        .lock()
        .await
        .expect("redmutex locks the name node-redlock released");
    assert_ne!(
        taken.value(),
        held.value(),
        "each of redmutex's acquisitions writes a fresh random token"
    );
    taken.unlock().await.expect("redmutex unlocks");

    held.unlock().await.expect("redmutex unlocks");
    let value = peer
        .lock(a)
        .expect("node-redlock locks the name redmutex released");
    assert_ne!(value, "", "node-redlock's value");
    peer.unlock(a).expect("node-redlock unlocks what it holds");
    assert!(
        values(a).iter().chain(&values(b)).all(Option::is_none),
        "both clients' releases left no key behind"
    );
}

/// Names with bytes that a re-encoding or a prefix would change: spaces, non-ASCII, braces.
const NAMES: [(&str, &str); 3] = [
    ("interop:a", "interop:b"),
    ("interop:ä ö/1", "interop:ß €/2"),
    ("{interop}:a", "{interop}:b"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and npm: .ci/run runs it in a step of its own"]
async fn node_redlock_and_redmutex_exclude_each_other_on_standalone_nodes() {
    let nodes = Cluster::start(3);
    let redlock = Redlock::connect(nodes.urls()).await.expect("valid URLs");
    let mut peer = NodeRedlock::standalone(&nodes.urls());
    let values = |name: &str| -> Vec<Option<String>> {
        nodes
            .nodes()
            .iter()
            .map(|node| node.connection().get(name).expect("GET"))
            .collect()
    };
    for (a, b) in NAMES {
        exchange(&redlock, &mut peer, a, b, &values).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and npm: .ci/run runs it in a step of its own"]
async fn node_redlock_and_redmutex_exclude_each_other_on_a_cluster_member() {
    let cluster = RedisCluster::start(3, 0);
    let redlock = Redlock::connect([cluster.seed_url()]).await.expect("a URL");
    assert_eq!(redlock.len(), 1, "the cluster is one member");
    let mut peer = NodeRedlock::cluster(&cluster.seed_url());
    let values = |name: &str| vec![cluster.get(name)];
    let mut names: Vec<(String, String)> = NAMES
        .iter()
        .map(|&(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    // A name on every master, so that both clients' routing is exercised on every shard.
    for master in cluster.masters() {
        names.push((
            cluster.key_on(master, "interop:a"),
            cluster.key_on(master, "interop:b"),
        ));
    }
    // The tagged pair shares a slot, so both clients route it to one shard.
    let tagged = cluster.slot_of("{interop}:a");
    assert_eq!(
        cluster.slot_of("{interop}:b"),
        tagged,
        "the tagged names share a slot"
    );
    for (a, b) in &names {
        exchange(&redlock, &mut peer, a, b, &values).await;
    }
}
