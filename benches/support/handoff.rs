//! The hand-off benchmark of the ways of waiting: tasks on one name, each locking, holding the
//! lock for [`HOLD`] while it checks mutual exclusion in process memory, and unlocking; then it
//! steps back until another task has the lock before it calls `lock()` again. So every hand-off
//! goes from the holder to one of the tasks already waiting (otherwise the task that just
//! unlocked takes the lock straight back, and no hand-off ever waits). Default settings (8 s
//! expiry, retry delays of 50 to 250 ms), polling, with `with_wake_on_release(true)` or with
//! `with_fair(true)`, or with nothing set but a 5 s retry delay (`default-5s`: woken by release
//! notices, the default since issue 42, so that a hand-off far below 5 s is the notices' doing);
//! 8 tasks sharing one `Redlock`, 8 tasks with a `Redlock` each (as 8 processes would), or 8
//! `Redlock` clients with 8 tasks each (64 waiters).
//!
//! Per row: acquisitions per second; the hand-off latency, from the moment a holder calls
//! `unlock()` (its release goes out in that call) to the moment the next holder's `lock()`
//! returns, the same clock points in every mode; the commands the nodes received per
//! acquisition (from `INFO commandstats`: see `commandstats::Counts`); how evenly the acquisitions spread over
//! the tasks; and the share of acquisitions served in join order (see [`JOIN_ALLOWANCES`]).
//!
//! Each row's measured time is split into rounds interleaved with the other rows' (see
//! `benches/compare.rs`); a row pools the samples of its rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redmutex::Redlock;

use crate::commandstats::{self, Counts};
use crate::harness::{Json, percentile};

/// How a waiter's turn comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// The retry delay only.
    Polling,
    /// `with_wake_on_release(true)`, the retry delay as the fallback.
    Wake,
    /// `with_fair(true)`: one line across clients, each release handing the lock to its head.
    Fair,
    /// Nothing set but `with_retry_delay(5 s)`: the default way of waiting, with a fallback too
    /// slow to account for a quick hand-off.
    Default5s,
}

impl Waiting {
    fn name(self) -> &'static str {
        match self {
            Waiting::Polling => "polling",
            Waiting::Wake => "wake-on-release",
            Waiting::Fair => "fair",
            Waiting::Default5s => "default-5s",
        }
    }
}

/// One row: how the tasks wait, how many `Redlock` clients they use, how many tasks each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub waiting: Waiting,
    pub clients: usize,
    pub tasks_per_client: usize,
    /// Runs only when `BENCH_ONLY` is set and selects it: the fair rows and those of several
    /// clients with several tasks each, so that a full default run keeps its length.
    pub opt_in: bool,
}

impl Setup {
    const fn new(waiting: Waiting, clients: usize, tasks_per_client: usize) -> Setup {
        Setup {
            waiting,
            clients,
            tasks_per_client,
            opt_in: matches!(waiting, Waiting::Fair | Waiting::Default5s)
                || (clients > 1 && tasks_per_client > 1),
        }
    }

    fn tasks(self) -> usize {
        self.clients * self.tasks_per_client
    }

    /// The row's name in the table, the JSON lines and `BENCH_ONLY`.
    pub fn label(self) -> String {
        let shape = match (self.clients, self.tasks_per_client) {
            // The names of the rows that came first, kept so that runs compare by name.
            (1, _) => "1 client".to_owned(),
            (clients, 1) => format!("{clients} clients"),
            (clients, tasks) => format!("{clients} clients x {tasks} tasks"),
        };
        format!("handoff {}, {shape}", self.waiting.name())
    }
}

