//! redmutex against the wire floor and against rslock, side by side in one run.
//!
//! `cargo bench --bench compare` starts 5 local `redis-server` nodes (through `testenv`) and runs,
//! for a current-thread and a multi-thread tokio runtime, three workloads (1 task, 32 tasks on
//! their own names, 8 tasks on one name) with five contenders:
//!
//! - **floor wait-all**: the same wire work written with nothing but the redis crate: per cycle
//!   `SET name value NX PX 8000` to all 5 nodes at once, then the compare-and-delete script by
//!   `EVALSHA` to all 5, waiting for every reply; on a failed attempt the release and the retry
//!   delay, as Redlock requires, at most 32 attempts per `lock` like redmutex. One
//!   [`ConnectionManager`] per node, configured like redmutex's; no per-call timeout, no validity
//!   arithmetic, 16 raw random bytes as the value.
//! - **floor quorum**: the same, but each phase returns once a quorum (3 of 5) answered. The
//!   other replies are not abandoned: their calls stay in the task's in-flight set and are
//!   consumed while the task waits for its next phase (and drained after the last cycle). Each
//!   node's commands travel in order on its one multiplexed connection, so a late `SET` can never
//!   land after the release that follows it.
//! - **redmutex default** (`with_retry_delay` set for the contended workload only) and
//!   **redmutex fail-fast** (`with_fail_fast(true)`), and **redmutex fencing** (default options
//!   with `with_fencing(true)`: one more round trip per acquisition).
//! - **redmutex TLS**: default options over TLS (built with `--features tls`): the same nodes
//!   serve TLS too, with certificates of a throwaway CA that the client trusts through
//!   `Redlock::from_clients`. Its ratios are against redmutex default over plain TCP.
//! - **redmutex semaphore**: a `Semaphore` of 3 permits (quorum 4 of 5) with default options,
//!   `acquire()` and `unlock()`, its ratios taken against **redmutex default** (the `Mutex`'s
//!   `lock()`). Uncontended workloads only: on one shared name 3 holders at once are its point,
//!   and the contended workload counts them as violations.
//! - **rslock** (crates.io), built as `peers/rslock-bench` and run as a subprocess against the same
//!   nodes with the same harness (`benches/support/harness.rs`).
//! - The other primitives, against **redmutex default** (a plain `Mutex`): **redmutex names-N**, a
//!   multi-name lock of N = 1, 2, 8 and 32 names (`<task's name>:0` ... `:N-1`; uncontended
//!   workloads only), and **redmutex rw-read** and **redmutex rw-write**, the two sides of a
//!   read-write lock on the task's name (in the contended workload: 8 readers of one name, which
//!   hold together, against 8 writers).
//! - What a Redis Cluster member costs against a standalone one, default options, uncontended
//!   workloads, opt-in (run only when `BENCH_ONLY` selects them, e.g.
//!   `BENCH_ONLY='uncontended,standalone|cluster'`): **redmutex 1 standalone**, a client whose one
//!   member is one of the 5 standalone nodes, and **redmutex 1 cluster**, whose one member is a
//!   3-master Redis Cluster (started for these rows), its ratios against the former; likewise
//!   **redmutex 3 standalone** (3 of the 5 nodes) and **redmutex 3 clusters** (three 3-master
//!   clusters as three members).
//!
//! The background load of a shared machine drifts over seconds, so rows measured one after the
//! other would compare different moments. Each row's measured time is therefore split into
//! interleaved rounds: every contender of a runtime and workload runs one round (its own runtime,
//! connections and warm-up), then all of them run the next round, in an order rotated by one per
//! round, and each contender's rounds are merged into its row (sums of cycles, time and CPU time;
//! the median of the rounds' percentiles: see `Row::merge`).
//!
//! Environment: `BENCH_SECS` (measured seconds per row, all rounds together, default 3),
//! `BENCH_ROUNDS` (rounds per row, default 3), `BENCH_WARMUP_MS` (before every round, default 500),
//! `BENCH_RETRY_MS` (retry delay of every contender, default 2), `BENCH_MEMORY_LOCKS` (locks held
//! at once in the memory test, default 100000; 0 skips it), `BENCH_ONLY` (run only the rows whose
//! "runtime workload contender" contains every comma-separated word, a word being alternatives
//! split by `|`, e.g. `BENCH_ONLY=current,uncontended-32` or
//! `BENCH_ONLY='multi,uncontended-32,wait-all|default'`; ratios need the floor rows to match too).
//!
//! Three contenders run only when `BENCH_ONLY` is set and selects them, so that a full default
//! run keeps its length: **redmutex wake** (`with_wake_on_release(true)`, the default since
//! issue 42), **redmutex polling** (`with_wake_on_release(false)`, the default before it) and
//! **redmutex fair** (`with_fair(true)`), default options otherwise, uncontended workloads only,
//! their ratios against **redmutex default**: what each way of waiting costs while nobody waits. Likewise, built with
//! `--features metrics`, **redmutex metrics**: default options recording every series of
//! doc/metrics.md into metrics-exporter-prometheus's recorder, rendered every 5 s as a scrape
//! would (`benches/support/recording.rs`; the other rows record nothing), in every workload.
//!
//! Then the hand-off rows of the ways of waiting (`benches/support/handoff.rs`): tasks on one name,
//! polling, woken by release notices or in the fair line, in one client or in several, interleaved
//! in rounds like the rows above (`BENCH_HANDOFF_SECS` measured seconds per row, all rounds
//! together, default 5; `BENCH_ONLY=handoff` runs only these). By default the four rows of 8 tasks,
//! polling or woken, in 1 client or 8; the fair rows, the `default-5s` rows (nothing set but a 5 s
//! retry delay) and those of 8 clients with 8 tasks each run only when `BENCH_ONLY` selects them
//! (e.g. `BENCH_ONLY='handoff'` runs all of them).
//!
//! Two more sections run only when `BENCH_ONLY` selects them and a word of it names the section
//! (`zones...`, `nodes...`), since their labels end with a main table row's:
//!
//! - **Zones** (`BENCH_ONLY=zones`, or e.g. `'zones-mixed,current'`): the 5 nodes behind delay
//!   proxies (`benches/support/zones.rs`: a fixed one-way delay per node, threads and precise
//!   sleeps rather than tokio's whole-millisecond timer) with round trips of 0.2/0.2/1/1/10 ms
//!   (`zones-mixed`) and 1/2/3/4/5 ms (`zones-spread`); floor quorum, redmutex fail-fast and
//!   default, floor wait-all and rslock at 1, 8 and 32 tasks, each against the quorum floor, the
//!   wait-all floor and rslock; each proxy's round trip checked first (PING p50 and
//!   `redis-cli --latency`), and lock, extend and unlock timed apart at 1 task.
//! - **Node counts** (`BENCH_ONLY=nodes`, or e.g. `'nodes-9,current'`): 3, 5, 7 and 9 local nodes
//!   (a cluster of 9 started for them), the two floors and redmutex default and fail-fast at 1
//!   and 32 tasks, each against its floor at the same N.
//!
//! `BENCH_TRACE=debug` (or `trace`) prints the library's traces to stderr, to see what a row
//! does; it slows every row down.
//!
//! Prints a table, then one JSON line per row, also appended to `target/bench-compare.jsonl`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use rand::Rng;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisResult, Value};
use redmutex::{Lock, Redlock};

#[path = "support/commandstats.rs"]
mod commandstats;

#[path = "support/harness.rs"]
mod harness;

#[path = "support/handoff.rs"]
mod handoff;

#[path = "support/recording.rs"]
mod recording;

#[path = "support/zones.rs"]
mod zones;

use harness::{Contender, EXPIRY, Flavor, Json, NODES, RoundRatios, Row, TRIES, Timing, Workload};

/// Nodes that must agree.
const QUORUM: usize = NODES / 2 + 1;

/// redmutex's release script: the floor runs the same Lua.
const RELEASE: &str = redmutex::internals::RELEASE_SCRIPT;

/// Concurrent tasks acquiring (and later releasing) the locks of the memory test.
const MEMORY_TASKS: usize = 64;

/// Expiry of the memory test's locks: long enough that all of them are still held at the end.
const MEMORY_EXPIRY: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    FloorWaitAll,
    FloorQuorum,
    RedmutexDefault,
    RedmutexFailFast,
    /// Default options plus `with_fencing(true)`: the cost of the raise round.
    RedmutexFencing,
    /// Default options over TLS (`--features tls`): the cost of TLS.
    RedmutexTls,
    /// Default options plus `with_wake_on_release(true)`: what waking costs while nobody waits.
    RedmutexWake,
    /// Default options plus `with_wake_on_release(false)`: the default before issue 42, no
    /// waiters' mark and no notices, beside the default of the same build.
    RedmutexPolling,
    /// Default options plus `with_fair(true)`: what a fair mutex costs while nobody waits.
    RedmutexFair,
    /// A `Semaphore` of [`SEMAPHORE_PERMITS`] permits with default options.
    RedmutexSemaphore,
    Rslock,
    /// A multi-name lock over this many names, default options.
    RedmutexNames(usize),
    /// The read side of a read-write lock, default options.
    RedmutexRead,
    /// The write side of a read-write lock, default options.
    RedmutexWrite,
    /// Default options with this many standalone members (of the 5 nodes).
    MemberStandalone(usize),
    /// Default options with this many 3-master Redis Clusters as members.
    MemberCluster(usize),
    /// Default options, recording into a Prometheus recorder (`--features metrics`).
    RedmutexMetrics,
}

/// Permits of the semaphore contender: its quorum is 4 of the 5 nodes.
const SEMAPHORE_PERMITS: u32 = 3;

impl Who {
    /// Table order.
    const ALL: [Who; 22] = [
        Who::FloorWaitAll,
        Who::FloorQuorum,
        Who::RedmutexDefault,
        Who::RedmutexFailFast,
        Who::RedmutexFencing,
        Who::RedmutexTls,
        Who::RedmutexWake,
        Who::RedmutexPolling,
        Who::RedmutexFair,
        Who::RedmutexSemaphore,
        Who::Rslock,
        Who::RedmutexNames(1),
        Who::RedmutexNames(2),
        Who::RedmutexNames(8),
        Who::RedmutexNames(32),
        Who::RedmutexRead,
        Who::RedmutexWrite,
        Who::MemberStandalone(1),
        Who::MemberCluster(1),
        Who::MemberStandalone(3),
        Who::MemberCluster(3),
        Who::RedmutexMetrics,
    ];

