//! The measuring half of the comparison benchmark, shared word for word by `benches/compare.rs`
//! and the rslock peer (`peers/rslock-bench`), so every contender is driven, timed and reported by
//! the same code: the workloads, the task loop, percentiles, CPU time, and the JSON line format.
//!
//! Depends on std and tokio only (the peer crate has no other dependency in common with redmutex).

// Each of the two crates that include this file uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nodes every contender locks on.
pub const NODES: usize = 5;

/// Expiry of every lock in the cycle workloads, for every contender: redmutex's default.
pub const EXPIRY: Duration = Duration::from_secs(8);

/// Attempts per `lock()` call for the contenders that bound them (redmutex's default).
pub const TRIES: u32 = 32;

/// Which tokio runtime drives the tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `new_current_thread()`: every task and every connection driver on one thread.
    Current,
    /// `new_multi_thread()` with one worker per core (2 here).
    Multi,
}

impl Flavor {
    /// Both flavors, in run order.
    pub const ALL: [Flavor; 2] = [Flavor::Current, Flavor::Multi];

    /// The name used in the table, the JSON lines and on the peer's command line.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Current => "current-thread",
            Flavor::Multi => "multi-thread",
        }
    }

    /// The inverse of [`name`](Flavor::name).
    pub fn parse(text: &str) -> Result<Flavor, String> {
        Flavor::ALL
            .into_iter()
            .find(|f| f.name() == text)
            .ok_or_else(|| format!("unknown runtime {text:?}"))
    }

    /// A fresh runtime of this flavor, with I/O and timers.
    pub fn runtime(self) -> Result<tokio::runtime::Runtime, String> {
        let mut builder = match self {
            Flavor::Current => tokio::runtime::Builder::new_current_thread(),
            Flavor::Multi => tokio::runtime::Builder::new_multi_thread(),
        };
        builder
            .enable_all()
            .build()
            .map_err(|e| format!("building a {} runtime: {e}", self.name()))
    }
}

/// What the tasks do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// One task locking and unlocking its own name.
    Uncontended1,
    /// 32 tasks, each locking and unlocking its own name.
    Uncontended32,
    /// 8 tasks, each locking and unlocking its own name (the zone rows only: not in
    /// [`ALL`](Workload::ALL)).
    Uncontended8,
    /// 8 tasks on one name: lock, increment a counter in process memory, unlock.
    Contended8,
}

impl Workload {
    /// All workloads, in run order.
    pub const ALL: [Workload; 3] = [
        Workload::Uncontended1,
        Workload::Uncontended32,
        Workload::Contended8,
    ];

    /// Every workload, [`ALL`](Workload::ALL) and those only some rows run.
    pub const ANY: [Workload; 4] = [
        Workload::Uncontended1,
        Workload::Uncontended32,
        Workload::Contended8,
        Workload::Uncontended8,
    ];

    /// The name used in the table, the JSON lines and on the peer's command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Uncontended1 => "uncontended-1",
            Workload::Uncontended8 => "uncontended-8",
            Workload::Uncontended32 => "uncontended-32",
            Workload::Contended8 => "contended-8",
        }
    }

    /// The inverse of [`name`](Workload::name).
    pub fn parse(text: &str) -> Result<Workload, String> {
        Workload::ANY
            .into_iter()
            .find(|w| w.name() == text)
            .ok_or_else(|| format!("unknown workload {text:?}"))
    }

    /// How many tasks run at once.
    pub fn tasks(self) -> usize {
        match self {
            Workload::Uncontended1 => 1,
            Workload::Uncontended8 => 8,
            Workload::Uncontended32 => 32,
            Workload::Contended8 => 8,
        }
    }

    /// Whether all tasks share one name.
    pub fn contended(self) -> bool {
        matches!(self, Workload::Contended8)
    }

    /// The lock name of each task: its own under `prefix`, or one shared name when contended.
    pub fn names(self, prefix: &str) -> Vec<String> {
        (0..self.tasks())
            .map(|task| {
                if self.contended() {
                    format!("{prefix}:shared")
                } else {
                    format!("{prefix}:task{task}")
                }
            })
            .collect()
    }
}

