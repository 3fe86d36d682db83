//! A client process: tasks that each run a random mix of the primitives on a few names until the
//! deadline, recording every call and every critical section.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redmutex::{Lock, Redlock, fenced_set};

use crate::history::{Clock, Event, Kind, Nanos, monotonic};
use crate::record::Recorder;

/// The names every mutex, multi-name mutex and read-write lock shares. The third shares the
/// first's slot (its hash tag), so that a multi-name lock of the two counts on the cluster member,
/// which refuses names across slots.
pub const NAMES: [&str; 3] = ["a", "b", "{a}c"];
/// The semaphore's name and permits.
pub const SEMAPHORE: &str = "sem";
pub const PERMITS: u32 = 2;
/// In runs with replica acknowledgements, the names and semaphore of the locks taken on the
/// cluster member alone with `with_replica_acks(1)` (a standalone node never counts with it set,
/// so these cannot go through the whole deployment); apart from `NAMES`, whose holders count on
/// the other members too.
pub const ACKED_NAMES: [&str; 3] = ["x", "y", "{x}z"];
pub const ACKED_SEMAPHORE: &str = "xsem";
/// The election's name.
pub const ELECTION: &str = "lead";
/// Every lock's expiry and the election's lease: short, so a node restarted empty can be kept
/// out for longer than any of them without stalling the run.
pub const EXPIRY: Duration = Duration::from_millis(1000);
/// How long a call may wait for its lock.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// What a call may take beyond its own waiting: its last attempt's round trips and scheduling on
/// a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(5);
/// Tasks per process.
const TASKS: usize = 5;
/// How often a process records its resident memory.
const MEMORY_EVERY: Duration = Duration::from_secs(2);

/// What a client process is told on its command line.
#[derive(Debug, Clone)]
pub struct Spec {
    pub process: String,
    pub history: PathBuf,
    pub urls: Vec<String>,
    /// The Redis Cluster member, as one `connect` entry.
    pub cluster: String,
    /// Whether one task takes its locks on the cluster member alone, with replica acks.
    pub acks: bool,
    pub store: String,
    pub deadline: Nanos,
    pub seed: u64,
}

/// How a hold keeps its lock past the expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renew {
    No,
    KeepAlive,
    Run,
}

/// Where a locking task takes its locks: the whole deployment, or (with replica acks) the
/// cluster member alone.
struct Flavor<'a> {
    redlock: &'a Redlock,
    names: &'a [&'a str],
    semaphore: &'a str,
    replica_acks: u32,
}

struct Client {
    process: String,
    redlock: Redlock,
    /// With replica acks: a client of the cluster member alone.
    acked: Option<Redlock>,
    store: redis::aio::MultiplexedConnection,
    recorder: Recorder,
    clock: Clock,
    ids: AtomicU64,
    deadline: Nanos,
}

/// Runs the client until the deadline, then records its stop.
pub async fn run(spec: Spec) -> Result<(), crate::BoxError> {
    let mut urls = spec.urls.clone();
    urls.push(spec.cluster.clone());
    let redlock = Redlock::connect(&urls).await?;
    let acked = if spec.acks {
        Some(Redlock::connect([&spec.cluster]).await?)
    } else {
        None
    };
    let store = redis::Client::open(spec.store.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let client = Arc::new(Client {
        process: spec.process.clone(),
        redlock,
        acked,
        store,
        recorder: Recorder::create(&spec.history)?,
        clock: Clock::new(),
        ids: AtomicU64::new(0),
        deadline: spec.deadline,
    });
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let client = Arc::clone(&client);
        let rng = StdRng::seed_from_u64(spec.seed ^ (task as u64).wrapping_mul(0x9e37_79b9));
        tasks.push(tokio::spawn(async move {
            // One task per process campaigns; the others lock.
            // With replica acks, one task locks on the cluster member alone.
            if task == 0 {
                client.campaigns(rng).await;
            } else if let (1, Some(acked)) = (task, &client.acked) {
                let flavor = Flavor {
                    redlock: acked,
                    names: &ACKED_NAMES,
                    semaphore: ACKED_SEMAPHORE,
                    replica_acks: 1,
                };
                client.locks(task, rng, flavor).await;
            } else {
                let flavor = Flavor {
                    redlock: &client.redlock,
                    names: &NAMES,
                    semaphore: SEMAPHORE,
                    replica_acks: 0,
                };
                client.locks(task, rng, flavor).await;
            }
        }));
    }
    let sampler = {
        let client = Arc::clone(&client);
        tokio::spawn(async move { client.samples_memory().await })
    };
    // A task stuck in a call past the deadline (and the grace a call may take) is not waited
    // for: its call stays open in the history, and the checker judges it against the stop
    // recorded here.
    let left = Duration::from_nanos(spec.deadline.saturating_sub(monotonic()));
    let grace = tokio::time::sleep(left + MAX_WAIT + SLACK + EXPIRY);
    let all = futures::future::join_all(tasks);
    tokio::select! {
        _ = all => {}
        () = grace => {}
    }
    sampler.abort();
    client.recorder.record(&Event::Stop {
        process: spec.process,
        at: monotonic(),
    });
    Ok(())
}

