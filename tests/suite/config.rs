//! Bad input gets a clear error before any I/O, never a panic; passwords never leak.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redmutex::{Error, NodeErrorKind, Redlock};
use redmutex_testenv::Cluster;

use crate::support::client;

fn total_commands(cluster: &Cluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query(&mut node.connection())
                .expect("INFO");
            info.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("INFO stats has total_commands_processed")
        })
        .collect()
}

fn field(result: Result<impl std::fmt::Debug, Error>) -> String {
    match result {
        Err(Error::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_settings_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("config:ok");
    // Let the connection warm-up finish so it is not counted.
    drop(mutex.lock().await.expect("valid settings lock"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = total_commands(&cluster);

    assert_eq!(field(redlock.new_mutex("").lock().await), "name");
    assert_eq!(
        field(mutex.clone().with_expiry(Duration::ZERO).lock().await),
        "expiry"
    );
    assert_eq!(
        field(
            mutex
                .clone()
                .with_expiry(Duration::from_micros(999))
                .try_lock()
                .await
        ),
        "expiry"
    );
    assert_eq!(field(mutex.clone().with_tries(0).lock().await), "tries");
    for bad in [-0.01, 1.0, f64::NAN] {
        assert_eq!(
            field(mutex.clone().with_drift_factor(bad).lock().await),
            "drift_factor"
        );
    }
    for bad in [0.0, 1.0, 7.0] {
        assert_eq!(
            field(mutex.clone().with_timeout_factor(bad).lock().await),
            "timeout_factor"
        );
    }
    assert_eq!(
        field(mutex.clone().with_value_fn(String::new).lock().await),
        "value"
    );
    let adopted = mutex.clone().with_tries(0).adopt("some-value");
    assert_eq!(field(adopted.extend().await), "tries");
    assert_eq!(field(adopted.unlock().await), "tries");

    // INFO itself is one command per node; nothing else reached the nodes.
    let after = total_commands(&cluster);
    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b - 1).collect();
    assert_eq!(sent, [0, 0, 0]);
}

/// Names every primitive refuses, before any I/O: empty names, an empty list, and names that
/// could be another name's auxiliary key (`x:fence`, `x:readers`, `x:line`, ...). Duplicate
/// names collapse. The readers' marker is no lock value.
#[tokio::test]
async fn bad_names_of_every_primitive_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    drop(
        redlock
            .new_mutex("config:names")
            .lock()
            .await
            .expect("warm-up"),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = total_commands(&cluster);

    let none: [&str; 0] = [];
    assert_eq!(field(redlock.new_multi_mutex(none).lock().await), "names");
    assert_eq!(
        field(redlock.new_multi_mutex(none).try_lock().await),
        "names"
    );
    assert_eq!(
        field(redlock.new_multi_mutex(none).adopt("v").unlock().await),
        "names"
    );
    assert_eq!(
        field(redlock.new_multi_mutex(["a", ""]).lock().await),
        "names[1]"
    );
    assert_eq!(field(redlock.new_rwlock("").read().await), "name");
    assert_eq!(field(redlock.new_rwlock("").try_write().await), "name");
    let suffixes = [
        ":fence",
        ":readers",
        ":writer-waiting",
        ":line",
        ":line:until",
        ":ticket",
        ":leader",
    ];
    for suffix in suffixes {
        // The key redmutex keeps beside `prices`.
        let aux = format!("{{prices}}{suffix}");
        assert_eq!(field(redlock.new_mutex(aux.as_str()).lock().await), "name");
        assert_eq!(
            field(redlock.new_mutex(aux.as_str()).with_fair(true).lock().await),
            "name"
        );
        assert_eq!(field(redlock.new_rwlock(aux.as_str()).read().await), "name");
        assert_eq!(
            field(redlock.new_rwlock(aux.as_str()).write().await),
            "name"
        );
        let multi = redlock.new_multi_mutex(["prices", aux.as_str()]);
        assert_eq!(field(multi.try_lock().await), "names[1]");
        let Err(Error::Config { rule, .. }) = multi.lock().await else {
            panic!("a reserved suffix is a config error");
        };
        assert!(rule.contains(suffix), "the rule names the suffix: {rule}");
    }
    let marker = || "redmutex:readers".to_owned();
    let rwlock = redlock.new_rwlock("config:marker");
    assert_eq!(
        field(rwlock.clone().with_value_fn(marker).read().await),
        "value"
    );
    assert_eq!(
        field(rwlock.clone().with_value_fn(marker).write().await),
        "value"
    );
    assert_eq!(field(rwlock.adopt_write(marker()).unlock().await), "value");
    assert_eq!(
        field(
            redlock
                .new_mutex("config:marker")
                .adopt(marker())
                .extend()
                .await
        ),
        "value"
    );

    let sent: Vec<u64> = total_commands(&cluster)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b - 1)
        .collect();
    assert_eq!(sent, [0, 0, 0], "nothing reached the nodes");

    // Duplicates collapse: one key per name, and the lock lists each name once.
    let multi = redlock.new_multi_mutex(["config:dup", "config:dup", "config:other", "config:dup"]);
    assert_eq!(
        multi.names().collect::<Vec<_>>(),
        ["config:dup", "config:other"]
    );
    let lock = multi.lock().await.expect("free");
    assert_eq!(
        lock.names().collect::<Vec<_>>(),
        ["config:dup", "config:other"]
    );
    assert_eq!(lock.name(), "config:dup");
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn invalid_node_lists_are_config_errors() {
    let none: [&str; 0] = [];
    assert_eq!(field(Redlock::connect(none).await), "nodes");
    let no_connections: Vec<redis::aio::MultiplexedConnection> = Vec::new();
    assert_eq!(field(Redlock::new(no_connections)), "nodes");
    assert_eq!(
        field(Redlock::connect(["redis://127.0.0.1:1/", "http//:nope"]).await),
        "urls[1]"
    );
    assert_eq!(field(Redlock::connect([""]).await), "urls[0]");
}

#[tokio::test]
async fn passwords_never_appear_in_errors_or_debug() {
    let secret = "correct-horse-battery-staple";
    let bad_url = format!("redis://:{secret}@127.0.0.1:notaport/");
    let error = Redlock::connect([bad_url.as_str()])
        .await
        .expect_err("bad port");
    assert!(!error.to_string().contains(secret), "{error}");
    assert!(!format!("{error:?}").contains(secret), "{error:?}");
    // Unencoded '/', '#', '?' or '@' in a password (base64 secrets have '/') must not end the
    // redaction early, whether or not the URL parses.
    for password in ["abc/def+ghi=", "p#ss", "p@ss/word", "a?b"] {
        let url = format!("redis://:{password}@127.0.0.1:notaport/");
        match Redlock::connect([url.as_str()]).await {
            Err(error) => {
                assert!(!error.to_string().contains(password), "{error}");
                assert!(!format!("{error:?}").contains(password), "{error:?}");
            }
            Ok(redlock) => assert!(!format!("{redlock:?}").contains(password), "{redlock:?}"),
        }
    }

    // A node that requires a password, reached with a wrong one.
    let cluster = Cluster::start(3);
    cluster
        .node(0)
        .config_set("requirepass", "the-real-password");
    let mut urls = cluster.urls();
    urls[0] = urls[0].replace("redis://", &format!("redis://:{secret}@"));
    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    assert!(!format!("{redlock:?}").contains(secret), "{redlock:?}");
    let mutex = redlock.new_mutex("config:password").with_tries(1);
    assert!(!format!("{mutex:?}").contains(secret));

    let lock = mutex.lock().await.expect("nodes 1 and 2 suffice");
    assert!(!format!("{lock:?}").contains(secret));
    lock.unlock().await.expect("unlock");

    // With node 1 down too, the wrong password is the reported reason, without the password.
    cluster.node(1).kill();
    let error = mutex.lock().await.expect_err("1 of 3 is not a quorum");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(failures[0].node, 0);
    assert!(
        matches!(failures[0].kind, NodeErrorKind::Redis(_)),
        "{:?}",
        failures[0]
    );
    assert!(!error.to_string().contains(secret), "{error}");
    assert!(!format!("{error:?}").contains(secret), "{error:?}");
}

#[tokio::test]
async fn unreachable_nodes_fail_without_hanging() {
    // Port 1 on loopback refuses connections.
    let redlock = Redlock::connect(["redis://127.0.0.1:1/", "redis://127.0.0.1:2/"])
        .await
        .expect("URLs parse");
    let mutex = redlock
        .new_mutex("config:unreachable")
        .with_expiry(Duration::from_secs(2))
        .with_tries(2)
        .with_retry_delay(Duration::from_millis(1));
    let error = mutex.lock().await.expect_err("nothing is listening");
    let Error::NoQuorum { ok, failures, .. } = error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert_eq!(ok, 0);
    assert_eq!(failures.len(), 2);
}

#[tokio::test]
async fn odd_names_and_extreme_expiries_work() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let long_name = "n".repeat(1 << 20);
    for name in [long_name.as_str(), "ключ:🔒\u{0}\u{feff}", " "] {
        let lock = redlock
            .new_mutex(name)
            .try_lock()
            .await
            .expect("any non-empty name");
        lock.unlock().await.expect("unlock");
    }
    let ten_days = redlock
        .new_mutex("config:ten-days")
        .with_expiry(Duration::from_secs(10 * 24 * 3600));
    let lock = ten_days.try_lock().await.expect("long expiry");
    assert!(cluster.node(0).pttl("config:ten-days") > 863_000_000);
    lock.unlock().await.expect("unlock");
}

/// A key of another type (a hash) makes the scripts fail on that node with the server's error,
/// reported per node; no panic, no hang.
#[tokio::test]
async fn a_key_of_another_type_is_a_node_error() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock.new_mutex("config:hash").with_tries(1);
    let lock = mutex.lock().await.expect("free lock");
    // Node 0's key is replaced by a hash (another program wrote to the lock's name).
    cluster.node(0).del("config:hash");
    let _: () = redis::cmd("HSET")
        .arg("config:hash")
        .arg("f")
        .arg("v")
        .query(&mut cluster.node(0).connection())
        .expect("HSET");
    lock.extend().await.expect("nodes 1 and 2 suffice");
    cluster.node(1).del("config:hash");
    let error = lock
        .unlock()
        .await
        .expect_err("only node 2 holds our value");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    let wrongtype = failures
        .iter()
        .find(|f| f.node == 0)
        .expect("node 0 failed");
    assert!(
        matches!(&wrongtype.kind, NodeErrorKind::Redis(e) if e.to_string().contains("WRONGTYPE")),
        "{wrongtype:?}"
    );
    // The hash is untouched.
    let kind: String = redis::cmd("TYPE")
        .arg("config:hash")
        .query(&mut cluster.node(0).connection())
        .expect("TYPE");
    assert_eq!(kind, "hash");
}

#[tokio::test]
async fn a_one_millisecond_expiry_is_handled() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = redlock
        .new_mutex("config:one-ms")
        .with_expiry(Duration::from_millis(1))
        .with_tries(3)
        .with_retry_delay(Duration::from_millis(2));
    // Either outcome is correct; a lock handed out was valid for less than 1 ms from the start of
    // its attempt, which began before `lock()` returned.
    match mutex.lock().await {
        Ok(lock) => assert!(lock.valid_until() <= Instant::now() + Duration::from_millis(1)),
        Err(error) => assert!(
            matches!(error, Error::Expired | Error::NoQuorum { .. }),
            "{error:?}"
        ),
    }
}