/// How long a row runs, and the retry delay every contender is configured with.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Cycles run before the measured window (connections, script caches, allocator warm).
    pub warmup: Duration,
    /// The measured window.
    pub measure: Duration,
    /// The delay between attempts on a taken lock.
    pub retry_delay: Duration,
}

/// One task's view of a lock client: lock one name, unlock it, repeatedly.
///
/// Failures are counted, never propagated: the harness calls `lock` again until it succeeds.
pub trait Contender: Send + 'static {
    /// Acquires the task's lock (with the contender's own retries); `false` if that failed.
    fn lock(&mut self) -> impl Future<Output = bool> + Send;
    /// Releases the lock the last successful `lock` acquired; `false` if the release failed.
    fn unlock(&mut self) -> impl Future<Output = bool> + Send;
    /// Called once after the last cycle, outside the measured window (drain calls in flight).
    fn finish(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Whether holders of one name may hold at once (readers of a read-write lock): then the
    /// contended workload does not check mutual exclusion, and measures no hand-off.
    fn shared(&self) -> bool {
        false
    }
}

/// Shared between the tasks of a contended row: the in-process checks around the lock.
struct CriticalSection {
    /// Set while a task believes it holds the lock; finding it set means mutual exclusion failed.
    held: AtomicBool,
    /// The protected counter.
    counter: AtomicU64,
    /// When the last holder started its unlock, in ns since the row's base instant, plus one
    /// (0 = nobody released since the last acquisition).
    released_at: AtomicU64,
}

#[derive(Default)]
struct TaskStats {
    latencies_ns: Vec<u64>,
    handoffs_ns: Vec<u64>,
    lock_failures: u64,
    unlock_failures: u64,
    violations: u64,
    gave_up: bool,
}

/// Builds a runtime of `flavor`, sets up one contender per task inside it, and measures the row.
///
/// `setup` receives the lock name of each task (see [`Workload::names`]).
pub fn run_row<C, S, F>(
    contender: &str,
    flavor: Flavor,
    workload: Workload,
    timing: Timing,
    prefix: &str,
    setup: S,
) -> Row
where
    C: Contender,
    S: FnOnce(Vec<String>) -> F,
    F: Future<Output = Result<Vec<C>, String>>,
{
    let mut row = Row::new(contender, flavor, workload, timing);
    let runtime = match flavor.runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            row.error = Some(error);
            return row;
        }
    };
    let names = workload.names(prefix);
    runtime.block_on(async {
        match setup(names).await {
            Ok(contenders) => drive(&mut row, workload, timing, contenders).await,
            Err(error) => row.error = Some(error),
        }
    });
    // Dropping the runtime closes the connections the contenders opened.
    drop(runtime);
    row
}

async fn drive<C: Contender>(
    row: &mut Row,
    workload: Workload,
    timing: Timing,
    contenders: Vec<C>,
) {
    let base = Instant::now();
    let start = base + timing.warmup;
    let deadline = start + timing.measure;
    let section = Arc::new(CriticalSection {
        held: AtomicBool::new(false),
        counter: AtomicU64::new(0),
        released_at: AtomicU64::new(0),
    });
    let shared = contenders.first().is_some_and(C::shared);
    let window = Window {
        base,
        start,
        deadline,
        contended: workload.contended() && !shared,
    };
    let tasks: Vec<_> = contenders
        .into_iter()
        .map(|contender| tokio::spawn(task_loop(contender, Arc::clone(&section), window)))
        .collect();

    tokio::time::sleep_until(start.into()).await;
    let cpu_start = cpu_time();
    tokio::time::sleep_until(deadline.into()).await;
    let cpu_end = cpu_time();

    let mut stats = Vec::new();
    for task in tasks {
        match task.await {
            Ok(task_stats) => stats.push(task_stats),
            Err(error) => {
                row.error = Some(format!("a task failed: {error}"));
                return;
            }
        }
    }
    row.fill(&stats, timing.measure, cpu_start.zip(cpu_end));
}

