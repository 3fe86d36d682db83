//! The blocking API against the async one, side by side in one run: lock + unlock cycles of a
//! `Mutex` (default settings) on 5 local nodes, each contender on its own names.
//!
//! `cargo bench --bench blocking --features blocking` starts 5 `redis-server` nodes (through
//! `testenv`) and runs two workloads, 1 and 32 concurrent lockers, with three contenders:
//! **async multi** (tasks on a multi-thread tokio runtime of 2 workers, the blocking runtime's
//! size), **async current** (tasks on a current-thread runtime) and **blocking** (that many OS
//! threads calling `redmutex::blocking`). Rounds are interleaved (every contender runs one round,
//! then the next, in an order rotated by one per round) so that the drift of a shared machine's
//! load falls on all of them alike; each row merges its rounds (cycles and time summed,
//! percentiles over every cycle).
//!
//! Two floors show what any blocking bridge over an async client costs, with no redmutex in it:
//! **floor async** (the wire work of a lock and an unlock written with the redis crate alone:
//! `SET NX PX` to the 5 nodes at once, then a compare-and-delete script to the 5 at once, from
//! tasks on a 2-worker runtime) and **floor threads** (the same two steps from OS threads, each
//! step spawned on a shared 2-worker runtime and waited for with `block_on`, as
//! `redmutex::blocking` waits for each call). Their ratio is the bridge's own cost; the blocking
//! API's ratio against async multi can be judged against it.
//!
//! Environment: `BENCH_SECS` (measured seconds per row, all rounds together, default 6),
//! `BENCH_ROUNDS` (default 6), `BENCH_WARMUP_MS` (before every round, default 300).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redmutex::blocking;

const WORKLOADS: [usize; 2] = [1, 32];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    AsyncMulti,
    AsyncCurrent,
    Blocking,
    FloorAsync,
    FloorThreads,
}

impl Who {
    const ALL: [Who; 5] = [
        Who::AsyncMulti,
        Who::AsyncCurrent,
        Who::Blocking,
        Who::FloorAsync,
        Who::FloorThreads,
    ];

    fn name(self) -> &'static str {
        match self {
            Who::AsyncMulti => "async multi",
            Who::AsyncCurrent => "async current",
            Who::Blocking => "blocking",
            Who::FloorAsync => "floor async",
            Who::FloorThreads => "floor threads",
        }
    }
}

/// One contender's clients, made once and kept for every round.
enum Client {
    Async(tokio::runtime::Runtime, redmutex::Redlock),
    Blocking(blocking::Redlock),
    /// A floor, and whether it is driven from OS threads.
    Floor(tokio::runtime::Runtime, Arc<Floor>, bool),
}

fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

impl Client {
    fn new(who: Who, urls: &[String]) -> Client {
        let runtime = match who {
            Who::AsyncMulti => two_workers(),
            Who::AsyncCurrent => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            Who::Blocking => {
                return Client::Blocking(blocking::Redlock::connect(urls).expect("connects"));
            }
            Who::FloorAsync | Who::FloorThreads => {
                let runtime = two_workers();
                let floor = runtime.block_on(Floor::connect(urls));
                return Client::Floor(runtime, Arc::new(floor), who == Who::FloorThreads);
            }
        };
        let redlock = runtime
            .block_on(redmutex::Redlock::connect(urls))
            .expect("connects");
        Client::Async(runtime, redlock)
    }