    /// Run order before rotation: each library next to its floor, the other primitives and TLS
    /// next to the plain mutex.
    const RUN: [Who; 22] = [
        Who::FloorWaitAll,
        Who::RedmutexDefault,
        Who::RedmutexMetrics,
        Who::RedmutexFair,
        Who::RedmutexWake,
        Who::RedmutexPolling,
        Who::RedmutexTls,
        Who::RedmutexSemaphore,
        Who::RedmutexNames(1),
        Who::RedmutexNames(2),
        Who::RedmutexNames(8),
        Who::RedmutexNames(32),
        Who::RedmutexRead,
        Who::RedmutexWrite,
        Who::RedmutexFencing,
        Who::FloorQuorum,
        Who::RedmutexFailFast,
        Who::Rslock,
        Who::MemberStandalone(1),
        Who::MemberCluster(1),
        Who::MemberStandalone(3),
        Who::MemberCluster(3),
    ];

    fn name(self) -> &'static str {
        match self {
            Who::FloorWaitAll => "floor wait-all",
            Who::FloorQuorum => "floor quorum",
            Who::RedmutexDefault => "redmutex default",
            Who::RedmutexFailFast => "redmutex fail-fast",
            Who::RedmutexFencing => "redmutex fencing",
            Who::RedmutexTls => "redmutex TLS",
            Who::RedmutexWake => "redmutex wake",
            Who::RedmutexPolling => "redmutex polling",
            Who::RedmutexFair => "redmutex fair",
            Who::RedmutexSemaphore => "redmutex semaphore",
            Who::Rslock => "rslock 0.10.0",
            Who::RedmutexNames(1) => "redmutex names-1",
            Who::RedmutexNames(2) => "redmutex names-2",
            Who::RedmutexNames(8) => "redmutex names-8",
            Who::RedmutexNames(32) => "redmutex names-32",
            Who::RedmutexNames(_) => "redmutex names-n",
            Who::RedmutexRead => "redmutex rw-read",
            Who::RedmutexWrite => "redmutex rw-write",
            Who::MemberStandalone(1) => "redmutex 1 standalone",
            Who::MemberCluster(1) => "redmutex 1 cluster",
            Who::MemberStandalone(3) => "redmutex 3 standalone",
            Who::MemberCluster(3) => "redmutex 3 clusters",
            Who::MemberStandalone(_) => "redmutex n standalone",
            Who::MemberCluster(_) => "redmutex n clusters",
            Who::RedmutexMetrics => "redmutex metrics",
        }
    }

    /// Whether the contender runs `workload`: the semaphore only uncontended (3 holders at once
    /// are its point, and the contended workload counts them as violations), multi-name locks
    /// only uncontended (their latency and throughput against the plain lock are the question).
    /// Waiting modes only uncontended too: what they cost while nobody waits is the question
    /// here, and the hand-off rows measure the waiting. Members only uncontended: what routing
    /// costs a cycle is the question.
    fn runs(self, workload: Workload) -> bool {
        !(matches!(
            self,
            Who::RedmutexSemaphore
                | Who::RedmutexNames(_)
                | Who::RedmutexWake
                | Who::RedmutexPolling
                | Who::RedmutexFair
                | Who::MemberStandalone(_)
                | Who::MemberCluster(_)
        ) && workload.contended())
    }

    /// Whether the contender runs only when `BENCH_ONLY` is set and selects it, so that a full
    /// default run keeps its length.
    fn opt_in(self) -> bool {
        matches!(
            self,
            Who::RedmutexWake
                | Who::RedmutexPolling
                | Who::RedmutexFair
                | Who::RedmutexMetrics
                | Who::MemberStandalone(_)
                | Who::MemberCluster(_)
        )
    }

    /// The row each contender's ratios are taken against: a floor, or for the other primitives
    /// and TLS the plain mutex.
    fn baseline(self) -> Option<Who> {
        match self {
            Who::FloorWaitAll | Who::MemberStandalone(_) => None,
            Who::MemberCluster(members) => Some(Who::MemberStandalone(members)),
            Who::FloorQuorum | Who::RedmutexDefault | Who::RedmutexFencing | Who::Rslock => {
                Some(Who::FloorWaitAll)
            }
            Who::RedmutexFailFast => Some(Who::FloorQuorum),
            Who::RedmutexTls | Who::RedmutexSemaphore => Some(Who::RedmutexDefault),
            Who::RedmutexWake | Who::RedmutexPolling | Who::RedmutexFair | Who::RedmutexMetrics => {
                Some(Who::RedmutexDefault)
            }
            Who::RedmutexNames(_) | Who::RedmutexRead | Who::RedmutexWrite => {
                Some(Who::RedmutexDefault)
            }
        }
    }

    /// Whether this build can run it: the TLS row needs `--features tls`.
    // Each arm is a constant of the build, which clippy reads as a `matches!` in some builds.
    #[allow(clippy::match_like_matches_macro)]
    fn built(self) -> bool {
        match self {
            Who::RedmutexTls => cfg!(feature = "tls"),
            Who::RedmutexMetrics => cfg!(feature = "metrics"),
            _ => true,
        }
    }
}

struct Config {
    /// `measure` is the whole measured time of a row, over all its rounds.
    timing: Timing,
    /// Interleaved rounds per row (`BENCH_ROUNDS`).
    rounds: u32,
    memory_locks: usize,
    /// The measured window of each hand-off row (`BENCH_HANDOFF_SECS`).
    handoff: Duration,
    /// Words every row label must contain (`BENCH_ONLY`); empty runs every row.
    only: Vec<String>,
    /// The library's traces at this level, to stderr (`BENCH_TRACE`, e.g. `debug`).
    trace: Option<tracing_subscriber::filter::LevelFilter>,
}

impl Config {
    /// Whether `BENCH_ONLY` selects the row `label`.
    fn selects(&self, label: &str) -> bool {
        self.only
            .iter()
            .all(|word| word.split('|').any(|choice| label.contains(choice)))
    }

    /// Whether `BENCH_ONLY` selects the row `label`, which runs only when asked for (`opt_in`).
    fn selects_row(&self, label: &str, opt_in: bool) -> bool {
        self.selects(label) && !(opt_in && self.only.is_empty())
    }