#[derive(Clone, Copy)]
struct Window {
    base: Instant,
    start: Instant,
    deadline: Instant,
    contended: bool,
}

impl Window {
    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Cycles until the deadline. A cycle counts when it starts and ends inside the window; its
/// latency runs from the first `lock` call (retried lock calls included) to `unlock` returning.
async fn task_loop<C: Contender>(
    mut contender: C,
    section: Arc<CriticalSection>,
    window: Window,
) -> TaskStats {
    // Gives up on a lock that cannot be had (nodes gone) rather than spin forever.
    let give_up = window.deadline + Duration::from_secs(10);
    let mut stats = TaskStats {
        latencies_ns: Vec::with_capacity(1 << 16),
        ..TaskStats::default()
    };
    loop {
        let begin = Instant::now();
        if begin >= window.deadline {
            break;
        }
        let measured = begin >= window.start;
        let mut failures = 0;
        while !contender.lock().await {
            failures += 1;
            if Instant::now() > give_up {
                stats.gave_up = true;
                contender.finish().await;
                return stats;
            }
        }
        let mut handoff = None;
        if window.contended {
            let acquired = Instant::now();
            if section.held.swap(true, Ordering::AcqRel) {
                stats.violations += 1;
            }
            let released = section.released_at.swap(0, Ordering::AcqRel);
            if released != 0 {
                handoff = Some(window.ns(acquired).saturating_sub(released - 1));
            }
            section.counter.fetch_add(1, Ordering::Relaxed);
            section.held.store(false, Ordering::Release);
            section
                .released_at
                .store(window.ns(Instant::now()) + 1, Ordering::Release);
        }
        let unlocked = contender.unlock().await;
        let end = Instant::now();
        if measured && end <= window.deadline {
            stats.latencies_ns.push(window.ns(end) - window.ns(begin));
            stats.lock_failures += failures;
            stats.unlock_failures += u64::from(!unlocked);
            stats.handoffs_ns.extend(handoff);
        }
    }
    contender.finish().await;
    stats
}

/// Process CPU time (user, system; every thread) in nanoseconds, from `/proc/self/stat`.
///
/// `None` where procfs is missing. Resolution is one clock tick (10 ms at `CLK_TCK` = 100): about
/// 0.3 % of a 3 s window.
pub fn cpu_time() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain numbers.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ')' come field 3 (state) ...; utime and stime are fields 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ns = |ticks: u64| ticks * 1_000_000_000 / clock_ticks();
    Some((ns(utime), ns(stime)))
}

/// `getconf CLK_TCK`, asked once (100 when it cannot be asked).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(100)
    })
}

/// Resident set size of this process in KiB, from `/proc/self/status`.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The value at quantile `q` (0..=1) of sorted `values`, nearest rank.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The middle value, or the mean of the two middle values of an even count; `None` if empty.
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// How one ratio of a row to its baseline came out round by round (see [`Row::round_ratios`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The lowest round's ratio.
    pub min: f64,
    /// The median of the rounds' ratios: unlike the ratio of the totals, one disturbed round
    /// barely moves it.
    pub median: f64,
    /// The highest round's ratio.
    pub max: f64,
}

/// The per-round spread of each ratio a row has to its baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundRatios {
    /// Of `throughput_ratio`.
    pub throughput: Spread,
    /// Of `p50_ratio`.
    pub p50: Spread,
    /// Of `cpu_ratio`.
    pub cpu: Spread,
}

