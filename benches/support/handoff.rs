//! The hand-off benchmark of wake-up on release: 8 tasks on one name, each locking, holding the
//! lock for [`HOLD`] while it increments a counter in process memory, and unlocking; then it steps
//! back until another task has the lock before it calls `lock()` again. So every hand-off goes
//! from the holder to one of the 7 tasks already waiting (otherwise the task that just unlocked
//! takes the lock straight back, and no hand-off ever waits). Default settings (8 s expiry,
//! retry delays of 50 to 250 ms), polling or with `with_wake_on_release(true)`; the 8 tasks share
//! one `Redlock`, or each has its own (as 8 processes would).
//!
//! Per row: hand-offs per second, the hand-off latency (one holder starting its unlock to the next
//! holder's `lock()` returning), the commands the nodes received per acquisition (SET, EVALSHA,
//! EVAL, EXISTS, SUBSCRIBE, UNSUBSCRIBE over all nodes, from `INFO commandstats`: the work waiters cause),
//! and how evenly the acquisitions spread over the tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redmutex::Redlock;

use crate::harness::{Json, percentile};

/// Tasks contending for the one name.
pub const TASKS: usize = 8;

/// How long a holder keeps the lock: time for every waiter to be waiting.
pub const HOLD: Duration = Duration::from_millis(1);

/// How long a task that unlocked waits at most for another task to take the lock.
const STEP_BACK: Duration = Duration::from_secs(2);

/// The commands clients send, as `INFO commandstats` names them. Commands the scripts run inside
/// (GET, DEL, PUBLISH) are not sent over the network and are left out.
const SENT: [&str; 6] = [
    "set",
    "evalsha",
    "eval",
    "exists",
    "subscribe",
    "unsubscribe",
];

/// How waiters wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// The retry delay only.
    Polling,
    /// `with_wake_on_release(true)`, the retry delay as the fallback.
    Wake,
}

/// How many `Redlock` clients the tasks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// All 8 tasks share one client (one process).
    Shared,
    /// Each task has its own client and connections (8 processes).
    PerTask,
}

/// Every combination, in table order.
pub const ROWS: [(Waiting, Clients); 4] = [
    (Waiting::Polling, Clients::Shared),
    (Waiting::Wake, Clients::Shared),
    (Waiting::Polling, Clients::PerTask),
    (Waiting::Wake, Clients::PerTask),
];

pub fn label(waiting: Waiting, clients: Clients) -> String {
    let waiting = match waiting {
        Waiting::Polling => "polling",
        Waiting::Wake => "wake-on-release",
    };
    let clients = match clients {
        Clients::Shared => "1 client",
        Clients::PerTask => "8 clients",
    };
    format!("handoff {waiting}, {clients}")
}

/// One measured row.
#[derive(Debug, Default)]
pub struct HandoffRow {
    pub label: String,
    pub secs: f64,
    /// Acquisitions inside the window.
    pub acquisitions: u64,
    pub per_s: f64,
    pub handoff_p50_ms: Option<f64>,
    pub handoff_p99_ms: Option<f64>,
    pub handoff_mean_ms: Option<f64>,
    /// Commands all nodes received in the window, per acquisition in the window.
    pub commands_per_acquisition: Option<f64>,
    /// Fewest and most acquisitions by one task, in the window.
    pub task_min: u64,
    pub task_max: u64,
    /// Two tasks held the lock at once (must stay 0).
    pub violations: u64,
    pub error: Option<String>,
}

impl HandoffRow {
    pub fn to_json(&self, run: u64) -> String {
        Json::object(&[
            ("run", Json::Num(run as f64)),
            ("kind", Json::Str("handoff".into())),
            ("contender", Json::Str(self.label.clone())),
            ("tasks", Json::Num(TASKS as f64)),
            ("secs", Json::Num(self.secs)),
            ("acquisitions", Json::Num(self.acquisitions as f64)),
            ("per_s", Json::Num(self.per_s)),
            ("handoff_p50_ms", Json::opt_num(self.handoff_p50_ms)),
            ("handoff_p99_ms", Json::opt_num(self.handoff_p99_ms)),
            ("handoff_mean_ms", Json::opt_num(self.handoff_mean_ms)),
            (
                "commands_per_acquisition",
                Json::opt_num(self.commands_per_acquisition),
            ),
            ("task_min", Json::Num(self.task_min as f64)),
            ("task_max", Json::Num(self.task_max as f64)),
            ("violations", Json::Num(self.violations as f64)),
            ("error", self.error.clone().map_or(Json::Null, Json::Str)),
        ])
    }
}

/// The commands all nodes received so far (see [`SENT`]).
fn commands(cluster: &testenv::Cluster) -> u64 {
    cluster
        .nodes()
        .iter()
        .map(|node| SENT.iter().map(|command| node.calls(command)).sum::<u64>())
        .sum()
}