impl Client {
    fn id(&self, what: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("{}/{what}{n}", self.process)
    }

    /// Records a call around `call`, with its bound.
    async fn call<T, E, F>(&self, what: &str, bound: Duration, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let id = self.id("c");
        self.recorder.record(&Event::Call {
            id: id.clone(),
            process: self.process.clone(),
            what: what.to_owned(),
            start: monotonic(),
            bound: u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX),
        });
        let result = call.await;
        self.recorder.record(&Event::Return {
            id,
            end: monotonic(),
            ok: result.is_ok(),
        });
        result
    }

    fn running(&self) -> bool {
        monotonic() < self.deadline
    }

    /// Records this process's resident memory (`VmRSS` of /proc/self/status) every
    /// `MEMORY_EVERY`, for the checker to compare the first and last minute of a long run.
    async fn samples_memory(&self) {
        loop {
            if let Some(rss_kb) = resident_kb() {
                self.recorder.record(&Event::Memory {
                    process: self.process.clone(),
                    at: monotonic(),
                    rss_kb,
                });
            }
            tokio::time::sleep(MEMORY_EVERY).await;
        }
    }

    async fn locks(&self, task: usize, mut rng: StdRng, flavor: Flavor<'_>) {
        let holder = format!("{}/t{task}", self.process);
        let bound = MAX_WAIT + EXPIRY + SLACK;
        let names = flavor.names;
        while self.running() {
            let name = names[rng.random_range(0..names.len())];
            let choice = rng.random_range(0..10u32);
            let mutex = flavor
                .redlock
                .new_mutex(name)
                .with_expiry(EXPIRY)
                .with_max_wait(MAX_WAIT)
                .with_replica_acks(flavor.replica_acks);
            let rwlock = flavor
                .redlock
                .new_rwlock(name)
                .with_expiry(EXPIRY)
                .with_max_wait(MAX_WAIT)
                .with_replica_acks(flavor.replica_acks);
            let (kind, acquired) = match choice {
                0 => (Kind::Mutex, self.call("lock", bound, mutex.lock()).await),
                1 => {
                    let mutex = mutex.with_fail_fast(true);
                    (Kind::Mutex, self.call("lock", bound, mutex.lock()).await)
                }
                2 => {
                    let mutex = mutex.with_fencing(true);
                    (Kind::Mutex, self.call("lock", bound, mutex.lock()).await)
                }
                3 => {
                    let mutex = mutex.with_fair(true);
                    (Kind::Mutex, self.call("lock", bound, mutex.lock()).await)
                }
                4 => {
                    let mutex = mutex.with_wake_on_release(true);
                    (Kind::Mutex, self.call("lock", bound, mutex.lock()).await)
                }
                5 => {
                    let other = names[(names.iter().position(|n| *n == name).unwrap_or(0)
                        + rng.random_range(1..names.len()))
                        % names.len()];
                    let multi = flavor
                        .redlock
                        .new_multi_mutex([name, other])
                        .with_expiry(EXPIRY)
                        .with_max_wait(MAX_WAIT)
                        .with_replica_acks(flavor.replica_acks);
                    (Kind::Multi, self.call("lock", bound, multi.lock()).await)
                }
                6 | 7 => (Kind::Reader, self.call("read", bound, rwlock.read()).await),
                8 => {
                    let rwlock = rwlock.with_fencing(rng.random_bool(0.5));
                    (
                        Kind::Writer,
                        self.call("write", bound, rwlock.write()).await,
                    )
                }
                _ => {
                    let semaphore = flavor
                        .redlock
                        .new_semaphore(flavor.semaphore, PERMITS)
                        .with_expiry(EXPIRY)
                        .with_max_wait(MAX_WAIT)
                        .with_replica_acks(flavor.replica_acks);
                    let acquired = self.call("acquire", bound, semaphore.acquire()).await;
                    (Kind::Permit, acquired)
                }
            };
            let Ok(lock) = acquired else {
                continue;
            };
            // Now and then a long hold, renewed past the expiry (by a keep-alive, or by `run`).
            let long = rng.random_range(0..20u32) == 0;
            let hold = if long {
                Duration::from_millis(rng.random_range(1500..3000))
            } else {
                Duration::from_millis(rng.random_range(1..20))
            };
            let renew = match (long, rng.random_bool(0.5)) {
                (false, _) => Renew::No,
                (true, false) => Renew::KeepAlive,
                (true, true) => Renew::Run,
            };
            self.hold(&holder, kind, lock, hold, renew).await;
        }
    }

    /// Holds `lock` for `hold`, writing through the fenced resource when it has a token, then
    /// unlocks; a long hold is renewed by a keep-alive, or is the work of `Lock::run`.
    async fn hold(&self, holder: &str, kind: Kind, lock: Lock, hold: Duration, renew: Renew) {
        let id = self.id("s");
        let names: Vec<String> = lock.names().map(str::to_owned).collect();
        let permits = (kind == Kind::Permit).then_some(PERMITS);
        self.recorder.record(&Event::Enter {
            id: id.clone(),
            kind,
            names: names.clone(),
            holder: holder.to_owned(),
            token: lock.token(),
            permits,
            at: monotonic(),
            valid_until: self.clock.nanos(lock.valid_until()),
        });
        let exited = AtomicBool::new(false);
        match renew {
            Renew::No | Renew::KeepAlive => {
                let keep = (renew == Renew::KeepAlive).then(|| lock.keep_alive(EXPIRY / 4));
                let lost = || keep.as_ref().is_some_and(|k| k.end().is_some());
                self.work(&id, &names[0], &lock, hold, lost, &exited).await;
                drop(keep);
                let _ = self.call("unlock", EXPIRY + SLACK, lock.unlock()).await;
            }
            Renew::Run => {
                // `run` renews, drops the work once the lock is lost (before its validity
                // ends), and unlocks when the work is done.
                let work = self.work(&id, &names[0], &lock, hold, || false, &exited);
                let bound = hold + EXPIRY + SLACK;
                let _ = self.call("run", bound, lock.clone().run(work)).await;
            }
        }
        if !exited.load(Ordering::Relaxed) {
            // `run` dropped the work: its exit is recorded now, after the validity, and the
            // checker counts the section until the validity.
            self.recorder.record(&Event::Exit {
                id,
                at: monotonic(),
            });
        }
    }

    /// The critical section's work: a fenced write every 20 ms while the lock is valid and has a
    /// token, and its validity recorded each time it moves; its exit is recorded as it ends.
    async fn work(
        &self,
        id: &str,
        name: &str,
        lock: &Lock,
        hold: Duration,
        lost: impl Fn() -> bool,
        exited: &AtomicBool,
    ) {
        let start = Instant::now();
        let mut valid_until = lock.valid_until();
        loop {
            if let Some(token) = lock.token()
                && Instant::now() < lock.valid_until()
            {
                self.fenced_write(id, name, token).await;
            }
            if lock.valid_until() > valid_until {
                valid_until = lock.valid_until();
                self.recorder.record(&Event::Extend {
                    id: id.to_owned(),
                    valid_until: self.clock.nanos(valid_until),
                });
            }
            if start.elapsed() >= hold || lost() || Instant::now() >= lock.valid_until() {
                // Before the unlock: once it is sent, another holder may enter.
                self.recorder.record(&Event::Exit {
                    id: id.to_owned(),
                    at: monotonic(),
                });
                exited.store(true, Ordering::Relaxed);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20).min(hold)).await;
        }
    }

    async fn fenced_write(&self, section: &str, name: &str, token: u64) {
        let resource = format!("res:{name}");
        let mut store = self.store.clone();
        let start = monotonic();
        let accepted = fenced_set(&mut store, &resource, section, token).await;
        let end = monotonic();
        if let Ok(accepted) = accepted {
            self.recorder.record(&Event::Write {
                section: section.to_owned(),
                resource,
                token,
                start,
                end,
                accepted,
            });
        }
    }

    async fn campaigns(&self, mut rng: StdRng) {
        let holder = format!("{}/t0", self.process);
        let election = self
            .redlock
            .new_election(ELECTION)
            .with_expiry(EXPIRY)
            .with_max_wait(MAX_WAIT);
        while self.running() {
            let bound = MAX_WAIT + EXPIRY + SLACK;
            let Ok(leadership) = self
                .call("campaign", bound, election.campaign(holder.clone()))
                .await
            else {
                continue;
            };
            let id = self.id("s");
            self.recorder.record(&Event::Enter {
                id: id.clone(),
                kind: Kind::Term,
                names: vec![ELECTION.to_owned()],
                holder: holder.clone(),
                token: Some(leadership.epoch()),
                permits: None,
                at: monotonic(),
                valid_until: self.clock.nanos(leadership.valid_until()),
            });
            let lead = Duration::from_millis(rng.random_range(200..2500));
            let start = Instant::now();
            let mut valid_until = leadership.valid_until();
            while start.elapsed() < lead && leadership.end().is_none() && self.running() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if leadership.valid_until() > valid_until {
                    valid_until = leadership.valid_until();
                    self.recorder.record(&Event::Extend {
                        id: id.clone(),
                        valid_until: self.clock.nanos(valid_until),
                    });
                }
            }
            self.recorder.record(&Event::Exit {
                id,
                at: monotonic(),
            });
            let _ = self
                .call("resign", EXPIRY + SLACK, leadership.resign())
                .await;
            // Give the others a turn.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..200))).await;
        }
    }
}

/// This process's resident set size in kB, from the `VmRSS:` line of /proc/self/status.
fn resident_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}