impl RoundRatios {
    /// From the rounds of a row and of its baseline, paired by round number; rounds with an
    /// error on either side are left out. `None` if no pair is left.
    pub fn of(rounds: &[Row], baseline: &[Row]) -> Option<RoundRatios> {
        let pairs: Vec<(&Row, &Row)> = rounds
            .iter()
            .zip(baseline)
            .filter(|(row, base)| row.error.is_none() && base.error.is_none())
            .collect();
        let spread = |value: fn(&Row) -> f64| {
            let ratios: Vec<f64> = pairs
                .iter()
                .filter_map(|(row, base)| {
                    let base = value(base);
                    (base > 0.0).then(|| value(row) / base)
                })
                .collect();
            Some(Spread {
                min: ratios.iter().copied().reduce(f64::min)?,
                median: median(ratios.iter().copied())?,
                max: ratios.iter().copied().reduce(f64::max)?,
            })
        };
        Some(RoundRatios {
            throughput: spread(|r| r.cycles_per_s)?,
            p50: spread(|r| r.p50_us)?,
            cpu: spread(|r| r.cpu_us_per_cycle)?,
        })
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// One measured row: one contender, one runtime flavor, one workload.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Which client, e.g. "redmutex default".
    pub contender: String,
    /// [`Flavor::name`].
    pub runtime: String,
    /// [`Workload::name`].
    pub workload: String,
    /// Concurrent tasks.
    pub tasks: u64,
    /// The measured window in seconds (of all rounds together).
    pub secs: f64,
    /// How many measured windows (rounds) were merged into this row; see [`Row::merge`].
    pub rounds: u64,
    /// The retry delay configured, in ms.
    pub retry_ms: f64,
    /// Lock+unlock cycles completed inside the window.
    pub cycles: u64,
    /// `cycles / secs`.
    pub cycles_per_s: f64,
    /// Median cycle latency (first lock call to unlock returned).
    pub p50_us: f64,
    /// 99th percentile cycle latency.
    pub p99_us: f64,
    /// Mean cycle latency.
    pub mean_us: f64,
    /// Process CPU time (all threads) in the window divided by cycles.
    pub cpu_us_per_cycle: f64,
    /// Process CPU time in the window divided by the window: cores kept busy by the client.
    pub cpu_cores: f64,
    /// The kernel's share of that CPU time (system / (user + system)).
    pub cpu_sys_share: f64,
    /// `lock()` calls that returned a failure (after the contender's own retries).
    pub lock_failures: u64,
    /// `unlock()` calls that reported a failure.
    pub unlock_failures: u64,
    /// Contended: median time from one holder starting its unlock to the next holder's lock
    /// returning.
    pub handoff_p50_us: Option<f64>,
    /// Contended: 99th percentile hand-off.
    pub handoff_p99_us: Option<f64>,
    /// Fewest cycles completed by one task.
    pub task_min: u64,
    /// Most cycles completed by one task.
    pub task_max: u64,
    /// Coefficient of variation of cycles per task (0 = perfectly even).
    pub task_cv: f64,
    /// Contended: acquisitions that found another task inside the critical section.
    pub violations: u64,
    /// The baseline the ratios compare against, e.g. "floor wait-all".
    pub vs: Option<String>,
    /// `cycles_per_s / baseline's` (higher is better).
    pub throughput_ratio: Option<f64>,
    /// `p50_us / baseline's` (lower is better).
    pub p50_ratio: Option<f64>,
    /// `p99_us / baseline's` (lower is better).
    pub p99_ratio: Option<f64>,
    /// `cpu_us_per_cycle / baseline's` (lower is better).
    pub cpu_ratio: Option<f64>,
    /// The same three ratios taken round by round (each round against the baseline's round of
    /// the same number, measured next to it): lowest, median and highest. How far one round's
    /// ratio strays shows how far to trust a difference between two runs' ratios.
    pub round_ratios: Option<RoundRatios>,
    /// Why the row has no numbers.
    pub error: Option<String>,
}

impl Row {
    fn new(contender: &str, flavor: Flavor, workload: Workload, timing: Timing) -> Row {
        Row {
            contender: contender.to_owned(),
            runtime: flavor.name().to_owned(),
            workload: workload.name().to_owned(),
            tasks: workload.tasks() as u64,
            secs: timing.measure.as_secs_f64(),
            rounds: 1,
            retry_ms: timing.retry_delay.as_secs_f64() * 1000.0,
            ..Row::default()
        }
    }