/// One combination of settings at their extremes.
#[derive(Debug, Clone, Copy)]
struct Extreme {
    expiry: Duration,
    delay: Delay,
    tries: u32,
    drift: f64,
    timeout: f64,
}

#[derive(Debug, Clone, Copy)]
enum Delay {
    Fixed(Duration),
    /// From `with_retry_delay_fn`.
    Computed(Duration),
}

/// The primitives, each over a name of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Mutex,
    Multi,
    Read,
    Write,
    Semaphore,
    /// A semaphore of `u32::MAX` permits.
    Crowd,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Poll,
    Wake,
    Fair,
}

const KINDS: [Kind; 6] = [
    Kind::Mutex,
    Kind::Multi,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
    Kind::Crowd,
];
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// Every combination of the extreme values: expiries and delays of 0, 1 ms and `Duration::MAX`
/// (and a few that work), tries of 1 and `u32::MAX`, factors of NaN, -1, 0, 1 and infinity
/// (and one that works).
fn extremes() -> Vec<Extreme> {
    let ms = Duration::from_millis;
    let expiries = [Duration::ZERO, ms(1), ms(2000), YEAR, Duration::MAX];
    let delays = [
        Delay::Fixed(Duration::ZERO),
        Delay::Fixed(ms(1)),
        Delay::Fixed(Duration::MAX),
        Delay::Computed(Duration::MAX),
    ];
    let factors = [f64::NAN, -1.0, 0.0, 1.0, f64::INFINITY];
    let drifts = factors.iter().chain(&[0.5]);
    let timeouts: Vec<f64> = factors
        .iter()
        .chain(&[f64::MIN_POSITIVE, 0.25])
        .copied()
        .collect();
    let mut all = Vec::new();
    for &expiry in &expiries {
        for &delay in &delays {
            for tries in [1, u32::MAX] {
                for &drift in drifts.clone() {
                    for &timeout in &timeouts {
                        all.push(Extreme {
                            expiry,
                            delay,
                            tries,
                            drift,
                            timeout,
                        });
                    }
                }
            }
        }
    }
    all
}