    fn from_env() -> Result<Config, String> {
        let number = |name: &str, default: f64| -> Result<f64, String> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && *n >= 0.0)
                    .ok_or_else(|| format!("{name}={text:?} is not a non-negative number")),
                Err(_) => Ok(default),
            }
        };
        Ok(Config {
            timing: Timing {
                warmup: Duration::from_secs_f64(number("BENCH_WARMUP_MS", 500.0)? / 1000.0),
                measure: Duration::from_secs_f64(number("BENCH_SECS", 3.0)?.max(0.1)),
                retry_delay: Duration::from_secs_f64(number("BENCH_RETRY_MS", 2.0)? / 1000.0),
            },
            rounds: match std::env::var("BENCH_ROUNDS") {
                Ok(text) => text
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("BENCH_ROUNDS={text:?} is not an integer >= 1"))?,
                Err(_) => 3,
            },
            memory_locks: number("BENCH_MEMORY_LOCKS", 100_000.0)? as usize,
            handoff: Duration::from_secs_f64(number("BENCH_HANDOFF_SECS", 5.0)?.max(0.1)),
            only: std::env::var("BENCH_ONLY")
                .unwrap_or_default()
                .split(',')
                .map(|word| word.trim().to_owned())
                .filter(|word| !word.is_empty())
                .collect(),
            trace: match std::env::var("BENCH_TRACE") {
                Ok(text) => Some(
                    text.trim()
                        .parse()
                        .map_err(|_| format!("BENCH_TRACE={text:?} is not a tracing level"))?,
                ),
                Err(_) => None,
            },
        })
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes --bench; `cargo test --benches` does not. Only the former measures.
    if !std::env::args().any(|arg| arg == "--bench") {
        eprintln!("compare: not invoked by `cargo bench` (no --bench argument); nothing to do");
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("compare: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(level) = config.trace {
        // To see what a row does (rounds, hand-offs by notice); it slows every row down, so
        // its figures are not measurements.
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init();
    }
    let run = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    eprintln!("compare: building the rslock peer (peers/rslock-bench, release)");
    let rslock = build_rslock();
    if let Err(error) = &rslock {
        eprintln!("compare: rslock could not be built; its rows say why\n{error}");
    }

    // With TLS, the same nodes serve plain TCP (the other rows) and TLS (the TLS row).
    #[cfg(feature = "tls")]
    let (cluster, tls) = {
        let ca = redmutex_testenv::Tls::new();
        let cluster = redmutex_testenv::Cluster::start_tls(NODES, &ca);
        let tls = TlsNodes {
            urls: cluster.tls_urls(),
            ca_pem: ca.ca_pem().to_owned(),
        };
        (cluster, Some(tls))
    };
    #[cfg(not(feature = "tls"))]
    let (cluster, tls) = (redmutex_testenv::Cluster::start(NODES), None::<TlsNodes>);
    let urls = cluster.urls();

    // The Redis Clusters of the member rows, only when a selected row needs them.
    let clusters_needed = Flavor::ALL
        .iter()
        .flat_map(|&flavor| {
            Workload::ALL
                .iter()
                .map(move |&workload| (flavor, workload))
        })
        .flat_map(|(flavor, workload)| Who::RUN.iter().map(move |&who| (flavor, workload, who)))
        .filter_map(|(flavor, workload, who)| match who {
            Who::MemberCluster(members) if who.runs(workload) => {
                let label = format!("{} {} {}", flavor.name(), workload.name(), who.name());
                config.selects_row(&label, who.opt_in()).then_some(members)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if clusters_needed > 0 {
        eprintln!("compare: starting {clusters_needed} Redis Cluster(s) of 3 masters");
    }
    let redis_clusters: Vec<redmutex_testenv::RedisCluster> = (0..clusters_needed)
        .map(|_| redmutex_testenv::RedisCluster::start(3, 0))
        .collect();
    let seeds: Vec<String> = redis_clusters
        .iter()
        .map(redmutex_testenv::RedisCluster::seed_url)
        .collect();

    eprintln!(
        "compare: memory test, {} locks held at once",
        config.memory_locks
    );
    let memory = memory_test(&cluster, &urls, config.memory_locks);

    let mut rows = Vec::new();
    let mut rounds_of = Vec::new();
    let total = Flavor::ALL.len()
        * Workload::ALL
            .iter()
            .map(|&w| Who::RUN.iter().filter(|who| who.runs(w)).count())
            .sum::<usize>();
    let rounds = config.rounds as usize;
    let round_timing = Timing {
        measure: config.timing.measure / config.rounds,
        ..config.timing
    };
    let mut seq = 0;
    for (f, &flavor) in Flavor::ALL.iter().enumerate() {
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            // Rotate the run order per workload: no contender always runs first or last.
            let shift = (f * Workload::ALL.len() + w) % Who::RUN.len();
            let mut group = Vec::new();
            for i in 0..Who::RUN.len() {
                let who = Who::RUN[(i + shift) % Who::RUN.len()];
                let label = format!("{} {} {}", flavor.name(), workload.name(), who.name());
                if who.built() && who.runs(workload) && config.selects_row(&label, who.opt_in()) {
                    seq += 1;
                    group.push((who, seq, Vec::with_capacity(rounds)));
                }
            }
            // Every contender runs once per round, so slow drifts of the background load reach
            // all of them alike instead of the ones measured in a bad moment; one more rotation
            // per round so that no contender always runs first.
            interleave(&mut group, rounds, |who, seq, round| {
                let prefix = format!("bench:{run}:{seq}:{round}");
                eprintln!(
                    "compare: [{seq:2}/{total}] round {}/{rounds} {:14} {:14} {}",
                    round + 1,
                    flavor.name(),
                    workload.name(),
                    who.name()
                );
                run_contender(
                    who,
                    flavor,
                    workload,
                    round_timing,
                    &urls,
                    &seeds,
                    tls.as_ref(),
                    &prefix,
                    &rslock,
                )
            });
            for (who, seq, done) in group {
                rows.push((who, seq, Row::merge(&done)));
                rounds_of.push((seq, done));
            }
        }
    }
    // The hand-off rows, in interleaved rounds as above: every row runs one round, then all of
    // them run the next, in an order rotated by one per round.
    let setups: Vec<(usize, handoff::Setup)> = handoff::ROWS
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, setup)| config.selects_row(&setup.label(), setup.opt_in))
        .collect();
    let mut handoff_rounds: Vec<Vec<handoff::Round>> =
        setups.iter().map(|_| Vec::with_capacity(rounds)).collect();
    let handoff_window = config.handoff / config.rounds;
    for round in 0..rounds {
        for k in 0..setups.len() {
            let j = (k + round) % setups.len();
            let (i, setup) = setups[j];
            eprintln!("compare: round {}/{rounds} {}", round + 1, setup.label());
            let name = format!("bench:{run}:handoff{i}:{round}");
            handoff_rounds[j].push(handoff::run_round(
                &cluster,
                &urls,
                setup,
                config.timing.warmup,
                handoff_window,
                name,
            ));
        }
    }
    let handoffs: Vec<handoff::HandoffRow> = setups
        .iter()
        .zip(handoff_rounds)
        .map(|(&(_, setup), rounds)| handoff::HandoffRow::merge(setup, rounds))
        .collect();
    let zone_runs = if zones_selected(&config) {
        run_zones(&config, &cluster, &rslock, run)
    } else {
        Vec::new()
    };
    let node_rows = if nodes_selected(&config) {
        run_node_counts(&config, run)
    } else {
        Vec::new()
    };
    add_ratios(&mut rows, &rounds_of);
    rows.sort_by_key(|(who, seq, row)| {
        (
            Flavor::ALL.iter().position(|f| f.name() == row.runtime),
            Workload::ALL.iter().position(|w| w.name() == row.workload),
            Who::ALL.iter().position(|w| w == who),
            *seq,
        )
    });

    print_table(&rows, &memory, &config, &redis_version(&cluster));

    if !handoffs.is_empty() {
        handoff::print_table(&handoffs);
    }
    print_zones(&zone_runs);
    print_node_counts(&node_rows);

    let mut lines = vec![memory.to_json(run)];
    lines.extend(handoffs.iter().map(|row| row.to_json(run)));
    for (_, seq, row) in &rows {
        lines.push(row.to_json(&[
            ("run", Json::Num(run as f64)),
            ("seq", Json::Num(*seq as f64)),
        ]));
    }
    for (_, seq, row) in &node_rows {
        lines.push(row.to_json(&[
            ("run", Json::Num(run as f64)),
            ("seq", Json::Num(*seq as f64)),
        ]));
    }
    for zone in &zone_runs {
        for (_, seq, row) in &zone.rows {
            lines.push(row.to_json(&[
                ("run", Json::Num(run as f64)),
                ("seq", Json::Num(*seq as f64)),
                ("zones", Json::Str(zone.zones.into())),
            ]));
        }
    }
    println!();
    for line in &lines {
        println!("{line}");
    }
    let path = target_dir().join("bench-compare.jsonl");
    match append_lines(&path, &lines) {
        Ok(()) => eprintln!(
            "compare: appended {} lines to {}",
            lines.len(),
            path.display()
        ),
        Err(error) => eprintln!("compare: could not write {}: {error}", path.display()),
    }
    ExitCode::SUCCESS
}

/// The TLS port of every node, and the CA that signed their certificates.
#[cfg_attr(not(feature = "tls"), allow(dead_code))] // made only with the feature
struct TlsNodes {
    urls: Vec<String>,
    ca_pem: String,
}

/// A client over the nodes' TLS ports, trusting their CA.
#[cfg(feature = "tls")]
async fn tls_redlock(tls: Option<&TlsNodes>) -> Result<Redlock, String> {
    let tls = tls.ok_or("no TLS nodes")?;
    let mut clients = Vec::new();
    for url in &tls.urls {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(tls.ca_pem.as_bytes().to_vec()),
        };
        clients.push(
            redis::Client::build_with_tls(url.as_str(), certificates).map_err(|e| e.to_string())?,
        );
    }
    Redlock::from_clients(clients)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "tls"))]
async fn tls_redlock(_: Option<&TlsNodes>) -> Result<Redlock, String> {
    Err("TLS needs --features tls".into())
}

#[allow(clippy::too_many_arguments)]
fn run_contender(
    who: Who,
    flavor: Flavor,
    workload: Workload,
    timing: Timing,
    urls: &[String],
    seeds: &[String],
    tls: Option<&TlsNodes>,
    prefix: &str,
    rslock: &Result<PathBuf, String>,
) -> Row {
    let name = who.name();
    let members = match who {
        Who::MemberStandalone(members) => urls.get(..members),
        Who::MemberCluster(members) => seeds.get(..members),
        _ => Some(urls),
    };
    let Some(members) = members else {
        return Row::failed(name, flavor, workload, timing, "too few nodes".into());
    };
    let urls = members.to_vec();
    recording::record(who == Who::RedmutexMetrics);
    match who {
        Who::FloorWaitAll => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let (nodes, digest) = floor_connections(&urls).await?;
                Ok(names
                    .into_iter()
                    .map(|name| FloorWaitAll {
                        key: Key::new(name, &digest),
                        nodes: nodes.clone(),
                        retry_delay: timing.retry_delay,
                    })
                    .collect())
            })
        }
        Who::FloorQuorum => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let (nodes, digest) = floor_connections(&urls).await?;
                Ok(names
                    .into_iter()
                    .map(|name| FloorQuorum {
                        key: Key::new(name, &digest),
                        nodes: nodes.clone(),
                        retry_delay: timing.retry_delay,
                        in_flight: FuturesUnordered::new(),
                        call,
                        phase: 0,
                    })
                    .collect())
            })
        }
        Who::RedmutexDefault
        | Who::RedmutexFailFast
        | Who::RedmutexFencing
        | Who::RedmutexTls
        | Who::RedmutexWake
        | Who::RedmutexPolling
        | Who::RedmutexFair
        | Who::RedmutexMetrics
        | Who::MemberStandalone(_)
        | Who::MemberCluster(_) => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let redlock = match who {
                    Who::RedmutexTls => tls_redlock(tls).await?,
                    _ => Redlock::connect(&urls).await.map_err(|e| e.to_string())?,
                };
                Ok(names
                    .into_iter()
                    .map(|name| {
                        let mut mutex = redlock.new_mutex(name);
                        if workload.contended() {
                            mutex = mutex.with_retry_delay(timing.retry_delay);
                        }
                        if who == Who::RedmutexFailFast {
                            mutex = mutex.with_fail_fast(true);
                        }
                        if who == Who::RedmutexFencing {
                            mutex = mutex.with_fencing(true);
                        }
                        if who == Who::RedmutexWake {
                            mutex = mutex.with_wake_on_release(true);
                        }
                        if who == Who::RedmutexPolling {
                            mutex = mutex.with_wake_on_release(false);
                        }
                        if who == Who::RedmutexFair {
                            mutex = mutex.with_fair(true);
                        }
                        Redmutex { mutex, held: None }
                    })
                    .collect())
            })
        }
        Who::RedmutexSemaphore => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let redlock = Redlock::connect(&urls).await.map_err(|e| e.to_string())?;
                Ok(names
                    .into_iter()
                    .map(|name| RedmutexSemaphore {
                        semaphore: redlock.new_semaphore(name, SEMAPHORE_PERMITS),
                        held: None,
                    })
                    .collect())
            })
        }
        Who::RedmutexNames(count) => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let redlock = Redlock::connect(&urls).await.map_err(|e| e.to_string())?;
                Ok(names
                    .into_iter()
                    .map(|name| {
                        let names = (0..count).map(|i| format!("{name}:{i}"));
                        let mut mutex = redlock.new_multi_mutex(names);
                        if workload.contended() {
                            mutex = mutex.with_retry_delay(timing.retry_delay);
                        }
                        Redmutex { mutex, held: None }
                    })
                    .collect())
            })
        }
        Who::RedmutexRead | Who::RedmutexWrite => {
            harness::run_row(name, flavor, workload, timing, prefix, |names| async move {
                let redlock = Redlock::connect(&urls).await.map_err(|e| e.to_string())?;
                Ok(names
                    .into_iter()
                    .map(|name| {
                        let mut rwlock = redlock.new_rwlock(name);
                        if workload.contended() {
                            rwlock = rwlock.with_retry_delay(timing.retry_delay);
                        }
                        RedmutexRw {
                            rwlock,
                            read: who == Who::RedmutexRead,
                            held: None,
                        }
                    })
                    .collect())
            })
        }
        Who::Rslock => match rslock {
            Ok(binary) => run_rslock(binary, flavor, workload, timing, &urls, prefix),
            Err(error) => Row::failed(
                name,
                flavor,
                workload,
                timing,
                format!("not built: {}", first_line(error)),
            ),
        },
    }
}