    /// A row that says why a contender could not run.
    pub fn failed(
        contender: &str,
        flavor: Flavor,
        workload: Workload,
        timing: Timing,
        error: String,
    ) -> Row {
        Row {
            error: Some(error),
            ..Row::new(contender, flavor, workload, timing)
        }
    }

    fn fill(
        &mut self,
        stats: &[TaskStats],
        window: Duration,
        cpu: Option<((u64, u64), (u64, u64))>,
    ) {
        let mut latencies: Vec<u64> = stats
            .iter()
            .flat_map(|s| s.latencies_ns.iter().copied())
            .collect();
        latencies.sort_unstable();
        let mut handoffs: Vec<u64> = stats
            .iter()
            .flat_map(|s| s.handoffs_ns.iter().copied())
            .collect();
        handoffs.sort_unstable();

        self.cycles = latencies.len() as u64;
        self.cycles_per_s = self.cycles as f64 / window.as_secs_f64();
        self.p50_us = percentile(&latencies, 0.50).map_or(0.0, micros);
        self.p99_us = percentile(&latencies, 0.99).map_or(0.0, micros);
        if !latencies.is_empty() {
            self.mean_us = micros(latencies.iter().sum::<u64>() / self.cycles);
        }
        if let Some(((user_start, sys_start), (user_end, sys_end))) = cpu {
            let user_ns = user_end.saturating_sub(user_start);
            let sys_ns = sys_end.saturating_sub(sys_start);
            let cpu_ns = user_ns + sys_ns;
            if cpu_ns > 0 {
                self.cpu_sys_share = sys_ns as f64 / cpu_ns as f64;
            }
            self.cpu_cores = cpu_ns as f64 / window.as_nanos() as f64;
            if self.cycles > 0 {
                self.cpu_us_per_cycle = micros(cpu_ns) / self.cycles as f64;
            }
        }
        self.lock_failures = stats.iter().map(|s| s.lock_failures).sum();
        self.unlock_failures = stats.iter().map(|s| s.unlock_failures).sum();
        self.violations = stats.iter().map(|s| s.violations).sum();
        self.handoff_p50_us = percentile(&handoffs, 0.50).map(micros);
        self.handoff_p99_us = percentile(&handoffs, 0.99).map(micros);

        let per_task: Vec<u64> = stats.iter().map(|s| s.latencies_ns.len() as u64).collect();
        self.task_min = per_task.iter().copied().min().unwrap_or(0);
        self.task_max = per_task.iter().copied().max().unwrap_or(0);
        let n = per_task.len() as f64;
        let mean = per_task.iter().sum::<u64>() as f64 / n;
        if mean > 0.0 {
            let variance = per_task
                .iter()
                .map(|&c| (c as f64 - mean).powi(2))
                .sum::<f64>()
                / n;
            self.task_cv = variance.sqrt() / mean;
        }
        if stats.iter().any(|s| s.gave_up) {
            self.error = Some("a task could not lock for 10 s after the window and gave up".into());
        }
    }

