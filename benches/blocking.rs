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
//! Environment: `BENCH_SECS` (measured seconds per row, all rounds together, default 6),
//! `BENCH_ROUNDS` (default 6), `BENCH_WARMUP_MS` (before every round, default 300).

use std::time::{Duration, Instant};

use redmutex::blocking;

const WORKLOADS: [usize; 2] = [1, 32];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    AsyncMulti,
    AsyncCurrent,
    Blocking,
}

impl Who {
    const ALL: [Who; 3] = [Who::AsyncMulti, Who::AsyncCurrent, Who::Blocking];

    fn name(self) -> &'static str {
        match self {
            Who::AsyncMulti => "async multi",
            Who::AsyncCurrent => "async current",
            Who::Blocking => "blocking",
        }
    }
}

/// One contender's clients, made once and kept for every round.
enum Client {
    Async(tokio::runtime::Runtime, redmutex::Redlock),
    Blocking(blocking::Redlock),
}

impl Client {
    fn new(who: Who, urls: &[String]) -> Client {
        let runtime = match who {
            Who::AsyncMulti => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build(),
            Who::AsyncCurrent => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Who::Blocking => {
                return Client::Blocking(blocking::Redlock::connect(urls).expect("connects"));
            }
        };
        let runtime = runtime.expect("a runtime");
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
        let started = Instant::now();
        let (measure_from, stop_at) = (started + warm_up, started + warm_up + length);
        match self {
            Client::Async(runtime, redlock) => runtime.block_on(async {
                let tasks: Vec<_> = (0..lockers)
                    .map(|n| {
                        let mutex = redlock.new_mutex(format!("{prefix}:{n}"));
                        tokio::spawn(async move {
                            let mut cycles = Vec::new();
                            while Instant::now() < stop_at {
                                let start = Instant::now();
                                let lock = mutex.lock().await.expect("own name");
                                lock.unlock().await.expect("held");
                                if start >= measure_from {
                                    cycles.push(start.elapsed());
                                }
                            }
                            cycles
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for task in tasks {
                    all.extend(task.await.expect("no panic"));
                }
                all
            }),
            Client::Blocking(redlock) => {
                let threads: Vec<_> = (0..lockers)
                    .map(|n| {
                        let mutex = redlock.new_mutex(format!("{prefix}:{n}"));
                        std::thread::spawn(move || {
                            let mut cycles = Vec::new();
                            while Instant::now() < stop_at {
                                let start = Instant::now();
                                let lock = mutex.lock().expect("own name");
                                lock.unlock().expect("held");
                                if start >= measure_from {
                                    cycles.push(start.elapsed());
                                }
                            }
                            cycles
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .flat_map(|thread| thread.join().expect("no panic"))
                    .collect()
            }
        }
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
    }
    println!("\nload average after: {}", load_average());
}