/// Every row, in table order: per shape, polling, then wake-up on release (set, then by
/// default with a 5 s retry delay), then fair.
pub const ROWS: [Setup; 12] = [
    Setup::new(Waiting::Polling, 1, 8),
    Setup::new(Waiting::Wake, 1, 8),
    Setup::new(Waiting::Default5s, 1, 8),
    Setup::new(Waiting::Fair, 1, 8),
    Setup::new(Waiting::Polling, 8, 1),
    Setup::new(Waiting::Wake, 8, 1),
    Setup::new(Waiting::Default5s, 8, 1),
    Setup::new(Waiting::Fair, 8, 1),
    Setup::new(Waiting::Polling, 8, 8),
    Setup::new(Waiting::Wake, 8, 8),
    Setup::new(Waiting::Default5s, 8, 8),
    Setup::new(Waiting::Fair, 8, 8),
];

/// The retry delay of the `default-5s` rows.
const DEFAULT_5S_DELAY: Duration = Duration::from_secs(5);

/// How long a holder keeps the lock: time for every waiter to be waiting.
pub const HOLD: Duration = Duration::from_millis(1);

/// How long a task that unlocked waits at most for another task to take the lock.
const STEP_BACK: Duration = Duration::from_secs(2);

/// A stretch without an acquisition this long is a stall: waiters are always in line, and even a
/// polling one retries within 250 ms (the default retry delay's upper end).
const STALL: Duration = Duration::from_millis(500);

/// Waiter W *joined before* waiter V if W's `lock()` call began more than the allowance before
/// V's did. Join order is defined from outside the library, by when the calls began: a waiter
/// enters a line (its client's, or the fair line on the nodes) with its first attempt, about one
/// round trip to the nodes after its call began, so two calls that began closer together than
/// that may enter in either order, and neither has a claim to go first. Every call begins while
/// another task holds the lock (see [`STEP_BACK`]), so every caller is a waiter. The order is
/// counted at three allowances, from about the slow end of a round trip to local nodes on a
/// loaded machine to far above it, so that a failure at the smallest that vanishes at the larger
/// ones points at the approximation, and one at every allowance at the line.
///
/// An acquisition by V is *out of order* if some W that joined before V was still waiting (its
/// `lock()` had not returned, with the lock or an error) when V's `lock()` returned. Every waiter
/// here stays live: none crashes, and one whose `lock()` gave up counts as waiting until then.
pub const JOIN_ALLOWANCES: [Duration; 3] = [
    Duration::from_millis(1),
    Duration::from_millis(5),
    Duration::from_millis(25),
];

/// Summing rounds into a row.
impl Counts {
    fn add(&mut self, other: &Counts) {
        self.sent += other.sent;
        self.in_scripts += other.in_scripts;
        for (name, calls) in &other.by_name {
            *self.by_name.entry(name.clone()).or_default() += calls;
        }
    }
}

/// One `lock()` call: when it began and returned (ns since the round's base), and whether it
/// returned the lock.
#[derive(Clone, Copy, Debug)]
struct Call {
    begin: u64,
    end: u64,
    acquired: bool,
}

/// Of the acquisitions among `calls` that `counted` selects, how many were served in join order
/// at each of [`JOIN_ALLOWANCES`], and how many there were.
fn join_order(
    calls: &mut [Call],
    counted: impl Fn(&Call) -> bool,
) -> ([u64; JOIN_ALLOWANCES.len()], u64) {
    calls.sort_unstable_by_key(|call| call.begin);
    // latest_end[i]: the latest return among the calls that began first, up to call i.
    let latest_end: Vec<u64> = calls
        .iter()
        .scan(0, |latest, call| {
            *latest = (*latest).max(call.end);
            Some(*latest)
        })
        .collect();
    let allowances = JOIN_ALLOWANCES.map(|a| u64::try_from(a.as_nanos()).unwrap_or(u64::MAX));
    let (mut in_order, mut total) = ([0; JOIN_ALLOWANCES.len()], 0);
    for call in calls.iter().filter(|call| call.acquired && counted(call)) {
        total += 1;
        for (count, allowance) in in_order.iter_mut().zip(allowances) {
            // The calls that joined before this one: those that began more than the allowance
            // earlier, a prefix of the calls in order of their beginning.
            let joined_before =
                calls.partition_point(|w| w.begin.saturating_add(allowance) < call.begin);
            let overtaken = joined_before > 0 && latest_end[joined_before - 1] > call.end;
            *count += u64::from(!overtaken);
        }
    }
    (in_order, total)
}