    /// One row from the rounds of one contender (same runtime and workload), each measured in a
    /// window of its own, so that the row covers every stretch of time the other contenders of
    /// its group were measured in:
    ///
    /// - `cycles`, `secs`, `lock_failures`, `unlock_failures`, `violations`: sums;
    ///   `cycles_per_s` = total cycles / total secs; `rounds`: how many rows were merged.
    /// - CPU: a round's CPU time is `cpu_cores * secs` (what its window measured);
    ///   `cpu_us_per_cycle` = total CPU time / total cycles (each round's value weighted by its
    ///   cycles), `cpu_cores` = total CPU time / total secs, `cpu_sys_share` weighted by each
    ///   round's CPU time.
    /// - `p50_us`, `p99_us`, `handoff_p50_us`, `handoff_p99_us`: the median of the rounds' values
    ///   (the mean of the two middle ones for an even count; the hand-off over the rounds that have
    ///   one); not a percentile of all cycles, since a row keeps its percentiles, not its
    ///   latencies. `mean_us`: the mean weighted by cycles, which is the mean of all cycles.
    /// - `task_min`, `task_max`: the least and the most cycles one task completed in one round;
    ///   `task_cv`: the mean of the rounds' values. The spread is per round, not over the sums.
    /// - `error`: the error of the first round that has one, prefixed with its round number;
    ///   ratios skip such a row (its numbers are not meaningful).
    ///
    /// Names and settings come from the first round; ratios are left unset. Each input is one
    /// round: merged rows do not merge again (a median of medians is not the median).
    pub fn merge(rounds: &[Row]) -> Row {
        debug_assert!(rounds.iter().all(|round| round.rounds == 1));
        let first = rounds.first().cloned().unwrap_or_default();
        let sum_u = |field: fn(&Row) -> u64| rounds.iter().map(field).sum::<u64>();
        let sum_f = |field: fn(&Row) -> f64| rounds.iter().map(field).sum::<f64>();
        let per = |total: f64, by: f64| if by > 0.0 { total / by } else { 0.0 };
        let cycles = sum_u(|r| r.cycles);
        let secs = sum_f(|r| r.secs);
        let cpu_us = sum_f(|r| r.cpu_cores * r.secs * 1e6);
        let sys_us = sum_f(|r| r.cpu_sys_share * r.cpu_cores * r.secs * 1e6);
        Row {
            contender: first.contender,
            runtime: first.runtime,
            workload: first.workload,
            tasks: first.tasks,
            secs,
            rounds: rounds.len() as u64,
            retry_ms: first.retry_ms,
            cycles,
            cycles_per_s: per(cycles as f64, secs),
            p50_us: median(rounds.iter().map(|r| r.p50_us)).unwrap_or(0.0),
            p99_us: median(rounds.iter().map(|r| r.p99_us)).unwrap_or(0.0),
            mean_us: per(sum_f(|r| r.mean_us * r.cycles as f64), cycles as f64),
            cpu_us_per_cycle: per(cpu_us, cycles as f64),
            cpu_cores: per(cpu_us / 1e6, secs),
            cpu_sys_share: per(sys_us, cpu_us),
            lock_failures: sum_u(|r| r.lock_failures),
            unlock_failures: sum_u(|r| r.unlock_failures),
            handoff_p50_us: median(rounds.iter().filter_map(|r| r.handoff_p50_us)),
            handoff_p99_us: median(rounds.iter().filter_map(|r| r.handoff_p99_us)),
            task_min: rounds.iter().map(|r| r.task_min).min().unwrap_or(0),
            task_max: rounds.iter().map(|r| r.task_max).max().unwrap_or(0),
            task_cv: per(sum_f(|r| r.task_cv), rounds.len() as f64),
            violations: sum_u(|r| r.violations),
            error: rounds.iter().enumerate().find_map(|(i, r)| {
                let error = r.error.as_ref()?;
                Some(format!("round {} of {}: {error}", i + 1, rounds.len()))
            }),
            ..Row::default()
        }
    }