/// One task's redmutex client: a `Mutex` made once, the lock it holds between `lock` and `unlock`.
struct Redmutex {
    mutex: redmutex::Mutex,
    held: Option<Lock>,
}

impl Contender for Redmutex {
    async fn lock(&mut self) -> bool {
        match self.mutex.lock().await {
            Ok(lock) => {
                self.held = Some(lock);
                true
            }
            Err(_) => false,
        }
    }

    async fn unlock(&mut self) -> bool {
        match self.held.take() {
            Some(lock) => lock.unlock().await.is_ok(),
            None => false,
        }
    }
}

/// One task's semaphore client: a `Semaphore` made once, the permit it holds between `lock` and
/// `unlock`.
struct RedmutexSemaphore {
    semaphore: redmutex::Semaphore,
    held: Option<Lock>,
}

impl Contender for RedmutexSemaphore {
    async fn lock(&mut self) -> bool {
        match self.semaphore.acquire().await {
            Ok(permit) => {
                self.held = Some(permit);
                true
            }
            Err(_) => false,
        }
    }

    async fn unlock(&mut self) -> bool {
        match self.held.take() {
            Some(permit) => permit.unlock().await.is_ok(),
            None => false,
        }
    }
}

/// One task's read-write lock client: one side of an `RwLock` made once.
struct RedmutexRw {
    rwlock: redmutex::RwLock,
    read: bool,
    held: Option<Lock>,
}

impl Contender for RedmutexRw {
    async fn lock(&mut self) -> bool {
        let lock = if self.read {
            self.rwlock.read().await
        } else {
            self.rwlock.write().await
        };
        match lock {
            Ok(lock) => {
                self.held = Some(lock);
                true
            }
            Err(_) => false,
        }
    }

    async fn unlock(&mut self) -> bool {
        match self.held.take() {
            Some(lock) => lock.unlock().await.is_ok(),
            None => false,
        }
    }

    fn shared(&self) -> bool {
        self.read
    }
}

/// One connection per node, as redmutex makes them, and the release script loaded on each.
async fn floor_connections(urls: &[String]) -> Result<(Vec<ConnectionManager>, String), String> {
    let mut nodes = Vec::new();
    for url in urls {
        // Like redmutex's: each request sent at once, without waiting for the previous one's ACK.
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
            .map_err(|e| e.to_string())?;
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let client = redis::Client::open(info.set_tcp_settings(tcp)).map_err(|e| e.to_string())?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None)
            .set_number_of_retries(0);
        let mut node = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query_async::<String>(&mut node)
            .await
            .map_err(|e| format!("{url}: SCRIPT LOAD: {e}"))?;
        nodes.push(node);
    }
    let digest = redis::Script::new(RELEASE).get_hash().to_owned();
    Ok((nodes, digest))
}

/// A task's key, the release script's digest, and the value of the current acquisition.
struct Key {
    name: String,
    digest: String,
    value: [u8; 16],
}

impl Key {
    fn new(name: String, digest: &str) -> Key {
        Key {
            name,
            digest: digest.to_owned(),
            value: [0; 16],
        }
    }

    /// A fresh value per acquisition: 16 bytes from the thread-local CSPRNG, sent as they are.
    fn new_value(&mut self) {
        rand::rng().fill_bytes(&mut self.value);
    }

    fn set(&self) -> Cmd {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.name)
            .arg(&self.value[..])
            .arg("NX")
            .arg("PX")
            .arg(EXPIRY.as_millis() as u64);
        cmd
    }

    fn release(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.digest)
            .arg(1)
            .arg(&self.name)
            .arg(&self.value[..]);
        cmd
    }
}

fn is_ok(reply: &Value) -> bool {
    matches!(reply, Value::Okay)
}

fn is_released(reply: &Value) -> bool {
    matches!(reply, Value::Int(1))
}

fn is_answer(reply: &Value) -> bool {
    !matches!(reply, Value::ServerError(_))
}

/// Nodes that must agree, of `nodes` (5 in every row but the node-count rows').
fn quorum<T>(nodes: &[T]) -> usize {
    nodes.len() / 2 + 1
}

/// The floor that waits for every reply: `join_all` over the 5 connections, nothing else.
struct FloorWaitAll {
    key: Key,
    nodes: Vec<ConnectionManager>,
    retry_delay: Duration,
}

impl FloorWaitAll {
    async fn all(&mut self, cmd: &Cmd, counts: fn(&Value) -> bool) -> usize {
        join_all(
            self.nodes
                .iter_mut()
                .map(|node| node.send_packed_command(cmd)),
        )
        .await
        .iter()
        .filter(|reply| reply.as_ref().is_ok_and(counts))
        .count()
    }
}

impl Contender for FloorWaitAll {
    async fn lock(&mut self) -> bool {
        self.key.new_value();
        let set = self.key.set();
        for _ in 0..TRIES {
            if self.all(&set, is_ok).await >= quorum(&self.nodes) {
                return true;
            }
            let release = self.key.release();
            self.all(&release, is_answer).await;
            tokio::time::sleep(self.retry_delay).await;
        }
        false
    }

    async fn unlock(&mut self) -> bool {
        let release = self.key.release();
        self.all(&release, is_released).await >= quorum(&self.nodes)
    }
}

/// One node call that owns what it uses, tagged with its phase, so it can outlive the phase.
async fn call(mut node: ConnectionManager, cmd: Arc<Cmd>, phase: u64) -> (u64, RedisResult<Value>) {
    let reply = node.send_packed_command(&cmd).await;
    (phase, reply)
}

/// The floor that returns at the quorum. `F` is the future of [`call`] (`M`), named through the
/// function so the in-flight set needs no boxing.
struct FloorQuorum<F, M> {
    key: Key,
    nodes: Vec<ConnectionManager>,
    retry_delay: Duration,
    /// Calls of this and earlier phases; earlier ones are consumed as they come in.
    in_flight: FuturesUnordered<F>,
    call: M,
    phase: u64,
}

impl<F, M> FloorQuorum<F, M>
where
    F: Future<Output = (u64, RedisResult<Value>)>,
    M: Fn(ConnectionManager, Arc<Cmd>, u64) -> F,
{
    /// Sends `cmd` to every node; true once a quorum of replies satisfy `counts`, false once
    /// they no longer can.
    async fn quorum(&mut self, cmd: Cmd, counts: fn(&Value) -> bool) -> bool {
        self.phase += 1;
        let cmd = Arc::new(cmd);
        for node in &self.nodes {
            self.in_flight
                .push((self.call)(node.clone(), Arc::clone(&cmd), self.phase));
        }
        let (mut yes, mut no) = (0, 0);
        while let Some((phase, reply)) = self.in_flight.next().await {
            if phase != self.phase {
                continue;
            }
            if reply.as_ref().is_ok_and(counts) {
                yes += 1;
            } else {
                no += 1;
            }
            if yes >= quorum(&self.nodes) {
                return true;
            }
            if no > self.nodes.len() - quorum(&self.nodes) {
                return false;
            }
        }
        false
    }
}

impl<F, M> Contender for FloorQuorum<F, M>
where
    F: Future<Output = (u64, RedisResult<Value>)> + Send + 'static,
    M: Fn(ConnectionManager, Arc<Cmd>, u64) -> F + Send + 'static,
{
    async fn lock(&mut self) -> bool {
        self.key.new_value();
        for _ in 0..TRIES {
            if self.quorum(self.key.set(), is_ok).await {
                return true;
            }
            self.quorum(self.key.release(), is_answer).await;
            tokio::time::sleep(self.retry_delay).await;
        }
        false
    }

    async fn unlock(&mut self) -> bool {
        self.quorum(self.key.release(), is_released).await
    }

    async fn finish(&mut self) {
        while self.in_flight.next().await.is_some() {}
    }
}

/// The main target directory (`CARGO_TARGET_DIR` or `target/` of this package).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Builds `peers/rslock-bench` in release mode (its own workspace, its own target directory) and
/// returns the binary. Running the binary directly equals `cargo run --release --manifest-path
/// peers/rslock-bench/Cargo.toml -- ...` without cargo's start-up on every row.
fn build_rslock() -> Result<PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/rslock-bench/Cargo.toml");
    let target = target_dir().join("rslock-bench");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "cargo build of {} failed ({})\n{}",
            manifest.display(),
            output.status,
            tail.join("\n")
        ));
    }
    Ok(target.join("release/rslock-bench"))
}