impl Extreme {
    /// Whether the settings can work: anything else is an `Error::Config`.
    fn valid(&self) -> bool {
        (Duration::from_millis(1)..=YEAR).contains(&self.expiry)
            && (0.0..1.0).contains(&self.drift)
            && self.timeout > 0.0
            && self.timeout < 1.0
    }
}

/// Applies `extreme` to any primitive's setters.
macro_rules! configure {
    ($primitive:expr, $extreme:expr) => {{
        let e: Extreme = $extreme;
        let p = $primitive
            .with_expiry(e.expiry)
            .with_tries(e.tries)
            .with_drift_factor(e.drift)
            .with_timeout_factor(e.timeout);
        match e.delay {
            Delay::Fixed(delay) => p.with_retry_delay(delay),
            Delay::Computed(delay) => p.with_retry_delay_fn(move |_| delay),
        }
    }};
}

/// A primitive with some settings, behind one interface.
#[derive(Clone)]
enum Subject {
    Mutex(redmutex::Mutex),
    Read(redmutex::RwLock),
    Write(redmutex::RwLock),
    Semaphore(redmutex::Semaphore),
}

impl Subject {
    /// `kind` over `name`, waiting by `mode`, with `extreme` settings; `None` if the primitive
    /// has no such mode.
    fn new(
        redlock: &Redlock,
        kind: Kind,
        mode: Mode,
        name: &str,
        extreme: Option<Extreme>,
    ) -> Option<Subject> {
        let wake = mode != Mode::Poll;
        let rwlock = || {
            let rwlock = redlock.new_rwlock(name).with_wake_on_release(wake);
            match extreme {
                Some(e) => configure!(rwlock, e),
                None => rwlock,
            }
        };
        let semaphore = |permits| {
            let semaphore = redlock
                .new_semaphore(name, permits)
                .with_wake_on_release(wake);
            match extreme {
                Some(e) => configure!(semaphore, e),
                None => semaphore,
            }
        };
        Some(match (kind, mode) {
            (Kind::Mutex | Kind::Multi, _) => {
                let mutex = if kind == Kind::Mutex {
                    redlock.new_mutex(name)
                } else {
                    redlock.new_multi_mutex([format!("{name}:a"), format!("{name}:b")])
                };
                let mutex = mutex
                    .with_wake_on_release(wake)
                    .with_fair(mode == Mode::Fair);
                Subject::Mutex(match extreme {
                    Some(e) => configure!(mutex, e),
                    None => mutex,
                })
            }
            (_, Mode::Fair) => return None,
            (Kind::Read, _) => Subject::Read(rwlock()),
            (Kind::Write, _) => Subject::Write(rwlock()),
            (Kind::Semaphore, _) => Subject::Semaphore(semaphore(1)),
            (Kind::Crowd, _) => Subject::Semaphore(semaphore(u32::MAX)),
        })
    }