    /// Runs `lockers` lockers for `length` (after `warm_up`), each on its own name; the
    /// duration of every measured cycle.
    fn round(
        &self,
        prefix: &str,
        lockers: usize,
        warm_up: Duration,
        length: Duration,
    ) -> Vec<Duration> {
        let window = Window::new(warm_up, length);
        match self {
            Client::Async(runtime, redlock) => runtime.block_on(tasks((0..lockers).map(|n| {
                let mutex = redlock.new_mutex(format!("{prefix}:{n}"));
                async move {
                    let mutex = &mutex;
                    window
                        .time_async(|| async move {
                            let lock = mutex.lock().await.expect("own name");
                            lock.unlock().await.expect("held");
                        })
                        .await
                }
            }))),
            Client::Blocking(redlock) => std::thread::scope(|scope| {
                let threads: Vec<_> = (0..lockers)
                    .map(|n| {
                        let mutex = redlock.new_mutex(format!("{prefix}:{n}"));
                        scope.spawn(move || {
                            window.time(|| {
                                let lock = mutex.lock().expect("own name");
                                lock.unlock().expect("held");
                            })
                        })
                    })
                    .collect();
                joined(threads)
            }),
            Client::Floor(runtime, floor, false) => {
                runtime.block_on(tasks((0..lockers).map(|n| {
                    let (floor, key) = (Arc::clone(floor), format!("{prefix}:{n}"));
                    async move {
                        let (floor, key) = (&floor, key.as_str());
                        window
                            .time_async(|| async move { floor.cycle_async(key).await })
                            .await
                    }
                })))
            }
            Client::Floor(runtime, floor, true) => {
                let handle = runtime.handle();
                std::thread::scope(|scope| {
                    let threads: Vec<_> = (0..lockers)
                        .map(|n| {
                            let key: Arc<str> = format!("{prefix}:{n}").into();
                            scope.spawn(move || window.time(|| floor.cycle_bridged(handle, &key)))
                        })
                        .collect();
                    joined(threads)
                })
            }
        }
    }
}

/// When a round's cycles count: after its warm-up, until its end.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    stop_at: Instant,
}

impl Window {
    fn new(warm_up: Duration, length: Duration) -> Window {
        let started = Instant::now();
        Window {
            measure_from: started + warm_up,
            stop_at: started + warm_up + length,
        }
    }

    /// Runs `cycle` until the end; the duration of each one that began after the warm-up.
    fn time(self, mut cycle: impl FnMut()) -> Vec<Duration> {
        let mut cycles = Vec::new();
        while Instant::now() < self.stop_at {
            let start = Instant::now();
            cycle();
            if start >= self.measure_from {
                cycles.push(start.elapsed());
            }
        }
        cycles
    }

    /// [`time`](Self::time) for a cycle that is a future.
    async fn time_async<F: Future<Output = ()>>(
        self,
        mut cycle: impl FnMut() -> F,
    ) -> Vec<Duration> {
        let mut cycles = Vec::new();
        while Instant::now() < self.stop_at {
            let start = Instant::now();
            cycle().await;
            if start >= self.measure_from {
                cycles.push(start.elapsed());
            }
        }
        cycles
    }
}

/// Runs each locker as a task of the current runtime; every cycle of all of them.
async fn tasks<F>(lockers: impl Iterator<Item = F>) -> Vec<Duration>
where
    F: Future<Output = Vec<Duration>> + Send + 'static,
{
    let tasks: Vec<_> = lockers.map(tokio::spawn).collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("no panic"));
    }
    all
}

/// Every cycle of the lockers' threads.
fn joined(threads: Vec<std::thread::ScopedJoinHandle<'_, Vec<Duration>>>) -> Vec<Duration> {
    threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("no panic"))
        .collect()
}

/// The wire work of a lock and an unlock on every node, with the redis crate alone.
struct Floor {
    nodes: Vec<redis::aio::MultiplexedConnection>,
    release: redis::Script,
}