fn run_rslock(
    binary: &Path,
    flavor: Flavor,
    workload: Workload,
    timing: Timing,
    urls: &[String],
    prefix: &str,
) -> Row {
    let name = Who::Rslock.name();
    let millis = |d: Duration| format!("{}", d.as_secs_f64() * 1000.0);
    let output = Command::new(binary)
        .args(["--urls", &urls.join(",")])
        .args(["--runtime", flavor.name()])
        .args(["--workload", workload.name()])
        .args(["--secs", &timing.measure.as_secs_f64().to_string()])
        .args(["--warmup-ms", &millis(timing.warmup)])
        .args(["--retry-ms", &millis(timing.retry_delay)])
        .args(["--prefix", prefix])
        .stdin(Stdio::null())
        .output();
    let failed = |error: String| Row::failed(name, flavor, workload, timing, error);
    let output = match output {
        Ok(output) => output,
        Err(error) => return failed(format!("could not run {}: {error}", binary.display())),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|line| line.starts_with('{'));
    match (output.status.success(), line) {
        (true, Some(line)) => Row::from_json(line).unwrap_or_else(&failed),
        _ => failed(format!(
            "rslock-bench exited with {}: {}",
            output.status,
            first_line(&String::from_utf8_lossy(&output.stderr))
        )),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// Ratios of each row to its floor in the same runtime and workload, over all rounds and round
/// by round (`rounds_of`: each row's rounds, by its `seq`).
fn add_ratios(rows: &mut [(Who, usize, Row)], rounds_of: &[(usize, Vec<Row>)]) {
    let snapshot: Vec<(Who, usize, Row)> = rows.to_vec();
    let rounds = |seq: usize| {
        rounds_of
            .iter()
            .find(|(s, _)| *s == seq)
            .map_or(&[][..], |(_, rounds)| rounds.as_slice())
    };
    for (who, seq, row) in rows.iter_mut() {
        let Some(base_who) = who.baseline() else {
            continue;
        };
        let Some((_, base_seq, base)) = snapshot.iter().find(|(w, _, r)| {
            *w == base_who && r.runtime == row.runtime && r.workload == row.workload
        }) else {
            continue;
        };
        if row.error.is_some() || base.error.is_some() {
            continue;
        }
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        row.round_ratios = RoundRatios::of(rounds(*seq), rounds(*base_seq));
        row.vs = Some(base.contender.clone());
        row.throughput_ratio = ratio(row.cycles_per_s, base.cycles_per_s);
        row.p50_ratio = ratio(row.p50_us, base.p50_us);
        row.p99_ratio = ratio(row.p99_us, base.p99_us);
        row.cpu_ratio = ratio(row.cpu_us_per_cycle, base.cpu_us_per_cycle);
    }
}

/// What holding many locks at once costs the client.
#[derive(Default)]
struct Memory {
    locks: usize,
    rss_before_kib: u64,
    rss_after_kib: u64,
    acquire_secs: f64,
    release_secs: f64,
    release_failures: usize,
    /// Connections per node from this process, not counting the probe: before the client exists,
    /// after one lock, and with every lock held.
    connections_before: Vec<i64>,
    connections_idle: Vec<i64>,
    connections_held: Vec<i64>,
    error: Option<String>,
}

impl Memory {
    fn bytes_per_lock(&self) -> f64 {
        let grown = self.rss_after_kib.saturating_sub(self.rss_before_kib);
        (grown * 1024) as f64 / self.locks.max(1) as f64
    }

    fn to_json(&self, run: u64) -> String {
        let list = |counts: &[i64]| {
            Json::Str(
                counts
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        };
        let max = |counts: &[i64]| Json::Num(counts.iter().copied().max().unwrap_or(-1) as f64);
        Json::object(&[
            ("run", Json::Num(run as f64)),
            ("kind", Json::Str("memory".into())),
            ("contender", Json::Str("redmutex default".into())),
            ("locks", Json::Num(self.locks as f64)),
            ("expiry_s", Json::Num(MEMORY_EXPIRY.as_secs_f64())),
            ("rss_before_kib", Json::Num(self.rss_before_kib as f64)),
            ("rss_after_kib", Json::Num(self.rss_after_kib as f64)),
            ("bytes_per_lock", Json::Num(self.bytes_per_lock())),
            ("acquire_secs", Json::Num(self.acquire_secs)),
            ("release_secs", Json::Num(self.release_secs)),
            ("release_failures", Json::Num(self.release_failures as f64)),
            ("connections_before", list(&self.connections_before)),
            ("connections_idle", list(&self.connections_idle)),
            ("connections_held", list(&self.connections_held)),
            ("connections_held_max", max(&self.connections_held)),
            ("error", self.error.clone().map_or(Json::Null, Json::Str)),
        ])
    }
}

/// `connected_clients` of every node, less the probe's own connection.
fn connections(probes: &mut [redis::Connection]) -> Vec<i64> {
    probes
        .iter_mut()
        .map(|probe| {
            let info: String = redis::cmd("INFO")
                .arg("clients")
                .query(probe)
                .unwrap_or_default();
            info.lines()
                .find_map(|line| line.strip_prefix("connected_clients:"))
                .and_then(|n| n.trim().parse::<i64>().ok())
                .map_or(-1, |n| n - 1)
        })
        .collect()
}

/// Acquires `count` locks on distinct names with one `Redlock`, holds them all, and measures RSS
/// before and after, and the connections the nodes see; then releases them.
fn memory_test(cluster: &redmutex_testenv::Cluster, urls: &[String], count: usize) -> Memory {
    let mut memory = Memory {
        locks: count,
        ..Memory::default()
    };
    if count == 0 {
        memory.error = Some("skipped (BENCH_MEMORY_LOCKS=0)".into());
        return memory;
    }
    if let Err(error) = memory_test_inner(cluster, urls, &mut memory) {
        memory.error = Some(error);
    }
    memory
}

fn memory_test_inner(
    cluster: &redmutex_testenv::Cluster,
    urls: &[String],
    memory: &mut Memory,
) -> Result<(), String> {
    let mut probes: Vec<redis::Connection> =
        cluster.nodes().iter().map(|n| n.connection()).collect();
    memory.connections_before = connections(&mut probes);
    let runtime = Flavor::Current.runtime()?;
    let redlock = runtime.block_on(async {
        let redlock = Redlock::connect(urls).await.map_err(|e| e.to_string())?;
        let lock = redlock
            .new_mutex("bench:memory:warm")
            .lock()
            .await
            .map_err(|e| e.to_string())?;
        lock.unlock().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(redlock)
    })?;
    memory.connections_idle = connections(&mut probes);

    memory.rss_before_kib = harness::rss_kib().ok_or("no /proc/self/status")?;
    let started = Instant::now();
    let locks = runtime.block_on(acquire_many(&redlock, memory.locks))?;
    memory.acquire_secs = started.elapsed().as_secs_f64();
    memory.rss_after_kib = harness::rss_kib().ok_or("no /proc/self/status")?;
    memory.connections_held = connections(&mut probes);

    let started = Instant::now();
    memory.release_failures = runtime.block_on(release_many(locks));
    memory.release_secs = started.elapsed().as_secs_f64();
    Ok(())
}

async fn acquire_many(redlock: &Redlock, count: usize) -> Result<Vec<Lock>, String> {
    let tasks: Vec<_> = (0..MEMORY_TASKS)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut held = Vec::new();
                for i in (task..count).step_by(MEMORY_TASKS) {
                    let lock = redlock
                        .new_mutex(format!("bench:memory:{i}"))
                        .with_expiry(MEMORY_EXPIRY)
                        .lock()
                        .await
                        .map_err(|e| format!("lock {i}: {e}"))?;
                    held.push(lock);
                }
                Ok::<_, String>(held)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(count);
    for task in tasks {
        all.extend(task.await.map_err(|e| e.to_string())??);
    }
    Ok(all)
}

async fn release_many(locks: Vec<Lock>) -> usize {
    let per_task = locks.len().div_ceil(MEMORY_TASKS).max(1);
    let mut locks = locks.into_iter();
    let mut tasks = Vec::new();
    loop {
        let chunk: Vec<Lock> = locks.by_ref().take(per_task).collect();
        if chunk.is_empty() {
            break;
        }
        tasks.push(tokio::spawn(async move {
            let mut failures = 0;
            for lock in chunk {
                failures += usize::from(lock.unlock().await.is_err());
            }
            failures
        }));
    }
    let mut failures = 0;
    for task in tasks {
        failures += task.await.unwrap_or(per_task);
    }
    failures
}

fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
}

fn print_table(rows: &[(Who, usize, Row)], memory: &Memory, config: &Config, version: &str) {
    let timing = config.timing;
    let measured = match config.rounds {
        1 => format!(
            "{:.1} s measured per row after {:.1} s warm-up",
            timing.measure.as_secs_f64(),
            timing.warmup.as_secs_f64(),
        ),
        rounds => format!(
            "{:.1} s measured per row in {rounds} interleaved rounds of {:.1} s, each after {:.1} s \
             warm-up",
            timing.measure.as_secs_f64(),
            (timing.measure / rounds).as_secs_f64(),
            timing.warmup.as_secs_f64(),
        ),
    };
    println!();
    println!(
        "redmutex compare: {} local redis-server nodes ({}), {} cores, {measured}, retry delay \
         {:.1} ms (contended), expiry {} s",
        NODES,
        version,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        timing.retry_delay.as_secs_f64() * 1000.0,
        EXPIRY.as_secs(),
    );
    println!(
        "latency = one lock+unlock cycle (retries included); CPU = process user+sys time (all \
         threads) per cycle; cores = CPU time / wall time; sys = kernel share of the CPU time; \
         ratios are to the floor named in `vs`"
    );
    println!();
    println!(
        "{:<14} {:<14} {:<18} {:>9} {:>8} {:>8} {:>8} {:>5} {:>4} | {:<14} {:>5} {:>5} {:>5} {:>5} | {:>5}",
        "runtime",
        "workload",
        "contender",
        "cycles/s",
        "p50 us",
        "p99 us",
        "CPU us",
        "cores",
        "sys",
        "vs",
        "thr x",
        "p50 x",
        "p99 x",
        "CPU x",
        "fails",
    );
    let mut last_group = None;
    for (_, _, row) in rows {
        let group = (row.runtime.clone(), row.workload.clone());
        if last_group.as_ref().is_some_and(|g| *g != group) {
            println!();
        }
        last_group = Some(group);
        if let Some(error) = &row.error {
            println!(
                "{:<14} {:<14} {:<18} no result: {error}",
                row.runtime, row.workload, row.contender
            );
            continue;
        }
        println!(
            "{:<14} {:<14} {:<18} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>5.2} {:>3.0}% | {:<14} {:>5} {:>5} {:>5} {:>5} | {:>5}",
            row.runtime,
            row.workload,
            row.contender,
            row.cycles_per_s,
            row.p50_us,
            row.p99_us,
            row.cpu_us_per_cycle,
            row.cpu_cores,
            row.cpu_sys_share * 100.0,
            row.vs.as_deref().unwrap_or("-"),
            ratio(row.throughput_ratio),
            ratio(row.p50_ratio),
            ratio(row.p99_ratio),
            ratio(row.cpu_ratio),
            row.lock_failures + row.unlock_failures,
        );
    }

    println!();
    println!(
        "contended-8: hand-off = one holder starting its unlock -> the next holder's lock returning; \
         spread = acquisitions per task in one round"
    );
    println!(
        "{:<14} {:<18} {:>12} {:>12} {:>9} {:>9} {:>7} {:>10} {:>10}",
        "runtime",
        "contender",
        "handoff p50",
        "handoff p99",
        "task min",
        "task max",
        "CV",
        "lock fails",
        "violations",
    );
    for (_, _, row) in rows
        .iter()
        .filter(|(_, _, r)| r.workload == Workload::Contended8.name() && r.error.is_none())
    {
        println!(
            "{:<14} {:<18} {:>9.1} us {:>9.1} us {:>9} {:>9} {:>7.3} {:>10} {:>10}",
            row.runtime,
            row.contender,
            row.handoff_p50_us.unwrap_or(0.0),
            row.handoff_p99_us.unwrap_or(0.0),
            row.task_min,
            row.task_max,
            row.task_cv,
            row.lock_failures,
            row.violations,
        );
    }

    println!();
    match &memory.error {
        Some(error) => println!("memory: no result: {error}"),
        None => {
            println!(
                "memory: {} redmutex locks held at once (distinct names, expiry {} s): RSS {} -> {} KiB, \
                 {:.0} bytes per held lock (target < 1024); acquired in {:.1} s, released in {:.1} s \
                 ({} release failures)",
                memory.locks,
                MEMORY_EXPIRY.as_secs(),
                memory.rss_before_kib,
                memory.rss_after_kib,
                memory.bytes_per_lock(),
                memory.acquire_secs,
                memory.release_secs,
                memory.release_failures,
            );
            println!(
                "connections per node from this process: {:?} before connect, {:?} after one lock, \
                 {:?} with all locks held (one Redlock client)",
                memory.connections_before, memory.connections_idle, memory.connections_held,
            );
        }
    }

    println!();
    print_targets(rows);
}

/// The targets, as ratios from this run (reported, not asserted).
fn print_targets(rows: &[(Who, usize, Row)]) {
    let find = |who: Who, runtime: &str, workload: Workload| {
        rows.iter()
            .find(|(w, _, r)| *w == who && r.runtime == runtime && r.workload == workload.name())
            .map(|(_, _, r)| r)
            .filter(|r| r.error.is_none())
    };
    println!("targets (this run):");
    for flavor in Flavor::ALL {
        let rt = flavor.name();
        let mut line = format!("  {rt:<14}");
        let u1 = Workload::Uncontended1;
        let u32_ = Workload::Uncontended32;
        for (label, who, workload, pick) in [
            (
                "1-task p50 default/wait-all",
                Who::RedmutexDefault,
                u1,
                "p50",
            ),
            (
                "1-task p50 fail-fast/quorum",
                Who::RedmutexFailFast,
                u1,
                "p50",
            ),
            (
                "32-task thr default/wait-all",
                Who::RedmutexDefault,
                u32_,
                "thr",
            ),
            (
                "32-task thr fail-fast/quorum",
                Who::RedmutexFailFast,
                u32_,
                "thr",
            ),
            (
                "32-task CPU default/wait-all",
                Who::RedmutexDefault,
                u32_,
                "cpu",
            ),
            (
                "32-task CPU fail-fast/quorum",
                Who::RedmutexFailFast,
                u32_,
                "cpu",
            ),
        ] {
            let (value, spread) = find(who, rt, workload).map_or((None, None), |r| {
                let rounds = r.round_ratios;
                match pick {
                    "p50" => (r.p50_ratio, rounds.map(|s| s.p50)),
                    "thr" => (r.throughput_ratio, rounds.map(|s| s.throughput)),
                    _ => (r.cpu_ratio, rounds.map(|s| s.cpu)),
                }
            });
            let goal = match pick {
                "p50" => "<= 1.05",
                "thr" => ">= 0.95",
                _ => "<= 1.10",
            };
            let rounds = spread.map_or_else(String::new, |s| {
                format!(
                    "; rounds: median {:.2}, {:.2}-{:.2}",
                    s.median, s.min, s.max
                )
            });
            line.push_str(&format!(
                "\n    {label:<30} {:>5} (goal {goal}{rounds})",
                ratio(value)
            ));
        }
        let semaphore = find(Who::RedmutexSemaphore, rt, u1);
        let spread = semaphore
            .and_then(|r| r.round_ratios)
            .map_or_else(String::new, |r| {
                format!(
                    "; rounds: median {:.2}, {:.2}-{:.2}",
                    r.p50.median, r.p50.min, r.p50.max
                )
            });
        line.push_str(&format!(
            "\n    {:<30} {:>5} (goal <= 1.15{spread})",
            "1-task p50 semaphore/default",
            ratio(semaphore.and_then(|r| r.p50_ratio))
        ));
        for (label, who, workload, pick, goal) in [
            (
                "1-task p50 names-1/mutex",
                Who::RedmutexNames(1),
                u1,
                "p50",
                "-",
            ),
            (
                "1-task p50 names-2/mutex",
                Who::RedmutexNames(2),
                u1,
                "p50",
                "-",
            ),
            (
                "1-task p50 names-8/mutex",
                Who::RedmutexNames(8),
                u1,
                "p50",
                "<= 1.10",
            ),
            (
                "1-task p50 names-32/mutex",
                Who::RedmutexNames(32),
                u1,
                "p50",
                "-",
            ),
            (
                "32-task thr names-1/mutex",
                Who::RedmutexNames(1),
                u32_,
                "thr",
                "-",
            ),
            (
                "32-task thr names-2/mutex",
                Who::RedmutexNames(2),
                u32_,
                "thr",
                "-",
            ),
            (
                "32-task thr names-8/mutex",
                Who::RedmutexNames(8),
                u32_,
                "thr",
                "-",
            ),
            (
                "32-task thr names-32/mutex",
                Who::RedmutexNames(32),
                u32_,
                "thr",
                "-",
            ),
            (
                "1-task p50 rw-read/mutex",
                Who::RedmutexRead,
                u1,
                "p50",
                "<= 1.15",
            ),
            (
                "1-task p50 rw-write/mutex",
                Who::RedmutexWrite,
                u1,
                "p50",
                "<= 1.15",
            ),
            (
                "1-task p50 cluster/standalone",
                Who::MemberCluster(1),
                u1,
                "p50",
                "<= 1.15",
            ),
            (
                "32-task thr cluster/standalone",
                Who::MemberCluster(1),
                u32_,
                "thr",
                "-",
            ),
            (
                "1-task p50 3 clusters/3 stand.",
                Who::MemberCluster(3),
                u1,
                "p50",
                "-",
            ),
            (
                "32-task thr 3 clusters/3 stand.",
                Who::MemberCluster(3),
                u32_,
                "thr",
                "-",
            ),
        ] {
            let (value, spread) = find(who, rt, workload).map_or((None, None), |r| {
                let rounds = r.round_ratios;
                match pick {
                    "p50" => (r.p50_ratio, rounds.map(|s| s.p50)),
                    _ => (r.throughput_ratio, rounds.map(|s| s.throughput)),
                }
            });
            let rounds = spread.map_or_else(String::new, |s| {
                format!(
                    "; rounds: median {:.2}, {:.2}-{:.2}",
                    s.median, s.min, s.max
                )
            });
            line.push_str(&format!(
                "\n    {label:<30} {:>5} (goal {goal}{rounds})",
                ratio(value)
            ));
        }
        let c8 = Workload::Contended8;
        let readers = find(Who::RedmutexRead, rt, c8);
        let writers = find(Who::RedmutexWrite, rt, c8);
        let versus = readers
            .zip(writers)
            .and_then(|(r, w)| (w.cycles_per_s > 0.0).then(|| r.cycles_per_s / w.cycles_per_s));
        line.push_str(&format!(
            "\n    {:<30} {:>5} (goal >= 6)",
            "8-task thr readers/writers",
            ratio(versus)
        ));
        let ff = find(Who::RedmutexFailFast, rt, u32_);
        let rs = find(Who::Rslock, rt, u32_);
        let versus = ff.zip(rs).and_then(|(ff, rs)| {
            (rs.cycles_per_s > 0.0).then(|| ff.cycles_per_s / rs.cycles_per_s)
        });
        line.push_str(&format!(
            "\n    {:<30} {:>5} (goal >= 1.25)",
            "32-task thr fail-fast/rslock",
            ratio(versus)
        ));
        if Who::RedmutexTls.built() {
            for (label, workload, pick) in [
                ("1-task p50 TLS/TCP", u1, "p50"),
                ("32-task thr TLS/TCP", u32_, "thr"),
                ("32-task CPU TLS/TCP", u32_, "cpu"),
            ] {
                let row = find(Who::RedmutexTls, rt, workload);
                let (value, spread) = row.map_or((None, None), |r| {
                    let rounds = r.round_ratios;
                    match pick {
                        "p50" => (r.p50_ratio, rounds.map(|s| s.p50)),
                        "thr" => (r.throughput_ratio, rounds.map(|s| s.throughput)),
                        _ => (r.cpu_ratio, rounds.map(|s| s.cpu)),
                    }
                });
                let rounds = spread.map_or_else(String::new, |s| {
                    format!("rounds: median {:.2}, {:.2}-{:.2}", s.median, s.min, s.max)
                });
                line.push_str(&format!(
                    "\n    {label:<30} {:>5} (no goal; {rounds})",
                    ratio(value)
                ));
            }
        }
        println!("{line}");
    }
}

/// `redis_version` from `INFO server` of node 0.
fn redis_version(cluster: &redmutex_testenv::Cluster) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut cluster.node(0).connection())
        .unwrap_or_default();
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map_or_else(|| "redis ?".into(), |v| format!("redis {}", v.trim()))
}