    /// A holder, with the default settings, that keeps a `kind` out of `name`: a writer for a
    /// reader, readers for a writer, the same primitive otherwise.
    fn rival(redlock: &Redlock, kind: Kind, mode: Mode, name: &str) -> Subject {
        let kind = match kind {
            Kind::Read => Kind::Write,
            Kind::Write => Kind::Read,
            other => other,
        };
        Subject::new(redlock, kind, mode, name, None).expect("the rival's mode exists")
    }

    async fn acquire(&self) -> Result<redmutex::Lock, Error> {
        match self {
            Subject::Mutex(m) => m.lock().await,
            Subject::Read(rw) => rw.read().await,
            Subject::Write(rw) => rw.write().await,
            Subject::Semaphore(s) => s.acquire().await,
        }
    }

    async fn try_acquire(&self) -> Result<redmutex::Lock, Error> {
        match self {
            Subject::Mutex(m) => m.try_lock().await,
            Subject::Read(rw) => rw.try_read().await,
            Subject::Write(rw) => rw.try_write().await,
            Subject::Semaphore(s) => s.try_acquire().await,
        }
    }

    fn adopt(&self, value: &str) -> Option<redmutex::Lock> {
        match self {
            Subject::Mutex(m) => Some(m.adopt(value)),
            Subject::Read(rw) => Some(rw.adopt_read(value)),
            Subject::Write(rw) => Some(rw.adopt_write(value)),
            Subject::Semaphore(_) => None,
        }
    }