    /// One JSON object on one line (the format of `target/bench-compare.jsonl`), with `extra`
    /// fields (e.g. the run id) first.
    pub fn to_json(&self, extra: &[(&str, Json)]) -> String {
        let mut fields: Vec<(&str, Json)> = extra.to_vec();
        fields.extend([
            ("kind", Json::Str("cycles".into())),
            ("contender", Json::Str(self.contender.clone())),
            ("runtime", Json::Str(self.runtime.clone())),
            ("workload", Json::Str(self.workload.clone())),
            ("tasks", Json::Num(self.tasks as f64)),
            ("secs", Json::Num(self.secs)),
            ("rounds", Json::Num(self.rounds as f64)),
            ("retry_ms", Json::Num(self.retry_ms)),
            ("cycles", Json::Num(self.cycles as f64)),
            ("cycles_per_s", Json::Num(self.cycles_per_s)),
            ("p50_us", Json::Num(self.p50_us)),
            ("p99_us", Json::Num(self.p99_us)),
            ("mean_us", Json::Num(self.mean_us)),
            ("cpu_us_per_cycle", Json::Num(self.cpu_us_per_cycle)),
            ("cpu_cores", Json::Num(self.cpu_cores)),
            ("cpu_sys_share", Json::Num(self.cpu_sys_share)),
            ("lock_failures", Json::Num(self.lock_failures as f64)),
            ("unlock_failures", Json::Num(self.unlock_failures as f64)),
            ("handoff_p50_us", Json::opt_num(self.handoff_p50_us)),
            ("handoff_p99_us", Json::opt_num(self.handoff_p99_us)),
            ("task_min", Json::Num(self.task_min as f64)),
            ("task_max", Json::Num(self.task_max as f64)),
            ("task_cv", Json::Num(self.task_cv)),
            ("violations", Json::Num(self.violations as f64)),
            ("vs", self.vs.clone().map_or(Json::Null, Json::Str)),
            ("throughput_ratio", Json::opt_num(self.throughput_ratio)),
            ("p50_ratio", Json::opt_num(self.p50_ratio)),
            ("p99_ratio", Json::opt_num(self.p99_ratio)),
            ("cpu_ratio", Json::opt_num(self.cpu_ratio)),
        ]);
        let round =
            |stat: fn(&RoundRatios) -> f64| Json::opt_num(self.round_ratios.as_ref().map(stat));
        fields.extend([
            ("throughput_ratio_min", round(|r| r.throughput.min)),
            ("throughput_ratio_median", round(|r| r.throughput.median)),
            ("throughput_ratio_max", round(|r| r.throughput.max)),
            ("p50_ratio_min", round(|r| r.p50.min)),
            ("p50_ratio_median", round(|r| r.p50.median)),
            ("p50_ratio_max", round(|r| r.p50.max)),
            ("cpu_ratio_min", round(|r| r.cpu.min)),
            ("cpu_ratio_median", round(|r| r.cpu.median)),
            ("cpu_ratio_max", round(|r| r.cpu.max)),
            ("error", self.error.clone().map_or(Json::Null, Json::Str)),
        ]);
        Json::object(&fields)
    }

    /// Parses a line written by [`to_json`](Row::to_json); unknown fields are ignored.
    pub fn from_json(line: &str) -> Result<Row, String> {
        let fields = Json::parse_object(line)?;
        let text = |key: &str| match fields.get(key) {
            Some(Json::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let num = |key: &str| match fields.get(key) {
            Some(Json::Num(n)) => Some(*n),
            _ => None,
        };
        let int = |key: &str| num(key).map_or(0, |n| n as u64);
        Ok(Row {
            contender: text("contender").ok_or("no contender")?,
            runtime: text("runtime").ok_or("no runtime")?,
            workload: text("workload").ok_or("no workload")?,
            tasks: int("tasks"),
            secs: num("secs").unwrap_or(0.0),
            // Lines written before rounds existed measured one window.
            rounds: num("rounds").map_or(1, |n| n as u64),
            retry_ms: num("retry_ms").unwrap_or(0.0),
            cycles: int("cycles"),
            cycles_per_s: num("cycles_per_s").unwrap_or(0.0),
            p50_us: num("p50_us").unwrap_or(0.0),
            p99_us: num("p99_us").unwrap_or(0.0),
            mean_us: num("mean_us").unwrap_or(0.0),
            cpu_us_per_cycle: num("cpu_us_per_cycle").unwrap_or(0.0),
            cpu_cores: num("cpu_cores").unwrap_or(0.0),
            cpu_sys_share: num("cpu_sys_share").unwrap_or(0.0),
            lock_failures: int("lock_failures"),
            unlock_failures: int("unlock_failures"),
            handoff_p50_us: num("handoff_p50_us"),
            handoff_p99_us: num("handoff_p99_us"),
            task_min: int("task_min"),
            task_max: int("task_max"),
            task_cv: num("task_cv").unwrap_or(0.0),
            violations: int("violations"),
            vs: text("vs"),
            throughput_ratio: num("throughput_ratio"),
            p50_ratio: num("p50_ratio"),
            p99_ratio: num("p99_ratio"),
            cpu_ratio: num("cpu_ratio"),
            // Lines read back are single rounds from the peer's process: no ratios yet.
            round_ratios: None,
            error: text("error"),
        })
    }
}

/// A JSON value of a flat object: all this format needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// A number (non-finite numbers are written as `null`).
    Num(f64),
    /// A string.
    Str(String),
}

impl Json {
    /// `Num` or `Null`.
    pub fn opt_num(value: Option<f64>) -> Json {
        value.map_or(Json::Null, Json::Num)
    }