impl Floor {
    async fn connect(urls: &[String]) -> Floor {
        let mut nodes = Vec::new();
        for url in urls {
            let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).expect("URL");
            let tcp = info.tcp_settings().clone().set_nodelay(true);
            let client = redis::Client::open(info.set_tcp_settings(tcp)).expect("client");
            let connection = client
                .get_multiplexed_async_connection()
                .await
                .expect("connects");
            nodes.push(connection);
        }
        let release = redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
             return 0",
        );
        for node in &nodes {
            release
                .prepare_invoke()
                .load_async(&mut node.clone())
                .await
                .expect("loads");
        }
        Floor { nodes, release }
    }

    /// `SET key value NX PX` on every node at once; how many took it.
    async fn acquire(self: Arc<Self>, key: Arc<str>, value: u64) -> usize {
        let sets = self.nodes.iter().map(|node| {
            let mut node = node.clone();
            let mut set = redis::cmd("SET");
            set.arg(&*key).arg(value).arg("NX").arg("PX").arg(10_000);
            async move { set.query_async::<Option<String>>(&mut node).await }
        });
        let replies = futures::future::join_all(sets).await;
        replies
            .iter()
            .filter(|reply| matches!(reply, Ok(Some(_))))
            .count()
    }

    /// The compare-and-delete script on every node at once.
    async fn release(self: Arc<Self>, key: Arc<str>, value: u64) {
        let deletes = self.nodes.iter().map(|node| {
            let mut node = node.clone();
            let mut invocation = self.release.key(&*key);
            invocation.arg(value);
            async move { invocation.invoke_async::<i64>(&mut node).await }
        });
        futures::future::join_all(deletes).await;
    }

    async fn cycle_async(self: &Arc<Self>, key: &str) {
        let (key, value): (Arc<str>, u64) = (key.into(), rand::random());
        let taken = Arc::clone(self).acquire(Arc::clone(&key), value).await;
        assert!(taken > self.nodes.len() / 2, "own key");
        Arc::clone(self).release(key, value).await;
    }

    /// The same two steps, each spawned on `runtime` and waited for from this thread.
    fn cycle_bridged(self: &Arc<Self>, runtime: &tokio::runtime::Handle, key: &Arc<str>) {
        let value: u64 = rand::random();
        let acquire = runtime.spawn(Arc::clone(self).acquire(Arc::clone(key), value));
        let taken = runtime.block_on(acquire).expect("no panic");
        assert!(taken > self.nodes.len() / 2, "own key");
        let release = runtime.spawn(Arc::clone(self).release(Arc::clone(key), value));
        runtime.block_on(release).expect("no panic");
    }
}

#[derive(Default)]
struct Row {
    cycles: Vec<Duration>,
    measured: Duration,
}

impl Row {
    fn per_second(&self) -> f64 {
        self.cycles.len() as f64 / self.measured.as_secs_f64()
    }

    fn percentile(&mut self, p: f64) -> Duration {
        self.cycles.sort_unstable();
        let index = ((self.cycles.len() as f64 - 1.0) * p).round() as usize;
        self.cycles.get(index).copied().unwrap_or_default()
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let secs = env("BENCH_SECS", 6);
    let rounds = env("BENCH_ROUNDS", 6).max(1);
    let warm_up = Duration::from_millis(env("BENCH_WARMUP_MS", 300));
    let length = Duration::from_secs(secs) / rounds as u32;
    let cluster = redmutex_testenv::Cluster::start(5);
    let urls = cluster.urls();
    let clients: Vec<_> = Who::ALL
        .iter()
        .map(|&who| Client::new(who, &urls))
        .collect();
    println!("load average before: {}", load_average());
    for lockers in WORKLOADS {
        let mut rows: Vec<Row> = Who::ALL.iter().map(|_| Row::default()).collect();
        for round in 0..rounds as usize {
            for i in 0..Who::ALL.len() {
                let c = (i + round) % Who::ALL.len();
                let prefix = format!("bench:blocking:{c}:{lockers}");
                let cycles = clients[c].round(&prefix, lockers, warm_up, length);
                rows[c].cycles.extend(cycles);
                rows[c].measured += length;
            }
        }
        let base_rate = rows[0].per_second();
        let base_p50 = rows[0].percentile(0.5);
        println!("\n{lockers} locker(s), {secs} s in {rounds} rounds per row");
        println!("| contender | cycles/s | x async multi | p50 | x async multi | p99 |");
        println!("|---|---|---|---|---|---|");
        for (who, row) in Who::ALL.iter().zip(&mut rows) {
            let (p50, p99) = (row.percentile(0.5), row.percentile(0.99));
            println!(
                "| {} | {:.0} | {:.2} | {:.1} us | {:.2} | {:.1} us |",
                who.name(),
                row.per_second(),
                row.per_second() / base_rate,
                p50.as_secs_f64() * 1e6,
                p50.as_secs_f64() / base_p50.as_secs_f64(),
                p99.as_secs_f64() * 1e6,
            );
        }
        let rate = |who: Who| rows[who as usize].per_second();
        println!(
            "blocking / async multi: {:.2}x the rate; floor threads / floor async: {:.2}x",
            rate(Who::Blocking) / rate(Who::AsyncMulti),
            rate(Who::FloorThreads) / rate(Who::FloorAsync),
        );
    }
    println!("\nload average after: {}", load_average());
}