/// What the tasks share: the in-process check of mutual exclusion and the hand-off clock.
struct Shared {
    base: Instant,
    start: Instant,
    deadline: Instant,
    held: AtomicBool,
    /// When the last holder started its unlock, in ns since `base`, plus one (0: none yet).
    released_at: AtomicU64,
    violations: AtomicU64,
    /// Counts acquisitions: what a task that unlocked waits on before it locks again.
    acquired: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[derive(Default)]
struct TaskStats {
    acquisitions: u64,
    handoffs_ns: Vec<u64>,
    error: Option<String>,
}

/// Runs one row on a multi-thread runtime: `warmup`, then the measured `window`.
pub fn run(
    cluster: &testenv::Cluster,
    urls: &[String],
    (waiting, clients): (Waiting, Clients),
    warmup: Duration,
    window: Duration,
    name: String,
) -> HandoffRow {
    let mut row = HandoffRow {
        label: label(waiting, clients),
        secs: window.as_secs_f64(),
        ..HandoffRow::default()
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            row.error = Some(error.to_string());
            return row;
        }
    };
    runtime.block_on(async {
        let mut redlocks = Vec::new();
        for _ in 0..match clients {
            Clients::Shared => 1,
            Clients::PerTask => TASKS,
        } {
            match Redlock::connect(urls).await {
                Ok(redlock) => redlocks.push(redlock),
                Err(error) => {
                    row.error = Some(error.to_string());
                    return;
                }
            }
        }
        let base = Instant::now();
        let shared = Arc::new(Shared {
            base,
            start: base + warmup,
            deadline: base + warmup + window,
            held: AtomicBool::new(false),
            released_at: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            acquired: tokio::sync::watch::Sender::new(0),
        });
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let mutex = redlocks[task % redlocks.len()]
                    .new_mutex(name.clone())
                    .with_wake_on_release(waiting == Waiting::Wake);
                tokio::spawn(task_loop(mutex, Arc::clone(&shared)))
            })
            .collect();
        tokio::time::sleep_until(shared.start.into()).await;
        let before = tokio::task::block_in_place(|| commands(cluster));
        tokio::time::sleep_until(shared.deadline.into()).await;
        let after = tokio::task::block_in_place(|| commands(cluster));

        let mut handoffs = Vec::new();
        let mut per_task = Vec::new();
        for task in tasks {
            match task.await {
                Ok(stats) => {
                    if let Some(error) = stats.error {
                        row.error = Some(error);
                    }
                    per_task.push(stats.acquisitions);
                    handoffs.extend(stats.handoffs_ns);
                }
                Err(error) => row.error = Some(format!("a task failed: {error}")),
            }
        }
        handoffs.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        row.acquisitions = per_task.iter().sum();
        row.per_s = row.acquisitions as f64 / window.as_secs_f64();
        row.handoff_p50_ms = percentile(&handoffs, 0.50).map(ms);
        row.handoff_p99_ms = percentile(&handoffs, 0.99).map(ms);
        row.handoff_mean_ms = (!handoffs.is_empty())
            .then(|| ms(handoffs.iter().sum::<u64>()) / handoffs.len() as f64);
        row.commands_per_acquisition = (row.acquisitions > 0)
            .then(|| after.saturating_sub(before) as f64 / row.acquisitions as f64);
        row.task_min = per_task.iter().copied().min().unwrap_or(0);
        row.task_max = per_task.iter().copied().max().unwrap_or(0);
        row.violations = shared.violations.load(Ordering::Relaxed);
    });
    row
}

/// Lock, check and count, unlock, until the deadline. A hand-off counts when the lock returned
/// inside the window.
async fn task_loop(mutex: redmutex::Mutex, shared: Arc<Shared>) -> TaskStats {
    let mut stats = TaskStats::default();
    while Instant::now() < shared.deadline {
        let lock = match mutex.lock().await {
            Ok(lock) => lock,
            // The tries ran out while others held the lock (with polling, 32 tries last about
            // 5 s): that is waiting too, go on.
            Err(redmutex::Error::Taken { .. } | redmutex::Error::NoQuorum { .. }) => continue,
            Err(error) => {
                stats.error = Some(error.to_string());
                return stats;
            }
        };
        let acquired = Instant::now();
        if shared.held.swap(true, Ordering::AcqRel) {
            shared.violations.fetch_add(1, Ordering::Relaxed);
        }
        let released = shared.released_at.swap(0, Ordering::AcqRel);
        if (shared.start..shared.deadline).contains(&acquired) {
            stats.acquisitions += 1;
            if released != 0 {
                stats
                    .handoffs_ns
                    .push(shared.ns(acquired).saturating_sub(released - 1));
            }
        }
        shared.acquired.send_modify(|count| *count += 1);
        // Subscribed before the unlock, so the next acquisition cannot be missed.
        let mut next = shared.acquired.subscribe();
        tokio::time::sleep(HOLD).await;
        shared.held.store(false, Ordering::Release);
        shared
            .released_at
            .store(shared.ns(Instant::now()) + 1, Ordering::Release);
        if let Err(error) = lock.unlock().await {
            stats.error = Some(error.to_string());
            return stats;
        }
        let until = shared.deadline.min(Instant::now() + STEP_BACK);
        let _ = tokio::time::timeout_at(until.into(), next.changed()).await;
    }
    stats
}

/// Prints the rows as a table, with the polling row of the same client count as the reference.
pub fn print_table(rows: &[HandoffRow]) {
    println!();
    println!(
        "hand-off: {TASKS} tasks on one name, lock + {} ms hold + unlock, then step back until \
         another task has the lock; default settings (8 s expiry, retry delay 50-250 ms), multi-thread runtime; hand-off = one holder starting its \
         unlock -> the next holder's lock() returning; commands = SET/EVALSHA/EVAL/EXISTS/SUBSCRIBE/\
         UNSUBSCRIBE received by all nodes, per acquisition",
        HOLD.as_millis()
    );
    println!();
    println!(
        "{:<34} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>5}",
        "", "acq/s", "p50 ms", "p99 ms", "mean ms", "cmds/acq", "task min", "task max", "viol"
    );
    for row in rows {
        if let Some(error) = &row.error {
            println!("{:<34} error: {error}", row.label);
            continue;
        }
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        println!(
            "{:<34} {:>8.1} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>5}",
            row.label,
            row.per_s,
            opt(row.handoff_p50_ms),
            opt(row.handoff_p99_ms),
            opt(row.handoff_mean_ms),
            opt(row.commands_per_acquisition),
            row.task_min,
            row.task_max,
            row.violations,
        );
    }
}