    /// `{"key":value,...}` on one line.
    pub fn object(fields: &[(&str, Json)]) -> String {
        let mut out = String::from("{");
        for (i, (key, value)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(&mut out, key);
            out.push(':');
            match value {
                Json::Null => out.push_str("null"),
                Json::Num(n) if !n.is_finite() => out.push_str("null"),
                Json::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => {
                    let _ = write!(out, "{}", *n as i64);
                }
                Json::Num(n) => {
                    let _ = write!(out, "{}", (n * 1000.0).round() / 1000.0);
                }
                Json::Str(s) => write_string(&mut out, s),
            }
        }
        out.push('}');
        out
    }

    /// Parses one flat object of strings, numbers and nulls (booleans read as 0/1).
    pub fn parse_object(text: &str) -> Result<BTreeMap<String, Json>, String> {
        let mut parser = Parser {
            chars: text.trim().chars().collect(),
            at: 0,
        };
        parser.expect('{')?;
        let mut fields = BTreeMap::new();
        if parser.peek() == Some('}') {
            return Ok(fields);
        }
        loop {
            let key = parser.string()?;
            parser.expect(':')?;
            let value = parser.value()?;
            fields.insert(key, value);
            match parser.next() {
                Some(',') => continue,
                Some('}') => return Ok(fields),
                other => return Err(format!("expected ',' or '}}', found {other:?}")),
            }
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.at).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        self.at += 1;
        c
    }

    fn expect(&mut self, wanted: char) -> Result<(), String> {
        match self.next() {
            Some(c) if c == wanted => Ok(()),
            other => Err(format!("expected {wanted:?}, found {other:?}")),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            let c = *self.chars.get(self.at).ok_or("unterminated string")?;
            self.at += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let escaped = *self.chars.get(self.at).ok_or("unterminated escape")?;
                    self.at += 1;
                    match escaped {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'u' => {
                            let hex: String = self.chars.iter().skip(self.at).take(4).collect();
                            self.at += 4;
                            let code = u32::from_str_radix(&hex, 16).map_err(|e| e.to_string())?;
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek() {
            Some('"') => self.string().map(Json::Str),
            Some(_) => {
                let begin = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| !matches!(c, ',' | '}') && !c.is_whitespace())
                {
                    self.at += 1;
                }
                let word: String = self.chars[begin..self.at].iter().collect();
                match word.as_str() {
                    "null" => Ok(Json::Null),
                    "true" => Ok(Json::Num(1.0)),
                    "false" => Ok(Json::Num(0.0)),
                    number => number
                        .parse()
                        .map(Json::Num)
                        .map_err(|_| format!("not a JSON value: {number:?}")),
                }
            }
            None => Err("unexpected end of line".into()),
        }
    }
}