fn append_lines(path: &Path, lines: &[String]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    for line in lines {
        writeln!(file, "{line}")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The zone rows (issue 25): the 5 nodes behind delay proxies, as if they sat in other zones or
// regions. Opt-in: `BENCH_ONLY=zones` (or e.g. `BENCH_ONLY='zones,current'`).

/// Where the nodes sit: each node's round trip added by its proxy (half of it each way).
const ZONES: [(&str, [f64; NODES]); 2] = [
    ("zones-mixed", [0.2, 0.2, 1.0, 1.0, 10.0]),
    ("zones-spread", [1.0, 2.0, 3.0, 4.0, 5.0]),
];

/// The zone rows' workloads: latency at 1 task, throughput at 8 and 32.
const ZONE_WORKLOADS: [Workload; 3] = [
    Workload::Uncontended1,
    Workload::Uncontended8,
    Workload::Uncontended32,
];

/// The zone rows' contenders, in run order before rotation.
const ZONE_WHO: [Who; 5] = [
    Who::FloorQuorum,
    Who::RedmutexFailFast,
    Who::RedmutexDefault,
    Who::FloorWaitAll,
    Who::Rslock,
];

/// Cycles of the phase table per contender and zone set.
const ZONE_PHASE_CYCLES: usize = 200;

/// One zone set's rows and phase timings.
struct ZoneRun {
    zones: &'static str,
    /// Per node: the round trip its proxy adds (ms), `redis-cli --latency`'s summary through the
    /// proxy, PING p50 through the proxy and straight to the node (us).
    checks: Vec<(f64, String, f64, f64)>,
    rows: Vec<(Who, usize, Row)>,
    /// Per contender: p50 of lock, extend and unlock (us), or why not.
    phases: Vec<(String, Result<[f64; 3], String>)>,
}

/// Whether `BENCH_ONLY` selects any zone row, and names the section: a zone row's label ends
/// with a main table row's, so `current,uncontended-32,default` alone would select both.
fn zones_selected(config: &Config) -> bool {
    config.only.iter().any(|word| word.contains("zones"))
        && ZONES.iter().any(|(zones, _)| {
            Flavor::ALL.iter().any(|flavor| {
                ZONE_WORKLOADS.iter().any(|workload| {
                    ZONE_WHO
                        .iter()
                        .any(|who| config.selects(&zone_label(zones, *flavor, *workload, *who)))
                })
            })
        })
}

fn zone_label(zones: &str, flavor: Flavor, workload: Workload, who: Who) -> String {
    format!(
        "{zones} {} {} {}",
        flavor.name(),
        workload.name(),
        who.name()
    )
}

/// Runs the selected zone rows, a zone set at a time, in interleaved rounds like the main rows.
fn run_zones(
    config: &Config,
    cluster: &redmutex_testenv::Cluster,
    rslock: &Result<PathBuf, String>,
    run: u64,
) -> Vec<ZoneRun> {
    let rounds = config.rounds as usize;
    let round_timing = Timing {
        measure: config.timing.measure / config.rounds,
        ..config.timing
    };
    let mut runs = Vec::new();
    for (z, (zones, rtts)) in ZONES.iter().enumerate() {
        let selected = Flavor::ALL.iter().any(|&flavor| {
            ZONE_WORKLOADS.iter().any(|&workload| {
                ZONE_WHO
                    .iter()
                    .any(|&who| config.selects(&zone_label(zones, flavor, workload, who)))
            })
        });
        if !selected {
            continue;
        }
        let proxies: Result<Vec<zones::DelayProxy>, String> = rtts
            .iter()
            .enumerate()
            .map(|(node, rtt)| {
                let one_way = Duration::from_secs_f64(rtt / 2.0 / 1000.0);
                zones::DelayProxy::start(cluster.node(node).port(), one_way)
                    .map_err(|e| format!("proxy for node {node}: {e}"))
            })
            .collect();
        let proxies = match proxies {
            Ok(proxies) => proxies,
            Err(error) => {
                eprintln!("compare: {zones}: {error}");
                continue;
            }
        };
        let urls: Vec<String> = proxies.iter().map(zones::DelayProxy::url).collect();
        eprintln!("compare: {zones}: checking each proxy's round trip");
        let checks = proxies
            .iter()
            .zip(rtts)
            .enumerate()
            .map(|(node, (proxy, rtt))| {
                (
                    *rtt,
                    zones::redis_cli_latency(proxy.port(), 3),
                    ping_p50_us(&proxy.url(), 200),
                    ping_p50_us(&cluster.node(node).url(), 200),
                )
            })
            .collect();
        let mut rows = Vec::new();
        for &flavor in &Flavor::ALL {
            for (w, &workload) in ZONE_WORKLOADS.iter().enumerate() {
                let mut group: Vec<(Who, usize, Vec<Row>)> = Vec::new();
                for i in 0..ZONE_WHO.len() {
                    let who = ZONE_WHO[(i + w + z) % ZONE_WHO.len()];
                    if config.selects(&zone_label(zones, flavor, workload, who)) {
                        group.push((who, group.len(), Vec::with_capacity(rounds)));
                    }
                }
                interleave(&mut group, rounds, |who, seq, round| {
                    eprintln!(
                        "compare: round {}/{rounds} {}",
                        round + 1,
                        zone_label(zones, flavor, workload, who)
                    );
                    let prefix = format!("bench:{run}:{zones}:{w}:{seq}:{round}");
                    let mut row = run_contender(
                        who,
                        flavor,
                        workload,
                        round_timing,
                        &urls,
                        &[],
                        None,
                        &prefix,
                        rslock,
                    );
                    row.workload = format!("{zones} {}", workload.name());
                    row
                });
                // Each row's spread of ratios is against the quorum floor, round by round.
                let base: Vec<Row> = group
                    .iter()
                    .find(|(who, _, _)| *who == Who::FloorQuorum)
                    .map(|(_, _, done)| done.clone())
                    .unwrap_or_default();
                for (who, seq, done) in group {
                    let mut row = Row::merge(&done);
                    row.round_ratios = RoundRatios::of(&done, &base);
                    rows.push((who, seq, row));
                }
            }
        }
        let phases = if !rows.is_empty() {
            eprintln!("compare: {zones}: lock, extend and unlock, timed apart");
            zone_phases(&urls)
        } else {
            Vec::new()
        };
        runs.push(ZoneRun {
            zones,
            checks,
            rows,
            phases,
        });
    }
    runs
}

/// Runs every contender of `group` once per round, in an order one rotation further each round
/// so that none always runs first, and appends each run's row to the contender's list. `run` gets
/// the contender, its sequence number and the round.
fn interleave(
    group: &mut [(Who, usize, Vec<Row>)],
    rounds: usize,
    mut run: impl FnMut(Who, usize, usize) -> Row,
) {
    let size = group.len();
    for round in 0..rounds {
        for i in 0..size {
            let (who, seq, done) = &mut group[(i + round) % size];
            done.push(run(*who, *seq, round));
        }
    }
}

/// PING p50 through `url` over `count` round trips, in microseconds (0 if it failed).
fn ping_p50_us(url: &str, count: usize) -> f64 {
    let measure = || -> RedisResult<f64> {
        let mut con = redis::Client::open(url)?.get_connection()?;
        let mut took = Vec::with_capacity(count);
        for _ in 0..count {
            let at = Instant::now();
            redis::cmd("PING").exec(&mut con)?;
            took.push(at.elapsed().as_nanos() as u64);
        }
        took.sort_unstable();
        Ok(harness::percentile(&took, 0.5).unwrap_or(0) as f64 / 1000.0)
    };
    measure().unwrap_or(0.0)
}

/// Lock, extend and unlock timed apart (1 task, current-thread), for redmutex default and
/// fail-fast, and one round trip to every node (PING) returning at the quorum and at the last
/// reply: what each phase costs against a round trip.
fn zone_phases(urls: &[String]) -> Vec<(String, Result<[f64; 3], String>)> {
    let runtime = match Flavor::Current.runtime() {
        Ok(runtime) => runtime,
        Err(error) => return vec![("runtime".into(), Err(error))],
    };
    runtime.block_on(async {
        let mut out = Vec::new();
        out.push(("round trip quorum/all".to_owned(), round_trips(urls).await));
        for (label, fail_fast) in [
            ("redmutex default", None),
            ("redmutex fail-fast", Some(true)),
        ] {
            out.push((label.to_owned(), phases(urls, fail_fast).await));
        }
        out
    })
}

/// p50 of one PING fan-out until the quorum's replies, and until every reply; third value 0.
async fn round_trips(urls: &[String]) -> Result<[f64; 3], String> {
    let (nodes, _) = floor_connections(urls).await?;
    let (mut quorum, mut all) = (Vec::new(), Vec::new());
    for _ in 0..ZONE_PHASE_CYCLES {
        let at = Instant::now();
        let mut calls: FuturesUnordered<_> = nodes
            .iter()
            .map(|node| {
                let mut node = node.clone();
                async move { node.send_packed_command(&redis::cmd("PING")).await }
            })
            .collect();
        let mut replies = 0;
        while let Some(reply) = calls.next().await {
            reply.map_err(|e| e.to_string())?;
            replies += 1;
            if replies == QUORUM {
                quorum.push(at.elapsed().as_nanos() as u64);
            }
        }
        all.push(at.elapsed().as_nanos() as u64);
    }
    Ok([p50_us(&mut quorum), p50_us(&mut all), 0.0])
}

async fn phases(urls: &[String], fail_fast: Option<bool>) -> Result<[f64; 3], String> {
    let redlock = Redlock::connect(urls).await.map_err(|e| e.to_string())?;
    let mut mutex = redlock.new_mutex("bench:zones:phases");
    if let Some(fail_fast) = fail_fast {
        mutex = mutex.with_fail_fast(fail_fast);
    }
    let mut took: [Vec<u64>; 3] = Default::default();
    for cycle in 0..ZONE_PHASE_CYCLES + 10 {
        let t0 = Instant::now();
        let lock = mutex.lock().await.map_err(|e| format!("lock: {e}"))?;
        let t1 = Instant::now();
        lock.extend().await.map_err(|e| format!("extend: {e}"))?;
        let t2 = Instant::now();
        lock.unlock().await.map_err(|e| format!("unlock: {e}"))?;
        let t3 = Instant::now();
        // The first cycles warm the connections and the script caches.
        if cycle >= 10 {
            for (phase, (from, to)) in [(t0, t1), (t1, t2), (t2, t3)].into_iter().enumerate() {
                took[phase].push((to - from).as_nanos() as u64);
            }
        }
    }
    let [lock, extend, unlock] = &mut took;
    Ok([p50_us(lock), p50_us(extend), p50_us(unlock)])
}

fn p50_us(values: &mut [u64]) -> f64 {
    values.sort_unstable();
    harness::percentile(values, 0.5).unwrap_or(0) as f64 / 1000.0
}

/// The zone tables: each row against the quorum floor and the wait-all floor of its zone set,
/// runtime and workload; then the phases.
fn print_zones(runs: &[ZoneRun]) {
    for zone in runs {
        println!();
        println!(
            "{}: 5 nodes behind delay proxies adding round trips of {} ms",
            zone.zones,
            zone.checks
                .iter()
                .map(|(rtt, _, _, _)| format!("{rtt}"))
                .collect::<Vec<_>>()
                .join("/")
        );
        for (node, (rtt, cli, ping, direct)) in zone.checks.iter().enumerate() {
            println!(
                "  node {node}: +{rtt} ms; PING p50 {ping:.0} us through the proxy, {direct:.0} us \
                 straight; redis-cli --latency through the proxy (min max avg ms, samples): {cli}"
            );
        }
        println!(
            "{:<14} {:<14} {:<18} {:>9} {:>8} {:>8} | {:>7} {:>7} {:>7} {:>13} | {:>7} {:>7} | {:>5}",
            "runtime",
            "workload",
            "contender",
            "cycles/s",
            "p50 us",
            "p99 us",
            "p50 xQ",
            "p99 xQ",
            "thr xQ",
            "p50 xQ rounds",
            "p50 xW",
            "thr xRs",
            "fails"
        );
        let find = |who: Who, row: &Row| {
            zone.rows
                .iter()
                .find(|(w, _, r)| {
                    *w == who && r.runtime == row.runtime && r.workload == row.workload
                })
                .map(|(_, _, r)| r)
                .filter(|r| r.error.is_none())
        };
        let mut last = None;
        let mut sorted: Vec<&(Who, usize, Row)> = zone.rows.iter().collect();
        sorted.sort_by_key(|(who, _, row)| {
            (
                Flavor::ALL.iter().position(|f| f.name() == row.runtime),
                ZONE_WORKLOADS
                    .iter()
                    .position(|w| row.workload.ends_with(w.name())),
                ZONE_WHO.iter().position(|w| w == who),
            )
        });
        for (_, _, row) in sorted {
            let group = (row.runtime.clone(), row.workload.clone());
            if last.as_ref().is_some_and(|g| *g != group) {
                println!();
            }
            last = Some(group);
            let workload = row.workload.rsplit(' ').next().unwrap_or("");
            if let Some(error) = &row.error {
                println!(
                    "{:<14} {:<14} {:<18} no result: {error}",
                    row.runtime, workload, row.contender
                );
                continue;
            }
            let of = |base: Option<&Row>, value: fn(&Row) -> f64| {
                base.and_then(|b| (value(b) > 0.0).then(|| value(row) / value(b)))
            };
            let quorum = find(Who::FloorQuorum, row);
            let wait_all = find(Who::FloorWaitAll, row);
            let rslock = find(Who::Rslock, row);
            let rounds = row.round_ratios.map_or_else(
                || "-".to_owned(),
                |r| format!("{:.2}-{:.2}", r.p50.min, r.p50.max),
            );
            println!(
                "{:<14} {:<14} {:<18} {:>9.0} {:>8.1} {:>8.1} | {:>7} {:>7} {:>7} {:>13} | {:>7} {:>7} | {:>5}",
                row.runtime,
                workload,
                row.contender,
                row.cycles_per_s,
                row.p50_us,
                row.p99_us,
                ratio(of(quorum, |r| r.p50_us)),
                ratio(of(quorum, |r| r.p99_us)),
                ratio(of(quorum, |r| r.cycles_per_s)),
                rounds,
                ratio(of(wait_all, |r| r.p50_us)),
                ratio(of(rslock, |r| r.cycles_per_s)),
                row.lock_failures + row.unlock_failures,
            );
        }
        if !zone.phases.is_empty() {
            println!();
            println!(
                "{}: one task, current-thread, p50 of each phase over {ZONE_PHASE_CYCLES} cycles",
                zone.zones
            );
            println!(
                "{:<22} {:>10} {:>10} {:>10}",
                "", "lock us", "extend us", "unlock us"
            );
            for (label, phases) in &zone.phases {
                match phases {
                    Ok([quorum, all, _]) if label.starts_with("round trip") => println!(
                        "one PING to every node: {quorum:.1} us to the quorum's replies, \
                         {all:.1} us to the last"
                    ),
                    Ok([a, b, c]) => println!("{label:<22} {a:>10.1} {b:>10.1} {c:>10.1}"),
                    Err(error) => println!("{label:<22} no result: {error}"),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The node-count rows (issue 25): N = 3, 5, 7 and 9 local nodes, each library row against its
// floor at the same N. Opt-in: `BENCH_ONLY=nodes` (or e.g. `BENCH_ONLY='nodes,current'`).

/// The node counts, on one cluster of the largest.
const NODE_COUNTS: [usize; 4] = [3, 5, 7, 9];

const NODE_WORKLOADS: [Workload; 2] = [Workload::Uncontended1, Workload::Uncontended32];

/// Each library row next to its floor, in run order before rotation.
const NODE_WHO: [Who; 4] = [
    Who::FloorWaitAll,
    Who::RedmutexDefault,
    Who::FloorQuorum,
    Who::RedmutexFailFast,
];

fn node_label(nodes: usize, flavor: Flavor, workload: Workload, who: Who) -> String {
    format!(
        "nodes-{nodes} {} {} {}",
        flavor.name(),
        workload.name(),
        who.name()
    )
}

/// Whether `BENCH_ONLY` selects any node-count row, and names the section (as `zones_selected`).
fn nodes_selected(config: &Config) -> bool {
    config.only.iter().any(|word| word.contains("nodes"))
        && NODE_COUNTS.iter().any(|&n| {
            Flavor::ALL.iter().any(|&flavor| {
                NODE_WORKLOADS.iter().any(|&workload| {
                    NODE_WHO
                        .iter()
                        .any(|&who| config.selects(&node_label(n, flavor, workload, who)))
                })
            })
        })
}

/// Runs the selected node-count rows on a cluster of its own, in interleaved rounds; each row's
/// workload reads `nodes-N <workload>`, so `add_ratios` pairs it with its floor at the same N.
fn run_node_counts(config: &Config, run: u64) -> Vec<(Who, usize, Row)> {
    let largest = NODE_COUNTS.iter().copied().max().unwrap_or(0);
    eprintln!("compare: starting {largest} nodes for the node-count rows");
    let cluster = redmutex_testenv::Cluster::start(largest);
    let all_urls = cluster.urls();
    let rounds = config.rounds as usize;
    let round_timing = Timing {
        measure: config.timing.measure / config.rounds,
        ..config.timing
    };
    let mut rows = Vec::new();
    let mut rounds_of = Vec::new();
    let mut seq = 0;
    for (k, &nodes) in NODE_COUNTS.iter().enumerate() {
        let urls = &all_urls[..nodes];
        for &flavor in &Flavor::ALL {
            for (w, &workload) in NODE_WORKLOADS.iter().enumerate() {
                let mut group: Vec<(Who, usize, Vec<Row>)> = Vec::new();
                for i in 0..NODE_WHO.len() {
                    let who = NODE_WHO[(i + w + k) % NODE_WHO.len()];
                    if config.selects(&node_label(nodes, flavor, workload, who)) {
                        seq += 1;
                        group.push((who, seq, Vec::with_capacity(rounds)));
                    }
                }
                interleave(&mut group, rounds, |who, seq, round| {
                    eprintln!(
                        "compare: round {}/{rounds} {}",
                        round + 1,
                        node_label(nodes, flavor, workload, who)
                    );
                    let prefix = format!("bench:{run}:nodes:{seq}:{round}");
                    let mut row = run_contender(
                        who,
                        flavor,
                        workload,
                        round_timing,
                        urls,
                        &[],
                        None,
                        &prefix,
                        &Err("not a node-count contender".into()),
                    );
                    row.workload = format!("nodes-{nodes} {}", workload.name());
                    row
                });
                for (who, seq, done) in group {
                    rows.push((who, seq, Row::merge(&done)));
                    rounds_of.push((seq, done));
                }
            }
        }
    }
    add_ratios(&mut rows, &rounds_of);
    rows
}

/// The node-count table: each library row against its floor at the same N.
fn print_node_counts(rows: &[(Who, usize, Row)]) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "node counts: local nodes, default vs floor wait-all and fail-fast vs floor quorum at the \
         same N (p50 x rounds: lowest-highest round ratio)"
    );
    println!(
        "{:<14} {:<22} {:<18} {:>9} {:>8} {:>8} {:>8} | {:<14} {:>5} {:>5} {:>5} {:>11} | {:>5}",
        "runtime",
        "workload",
        "contender",
        "cycles/s",
        "p50 us",
        "p99 us",
        "CPU us",
        "vs",
        "thr x",
        "p50 x",
        "CPU x",
        "p50 x rounds",
        "fails"
    );
    let mut last = None;
    for (_, _, row) in rows {
        let group = (row.runtime.clone(), row.workload.clone());
        if last.as_ref().is_some_and(|g| *g != group) {
            println!();
        }
        last = Some(group);
        if let Some(error) = &row.error {
            println!(
                "{:<14} {:<22} {:<18} no result: {error}",
                row.runtime, row.workload, row.contender
            );
            continue;
        }
        let rounds = row.round_ratios.map_or_else(
            || "-".to_owned(),
            |r| format!("{:.2}-{:.2}", r.p50.min, r.p50.max),
        );
        println!(
            "{:<14} {:<22} {:<18} {:>9.0} {:>8.1} {:>8.1} {:>8.1} | {:<14} {:>5} {:>5} {:>5} {:>11} | {:>5}",
            row.runtime,
            row.workload,
            row.contender,
            row.cycles_per_s,
            row.p50_us,
            row.p99_us,
            row.cpu_us_per_cycle,
            row.vs.as_deref().unwrap_or("-"),
            ratio(row.throughput_ratio),
            ratio(row.p50_ratio),
            ratio(row.cpu_ratio),
            rounds,
            row.lock_failures + row.unlock_failures,
        );
    }
}