    async fn inspect(&self) -> Result<redmutex::LockState, Error> {
        match self {
            Subject::Mutex(m) => m.inspect().await,
            Subject::Read(rw) | Subject::Write(rw) => rw.inspect().await,
            Subject::Semaphore(s) => s.inspect().await,
        }
    }

    async fn force_unlock(&self) -> Result<usize, Error> {
        match self {
            Subject::Mutex(m) => m.force_unlock().await,
            Subject::Read(rw) | Subject::Write(rw) => rw.force_unlock().await,
            Subject::Semaphore(s) => s.force_unlock().await,
        }
    }
}

/// Every operation a caller can make on a `subject` with invalid settings is an
/// `Error::Config`; returns the config error's rule, and the keep-alive of an adopted lock, which
/// ends on its own.
async fn refused_everywhere(
    subject: &Subject,
    label: &str,
) -> (String, Option<redmutex::KeepAlive>) {
    let config = |what: &str, result: Result<(), Error>| match result {
        Err(Error::Config { rule, .. }) => rule,
        other => panic!("{label}: {what}: expected a config error, got {other:?}"),
    };
    let rule = config("acquire", subject.acquire().await.map(drop));
    config("try_acquire", subject.try_acquire().await.map(drop));
    let mut keep = None;
    if let Some(adopted) = subject.adopt("some-value") {
        config("extend", adopted.extend().await);
        config("unlock", adopted.unlock().await);
        keep = Some(adopted.keep_alive(Duration::ZERO));
    }
    config("inspect", subject.inspect().await.map(drop));
    config("force_unlock", subject.force_unlock().await.map(drop));
    (rule, keep)
}