/// What one round of a row measured.
#[derive(Debug, Default)]
pub struct Round {
    secs: f64,
    /// Acquisitions inside the window, per task.
    per_task: Vec<u64>,
    handoffs_ns: Vec<u64>,
    /// `lock()` calls that returned an error inside the window (tries ran out).
    lock_failures: u64,
    counts: Counts,
    /// Acquisitions inside the window served in join order, per allowance, and all of them.
    in_order: [u64; JOIN_ALLOWANCES.len()],
    ordered: u64,
    /// The longest stretch of the window without an acquisition, in ns.
    longest_gap_ns: u64,
    /// Stretches of the window longer than [`STALL`] without an acquisition.
    stalls: u64,
    violations: u64,
    error: Option<String>,
}

/// One row: its rounds pooled.
#[derive(Debug, Default)]
pub struct HandoffRow {
    pub label: String,
    pub tasks: usize,
    pub rounds: usize,
    /// Measured seconds, all rounds together.
    pub secs: f64,
    /// Acquisitions inside the windows.
    pub acquisitions: u64,
    pub per_s: f64,
    /// Percentiles and mean of every hand-off of every round.
    pub handoff_p50_ms: Option<f64>,
    pub handoff_p95_ms: Option<f64>,
    pub handoff_p99_ms: Option<f64>,
    pub handoff_mean_ms: Option<f64>,
    /// Commands the clients sent to all nodes, per acquisition.
    pub commands_per_acquisition: Option<f64>,
    /// Every command the nodes ran (sent, and run inside scripts), per acquisition.
    pub all_per_acquisition: Option<f64>,
    pub counts: Counts,
    /// The share of acquisitions served in join order, in percent, per allowance.
    pub in_order_pct: [Option<f64>; JOIN_ALLOWANCES.len()],
    /// Acquisitions served out of join order, per allowance.
    pub out_of_order: [u64; JOIN_ALLOWANCES.len()],
    /// The longest stretch of one round's window in which nobody acquired the lock: a lock
    /// nobody used shows here, where the hand-off percentiles (which need a release) miss it.
    pub longest_gap_ms: f64,
    /// Stretches of a round's window longer than [`STALL`] without an acquisition.
    pub stalls: u64,
    /// Fewest and most acquisitions by one task in one round.
    pub task_min: u64,
    pub task_max: u64,
    pub lock_failures: u64,
    /// Two tasks held the lock at once (must stay 0).
    pub violations: u64,
    pub error: Option<String>,
}

impl HandoffRow {
    /// Pools the rounds of `setup`'s row.
    pub fn merge(setup: Setup, rounds: Vec<Round>) -> HandoffRow {
        let mut row = HandoffRow {
            label: setup.label(),
            tasks: setup.tasks(),
            rounds: rounds.len(),
            ..HandoffRow::default()
        };
        let mut handoffs = Vec::new();
        let mut ordered = 0;
        for (i, round) in rounds.into_iter().enumerate() {
            if row.error.is_none()
                && let Some(error) = round.error
            {
                row.error = Some(format!("round {}: {error}", i + 1));
            }
            row.secs += round.secs;
            row.acquisitions += round.per_task.iter().sum::<u64>();
            let min = round.per_task.iter().copied().min().unwrap_or(0);
            let max = round.per_task.iter().copied().max().unwrap_or(0);
            row.task_min = if i == 0 { min } else { row.task_min.min(min) };
            row.task_max = row.task_max.max(max);
            handoffs.extend(round.handoffs_ns);
            row.lock_failures += round.lock_failures;
            row.counts.add(&round.counts);
            for (out, in_order) in row.out_of_order.iter_mut().zip(round.in_order) {
                *out += round.ordered - in_order;
            }
            ordered += round.ordered;
            row.violations += round.violations;
            row.longest_gap_ms = row.longest_gap_ms.max(round.longest_gap_ns as f64 / 1e6);
            row.stalls += round.stalls;
        }
        handoffs.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        let per_acquisition =
            |n: u64| (row.acquisitions > 0).then(|| n as f64 / row.acquisitions as f64);
        row.per_s = if row.secs > 0.0 {
            row.acquisitions as f64 / row.secs
        } else {
            0.0
        };
        row.handoff_p50_ms = percentile(&handoffs, 0.50).map(ms);
        row.handoff_p95_ms = percentile(&handoffs, 0.95).map(ms);
        row.handoff_p99_ms = percentile(&handoffs, 0.99).map(ms);
        row.handoff_mean_ms = (!handoffs.is_empty())
            .then(|| ms(handoffs.iter().sum::<u64>()) / handoffs.len() as f64);
        row.commands_per_acquisition = per_acquisition(row.counts.sent);
        row.all_per_acquisition = per_acquisition(row.counts.sent + row.counts.in_scripts);
        row.in_order_pct = row
            .out_of_order
            .map(|out| (ordered > 0).then(|| 100.0 * (ordered - out) as f64 / ordered as f64));
        row
    }

    /// Each command's calls per acquisition, most first: where the commands go.
    pub fn breakdown(&self) -> String {
        let Some(acquisitions) = (self.acquisitions > 0).then_some(self.acquisitions as f64) else {
            return "-".into();
        };
        let mut by_name: Vec<_> = self.counts.by_name.iter().collect();
        by_name.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        by_name
            .into_iter()
            .map(|(name, &calls)| format!("{name} {:.2}", calls as f64 / acquisitions))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn to_json(&self, run: u64) -> String {
        let by_name = self
            .counts
            .by_name
            .iter()
            .map(|(name, calls)| format!("{name}={calls}"))
            .collect::<Vec<_>>()
            .join(" ");
        let mut fields = vec![
            ("run", Json::Num(run as f64)),
            ("kind", Json::Str("handoff".into())),
            ("contender", Json::Str(self.label.clone())),
            ("tasks", Json::Num(self.tasks as f64)),
            ("rounds", Json::Num(self.rounds as f64)),
            ("secs", Json::Num(self.secs)),
            ("acquisitions", Json::Num(self.acquisitions as f64)),
            ("per_s", Json::Num(self.per_s)),
            ("handoff_p50_ms", Json::opt_num(self.handoff_p50_ms)),
            ("handoff_p95_ms", Json::opt_num(self.handoff_p95_ms)),
            ("handoff_p99_ms", Json::opt_num(self.handoff_p99_ms)),
            ("handoff_mean_ms", Json::opt_num(self.handoff_mean_ms)),
            (
                "commands_per_acquisition",
                Json::opt_num(self.commands_per_acquisition),
            ),
            (
                "all_commands_per_acquisition",
                Json::opt_num(self.all_per_acquisition),
            ),
            ("commands", Json::Str(by_name)),
        ];
        // In the order of JOIN_ALLOWANCES.
        for (i, name) in [
            ("in_order_pct_1ms", "out_of_order_1ms"),
            ("in_order_pct_5ms", "out_of_order_5ms"),
            ("in_order_pct_25ms", "out_of_order_25ms"),
        ]
        .into_iter()
        .enumerate()
        {
            fields.push((name.0, Json::opt_num(self.in_order_pct[i])));
            fields.push((name.1, Json::Num(self.out_of_order[i] as f64)));
        }
        fields.extend([
            ("longest_gap_ms", Json::Num(self.longest_gap_ms)),
            ("stalls", Json::Num(self.stalls as f64)),
            ("task_min", Json::Num(self.task_min as f64)),
            ("task_max", Json::Num(self.task_max as f64)),
            ("lock_failures", Json::Num(self.lock_failures as f64)),
            ("violations", Json::Num(self.violations as f64)),
            ("error", self.error.clone().map_or(Json::Null, Json::Str)),
        ]);
        Json::object(&fields)
    }
}

/// What the tasks of a round share: the in-process check of mutual exclusion and the hand-off
/// clock.
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