/// Settings that cannot work are an `Error::Config` from every operation of every primitive, in
/// every waiting mode, before anything reaches a node: an expiry of 0 or `Duration::MAX`, factors
/// of NaN, -1, 0, 1 or infinity, whatever the delays and tries.
#[tokio::test]
async fn extreme_invalid_settings_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    drop(
        redlock
            .new_mutex("extreme:warm-up")
            .lock()
            .await
            .expect("warm-up"),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = total_commands(&cluster);

    let mut checked = 0;
    let mut keeps = Vec::new();
    for (index, extreme) in extremes().into_iter().enumerate() {
        if extreme.valid() {
            continue;
        }
        for kind in KINDS {
            for mode in [Mode::Poll, Mode::Wake, Mode::Fair] {
                let name = format!("extreme:invalid:{index}:{kind:?}:{mode:?}");
                let Some(subject) = Subject::new(&redlock, kind, mode, &name, Some(extreme)) else {
                    continue;
                };
                let label = format!("{kind:?} {mode:?} {extreme:?}");
                let (rule, keep) = refused_everywhere(&subject, &label).await;
                keeps.extend(keep.map(|keep| (label.clone(), keep)));
                // (A fair multi-name mutex is refused for that first.)
                if extreme.expiry > YEAR && !(kind == Kind::Multi && mode == Mode::Fair) {
                    assert!(
                        rule.contains("365 days"),
                        "{label}: the rule names the limit: {rule}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    // An adopted lock is valid only until it first extends: its keep-alive may find the validity
    // gone before it tries.
    for (label, keep) in keeps {
        match keep.ended().await {
            redmutex::KeepAliveEnd::Lost(Error::Config { .. })
            | redmutex::KeepAliveEnd::Expired => {}
            other => panic!("{label}: keep_alive: expected a config error, got {other:?}"),
        }
    }
    // Fair waiting over several names cannot work either.
    let fair_multi = redlock
        .new_multi_mutex(["extreme:a", "extreme:b"])
        .with_fair(true);
    refused_everywhere(&Subject::Mutex(fair_multi), "fair multi").await;
    let no_permits = redlock.new_semaphore("extreme:none", 0);
    refused_everywhere(&Subject::Semaphore(no_permits), "no permits").await;

    let sent: Vec<u64> = total_commands(&cluster)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b - 1)
        .collect();
    assert_eq!(sent, [0, 0, 0], "nothing reached the nodes");
}

/// How long one call may run in the scenarios below before it counts as "still waiting".
const CALL: Duration = Duration::from_millis(800);

/// `call`'s outcome, or `None` if it still waits after [`CALL`].
async fn bounded<T>(call: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(CALL, call).await.ok()
}

/// Every operation on `subject` (settings that can work, however extreme), first on a free
/// name, then while `rival` holds it and releases it. Any outcome but a panic will do.
async fn exercise(subject: Subject, rival: Subject, delay: Duration) {
    if let Some(Ok(lock)) = bounded(subject.try_acquire()).await {
        bounded(lock.extend()).await;
        let keep = lock
            .keep_alive(delay)
            .max_extensions(2)
            .max_hold(Duration::MAX);
        bounded(keep.ended()).await;
        drop(keep);
        bounded(lock.unlock()).await;
        bounded(lock.unlock()).await;
        bounded(lock.extend()).await;
    }
    // Released in the background when dropped.
    bounded(subject.acquire()).await;
    if let Some(adopted) = subject.adopt("someone-else") {
        bounded(adopted.extend()).await;
        bounded(adopted.unlock()).await;
    }
    bounded(subject.inspect()).await;
    bounded(subject.force_unlock()).await;

    let Some(Ok(held)) = bounded(rival.acquire()).await else {
        return;
    };
    bounded(subject.try_acquire()).await;
    let waiter = tokio::spawn(async move { bounded(subject.acquire()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    bounded(held.unlock()).await;
    if let Ok(Some(Ok(lock))) = waiter.await {
        bounded(lock.unlock()).await;
    }
}

/// Ends the process if the test runs for minutes (it takes seconds), naming the scenarios still
/// running: a call that computes for ever (say, `u32::MAX` retry delays added up front) blocks the
/// runtime's threads, so no timeout of the test's own could fire. Disarmed when dropped.
fn watchdog(
    running: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
) -> std::sync::mpsc::Sender<()> {
    let (disarm, disarmed) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            disarmed.recv_timeout(Duration::from_secs(300))
        {
            let running = running.lock().unwrap_or_else(|e| e.into_inner());
            // Past the test harness's capture, which an abort would discard.
            let _ = writeln!(
                std::io::stderr(),
                "still running after 300 s, blocking the runtime: {running:#?}"
            );
            std::process::abort();
        }
    });
    disarm
}

/// Settings that can work, at their extremes (expiries of 1 ms and a year, delays of 0, 1 ms and
/// `Duration::MAX`, from a function too, tries of 1 and `u32::MAX`, a node timeout of 0), for every
/// primitive, waiting mode and operation, with and without listeners: every call returns or keeps
/// waiting, and nothing panics, neither in the call nor in a task it leaves behind (a release on
/// drop, a keep-alive).
#[test]
fn extreme_settings_never_panic() {
    // The runtime of `#[tokio::test]`, with its threads marked: the other tests in this process
    // run on other threads, and their panics are theirs.
    OURS.set(true);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| OURS.set(true))
        .build()
        .expect("a runtime")
        .block_on(extreme_settings_never_panic_on_our_threads());
}

thread_local! {
    /// Whether this thread is one of `extreme_settings_never_panic`'s.
    static OURS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

async fn extreme_settings_never_panic_on_our_threads() {
    static PANICS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if OURS.try_with(std::cell::Cell::get).unwrap_or(false) {
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(info.to_string());
        }
        default_hook(info);
    }));

    let cluster = Cluster::start(3);
    let listening = client(&cluster).await;
    let mut connections = Vec::new();
    for url in cluster.urls() {
        let connection = redis::Client::open(url)
            .expect("URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        connections.push(connection);
    }
    // Connections the caller built: no listeners, so waiting polls.
    let built = Redlock::new(connections).expect("connections");

    let mut scenarios = Vec::new();
    for (index, extreme) in extremes().into_iter().enumerate() {
        if !extreme.valid() || extreme.drift != 0.0 {
            continue;
        }
        for (redlock, client_name) in [(&listening, "listening"), (&built, "built")] {
            for kind in KINDS {
                for mode in [Mode::Poll, Mode::Wake, Mode::Fair] {
                    if kind == Kind::Multi && mode == Mode::Fair
                        || client_name == "built" && mode == Mode::Poll
                    {
                        continue;
                    }
                    let name = format!("extreme:{index}:{client_name}:{kind:?}:{mode:?}");
                    let Some(subject) = Subject::new(redlock, kind, mode, &name, Some(extreme))
                    else {
                        continue;
                    };
                    let rival = Subject::rival(&listening, kind, mode, &name);
                    let delay = match extreme.delay {
                        Delay::Fixed(delay) | Delay::Computed(delay) => delay,
                    };
                    let label = format!("{client_name} {kind:?} {mode:?} {extreme:?}");
                    scenarios.push((label, subject, rival, delay));
                }
            }
        }
    }
    let count = scenarios.len();
    let running = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let _watchdog = watchdog(Arc::clone(&running));
    let slots = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for (label, subject, rival, delay) in scenarios {
        let slot = Arc::clone(&slots).acquire_owned().await.expect("open");
        let running = Arc::clone(&running);
        running.lock().expect("not poisoned").insert(label.clone());
        let task = tokio::spawn({
            let label = label.clone();
            async move {
                exercise(subject, rival, delay).await;
                running.lock().expect("not poisoned").remove(&label);
                drop(slot);
            }
        });
        tasks.push((label, task));
    }
    let mut panicked = Vec::new();
    for (label, task) in tasks {
        if let Err(error) = task.await {
            panicked.push(format!("{label}: {error}"));
        }
    }
    // Let the tasks the calls left behind (releases of dropped locks, the clients' listeners)
    // finish: none outlives the clients.
    drop((listening, built));
    let runtime = tokio::runtime::Handle::current();
    for _ in 0..300 {
        if runtime.metrics().num_alive_tasks() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::panic::take_hook();
    let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        panicked.is_empty() && panics.is_empty(),
        "{} of {count} scenarios panicked: {panicked:#?}\npanics: {panics:#?}",
        panicked.len()
    );
}

fn config_error(result: Result<impl std::fmt::Debug, Error>) -> (String, String) {
    match result {
        Err(Error::Config { field, rule }) => (field, rule),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// One server listed twice would count twice towards every quorum (and a run waiting for its own
/// lock would wait on itself): refused at once, naming both entries, counted from 1.
#[tokio::test]
async fn two_members_reaching_one_server_are_refused() {
    let secret = "correct-horse-battery-staple";
    let port = 6390;
    let urls = [
        format!("redis://:{secret}@127.0.0.1:{port}/0"),
        "redis://127.0.0.1:6391".to_owned(),
        format!("REDIS://127.0.0.1:{port}/1"),
    ];
    let (field, rule) = config_error(Redlock::connect(&urls).await);
    assert_eq!(field, "urls");
    assert!(
        rule.contains(&format!("entry 1 (redis://***@127.0.0.1:{port}/0)"))
            && rule.contains(&format!("entry 3 (REDIS://127.0.0.1:{port}/1)"))
            && rule.contains("same server"),
        "{rule}"
    );
    assert!(!rule.contains(secret), "{rule}");

    let clients = [6392, 6393, 6392]
        .map(|port| redis::Client::open(format!("redis://localhost:{port}/")).expect("a URL"));
    let (field, rule) = config_error(Redlock::from_clients(clients).await);
    assert_eq!(field, "clients");
    assert!(
        rule.contains("entry 1") && rule.contains("entry 3"),
        "{rule}"
    );
}

#[tokio::test]
async fn a_url_without_a_scheme_is_named_as_given_with_the_form_to_use() {
    let (field, rule) =
        config_error(Redlock::connect(["redis://127.0.0.1:1/", "127.0.0.1:7101"]).await);
    assert_eq!(field, "urls[1]");
    assert!(
        rule.contains("entry 2 (127.0.0.1:7101)") && rule.contains("redis://host:port"),
        "{rule}"
    );
}

#[tokio::test]
async fn no_quorum_names_members_by_address_without_passwords() {
    let secret = "correct-horse-battery-staple";
    let urls = [
        "redis://127.0.0.1:1/".to_owned(),
        format!("redis://:{secret}@127.0.0.1:2/"),
    ];
    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    let error = redlock
        .new_mutex("config:named")
        .with_expiry(Duration::from_secs(2))
        .try_lock()
        .await
        .expect_err("nothing is listening");
    let message = error.to_string();
    assert!(
        message.contains("redis://127.0.0.1:1/: ")
            && message.contains("redis://***@127.0.0.1:2/: "),
        "{message}"
    );
    assert!(
        !message.contains("node 0") && !message.contains(secret),
        "{message}"
    );
}

/// A name that only ends like a key redmutex keeps, but is no other name's (`app:leader`), works
/// for every primitive; the waiters' mark (`<name>:waiters` on a standalone server) and the
/// previous layout's counter (`<name>:fence`, still read) stay reserved.
#[tokio::test]
async fn natural_names_ending_in_a_suffix_work() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let leadership = redlock
        .new_election("app:leader")
        .campaign("a")
        .await
        .expect("app:leader is a name like any other");
    leadership.resign().await.expect("resign");
    for name in ["app:leader", "app:readers", "app:line:until", "app:ticket"] {
        let lock = redlock
            .new_mutex(name)
            .with_fencing(true)
            .lock()
            .await
            .expect(name);
        lock.unlock().await.expect(name);
        redlock
            .new_rwlock(name)
            .read()
            .await
            .expect(name)
            .unlock()
            .await
            .expect(name);
    }
    assert_eq!(field(redlock.new_mutex("app:waiters").lock().await), "name");
    assert_eq!(field(redlock.new_mutex("app:fence").lock().await), "name");
}