    fn in_window(&self, ns: u64) -> bool {
        (self.ns(self.start)..self.ns(self.deadline)).contains(&ns)
    }
}

#[derive(Default)]
struct TaskStats {
    acquisitions: u64,
    handoffs_ns: Vec<u64>,
    lock_failures: u64,
    calls: Vec<Call>,
    error: Option<String>,
}

/// Runs one round of `setup`'s row on a multi-thread runtime, on lock name `name`: `warmup`,
/// then the measured `window`.
pub fn run_round(
    cluster: &redmutex_testenv::Cluster,
    urls: &[String],
    setup: Setup,
    warmup: Duration,
    window: Duration,
    name: String,
) -> Round {
    let mut round = Round {
        secs: window.as_secs_f64(),
        ..Round::default()
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            round.error = Some(error.to_string());
            return round;
        }
    };
    // One connection per node, made before the window, so that opening it counts for nothing.
    let mut probe: Vec<redis::Connection> = cluster
        .nodes()
        .iter()
        .map(|node| node.connection())
        .collect();
    runtime.block_on(async {
        let mut redlocks = Vec::new();
        for _ in 0..setup.clients {
            match Redlock::connect(urls).await {
                Ok(redlock) => redlocks.push(redlock),
                Err(error) => {
                    round.error = Some(error.to_string());
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
        let tasks: Vec<_> = (0..setup.tasks())
            .map(|task| {
                let mutex = redlocks[task % redlocks.len()].new_mutex(name.clone());
                let mutex = match setup.waiting {
                    Waiting::Polling => mutex.with_wake_on_release(false),
                    Waiting::Wake => mutex.with_wake_on_release(true),
                    Waiting::Fair => mutex.with_fair(true),
                    Waiting::Default5s => mutex.with_retry_delay(DEFAULT_5S_DELAY),
                };
                tokio::spawn(task_loop(mutex, Arc::clone(&shared)))
            })
            .collect();
        tokio::time::sleep_until(shared.start.into()).await;
        let before = tokio::task::block_in_place(|| commandstats::read(&mut probe));
        tokio::time::sleep_until(shared.deadline.into()).await;
        let after = tokio::task::block_in_place(|| commandstats::read(&mut probe));
        match before.and_then(|before| Ok((before, after?))) {
            Ok((before, after)) => {
                let fair = setup.waiting == Waiting::Fair;
                round.counts = Counts::between(&before, &after, fair);
            }
            Err(error) => round.error = Some(error),
        }

        let mut calls = Vec::new();
        for task in tasks {
            match task.await {
                Ok(stats) => {
                    if let Some(error) = stats.error {
                        round.error = Some(error);
                    }
                    round.per_task.push(stats.acquisitions);
                    round.handoffs_ns.extend(stats.handoffs_ns);
                    round.lock_failures += stats.lock_failures;
                    calls.extend(stats.calls);
                }
                Err(error) => round.error = Some(format!("a task failed: {error}")),
            }
        }
        let (start, deadline) = (shared.ns(shared.start), shared.ns(shared.deadline));
        let mut acquired: Vec<u64> = calls
            .iter()
            .filter(|call| call.acquired && shared.in_window(call.end))
            .map(|call| call.end)
            .collect();
        acquired.sort_unstable();
        let gaps: Vec<u64> = std::iter::once(start)
            .chain(acquired.iter().copied())
            .zip(acquired.iter().copied().chain(std::iter::once(deadline)))
            .map(|(from, to)| to.saturating_sub(from))
            .collect();
        round.longest_gap_ns = gaps.iter().copied().max().unwrap_or(0);
        let stall = u64::try_from(STALL.as_nanos()).unwrap_or(u64::MAX);
        round.stalls = gaps.iter().filter(|&&gap| gap > stall).count() as u64;
        (round.in_order, round.ordered) = join_order(&mut calls, |call| shared.in_window(call.end));
        round.violations = shared.violations.load(Ordering::Relaxed);
    });
    round
}

/// Lock, check, hold, unlock, step back, until the deadline. An acquisition counts when its
/// `lock()` returned inside the window; every call is recorded for the join order, those of the
/// warm-up and after the window too (a waiter that joined then can still be overtaken).
async fn task_loop(mutex: redmutex::Mutex, shared: Arc<Shared>) -> TaskStats {
    let mut stats = TaskStats::default();
    while Instant::now() < shared.deadline {
        let begin = shared.ns(Instant::now());
        let result = mutex.lock().await;
        let acquired = Instant::now();
        let end = shared.ns(acquired);
        stats.calls.push(Call {
            begin,
            end,
            acquired: result.is_ok(),
        });
        let lock = match result {
            Ok(lock) => lock,
            // The tries ran out while others held the lock (with polling, 32 tries last about
            // 5 s): that is waiting too, go on.
            Err(redmutex::Error::Taken { .. } | redmutex::Error::NoQuorum { .. }) => {
                stats.lock_failures += u64::from(shared.in_window(end));
                continue;
            }
            Err(error) => {
                stats.error = Some(error.to_string());
                return stats;
            }
        };
        if shared.held.swap(true, Ordering::AcqRel) {
            shared.violations.fetch_add(1, Ordering::Relaxed);
        }
        let released = shared.released_at.swap(0, Ordering::AcqRel);
        if shared.in_window(end) {
            stats.acquisitions += 1;
            if released != 0 {
                stats.handoffs_ns.push(end.saturating_sub(released - 1));
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

/// Prints the rows as a table, then where each row's commands go.
pub fn print_table(rows: &[HandoffRow]) {
    println!();
    println!(
        "hand-off: tasks on one name, lock + {} ms hold + unlock, then step back until another \
         task has the lock; default settings (8 s expiry, retry delay 50-250 ms), multi-thread \
         runtime per round; hand-off = a holder calling unlock() -> the next holder's lock() \
         returning (percentiles of all rounds' hand-offs); sent = commands clients sent to all \
         nodes, all = those plus the commands scripts ran on them, per acquisition (INFO \
         commandstats); in order = acquisitions that no waiter whose lock() began more than \
         1 / 5 / 25 ms earlier was still waiting for; gap = the longest stretch of a round's \
         window without an acquisition, stalls = stretches longer than {} ms; min/max = acquisitions of one task in one round",
        HOLD.as_millis(),
        STALL.as_millis(),
    );
    println!();
    println!(
        "{:<44} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>21} {:>6} {:>6} {:>4} {:>4} {:>5} {:>4}",
        "",
        "acq/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "mean",
        "sent",
        "all",
        "in order 1/5/25 ms %",
        "gap ms",
        "stalls",
        "min",
        "max",
        "fails",
        "viol"
    );
    for row in rows {
        if let Some(error) = &row.error {
            println!("{:<44} error: {error}", row.label);
            continue;
        }
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        let order = row
            .in_order_pct
            .map(|v| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}")))
            .join("/");
        println!(
            "{:<44} {:>7.1} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>21} {:>6.0} {:>6} {:>4} {:>4} {:>5} {:>4}",
            row.label,
            row.per_s,
            opt(row.handoff_p50_ms),
            opt(row.handoff_p95_ms),
            opt(row.handoff_p99_ms),
            opt(row.handoff_mean_ms),
            opt(row.commands_per_acquisition),
            opt(row.all_per_acquisition),
            order,
            row.longest_gap_ms,
            row.stalls,
            row.task_min,
            row.task_max,
            row.lock_failures,
            row.violations,
        );
    }
    println!();
    println!(
        "hand-off commands per acquisition, by name (all nodes, sent and run inside scripts):"
    );
    for row in rows.iter().filter(|row| row.error.is_none()) {
        println!("  {:<44} {}", row.label, row.breakdown());
    }
}
